//! Enforcement through the proxy: what reaches an origin and what does
//! not, whatever a client sends (path spellings, framing, bodies, encoded
//! robots.txt files, destinations), against in-process proxies and real
//! origins (nginx, Node, Python's http.server).
//!
//! `enforce_fetch` measures the process's peak memory around a gzip bomb:
//! the load tests live in another binary (`resilience`).

#[path = "../support/mod.rs"]
mod support;

mod decision_header;
mod enforce_fetch;
mod enforce_framing;
mod enforce_paths;
mod enforce_readings;
mod request_bodies;
mod usage_preferences;
mod usage_rsl;
mod usage_signals;
