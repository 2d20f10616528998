//! The upstream side: clients, connection pool and dialing towards
//! origins, and the one error type for what fails on the way.

pub(crate) mod client;
pub(crate) mod dial;
pub(crate) mod error;
pub(crate) mod guarded;
mod h2;
pub(crate) mod informational;
pub(crate) mod pool;
mod stream;
pub mod tls;
pub(crate) mod wire;

pub use client::{ClientSettings, HttpClient, build_client, build_fetch_client};
pub(crate) use dial::connect_upstream;
pub use error::{ErrorKind, UpstreamError, error_chain};
pub(crate) use pool::{Pool, set_serving_thread};

#[cfg(test)]
mod tls_tests;
