//! robots-proxy: a caching forward HTTP(S) proxy that enforces robots.txt.
//!
//! The binary is a thin shell over this library; tests and benches use it
//! directly.
#![forbid(unsafe_code)]
pub mod access;
pub(crate) mod admin;
pub mod app;
pub(crate) mod audit;
pub(crate) mod body;
pub mod cache;
pub mod check;
pub mod config;
pub mod fetch;
pub mod fetch_budget;
pub mod gate;
pub(crate) mod headers;
pub mod limits;
pub(crate) mod listen;
pub mod metrics;
pub mod net;
pub mod origin;
pub mod politeness;
pub mod proxy;
pub mod robots;
pub mod robots_cache;
pub mod systemd;
pub mod tls;
pub mod upstream;
