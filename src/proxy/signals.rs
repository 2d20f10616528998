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
        let politeness = &ctx.settings.politeness;
        let settings = *politeness.signal_settings();
        let asked = retry_after(headers, SystemTime::now());
        let origin = ctx.judgement.origin.to_string();
        let signal = match &ctx.settings.fleet {
            Some(fleet) => {
                let curve = crate::fleet::pauses::Curve {
                    backoff: settings.backoff,
                    backoff_max: settings.backoff_max,
                    forgive: settings.backoff_forgive,
                };
                let asked_secs = asked.map(|r| r.as_secs() + u64::from(r.subsec_nanos() > 0));
                match fleet
                    .record_signal(
                        &origin,
                        status,
                        settings.honoured(asked),
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
                        let signal = politeness.record_signal(&origin, status, asked);
                        if let Some(s) = signal {
                            let left = s
                                .until
                                .saturating_sub(crate::http::signal::unix_ms(SystemTime::now()));
                            fleet
                                .known_pauses()
                                .learn(&origin, Duration::from_millis(left), s);
                        }
                        signal
                    }
                }
            }
            None => politeness.record_signal(&origin, status, asked),
        };
        if let Some(signal) = signal {
            self.paused(ctx, &origin, &signal);
        }
    }

    /// Counts, logs and audits a pause made.
    fn paused(&self, ctx: &Ctx<'_>, origin: &str, signal: &Signal) {
        self.metrics.origin_pause(signal.cause());
        tracing::info!(origin, status = signal.status, retry_after = ?signal.retry_after,
            level = signal.level, "origin paused: {}", signal.describe());
        let url = ctx.judgement.url();
        let mut record = SignalRecord::new(origin, &url, signal);
        record.node = self.audit.node();
        if self.audit.write(&record).is_err() {
            tracing::warn!(
                origin,
                "the politeness line of an origin's signal could not be written"
            );
        }
    }
}
