//! An origin's politeness schedule as `/explain` shows it: the interval
//! and what sets it, the next free slot, how many requests are booked
//! ahead, and the pause its own 429 or 503 made. Without a fleet, this
//! process's schedule; in a fleet, the shared one read from Redis (what
//! this node last saw of it when Redis is unavailable).

use serde_json::{Value, json};

use super::state::AdminSettings;
use crate::judge::politeness::{Key, Signal, origin_of};

/// A signal as `/explain` shows it.
fn signal_json(s: &Signal) -> Value {
    let at = |ms: u64| {
        humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string()
    };
    let now = crate::http::signal::unix_ms(std::time::SystemTime::now());
    json!({
        "status": (s.status != 0).then_some(s.status),
        "retry_after_secs": s.retry_after,
        "cause": s.cause(),
        "backoff_level": s.level,
        "given": (s.given != 0).then(|| at(s.given)),
        "until": at(s.until),
        "ends_in_secs": s.until.saturating_sub(now) as f64 / 1000.0,
    })
}

/// The `politeness` field of `/explain` for `key` (an origin and agent)
/// whose robots.txt gives `crawl_delay`; `null` when nothing holds its
/// requests back.
pub(crate) async fn politeness(
    settings: &AdminSettings,
    key: &Key,
    crawl_delay: Option<f64>,
) -> Value {
    let p = &settings.politeness;
    let origin = origin_of(key);
    // The origin's response-time floor (`latency_factor`) raises the
    // interval as it does for requests.
    let floor = settings.flow.latency_floor(origin);
    let judged_by = match floor {
        Some(f) => Some(crawl_delay.unwrap_or(0.0).max(f.as_secs_f64())),
        None => crawl_delay,
    };
    let interval = p.effective_interval(judged_by);
    // Requests to the origin in flight now, against `max_in_flight`:
    // fleet-wide from Redis in a fleet.
    let in_flight = match settings.flow.in_flight(origin) {
        None => None,
        Some((here, max)) => {
            let now = match &settings.fleet {
                Some(fleet) => fleet
                    .leases_in_flight(origin)
                    .await
                    .ok()
                    .map(|n| n as usize),
                None => Some(here),
            };
            Some(json!({ "now": now, "max": max, "fleet_wide": settings.fleet.is_some() }))
        }
    };
    let (next_in, pause, last, shared) = match &settings.fleet {
        Some(fleet) => match fleet.shared_schedule(key).await {
            Ok(s) => (Some(s.next_in), s.pause, s.last, json!("redis")),
            Err(_) => (
                p.next_slot(key).map(|(_, next)| next),
                fleet.known_pauses().current(origin),
                None,
                json!("this node's last view (Redis unavailable)"),
            ),
        },
        None => (
            p.next_slot(key).map(|(_, next)| next),
            p.pause_of(origin),
            p.last_signal(origin),
            json!("this process"),
        ),
    };
    let last = last.filter(|l| Some(*l) != pause);
    if interval.is_none()
        && pause.is_none()
        && last.is_none()
        && in_flight.is_none()
        && next_in.is_none_or(|n| n.is_zero())
    {
        return Value::Null;
    }
    let next_in = next_in.unwrap_or_default();
    let cause = match (&pause, interval) {
        (Some(s), _) => Some(s.cause()),
        (None, Some(_)) if judged_by != crawl_delay => Some("latency"),
        (None, Some(_)) => Some(p.interval_cause(crawl_delay)),
        (None, None) => None,
    };
    // Each request held has booked one interval ahead of the next.
    let queued = interval
        .filter(|i| !i.is_zero())
        .map(|i| (next_in.as_secs_f64() / i.as_secs_f64()).floor() as u64);
    json!({
        "schedule": shared,
        "interval_secs": interval.map(|i| i.as_secs_f64()),
        "next_slot_in_secs": next_in.as_secs_f64(),
        "queued": queued,
        "cause": cause,
        "pause": pause.as_ref().map(signal_json),
        "last_signal": last.as_ref().map(signal_json),
        "pause_known_here": p.known_pause(origin, settings.fleet.as_deref()).is_some(),
        "latency_floor_secs": floor.map(|f| f.as_secs_f64()),
        "in_flight": in_flight,
    })
}
