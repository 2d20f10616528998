//! Building a running proxy from a [`Config`]: the wiring `main` and the
//! integration tests share.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::audit::AuditLog;
use crate::config::Config;
use crate::fetch::FetchSettings;
use crate::gate::Gate;
use crate::proxy::client::{ClientSettings, build_client, default_tls_config};
use crate::proxy::{Proxy, Settings, server};
use crate::robots_cache::{CacheSettings, RobotsCache};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open the audit log {path}: {source}")]
    Audit {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("upstream TLS: {0}")]
    Tls(String),
}

/// A bound, ready-to-serve proxy.
pub struct App {
    pub proxy: Arc<Proxy>,
    pub listener: TcpListener,
    pub config: Config,
}

/// The reloadable part of a configuration.
pub fn settings_from(config: &Config) -> Settings {
    Settings {
        agent: config.agent_token(),
        agent_map: config
            .agents
            .iter()
            .map(|(client, token)| {
                (
                    crate::robots::product_token(client),
                    crate::robots::product_token(token),
                )
            })
            .collect(),
        response_timeout: config.upstream.response_timeout,
    }
}

impl App {
    /// Opens the audit log, builds the client, cache and gate, and binds the listener.
    pub async fn bind(config: Config) -> Result<App, StartError> {
        let tls = default_tls_config(&config.upstream.ca_files).map_err(StartError::Tls)?;
        let client = build_client(
            &ClientSettings {
                allow_private: config.allow_private_destinations,
                connect_timeout: config.upstream.connect_timeout,
                pool_idle_per_host: config.upstream.pool_idle_per_host,
                pool_idle_timeout: config.upstream.pool_idle_timeout,
            },
            Arc::new(tls),
        );
        let r = &config.robots;
        let cache = RobotsCache::new(
            client.clone(),
            FetchSettings {
                user_agent: config.fetch_user_agent(),
                timeout: r.fetch_timeout,
                max_redirects: r.max_redirects,
            },
            CacheSettings {
                capacity: r.cache_entries,
                default_ttl: r.default_ttl,
                min_ttl: r.min_ttl,
                max_ttl: r.max_ttl,
                unreachable_retry: r.unreachable_retry,
                stale_max: r.stale_max,
            },
        );
        let gate = Gate::new(Arc::new(cache), config.allow_private_destinations);
        let audit_path = config.audit_path();
        let audit = AuditLog::open(&audit_path, config.audit.log_all).map_err(|source| {
            StartError::Audit {
                path: audit_path.clone(),
                source,
            }
        })?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let proxy = Arc::new(Proxy::new(gate, client, audit, settings_from(&config)));
        Ok(App {
            proxy,
            listener,
            config,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// Serves until `shutdown` completes; returns connections cut off after the grace period.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) -> usize {
        let grace = self.config.shutdown_grace;
        server::serve(self.listener, self.proxy, shutdown, grace).await
    }
}
