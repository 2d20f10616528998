//! robots-proxy: a caching forward HTTP(S) proxy that enforces robots.txt.
//!
//! The binary is a thin shell over this library; tests and benches use it
//! directly.
//!
//! The folders are the layers, each using only those below it (checked by
//! `.ci/layering`), from the bottom: `robots` (the robots.txt engine, a
//! pure crate of its own in `crates/robots`, re-exported), `metrics` (the
//! registry each layer registers its own series in), `http`, `tls`,
//! `upstream`, `fleet`, `judge`, `admit`, `response_cache`, `ops`, `server`,
//! `proxy`, `config`, `app`, `cli`.
#![forbid(unsafe_code)]
pub(crate) mod admit;
pub(crate) mod app;
pub mod cli;
pub mod config;
pub(crate) mod fleet;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod judge;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod proxy;
pub(crate) mod response_cache;
/// The robots.txt engine (the `robots-engine` crate, `crates/robots`).
pub use robots_engine as robots;
pub(crate) mod server;
pub mod tls;
pub(crate) mod upstream;

pub use app::App;

/// What `examples/cache_memory` measures (the robots store and the gate
/// at scale) and builds them from, and the fleet's booking and rate limits
/// that the fleet tests time and check: not an interface of the crate.
#[doc(hidden)]
pub mod measure {
    pub use crate::fleet::lease::{LEASE_FOR, Leased, RENEW_EVERY};
    pub use crate::fleet::rate::Rated;
    pub use crate::fleet::robots::{Look, Take, Text};
    pub use crate::fleet::{
        Booking, Fleet, FleetSettings, OnUnavailable, ROUND_TRIP_BUCKETS_US, RedisTarget,
    };
    pub use crate::http::destination::Policy;
    pub use crate::http::origin::{Origin, Scheme};
    pub use crate::identity::Signer;
    pub use crate::identity::keys::KeyRing;
    pub use crate::judge::Gate;
    pub use crate::judge::fetch::FetchSettings;
    pub use crate::judge::store::{RobotsCache, RobotsCacheSettings};
    pub use crate::upstream::tls::client_config;
    pub use crate::upstream::{ClientSettings, build_client};
}
