//! The fleet key: what a node reads from Redis, it can verify.
//!
//! Every value a node writes to Redis and another node acts on carries
//! an HMAC-SHA-256 tag under the fleet's key (`fleet.key_file`, 32
//! random bytes made by `robots-proxy fleet init-key`): the shared
//! robots.txt and tdmrep.json entries' `meta` (which binds their text by its SHA-256,
//! [`crate::judge::store`]) and every message on the fleet's channel
//! (kept purges too). The tag covers the Redis key or channel the value
//! lives under, so a value cannot be moved to another origin or fleet.
//! A value whose tag fails is ignored as if absent (the entry is fetched
//! again, the message dropped), counted in
//! `robots_proxy_fleet_rejected_total{kind}` and logged once a minute
//! with its key. `fleet.old_key_file` is a second key accepted for
//! verification only, while the nodes move to a new key.
//!
//! A fleet without a key (`fleet.unauthenticated = true`) tags nothing
//! and verifies nothing.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use ring::hmac;

/// Bytes of a fleet key.
pub const KEY_LEN: usize = 32;

/// Bytes of a tag.
pub const TAG_LEN: usize = 32;

/// A fleet key as read from its file.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetKey(pub [u8; KEY_LEN]);

impl std::fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetKey(…)")
    }
}

/// The keys a node signs and verifies with (`fleet.key_file`,
/// `fleet.old_key_file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySettings {
    pub current: FleetKey,
    /// Accepted for verification only (a rotation under way).
    pub old: Option<FleetKey>,
}

/// What a rejected value was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A shared robots.txt entry.
    Robots,
    /// A message on the fleet's channel.
    Message,
    /// A purge kept in Redis for nodes that were not listening.
    KeptPurge,
    /// A Crawl-delay schedule or pause found lower than this node knows
    /// it to be, or a schedule's seal that failed ([`super::floor`]).
    Schedule,
    /// A shared robots.txt entry with a good tag but older than one this
    /// node has seen, or past its life ([`super::stamp`]).
    Replay,
    /// An audit checkpoint kept in Redis ([`super::witness`]): read back
    /// by `audit verify`, never by a node.
    Witness,
    /// A shared tdmrep.json entry.
    Tdmrep,
    /// A heartbeat (a live node and its listeners) whose tag failed, or
    /// written too long ago ([`super::nodes`]).
    Heartbeat,
    /// An origin's requests in flight found in Redis fewer than this
    /// node's own leases on it ([`super::lease`]).
    Lease,
    /// A rate allowance found in Redis looser than this node's own
    /// requests left it ([`super::rate`]).
    Rate,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Robots,
        Kind::Message,
        Kind::KeptPurge,
        Kind::Schedule,
        Kind::Replay,
        Kind::Witness,
        Kind::Tdmrep,
        Kind::Heartbeat,
        Kind::Lease,
        Kind::Rate,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Robots => "robots",
            Kind::Message => "message",
            Kind::KeptPurge => "kept_purge",
            Kind::Schedule => "schedule",
            Kind::Replay => "replay",
            Kind::Witness => "witness",
            Kind::Tdmrep => "tdmrep",
            Kind::Heartbeat => "heartbeat",
            Kind::Lease => "lease",
            Kind::Rate => "rate",
        }
    }

    /// What the log says of a rejected value of this kind.
    fn said(self) -> &'static str {
        match self {
            Kind::Schedule => {
                "fleet: a Crawl-delay schedule or pause in Redis was lower than this node knows it \
                 to be (lowered by something without the fleet's key): booked from what the node \
                 knows, and the schedule written back"
            }
            Kind::Heartbeat => {
                "fleet: a heartbeat in Redis failed its fleet-key check or is too old: the node is \
                 not counted live and its listeners are not taken (listeners learned before stay \
                 refused)"
            }
            Kind::Lease => {
                "fleet: Redis counts fewer requests in flight to an origin than this node holds \
                 itself (leases deleted by something without the fleet's key): this node's own \
                 count stands, and its leases are written back at their next renewal"
            }
            Kind::Rate => {
                "fleet: a rate allowance in Redis was looser than this node's own requests left \
                 it (lowered or deleted by something without the fleet's key): admitted from \
                 what the node knows, and written back"
            }
            Kind::Replay => {
                "fleet: a shared robots.txt or tdmrep.json entry in Redis is older than one this node has seen, \
                 or past its life (an old entry written back): ignored as if absent"
            }
            _ => {
                "fleet: a value in Redis failed its fleet-key check: ignored as if absent \
                 (written by something without the fleet's key, or by a node with another key)"
            }
        }
    }
}

/// Signs and verifies; counts what failed.
#[derive(Debug, Default)]
pub struct Keys {
    /// `None`: an unauthenticated fleet.
    sign: Option<hmac::Key>,
    /// Keys a tag may verify with (current first).
    verify: Vec<hmac::Key>,
    rejected: [AtomicU64; Kind::ALL.len()],
    /// The minute a rejection was last logged.
    logged: AtomicU64,
}

/// The first line of a tagged message: `m1 <64 hex digits>`.
const MESSAGE_TAG: &str = "m1 ";

impl Keys {
    pub fn new(settings: Option<&KeySettings>) -> Keys {
        let Some(s) = settings else {
            return Keys::default();
        };
        let key = |k: &FleetKey| hmac::Key::new(hmac::HMAC_SHA256, &k.0);
        let mut verify = vec![key(&s.current)];
        verify.extend(s.old.as_ref().map(key));
        Keys {
            sign: Some(key(&s.current)),
            verify,
            ..Keys::default()
        }
    }

    /// Whether values are tagged and verified.
    pub fn enabled(&self) -> bool {
        self.sign.is_some()
    }

    fn tag_with(key: &hmac::Key, kind: &str, place: &str, value: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(key);
        for part in [
            b"robots-proxy fleet 1".as_slice(),
            kind.as_bytes(),
            place.as_bytes(),
        ] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part);
        }
        ctx.update(value);
        ctx.sign()
    }

    /// `value` stored under `place` (a Redis key), tagged: the tag's 32
    /// bytes, then the value. Unchanged without a key.
    pub fn seal_entry(&self, place: &str, value: &[u8]) -> Vec<u8> {
        let Some(key) = &self.sign else {
            return value.to_vec();
        };
        let tag = Self::tag_with(key, "entry", place, value);
        let mut out = Vec::with_capacity(TAG_LEN + value.len());
        out.extend_from_slice(tag.as_ref());
        out.extend_from_slice(value);
        out
    }

    /// The value [`Keys::seal_entry`] sealed under `place`; `None` (and
    /// counted) when its tag fails. Unchanged without a key.
    pub fn open_entry(&self, kind: Kind, place: &str, sealed: Vec<u8>) -> Option<Vec<u8>> {
        if !self.enabled() {
            return Some(sealed);
        }
        if sealed.len() >= TAG_LEN {
            let (tag, value) = sealed.split_at(TAG_LEN);
            if self.verify_tag(b"entry", place, value, tag) {
                return Some(value.to_vec());
            }
        }
        self.rejected(kind, place);
        None
    }

    fn verify_tag(&self, kind: &[u8], place: &str, value: &[u8], tag: &[u8]) -> bool {
        let kind = std::str::from_utf8(kind).unwrap_or_default();
        self.verify.iter().any(|key| {
            let expected = Self::tag_with(key, kind, place, value);
            let expected = expected.as_ref();
            // In constant time: how much of a tag matched says nothing.
            expected.len() == tag.len()
                && expected
                    .iter()
                    .zip(tag)
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        })
    }

    /// A message for `channel`, tagged: `m1 <hex tag>\n<message>`.
    /// Unchanged without a key.
    pub fn seal_message(&self, channel: &str, message: Vec<u8>) -> Vec<u8> {
        self.seal_line("message", channel, message)
    }

    /// The message [`Keys::seal_message`] sealed for `channel`; `None`
    /// (and counted as `kind`) when its tag fails. Unchanged without a
    /// key.
    pub fn open_message<'m>(
        &self,
        kind: Kind,
        channel: &str,
        sealed: &'m [u8],
    ) -> Option<&'m [u8]> {
        self.open_line(kind, "message", channel, sealed)
    }

    /// `value` of sort `what` under `place`, tagged as text: `m1 <hex
    /// tag>\n<value>` (messages, heartbeats). Unchanged without a key.
    pub fn seal_line(&self, what: &str, place: &str, value: Vec<u8>) -> Vec<u8> {
        let Some(key) = &self.sign else {
            return value;
        };
        let tag = Self::tag_with(key, what, place, &value);
        let mut out = format!("{MESSAGE_TAG}{}\n", hex(tag.as_ref())).into_bytes();
        out.extend(value);
        out
    }

    /// The value [`Keys::seal_line`] sealed as `what` under `place`;
    /// `None` (and counted as `kind`) when its tag fails. Unchanged
    /// without a key.
    pub fn open_line<'m>(
        &self,
        kind: Kind,
        what: &str,
        place: &str,
        sealed: &'m [u8],
    ) -> Option<&'m [u8]> {
        if !self.enabled() {
            return Some(sealed);
        }
        let opened = sealed
            .strip_prefix(MESSAGE_TAG.as_bytes())
            .filter(|rest| rest.len() > 2 * TAG_LEN && rest[2 * TAG_LEN] == b'\n')
            .and_then(|rest| {
                let tag = unhex(&rest[..2 * TAG_LEN])?;
                let value = &rest[2 * TAG_LEN + 1..];
                self.verify_tag(what.as_bytes(), place, value, &tag)
                    .then_some(value)
            });
        if opened.is_none() {
            self.rejected(kind, place);
        }
        opened
    }

    /// Counts a rejected value of `kind` under `place`, and logs it at
    /// most once a minute.
    pub(crate) fn rejected(&self, kind: Kind, place: &str) {
        self.rejected[kind as usize].fetch_add(1, Ordering::Relaxed);
        let minute = super::now_micros() / 60_000_000;
        if self.logged.swap(minute, Ordering::Relaxed) != minute {
            tracing::warn!(kind = kind.label(), key = place, "{}", kind.said());
        }
    }

    /// Values rejected so far, of `kind`.
    pub fn rejected_count(&self, kind: Kind) -> u64 {
        self.rejected[kind as usize].load(Ordering::Relaxed)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// Reads a fleet key: 64 hex digits (as `fleet init-key` writes) or 32
/// raw bytes, in a file no one but its owner may read.
pub fn load(path: &Path) -> Result<FleetKey, String> {
    let at = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("{at}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| format!("{at}: {e}"))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "{at}: readable by others (mode {:o}): a fleet key must be mode 0600 (chmod 600 {at})",
                mode & 0o777
            ));
        }
    }
    let text = std::str::from_utf8(&bytes).map(str::trim).unwrap_or("");
    let key = match unhex(text.as_bytes()) {
        Some(k) if k.len() == KEY_LEN => k,
        _ if bytes.len() == KEY_LEN => bytes,
        _ => {
            return Err(format!(
                "{at}: not a fleet key (64 hex digits or 32 bytes, as `robots-proxy fleet init-key` writes)"
            ));
        }
    };
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(&key);
    Ok(FleetKey(out))
}

/// Writes a new random key to `path` (64 hex digits, mode 0600); never
/// over an existing file.
pub fn generate(path: &Path) -> Result<(), String> {
    use ring::rand::SecureRandom;
    let at = path.display();
    let mut key = [0u8; KEY_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| "no randomness from the system".to_string())?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            format!("{at} already exists; remove it first to make a new key")
        }
        _ => format!("{at}: {e}"),
    })?;
    writeln!(file, "{}", hex(&key))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{at}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: u8, old: Option<u8>) -> Keys {
        Keys::new(Some(&KeySettings {
            current: FleetKey([k; KEY_LEN]),
            old: old.map(|o| FleetKey([o; KEY_LEN])),
        }))
    }

    #[test]
    fn entries_open_under_their_own_key_and_place_only() {
        let a = keys(1, None);
        let sealed = a.seal_entry("robots-proxy:f:{http://a}:robots.1", b"meta");
        assert_eq!(
            a.open_entry(
                Kind::Robots,
                "robots-proxy:f:{http://a}:robots.1",
                sealed.clone()
            )
            .as_deref(),
            Some(&b"meta"[..])
        );
        assert_eq!(
            a.open_entry(
                Kind::Robots,
                "robots-proxy:f:{http://b}:robots.1",
                sealed.clone()
            ),
            None
        );
        assert_eq!(
            keys(2, None).open_entry(
                Kind::Robots,
                "robots-proxy:f:{http://a}:robots.1",
                sealed.clone()
            ),
            None
        );
        // During a rotation: the new key verifies what the old one sealed.
        assert!(
            keys(2, Some(1))
                .open_entry(Kind::Robots, "robots-proxy:f:{http://a}:robots.1", sealed)
                .is_some()
        );
        assert_eq!(
            a.open_entry(Kind::Robots, "k", b"{\"state\":\"allow_all\"}".to_vec()),
            None
        );
        assert_eq!(a.rejected_count(Kind::Robots), 2);
        // Unauthenticated: nothing sealed, nothing checked.
        let none = Keys::new(None);
        assert_eq!(none.seal_entry("k", b"v"), b"v");
        assert_eq!(
            none.open_entry(Kind::Robots, "k", b"v".to_vec()).as_deref(),
            Some(&b"v"[..])
        );
    }

    #[test]
    fn messages_open_on_their_own_channel_only() {
        let a = keys(1, None);
        let sealed = a.seal_message("c", b"reload\nn\nconfiguration".to_vec());
        assert_eq!(
            a.open_message(Kind::Message, "c", &sealed),
            Some(&b"reload\nn\nconfiguration"[..])
        );
        assert_eq!(a.open_message(Kind::Message, "d", &sealed), None);
        assert_eq!(
            a.open_message(Kind::Message, "c", b"reload\nn\nconfiguration"),
            None
        );
        let mut forged = sealed.clone();
        *forged.last_mut().expect("not empty") ^= 1;
        assert_eq!(a.open_message(Kind::Message, "c", &forged), None);
        assert_eq!(a.rejected_count(Kind::Message), 3);
    }

    /// What verifying a shared entry costs (docs/performance.md, "The
    /// fleet key's tags"): `cargo test --release --lib
    /// fleet::key::tests::cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement"]
    fn cost_of_a_verify() {
        let k = keys(7, None);
        let place = "robots-proxy:default:{https://www.example.com:443}:robots.1";
        for size in [500usize, 2048, 65536] {
            let sealed = k.seal_entry(place, &vec![b'x'; size]);
            let n = 200_000 / (size / 500).max(1);
            let started = std::time::Instant::now();
            for _ in 0..n {
                let opened =
                    k.open_entry(Kind::Robots, place, std::hint::black_box(sealed.clone()));
                assert!(opened.is_some());
            }
            let ns = started.elapsed().as_nanos() / n as u128;
            eprintln!("{size} B description: {ns} ns per verify");
        }
    }

    #[test]
    fn keys_are_made_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fleet.key");
        generate(&path).expect("made");
        let key = load(&path).expect("read");
        assert!(
            generate(&path)
                .expect_err("exists")
                .contains("already exists")
        );
        let raw = dir.path().join("raw.key");
        std::fs::write(&raw, key.0).expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&raw, std::fs::Permissions::from_mode(0o644)).expect("chmod");
            assert!(load(&raw).expect_err("open").contains("0600"));
            std::fs::set_permissions(&raw, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        assert_eq!(load(&raw).expect("raw"), key);
        std::fs::write(&raw, "short").expect("write");
        assert!(load(&raw).expect_err("short").contains("not a fleet key"));
    }
}
