//! robots-proxy: a caching forward HTTP(S) proxy that enforces robots.txt.
//!
//! The binary is a thin shell over this library; tests and benches use it
//! directly.
//!
//! The folders are the layers, each using only those below it (checked by
//! `.ci/layering`), from the bottom: `robots` (pure), `http`, `tls`,
//! `upstream`, `judge`, `admit`, `response_cache`, `ops`, `server`,
//! `proxy`, `config`, `app`, `cli`.
#![forbid(unsafe_code)]
pub mod admit;
pub mod app;
pub mod cli;
pub mod config;
pub mod http;
pub mod judge;
pub mod ops;
pub mod proxy;
pub mod response_cache;
pub mod robots;
pub(crate) mod server;
pub mod tls;
pub mod upstream;

pub use app::App;
