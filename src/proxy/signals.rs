//! The forward phase's part in politeness: a response that says "slow
//! down" (429, 503; `crate::http::signal`) pauses its origin for every
//! agent, on this node or the whole fleet (`crate::judge::politeness`'s
//! `signals`, `crate::fleet::pauses`). The response itself goes to its
//! client as it came. Each pause made is counted
//! (`robots_proxy_origin_pauses_total`), logged, and recorded in a
//! `politeness` audit line.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use super::Proxy;
use super::pipeline::Ctx;
use crate::http::signal::{Signal, retry_after};
use crate::judge::politeness::signals::random_jitter;
use crate::ops::audit::SignalRecord;

impl Proxy {
    /// Records the signal of a response `status` with `headers` from the
    /// origin of `ctx`'s request: waited for (one Redis call in a fleet),
    /// so the next request to the origin sees the pause.
    pub(crate) async fn origin_signal(&self, ctx: &Ctx<'_>, status: u16, headers: &HeaderMap) {
        let asked = retry_after(headers, SystemTime::now());
        let origin = ctx.judgement.origin.to_string();
        let url = ctx.judgement.url();
        self.record_signal(ctx.settings, &origin, &url, status, asked)
            .await;
    }

    /// Pauses the origins whose robots.txt fetch was answered 429 or 503
    /// with `Retry-After` (the entry itself disallows all until its next
    /// try, as for any 429 or 5xx), until the proxy is dropped.
    pub async fn follow_robots_signals(self: std::sync::Arc<Self>) {
        use tokio::sync::broadcast::error::RecvError;
        let mut signals = self.gate.cache().signals();
        loop {
            match signals.recv().await {
                Ok(s) => {
                    let settings = self.settings();
                    let url = format!("{}/robots.txt", s.origin);
                    self.record_signal(&settings, &s.origin, &url, s.status, Some(s.retry_after))
                        .await;
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Records a signal `origin` gave on the response to `url`, on this
    /// node or the fleet's Redis.
    async fn record_signal(
        &self,
        settings: &super::Settings,
        origin: &str,
        url: &str,
        status: u16,
        asked: Option<Duration>,
    ) {
        let politeness = &settings.politeness;
        let signal_settings = *politeness.signal_settings();
        let signal = match &settings.fleet {
            Some(fleet) => {
                let curve = crate::fleet::pauses::Curve {
                    backoff: signal_settings.backoff,
                    backoff_max: signal_settings.backoff_max,
                    forgive: signal_settings.backoff_forgive,
                };
                let asked_secs = asked.map(|r| r.as_secs() + u64::from(r.subsec_nanos() > 0));
                match fleet
                    .record_signal(
                        origin,
                        status,
                        signal_settings.honoured(asked),
                        asked_secs,
                        curve,
                        random_jitter(),
                    )
                    .await
                {
                    Ok(signal) => signal,
                    Err(_) => {
                        // Redis unavailable: this node alone keeps the
                        // pause (its bookings fall back without Redis).
                        let signal = politeness.record_signal(origin, status, asked);
                        if let Some(s) = signal {
                            let left = s
                                .until
                                .saturating_sub(crate::http::signal::unix_ms(SystemTime::now()));
                            fleet
                                .known_pauses()
                                .learn(origin, Duration::from_millis(left), s);
                        }
                        signal
                    }
                }
            }
            None => politeness.record_signal(origin, status, asked),
        };
        if let Some(signal) = signal {
            self.paused(origin, url, &signal);
        }
    }

    /// Counts, logs and audits a pause made.
    fn paused(&self, origin: &str, url: &str, signal: &Signal) {
        self.metrics.origin_pause(signal.cause());
        tracing::info!(origin, status = signal.status, retry_after = ?signal.retry_after,
            level = signal.level, "origin paused: {}", signal.describe());
        let mut record = SignalRecord::new(origin, url, signal);
        record.node = self.audit.node();
        if self.audit.write(&record).is_err() {
            tracing::warn!(
                origin,
                "the politeness line of an origin's signal could not be written"
            );
        }
    }
}
