//! Configuration: a TOML file whose every key has a default, so no file is
//! needed at all. Unknown keys and bad values are errors that name the key
//! and the line (the TOML parser reports both; values are validated while
//! they are read so the position is still known).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

mod identity;
mod payments;
pub use identity::{IdentityConfig, SigningConfig, UaMode};
pub use payments::{OriginPrice, PaymentsConfig};

/// Proxy users and their password hashes, for `[[access.users]]`.
pub use crate::admit::{Params as PasswordParams, UserConfig, hash_password, hash_password_with};
/// `fleet.redis`: one server or a Redis Cluster.
pub use crate::fleet::RedisTarget;

/// Upper bound of `workers`: far above any useful value, below what would
/// exhaust a machine's threads.
pub(crate) const MAX_WORKERS: usize = 1024;

/// Upper bound of the automatic `max_connections`.
const MAX_AUTO_CONNECTIONS: u64 = 1 << 18;

/// Everything robots-proxy can be told.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the proxy listens on: `ip:port`, or `name:port` resolved at
    /// load (`localhost` is 127.0.0.1).
    #[serde(deserialize_with = "listen_addr")]
    pub listen: SocketAddr,
    /// Robots product token used to select robots.txt groups.
    pub agent: String,
    /// User-Agent header sent when fetching robots.txt; default derived from `agent`.
    pub user_agent: Option<String>,
    /// Forward to private, loopback and link-local destinations.
    pub allow_private_destinations: bool,
    /// Directory for state (the CA among it). Default: `$STATE_DIRECTORY`,
    /// else `$XDG_STATE_HOME/robots-proxy`, else `~/.local/state/robots-proxy`.
    pub state_dir: Option<PathBuf>,
    /// How long in-flight requests may finish after SIGTERM.
    #[serde(deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    /// Add a `Via` header to forwarded requests and responses (RFC 9110
    /// §7.6.3 asks proxies to). nginx's default `gzip_proxied off` does not
    /// compress responses to requests that carry one.
    pub via: bool,
    /// Threads serving connections; 0: `TOKIO_WORKER_THREADS`, else half
    /// the CPUs, at least one (see [`Config::worker_threads`]).
    pub workers: usize,
    /// Client connections served at once; more wait in the listen queue.
    /// 0: a quarter of the open-file limit (see [`Config::max_connections`]).
    pub max_connections: usize,
    /// Client connections open at once from one address; more are closed
    /// at accept. 0: a quarter of `max_connections`, at least 8 (see
    /// [`Config::max_connections_per_client`]).
    pub max_connections_per_client: usize,
    /// Requests in flight at once from one address (judged, forwarded, or
    /// streaming their response); more wait their turn. 0:
    /// `max_connections_per_client` as resolved (see
    /// [`Config::max_requests_per_client`]).
    pub max_requests_per_client: usize,
    /// Concurrent HTTP/2 streams inside one intercepted tunnel.
    pub max_streams_per_tunnel: u32,
    /// Time a client has to send a request's headers, counted from the
    /// connection's start or the end of the previous response: idle
    /// keep-alive connections close after it too. The same on the proxy
    /// and admin listeners and inside intercepted tunnels.
    #[serde(deserialize_with = "duration")]
    pub client_header_timeout: Duration,
    /// A blind (not intercepted) tunnel with no byte in either direction
    /// for this long is closed.
    #[serde(deserialize_with = "duration")]
    pub tunnel_idle_timeout: Duration,
    /// Client User-Agent product token → robots token it must obey.
    pub agents: BTreeMap<String, String>,
    pub robots: RobotsConfig,
    pub upstream: UpstreamConfig,
    pub audit: AuditConfig,
    pub tls: TlsConfig,
    pub admin: AdminConfig,
    pub politeness: PolitenessConfig,
    pub access: AccessConfig,
    pub log: LogConfig,
    pub cache: CacheConfig,
    pub usage: UsageConfig,
    /// Who the crawler says it is: User-Agent, Web Bot Auth signatures,
    /// the pages sites look for.
    pub identity: IdentityConfig,
    /// Pay per crawl (HTTP 402) within limits and a daily budget.
    pub payments: PaymentsConfig,
    /// Fleet mode: a Crawl-delay schedule shared through Redis; off
    /// without the table.
    pub fleet: Option<FleetConfig>,
    /// For tests only, not read from files: addresses the destination
    /// policy counts as public, so a loopback origin can stand for a
    /// public one while `allow_private_destinations` is off.
    #[doc(hidden)]
    #[serde(skip)]
    pub treat_as_public: Vec<SocketAddr>,
}

/// robots.txt retrieval and caching.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobotsConfig {
    /// Most origins kept in the cache (least recently used are dropped).
    pub(crate) cache_entries: usize,
    /// Memory budget for cached rules in MiB; least recently used origins
    /// are dropped beyond it (large files count for more than small ones).
    pub(crate) cache_max_mib: usize,
    /// MiB of robots.txt files being fetched, decoded, parsed and
    /// compiled at once; 0: a quarter of `cache_max_mib`, at least 8 (see
    /// [`Config::robots_fetch_budget_mib`]).
    pub fetch_budget_mib: usize,
    /// How long a fetched robots.txt is used without `Cache-Control: max-age`.
    #[serde(deserialize_with = "duration")]
    pub default_ttl: Duration,
    /// Floor for `max-age`.
    #[serde(deserialize_with = "duration")]
    pub min_ttl: Duration,
    /// Ceiling for `max-age`.
    #[serde(deserialize_with = "duration")]
    pub(crate) max_ttl: Duration,
    /// When to try again after an origin was unreachable.
    #[serde(deserialize_with = "duration")]
    pub unreachable_retry: Duration,
    /// How old a last good copy may be and still be used while the origin is unreachable.
    #[serde(deserialize_with = "duration")]
    pub(crate) stale_max: Duration,
    /// Whole robots.txt fetch (all redirects, headers and body).
    #[serde(deserialize_with = "duration")]
    pub fetch_timeout: Duration,
    /// Redirects followed before robots.txt counts as unavailable.
    pub(crate) max_redirects: u8,
    /// Origins whose paths are case-insensitive (IIS, Windows and macOS
    /// file systems): their paths are also judged lower-cased.
    pub case_insensitive_hosts: Vec<String>,
}

/// Forwarding to origins.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// Time until the origin's response headers arrive (504 after it).
    #[serde(deserialize_with = "duration")]
    pub response_timeout: Duration,
    /// Idle pooled connections kept per origin.
    pub(crate) pool_idle_per_host: usize,
    /// Idle in-task connections (http, and https over HTTP/1.1) kept over
    /// all origins.
    pub(crate) pool_idle_max: usize,
    #[serde(deserialize_with = "duration")]
    pub(crate) pool_idle_timeout: Duration,
    /// Extra PEM files of trust anchors for upstream TLS.
    pub ca_files: Vec<PathBuf>,
    /// Hosts (`example.com` or `*.example.com`) whose GET, HEAD, DELETE
    /// and OPTIONS requests may carry a body (search APIs that take GET
    /// bodies); elsewhere such a request is refused with 400.
    pub allow_bodies_for: Vec<String>,
    /// Informational (1xx) responses an origin may send before its final
    /// one (forwarded requests and robots.txt fetches); more ends the
    /// request: 502, or robots.txt unreachable.
    pub max_informational: usize,
}

/// The audit log of blocked (and optionally all) requests.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// JSON-lines file. Default: `$LOGS_DIRECTORY/audit.jsonl`, else `<state_dir>/audit.jsonl`.
    pub path: Option<PathBuf>,
    /// Also log allowed requests.
    pub log_all: bool,
    /// Bytes of the robots.txt archive (`<state_dir>/robots-archive`);
    /// 0: no archive.
    pub archive_max: u64,
    /// The key that signs checkpoint lines: `false` (default, unsigned),
    /// `true` (`<state_dir>/audit-key/signing.pem`) or a path; created
    /// on first start if missing.
    #[serde(deserialize_with = "signing_key")]
    pub signing_key: AuditSigningKey,
    /// When lines are forced to the disk (`fdatasync`): `"none"`,
    /// `"interval"` (default: at most once a second) or `"every"` line.
    pub sync: crate::ops::audit::SyncPolicy,
    /// A checkpoint line this often while lines are written (0: only at
    /// start and reopen).
    #[serde(deserialize_with = "duration")]
    pub checkpoint_every: Duration,
    /// Every checkpoint line is appended to this file too: a copy on
    /// another disk or mount, for `audit verify --witness`.
    pub witness_file: Option<PathBuf>,
    /// In a fleet, how long the checkpoints pushed to Redis are kept
    /// (`fleet::witness`).
    #[serde(deserialize_with = "duration")]
    pub witness_keep: Duration,
    /// A command run for every checkpoint line, the line on its standard
    /// input: a program and its arguments, no shell (`["logger", "-t",
    /// "robots-proxy-witness"]`). Empty: none.
    pub witness_command: Vec<String>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            path: None,
            log_all: false,
            archive_max: 256 << 20,
            signing_key: AuditSigningKey::Off,
            sync: crate::ops::audit::SyncPolicy::default(),
            checkpoint_every: Duration::from_secs(10),
            witness_file: None,
            witness_keep: Duration::from_secs(24 * 3600),
            witness_command: Vec::new(),
        }
    }
}

/// `audit.signing_key`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AuditSigningKey {
    /// Checkpoints are not signed.
    #[default]
    Off,
    /// The key at `<state_dir>/audit-key/signing.pem`.
    StateDir,
    /// The key at this path.
    Path(PathBuf),
}

/// `false`, `true` or a non-empty path.
fn signing_key<'de, D: Deserializer<'de>>(d: D) -> Result<AuditSigningKey, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = AuditSigningKey;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("false, true or the path of a key file")
        }
        fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<AuditSigningKey, E> {
            Ok(if on {
                AuditSigningKey::StateDir
            } else {
                AuditSigningKey::Off
            })
        }
        fn visit_str<E: serde::de::Error>(self, path: &str) -> Result<AuditSigningKey, E> {
            if path.is_empty() {
                return Err(E::custom(
                    "an empty path: write false for no signing, true for the default key",
                ));
            }
            Ok(AuditSigningKey::Path(PathBuf::from(path)))
        }
    }
    d.deserialize_any(Visitor)
}

/// HTTPS interception.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// CA directory (`ca.pem`, `ca.key`). Default: `<state_dir>/ca`.
    pub ca_dir: Option<PathBuf>,
    /// Hosts tunnelled without interception: `example.com` or `*.example.com`.
    pub no_intercept: Vec<String>,
    /// Minted leaf certificates kept.
    pub(crate) leaf_cache: usize,
}

/// The admin listener.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Off unless set. Like the top-level `listen`.
    #[serde(deserialize_with = "optional_listen_addr")]
    pub listen: Option<SocketAddr>,
    /// Client networks allowed to connect; others are closed at accept.
    pub allow_clients: Vec<IpNet>,
    /// Admin connections open at once; more are closed at accept.
    pub max_connections: usize,
    /// Admin connections open at once from one address, so that one
    /// address cannot take every slot.
    pub max_connections_per_client: usize,
    /// The proxy's address as clients reach it (`http://host:port`), for
    /// the `/ca` page's examples; unset: the listen address, or the name
    /// the page was asked by when the proxy listens on every address.
    pub public_proxy_url: Option<String>,
    /// HTTP Basic authentication of every admin endpoint but `/healthz`,
    /// `/readyz`, `/ca` and `/ca.pem`; off when empty (the address list
    /// alone then).
    pub users: Vec<AdminUser>,
}

/// The `host:port` of `admin.public_proxy_url` (`http://host:port`, a
/// trailing `/` allowed).
pub(crate) fn public_proxy_address(url: &str) -> Result<String, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "{url:?}: write it as http://host:port (clients speak plain HTTP to the proxy)"
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!("{url:?}: no path, only http://host:port"));
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("{url:?}: no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!("{url:?}: no credentials in it"));
    }
    Ok(match authority.port_u16() {
        Some(_) => authority.as_str().to_string(),
        None => format!("{}:80", authority.host()),
    })
}

pub use crate::admit::AdminRole;

/// One `[[admin.users]]` entry: a name and an Argon2 PHC string, as
/// `[[access.users]]` has them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminUser {
    pub name: String,
    /// Argon2 PHC string from `robots-proxy hash-password`.
    pub password_hash: String,
    /// `viewer` or `operator` (the default).
    #[serde(default)]
    pub role: AdminRole,
}

impl AdminUser {
    /// The user as the password checker takes it (no agent, rate or
    /// purposes: those are the proxy's).
    pub(crate) fn user_config(&self) -> UserConfig {
        UserConfig {
            name: self.name.clone(),
            password_hash: self.password_hash.clone(),
            agent: None,
            max_rps: None,
            purposes: Vec::new(),
            ..Default::default()
        }
    }
}

/// What to do when a request comes before its Crawl-delay slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolitenessMode {
    Delay,
    Reject,
}

/// `[fleet]`: proxies sharing one Redis keep one Crawl-delay schedule per
/// origin and agent.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// One Redis URL (`redis://`, `rediss://`), or a list of Redis
    /// Cluster nodes' URLs.
    #[serde(deserialize_with = "fleet_redis")]
    pub redis: RedisTarget,
    /// Key namespace: the fleet's name.
    pub name: String,
    /// This node's name in the fleet (audit lines, `/explain`, heartbeat):
    /// unique per node. Empty: `<hostname>:<listen port>`.
    pub node: String,
    /// Longest a request waits on Redis.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// When Redis is unavailable: book locally, or refuse (503).
    pub on_unavailable: FleetOnUnavailable,
    /// The fleet key (`robots-proxy fleet init-key`): what a node reads
    /// from Redis, it verifies. Required unless `unauthenticated`.
    pub key_file: Option<PathBuf>,
    /// The previous key, accepted for verification only during a
    /// rotation.
    pub old_key_file: Option<PathBuf>,
    /// Run a fleet without a key (a warning at every start).
    pub unauthenticated: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FleetOnUnavailable {
    Local,
    Refuse,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            redis: RedisTarget::Server("redis://127.0.0.1:6379/0".into()),
            name: "default".into(),
            node: String::new(),
            timeout: Duration::from_millis(50),
            on_unavailable: FleetOnUnavailable::Local,
            key_file: None,
            old_key_file: None,
            unauthenticated: false,
        }
    }
}

impl FleetConfig {
    /// The fleet's settings; `listen` names the node when `node` is
    /// empty.
    /// The fleet key and the old one, read from their files; `None`
    /// when the fleet is unauthenticated.
    pub(crate) fn keys(&self) -> Result<Option<crate::fleet::key::KeySettings>, String> {
        use crate::fleet::key;
        let Some(path) = &self.key_file else {
            return if self.unauthenticated {
                Ok(None)
            } else {
                Err("key `fleet.key_file`: a fleet needs a key, or Redis's writers decide for every node: \
                     make one with `robots-proxy fleet init-key --out FILE` (the same file on every node), \
                     or write `fleet.unauthenticated = true` to run without"
                    .into())
            };
        };
        let current = key::load(path).map_err(|e| format!("key `fleet.key_file`: {e}"))?;
        let old = match &self.old_key_file {
            Some(p) => Some(key::load(p).map_err(|e| format!("key `fleet.old_key_file`: {e}"))?),
            None => None,
        };
        Ok(Some(key::KeySettings { current, old }))
    }

    pub(crate) fn settings(&self, listen: SocketAddr) -> crate::fleet::FleetSettings {
        use crate::fleet::{FleetSettings, OnUnavailable};
        let node = if self.node.is_empty() {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into());
            format!("{host}:{}", listen.port())
        } else {
            self.node.clone()
        };
        FleetSettings {
            redis: self.redis.clone(),
            name: self.name.clone(),
            node,
            timeout: self.timeout,
            on_unavailable: match self.on_unavailable {
                FleetOnUnavailable::Local => OnUnavailable::Local,
                FleetOnUnavailable::Refuse => OnUnavailable::Refuse,
            },
            // Read at start from their files ([`FleetConfig::keys`]).
            keys: None,
        }
    }
}

/// Crawl-delay enforcement.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolitenessConfig {
    pub mode: PolitenessMode,
    /// Minimum interval between requests to one origin even without Crawl-delay (0 = off).
    #[serde(deserialize_with = "duration")]
    pub default_interval: Duration,
    /// In delay mode, the longest a request is held before it gets 429.
    #[serde(deserialize_with = "duration")]
    pub max_wait: Duration,
    /// In delay mode, the most requests held at once per origin and agent;
    /// one more gets 429 (0 = no bound beyond `max_wait`).
    pub max_queue: usize,
    /// Largest Crawl-delay honoured; larger values are clamped.
    #[serde(deserialize_with = "duration")]
    pub max_crawl_delay: Duration,
    /// Origins whose limiter state is kept.
    pub max_tracked: usize,
    /// Whether an origin's 429 or 503 with `Retry-After` pauses it until
    /// then (else the back-off applies).
    pub honor_retry_after: bool,
    /// The most one `Retry-After` can pause an origin.
    #[serde(deserialize_with = "duration")]
    pub max_retry_after: Duration,
    /// A 429 or 503 without `Retry-After`: the first pause, doubling on
    /// each repeat (0s = off).
    #[serde(deserialize_with = "duration")]
    pub backoff: Duration,
    /// The ceiling of the doubling.
    #[serde(deserialize_with = "duration")]
    pub backoff_max: Duration,
    /// This long without a 429 or 503 after a pause resets the doubling.
    #[serde(deserialize_with = "duration")]
    pub backoff_forgive: Duration,
    /// The interval between requests to an origin is at least this times
    /// the median of its recent times to first byte (0 = off).
    pub latency_factor: f64,
    /// Most requests to one origin in flight at once, fleet-wide
    /// (0 = no cap).
    pub max_in_flight: usize,
}

/// Who may use the proxy.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Client networks allowed to connect.
    pub allow_clients: Vec<IpNet>,
    /// Basic proxy authentication; off when empty.
    pub users: Vec<crate::admit::UserConfig>,
    /// Password verifications (wrong passwords, unknown users, first use
    /// of a credential) per client address and minute; 0 = no limit.
    pub(crate) auth_failures_per_minute: u32,
}

/// Declared purposes, judged against the sites' usage preferences
/// (`Content-Usage`, `Content-Signal`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// Usage categories every request is for (`train-ai`, `search`,
    /// `ai-input`); a user's and a request's own are added to them.
    pub purposes: Vec<String>,
    /// What a preference of `n` for a declared purpose does.
    pub mode: UsageMode,
    /// Read the origins' `/.well-known/tdmrep.json` (W3C TDMRep) for
    /// requests that declare `train-ai` or `ai-input`.
    pub tdmrep: bool,
    /// Read the `<meta>` elements of HTML responses' heads (at most their
    /// first 64 KiB) for requests that declare a purpose.
    pub html_meta: bool,
    /// Licence tokens for RSL License Servers (`[[usage.licenses]]`).
    pub licenses: Vec<LicenseConfig>,
}

/// A licence token obtained from an RSL License Server, sent as
/// `Authorization: License <token>` to the content its `server=` covers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LicenseConfig {
    /// The License Server's URL, as `<content server=…>` names it.
    pub server: String,
    /// A file holding the token (read at start and on reload).
    pub token_file: PathBuf,
}

impl Default for UsageConfig {
    fn default() -> Self {
        UsageConfig {
            purposes: Vec::new(),
            mode: UsageMode::default(),
            tdmrep: true,
            html_meta: true,
            licenses: Vec::new(),
        }
    }
}

pub use crate::judge::UsageMode;
pub(crate) use crate::robots::usage::is_category;

/// Log output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

/// Diagnostic logging.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
    /// `tracing` filter, e.g. `info` or `robots_proxy=debug`; `RUST_LOG` overrides it.
    pub level: String,
}

pub use crate::response_cache::CacheMode;

/// The shared response cache (RFC 9111), under `<state_dir>/cache/`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    pub enabled: bool,
    pub mode: CacheMode,
    /// Bytes of recently used responses kept in memory (parsed headers,
    /// small bodies; all are on disk too).
    pub memory_size: u64,
    /// Bytes of responses kept on disk, in whole 4 KiB blocks per file.
    pub disk_size: u64,
    /// Larger responses are forwarded but not stored.
    pub max_object_size: u64,
    /// How long `store-all` keeps a response.
    #[serde(deserialize_with = "duration")]
    pub store_all_ttl: Duration,
    /// How long concurrent misses of one URL wait for the first one's
    /// response before going to the origin themselves.
    #[serde(deserialize_with = "duration")]
    pub lock_timeout: Duration,
    /// Objects indexed (and stored) at most: the index's memory budget,
    /// least recently used evicted with their files.
    pub max_objects: usize,
    /// Objects kept per URL (Vary variants, store-all users), the oldest
    /// evicted first.
    pub max_variants: usize,
}

impl CacheConfig {
    /// The response cache's own settings.
    pub fn settings(&self) -> crate::response_cache::CacheSettings {
        crate::response_cache::CacheSettings {
            mode: self.mode,
            memory_size: self.memory_size,
            disk_size: self.disk_size,
            max_object_size: self.max_object_size,
            store_all_ttl: self.store_all_ttl,
            lock_timeout: self.lock_timeout,
            max_objects: self.max_objects,
            max_variants: self.max_variants,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            mode: CacheMode::Rfc9111,
            memory_size: 64 << 20,
            disk_size: 1 << 30,
            max_object_size: 16 << 20,
            store_all_ttl: Duration::from_secs(24 * 3600),
            lock_timeout: Duration::from_secs(5),
            max_objects: 200_000,
            max_variants: 32,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 3128)),
            agent: "robots-proxy".into(),
            user_agent: None,
            allow_private_destinations: false,
            state_dir: None,
            shutdown_grace: Duration::from_secs(30),
            via: true,
            workers: 0,
            max_connections: 0,
            max_connections_per_client: 0,
            max_requests_per_client: 0,
            max_streams_per_tunnel: 100,
            client_header_timeout: Duration::from_secs(30),
            tunnel_idle_timeout: Duration::from_secs(5 * 60),
            agents: BTreeMap::new(),
            robots: RobotsConfig::default(),
            upstream: UpstreamConfig::default(),
            audit: AuditConfig::default(),
            tls: TlsConfig::default(),
            admin: AdminConfig::default(),
            politeness: PolitenessConfig::default(),
            access: AccessConfig::default(),
            log: LogConfig::default(),
            cache: CacheConfig::default(),
            usage: UsageConfig::default(),
            identity: IdentityConfig::default(),
            payments: PaymentsConfig::default(),
            fleet: None,
            treat_as_public: Vec::new(),
        }
    }
}

impl Default for RobotsConfig {
    fn default() -> Self {
        RobotsConfig {
            cache_entries: 100_000,
            cache_max_mib: 224,
            fetch_budget_mib: 0,
            default_ttl: Duration::from_secs(24 * 3600),
            min_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(7 * 24 * 3600),
            unreachable_retry: Duration::from_secs(5 * 60),
            stale_max: Duration::from_secs(30 * 24 * 3600),
            fetch_timeout: Duration::from_secs(10),
            max_redirects: 5,
            case_insensitive_hosts: Vec::new(),
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
            pool_idle_per_host: 256,
            pool_idle_max: 1024,
            pool_idle_timeout: Duration::from_secs(90),
            ca_files: Vec::new(),
            allow_bodies_for: Vec::new(),
            max_informational: 10,
        }
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_dir: None,
            no_intercept: Vec::new(),
            leaf_cache: 1000,
        }
    }
}

impl PolitenessConfig {
    /// Crawl-delay enforcement's own settings.
    pub(crate) fn settings(&self) -> crate::judge::politeness::PolitenessSettings {
        use crate::judge::politeness::{Mode, PolitenessSettings};
        PolitenessSettings {
            mode: match self.mode {
                PolitenessMode::Delay => Mode::Delay {
                    max_wait: self.max_wait,
                    max_queue: self.max_queue,
                },
                PolitenessMode::Reject => Mode::Reject,
            },
            default_interval: (!self.default_interval.is_zero()).then_some(self.default_interval),
            max_tracked: self.max_tracked.max(1),
            max_crawl_delay: self.max_crawl_delay,
            signals: crate::judge::politeness::SignalSettings {
                honor_retry_after: self.honor_retry_after,
                max_retry_after: self.max_retry_after,
                backoff: self.backoff,
                backoff_max: self.backoff_max,
                backoff_forgive: self.backoff_forgive,
            },
            ..PolitenessSettings::default()
        }
    }

    /// `latency_factor` and `max_in_flight`, with what they need.
    pub(crate) fn flow(&self) -> crate::judge::politeness::flow::FlowSettings {
        let settings = self.settings();
        crate::judge::politeness::flow::FlowSettings {
            latency_factor: self.latency_factor,
            max_in_flight: self.max_in_flight,
            mode: settings.mode,
            max_tracked: settings.max_tracked,
            max_crawl_delay: settings.max_crawl_delay,
        }
    }
}

impl PolitenessConfig {
    /// What is wrong with the keys of an origin's signals, each naming
    /// its key.
    fn signal_errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.max_retry_after.is_zero() {
            errors.push(
                "key `politeness.max_retry_after` must be longer than 0s (to ignore Retry-After, \
                 set `politeness.honor_retry_after = false`)"
                    .to_string(),
            );
        }
        if !self.backoff.is_zero() && self.backoff_max < self.backoff {
            errors.push(format!(
                "key `politeness.backoff_max` ({}) must be at least `politeness.backoff` ({})",
                humantime::format_duration(self.backoff_max),
                humantime::format_duration(self.backoff)
            ));
        }
        if !self.backoff.is_zero() && self.backoff_forgive.is_zero() {
            errors.push(
                "key `politeness.backoff_forgive` must be longer than 0s (with it 0s the \
                 back-off would never double)"
                    .to_string(),
            );
        }
        errors
    }
}

impl Default for PolitenessConfig {
    fn default() -> Self {
        PolitenessConfig {
            mode: PolitenessMode::Delay,
            default_interval: Duration::ZERO,
            // Long enough for a scraper's usual concurrency (Scrapy: 8
            // per domain) times a Crawl-delay of tens of seconds.
            max_wait: Duration::from_secs(600),
            max_queue: 64,
            max_crawl_delay: Duration::from_secs(60),
            max_tracked: 100_000,
            honor_retry_after: true,
            max_retry_after: Duration::from_secs(3600),
            backoff: Duration::from_secs(30),
            backoff_max: Duration::from_secs(3600),
            backoff_forgive: Duration::from_secs(600),
            latency_factor: 0.0,
            max_in_flight: 0,
        }
    }
}

/// 127.0.0.0/8 and ::1/128.
fn loopback_networks() -> Vec<IpNet> {
    ["127.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect()
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: None,
            allow_clients: loopback_networks(),
            max_connections: 16,
            max_connections_per_client: 4,
            public_proxy_url: None,
            users: Vec::new(),
        }
    }
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            allow_clients: loopback_networks(),
            users: Vec::new(),
            auth_failures_per_minute: 30,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The TOML parser's message names the line, column and key.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// A directory systemd passes in `var` (`StateDirectory=` and friends).
/// It may pass several, colon-separated; the first is ours.
fn systemd_directory(var: &str) -> Option<PathBuf> {
    let value = std::env::var_os(var)?;
    let value = value.to_string_lossy();
    let first = value.split(':').next().filter(|s| !s.is_empty())?;
    Some(PathBuf::from(first))
}

/// Reads a listen address (see [`parse_listen`]).
fn listen_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map_err(serde::de::Error::custom)
}

fn optional_listen_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    listen_addr(d).map(Some)
}

/// A listen address: `ip:port`, `[v6]:port`, or `name:port`. `localhost`
/// is 127.0.0.1 (not whichever of 127.0.0.1 and ::1 the resolver lists
/// first); another name is resolved now and its first address taken.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not an address: use ip:port or name:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: {port:?} is not a port (0-65535)"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{s:?}: cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?}: {host:?} has no address"))
}

/// Reads `fleet.redis`: one URL (a server) or a list of URLs (a Redis
/// Cluster's nodes), checked now so a bad one is reported with its line.
fn fleet_redis<'de, D: Deserializer<'de>>(d: D) -> Result<RedisTarget, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = RedisTarget;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a Redis URL or a list of Redis Cluster nodes' URLs")
        }
        fn visit_str<E: serde::de::Error>(self, url: &str) -> Result<RedisTarget, E> {
            Ok(RedisTarget::Server(url.to_string()))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<RedisTarget, A::Error> {
            let mut urls = Vec::new();
            while let Some(url) = seq.next_element::<String>()? {
                urls.push(url);
            }
            Ok(RedisTarget::Cluster(urls))
        }
    }
    let named =
        |e: &dyn std::fmt::Display| serde::de::Error::custom(format!("key `fleet.redis`: {e}"));
    let target = d.deserialize_any(Visitor).map_err(|e| named(&e))?;
    target.check().map_err(|e| named(&e))?;
    Ok(target)
}

/// Reads `humantime` durations: `30s`, `5m`, `24h`, `1h 30m`, `0s`.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?}: {e} (use e.g. \"30s\", \"5m\", \"24h\")"
        ))
    })
}

impl Config {
    /// Threads serving connections: `workers`; when it is 0,
    /// `TOKIO_WORKER_THREADS` if set, else half the CPUs, at least one.
    /// Each is an event loop of its own serving the connections given to
    /// it to their end. A proxy mostly shares its machine with clients or
    /// origins, and two thirds of a forwarded request's CPU is the
    /// kernel's: on two cores shared with the load, a second thread
    /// forwards 11% more at 32 connections but serves a quarter fewer
    /// cache hits, with a six times longer tail (docs/performance.md).
    pub fn worker_threads(&self) -> usize {
        if self.workers != 0 {
            return self.workers;
        }
        if let Some(n) = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
        {
            return n;
        }
        std::thread::available_parallelism()
            .map(|n| n.get() / 2)
            .unwrap_or(1)
            .max(1)
    }

    /// Client connections served at once: `max_connections`; when it is
    /// 0, a quarter of `open_files` (the process's open-file limit, `None`
    /// if unlimited), at least 16. Each client connection may hold an
    /// upstream socket as well; the other half of the descriptors is left
    /// to idle pooled connections, robots.txt fetches and the process's
    /// own files, so that a flood of clients makes new ones wait instead
    /// of failing connects to origins.
    pub(crate) fn max_connections(&self, open_files: Option<u64>) -> usize {
        if self.max_connections != 0 {
            return self.max_connections;
        }
        let quarter = open_files.map_or(MAX_AUTO_CONNECTIONS, |n| n / 4);
        usize::try_from(quarter)
            .unwrap_or(usize::MAX)
            .clamp(16, MAX_AUTO_CONNECTIONS as usize)
    }

    /// Client connections open at once from one address:
    /// `max_connections_per_client`; when it is 0, a quarter of
    /// `max_connections` (as resolved), at least 8, so that one address
    /// cannot take every slot.
    pub(crate) fn max_connections_per_client(&self, max_connections: usize) -> usize {
        if self.max_connections_per_client != 0 {
            return self.max_connections_per_client;
        }
        (max_connections / 4).max(8)
    }

    /// `robots.fetch_budget_mib`; when it is 0, a quarter of the robots
    /// cache's memory budget (56 MiB with the default 224), at least 8.
    pub(crate) fn robots_fetch_budget_mib(&self) -> usize {
        if self.robots.fetch_budget_mib != 0 {
            return self.robots.fetch_budget_mib;
        }
        (self.robots.cache_max_mib / 4).max(8)
    }

    /// `max_requests_per_client`; when it is 0, the connections one
    /// address may open (`max_connections_per_client` as resolved): an
    /// HTTP/1.1 client never waits, an HTTP/2 one gets the same share.
    pub(crate) fn max_requests_per_client(&self, max_connections: usize) -> usize {
        if self.max_requests_per_client != 0 {
            return self.max_requests_per_client;
        }
        self.max_connections_per_client(max_connections)
    }

    /// Parses TOML text; `origin` names the source in errors.
    pub(crate) fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: origin.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate().map_err(|message| ConfigError::Invalid {
            path: origin.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    /// Why a `log.level` would log nothing useful, if it would: each
    /// comma-separated directive is a level (`info`), or `target=level`
    /// (`robots_proxy=debug`), as `tracing`'s filter reads them; a bare word
    /// such as `verbose` would be taken as a target name and silence the rest.
    fn check_log_level(level: &str) -> Option<String> {
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let lvl = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
            if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(lvl.trim())) {
                return Some(format!(
                    "{directive:?} is not a level (trace, debug, info, warn, error, off) or target=level"
                ));
            }
        }
        None
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text, path)
    }

    /// Checks what the types cannot express, and everything `run` would
    /// refuse later (client lists, users, log level, listener clash), so
    /// `config check` and `run` agree. Every problem is reported, one per
    /// line.
    fn validate(&self) -> Result<(), String> {
        let mut errors: Vec<String> = Vec::new();
        if crate::robots::product_token(&self.agent).is_empty() {
            errors.push(format!(
                "key `agent`: {:?} has no product token (letters, digits, '-', '_')",
                self.agent
            ));
        }
        if let Some(fleet) = &self.fleet {
            // Braces would change the keys' Redis Cluster hash tag.
            for (key, value) in [("fleet.name", &fleet.name), ("fleet.node", &fleet.node)] {
                if value.contains(['{', '}']) || value.chars().any(char::is_control) {
                    errors.push(format!(
                        "key `{key}`: {value:?} may not hold braces or control characters"
                    ));
                }
            }
            if fleet.name.is_empty() {
                errors.push("key `fleet.name`: empty".into());
            }
            if let Err(e) = fleet.keys() {
                errors.push(e);
            }
            // Longer names are left out of the live nodes the others read.
            if fleet.node.len() > crate::fleet::nodes::MAX_NODE_NAME {
                errors.push(format!(
                    "key `fleet.node`: longer than {} bytes",
                    crate::fleet::nodes::MAX_NODE_NAME
                ));
            }
        }
        let factor = self.politeness.latency_factor;
        if !factor.is_finite() || factor < 0.0 {
            errors.push(format!(
                "key `politeness.latency_factor`: {factor} is not a number of 0 or more \
                 (0 = off; 1 = one response time between requests)"
            ));
        }
        for (client, token) in &self.agents {
            if crate::robots::product_token(token).is_empty() {
                errors.push(format!(
                    "key `agents.{client}`: {token:?} is not a product token"
                ));
            }
        }
        if self.workers > MAX_WORKERS {
            errors.push(format!(
                "key `workers`: {} threads is more than the {MAX_WORKERS} allowed",
                self.workers
            ));
        }
        if self.robots.min_ttl > self.robots.max_ttl {
            errors.push("key `robots.min_ttl` is larger than `robots.max_ttl`".to_string());
        }
        if self.robots.cache_entries == 0 {
            errors.push("key `robots.cache_entries` must be at least 1".to_string());
        }
        if self.robots.cache_max_mib == 0 {
            errors.push("key `robots.cache_max_mib` must be at least 1".to_string());
        }
        if self.client_header_timeout.is_zero() {
            errors.push("key `client_header_timeout` must be longer than 0s".to_string());
        }
        errors.extend(self.politeness.signal_errors());
        if self.tunnel_idle_timeout.is_zero() {
            errors.push("key `tunnel_idle_timeout` must be longer than 0s".to_string());
        }
        if self.admin.max_connections == 0 {
            errors.push("key `admin.max_connections` must be at least 1".to_string());
        }
        if self.admin.max_connections_per_client == 0 {
            errors.push("key `admin.max_connections_per_client` must be at least 1".to_string());
        }
        if let Some(url) = &self.admin.public_proxy_url
            && let Err(e) = public_proxy_address(url)
        {
            errors.push(format!("key `admin.public_proxy_url`: {e}"));
        }
        if self.max_streams_per_tunnel == 0 {
            errors.push("key `max_streams_per_tunnel` must be at least 1".to_string());
        }
        if self.tls.leaf_cache == 0 {
            errors.push("key `tls.leaf_cache` must be at least 1".to_string());
        }
        for (key, hosts) in [
            ("tls.no_intercept", &self.tls.no_intercept),
            (
                "robots.case_insensitive_hosts",
                &self.robots.case_insensitive_hosts,
            ),
            ("upstream.allow_bodies_for", &self.upstream.allow_bodies_for),
        ] {
            for host in hosts {
                let h = host.strip_prefix("*.").unwrap_or(host);
                if h.is_empty() || h.contains(['/', ':', ' ', '*']) {
                    errors.push(format!(
                        "key `{key}`: {host:?} is not a host name or `*.suffix`"
                    ));
                }
            }
        }
        for p in &self.usage.purposes {
            if !is_category(p) {
                errors.push(format!(
                    "key `usage.purposes`: {p:?} is not a usage category (lower-case, as `train-ai`)"
                ));
            }
        }
        for u in &self.access.users {
            for p in &u.purposes {
                if !is_category(p) {
                    errors.push(format!(
                        "key `access.users` ({}): purpose {p:?} is not a usage category",
                        u.name
                    ));
                }
            }
        }
        let acl = |key: &str, nets: &[IpNet]| {
            crate::admit::ClientAcl::new(nets.iter().map(|n| n.to_string()))
                .err()
                .map(|e| format!("key `{key}`: {e}"))
        };
        errors.extend(acl("access.allow_clients", &self.access.allow_clients));
        errors.extend(acl("admin.allow_clients", &self.admin.allow_clients));
        errors.extend(
            crate::admit::check_users(&self.access.users)
                .into_iter()
                .map(|e| format!("key `access.users`: {e}")),
        );
        let admin_users: Vec<UserConfig> = self
            .admin
            .users
            .iter()
            .map(AdminUser::user_config)
            .collect();
        errors.extend(
            crate::admit::check_users(&admin_users)
                .into_iter()
                .map(|e| format!("key `admin.users`: {e}")),
        );
        if let Some(e) = Self::check_log_level(&self.log.level) {
            errors.push(format!("key `log.level`: {e}"));
        }
        if self.admin.listen == Some(self.listen) && self.listen.port() != 0 {
            errors.push(format!(
                "key `admin.listen`: {} is also `listen`; the admin listener needs an address of its own",
                self.listen
            ));
        }
        if self.cache.max_object_size == 0 {
            errors.push("key `cache.max_object_size` must be at least 1".to_string());
        }
        if self.cache.max_objects == 0 {
            errors.push("key `cache.max_objects` must be at least 1".to_string());
        }
        if self.cache.max_variants == 0 {
            errors.push("key `cache.max_variants` must be at least 1".to_string());
        }
        if self.cache.disk_size < self.cache.max_object_size {
            errors
                .push("key `cache.disk_size` is smaller than `cache.max_object_size`".to_string());
        }
        if self.cache.mode == CacheMode::StoreAll && self.cache.store_all_ttl.is_zero() {
            errors.push("key `cache.store_all_ttl` must be longer than 0s".to_string());
        }
        if self.user_agent.is_some() && !self.identity.user_agent.is_empty() {
            errors.push(
                "keys `user_agent` and `identity.user_agent`: set one (identity.user_agent is \
                 also what robots.txt is fetched with)"
                    .into(),
            );
        }
        if let Err(e) = self.identity.listen_addr() {
            errors.push(e);
        }
        if let Err(e) = self.identity.build(self) {
            errors.push(e);
        }
        if let Err(e) = self.payments.build(self, None) {
            errors.push(e);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    /// The robots product token, lower-cased.
    pub(crate) fn agent_token(&self) -> String {
        crate::robots::product_token(&self.agent)
    }

    /// The User-Agent header for robots.txt fetches.
    pub(crate) fn fetch_user_agent(&self) -> String {
        if !self.identity.user_agent.is_empty() {
            return self.identity.user_agent.clone();
        }
        self.user_agent.clone().unwrap_or_else(|| {
            format!(
                "{}/{} (robots-proxy)",
                self.agent,
                env!("CARGO_PKG_VERSION")
            )
        })
    }

    /// The state directory, resolved as documented on `state_dir`.
    pub fn state_dir(&self) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        if let Some(dir) = systemd_directory("STATE_DIRECTORY") {
            return dir;
        }
        if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
            return PathBuf::from(dir).join("robots-proxy");
        }
        match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".local/state/robots-proxy"),
            None => PathBuf::from("robots-proxy-state"),
        }
    }

    /// The audit log path, resolved as documented on `audit.path`.
    pub fn audit_path(&self) -> PathBuf {
        if let Some(p) = &self.audit.path {
            return p.clone();
        }
        if let Some(dir) = systemd_directory("LOGS_DIRECTORY") {
            return dir.join("audit.jsonl");
        }
        self.state_dir().join("audit.jsonl")
    }

    /// The robots.txt archive's directory: `<state_dir>/robots-archive`.
    pub(crate) fn archive_dir(&self) -> PathBuf {
        self.state_dir().join("robots-archive")
    }

    /// The checkpoint signing key's path, resolved as documented on
    /// `audit.signing_key`; `None` when checkpoints are not signed.
    pub fn audit_signing_key(&self) -> Option<PathBuf> {
        match &self.audit.signing_key {
            AuditSigningKey::Off => None,
            AuditSigningKey::StateDir => {
                Some(self.state_dir().join("audit-key").join("signing.pem"))
            }
            AuditSigningKey::Path(path) => Some(path.clone()),
        }
    }

    /// The CA directory, resolved as documented on `tls.ca_dir`.
    pub(crate) fn ca_dir(&self) -> PathBuf {
        self.tls
            .ca_dir
            .clone()
            .unwrap_or_else(|| self.state_dir().join("ca"))
    }
}

/// The keys whose values differ between two configuration texts (dotted
/// paths: `robots.default_ttl`; an array of tables such as `access.users`
/// as one key), in order. Values are not given: some are secrets
/// (password hashes). Texts that do not parse give no keys.
pub(crate) fn changed_keys(old: &str, new: &str) -> Vec<String> {
    fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (key, value) in table {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(t) => flatten(&path, t, out),
                other => {
                    out.insert(path, other.to_string());
                }
            }
        }
    }
    let parse = |text: &str| {
        let mut out = BTreeMap::new();
        if let Ok(table) = text.parse::<toml::Table>() {
            flatten("", &table, &mut out);
        }
        out
    };
    let (old, new) = (parse(old), parse(new));
    let mut keys: Vec<String> = old
        .iter()
        .filter(|(k, v)| new.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    keys.extend(new.keys().filter(|k| !old.contains_key(*k)).cloned());
    keys.sort();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_name_what_differs_and_never_a_value() {
        let old = "agent = \"a\"\n[robots]\ndefault_ttl = \"1h\"\nmin_ttl = \"1m\"\n";
        let new = "agent = \"a\"\n[robots]\ndefault_ttl = \"2h\"\n[audit]\nlog_all = true\n";
        assert_eq!(
            changed_keys(old, new),
            ["audit.log_all", "robots.default_ttl", "robots.min_ttl"]
        );
        assert!(changed_keys(old, old).is_empty());
        assert_eq!(changed_keys(old, "not = [toml").len(), 3);
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, Path::new("test.toml"))
    }

    #[test]
    fn audit_sync_is_none_interval_or_every() {
        use crate::ops::audit::SyncPolicy;
        assert_eq!(parse("").expect("valid").audit.sync, SyncPolicy::Interval);
        for (text, policy) in [
            ("none", SyncPolicy::None),
            ("interval", SyncPolicy::Interval),
            ("every", SyncPolicy::Every),
        ] {
            let c = parse(&format!("[audit]\nsync = \"{text}\"\n")).expect("valid");
            assert_eq!(c.audit.sync, policy);
        }
        for bad in ["\"always\"", "true", "1"] {
            let e = parse(&format!("[audit]\nsync = {bad}\n"))
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("\"none\", \"interval\"")
                    && e.contains("\"every\"")
                    && e.contains("line 2"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = parse("").expect("empty config is valid");
        assert_eq!(c.listen, SocketAddr::from(([127, 0, 0, 1], 3128)));
        assert_eq!(c.agent, "robots-proxy");
        assert_eq!(c.robots.default_ttl, Duration::from_secs(86_400));
        assert!(!c.allow_private_destinations);
    }

    #[test]
    fn an_origins_signals_are_configured_and_checked() {
        let c = parse("").expect("defaults");
        let s = c.politeness.settings().signals;
        assert!(s.honor_retry_after);
        assert_eq!(
            (
                s.max_retry_after,
                s.backoff,
                s.backoff_max,
                s.backoff_forgive
            ),
            (
                Duration::from_secs(3600),
                Duration::from_secs(30),
                Duration::from_secs(3600),
                Duration::from_secs(600)
            )
        );
        let set = parse(
            "[politeness]\nhonor_retry_after = false\nbackoff = \"0s\"\nbackoff_max = \"1s\"\n",
        )
        .expect("back-off off");
        assert!(!set.politeness.honor_retry_after);
        for (text, key) in [
            ("max_retry_after = \"0s\"", "politeness.max_retry_after"),
            (
                "backoff = \"1m\"\nbackoff_max = \"30s\"",
                "politeness.backoff_max",
            ),
            ("backoff_forgive = \"0s\"", "politeness.backoff_forgive"),
            ("backoff = \"soon\"", "backoff"),
        ] {
            let err = parse(&format!("[politeness]\n{text}\n"))
                .expect_err(text)
                .to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn workers_as_configured_else_at_least_one() {
        assert_eq!(parse("workers = 3\n").expect("valid").worker_threads(), 3);
        // The automatic count (half the CPUs, or $TOKIO_WORKER_THREADS).
        assert!(parse("").expect("valid").worker_threads() >= 1);
    }

    #[test]
    fn max_connections_as_configured_else_a_quarter_of_the_open_files() {
        let set = parse("max_connections = 7\n").expect("valid");
        assert_eq!(set.max_connections(Some(1024)), 7);
        let auto = parse("").expect("valid");
        assert_eq!(auto.max_connections(Some(65536)), 16384);
        assert_eq!(auto.max_connections(Some(1024)), 256);
        assert_eq!(auto.max_connections(Some(20)), 16);
        assert_eq!(auto.max_connections(None), 1 << 18);
        assert_eq!(auto.max_connections(Some(u64::MAX)), 1 << 18);
        let err = parse("max_connections = -1\n")
            .expect_err("negative")
            .to_string();
        assert!(
            err.contains("max_connections") && err.contains("line 1"),
            "{err}"
        );
    }

    #[test]
    fn per_client_connections_as_configured_else_a_quarter_at_least_eight() {
        let set = parse("max_connections_per_client = 3\n").expect("valid");
        assert_eq!(set.max_connections_per_client(1000), 3);
        let auto = parse("").expect("valid");
        assert_eq!(auto.max_connections_per_client(1000), 250);
        assert_eq!(auto.max_connections_per_client(16), 8);
        assert_eq!(auto.max_connections_per_client(1), 8);
        assert_eq!(auto.admin.max_connections, 16);
        assert_eq!(auto.admin.allow_clients.len(), 2);
        assert_eq!(auto.client_header_timeout, Duration::from_secs(30));
        assert_eq!(auto.tunnel_idle_timeout, Duration::from_secs(300));
        let err = parse("tunnel_idle_timeout = \"0s\"\n")
            .expect_err("zero")
            .to_string();
        assert!(err.contains("tunnel_idle_timeout"), "{err}");
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse("agent = \"x\"\n\n[robots]\ncache_entrys = 5\n")
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("cache_entrys"), "{err}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let err = parse("listen = \"127.0.0.1:3128\"\n[robots]\ndefault_ttl = \"soon\"\n")
            .expect_err("bad duration")
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("soon"), "{err}");
        let err = parse("listen = \"nowhere\"\n")
            .expect_err("bad addr")
            .to_string();
        assert!(err.contains("line 1"), "{err}");
        let err = parse("listen = \"localhost:http\"\n")
            .expect_err("bad port")
            .to_string();
        assert!(
            err.contains("line 1") && err.contains("not a port"),
            "{err}"
        );
        // A name: localhost is the IPv4 loopback, whatever the resolver lists first.
        let c = parse("listen = \"localhost:3128\"\n[admin]\nlisten = \"LOCALHOST:9128\"\n")
            .expect("localhost");
        assert_eq!(c.listen, SocketAddr::from(([127, 0, 0, 1], 3128)));
        assert_eq!(
            c.admin.listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9128)))
        );
        let err = parse("[access]\nallow_clients = [\"10.0.0.0/33\"]\n")
            .expect_err("bad cidr")
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn cache_section_defaults_modes_and_errors() {
        let c = parse("").expect("valid");
        assert!(!c.cache.enabled);
        assert_eq!(c.cache.mode, CacheMode::Rfc9111);
        assert_eq!(c.cache.memory_size, 64 << 20);
        assert_eq!(c.cache.lock_timeout, Duration::from_secs(5));
        assert_eq!((c.cache.max_objects, c.cache.max_variants), (200_000, 32));
        let err = parse("[cache]\nmax_variants = 0\n")
            .expect_err("no variants")
            .to_string();
        assert!(err.contains("`cache.max_variants`"), "{err}");
        let c = parse("[cache]\nenabled = true\nmode = \"store-all\"\nstore_all_ttl = \"2h\"\n")
            .expect("valid");
        assert_eq!(c.cache.mode, CacheMode::StoreAll);
        assert_eq!(c.cache.store_all_ttl, Duration::from_secs(7200));
        let err = parse("[cache]\nsize = 3\n")
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("size") && err.contains("line 2"), "{err}");
        let err = parse("[cache]\nmode = \"never\"\n")
            .expect_err("mode")
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        let err = parse("[cache]\ndisk_size = 10\n")
            .expect_err("small")
            .to_string();
        assert!(err.contains("`cache.disk_size`"), "{err}");
    }

    #[test]
    fn a_fleet_needs_a_key_or_says_it_has_none() {
        let err = parse("[fleet]\nname = \"f\"\n")
            .expect_err("no key")
            .to_string();
        assert!(
            err.contains("`fleet.key_file`") && err.contains("init-key"),
            "{err}"
        );
        assert!(parse("[fleet]\nunauthenticated = true\n").is_ok());
        let err = parse("[fleet]\nkey_file = \"/nonexistent/fleet.key\"\n")
            .expect_err("no file")
            .to_string();
        assert!(err.contains("/nonexistent/fleet.key"), "{err}");
    }

    #[test]
    fn a_fleet_node_name_is_bounded() {
        let name = |n: usize| {
            format!(
                "[fleet]\nunauthenticated = true\nnode = \"{}\"\n",
                "n".repeat(n)
            )
        };
        assert!(parse(&name(255)).is_ok());
        let err = parse(&name(256)).expect_err("long").to_string();
        assert!(err.contains("`fleet.node`"), "{err}");
    }

    #[test]
    fn admin_roles_and_the_public_proxy_url_are_read_and_checked() {
        let c = parse(
            "[admin]\npublic_proxy_url = \"http://proxy.example.net:3128/\"\n\
             [[admin.users]]\nname = \"eve\"\nrole = \"viewer\"\npassword_hash = \"x\"\n\
             [[admin.users]]\nname = \"ops\"\npassword_hash = \"x\"\n",
        );
        // The hashes are refused by validation; the roles parse first.
        let err = c.expect_err("invalid hashes").to_string();
        assert!(err.contains("`admin.users`"), "{err}");
        let roles: AdminConfig = toml::from_str(
            "[[users]]\nname = \"eve\"\nrole = \"viewer\"\npassword_hash = \"x\"\n\
             [[users]]\nname = \"ops\"\npassword_hash = \"x\"\n",
        )
        .expect("admin table");
        assert_eq!(roles.users[0].role, AdminRole::Viewer);
        assert_eq!(roles.users[1].role, AdminRole::Operator, "the default");
        let err = parse("[[admin.users]]\nname = \"x\"\nrole = \"root\"\npassword_hash = \"x\"\n")
            .expect_err("unknown role")
            .to_string();
        assert!(err.contains("role") && err.contains("viewer"), "{err}");
        assert_eq!(
            public_proxy_address("http://proxy.example.net:3128/").as_deref(),
            Ok("proxy.example.net:3128")
        );
        assert_eq!(
            public_proxy_address("http://proxy.example.net").as_deref(),
            Ok("proxy.example.net:80")
        );
        for bad in [
            "https://p:3128",
            "p:3128",
            "http://u:p@p:3128",
            "http://p:3128/x",
        ] {
            assert!(public_proxy_address(bad).is_err(), "{bad}");
        }
        let err = parse("[admin]\npublic_proxy_url = \"ftp://p\"\n")
            .expect_err("scheme")
            .to_string();
        assert!(err.contains("`admin.public_proxy_url`"), "{err}");
        let err = parse("[admin]\nmax_connections_per_client = 0\n")
            .expect_err("zero")
            .to_string();
        assert!(err.contains("`admin.max_connections_per_client`"), "{err}");
    }

    #[test]
    fn admin_users_are_read_and_checked_like_proxy_users() {
        let c = parse(
            "[[admin.users]]\nname = \"ops\"\npassword_hash = \"$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY\"\n",
        )
        .expect("valid");
        assert_eq!(c.admin.users.len(), 1);
        assert_eq!(c.admin.users[0].user_config().name, "ops");
        assert!(parse("").expect("valid").admin.users.is_empty());
        let err = parse("[[admin.users]]\nname = \"ops\"\npassword_hash = \"plain\"\n")
            .expect_err("not a hash")
            .to_string();
        assert!(err.contains("`admin.users`"), "{err}");
        // Only a name and a hash: the proxy's per-user keys are not admin ones.
        let err = parse("[[admin.users]]\nname = \"ops\"\npassword_hash = \"x\"\nagent = \"a\"\n")
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("agent") && err.contains("line 4"), "{err}");
    }

    #[test]
    fn semantic_errors_name_the_key() {
        let err = parse("agent = \"/x\"\n")
            .expect_err("bad agent")
            .to_string();
        assert!(err.contains("`agent`"), "{err}");
        let err = parse("workers = 5000\n")
            .expect_err("too many workers")
            .to_string();
        assert!(err.contains("`workers`"), "{err}");
    }

    #[test]
    fn fleet_redis_is_one_url_or_a_list_of_cluster_nodes() {
        let c = parse("[fleet]\nunauthenticated = true\nredis = \"rediss://r.example:6380/2\"\n")
            .expect("one URL");
        assert_eq!(
            c.fleet.expect("fleet").redis,
            RedisTarget::Server("rediss://r.example:6380/2".into())
        );
        let c =
            parse("[fleet]\nunauthenticated = true\nredis = [\"redis://a:1\", \"redis://b:2\"]\n")
                .expect("a list");
        assert_eq!(
            c.fleet.expect("fleet").redis,
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        for (bad, why) in [
            ("5", "integer"),
            ("[5]", "integer"),
            ("[]", "at least one"),
            ("\"http://a:1\"", "not a Redis URL"),
            ("[\"redis://a:1\", \"rediss://b:2\"]", "TLS"),
        ] {
            let err = parse(&format!("[fleet]\nname = \"f\"\nredis = {bad}\n"))
                .expect_err(bad)
                .to_string();
            assert!(
                err.contains("`fleet.redis`") && err.contains("line 3") && err.contains(why),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn latency_factor_and_max_in_flight_are_read_and_a_bad_factor_is_named() {
        let c = parse("[politeness]\nlatency_factor = 1.5\nmax_in_flight = 4\n").expect("valid");
        assert_eq!(c.politeness.flow().latency_factor, 1.5);
        assert_eq!(c.politeness.flow().max_in_flight, 4);
        let c = parse("[politeness]\nlatency_factor = 2\n").expect("an integer is a factor too");
        assert_eq!(c.politeness.latency_factor, 2.0);
        let d = parse("").expect("defaults");
        assert_eq!(
            (d.politeness.latency_factor, d.politeness.max_in_flight),
            (0.0, 0)
        );
        for bad in ["-0.5", "nan", "inf", "-inf"] {
            let err = parse(&format!("[politeness]\nlatency_factor = {bad}\n"))
                .expect_err(bad)
                .to_string();
            assert!(err.contains("politeness.latency_factor"), "{bad}: {err}");
        }
        let err = parse("[politeness]\nmax_in_flight = -1\n").expect_err("negative");
        assert!(err.to_string().contains("max_in_flight"), "{err}");
    }
}
