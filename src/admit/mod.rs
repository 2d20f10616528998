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
//!
//! In a fleet a user's `max_rps` and an address's password
//! verifications are taken from allowances on Redis shared by every node;
//! without one nothing of the fleet is touched.

mod acl;
mod limits;
mod password;

use parking_lot::RwLock;
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use argon2::password_hash::PasswordHasher;
use argon2::password_hash::phc::PasswordHash;
use argon2::{Algorithm, Argon2, Block, Version};
use base64::Engine as _;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::header::{HeaderName, HeaderValue, PROXY_AUTHENTICATE};
use http::{Response, StatusCode};
use ring::hmac;
use ring::rand::SystemRandom;

use crate::fleet::rate::Rated;
use crate::fleet::{Fleet, Unavailable};
pub use acl::{AclError, ClientAcl};
pub use limits::AuthLimits;
use limits::user_quota;
pub use password::{Params, hash_password, hash_password_with};
use password::{hash_settings, parse_hash, verify};

/// Value of the `Proxy-Authenticate` header sent with 407.
pub(crate) const PROXY_AUTHENTICATE_VALUE: &str = "Basic realm=\"robots-proxy\"";

/// One configured proxy user (deserialisable straight from the config).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
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
    /// The User-Agent this user's requests are sent with, instead of
    /// `identity.user_agent` ("" = the client's own).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// `identity.user_agent_mode` for this user.
    #[serde(default)]
    pub user_agent_mode: Option<crate::identity::UaMode>,
    /// `payments.max_price` for this user's requests (e.g. `USD 0.001`).
    #[serde(default)]
    pub max_price: Option<String>,
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
    #[error(
        "agent {agent:?} of proxy user {user:?} has no product token (letters, digits, '-', '_')"
    )]
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

struct User {
    hash: PasswordHash,
    settings: (Algorithm, Version, Params),
    agent: Option<String>,
    /// `max_rps`, if set: its limiter on this node, and its quota for the
    /// fleet's allowance.
    quota: Option<(DefaultDirectRateLimiter, Quota)>,
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
            Some(rps) => {
                let quota = user_quota(&u.name, rps)?;
                Some((RateLimiter::direct(quota), quota))
            }
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
        let (limiter, _) = self.users.get(user)?.quota.as_ref()?;
        limiter
            .check()
            .err()
            .map(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// [`ProxyAuth::quota_wait`] on `user`'s allowance shared by the
    /// fleet: one Redis round trip for a user with `max_rps`, none for
    /// others. When Redis is unavailable this node's own limiter applies,
    /// whatever `on_unavailable` says: `refuse` is for state that is an
    /// origin's (its Crawl-delay), and refusing every user's requests
    /// because Redis is down is not what it is for. The fleet then admits
    /// up to its number of nodes times `max_rps` until Redis is back.
    pub(crate) async fn quota_wait_in_fleet(&self, user: &str, fleet: &Fleet) -> Option<Duration> {
        let (_, quota) = self.users.get(user)?.quota.as_ref()?;
        let shared = fleet
            .admit_rate(
                Rated::User(user),
                quota.replenish_interval(),
                quota.burst_size().get(),
            )
            .await;
        match shared {
            Ok(admitted) => admitted.err(),
            Err(Unavailable) => {
                fleet.fell_back();
                self.quota_wait(user)
            }
        }
    }

    /// Checks a `Proxy-Authorization` header. A cache hit costs one HMAC; a
    /// miss (first use, wrong password, unknown user) costs one Argon2
    /// verification, tens of milliseconds of CPU: on the async runtime use
    /// [`ProxyAuth::check_async`], which moves only misses to a blocking thread.
    #[cfg(test)]
    pub fn check(&self, header: Option<&HeaderValue>) -> AuthOutcome {
        match self.fast_path(header) {
            Step::Done(outcome) => outcome,
            Step::Verify { user, password } => self.verify_slow(user, &password),
        }
    }

    /// [`ProxyAuth::check_async_in`] without a fleet.
    #[cfg(test)]
    pub async fn check_async(
        self: &Arc<Self>,
        client: IpAddr,
        header: Option<&HeaderValue>,
    ) -> AuthOutcome {
        self.check_async_in(client, header, None).await
    }

    /// [`ProxyAuth::check`] for a request from `client`, with the Argon2
    /// work on `spawn_blocking`: at most one verification per CPU at once
    /// (others wait their turn), and at most the configured number per
    /// client address and minute ([`AuthOutcome::Throttled`] beyond). With
    /// `fleet` set, that number is taken from the address's allowance
    /// shared by the fleet (one Redis round trip per verification;
    /// remembered credentials make none); when Redis is unavailable this
    /// node's own allowance applies, whatever `on_unavailable` says (see
    /// [`ProxyAuth::quota_wait_in_fleet`]).
    pub(crate) async fn check_async_in(
        self: &Arc<Self>,
        client: IpAddr,
        header: Option<&HeaderValue>,
        fleet: Option<&Fleet>,
    ) -> AuthOutcome {
        match self.fast_path(header) {
            Step::Done(outcome) => outcome,
            Step::Verify { user, password } => {
                let taken = match fleet {
                    None => self.limits.take(client),
                    // Boxed: the Redis call is rare and kept out of every
                    // request's future.
                    Some(fleet) => Box::pin(self.limits.take_in_fleet(client, fleet)).await,
                };
                if let Err(throttled) = taken {
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
            let cached = *u.verified.read();
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
        *u.verified.write() = Some(bytes);
        AuthOutcome::Ok {
            agent: u.agent.clone(),
            user,
        }
    }

    #[cfg(test)]
    /// Number of configured users.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }
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

/// What an admin user may do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminRole {
    /// Read: the web view, `/explain`, `/metrics`, the robots.txt archive.
    Viewer,
    /// Read, purge the caches and reload the configuration.
    #[default]
    Operator,
}

impl AdminRole {
    /// The role's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            AdminRole::Viewer => "viewer",
            AdminRole::Operator => "operator",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::IpNet;
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
