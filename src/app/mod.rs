//! Building a running proxy from a [`Config`]: the wiring `main` and the
//! integration tests share, and configuration reload.

pub(crate) mod admin;
mod html;
mod identity;
pub(crate) use identity::DIRECTORY_VALID;
mod schedule;
pub(crate) mod state;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpListener;

use crate::admit::{AuthLimits, ClientAcl, ProxyAuth};
use crate::app::state::{AdminSettings, AdminState, ProxyView};
pub(crate) use crate::app::state::{ReloadAsk, ReloadDone};
use crate::config::Config;
use crate::fleet::Fleet;
use crate::http::destination::Policy;
use crate::judge::Gate;
use crate::judge::archive::Archive;
use crate::judge::fetch::FetchSettings;
use crate::judge::fetch_budget::FetchBudget;
use crate::judge::politeness::Politeness;
use crate::judge::store::{RobotsCache, RobotsCacheSettings};
use crate::metrics::Registry;
use crate::ops::audit::{AuditLog, SigningKey, chain};
use crate::proxy::{Proxy, Settings, Upstreams};
use crate::server;
use crate::tls::{Ca, Minter};
use crate::upstream::{ClientSettings, build_client, build_fetch_client};

/// Why the proxy could not start (or a reload was rejected).
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
    #[error("{0}")]
    Identity(String),
    #[error("key `fleet.redis`: {0}")]
    Fleet(String),
    #[error("key `usage.licenses`: {0}")]
    License(String),
    #[error("key `audit.signing_key`: {0}")]
    AuditKey(#[from] crate::ops::audit::KeyError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("key `access.allow_clients`: {0}")]
    Acl(#[from] crate::admit::AclError),
    #[error("key `admin.allow_clients`: {0}")]
    AdminAcl(crate::admit::AclError),
    #[error("key `access.users`: {0}")]
    Auth(#[from] crate::admit::AuthError),
    #[error("key `admin.users`: {0}")]
    AdminAuth(crate::admit::AuthError),
    #[error("cannot open the response cache {path}: {source}")]
    Cache {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot open the robots.txt archive {path} (audit.archive_max = 0 turns it off): {source}"
    )]
    Archive {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// A bound, ready-to-serve proxy.
pub struct App {
    pub proxy: Arc<Proxy>,
    /// Every layer's series, encoded at the admin listener's `/metrics`.
    pub(crate) metrics: Registry,
    pub(crate) listener: TcpListener,
    pub(crate) admin: Option<TcpListener>,
    /// `identity.listen`: the key directory and crawler pages, public.
    pub(crate) identity: Option<TcpListener>,
    pub config: Config,
    /// Path of the CA certificate clients must trust, and whether it was just created.
    pub ca: (std::path::PathBuf, bool),
    /// Client connections served at once: as configured, else derived
    /// from the open-file limit in force at bind (see
    /// [`Config::max_connections`]).
    pub max_connections: usize,
    /// Client connections served at once from one address (see
    /// [`Config::max_connections_per_client`]).
    pub(crate) max_connections_per_client: usize,
    /// Who may use the admin listener.
    pub(crate) admin_acl: ClientAcl,
    /// Where `POST /reload` asks ([`App::reload_asks`]).
    pub(crate) reload: Option<tokio::sync::mpsc::Sender<ReloadAsk>>,
}

/// The robots.txt archive, unless `audit.archive_max` is 0.
fn open_archive(config: &Config) -> Result<Option<Arc<Archive>>, StartError> {
    if config.audit.archive_max == 0 {
        return Ok(None);
    }
    let dir = config.archive_dir();
    let archive = Archive::open(&dir, config.audit.archive_max, &config.audit_path())
        .map_err(|source| StartError::Archive { path: dir, source })?
        .with_entry_limits(crate::judge::archive::EntryLimits {
            max_entries: config.robots.cache_entries,
            max_age: config.robots.stale_max,
        });
    Ok(Some(Arc::new(archive)))
}

/// The reloadable part of a configuration. `previous` keeps the politeness
/// state when its settings did not change.
pub(crate) fn settings_from(
    config: &Config,
    previous: Option<&Settings>,
) -> Result<Settings, StartError> {
    let acl = ClientAcl::new(config.access.allow_clients.iter().map(|n| n.to_string()))?;
    // The per-address allowances survive a reload that keeps the limit;
    // proxy and admin passwords share them (and the verifications running
    // at once).
    let per_minute = config.access.auth_failures_per_minute;
    let limits = previous
        .and_then(|p| p.auth.as_ref().or(p.admin_auth.as_ref()))
        .map(|a| a.limits().clone())
        .filter(|l| l.per_minute() == per_minute)
        .unwrap_or_else(|| Arc::new(AuthLimits::new(per_minute)));
    let auth = if config.access.users.is_empty() {
        None
    } else {
        Some(Arc::new(
            ProxyAuth::new(config.access.users.iter().cloned())?.with_limits(limits.clone()),
        ))
    };
    let admin_auth = if config.admin.users.is_empty() {
        None
    } else {
        let users = config.admin.users.iter().map(|u| u.user_config());
        Some(Arc::new(
            ProxyAuth::new(users)
                .map_err(StartError::AdminAuth)?
                .with_limits(limits),
        ))
    };
    let pconf = config.politeness.settings();
    let politeness = match previous {
        Some(prev) if prev.politeness_config == pconf => prev.politeness.clone(),
        _ => Arc::new(Politeness::new(pconf.clone())),
    };
    // Made at start ([`App::start`], which knows the bound address); a
    // reload keeps the running fleet.
    let fleet = previous.and_then(|prev| prev.fleet.clone());
    Ok(Settings {
        fleet,
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
        max_informational: config.upstream.max_informational,
        via: config.via,
        header_timeout: config.client_header_timeout,
        tunnel_idle_timeout: config.tunnel_idle_timeout,
        max_streams_per_tunnel: config.max_streams_per_tunnel,
        shutdown_grace: config.shutdown_grace,
        no_intercept: config
            .tls
            .no_intercept
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        allow_bodies_for: config
            .upstream
            .allow_bodies_for
            .iter()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .collect(),
        acl,
        auth,
        admin_auth,
        admin_roles: config
            .admin
            .users
            .iter()
            .map(|u| (u.name.clone(), u.role))
            .collect(),
        public_proxy: config
            .admin
            .public_proxy_url
            .as_deref()
            .and_then(|url| crate::config::public_proxy_address(url).ok()),
        politeness,
        politeness_config: pconf,
        flow: crate::judge::politeness::flow::Flow::new(
            config.politeness.flow(),
            previous.map(|p| &p.flow),
        ),
        purposes: config.usage.purposes.clone(),
        user_purposes: config
            .access
            .users
            .iter()
            .filter(|u| !u.purposes.is_empty())
            .map(|u| (u.name.clone(), u.purposes.clone()))
            .collect(),
        usage_mode: config.usage.mode,
        identity: config
            .identity
            .build(config)
            .map_err(StartError::Identity)?
            .map(Arc::new),
        usage_tdmrep: config.usage.tdmrep,
        usage_html_meta: config.usage.html_meta,
        usage_licenses: license_tokens(&config.usage.licenses)?,
        payments: config
            .payments
            .build(config, previous.and_then(|p| p.payments.as_deref()))
            .map_err(StartError::Identity)?
            .map(Arc::new),
    })
}

/// `[[usage.licenses]]`: each server with its token, read from its file.
fn license_tokens(
    licenses: &[crate::config::LicenseConfig],
) -> Result<Arc<[(String, http::HeaderValue)]>, StartError> {
    licenses
        .iter()
        .map(|l| {
            let bad = |why: String| {
                StartError::License(format!(
                    "server {:?}: token_file {}: {why}",
                    l.server,
                    l.token_file.display()
                ))
            };
            let token = std::fs::read_to_string(&l.token_file).map_err(|e| bad(e.to_string()))?;
            let token = token.trim();
            if token.is_empty() {
                return Err(bad("empty".into()));
            }
            let value = http::HeaderValue::from_str(&format!("License {token}"))
                .map_err(|_| bad("not a header value (one line of visible ASCII)".into()))?;
            Ok((l.server.trim_end_matches('/').to_owned(), value))
        })
        .collect()
}

impl App {
    /// Loads the CA, opens the audit log, builds the client, cache and
    /// gate, and binds the listeners.
    pub async fn bind(config: Config) -> Result<App, StartError> {
        let metrics = Registry::new();
        let tls = crate::upstream::tls::client_config(&config.upstream.ca_files)?;
        // Bound first: the destination policy refuses these addresses.
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let admin = match config.admin.listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Listen { addr, source })?,
            ),
            None => None,
        };
        let identity = match config
            .identity
            .listen_addr()
            .map_err(StartError::Identity)?
        {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Listen { addr, source })?,
            ),
            None => None,
        };
        let own: Vec<SocketAddr> = [Some(&listener), admin.as_ref(), identity.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let peers = crate::http::destination::PeerListeners::default();
        let policy = Policy::new(config.allow_private_destinations)
            .with_own_listeners(own.iter().copied())
            .with_peer_listeners(peers.clone())
            .treating_as_public(config.treat_as_public.iter().copied());
        // One set of upstream settings (and one TLS configuration) for both
        // the pooled client and the in-task connection pool.
        let client_settings = ClientSettings {
            policy: policy.clone(),
            connect_timeout: config.upstream.connect_timeout,
            pool_idle_per_host: config.upstream.pool_idle_per_host,
            pool_idle_max: config.upstream.pool_idle_max,
            pool_idle_timeout: config.upstream.pool_idle_timeout,
        };
        let tls = Arc::new(tls);
        let client = build_client(&client_settings, tls.clone());
        let upstream_tls = tls.clone();
        let mut settings = settings_from(&config, None)?;
        if let Some(payments) = &settings.payments {
            let (charges, micros) =
                payments.count_charged_in_audit(&config.audit_path(), std::time::SystemTime::now());
            if charges > 0 {
                tracing::info!(
                    charges,
                    spent = %payments.amount(micros),
                    "payments: today's charges in the audit log count against today's budget"
                );
            }
        }
        if let Some(f) = &config.fleet {
            let bound = listener.local_addr().unwrap_or(config.listen);
            let mut fleet_settings = f.settings(bound);
            fleet_settings.keys = f.keys().map_err(StartError::Fleet)?;
            if fleet_settings.keys.is_none() {
                tracing::warn!(
                    "fleet.unauthenticated = true: this node trusts whatever is in the fleet's Redis; \
                     anyone who can write to it decides for every node (set fleet.key_file)"
                );
            }
            let fleet = Fleet::new(&fleet_settings)
                .map_err(|e| StartError::Fleet(e.to_string()))?
                .with_listeners(own.iter().copied(), peers);
            let fleet = Arc::new(fleet);
            fleet.register_metrics(&metrics);
            tracing::info!(node = fleet.node(), fleet = fleet.name(), "fleet node");
            settings.fleet = Some(fleet);
        }
        let r = &config.robots;
        let archive = open_archive(&config)?;
        if let Some(a) = &archive {
            a.register_metrics(&metrics);
        }
        let cache = RobotsCache::new(
            build_fetch_client(&client_settings, tls),
            fetch_settings(&config),
            RobotsCacheSettings {
                capacity: r.cache_entries,
                default_ttl: r.default_ttl,
                min_ttl: r.min_ttl,
                max_ttl: r.max_ttl,
                unreachable_retry: r.unreachable_retry,
                stale_max: r.stale_max,
                max_bytes: r.cache_max_mib.saturating_mul(1024 * 1024),
                agents: judged_agents(&config),
            },
        )
        .with_metrics(&metrics)
        .with_archive(archive.clone())
        .with_fleet(settings.fleet.clone())
        .with_fetch_budget(FetchBudget::registered(
            config.robots_fetch_budget_mib(),
            &metrics,
        ));
        let gate = Gate::new(Arc::new(cache), policy)
            .with_case_insensitive_hosts(config.robots.case_insensitive_hosts.clone());
        let audit_path = config.audit_path();
        let audit_key = match config.audit_signing_key() {
            Some(path) => {
                let (key, created) = SigningKey::load_or_create(&path)?;
                if created {
                    tracing::info!(key = %path.display(), public = %chain::hex(&key.public()),
                        "created the key that signs audit checkpoints");
                }
                Some(key)
            }
            None => None,
        };
        let audit =
            AuditLog::open(&audit_path, config.audit.log_all, audit_key).map_err(|source| {
                StartError::Audit {
                    path: audit_path.clone(),
                    source,
                }
            })?;
        let audit = audit
            .with_node(settings.fleet.as_ref().map(|f| f.node()))
            .with_sync(config.audit.sync)
            .map_err(|source| StartError::Audit {
                path: audit_path.clone(),
                source,
            })?
            .with_witness(config.audit.witness_file.clone())
            .with_witness_hook(settings.fleet.clone().and_then(|fleet| {
                let rt = tokio::runtime::Handle::try_current().ok()?;
                let (keep, every) = (config.audit.witness_keep, config.audit.checkpoint_every);
                let hook: crate::ops::audit::WitnessHook =
                    Arc::new(move |line: &[u8]| fleet.witness(&rt, line, keep, every));
                Some(hook)
            }))
            .with_witness_command(
                &config.audit.witness_command,
                match config.audit.checkpoint_every {
                    every if every.is_zero() => crate::ops::audit::witness_command::DEFAULT_TIMEOUT,
                    every => every,
                },
            )
            .map_err(|source| StartError::Audit {
                path: audit_path.clone(),
                source,
            })?;
        let ca_dir = config.ca_dir();
        let (ca, created) = Ca::load_or_create(&ca_dir)?;
        let minter = Arc::new(Minter::new(ca, config.tls.leaf_cache)?);
        let admin_acl = ClientAcl::new(config.admin.allow_clients.iter().map(|n| n.to_string()))
            .map_err(StartError::AdminAcl)?;
        let upstream = crate::upstream::Pool::for_threads(
            client_settings,
            upstream_tls.clone(),
            config.worker_threads(),
        );
        let upstreams = Upstreams {
            client,
            pool: upstream,
            tls: upstream_tls,
        };
        let cache = if config.cache.enabled {
            let path = config.state_dir().join("cache");
            let cache = crate::response_cache::ResponseCache::open(&config.cache.settings(), &path)
                .map_err(|source| StartError::Cache { path, source })?;
            cache.register_metrics(&metrics);
            Some(cache)
        } else {
            None
        };
        let max_connections = config.max_connections(crate::ops::limits::open_files());
        let proxy = Arc::new(
            Proxy::new(gate, upstreams, audit, &metrics, minter, settings)
                .with_cache(cache)
                .with_requests_per_client(config.max_requests_per_client(max_connections)),
        );
        // An archived text that audit lines name leaves only with its
        // `evidence_removed` line.
        if let Some(a) = &archive {
            let weak = Arc::downgrade(&proxy);
            a.set_removal_hook(Box::new(move |r| match weak.upgrade() {
                Some(p) => p
                    .audit
                    .write_evidence_removed(r.digest.to_string(), r.bytes, &r.reason),
                None => Err(std::io::Error::other("the proxy is gone")),
            }));
        }
        // Before the first request: the log is read up to its length now.
        proxy.activity.rebuild_from_audit(&audit_path);
        if !config.audit.checkpoint_every.is_zero() {
            crate::ops::audit::start_checkpoints(
                Arc::downgrade(&proxy),
                config.audit.checkpoint_every,
                |p: &Proxy| &p.audit,
            )
            .map_err(|source| StartError::Audit {
                path: audit_path.clone(),
                source,
            })?;
        }
        Ok(App {
            proxy,
            metrics,
            listener,
            admin,
            identity,
            max_connections,
            max_connections_per_client: config.max_connections_per_client(max_connections),
            admin_acl,
            reload: None,
            config,
            ca: (ca_dir.join(crate::tls::ca::CERT_FILE), created),
        })
    }

    /// The reloads the admin listener is asked for (`POST /reload`), for
    /// the process's reloader; without a call the endpoint answers 503.
    pub(crate) fn reload_asks(&mut self) -> tokio::sync::mpsc::Receiver<ReloadAsk> {
        // One waiting at a time: more askers wait for their turn.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        self.reload = Some(tx);
        rx
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The admin listener's address, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The identity listener's address, if enabled.
    pub fn identity_addr(&self) -> Option<SocketAddr> {
        self.identity.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes; returns connections cut off
    /// after the grace period. The admin listener (if any) serves alongside
    /// and reports not-ready once shutdown begins.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) -> usize {
        let limits = server::AcceptLimits {
            max_connections: self.max_connections,
            per_client: self.max_connections_per_client,
            threads: self.config.worker_threads(),
        };
        let ready = Arc::new(AtomicBool::new(true));
        let admin_limits = crate::app::admin::AdminLimits {
            allow: self.admin_acl,
            max_connections: self.config.admin.max_connections,
            max_per_client: self.config.admin.max_connections_per_client,
        };
        let admin_task = self.admin.map(|listener| {
            let state = AdminState {
                proxy: self.proxy.clone(),
                metrics: self.metrics.clone(),
                listeners: self.proxy.server_metrics.clone(),
                ready: ready.clone(),
                listen: self.listener.local_addr().unwrap_or(self.config.listen),
                reload: self.reload.clone(),
            };
            tokio::spawn(crate::app::admin::serve(listener, state, admin_limits))
        });
        let identity_task = self
            .identity
            .map(|listener| tokio::spawn(identity::serve(listener, self.proxy.clone())));
        let fleet_task = self.proxy.settings().fleet.clone().map(|fleet| {
            let view: Arc<dyn ProxyView> = self.proxy.clone();
            tokio::spawn(crate::app::admin::follow_fleet_purges(view, fleet))
        });
        // robots.txt fetches answered 429 or 503 with Retry-After pause
        // their origins.
        let robots_signals = tokio::spawn(self.proxy.clone().follow_robots_signals());
        // The fleet's heartbeat (live nodes, and Redis tried again during
        // an outage): kept across reloads, like the fleet.
        let heartbeat = self
            .proxy
            .settings()
            .fleet
            .clone()
            .map(|fleet| tokio::spawn(fleet.keep_heartbeat()));
        let ready_flag = ready.clone();
        let cut = server::serve(
            self.listener,
            self.proxy.clone(),
            async move {
                shutdown.await;
                ready_flag.store(false, Ordering::Relaxed);
            },
            limits,
        )
        .await;
        for task in admin_task
            .into_iter()
            .chain(identity_task)
            .chain(fleet_task)
            .chain(heartbeat)
            .chain([robots_signals])
        {
            task.abort();
        }
        // Bounded by fleet.timeout; an unreachable Redis forgets the node
        // by itself.
        if let Some(fleet) = self.proxy.settings().fleet.clone() {
            let _ = fleet.leave().await;
        }
        // The files of removed responses are deleted before the process
        // ends, for a grace period at most; the next start deletes the
        // rest.
        if let Some(cache) = self.proxy.response_cache() {
            let pending = cache.counters().deletions_pending;
            if pending > 0 {
                tracing::info!(
                    pending,
                    "response cache: deleting the files of removed responses before stopping"
                );
            }
            let left = cache
                .finish_deletions(self.proxy.settings().shutdown_grace)
                .await;
            if left > 0 {
                tracing::info!(
                    left,
                    "response cache: files of removed responses left for the next start to delete"
                );
            }
        }
        cut
    }
}

/// The admin endpoints' view of the proxy.
impl ProxyView for Proxy {
    fn record_admin(&self, event: crate::ops::audit::AdminEvent) -> std::io::Result<()> {
        let seen = crate::ops::activity::AdminSeen::of(&event);
        self.audit.write_event(event)?;
        tracing::info!(action = %seen.action, by = %seen.by, detail = %seen.detail,
            "admin action recorded in the audit log");
        self.activity.admin(seen);
        Ok(())
    }

    fn politeness_waiting(&self) -> i64 {
        self.metrics.politeness_waiting_now()
    }

    fn gate(&self) -> &Gate {
        &self.gate
    }

    fn audit_writable(&self) -> bool {
        self.audit.is_writable()
    }

    fn admin_settings(&self) -> AdminSettings {
        let s = self.settings();
        AdminSettings {
            agent: s.agent.clone(),
            politeness: s.politeness.clone(),
            header_timeout: s.header_timeout,
            purposes: s.purposes.clone(),
            usage_mode: s.usage_mode,
            usage_licenses: s.usage_licenses.clone(),
            auth: s.admin_auth.clone(),
            roles: s.admin_roles.clone(),
            public_proxy: s.public_proxy.clone(),
            politeness_settings: s.politeness_config.clone(),
            flow: s.flow.clone(),
            fleet: s.fleet.clone(),
            identity: s.identity.clone(),
        }
    }

    fn activity(&self) -> &crate::ops::activity::Activity {
        &self.activity
    }

    fn audit_log_all(&self) -> bool {
        self.audit.log_all()
    }

    fn ca(&self) -> &crate::tls::Ca {
        self.minter.ca()
    }

    fn response_cache(&self) -> Option<&crate::response_cache::ResponseCache> {
        Proxy::response_cache(self)
    }
}

/// How robots.txt is fetched: applied at start and on every reload.
fn fetch_settings(config: &Config) -> FetchSettings {
    FetchSettings {
        user_agent: config.fetch_user_agent(),
        timeout: config.robots.fetch_timeout,
        max_redirects: config.robots.max_redirects,
        max_informational: config.upstream.max_informational,
    }
}

/// The robots product tokens requests can be judged as: the default agent,
/// the mapped agents and the users' agents. Cached robots.txt files are
/// compiled for these.
fn judged_agents(config: &Config) -> Vec<String> {
    let mut agents = vec![config.agent_token()];
    agents.extend(config.agents.values().cloned());
    agents.extend(config.access.users.iter().filter_map(|u| u.agent.clone()));
    // The tokens the identity's User-Agents are judged as.
    if let Ok(Some(identity)) = config.identity.build(config) {
        agents.extend(identity.page.tokens.iter().cloned());
    }
    agents
}

/// Applies a new configuration to a running proxy: agents, mappings,
/// access control, admin users, politeness, timeouts, shutdown grace, no-intercept
/// list, how robots.txt is fetched (User-Agent, timeout, redirects), audit
/// options (and reopens the audit file). `log.level` is applied by the
/// binary, which owns the log subscriber. Returns the keys whose new value
/// is not in force: those applied only at start ([`needs_restart`])
/// that differ from `started`, the configuration the process started
/// with. On error nothing changes.
pub fn reload(
    proxy: &Proxy,
    started: &Config,
    new: &Config,
) -> Result<Vec<&'static str>, StartError> {
    let settings = settings_from(new, Some(&proxy.settings()))?;
    proxy.set_settings(settings);
    proxy.gate.cache().set_agents(&judged_agents(new));
    proxy.gate.cache().set_fetch_settings(fetch_settings(new));
    proxy.audit.set_log_all(new.audit.log_all);
    match proxy.audit.reopen() {
        Ok(()) => tracing::info!(path = %proxy.audit.path().display(), "audit log reopened"),
        Err(e) => tracing::error!(path = %proxy.audit.path().display(), error = %e,
            "cannot reopen the audit log: refusing to forward until it is writable"),
    }
    Ok(needs_restart(started, new))
}

/// The keys changed from `old` to `new` that apply only at the next start
/// (listeners, threads, the robots cache's size and TTLs, audit file, CA,
/// log format, the upstream connection pools and the response cache: all
/// built once).
/// Every other key is applied by [`reload`].
pub(crate) fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    restart_table(old, new)
        .into_iter()
        .filter_map(|(changed, key)| changed.then_some(key))
        .collect()
}

/// The keys a reload applies; every other key is in [`needs_restart`]
/// (a unit test checks that each key of `config/robots-proxy.toml` is in
/// one of the two). `table.*` stands for every key of the table.
#[cfg(test)]
pub(crate) const RELOADED_KEYS: &[&str] = &[
    "agent",
    "user_agent",
    "agents",
    "via",
    "client_header_timeout",
    "tunnel_idle_timeout",
    "max_streams_per_tunnel",
    "shutdown_grace",
    "robots.fetch_timeout",
    "robots.max_redirects",
    "upstream.response_timeout",
    "audit.log_all",
    "tls.no_intercept",
    "upstream.allow_bodies_for",
    "upstream.max_informational",
    "politeness.*",
    "access.*",
    "admin.users.*",
    "admin.public_proxy_url",
    "usage.*",
    "identity.user_agent",
    "identity.user_agent_mode",
    "identity.contact",
    "identity.egress_ranges",
    "identity.signing.*",
    "payments.*",
    "log.level",
];

/// `[fleet]` as configured (`None` without the table).
fn fleet(config: &Config) -> Option<&crate::config::FleetConfig> {
    config.fleet.as_ref()
}

/// Each start-only key, and whether it differs between `old` and `new`.
fn restart_table(old: &Config, new: &Config) -> [(bool, &'static str); 54] {
    let (o, n) = (&old.upstream, &new.upstream);
    let (oc, nc) = (&old.cache, &new.cache);
    let (or, nr) = (&old.robots, &new.robots);
    [
        (old.listen != new.listen, "listen"),
        (
            fleet(old).map(|f| &f.redis) != fleet(new).map(|f| &f.redis),
            "fleet.redis",
        ),
        (
            fleet(old).map(|f| &f.name) != fleet(new).map(|f| &f.name),
            "fleet.name",
        ),
        (
            fleet(old).map(|f| &f.node) != fleet(new).map(|f| &f.node),
            "fleet.node",
        ),
        (
            fleet(old).map(|f| &f.timeout) != fleet(new).map(|f| &f.timeout),
            "fleet.timeout",
        ),
        (
            fleet(old).map(|f| &f.on_unavailable) != fleet(new).map(|f| &f.on_unavailable),
            "fleet.on_unavailable",
        ),
        (
            fleet(old).map(|f| &f.key_file) != fleet(new).map(|f| &f.key_file),
            "fleet.key_file",
        ),
        (
            fleet(old).map(|f| &f.old_key_file) != fleet(new).map(|f| &f.old_key_file),
            "fleet.old_key_file",
        ),
        (
            fleet(old).map(|f| f.unauthenticated) != fleet(new).map(|f| f.unauthenticated),
            "fleet.unauthenticated",
        ),
        (old.workers != new.workers, "workers"),
        (
            old.max_connections != new.max_connections,
            "max_connections",
        ),
        (
            old.max_connections_per_client != new.max_connections_per_client,
            "max_connections_per_client",
        ),
        (
            old.max_requests_per_client != new.max_requests_per_client,
            "max_requests_per_client",
        ),
        (old.admin.listen != new.admin.listen, "admin.listen"),
        (
            old.identity.listen != new.identity.listen,
            "identity.listen",
        ),
        (
            old.admin.allow_clients != new.admin.allow_clients,
            "admin.allow_clients",
        ),
        (
            old.admin.max_connections != new.admin.max_connections,
            "admin.max_connections",
        ),
        (
            old.admin.max_connections_per_client != new.admin.max_connections_per_client,
            "admin.max_connections_per_client",
        ),
        (or.cache_entries != nr.cache_entries, "robots.cache_entries"),
        (or.cache_max_mib != nr.cache_max_mib, "robots.cache_max_mib"),
        (
            or.fetch_budget_mib != nr.fetch_budget_mib,
            "robots.fetch_budget_mib",
        ),
        (or.default_ttl != nr.default_ttl, "robots.default_ttl"),
        (or.min_ttl != nr.min_ttl, "robots.min_ttl"),
        (or.max_ttl != nr.max_ttl, "robots.max_ttl"),
        (
            or.unreachable_retry != nr.unreachable_retry,
            "robots.unreachable_retry",
        ),
        (or.stale_max != nr.stale_max, "robots.stale_max"),
        (
            or.case_insensitive_hosts != nr.case_insensitive_hosts,
            "robots.case_insensitive_hosts",
        ),
        (old.tls.leaf_cache != new.tls.leaf_cache, "tls.leaf_cache"),
        (old.audit_path() != new.audit_path(), "audit.path"),
        (
            old.audit.archive_max != new.audit.archive_max,
            "audit.archive_max",
        ),
        (
            old.audit_signing_key() != new.audit_signing_key(),
            "audit.signing_key",
        ),
        (old.audit.sync != new.audit.sync, "audit.sync"),
        (
            old.audit.checkpoint_every != new.audit.checkpoint_every,
            "audit.checkpoint_every",
        ),
        (
            old.audit.witness_file != new.audit.witness_file,
            "audit.witness_file",
        ),
        (
            old.audit.witness_keep != new.audit.witness_keep,
            "audit.witness_keep",
        ),
        (
            old.audit.witness_command != new.audit.witness_command,
            "audit.witness_command",
        ),
        (old.ca_dir() != new.ca_dir(), "tls.ca_dir"),
        (old.log.format != new.log.format, "log.format"),
        (old.state_dir() != new.state_dir(), "state_dir"),
        (o.ca_files != n.ca_files, "upstream.ca_files"),
        (
            o.connect_timeout != n.connect_timeout,
            "upstream.connect_timeout",
        ),
        (
            o.pool_idle_per_host != n.pool_idle_per_host,
            "upstream.pool_idle_per_host",
        ),
        (o.pool_idle_max != n.pool_idle_max, "upstream.pool_idle_max"),
        (
            o.pool_idle_timeout != n.pool_idle_timeout,
            "upstream.pool_idle_timeout",
        ),
        (
            old.allow_private_destinations != new.allow_private_destinations,
            "allow_private_destinations",
        ),
        (oc.enabled != nc.enabled, "cache.enabled"),
        (oc.mode != nc.mode, "cache.mode"),
        (oc.memory_size != nc.memory_size, "cache.memory_size"),
        (oc.disk_size != nc.disk_size, "cache.disk_size"),
        (
            oc.max_object_size != nc.max_object_size,
            "cache.max_object_size",
        ),
        (oc.store_all_ttl != nc.store_all_ttl, "cache.store_all_ttl"),
        (oc.lock_timeout != nc.lock_timeout, "cache.lock_timeout"),
        (oc.max_objects != nc.max_objects, "cache.max_objects"),
        (oc.max_variants != nc.max_variants, "cache.max_variants"),
    ]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("test.toml")).expect("valid config")
    }

    /// A PHC string at Argon2's least cost (checked, never verified here).
    const HASH: &str =
        "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY";

    #[test]
    fn admin_users_apply_on_reload_and_share_the_password_limits() {
        let none = settings_from(&config(""), None).expect("settings");
        assert!(none.admin_auth.is_none() && none.auth.is_none());
        let both = config(&format!(
            "[[access.users]]\nname = \"crawler\"\npassword_hash = \"{HASH}\"\n\
             [[admin.users]]\nname = \"ops\"\npassword_hash = \"{HASH}\"\n"
        ));
        let reloaded = settings_from(&both, Some(&none)).expect("settings");
        let (Some(proxy), Some(admin)) = (&reloaded.auth, &reloaded.admin_auth) else {
            panic!("both user lists in force after the reload");
        };
        assert!(Arc::ptr_eq(proxy.limits(), admin.limits()));
        // The next reload keeps the per-address allowances; one without
        // admin users turns the admin check off.
        let admin_only = config(&format!(
            "[[admin.users]]\nname = \"ops\"\npassword_hash = \"{HASH}\"\n"
        ));
        let again = settings_from(&admin_only, Some(&reloaded)).expect("settings");
        let kept = again.admin_auth.as_ref().expect("admin users");
        assert!(again.auth.is_none());
        assert!(Arc::ptr_eq(kept.limits(), admin.limits()));
        let off = settings_from(&config(""), Some(&again)).expect("settings");
        assert!(off.admin_auth.is_none());
        assert!(needs_restart(&both, &config("")).is_empty());
    }

    /// Every key of the example configuration (commented-out ones too) is
    /// either applied by a reload or reported as needing a restart.
    #[test]
    fn every_configuration_key_is_reloaded_or_named_as_needing_a_restart() {
        let text = include_str!("../../config/robots-proxy.toml");
        let defaults = Config::default();
        let restart: Vec<&str> = restart_table(&defaults, &defaults)
            .iter()
            .map(|(_, k)| *k)
            .collect();
        let mut table = String::new();
        let mut seen = 0;
        for line in text.lines() {
            let line = line.trim_start_matches("# ").trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
                table = name.trim_start_matches('[').to_string();
                continue;
            }
            let Some((key, _)) = line.split_once(" = ") else {
                continue;
            };
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                continue;
            }
            let full = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            let section = format!("{}.*", table.split('.').next().unwrap_or_default());
            let whole_table = format!("{table}.*");
            let reloaded = [full.as_str(), section.as_str(), whole_table.as_str()]
                .iter()
                .any(|k| RELOADED_KEYS.contains(k));
            let restarts = restart.contains(&full.as_str());
            assert!(
                reloaded != restarts,
                "{full}: reloaded {reloaded}, needs a restart {restarts}"
            );
            seen += 1;
        }
        assert!(seen > 40, "only {seen} keys found in the example config");
    }

    #[test]
    fn restart_keys_are_those_changed_that_apply_at_start_only() {
        let old = config("");
        assert!(needs_restart(&old, &old).is_empty());
        let new = config(
            "max_connections = 10\nuser_agent = \"x/1\"\nagents = { a = \"b\" }\n\
             client_header_timeout = \"5s\"\ntunnel_idle_timeout = \"1m\"\n\
             [admin]\nmax_connections = 4\n\
             [[admin.users]]\nname = \"ops\"\npassword_hash = \"$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY\"\n\
             [robots]\nfetch_timeout = \"3s\"\n\
             [upstream]\npool_idle_max = 3\nresponse_timeout = \"5s\"\n",
        );
        // [agents], user_agent, response_timeout, the robots.txt fetch
        // timeout, the client timeouts and the admin users apply on reload.
        assert_eq!(
            needs_restart(&old, &new),
            [
                "max_connections",
                "admin.max_connections",
                "upstream.pool_idle_max"
            ]
        );
    }
}
