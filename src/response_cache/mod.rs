//! The shared response cache (RFC 9111): policy, storage and collapsed
//! forwarding, called by the request path after robots.txt allowed a
//! request and before it is forwarded.
//!
//! ```text
//! match cache.lookup(&parts, user).await {
//!     Lookup::Hit(resp) | Lookup::Unavailable(resp) => answer resp,
//!     Lookup::Miss(p) | Lookup::Revalidate(p) => {
//!         p.add_conditional_headers(&mut parts.headers);
//!         let upstream = forward(parts).await;
//!         answer cache.complete(p, upstream).await
//!     }
//!     Lookup::Bypass => forward as today,
//! }
//! // after any forwarded request:
//! cache.invalidate(&method, &uri, status, &response_headers);
//! ```
//!
//! Modes (`cache.mode`):
//! * `rfc9111`: a shared cache as RFC 9111 describes it, deciding with
//!   the `http-cache-semantics` crate (storability, freshness, Vary,
//!   revalidation); on top of it, responses carrying Set-Cookie are never
//!   stored, nor responses varying on Authorization.
//! * `store-all`: every 200 GET is stored for `cache.store_all_ttl`,
//!   whatever its headers say, Set-Cookie included (a developer's
//!   record/replay mode, like Scrapy's DummyPolicy). Because such
//!   responses can be personal, the key includes the proxy user: one user
//!   is never served another's stored response. Vary is ignored.
//! * `offline`: only answered from the cache, stale or not (entries of
//!   either mode, `rfc9111` first, then this user's `store-all` ones); a
//!   miss is 504, and so is every request that is not a GET or HEAD: no
//!   request reaches an origin (robots.txt is still judged first, from the
//!   robots cache or its origin).

mod body;
mod metrics;
pub mod policy;
mod store;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use http_cache_semantics::{BeforeRequest, CacheOptions, CachePolicy};
use serde::Serialize;
use tokio::sync::watch;

use crate::http::body::{Body, empty_body};
use crate::http::headers::has;
use policy::{
    CACHE_STATUS, Directives, cache_status, cache_url, merge_304, policy_request, primary_key,
    storable_headers, variant_key, vary_names,
};
use store::{BodyWriter, Found, Meta, ObjKey, Store, obj_key, unix_now};

/// How far the clock a purge was stamped with (Redis's) and this node's
/// may differ: [`ResponseCache::purge_said_at`] removes what was stored
/// up to this long after the purge was said.
const CLOCK_MARGIN_SECS: u64 = 5;

/// Counters, readable at any time (see [`ResponseCache::counters`]).
#[derive(Debug, Default)]
pub struct Stats {
    hits: AtomicU64,
    misses: AtomicU64,
    revalidations: AtomicU64,
    revalidated: AtomicU64,
    stored: AtomicU64,
    too_large: AtomicU64,
    evictions_memory: AtomicU64,
    evictions_disk: AtomicU64,
    collapsed_waits: AtomicU64,
    invalidations: AtomicU64,
    corrupt: AtomicU64,
    unavailable: AtomicU64,
    delete_errors: AtomicU64,
    deletions_pending: AtomicU64,
    memory_bytes: AtomicU64,
    disk_bytes: AtomicU64,
    memory_objects: AtomicU64,
    disk_objects: AtomicU64,
}

/// A snapshot of the cache's counters, for metrics and `/explain`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheCounters {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups forwarded without a usable stored response.
    pub misses: u64,
    /// Lookups forwarded to revalidate a stored response.
    pub revalidations: u64,
    /// Revalidations answered 304: the stored response was served.
    pub revalidated: u64,
    /// Responses stored.
    pub stored: u64,
    /// Responses not stored because they passed `max_object_size`.
    pub too_large: u64,
    pub evictions_memory: u64,
    pub evictions_disk: u64,
    /// Lookups that waited for another request's response to the same URL.
    pub collapsed_waits: u64,
    /// Objects removed by unsafe requests or purges.
    pub invalidations: u64,
    /// Stored files that failed verification (deleted, served as misses).
    pub corrupt: u64,
    /// 504 answers: offline or only-if-cached misses.
    pub unavailable: u64,
    /// Files that could not be deleted, and purges that could not be
    /// recorded on disk.
    pub delete_errors: u64,
    /// Objects and files removed, their deletion queued and not done.
    pub deletions_pending: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub memory_objects: u64,
    pub disk_objects: u64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What the cache says about a request.
pub enum Lookup {
    /// Answered from the cache, with Age and Cache-Status.
    Hit(Response<Body>),
    /// A stored response must be revalidated: forward the request with
    /// [`Pending::add_conditional_headers`], then [`ResponseCache::complete`].
    Revalidate(Pending),
    /// Forward the request, then [`ResponseCache::complete`].
    Miss(Pending),
    /// 504: offline mode or `only-if-cached`, and nothing usable stored.
    Unavailable(Response<Body>),
    /// The cache does not handle this request (method, Range, no absolute
    /// URL): forward it as usual.
    Bypass,
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lookup::Hit(_) => "Hit",
            Lookup::Revalidate(_) => "Revalidate",
            Lookup::Miss(_) => "Miss",
            Lookup::Unavailable(_) => "Unavailable",
            Lookup::Bypass => "Bypass",
        })
    }
}

/// What the cache makes of an origin response ([`ResponseCache::complete`]).
pub enum Completed {
    /// The client's answer (stored while it streams, when storable).
    Response(Response<Body>),
    /// A 304 to the cache's revalidation selected no stored response
    /// (RFC 9111 §4.3.4: another ETag): forward the request once more
    /// without conditional headers ([`Pending::remove_conditional_headers`])
    /// and complete it again; a second 304 is passed on as it is. The 304
    /// comes along, for a caller that cannot refetch. (Boxed: a rare
    /// answer, and the common one stays small.)
    Refetch(Box<Pending>, Response<Body>),
}

impl Completed {
    /// The response, for callers that never revalidate (and tests).
    pub fn into_response(self) -> Option<Response<Body>> {
        match self {
            Completed::Response(r) => Some(r),
            Completed::Refetch(..) => None,
        }
    }
}

/// A request the cache is waiting an origin response for.
pub struct Pending {
    url: String,
    primary: String,
    head: bool,
    /// The client's request headers (kept in memory only: the stored
    /// request view is built from them by [`policy::policy_request`]).
    headers: HeaderMap,
    user: Option<String>,
    fwd: &'static str,
    stale: Option<Found>,
    conditional: HeaderMap,
    lock: Option<LockGuard>,
    collapsed: bool,
}

impl Pending {
    /// Whether a stored response is being revalidated.
    pub fn is_revalidation(&self) -> bool {
        self.stale.is_some()
    }

    /// Conditional headers (If-None-Match, If-Modified-Since) the
    /// forwarded request needs; empty for a plain miss.
    pub fn conditional_headers(&self) -> &HeaderMap {
        &self.conditional
    }

    /// Sets [`Pending::conditional_headers`] on a request's headers.
    pub fn add_conditional_headers(&self, headers: &mut HeaderMap) {
        for name in self.conditional.keys() {
            headers.remove(name);
            for v in self.conditional.get_all(name) {
                headers.append(name.clone(), v.clone());
            }
        }
    }

    /// Removes every conditional header from a request to refetch
    /// ([`Completed::Refetch`]): the client's own too, so that the origin
    /// answers with a whole response the cache can store.
    pub fn remove_conditional_headers(&self, headers: &mut HeaderMap) {
        for name in [
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_MATCH,
            header::IF_UNMODIFIED_SINCE,
            header::IF_RANGE,
        ] {
            headers.remove(name);
        }
    }

    /// The RFC 9211 `fwd` reason: `uri-miss`, `vary-miss`, `miss`,
    /// `stale` or `request`.
    pub fn fwd(&self) -> &'static str {
        self.fwd
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockState {
    Pending,
    Stored,
    NotStored,
}

type Locks = Arc<Mutex<HashMap<String, (u64, watch::Receiver<LockState>)>>>;

/// The leader's hold on a primary key; followers wait for its outcome.
struct LockGuard {
    locks: Locks,
    primary: String,
    id: u64,
    tx: watch::Sender<LockState>,
}

impl LockGuard {
    fn done(self, state: LockState) {
        self.tx.send_replace(state);
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if *self.tx.borrow() == LockState::Pending {
            self.tx.send_replace(LockState::NotStored);
        }
        let mut map = self.locks.lock();
        if map.get(&self.primary).is_some_and(|(id, _)| *id == self.id) {
            map.remove(&self.primary);
        }
    }
}

enum Acquired {
    Leader(LockGuard),
    Follower(watch::Receiver<LockState>),
}

/// How the response cache decides what to store and serve (`cache.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// RFC 9111 shared-cache semantics.
    Rfc9111,
    /// Every 200 GET stored for `store_all_ttl` whatever its headers,
    /// kept per proxy user (a developer's record/replay mode).
    StoreAll,
    /// Answer only from the cache; a miss is 504.
    Offline,
}

/// What the response cache did with a request, as the audit line says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from the cache.
    Hit,
    /// Not in the cache, and the cache may not go to the origin (offline
    /// mode, `only-if-cached`): a 504 of the cache's own.
    Unavailable,
    /// Not in the cache: fetched and stored.
    Miss,
    /// Stored but stale: revalidated with the origin.
    Revalidate,
    /// Not for the cache (a method or request it does not handle).
    Bypass,
}

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Unavailable => "unavailable",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Revalidate => "revalidate",
            CacheOutcome::Bypass => "bypass",
        }
    }
}

/// The response cache's settings (from `[cache]`, see
/// `crate::config::CacheConfig`).
#[derive(Clone, Debug)]
pub struct CacheSettings {
    pub mode: CacheMode,
    /// Bytes of recently used responses kept in memory.
    pub memory_size: u64,
    /// Bytes of responses kept on disk, in whole 4 KiB blocks per file.
    pub disk_size: u64,
    /// Larger responses are forwarded but not stored.
    pub max_object_size: u64,
    /// How long `store-all` keeps a response.
    pub store_all_ttl: Duration,
    /// How long concurrent misses of one URL wait for the first one's.
    pub lock_timeout: Duration,
    /// Objects indexed (and stored) at most.
    pub max_objects: usize,
    /// Objects kept per URL (Vary variants, store-all users).
    pub max_variants: usize,
}

struct Inner {
    cfg: CacheSettings,
    dir: std::path::PathBuf,
    store: Arc<Store>,
    stats: Arc<Stats>,
    locks: Locks,
    lock_ids: AtomicU64,
    /// Seconds added to the system clock (tests of freshness).
    clock_offset: AtomicU64,
}

/// The response cache. Cheap to clone.
#[derive(Clone)]
pub struct ResponseCache {
    inner: Arc<Inner>,
}

const NOT_IN_CACHE: &str = "the response is not in the cache";

impl ResponseCache {
    /// Opens the cache stored in `dir` (normally `<state_dir>/cache`),
    /// creating it, and rebuilds its index from the files there.
    pub fn open(cfg: &CacheSettings, dir: &Path) -> std::io::Result<ResponseCache> {
        let stats = Arc::new(Stats::default());
        let limits = store::Limits {
            memory_size: cfg.memory_size,
            disk_size: cfg.disk_size,
            max_objects: cfg.max_objects,
            max_variants: cfg.max_variants,
        };
        let store = Store::open(dir, &limits, stats.clone())?;
        Ok(ResponseCache {
            inner: Arc::new(Inner {
                cfg: cfg.clone(),
                dir: dir.to_path_buf(),
                store,
                stats,
                locks: Arc::default(),
                lock_ids: AtomicU64::new(0),
                clock_offset: AtomicU64::new(0),
            }),
        })
    }

    /// Moves the cache's clock forward (tests of freshness; freshness is
    /// wall-clock time, as HTTP dates are).
    #[doc(hidden)]
    pub fn advance_clock(&self, by: Duration) {
        self.inner
            .clock_offset
            .fetch_add(by.as_secs(), Ordering::Relaxed);
    }

    fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.inner.clock_offset.load(Ordering::Relaxed))
    }

    /// The counters now.
    pub fn counters(&self) -> CacheCounters {
        let s = &self.inner.stats;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheCounters {
            hits: g(&s.hits),
            misses: g(&s.misses),
            revalidations: g(&s.revalidations),
            revalidated: g(&s.revalidated),
            stored: g(&s.stored),
            too_large: g(&s.too_large),
            evictions_memory: g(&s.evictions_memory),
            evictions_disk: g(&s.evictions_disk),
            collapsed_waits: g(&s.collapsed_waits),
            invalidations: g(&s.invalidations),
            corrupt: g(&s.corrupt),
            unavailable: g(&s.unavailable),
            delete_errors: g(&s.delete_errors),
            deletions_pending: g(&s.deletions_pending),
            memory_bytes: g(&s.memory_bytes),
            disk_bytes: g(&s.disk_bytes),
            memory_objects: g(&s.memory_objects),
            disk_objects: g(&s.disk_objects),
        }
    }

    /// Looks `req` up. Its URI must be absolute with its scheme (an
    /// intercepted HTTPS request as `https://...`). `user` is the proxy
    /// user, if any (it keys `store-all` entries).
    pub async fn lookup(&self, req: &http::request::Parts, user: Option<&str>) -> Lookup {
        self.lookup_inner(req, user, true).await
    }

    async fn lookup_inner(
        &self,
        req: &http::request::Parts,
        user: Option<&str>,
        may_wait: bool,
    ) -> Lookup {
        let head = req.method == Method::HEAD;
        let mode = self.inner.cfg.mode;
        if req.method != Method::GET && !head {
            // Offline reaches no origin at all, for any method.
            if mode == CacheMode::Offline {
                return Lookup::Unavailable(self.unavailable("offline mode"));
            }
            return Lookup::Bypass;
        }
        let Some(url) = cache_url(&req.uri) else {
            return Lookup::Bypass;
        };
        if has(&req.headers, &header::RANGE) && mode != CacheMode::Offline {
            return Lookup::Bypass;
        }
        // A WebSocket (or other) upgrade is a connection, not a resource.
        if has(&req.headers, &header::UPGRADE) {
            if mode == CacheMode::Offline {
                return Lookup::Unavailable(self.unavailable("offline mode"));
            }
            return Lookup::Bypass;
        }
        let only_if_cached = has(&req.headers, &header::CACHE_CONTROL)
            && Directives::parse(&req.headers).has("only-if-cached");
        let now = self.now();
        let hit_params = if may_wait { "hit" } else { "hit; collapsed" };
        match mode {
            CacheMode::Offline => {
                let found = match self
                    .find(&primary_key(&url, None, false), &req.headers)
                    .await
                {
                    Some(f) => Some(f),
                    None => {
                        self.find(&primary_key(&url, user, true), &req.headers)
                            .await
                    }
                };
                if let Some(f) = found
                    && let Some(r) = self
                        .serve(&f, head, &req.headers, "hit; detail=offline", now)
                        .await
                {
                    return Lookup::Hit(r);
                }
                Lookup::Unavailable(self.unavailable("offline mode"))
            }
            CacheMode::StoreAll => {
                let primary = primary_key(&url, user, true);
                let found = self.find(&primary, &req.headers).await;
                let mut fwd = "uri-miss";
                if let Some(f) = &found {
                    fwd = "stale";
                    if f.meta.expires_at.is_some_and(|e| e > unix_now(now)) {
                        if let Some(r) = self.serve(f, head, &req.headers, hit_params, now).await {
                            return Lookup::Hit(r);
                        }
                        fwd = "miss";
                    }
                }
                if only_if_cached {
                    return Lookup::Unavailable(self.unavailable("only-if-cached"));
                }
                self.miss(req, user, url, primary, fwd, None, may_wait)
                    .await
            }
            CacheMode::Rfc9111 => {
                let primary = primary_key(&url, None, false);
                let vary = self.inner.store.vary_of(&primary);
                let found = match &vary {
                    Some(v) => {
                        self.inner
                            .store
                            .get(&obj_key(&variant_key(&primary, v, &req.headers)))
                            .await
                    }
                    None => None,
                };
                let mut fwd = if vary.is_some() || self.inner.store.has_url(&url) {
                    "vary-miss"
                } else {
                    "uri-miss"
                };
                let mut stale = None;
                // A request without directives of its own (no Cache-Control,
                // no Pragma) for a fresh stored response is a hit: what the
                // policy's before_request would answer (found by this
                // request's variant key, so Vary matches), at a fraction
                // of its cost.
                let plain_request = !has(&req.headers, &header::CACHE_CONTROL)
                    && !has(&req.headers, &header::PRAGMA);
                if let Some(f) = &found
                    && plain_request
                    && f.meta.is_fresh(now)
                {
                    if let Some(r) = self.serve(f, head, &req.headers, hit_params, now).await {
                        return Lookup::Hit(r);
                    }
                    fwd = "miss";
                } else if let Some(f) = found {
                    let Some(preq) = policy_request(Method::GET, &url, &req.headers, &f.meta.vary)
                    else {
                        return Lookup::Bypass;
                    };
                    match f.meta.policy.before_request(&preq, now) {
                        BeforeRequest::Fresh(_) => {
                            if let Some(r) =
                                self.serve(&f, head, &req.headers, hit_params, now).await
                            {
                                return Lookup::Hit(r);
                            }
                            fwd = "miss";
                        }
                        BeforeRequest::Stale { request, matches } => {
                            fwd = if !matches {
                                "vary-miss"
                            } else if f.meta.policy.is_stale(now) {
                                "stale"
                            } else {
                                "request"
                            };
                            if matches && !head {
                                let mut cond = HeaderMap::new();
                                for name in [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE] {
                                    for v in request.headers.get_all(&name) {
                                        cond.append(name.clone(), v.clone());
                                    }
                                }
                                stale = Some((f, cond));
                            }
                        }
                    }
                }
                if only_if_cached {
                    return Lookup::Unavailable(self.unavailable("only-if-cached"));
                }
                self.miss(req, user, url, primary, fwd, stale, may_wait)
                    .await
            }
        }
    }

    async fn find(&self, primary: &str, headers: &HeaderMap) -> Option<Found> {
        let vary = self.inner.store.vary_of(primary)?;
        self.inner
            .store
            .get(&obj_key(&variant_key(primary, &vary, headers)))
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn miss(
        &self,
        req: &http::request::Parts,
        user: Option<&str>,
        url: String,
        primary: String,
        fwd: &'static str,
        stale: Option<(Found, HeaderMap)>,
        may_wait: bool,
    ) -> Lookup {
        let head = req.method == Method::HEAD;
        let mut pending = Pending {
            url,
            primary,
            head,
            headers: req.headers.clone(),
            user: user.map(str::to_string),
            fwd,
            stale: None,
            conditional: HeaderMap::new(),
            lock: None,
            collapsed: !may_wait,
        };
        let revalidate = stale.is_some();
        if let Some((f, cond)) = stale {
            pending.stale = Some(f);
            pending.conditional = cond;
        }
        // A HEAD is forwarded as it is: its response has no body to store.
        if !head {
            match self.acquire(&pending.primary) {
                Acquired::Leader(g) => pending.lock = Some(g),
                Acquired::Follower(mut rx) if may_wait => {
                    bump(&self.inner.stats.collapsed_waits);
                    let stored = match tokio::time::timeout(
                        self.inner.cfg.lock_timeout,
                        rx.wait_for(|s| *s != LockState::Pending),
                    )
                    .await
                    {
                        Ok(Ok(s)) => *s == LockState::Stored,
                        _ => false,
                    };
                    drop(rx);
                    if stored {
                        return Box::pin(self.lookup_inner(req, user, false)).await;
                    }
                    pending.collapsed = true;
                    pending.fwd = "miss";
                }
                Acquired::Follower(_) => {}
            }
        }
        if revalidate {
            bump(&self.inner.stats.revalidations);
            Lookup::Revalidate(pending)
        } else {
            bump(&self.inner.stats.misses);
            Lookup::Miss(pending)
        }
    }

    fn acquire(&self, primary: &str) -> Acquired {
        let mut map = self.inner.locks.lock();
        if let Some((_, rx)) = map.get(primary)
            && *rx.borrow() == LockState::Pending
            && rx.has_changed().is_ok()
        {
            return Acquired::Follower(rx.clone());
        }
        let (tx, rx) = watch::channel(LockState::Pending);
        let id = self.inner.lock_ids.fetch_add(1, Ordering::Relaxed);
        map.insert(primary.to_string(), (id, rx));
        Acquired::Leader(LockGuard {
            locks: self.inner.locks.clone(),
            primary: primary.to_string(),
            id,
            tx,
        })
    }

    /// A stored response as an answer: its headers, Content-Length, Age
    /// and Cache-Status; `None` when its body failed verification.
    /// A client's own conditional request that the stored response
    /// satisfies is answered 304 (RFC 9111 §4.3.2), without its body.
    async fn serve(
        &self,
        f: &Found,
        head: bool,
        req: &HeaderMap,
        params: &str,
        now: SystemTime,
    ) -> Option<Response<Body>> {
        let not_modified = f.meta.status == 200 && policy::not_modified(req, &f.meta.headers);
        let body = if not_modified || head {
            empty_body()
        } else {
            self.inner.store.open_body(f).await?
        };
        bump(&self.inner.stats.hits);
        let mut resp = self.stored_response(&f.meta, body, params, now);
        if not_modified {
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            resp.headers_mut().remove(header::CONTENT_LENGTH);
        }
        Some(resp)
    }

    fn stored_response(
        &self,
        meta: &Meta,
        body: Body,
        params: &str,
        now: SystemTime,
    ) -> Response<Body> {
        let mut resp = Response::new(body);
        *resp.status_mut() = StatusCode::from_u16(meta.status).unwrap_or(StatusCode::OK);
        *resp.headers_mut() = meta.headers.clone();
        let h = resp.headers_mut();
        if meta.status != 204 && meta.status != 304 {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(meta.body_len));
        }
        h.insert(
            header::AGE,
            HeaderValue::from(meta.policy.age(now).as_secs()),
        );
        h.insert(CACHE_STATUS.clone(), cache_status(params));
        resp
    }

    fn unavailable(&self, why: &str) -> Response<Body> {
        bump(&self.inner.stats.unavailable);
        // The proxy's own plain-text answer (no-store, like every other).
        let mut resp = crate::http::body::text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("robots-proxy: {why}: {NOT_IN_CACHE} (504, RFC 9111 section 5.2.1.7)\n"),
        );
        let h = resp.headers_mut();
        let detail = if why == "offline mode" {
            "offline"
        } else {
            "only-if-cached"
        };
        h.insert(
            CACHE_STATUS.clone(),
            cache_status(&format!("fwd=miss; detail={detail}")),
        );
        resp
    }

    /// Takes the origin's response to a [`Pending`] request: a 304 to a
    /// revalidation refreshes the stored response and serves it (or asks
    /// for a refetch when it selects none); a storable response is stored
    /// while it streams to the client (never held whole; past
    /// `max_object_size` storing stops and the partial file is dropped,
    /// the client still gets every byte). Adds Cache-Status.
    pub async fn complete(&self, mut p: Pending, upstream: Response<Body>) -> Completed {
        let now = self.now();
        let (mut parts, body) = upstream.into_parts();
        if parts.status == StatusCode::NOT_MODIFIED
            && let Some(found) = p.stale.take()
        {
            if policy::selects(&found.meta.headers, &parts.headers) {
                if let Some(resp) = self.refresh(&p, &found, &parts, now).await {
                    bump(&self.inner.stats.revalidated);
                    if let Some(l) = p.lock.take() {
                        l.done(LockState::Stored);
                    }
                    return Completed::Response(resp);
                }
            } else if !policy::answers_client(&p.headers, &parts.headers) {
                // Nothing stored is what the origin says is current: its
                // 304 has no body to give this client. Ask for the whole
                // response (once: `stale` is gone now).
                p.conditional.clear();
                parts.headers.insert(
                    CACHE_STATUS.clone(),
                    cache_status(&format!("fwd={}; fwd-status=304", p.fwd)),
                );
                return Completed::Refetch(Box::new(p), Response::from_parts(parts, body));
            }
            // Otherwise the 304 answers the client's own conditional: it
            // goes on as it is, and the stored response stays as it was.
        }
        let mut params = format!("fwd={}; fwd-status={}", p.fwd, parts.status.as_u16());
        if p.collapsed {
            params.push_str("; collapsed");
        }
        let plan = self.plan_store(&p, &parts, now);
        let writer = match plan {
            Some(_) => self.inner.store.writer().await.ok(),
            None => None,
        };
        let (Some((key, meta)), Some(writer)) = (plan, writer) else {
            parts
                .headers
                .insert(CACHE_STATUS.clone(), cache_status(&params));
            return Completed::Response(Response::from_parts(parts, body));
        };
        params.push_str("; stored");
        parts
            .headers
            .insert(CACHE_STATUS.clone(), cache_status(&params));
        let exact = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let (tx, client_body) = body::channel(exact);
        let cap = self.inner.cfg.max_object_size;
        let stats = self.inner.stats.clone();
        let lock = p.lock.take();
        tokio::spawn(tee(body, tx, writer, cap, exact, key, meta, lock, stats));
        Completed::Response(Response::from_parts(parts, client_body))
    }

    /// What to store for an origin response, if anything: its key and
    /// meta (body fields filled in when the body is complete).
    fn plan_store(
        &self,
        p: &Pending,
        parts: &http::response::Parts,
        now: SystemTime,
    ) -> Option<(ObjKey, Meta)> {
        if p.head {
            return None;
        }
        let status = parts.status.as_u16();
        let len = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if len.is_some_and(|l| l > self.inner.cfg.max_object_size) {
            bump(&self.inner.stats.too_large);
            return None;
        }
        let store_all = self.inner.cfg.mode == CacheMode::StoreAll;
        let vary = if store_all {
            Vec::new()
        } else {
            let v = vary_names(&parts.headers)?;
            if v.iter()
                .any(|n| n == "authorization" || n == "proxy-authorization")
            {
                return None;
            }
            v
        };
        let preq = policy_request(Method::GET, &p.url, &p.headers, &vary)?;
        let policy = CachePolicy::new_options(
            &preq,
            &policy::policy_response(parts, now),
            now,
            CacheOptions::default(),
        );
        let expires_at = if store_all {
            if status != 200 {
                return None;
            }
            Some(unix_now(now) + self.inner.cfg.store_all_ttl.as_secs())
        } else {
            if status == 206
                || status == 304
                || parts.headers.contains_key(header::SET_COOKIE)
                || !policy.is_storable()
            {
                return None;
            }
            // Stale at once and nothing to revalidate it with: useless.
            if policy.is_stale(now)
                && !parts.headers.contains_key(header::ETAG)
                && !parts.headers.contains_key(header::LAST_MODIFIED)
            {
                return None;
            }
            None
        };
        let key = obj_key(&variant_key(&p.primary, &vary, &p.headers));
        let meta = Meta {
            url: p.url.clone(),
            primary: p.primary.clone(),
            vary,
            user: if store_all { p.user.clone() } else { None },
            policy,
            status,
            headers: storable_headers(&parts.headers),
            body_file: String::new(),
            body_len: 0,
            body_sha256: String::new(),
            stored_at: unix_now(now),
            expires_at,
            fresh_until: Default::default(),
        };
        Some((key, meta))
    }

    /// Serves a stored response refreshed by a 304 that selected it (RFC
    /// 9111 §4.3.4); `None` when its body failed verification. The 304's
    /// Set-Cookie goes to this client only. A 304 carrying `no-store` or
    /// `private` makes the updated response one a shared cache must not
    /// store (RFC 9111 §3, §5.2.2.5, §5.2.2.7): this client is answered
    /// with it and the stored response is removed, not kept under the
    /// headers the origin no longer sends.
    async fn refresh(
        &self,
        p: &Pending,
        found: &Found,
        parts: &http::response::Parts,
        now: SystemTime,
    ) -> Option<Response<Body>> {
        let mut meta = (*found.meta).clone();
        meta.headers = merge_304(&meta.headers, &parts.headers);
        let preq = policy_request(Method::GET, &p.url, &p.headers, &meta.vary)?;
        let mut merged = Response::new(());
        *merged.status_mut() = StatusCode::from_u16(meta.status).unwrap_or(StatusCode::OK);
        *merged.headers_mut() = meta.headers.clone();
        policy::normalise_for_policy(merged.headers_mut(), now);
        meta.policy = CachePolicy::new_options(&preq, &merged, now, CacheOptions::default());
        meta.stored_at = unix_now(now);
        let d = Directives::parse(&parts.headers);
        let keep = !d.has("no-store") && !d.has("private");
        // The client's own conditional may be satisfied too: 304 to it.
        let not_modified = meta.status == 200 && policy::not_modified(&p.headers, &meta.headers);
        let body = if p.head || not_modified {
            empty_body()
        } else {
            self.inner.store.open_body(found).await?
        };
        if keep {
            self.inner.store.update_meta(found.key, meta.clone()).await;
        } else if self.inner.store.remove(&found.key) {
            bump(&self.inner.stats.invalidations);
        }
        let params = format!(
            "fwd=stale; fwd-status=304{}",
            if p.collapsed { "; collapsed" } else { "" }
        );
        let mut resp = self.stored_response(&meta, body, &params, now);
        // This client's cookies, as the origin just set them: they replace
        // any stored under the same name (store-all keeps Set-Cookie;
        // Set-Cookie2 is stored as any header).
        for (name, _) in policy::set_cookies(&parts.headers) {
            resp.headers_mut().remove(name);
        }
        for (name, value) in policy::set_cookies(&parts.headers) {
            resp.headers_mut().append(name.clone(), value.clone());
        }
        if not_modified {
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            resp.headers_mut().remove(header::CONTENT_LENGTH);
        }
        Some(resp)
    }

    /// RFC 9111 §4.4: a successful (2xx, 3xx) unsafe request invalidates
    /// its target URI and the same-origin Location and Content-Location
    /// of its response. Returns how many objects were removed.
    pub fn invalidate(
        &self,
        method: &Method,
        uri: &Uri,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> usize {
        if method.is_safe() || !(status.is_success() || status.is_redirection()) {
            return 0;
        }
        let Some(url) = cache_url(uri) else {
            return 0;
        };
        let mut n = self.inner.store.purge_url(&url);
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let target = headers
                .get(&name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| policy::invalidation_target(&url, v.trim()));
            if let Some(t) = target
                && t != url
            {
                n += self.inner.store.purge_url(&t);
            }
        }
        self.inner
            .stats
            .invalidations
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Removes everything stored for `url` (every variant and user).
    pub fn purge_url(&self, url: &str) -> usize {
        let url = normalize(url);
        let n = self.inner.store.purge_url(&url);
        self.inner
            .stats
            .invalidations
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// A purge another node of a fleet said at `said` (seconds since the
    /// epoch, on Redis's clock), heard late: removes what is stored for
    /// `url` (or under it, `prefix`) at or before then, plus a margin for
    /// the clocks; what was stored since is kept. `url` `None`: every
    /// object stored by then. Returns how many objects went.
    pub fn purge_said_at(&self, url: Option<&str>, prefix: bool, said: u64) -> usize {
        let before = said.saturating_add(CLOCK_MARGIN_SECS);
        let n = match url {
            None => self.inner.store.purge_prefix_before("", before),
            Some(u) if prefix => self.inner.store.purge_prefix_before(&normalize(u), before),
            Some(u) => self.inner.store.purge_url_before(&normalize(u), before),
        };
        self.inner
            .stats
            .invalidations
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Removes everything stored under URLs starting with `prefix`.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        let prefix = normalize(prefix);
        let n = self.inner.store.purge_prefix(&prefix);
        self.inner
            .stats
            .invalidations
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Resolves once the files of everything removed so far are deleted
    /// (the cache's janitor deletes them after the index let them go).
    pub async fn settled(&self) {
        self.inner.store.settled().await;
    }

    /// On a graceful stop: waits up to `limit` for the janitor to delete
    /// the files of everything removed so far, and leaves what is left
    /// then to the next start (which deletes it; the purges are recorded
    /// so that no purged response is served again). Returns how many
    /// deletions were left.
    pub async fn finish_deletions(&self, limit: Duration) -> u64 {
        if tokio::time::timeout(limit, self.settled()).await.is_ok() {
            return 0;
        }
        self.inner.store.abandon_deletions();
        self.counters().deletions_pending
    }

    /// What is stored for `url`, for `/explain`.
    pub fn describe(&self, url: &str) -> serde_json::Value {
        let url = normalize(url);
        let now = self.now();
        let entries: Vec<serde_json::Value> = self
            .inner
            .store
            .entries_for_url(&url)
            .into_iter()
            .map(|(m, in_memory)| {
                let h = |n: header::HeaderName| {
                    m.headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let fresh = match m.expires_at {
                    Some(e) => e > unix_now(now),
                    None => !m.policy.is_stale(now),
                };
                serde_json::json!({
                    "status": m.status,
                    "vary": m.vary,
                    "per_user": m.user.is_some(),
                    "body_bytes": m.body_len,
                    "tiers": if in_memory { vec!["memory", "disk"] } else { vec!["disk"] },
                    "stored_at": m.stored_at,
                    "age_s": m.policy.age(now).as_secs(),
                    "ttl_s": match m.expires_at {
                        Some(e) => e.saturating_sub(unix_now(now)),
                        None => m.policy.time_to_live(now).as_secs(),
                    },
                    "fresh": fresh,
                    "etag": h(header::ETAG),
                    "last_modified": h(header::LAST_MODIFIED),
                    "cache_control": h(header::CACHE_CONTROL),
                })
            })
            .collect();
        serde_json::json!({
            "url": url,
            "mode": self.mode_name(),
            "stored": entries,
        })
    }

    /// `cache.mode` as the configuration spells it.
    pub fn mode_name(&self) -> &'static str {
        match self.inner.cfg.mode {
            CacheMode::Rfc9111 => "rfc9111",
            CacheMode::StoreAll => "store-all",
            CacheMode::Offline => "offline",
        }
    }

    /// The directory the cache is stored in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Marks a response the cache did not handle (`Lookup::Bypass`).
    pub fn mark_bypass(resp: &mut Response<Body>) {
        resp.headers_mut()
            .insert(CACHE_STATUS.clone(), cache_status("fwd=bypass"));
    }
}

fn normalize(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| cache_url(&u))
        .unwrap_or_else(|| url.to_string())
}

/// Streams `upstream` to the client and, up to `cap` bytes, to `writer`;
/// stores it when complete, then releases the collapsed-forwarding lock.
/// With a known length the store happens before the last bytes go to
/// the client, so the client's next request already finds it. A client
/// that goes away does not stop the storing (followers wait for it); an
/// upstream error does.
#[allow(clippy::too_many_arguments)]
async fn tee(
    mut upstream: Body,
    tx: body::FrameTx,
    writer: BodyWriter,
    cap: u64,
    expected: Option<u64>,
    key: ObjKey,
    meta: Meta,
    lock: Option<LockGuard>,
    stats: Arc<Stats>,
) {
    let mut writer = Some(writer);
    let mut pending = Some((key, meta, lock));
    let mut client = true;
    let mut total = 0u64;
    loop {
        let frame = match upstream.frame().await {
            None => {
                if let (Some(w), Some(p)) = (writer.take(), pending.take()) {
                    store(w, p, &stats).await;
                }
                break;
            }
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                if client {
                    let _ = tx.send(Err(e)).await;
                }
                break;
            }
        };
        if let Some(data) = frame.data_ref() {
            total += data.len() as u64;
            if let Some(w) = writer.as_mut() {
                if total > cap {
                    writer = None;
                    bump(&stats.too_large);
                } else if let Err(e) = w.write(data).await {
                    tracing::warn!(error = %e, "cache: could not write a response");
                    writer = None;
                }
            }
            if expected == Some(total)
                && let (Some(w), Some(p)) = (writer.take(), pending.take())
            {
                store(w, p, &stats).await;
            }
        }
        if client && tx.send(Ok(frame)).await.is_err() {
            client = false;
        }
        if !client && writer.is_none() {
            break;
        }
    }
    // Not stored (upstream error, over the cap, client gone): the partial
    // file goes with `writer`, and waiting requests go to the origin.
    drop(writer);
    drop(pending);
    drop(tx);
}

/// Puts a complete body in place and releases the lock with the outcome.
async fn store(writer: BodyWriter, pending: (ObjKey, Meta, Option<LockGuard>), stats: &Stats) {
    let (key, meta, lock) = pending;
    let state = match writer.finish(key, meta).await {
        Ok(()) => {
            bump(&stats.stored);
            LockState::Stored
        }
        Err(e) => {
            tracing::warn!(error = %e, "cache: could not store a response");
            LockState::NotStored
        }
    };
    if let Some(l) = lock {
        l.done(state);
    }
}

#[cfg(test)]
mod tests;
