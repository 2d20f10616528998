//! What a client can make the proxy spend on authentication (Argon2 runs
//! at once and per address: [`AuthLimits`]), and the per-user request
//! quota (`max_rps`, GCRA through governor). In a fleet both are taken
//! from allowances on Redis instead ([`crate::fleet::rate`]), the same
//! GCRA over every node.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use argon2::Block;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::{AuthError, AuthOutcome};
use crate::fleet::Fleet;
use crate::fleet::Unavailable;
use crate::fleet::rate::Rated;

/// Bounds on the work unauthenticated clients can cause: Argon2 needs
/// tens of MiB and milliseconds per verification, so a flood of wrong
/// passwords must neither run many at once nor many per address.
pub struct AuthLimits {
    /// Verifications running at once (one per CPU).
    pub(super) running: Arc<tokio::sync::Semaphore>,
    /// Verifications per client address, an IPv6 one by its /64 (first use
    /// of a credential, wrong passwords, unknown users; cached credentials
    /// cost none).
    per_client: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// One log line per address and window.
    logged: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_minute: u32,
    /// The per-address quota, for the fleet's allowance on Redis.
    quota: Option<Quota>,
    clock: DefaultClock,
    /// Argon2 working memory, reused: at most one buffer per running
    /// verification. (Allocated per verification, glibc kept every 19 MiB
    /// buffer: its dynamic mmap threshold moves such blocks to the heap,
    /// where the aligned allocation is not reused.)
    memory: parking_lot::Mutex<Vec<Vec<Block>>>,
}

impl AuthLimits {
    /// `per_minute` verifications per client address (a burst of as many);
    /// 0 turns the per-address limit off.
    pub fn new(per_minute: u32) -> AuthLimits {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let quota = NonZeroU32::new(per_minute).map(Quota::per_minute);
        let (per_client, logged) = match quota {
            Some(q) => (
                Some(RateLimiter::keyed(q)),
                Some(RateLimiter::keyed(Quota::per_minute(NonZeroU32::MIN))),
            ),
            None => (None, None),
        };
        AuthLimits {
            running: Arc::new(tokio::sync::Semaphore::new(cpus)),
            per_client,
            logged,
            per_minute,
            quota,
            clock: DefaultClock::default(),
            memory: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// A working-memory buffer for one verification (empty when new).
    pub(super) fn take_memory(&self) -> Vec<Block> {
        self.memory.lock().pop().unwrap_or_default()
    }

    pub(super) fn give_memory(&self, buffer: Vec<Block>) {
        self.memory.lock().push(buffer);
    }

    /// The per-address limit this was built with.
    pub(crate) fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one verification from `client`'s allowance, or says how long
    /// to wait. Keeps the per-address state bounded by forgetting
    /// addresses whose allowance is whole again.
    pub(super) fn take(&self, client: IpAddr) -> Result<(), AuthOutcome> {
        let Some(limiter) = &self.per_client else {
            return Ok(());
        };
        if limiter.len() > 4096 {
            limiter.retain_recent();
            if let Some(l) = &self.logged {
                l.retain_recent();
            }
        }
        let client = crate::http::destination::client_key(client);
        limiter
            .check_key(&client)
            .map_err(|not_until| AuthOutcome::Throttled {
                retry_after: not_until.wait_time_from(self.clock.now()),
                first: self.first_refusal(client),
            })
    }

    /// Like [`AuthLimits::take`], from the address's allowance shared by
    /// the fleet. When Redis is unavailable the node's own allowance
    /// applies, whatever `on_unavailable` says: `refuse` is for state that
    /// is an origin's (its Crawl-delay), and refusing every password
    /// because Redis is down would lock every user out.
    pub(super) async fn take_in_fleet(
        &self,
        client: IpAddr,
        fleet: &Fleet,
    ) -> Result<(), AuthOutcome> {
        let Some(quota) = self.quota else {
            return Ok(());
        };
        let client = crate::http::destination::client_key(client);
        let shared = fleet
            .admit_rate(
                Rated::Client(client),
                quota.replenish_interval(),
                quota.burst_size().get(),
            )
            .await;
        match shared {
            Ok(Ok(())) => Ok(()),
            Ok(Err(retry_after)) => {
                // Only refusals reach the log limiter here: keep it bounded.
                if let Some(l) = &self.logged
                    && l.len() > 4096
                {
                    l.retain_recent();
                }
                Err(AuthOutcome::Throttled {
                    retry_after,
                    first: self.first_refusal(client),
                })
            }
            Err(Unavailable) => {
                fleet.fell_back();
                self.take(client)
            }
        }
    }

    /// Whether this is `client`'s first refusal in its window (logged once
    /// per node and window).
    fn first_refusal(&self, client: IpAddr) -> bool {
        self.logged
            .as_ref()
            .is_some_and(|l| l.check_key(&client).is_ok())
    }
}

impl Default for AuthLimits {
    fn default() -> Self {
        AuthLimits::new(30)
    }
}

/// The governor quota for `max_rps`: one request every `1/rps` seconds,
/// with a burst of one second's worth.
pub(super) fn user_quota(user: &str, rps: f64) -> Result<Quota, AuthError> {
    let bad = || AuthError::BadRate {
        user: user.to_string(),
        value: rps,
    };
    if !(rps.is_finite() && rps > 0.0) {
        return Err(bad());
    }
    let period = Duration::try_from_secs_f64(1.0 / rps).map_err(|_| bad())?;
    let burst =
        NonZeroU32::new(rps.ceil().min(f64::from(u32::MAX)) as u32).unwrap_or(NonZeroU32::MIN);
    Ok(Quota::with_period(period)
        .ok_or_else(bad)?
        .allow_burst(burst))
}
