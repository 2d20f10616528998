//! Operating the proxy: the admin listener, metrics and the audit log,
//! politeness made visible, reload and shutdown of the real binary, its
//! commands and configuration checks, serving threads, real crawlers
//! (Scrapy, Crawlee for Python and for JavaScript, Node's fetch) through
//! it, and the admin web view in a real headless Chromium.
//!
//! `serving_threads` counts this process's threads named after the
//! proxy's serving threads: no other test here may start an in-process
//! proxy with more than one worker (`support::test_config` sets one).

#[path = "../support/mod.rs"]
mod support;

mod accounting;
mod admin_roles;
mod audit_chain;
mod audit_log;
mod audit_pack;
mod audit_report;
mod cli_check;
mod crawlee_crawl;
mod e2e_curl;
mod node_fetch;
mod ops_proxy;
mod ops_reload;
mod politeness_visible;
mod robots_archive;
mod scrapy_crawl;
mod serving_threads;
mod web_view;
