//! robots-proxy: a caching forward HTTP(S) proxy that enforces robots.txt.
//!
//! The binary is a thin shell over this library; tests and benches use it
//! directly.
pub mod check;
pub mod robots;
pub mod tls;
