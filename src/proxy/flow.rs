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
    /// The politeness phase: the Crawl-delay slot (its interval at least
    /// the origin's response-time floor), then a lease among the origin's
    /// requests in flight, kept in `ctx` for the forward phase. How long
    /// the request was held for its slot, or the decision that refuses
    /// it.
    pub(super) async fn politeness_and_in_flight(
        &self,
        ctx: &mut Ctx<'_>,
    ) -> Result<Duration, Decision> {
        let held = self.politeness(ctx).await?;
        let Some(in_flight) = &ctx.settings.flow.in_flight else {
            return Ok(held);
        };
        if !ctx.judgement.decision.is_allowed() {
            return Ok(held);
        }
        let origin = ctx.judgement.origin.to_string();
        let fleet = ctx.settings.fleet.as_ref();
        let _waiting = self.metrics.politeness_waiting();
        // Boxed: kept out of the request's future without a cap.
        match Box::pin(in_flight.acquire(&origin, fleet, held, ctx.fleet_spent)).await {
            Ok(mut lease) => {
                let waited = lease.waited();
                if !waited.is_zero() {
                    self.metrics.in_flight_wait(false);
                }
                lease.hold(self.metrics.in_flight_lease());
                *ctx.lease.get_mut() = Some(Box::new(lease));
                // Held for Crawl-delay, then for a place in flight.
                Ok(held + waited)
            }
            Err(NotNow::Limited(limited)) => {
                self.metrics.in_flight_wait(true);
                Err(Decision::RateLimited {
                    retry_after: limited.retry_after,
                    limit: Limit::InFlight,
                })
            }
            Err(NotNow::FleetUnavailable) => Err(Decision::RateLimited {
                retry_after: Duration::from_secs(1),
                limit: Limit::FleetUnavailable,
            }),
        }
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
        let lease = ctx.lease.lock().take();
        let Forwarded::Response(resp) = forwarded else {
            return;
        };
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
        if let Some(lease) = lease {
            use hyper::body::Body as _;
            if !resp.body().is_end_stream() {
                let taken = std::mem::replace(resp, Response::new(crate::http::body::empty_body()));
                *resp = crate::http::body::hold_until_dropped(taken, lease);
            }
        }
    }
}
