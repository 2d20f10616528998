//! Who may use the proxy: a client address allow list ([`ClientAcl`]) and
//! HTTP Basic proxy authentication ([`ProxyAuth`]).
//!
//! Passwords are stored as Argon2id PHC strings (`$argon2id$v=19$m=...`),
//! made by [`hash_password`] (`robots-proxy hash-password`). Argon2 is
//! deliberately slow, so a successful verification is remembered per user as
//! an HMAC-SHA256 of the supplied credentials under a per-process random key;
//! later requests with the same credentials cost one HMAC instead of one
//! Argon2 run. The cache holds one entry per configured user, so it is
//! bounded by the user list, and it is dropped with the `ProxyAuth` on reload.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// Argon2 cost parameters for [`hash_password_with`].
pub use argon2::Params;
use argon2::password_hash::phc::{Output, PasswordHash, Salt};
use argon2::password_hash::{CustomizedPasswordHasher, PasswordHasher};
use argon2::{Algorithm, Argon2, Block, Version};
use base64::Engine as _;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::header::{HeaderName, HeaderValue, PROXY_AUTHENTICATE};
use http::{Response, StatusCode};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use ring::hmac;
use ring::rand::SystemRandom;

// ---------------------------------------------------------------------------
// Client ACL
// ---------------------------------------------------------------------------

/// A bad client allow list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// An entry is neither a CIDR network nor an IP address.
    #[error("client allow list entry {entry:?} is not a CIDR network or IP address")]
    BadEntry {
        /// The entry as written.
        entry: String,
    },
    /// The list is empty, which would refuse every client.
    #[error("client allow list is empty: it would refuse every client")]
    Empty,
}

/// Client address allow list; the default admits loopback only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAcl {
    nets: Vec<IpNet>,
}

impl Default for ClientAcl {
    fn default() -> Self {
        Self::loopback()
    }
}

impl ClientAcl {
    /// 127.0.0.0/8 and ::1/128.
    pub(crate) fn loopback() -> Self {
        ClientAcl {
            nets: vec![
                IpNet::V4(Ipv4Net::new_assert([127, 0, 0, 0].into(), 8)),
                IpNet::V6(Ipv6Net::new_assert(std::net::Ipv6Addr::LOCALHOST, 128)),
            ],
        }
    }

    /// Parses entries such as `10.0.0.0/8`, `2001:db8::/32` or a bare
    /// address (a single host). Host bits are ignored (`10.1.2.3/8` is
    /// `10.0.0.0/8`). IPv4-mapped IPv6 entries (`::ffff:10.0.0.0/104`) are
    /// stored as IPv4. `0.0.0.0/0` and `::/0` admit everyone.
    pub(crate) fn new<I, S>(entries: I) -> Result<Self, AclError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut nets = Vec::new();
        for entry in entries {
            let entry = entry.as_ref();
            let s = entry.trim();
            let net = s
                .parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| AclError::BadEntry {
                    entry: entry.to_owned(),
                })?;
            nets.push(canonical_net(net).trunc());
        }
        if nets.is_empty() {
            return Err(AclError::Empty);
        }
        Ok(ClientAcl {
            nets: IpNet::aggregate(&nets),
        })
    }

    /// Whether `ip` may use the proxy. An IPv4-mapped IPv6 peer
    /// (`::ffff:127.0.0.1`, as a dual-stack `[::]` listener reports IPv4
    /// clients) is judged as the IPv4 address.
    pub(crate) fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The networks admitted (aggregated).
    #[cfg(test)]
    pub(crate) fn networks(&self) -> &[IpNet] {
        &self.nets
    }
}

/// `::ffff:a.b.c.d/p` (p >= 96) as `a.b.c.d/(p-96)`; other nets unchanged.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(n) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(n);
    }
    net
}

// ---------------------------------------------------------------------------
// Proxy authentication
// ---------------------------------------------------------------------------

/// Value of the `Proxy-Authenticate` header sent with 407.
pub(crate) const PROXY_AUTHENTICATE_VALUE: &str = "Basic realm=\"robots-proxy\"";

/// One configured proxy user (deserialisable straight from the config).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct UserConfig {
    /// User name (no `:`).
    pub name: String,
    /// Argon2 PHC string from `robots-proxy hash-password`.
    pub password_hash: String,
    /// Robots product token this user's requests are judged as, whatever
    /// User-Agent they send; a whole User-Agent string is reduced to its
    /// product token.
    #[serde(default)]
    pub agent: Option<String>,
    /// Requests per second this user may make (a burst of one second's
    /// worth); unlimited when unset.
    #[serde(default)]
    pub max_rps: Option<f64>,
    /// Usage categories this user's requests are for, added to
    /// `usage.purposes` (a request may add more, never drop these).
    #[serde(default)]
    pub purposes: Vec<String>,
}

/// Bad proxy-auth configuration, or a failure to hash.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No users configured.
    #[error("proxy authentication has no users")]
    NoUsers,
    /// A user name is empty or contains ':' (Basic auth cannot carry it).
    #[error("proxy user name {0:?} is empty or contains ':'")]
    BadUserName(String),
    /// The same user appears twice.
    #[error("proxy user {0:?} is configured twice")]
    DuplicateUser(String),
    /// A password hash is not a usable Argon2 PHC string.
    #[error("password hash of proxy user {user:?} is not an Argon2 PHC string: {reason}")]
    BadHash {
        /// The user.
        user: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A user's agent has no robots product token.
    #[error("agent {agent:?} of proxy user {user:?} has no product token (letters, '-', '_')")]
    BadAgent {
        /// The user.
        user: String,
        /// The agent as configured.
        agent: String,
    },
    /// A user's `max_rps` is not a positive number.
    #[error("max_rps of proxy user {user:?} must be a positive number, not {value}")]
    BadRate {
        /// The user.
        user: String,
        /// The value as configured.
        value: f64,
    },
    /// The system random generator failed.
    #[error("system random generator failed")]
    Random,
    /// Argon2 refused to hash.
    #[error("hashing failed: {0}")]
    Hash(String),
}

/// Result of checking a `Proxy-Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Credentials verified.
    Ok {
        /// The user name.
        user: String,
        /// The product token this user must be judged as, if configured.
        agent: Option<String>,
    },
    /// No `Proxy-Authorization` header: answer 407 with the challenge.
    Missing,
    /// Wrong scheme, malformed, unknown user or wrong password: answer 407.
    Invalid {
        /// The user name claimed, when the header could be decoded (for the
        /// audit log; it may not exist).
        user: Option<String>,
    },
    /// The client address used up its password verifications for now:
    /// answer 429 with `Retry-After`, without verifying.
    Throttled {
        /// When the next verification is allowed.
        retry_after: Duration,
        /// True for the first refusal of this address in a window (log it
        /// once, for fail2ban).
        first: bool,
    },
}

/// Bounds on the work unauthenticated clients can cause: Argon2 needs
/// tens of MiB and milliseconds per verification, so a flood of wrong
/// passwords must neither run many at once nor many per address.
pub struct AuthLimits {
    /// Verifications running at once (one per CPU).
    running: Arc<tokio::sync::Semaphore>,
    /// Verifications per client address, an IPv6 one by its /64 (first use
    /// of a credential, wrong passwords, unknown users; cached credentials
    /// cost none).
    per_client: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// One log line per address and window.
    logged: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_minute: u32,
    clock: DefaultClock,
    /// Argon2 working memory, reused: at most one buffer per running
    /// verification. (Allocated per verification, glibc kept every 19 MiB
    /// buffer: its dynamic mmap threshold moves such blocks to the heap,
    /// where the aligned allocation is not reused.)
    memory: std::sync::Mutex<Vec<Vec<Block>>>,
}

impl AuthLimits {
    /// `per_minute` verifications per client address (a burst of as many);
    /// 0 turns the per-address limit off.
    pub fn new(per_minute: u32) -> AuthLimits {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let (per_client, logged) = match NonZeroU32::new(per_minute) {
            Some(n) => (
                Some(RateLimiter::keyed(Quota::per_minute(n))),
                Some(RateLimiter::keyed(Quota::per_minute(NonZeroU32::MIN))),
            ),
            None => (None, None),
        };
        AuthLimits {
            running: Arc::new(tokio::sync::Semaphore::new(cpus)),
            per_client,
            logged,
            per_minute,
            clock: DefaultClock::default(),
            memory: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A working-memory buffer for one verification (empty when new).
    fn take_memory(&self) -> Vec<Block> {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    fn give_memory(&self, buffer: Vec<Block>) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buffer);
    }

    /// The per-address limit this was built with.
    pub(crate) fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one verification from `client`'s allowance, or says how long
    /// to wait. Keeps the per-address state bounded by forgetting
    /// addresses whose allowance is whole again.
    fn take(&self, client: IpAddr) -> Result<(), AuthOutcome> {
        let Some(limiter) = &self.per_client else {
            return Ok(());
        };
        if limiter.len() > 4096 {
            limiter.retain_recent();
            if let Some(l) = &self.logged {
                l.retain_recent();
            }
        }
        let client = crate::http::destination::client_key(client);
        limiter.check_key(&client).map_err(|not_until| {
            let first = self
                .logged
                .as_ref()
                .is_some_and(|l| l.check_key(&client).is_ok());
            AuthOutcome::Throttled {
                retry_after: not_until.wait_time_from(self.clock.now()),
                first,
            }
        })
    }
}

impl Default for AuthLimits {
    fn default() -> Self {
        AuthLimits::new(30)
    }
}

struct User {
    hash: PasswordHash,
    settings: (Algorithm, Version, Params),
    agent: Option<String>,
    /// `max_rps`, if set.
    quota: Option<DefaultDirectRateLimiter>,
    /// HMAC of the last credentials that verified, if any.
    verified: RwLock<Option<[u8; 32]>>,
}

impl User {
    /// Validates one configured user: name, hash, agent, `max_rps`.
    fn from_config(u: &UserConfig) -> Result<User, AuthError> {
        if u.name.is_empty() || u.name.contains(':') {
            return Err(AuthError::BadUserName(u.name.clone()));
        }
        let hash = parse_hash(&u.name, &u.password_hash)?;
        let settings = hash_settings(&u.name, &hash)?;
        let agent = match &u.agent {
            None => None,
            Some(a) => {
                let token = crate::robots::product_token(a);
                if token.is_empty() {
                    return Err(AuthError::BadAgent {
                        user: u.name.clone(),
                        agent: a.clone(),
                    });
                }
                Some(token)
            }
        };
        let quota = match u.max_rps {
            None => None,
            Some(rps) => Some(RateLimiter::direct(user_quota(&u.name, rps)?)),
        };
        Ok(User {
            hash,
            settings,
            agent,
            quota,
            verified: RwLock::new(None),
        })
    }
}

/// Every problem with a user list that [`ProxyAuth::new`] would refuse,
/// without its Argon2 work (for `config check` and start-up validation).
pub(crate) fn check_users(users: &[UserConfig]) -> Vec<AuthError> {
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for u in users {
        if let Err(e) = User::from_config(u) {
            errors.push(e);
        }
        if !seen.insert(u.name.as_str()) {
            errors.push(AuthError::DuplicateUser(u.name.clone()));
        }
    }
    errors
}

/// HTTP Basic proxy authentication against a fixed user list.
pub struct ProxyAuth {
    users: HashMap<String, User>,
    cache_key: hmac::Key,
    /// Verified against for unknown users, so "no such user" costs as much
    /// time as "wrong password" and does not reveal which names exist.
    dummy: PasswordHash,
    dummy_settings: (Algorithm, Version, Params),
    /// Shared across reloads while its setting is unchanged.
    limits: Arc<AuthLimits>,
    clock: DefaultClock,
}

impl fmt::Debug for ProxyAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.users.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("ProxyAuth")
            .field("users", &names)
            .finish_non_exhaustive()
    }
}

/// What the fast path found out.
enum Step {
    Done(AuthOutcome),
    Verify { user: String, password: String },
}

impl ProxyAuth {
    /// Validates the users (names, hashes, agents). Costs one Argon2 hash
    /// (the dummy for unknown users).
    pub fn new<I>(users: I) -> Result<Self, AuthError>
    where
        I: IntoIterator<Item = UserConfig>,
    {
        let mut map = HashMap::new();
        let mut dummy_params = None;
        for u in users {
            let user = User::from_config(&u)?;
            if dummy_params.is_none() {
                dummy_params = Some(user.settings.clone());
            }
            if map.insert(u.name.clone(), user).is_some() {
                return Err(AuthError::DuplicateUser(u.name));
            }
        }
        let Some((algorithm, version, params)) = dummy_params else {
            return Err(AuthError::NoUsers);
        };
        let rng = SystemRandom::new();
        let cache_key =
            hmac::Key::generate(hmac::HMAC_SHA256, &rng).map_err(|_| AuthError::Random)?;
        // Same cost settings as a real user, so both paths take equal time.
        let salt = argon2::password_hash::try_generate_salt().map_err(|_| AuthError::Random)?;
        let dummy = Argon2::new(algorithm, version, params.clone())
            .hash_password_with_salt(b"robots-proxy dummy password", &salt)
            .map_err(|e| AuthError::Hash(e.to_string()))?;
        Ok(ProxyAuth {
            users: map,
            cache_key,
            dummy,
            dummy_settings: (algorithm, version, params),
            limits: Arc::new(AuthLimits::default()),
            clock: DefaultClock::default(),
        })
    }

    /// Uses `limits` for verification work (kept across reloads).
    pub fn with_limits(mut self, limits: Arc<AuthLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// The limits in use.
    pub(crate) fn limits(&self) -> &Arc<AuthLimits> {
        &self.limits
    }

    /// `None` if `user` may make a request now, else how long until it may
    /// (its `max_rps`).
    pub(crate) fn quota_wait(&self, user: &str) -> Option<Duration> {
        let quota = self.users.get(user)?.quota.as_ref()?;
        quota
            .check()
            .err()
            .map(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Checks a `Proxy-Authorization` header. A cache hit costs one HMAC; a
    /// miss (first use, wrong password, unknown user) costs one Argon2
    /// verification, tens of milliseconds of CPU: on the async runtime use
    /// [`ProxyAuth::check_async`], which moves only misses to a blocking thread.
    pub fn check(&self, header: Option<&HeaderValue>) -> AuthOutcome {
        match self.fast_path(header) {
            Step::Done(outcome) => outcome,
            Step::Verify { user, password } => self.verify_slow(user, &password),
        }
    }

    /// [`ProxyAuth::check`] for a request from `client`, with the Argon2
    /// work on `spawn_blocking`: at most one verification per CPU at once
    /// (others wait their turn), and at most the configured number per
    /// client address and minute ([`AuthOutcome::Throttled`] beyond).
    pub async fn check_async(
        self: &Arc<Self>,
        client: IpAddr,
        header: Option<&HeaderValue>,
    ) -> AuthOutcome {
        match self.fast_path(header) {
            Step::Done(outcome) => outcome,
            Step::Verify { user, password } => {
                if let Err(throttled) = self.limits.take(client) {
                    return throttled;
                }
                let claimed = user.clone();
                // The semaphore is never closed.
                let Ok(permit) = self.limits.running.clone().acquire_owned().await else {
                    return AuthOutcome::Invalid { user: Some(user) };
                };
                let this = Arc::clone(self);
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    this.verify_slow(user, &password)
                })
                .await
                // The task cannot be cancelled; a panic in it fails closed.
                .unwrap_or(AuthOutcome::Invalid {
                    user: Some(claimed),
                })
            }
        }
    }

    fn fast_path(&self, header: Option<&HeaderValue>) -> Step {
        let Some(header) = header else {
            return Step::Done(AuthOutcome::Missing);
        };
        let Some((user, password)) = decode_basic(header.as_bytes()) else {
            return Step::Done(AuthOutcome::Invalid { user: None });
        };
        if let Some(u) = self.users.get(&user) {
            let cached = *u.verified.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(tag) = cached {
                // ring's verify compares in constant time.
                let data = cache_input(&user, &password);
                if hmac::verify(&self.cache_key, &data, &tag).is_ok() {
                    return Step::Done(AuthOutcome::Ok {
                        agent: u.agent.clone(),
                        user,
                    });
                }
            }
        }
        Step::Verify { user, password }
    }

    fn verify_slow(&self, user: String, password: &str) -> AuthOutcome {
        let mut memory = self.limits.take_memory();
        let outcome = self.verify_with(user, password, &mut memory);
        self.limits.give_memory(memory);
        outcome
    }

    fn verify_with(&self, user: String, password: &str, memory: &mut Vec<Block>) -> AuthOutcome {
        let Some(u) = self.users.get(&user) else {
            // Burn the same time as a real verification; the result is moot.
            let _ = verify(&self.dummy, &self.dummy_settings, password, memory);
            return AuthOutcome::Invalid { user: Some(user) };
        };
        if !verify(&u.hash, &u.settings, password, memory) {
            return AuthOutcome::Invalid { user: Some(user) };
        }
        let tag = hmac::sign(&self.cache_key, &cache_input(&user, password));
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(tag.as_ref());
        *u.verified.write().unwrap_or_else(PoisonError::into_inner) = Some(bytes);
        AuthOutcome::Ok {
            agent: u.agent.clone(),
            user,
        }
    }

    /// Number of configured users.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }
}

/// Argon2 verification of `password` against `hash` (whose algorithm,
/// version and cost are `settings`), in `memory` (grown as needed, kept by
/// the caller for the next one). The outputs are compared in constant time
/// (`Output`'s equality).
fn verify(
    hash: &PasswordHash,
    settings: &(Algorithm, Version, Params),
    password: &str,
    memory: &mut Vec<Block>,
) -> bool {
    let (Some(salt), Some(expected)) = (&hash.salt, &hash.hash) else {
        return false;
    };
    let (algorithm, version, params) = settings.clone();
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::new());
    }
    let mut buffer = [0u8; Output::MAX_LENGTH];
    let Some(out) = buffer.get_mut(..expected.len()) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params);
    if argon2
        .hash_password_into_with_memory(password.as_bytes(), salt, out, &mut memory[..blocks])
        .is_err()
    {
        return false;
    }
    Output::new(out).is_ok_and(|out| out == *expected)
}

/// The governor quota for `max_rps`: one request every `1/rps` seconds,
/// with a burst of one second's worth.
fn user_quota(user: &str, rps: f64) -> Result<Quota, AuthError> {
    let bad = || AuthError::BadRate {
        user: user.to_string(),
        value: rps,
    };
    if !(rps.is_finite() && rps > 0.0) {
        return Err(bad());
    }
    let period = Duration::try_from_secs_f64(1.0 / rps).map_err(|_| bad())?;
    let burst =
        NonZeroU32::new(rps.ceil().min(f64::from(u32::MAX)) as u32).unwrap_or(NonZeroU32::MIN);
    Ok(Quota::with_period(period)
        .ok_or_else(bad)?
        .allow_burst(burst))
}

/// `user NUL password`: NUL cannot occur in a user name that came through a
/// header, so two different pairs never give the same input.
fn cache_input(user: &str, password: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(user.len() + 1 + password.len());
    v.extend_from_slice(user.as_bytes());
    v.push(0);
    v.extend_from_slice(password.as_bytes());
    v
}

/// `Basic <base64(user:password)>` → (user, password). Scheme is
/// case-insensitive; padding is optional; the password may contain ':'.
fn decode_basic(value: &[u8]) -> Option<(String, String)> {
    let value = value.trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
        .decode(rest.trim_ascii())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    if user.is_empty() {
        return None;
    }
    Some((user.to_owned(), password.to_owned()))
}

fn parse_hash(user: &str, s: &str) -> Result<PasswordHash, AuthError> {
    let bad = |reason: String| AuthError::BadHash {
        user: user.to_owned(),
        reason,
    };
    let hash = PasswordHash::new(s.trim()).map_err(|e| bad(e.to_string()))?;
    hash_settings(user, &hash)?;
    if hash.salt.is_none() || hash.hash.is_none() {
        return Err(bad("no salt or no hash output".to_owned()));
    }
    Ok(hash)
}

/// Algorithm, version and cost of a parsed hash, checked to be Argon2.
fn hash_settings(
    user: &str,
    hash: &PasswordHash,
) -> Result<(Algorithm, Version, Params), AuthError> {
    let bad = |reason: String| AuthError::BadHash {
        user: user.to_owned(),
        reason,
    };
    let algorithm = Algorithm::try_from(hash.algorithm.as_str()).map_err(|e| bad(e.to_string()))?;
    let version = match hash.version {
        Some(v) => Version::try_from(v).map_err(|e| bad(e.to_string()))?,
        None => Version::default(),
    };
    let params = Params::try_from(hash).map_err(|e| bad(e.to_string()))?;
    Ok((algorithm, version, params))
}

/// Hashes a password for the config (`robots-proxy hash-password`):
/// Argon2id, v19, m=19 MiB, t=2, p=1 (the OWASP minimum), random salt.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    hash_password_with(password, Params::default())
}

/// [`hash_password`] with explicit cost parameters (tests use cheap ones).
pub fn hash_password_with(password: &str, params: Params) -> Result<String, AuthError> {
    let salt_bytes = argon2::password_hash::try_generate_salt().map_err(|_| AuthError::Random)?;
    let salt = Salt::new(&salt_bytes).map_err(|e| AuthError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password_customized(password.as_bytes(), salt.as_ref(), None, None, params)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// The `Proxy-Authenticate` challenge header for a 407 response.
pub(crate) fn challenge_header() -> (HeaderName, HeaderValue) {
    (
        PROXY_AUTHENTICATE,
        HeaderValue::from_static(PROXY_AUTHENTICATE_VALUE),
    )
}

/// A `407 Proxy Authentication Required` response with the challenge.
pub fn challenge_response<B>(body: B) -> Response<B> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::PROXY_AUTHENTICATION_REQUIRED;
    let (name, value) = challenge_header();
    resp.headers_mut().insert(name, value);
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn default_acl_is_loopback_only() {
        let acl = ClientAcl::default();
        assert!(acl.allows(ip("127.0.0.1")));
        assert!(acl.allows(ip("127.255.0.9")));
        assert!(acl.allows(ip("::1")));
        assert!(acl.allows(ip("::ffff:127.0.0.1")));
        assert!(!acl.allows(ip("10.0.0.1")));
        assert!(!acl.allows(ip("::2")));
        assert!(!acl.allows(ip("::ffff:10.0.0.1")));
    }

    #[test]
    fn acl_entries() {
        let acl = ClientAcl::new(["10.0.0.0/8", " 192.168.1.7 ", "2001:db8::/32"]).unwrap();
        assert!(acl.allows(ip("10.200.3.4")));
        assert!(acl.allows(ip("::ffff:10.200.3.4")));
        assert!(acl.allows(ip("192.168.1.7")));
        assert!(!acl.allows(ip("192.168.1.8")));
        assert!(acl.allows(ip("2001:db8:1::5")));
        assert!(!acl.allows(ip("2001:db9::5")));
        assert!(!acl.allows(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(!acl.allows(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    }

    #[test]
    fn acl_mapped_entry_and_host_bits() {
        let acl = ClientAcl::new(["::ffff:172.16.0.0/108", "10.1.2.3/8"]).unwrap();
        assert!(acl.allows(ip("172.16.9.9")));
        assert!(!acl.allows(ip("172.32.0.1")));
        assert!(acl.allows(ip("10.9.9.9")));
        assert_eq!(
            acl.networks(),
            &[
                "10.0.0.0/8".parse::<IpNet>().unwrap(),
                "172.16.0.0/12".parse().unwrap()
            ]
        );
    }

    #[test]
    fn acl_errors_name_the_entry() {
        let e = ClientAcl::new(["127.0.0.1", "10.0.0.0/33"]).unwrap_err();
        assert_eq!(
            e,
            AclError::BadEntry {
                entry: "10.0.0.0/33".into()
            }
        );
        assert!(e.to_string().contains("10.0.0.0/33"));
        assert!(matches!(
            ClientAcl::new(["localhost"]),
            Err(AclError::BadEntry { entry }) if entry == "localhost"
        ));
        assert_eq!(ClientAcl::new(Vec::<String>::new()), Err(AclError::Empty));
        let everyone = ClientAcl::new(["0.0.0.0/0", "::/0"]).unwrap();
        assert!(everyone.allows(ip("8.8.8.8")) && everyone.allows(ip("2001:db8::1")));
    }

    #[test]
    fn decode_basic_cases() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let hv = |s: String| s.into_bytes();
        assert_eq!(
            decode_basic(&hv(format!("Basic {}", b64("u:p:w")))),
            Some(("u".into(), "p:w".into()))
        );
        assert_eq!(
            decode_basic(&hv(format!("bAsIc   {}  ", b64("u:")))),
            Some(("u".into(), "".into()))
        );
        // Unpadded is accepted.
        let unpadded = b64("ab:c").trim_end_matches('=').to_owned();
        assert_eq!(
            decode_basic(&hv(format!("Basic {unpadded}"))),
            Some(("ab".into(), "c".into()))
        );
        assert_eq!(decode_basic(&hv(format!("Bearer {}", b64("u:p")))), None);
        assert_eq!(decode_basic(b"Basic"), None);
        assert_eq!(decode_basic(b"Basic !!!notbase64"), None);
        assert_eq!(decode_basic(&hv(format!("Basic {}", b64("nocolon")))), None);
        assert_eq!(decode_basic(&hv(format!("Basic {}", b64(":p")))), None);
        let non_utf8 = base64::engine::general_purpose::STANDARD.encode([0xff, b':', b'p']);
        assert_eq!(decode_basic(&hv(format!("Basic {non_utf8}"))), None);
    }
}

#[cfg(test)]
pub(crate) mod auth_tests;
