//! Proxy authentication outcomes, config validation and the 407 helper.
//! `auth`, `basic` and `LOCAL` serve the tests of the layers above too.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use http::HeaderValue;

use super::{
    AuthError, AuthLimits, AuthOutcome, Params, ProxyAuth, UserConfig, challenge_response,
    hash_password, hash_password_with,
};

pub(crate) const LOCAL: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// Argon2 at the minimum cost, so debug-build tests stay fast.
fn cheap(password: &str) -> String {
    hash_password_with(password, Params::new(8, 1, 1, None).unwrap()).unwrap()
}

fn user(name: &str, password: &str, agent: Option<&str>) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: cheap(password),
        agent: agent.map(Into::into),
        max_rps: None,
        purposes: Vec::new(),
        ..Default::default()
    }
}

pub(crate) fn basic(credentials: &str) -> HeaderValue {
    let b64 = base64::engine::general_purpose::STANDARD.encode(credentials);
    HeaderValue::from_str(&format!("Basic {b64}")).unwrap()
}

pub(crate) fn auth() -> ProxyAuth {
    ProxyAuth::new([
        user("alice", "s3cret:with:colons", Some("ExampleBot/1.2")),
        user("bob", "hunter2", None),
    ])
    .unwrap()
}

fn invalid(user: Option<&str>) -> AuthOutcome {
    AuthOutcome::Invalid {
        user: user.map(Into::into),
    }
}

#[test]
fn good_credentials_with_and_without_agent() {
    let a = auth();
    let ok_alice = AuthOutcome::Ok {
        user: "alice".into(),
        agent: Some("examplebot".into()),
    };
    assert_eq!(a.check(Some(&basic("alice:s3cret:with:colons"))), ok_alice);
    // Second time through the cache: same answer.
    assert_eq!(a.check(Some(&basic("alice:s3cret:with:colons"))), ok_alice);
    assert_eq!(
        a.check(Some(&basic("bob:hunter2"))),
        AuthOutcome::Ok {
            user: "bob".into(),
            agent: None
        }
    );
    assert_eq!(a.user_count(), 2);
}

#[test]
fn missing_header() {
    assert_eq!(auth().check(None), AuthOutcome::Missing);
}

#[test]
fn wrong_password_and_unknown_user_name_the_user() {
    let a = auth();
    assert_eq!(a.check(Some(&basic("bob:hunter3"))), invalid(Some("bob")));
    assert_eq!(a.check(Some(&basic("bob:"))), invalid(Some("bob")));
    assert_eq!(
        a.check(Some(&basic("mallory:hunter2"))),
        invalid(Some("mallory"))
    );
    // A password that verified does not open another account.
    assert!(matches!(
        a.check(Some(&basic("bob:hunter2"))),
        AuthOutcome::Ok { .. }
    ));
    assert_eq!(
        a.check(Some(&basic("alice:hunter2"))),
        invalid(Some("alice"))
    );
    // And a cached success does not make a wrong password pass.
    assert_eq!(a.check(Some(&basic("bob:hunter2x"))), invalid(Some("bob")));
}

#[test]
fn malformed_headers() {
    let a = auth();
    let hv = HeaderValue::from_static;
    assert_eq!(a.check(Some(&hv("Basic !!!not-base64"))), invalid(None));
    assert_eq!(a.check(Some(&hv("Basic"))), invalid(None));
    assert_eq!(a.check(Some(&hv(""))), invalid(None));
    assert_eq!(
        a.check(Some(&basic("bobhunter2"))),
        invalid(None),
        "no colon"
    );
    assert_eq!(
        a.check(Some(&basic(":hunter2"))),
        invalid(None),
        "empty user"
    );
    let bearer = HeaderValue::from_str(&format!(
        "Bearer {}",
        base64::engine::general_purpose::STANDARD.encode("bob:hunter2")
    ))
    .unwrap();
    assert_eq!(a.check(Some(&bearer)), invalid(None));
    // Scheme is case-insensitive, padding optional.
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode("bob:hunter2");
    let lower = HeaderValue::from_str(&format!("basic {b64}")).unwrap();
    assert!(matches!(a.check(Some(&lower)), AuthOutcome::Ok { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_async_matches_check() {
    let a = Arc::new(auth());
    assert_eq!(a.check_async(LOCAL, None).await, AuthOutcome::Missing);
    let good = basic("bob:hunter2");
    for _ in 0..2 {
        assert_eq!(
            a.check_async(LOCAL, Some(&good)).await,
            AuthOutcome::Ok {
                user: "bob".into(),
                agent: None
            }
        );
    }
    assert_eq!(
        a.check_async(LOCAL, Some(&basic("bob:nope"))).await,
        invalid(Some("bob"))
    );
    assert_eq!(
        a.check_async(LOCAL, Some(&basic("nobody:x"))).await,
        invalid(Some("nobody"))
    );
}

#[test]
fn default_hash_format_and_cache_saves_the_slow_path() {
    let phc = hash_password("correct horse").unwrap();
    assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
    assert_ne!(phc, hash_password("correct horse").unwrap(), "salted");
    let a = ProxyAuth::new([UserConfig {
        name: "carol".into(),
        password_hash: phc,
        agent: None,
        max_rps: None,
        purposes: Vec::new(),
        ..Default::default()
    }])
    .unwrap();
    let h = basic("carol:correct horse");
    let t = Instant::now();
    assert!(matches!(a.check(Some(&h)), AuthOutcome::Ok { .. }));
    let slow = t.elapsed();
    let t = Instant::now();
    for _ in 0..20 {
        assert!(matches!(a.check(Some(&h)), AuthOutcome::Ok { .. }));
    }
    let cached = t.elapsed();
    assert!(
        cached < slow,
        "20 cached checks {cached:?} vs one Argon2 {slow:?}"
    );
}

#[test]
fn config_errors() {
    let err = |users: Vec<UserConfig>| ProxyAuth::new(users).unwrap_err();
    assert!(matches!(err(vec![]), AuthError::NoUsers));
    assert!(matches!(
        err(vec![user("a:b", "x", None)]),
        AuthError::BadUserName(n) if n == "a:b"
    ));
    assert!(matches!(
        err(vec![user("", "x", None)]),
        AuthError::BadUserName(_)
    ));
    assert!(matches!(
        err(vec![user("dup", "x", None), user("dup", "y", None)]),
        AuthError::DuplicateUser(n) if n == "dup"
    ));
    assert!(matches!(
        err(vec![user("a", "x", Some("*/1.0"))]),
        AuthError::BadAgent { user, .. } if user == "a"
    ));
    for bad in [
        "plaintext",
        "$2b$12$abcdefghijklmnopqrstuuL9e8k7ekZ9v0e1u2C3d4E5f6G7h8I9j", // bcrypt
        "$argon2id$v=19$m=19456,t=2,p=1",                               // no salt/hash
        "$scrypt$ln=16,r=8,p=1$aM15713r3Xsvxbi31lqr1Q$nFNh2CVHVjNldFVKDHDlm4CbdRSCdEBsjjJxD+iCs5E",
    ] {
        let e = err(vec![UserConfig {
            name: "z".into(),
            password_hash: bad.into(),
            agent: None,
            max_rps: None,
            purposes: Vec::new(),
            ..Default::default()
        }]);
        assert!(
            matches!(&e, AuthError::BadHash { user, .. } if user == "z"),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains("\"z\""), "{e}");
    }
}

#[test]
fn user_config_deserialises() {
    #[derive(serde::Deserialize)]
    struct Cfg {
        users: Vec<UserConfig>,
    }
    let cfg: Cfg = toml::from_str(
        r#"
        [[users]]
        name = "alice"
        password_hash = "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaA"
        agent = "ExampleBot"
        [[users]]
        name = "bob"
        password_hash = "x"
        "#,
    )
    .unwrap();
    assert_eq!(cfg.users[0].agent.as_deref(), Some("ExampleBot"));
    assert_eq!(cfg.users[1].agent, None);
}

#[test]
fn challenge() {
    let r = challenge_response("auth required");
    assert_eq!(r.status(), http::StatusCode::PROXY_AUTHENTICATION_REQUIRED);
    assert_eq!(
        r.headers().get(http::header::PROXY_AUTHENTICATE).unwrap(),
        "Basic realm=\"robots-proxy\""
    );
    assert_eq!(*r.body(), "auth required");
}

#[tokio::test]
async fn the_verification_allowance_counts_an_ipv6_client_by_its_slash_64() {
    let a = Arc::new(auth().with_limits(Arc::new(AuthLimits::new(2))));
    let wrong = basic("bob:nope");
    let from = |s: &str| -> std::net::IpAddr { s.parse().expect("ip") };
    assert_eq!(
        a.check_async(from("2001:db8:1:2::1"), Some(&wrong)).await,
        invalid(Some("bob"))
    );
    assert_eq!(
        a.check_async(from("2001:db8:1:2::2"), Some(&wrong)).await,
        invalid(Some("bob"))
    );
    // A third address in the same /64 shares the allowance.
    assert!(matches!(
        a.check_async(from("2001:db8:1:2:ffff::3"), Some(&wrong))
            .await,
        AuthOutcome::Throttled { .. }
    ));
    // Another /64 has its own.
    assert_eq!(
        a.check_async(from("2001:db8:1:3::1"), Some(&wrong)).await,
        invalid(Some("bob"))
    );
}
