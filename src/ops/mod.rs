//! What the request path reports to: the audit log, the metrics and the
//! decisions over time the admin page charts; and
//! the process's dealings with its host (systemd, descriptor limits).

pub(crate) mod activity;
pub(crate) mod audit;
pub mod limits;
pub mod systemd;

#[cfg(test)]
mod service_tests;
