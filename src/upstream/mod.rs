//! The upstream side: clients, connection pool and dialing towards
//! origins, and the one error type for what fails on the way.

pub mod client;
pub mod dial;
pub mod error;
pub mod pool;

pub use client::{ClientSettings, HttpClient, build_client, build_fetch_client};
pub use dial::connect_upstream;
pub use error::{ErrorKind, UpstreamError, error_chain};
pub use pool::Pool;
