//! Forwarding: plain HTTP, intercepted and blind HTTPS, tunnels,
//! WebSockets, `Via`, the response cache, the answers the proxy makes
//! itself, and the TLS building blocks of interception.

#[path = "../support/mod.rs"]
mod support;

mod blind_plain_tunnel;
mod cache_e2e;
mod identity;
mod own_answers;
mod payments;
mod proxy_http;
mod proxy_https;
mod tls_intercept;
mod tunnel_streams;
mod via;
mod websocket;
