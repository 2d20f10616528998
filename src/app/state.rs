//! What the admin listener and its web view see of the running proxy:
//! the [`ProxyView`] the proxy implements, the reloadable settings it
//! hands out, and the state every admin request is served with.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http::Uri;

use crate::admit::ProxyAuth;
use crate::judge::Gate;
use crate::judge::politeness::{Politeness, PolitenessSettings};
use crate::metrics::Registry;
use crate::ops::activity::Activity;
use crate::server::metrics::ServerMetrics;

/// What the admin endpoints see of the running proxy.
pub(crate) trait ProxyView: Send + Sync {
    /// The proxy's gate: /explain judges with it, /purge empties its cache.
    fn gate(&self) -> &Gate;
    /// Whether the audit log can be written (the proxy forwards nothing
    /// until it can).
    fn audit_writable(&self) -> bool;
    /// The reloadable settings the admin endpoints read, as they are now.
    fn admin_settings(&self) -> AdminSettings;
    /// The response cache, if enabled: /explain describes, /purge empties it.
    fn response_cache(&self) -> Option<&crate::response_cache::ResponseCache> {
        None
    }
    /// Decisions over time and the top refusals, for the web view.
    fn activity(&self) -> &Activity;
    /// Whether allowed requests get audit lines (`audit.log_all`).
    fn audit_log_all(&self) -> bool;
    /// The interception CA: its certificate is served, never its key.
    fn ca(&self) -> &crate::tls::Ca;
    /// Requests held for their Crawl-delay slot now.
    fn politeness_waiting(&self) -> i64;
    /// Writes an admin action's audit line, and lists it in the web view
    /// once written.
    fn record_admin(&self, event: crate::ops::audit::AdminEvent) -> std::io::Result<()>;
}

/// The reloadable settings the admin endpoints read.
pub(crate) struct AdminSettings {
    /// Default robots product token, for /explain without `agent`.
    pub(crate) agent: String,
    /// Crawl-delay state, for /explain's politeness field.
    pub(crate) politeness: Arc<Politeness>,
    /// `client_header_timeout`, for new admin connections.
    pub(crate) header_timeout: Duration,
    /// `usage.purposes` and `usage.mode`, for /explain's usage field.
    pub(crate) purposes: Vec<String>,
    pub(crate) usage_mode: crate::judge::UsageMode,
    /// `[[usage.licenses]]`, for /explain's RSL signals.
    pub(crate) usage_licenses: Arc<[(String, http::HeaderValue)]>,
    /// `[[admin.users]]`: credentials every endpoint but /healthz and
    /// /readyz asks for, if any are configured.
    pub(crate) auth: Option<Arc<ProxyAuth>>,
    /// `[[admin.users]] role`, by user name.
    pub(crate) roles: HashMap<String, crate::admit::AdminRole>,
    /// `admin.public_proxy_url` as `host:port`, for the `/ca` page.
    pub(crate) public_proxy: Option<String>,
    /// `politeness.latency_factor` and `max_in_flight` in force, for
    /// /explain.
    pub(crate) flow: crate::judge::politeness::flow::Flow,
    /// `politeness.*` as in force, for the web view.
    pub(crate) politeness_settings: PolitenessSettings,
    /// `[fleet]`: a purge reaches every node, and admin password
    /// verifications per address are taken from the fleet's allowance, as
    /// proxy ones are.
    pub(crate) fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `[identity]`: its documents are served without credentials.
    pub(crate) identity: Option<Arc<crate::identity::Identity>>,
}

/// A reload asked through the admin listener (`POST /reload`), and where
/// to answer once it is done.
pub(crate) struct ReloadAsk {
    /// Who asked, for the log and the audit line.
    pub(crate) by: String,
    /// The admin client's address.
    pub(crate) client: Option<String>,
    pub(crate) reply: tokio::sync::oneshot::Sender<ReloadDone>,
}

/// How a reload ended.
#[derive(Debug)]
pub(crate) enum ReloadDone {
    /// Applied: the keys whose text changed, those that need a restart
    /// to apply, and in a fleet whether the other nodes were told.
    Applied {
        changed: Vec<String>,
        needs_restart: Vec<String>,
        fleet: Option<bool>,
    },
    /// The new configuration was refused; the running one stays.
    Rejected(String),
}

/// Everything the admin listener needs.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub(crate) proxy: Arc<dyn ProxyView>,
    pub(crate) metrics: Registry,
    /// Where the admin listener counts the connections it refuses.
    pub(crate) listeners: ServerMetrics,
    /// False once shutdown begins: /readyz answers 503.
    pub(crate) ready: Arc<AtomicBool>,
    /// The proxy's own address, for the web view's examples.
    pub(crate) listen: SocketAddr,
    /// Where `POST /reload` asks for a reload; `None` where nothing
    /// reloads (a proxy built without the `run` command).
    pub(crate) reload: Option<tokio::sync::mpsc::Sender<ReloadAsk>>,
}

/// The query parameters of `uri`, decoded.
pub(crate) fn query(uri: &Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}
