//! The politeness phase's limits besides Crawl-delay: the origin's
//! response time (`politeness.latency_factor`), applied as a floor of the
//! Crawl-delay interval, and its requests in flight
//! (`politeness.max_in_flight`), a lease taken after the Crawl-delay slot
//! and held until the response body has been sent or dropped. Both off,
//! a request costs a branch each here and no Redis call.

use std::time::Duration;

use http::Response;

use super::Proxy;
use super::phases::Forwarded;
use super::pipeline::Ctx;
use crate::judge::politeness::NotNow;
use crate::judge::{Decision, Limit};

impl Proxy {
    /// The politeness phase: with `max_in_flight`, a lease among the
    /// origin's requests in flight first, then the Crawl-delay slot (its
    /// interval at least the origin's response-time floor); the lease is
    /// kept in `ctx` for the forward phase. How long the request was held
    /// (for both), or the decision that refuses it.
    ///
    /// The lease comes first so that what is sent keeps both the cap and
    /// the interval without wasting slots: a request that took its slot
    /// first and then waited for a place could go right before one booked
    /// after it (closer than the interval), or would have to book again,
    /// leaving its slot unused while the origin is full. Holding a place
    /// while waiting for the slot counts a request a little early, the
    /// polite direction; with both limits binding the origin still gets
    /// as much as either allows.
    pub(super) async fn politeness_and_in_flight(
        &self,
        ctx: &mut Ctx<'_>,
    ) -> Result<Duration, Decision> {
        let Some(in_flight) = &ctx.settings.flow.in_flight else {
            return self.politeness_with_cause(ctx).await;
        };
        if !ctx.judgement.decision.is_allowed() {
            return Ok(Duration::ZERO);
        }
        let origin = ctx.judgement.origin.to_string();
        let fleet = ctx.settings.fleet.as_ref();
        let waiting = self.metrics.politeness_waiting();
        // Boxed: kept out of the request's future without a cap.
        let acquired =
            Box::pin(in_flight.acquire(&origin, fleet, Duration::ZERO, ctx.fleet_spent)).await;
        drop(waiting);
        let mut lease = match acquired {
            Ok(lease) => lease,
            Err(NotNow::Limited(limited) | NotNow::Paused(limited, _)) => {
                self.metrics.in_flight_wait(true);
                ctx.politeness_cause = Some("max_in_flight");
                return Err(Decision::RateLimited {
                    retry_after: limited.retry_after,
                    limit: Limit::InFlight,
                });
            }
            Err(NotNow::FleetUnavailable) => {
                return Err(Decision::RateLimited {
                    retry_after: Duration::from_secs(1),
                    limit: Limit::FleetUnavailable,
                });
            }
        };
        let waited = lease.waited();
        if !waited.is_zero() {
            self.metrics.in_flight_wait(false);
        }
        lease.hold(self.metrics.in_flight_lease());
        // Refused its slot: the lease is given back as it is dropped.
        let held = self.politeness_with_cause(ctx).await?;
        *ctx.lease.get_mut() = Some(Box::new(lease));
        Ok(waited + held)
    }

    /// [`Proxy::politeness`], its cause kept in `ctx` for the audit line.
    async fn politeness_with_cause(&self, ctx: &mut Ctx<'_>) -> Result<Duration, Decision> {
        let (acquired, cause) = self.politeness(ctx).await;
        ctx.politeness_cause = cause;
        acquired
    }

    /// The request's Crawl-delay (seconds) raised to its origin's
    /// response-time floor (`None`: neither).
    pub(super) fn crawl_delay_with_latency(ctx: &Ctx<'_>) -> Option<f64> {
        let crawl_delay = ctx.judgement.crawl_delay;
        let Some(latency) = &ctx.settings.flow.latency else {
            return crawl_delay;
        };
        match latency.floor(&ctx.judgement.origin.to_string()) {
            Some(floor) => Some(crawl_delay.unwrap_or(0.0).max(floor.as_secs_f64())),
            None => crawl_delay,
        }
    }

    /// What the forward phase does with the origin's response head: its
    /// time to first byte (`took`) recorded for the response-time floor
    /// (in a fleet, on Redis, by a task of its own after the answer, and
    /// the fleet's median kept; this node's own samples while Redis is
    /// unavailable), and the request's lease handed to the response body,
    /// given back when the body ends or is dropped (at once for a
    /// response without a body, and for the proxy's own responses).
    pub(super) fn after_response(&self, ctx: &Ctx<'_>, forwarded: &mut Forwarded, took: Duration) {
        self.observe_response_time(ctx, forwarded, took);
        Self::hand_lease_to_body(ctx, forwarded);
    }

    /// The response's time to first byte recorded for the response-time
    /// floor (a proxy-made failure records nothing).
    pub(super) fn observe_response_time(
        &self,
        ctx: &Ctx<'_>,
        forwarded: &Forwarded,
        took: Duration,
    ) {
        if !matches!(forwarded, Forwarded::Response(_)) {
            return;
        }
        if let Some(latency) = &ctx.settings.flow.latency {
            let origin = ctx.judgement.origin.to_string();
            match &ctx.settings.fleet {
                None => latency.observe(&origin, took),
                Some(fleet) => {
                    let (fleet, latency) = (fleet.clone(), latency.clone());
                    tokio::spawn(async move {
                        match fleet.record_ttfb(&origin, took).await {
                            Ok(median) => latency.set_median(&origin, median),
                            // Redis unavailable: this node's own samples.
                            Err(_) => latency.observe(&origin, took),
                        }
                    });
                }
            }
        }
    }

    /// The request's lease handed to the response body (given back when
    /// the body ends or is dropped; at once without a body, or for a
    /// response the proxy made).
    pub(super) fn hand_lease_to_body(ctx: &Ctx<'_>, forwarded: &mut Forwarded) {
        let lease = ctx.lease.lock().take();
        let Forwarded::Response(resp) = forwarded else {
            return;
        };
        if let Some(lease) = lease {
            use hyper::body::Body as _;
            if !resp.body().is_end_stream() {
                let taken = std::mem::replace(resp, Response::new(crate::http::body::empty_body()));
                *resp = crate::http::body::hold_until_dropped(taken, lease);
            }
        }
    }
}
