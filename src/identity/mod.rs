//! The crawler's identity (`[identity]`): the User-Agent every forwarded
//! request and every document the proxy fetches itself carries, the Web
//! Bot Auth signature (draft-ietf-webbotauth-httpsig-protocol, RFC 9421)
//! of every forwarded request, and the key directory that lets a site
//! verify it. Off (no [`Identity`] at all, nothing done per request)
//! unless `identity.user_agent` or `identity.signing.key_file` is set.

pub mod directory;
pub mod keys;
pub mod sign;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use serde::Deserialize;

use keys::KeyRing;

/// `identity.user_agent_mode`: what becomes of the client's own
/// User-Agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UaMode {
    /// The client's User-Agent is sent; the identity's only when the
    /// client sends none.
    #[default]
    Keep,
    /// The client's User-Agent, then the identity's.
    Append,
    /// The identity's alone.
    Replace,
}

/// The `Signature-Agent` request header (a Dictionary of directory URLs).
pub static SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");
/// The `Signature-Input` header.
pub static SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
/// The `Signature` header.
pub static SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// The pay per crawl request headers a signature covers when present,
/// with their component identifiers.
pub static PRICE_HEADERS: [(&str, HeaderName); 2] = [
    (
        "\"crawler-exact-price\"",
        HeaderName::from_static("crawler-exact-price"),
    ),
    (
        "\"crawler-max-price\"",
        HeaderName::from_static("crawler-max-price"),
    ),
];

/// The `tag` of request signatures.
pub const TAG: &str = "web-bot-auth";

/// A User-Agent the proxy sends.
#[derive(Debug)]
struct UaPolicy {
    value: HeaderValue,
    mode: UaMode,
    /// Its robots product token (lower-cased): what a request that carries
    /// it is judged as.
    token: String,
    /// The product as written (`ExampleBot`).
    name: String,
}

impl UaPolicy {
    fn new(user_agent: &str, mode: UaMode) -> Result<UaPolicy, String> {
        let token = crate::robots::product_token(user_agent);
        if token.is_empty() {
            return Err(format!(
                "{user_agent:?} has no product token (e.g. \"ExampleBot/1.0 (+https://example.com/bot)\")"
            ));
        }
        let value = HeaderValue::from_str(user_agent)
            .map_err(|_| format!("{user_agent:?} cannot be a header value"))?;
        let name = user_agent
            .split(['/', ' '])
            .next()
            .unwrap_or_default()
            .to_string();
        Ok(UaPolicy {
            value,
            mode,
            token,
            name,
        })
    }
}

/// What Web Bot Auth needs to sign.
pub struct Signer {
    keys: KeyRing,
    /// `identity.signing.signature_agent` as a Structured Field String.
    agent: String,
    /// The URL itself, for the pages.
    agent_url: String,
    expires: Duration,
}

impl Signer {
    /// A signer with `keys`, publishing its directory at `agent_url` (an
    /// `https` URL), its signatures valid for `expires`.
    pub fn new(keys: KeyRing, agent_url: &str, expires: Duration) -> Result<Signer, String> {
        let parsed: http::Uri = agent_url
            .parse()
            .map_err(|e| format!("{agent_url:?} is not a URL: {e}"))?;
        if parsed.scheme_str() != Some("https") || parsed.host().is_none() {
            return Err(format!(
                "{agent_url:?} is not an https URL (the draft asks for https: e.g. \"https://example.com\")"
            ));
        }
        let agent = sign::sf_string(agent_url)
            .ok_or_else(|| format!("{agent_url:?} holds characters a header cannot"))?;
        if expires.is_zero() {
            return Err("signatures must be valid for more than 0s".into());
        }
        Ok(Signer {
            keys,
            agent,
            agent_url: agent_url.to_string(),
            expires,
        })
    }

    /// The keys.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// Where the directory is published.
    pub fn agent_url(&self) -> &str {
        &self.agent_url
    }

    /// Signs a request for `authority` (RFC 9421's normalised form: host
    /// lower-cased, no default port), covering `@method`, `@authority`,
    /// `@path`, its own `Signature-Agent` member and the pay per crawl
    /// price headers present ([`PRICE_HEADERS`]), at `now`. A signature
    /// already on the request (the client's) is left as it is, and this
    /// one takes a label it does not use: the proxy may have changed what
    /// the client's covers (its User-Agent, Via), so it does not cover the
    /// client's signature (draft §"Multiple Signatures"). With no key
    /// valid at `now`, nothing is added.
    pub fn sign_request(
        &self,
        method: &http::Method,
        authority: &str,
        path: &str,
        headers: &mut HeaderMap,
        now: SystemTime,
    ) {
        let now = unix(now);
        let Some(key) = self.keys.signing(now) else {
            return;
        };
        let (inputs, agents) = (
            combined(headers, &SIGNATURE_INPUT),
            combined(headers, &SIGNATURE_AGENT),
        );
        let label = match (&inputs, &agents) {
            (None, None) => "sig1".to_string(),
            _ => {
                let mut taken = inputs
                    .as_deref()
                    .map(sign::dictionary_keys)
                    .unwrap_or_default();
                taken.extend(
                    agents
                        .as_deref()
                        .map(sign::dictionary_keys)
                        .unwrap_or_default(),
                );
                sign::free_label(&taken)
            }
        };
        let agent_id = format!("\"signature-agent\";key=\"{label}\"");
        let path = if path.is_empty() { "/" } else { path };
        let mut components = vec![
            ("\"@method\"", method.as_str()),
            ("\"@authority\"", authority),
            ("\"@path\"", path),
            (agent_id.as_str(), self.agent.as_str()),
        ];
        // A pay per crawl price is covered: a paid request must be signed
        // over what it agrees to pay.
        let prices: Vec<(&str, String)> = PRICE_HEADERS
            .iter()
            .filter_map(|(id, name)| combined(headers, name).map(|v| (*id, v)))
            .collect();
        components.extend(prices.iter().map(|(id, v)| (*id, v.as_str())));
        let nonce = nonce();
        let params = sign::Params {
            created: now,
            expires: now.saturating_add(self.expires.as_secs().max(1)),
            nonce: nonce.as_deref(),
            tag: TAG,
        };
        let signed = sign::sign(&components, key, &params);
        let add =
            |headers: &mut HeaderMap, name: &HeaderName, prior: Option<String>, member: String| {
                let value = match prior {
                    Some(p) => format!("{p}, {member}"),
                    None => member,
                };
                if let Ok(v) = HeaderValue::from_str(&value) {
                    headers.insert(name.clone(), v);
                }
            };
        add(
            headers,
            &SIGNATURE_AGENT,
            agents,
            format!("{label}={}", self.agent),
        );
        add(
            headers,
            &SIGNATURE_INPUT,
            inputs,
            format!("{label}={}", signed.input),
        );
        let prior = combined(headers, &SIGNATURE);
        add(
            headers,
            &SIGNATURE,
            prior,
            format!("{label}={}", signed.signature),
        );
    }
}

/// The field lines of `name` joined as one (`a, b`); `None` without any.
fn combined(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut values = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let first = values.next()?;
    Some(values.fold(first.to_string(), |acc, v| acc + ", " + v))
}

/// A fresh nonce: 32 random bytes, base64. `None` if the system's
/// generator fails (the signature goes without one).
fn nonce() -> Option<String> {
    use base64::Engine;
    let bytes: [u8; 32] = ring::rand::generate(&ring::rand::SystemRandom::new())
        .ok()?
        .expose();
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Seconds since the Unix epoch.
pub fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The identity in force: the User-Agent policy (with its per-user
/// overrides), the signer, and what the crawler page says.
pub struct Identity {
    default: Option<UaPolicy>,
    /// `[[access.users]] user_agent` / `user_agent_mode`, by user name:
    /// `None` when the user's own `user_agent` is `""` (the client's is
    /// kept).
    users: HashMap<String, Option<UaPolicy>>,
    signer: Option<Signer>,
    /// What the pages show.
    pub page: Page,
}

/// What the crawler page and client-ranges say.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// `identity.user_agent`.
    pub user_agent: String,
    /// `identity.contact`.
    pub contact: String,
    /// `identity.egress_ranges`.
    pub egress_ranges: Vec<ipnet::IpNet>,
    /// `usage.purposes`.
    pub purposes: Vec<String>,
    /// Every robots token the proxy sends as (the default's and the
    /// users'), lower-cased.
    pub tokens: Vec<String>,
    /// The same products as their User-Agents write them (`ExampleBot`).
    pub names: Vec<String>,
}

/// One user's override.
pub struct UserOverride<'a> {
    pub name: &'a str,
    pub user_agent: Option<&'a str>,
    pub mode: Option<UaMode>,
}

impl Identity {
    /// The identity of a configuration; `None` when it sets neither a
    /// User-Agent (anywhere) nor a signing key, so that requests pay
    /// nothing for it.
    pub fn new<'a>(
        user_agent: &str,
        mode: UaMode,
        users: impl Iterator<Item = UserOverride<'a>>,
        signer: Option<Signer>,
        page: Page,
    ) -> Result<Option<Identity>, String> {
        let default = if user_agent.is_empty() {
            None
        } else {
            Some(
                UaPolicy::new(user_agent, mode)
                    .map_err(|e| format!("key `identity.user_agent`: {e}"))?,
            )
        };
        let mut map = HashMap::new();
        for u in users {
            if u.user_agent.is_none() && u.mode.is_none() {
                continue;
            }
            let ua = u.user_agent.unwrap_or(user_agent);
            let policy = if ua.is_empty() {
                None
            } else {
                Some(
                    UaPolicy::new(ua, u.mode.unwrap_or(mode))
                        .map_err(|e| format!("key `access.users` ({}): user_agent {e}", u.name))?,
                )
            };
            map.insert(u.name.to_string(), policy);
        }
        if default.is_none() && map.is_empty() && signer.is_none() {
            return Ok(None);
        }
        let mut tokens: Vec<String> = default
            .iter()
            .chain(map.values().flatten())
            .map(|p| p.token.clone())
            .collect();
        tokens.sort();
        tokens.dedup();
        let mut names: Vec<String> = default
            .iter()
            .chain(map.values().flatten())
            .map(|p| p.name.clone())
            .collect();
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        Ok(Some(Identity {
            default,
            users: map,
            signer,
            page: Page {
                tokens,
                names,
                ..page
            },
        }))
    }

    fn policy(&self, user: Option<&str>) -> Option<&UaPolicy> {
        match user.and_then(|u| self.users.get(u)) {
            Some(own) => own.as_ref(),
            None => self.default.as_ref(),
        }
    }

    /// Sets the request's User-Agent as the policy says, for `user`; the
    /// robots token to judge it by when the User-Agent sent is the
    /// identity's (replaced, appended, or the client sent none), else
    /// `None` (judged as before: mapping, default agent).
    pub fn apply_user_agent(&self, user: Option<&str>, headers: &mut HeaderMap) -> Option<&str> {
        let policy = self.policy(user)?;
        let client = headers.get(USER_AGENT);
        let sent = match (policy.mode, client) {
            (UaMode::Keep, Some(_)) => return None,
            // Already carries it (a client configured with it): not twice.
            (UaMode::Append, Some(client))
                if memchr::memmem::find(client.as_bytes(), policy.value.as_bytes()).is_some() =>
            {
                return Some(&policy.token);
            }
            (UaMode::Append, Some(client)) => {
                let mut joined = client.as_bytes().to_vec();
                joined.push(b' ');
                joined.extend_from_slice(policy.value.as_bytes());
                HeaderValue::from_bytes(&joined).unwrap_or_else(|_| policy.value.clone())
            }
            _ => policy.value.clone(),
        };
        headers.insert(USER_AGENT, sent);
        Some(&policy.token)
    }

    /// The token a request from `user` with `client_ua` is judged as when
    /// its User-Agent cannot be rewritten (a blind tunnel): as
    /// [`Identity::apply_user_agent`] would judge it.
    pub fn judged_token(
        &self,
        user: Option<&str>,
        client_ua: Option<&HeaderValue>,
    ) -> Option<&str> {
        let policy = self.policy(user)?;
        match (policy.mode, client_ua) {
            (UaMode::Keep, Some(_)) => None,
            _ => Some(&policy.token),
        }
    }

    /// The signer, when a key is configured.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
    }
}

/// Signs `req`, going to `origin`, with `signer`, now.
pub fn sign_for_origin<B>(
    signer: &Signer,
    origin: &crate::http::origin::Origin,
    req: &mut http::Request<B>,
) {
    let authority = authority(origin.host(), origin.port(), origin.scheme().default_port());
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    signer.sign_request(
        &method,
        &authority,
        &path,
        req.headers_mut(),
        SystemTime::now(),
    );
}

/// RFC 9421's `@authority` of an origin: the host (bracketed if IPv6),
/// then `:port` unless it is the scheme's default.
pub fn authority(host: &str, port: u16, default_port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if port == default_port {
        host
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(mode: UaMode, users: Vec<UserOverride<'_>>) -> Identity {
        Identity::new(
            "ExampleBot/1.0 (+https://example.com/bot)",
            mode,
            users.into_iter(),
            None,
            Page::default(),
        )
        .expect("valid")
        .expect("on")
    }

    fn ua_after(
        id: &Identity,
        user: Option<&str>,
        client: Option<&str>,
    ) -> (Option<String>, Option<String>) {
        let mut h = HeaderMap::new();
        if let Some(c) = client {
            h.insert(USER_AGENT, HeaderValue::from_str(c).expect("ua"));
        }
        let token = id.apply_user_agent(user, &mut h).map(str::to_string);
        let sent = h
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (sent, token)
    }

    #[test]
    fn modes_set_the_user_agent_and_the_token_judged() {
        let ours = "ExampleBot/1.0 (+https://example.com/bot)";
        let keep = identity(UaMode::Keep, vec![]);
        assert_eq!(
            ua_after(&keep, None, Some("curl/8")),
            (Some("curl/8".into()), None)
        );
        assert_eq!(
            ua_after(&keep, None, None),
            (Some(ours.into()), Some("examplebot".into()))
        );
        let append = identity(UaMode::Append, vec![]);
        assert_eq!(
            ua_after(&append, None, Some("curl/8")),
            (Some(format!("curl/8 {ours}")), Some("examplebot".into()))
        );
        assert_eq!(
            ua_after(&append, None, Some(&format!("curl/8 {ours}"))),
            (Some(format!("curl/8 {ours}")), Some("examplebot".into()))
        );
        let replace = identity(UaMode::Replace, vec![]);
        assert_eq!(
            ua_after(&replace, None, Some("curl/8")),
            (Some(ours.into()), Some("examplebot".into()))
        );
        assert_eq!(replace.judged_token(None, None), Some("examplebot"));
        assert_eq!(
            keep.judged_token(None, Some(&HeaderValue::from_static("x"))),
            None
        );
    }

    #[test]
    fn users_override_the_user_agent_and_the_mode() {
        let id = identity(
            UaMode::Keep,
            vec![
                UserOverride {
                    name: "ann",
                    user_agent: Some("AnnBot/2"),
                    mode: Some(UaMode::Replace),
                },
                UserOverride {
                    name: "bob",
                    user_agent: None,
                    mode: Some(UaMode::Replace),
                },
                UserOverride {
                    name: "cat",
                    user_agent: Some(""),
                    mode: None,
                },
            ],
        );
        assert_eq!(
            ua_after(&id, Some("ann"), Some("curl/8")),
            (Some("AnnBot/2".into()), Some("annbot".into()))
        );
        assert_eq!(
            ua_after(&id, Some("bob"), Some("curl/8")).1.as_deref(),
            Some("examplebot")
        );
        assert_eq!(ua_after(&id, Some("cat"), None), (None, None));
        assert_eq!(id.page.tokens, ["annbot", "examplebot"]);
    }

    #[test]
    fn nothing_configured_is_no_identity_and_bad_agents_are_errors() {
        let none = Identity::new("", UaMode::Keep, std::iter::empty(), None, Page::default());
        assert!(none.expect("valid").is_none());
        let bad = Identity::new(
            "/1.0",
            UaMode::Keep,
            std::iter::empty(),
            None,
            Page::default(),
        );
        assert!(bad.err().expect("refused").contains("no product token"));
        let ctl = Identity::new(
            "Bot/1\u{1}",
            UaMode::Keep,
            std::iter::empty(),
            None,
            Page::default(),
        );
        assert!(ctl.is_err());
    }

    #[test]
    fn authority_is_normalised() {
        assert_eq!(authority("a.example", 80, 80), "a.example");
        assert_eq!(authority("a.example", 8080, 80), "a.example:8080");
        assert_eq!(authority("::1", 443, 443), "[::1]");
    }
}
