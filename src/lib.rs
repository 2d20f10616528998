//! robots-proxy: a caching forward HTTP(S) proxy that enforces robots.txt.
//!
//! The binary is a thin shell over this library; tests and benches use it
//! directly.
pub mod access;
pub mod check;
pub mod metrics;
pub mod politeness;
pub mod robots;
pub mod systemd;
