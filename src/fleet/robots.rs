//! One robots.txt fetch per origin for the whole fleet (and, under keys
//! of its own, one tdmrep.json fetch: [`Doc`]).
//!
//! An origin's shared entry is one Redis hash (`…:{<origin>}:robots`):
//! `meta` (the entry as the robots store describes it, opaque here,
//! after the fleet key's tag over it and the hash's key, [`super::key`]:
//! a `meta` whose tag fails counts as none),
//! `text` (the file in force, deflate-compressed) and `expires` (Redis
//! clock, milliseconds). A node that misses locally runs [`LOOK_SCRIPT`]:
//! a fresh entry is returned; else the node takes the lease
//! (`SET …:lease <node> NX PX`) and fetches, with the expired entry as its
//! stale-on-error copy; else another node is fetching, and this one waits
//! for its result ([`Fleet::wait_robots`]): woken by the `fetched` event,
//! or by a poll every [`POLL_EVERY`] if the event is lost. The hash
//! outlives its expiry by a day at most, within `robots.stale_max` of the
//! fetch, so the last good copy is
//! there for any node whose fetch fails.
//!
//! Redis's clock decides freshness, so the nodes' clocks do not matter:
//! `expires`, and `fetched` (when the file was fetched, the fetching
//! node's age of it set on Redis's clock), are Redis's times; a look
//! returns them as durations (time left, age), which each node turns into
//! its own clock when it copies the entry into its local store.
//!
//! Clients choose the origins, so the size of what is shared is bounded:
//! a text larger than [`MAX_SHARED_TEXT`] compressed is not shared (each
//! node fetches its own), and an entry is stored only while Redis's used
//! memory is under its share of `maxmemory` ([`super::memory`]).

use std::io::{Read, Write};
use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use tokio::time::Instant;

use super::events::{Event, Purge};
use super::{Fleet, Unavailable};

/// How often a node waiting for another's fetch looks again, when no
/// event wakes it first.
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// KEYS: entry, lease. ARGV: lease token ('' = look only, take no
/// lease), lease ms, '1' to take the lease even over a fresh entry (one
/// this node could not read). Returns `{state, meta, text, ms left, age
/// ms, now}` (age -1: the entry has no `fetched`; now: ms on Redis's
/// clock):
/// state 1 fresh, 2 lease taken (meta and text: the entry, if any), 0
/// another node holds the lease (or look only). An `expires` that is not
/// a number, or whose time left is not a finite positive number ('inf',
/// 'nan', a corrupted or hostile hash), counts as expired; the time left
/// is at most [`MAX_LEFT`]. ARGV[4] and ARGV[5]: the largest `meta` and
/// (compressed) `text` read; an entry with a larger one is not read at
/// all (a corrupted or hostile Redis could hold 512 MB there), and counts
/// as none: the node takes the lease and fetches.
const LOOK_SCRIPT: &str = r"
local e = {false, false, false}
if redis.call('HSTRLEN', KEYS[1], 'meta') <= tonumber(ARGV[4])
  and redis.call('HSTRLEN', KEYS[1], 'text') <= tonumber(ARGV[5]) then
  e = redis.call('HMGET', KEYS[1], 'meta', 'text', 'expires', 'fetched')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local age = -1
local fetched, stamped = string.match(e[1] and e[4] or '', '^(%d+) (%d+)$')
fetched = stamped and stamped == e[3] and tonumber(fetched)
if fetched and fetched < math.huge then
  age = math.floor(math.max(0, math.min(now - fetched, 31536000000)))
end
local left = 0
local expires = e[1] and e[3] and tonumber(e[3])
if expires then
  left = expires - now
  if left ~= left or left <= 0 or left == math.huge then left = 0 end
  left = math.floor(math.min(left, 31536000000))
end
if left > 0 and ARGV[3] ~= '1' then return {1, e[1], e[2] or '', left, age, now} end
if ARGV[1] ~= '' and redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {2, e[1] or '', e[2] or '', 0, age, now}
end
return {0, '', '', 0, -1, now}
";

/// KEYS: entry, lease. ARGV: meta, text, text mode ('1' set, '0' drop,
/// '2' keep: a stale entry's text is the one already stored), ms fresh,
/// ms kept after, lease token, channel, message, share of `maxmemory`,
/// age ms (how long ago the file was fetched: `fetched` holds the time
/// on Redis's clock and the `expires` it goes with, so an entry stored
/// by a node that does not write it is not read with another's). Stores
/// the entry only while the token holds the lease (a purge, or a lease
/// that ran out, took it away) and, to keep a text, while the text is
/// there (the hash may have been evicted or deleted under a lease that
/// held: an entry without its text could be read by no node), and only
/// while Redis's used memory with it stays under the share of its
/// `maxmemory` (none: no bound); gives the lease back, and publishes the
/// message when stored. Returns 1 when stored, 2 when over the share, 0 when not.
const STORE_SCRIPT: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[6] then return 0 end
if ARGV[3] == '2' and redis.call('HEXISTS', KEYS[1], 'text') == 0 then
  redis.call('DEL', KEYS[2])
  return 0
end
local mem = redis.call('INFO', 'memory')
local max = tonumber(string.match(mem, 'maxmemory:(%d+)') or '0') or 0
local used = tonumber(string.match(mem, 'used_memory:(%d+)') or '0') or 0
if max > 0 and used + #ARGV[1] + #ARGV[2] > max * tonumber(ARGV[9]) then
  redis.call('DEL', KEYS[2])
  return 2
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fresh = tonumber(ARGV[4])
local expires = string.format('%.0f', now + fresh)
redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'expires', expires,
  'fetched', string.format('%.0f', math.max(0, now - tonumber(ARGV[10]))) .. ' ' .. expires)
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'text', ARGV[2])
elseif ARGV[3] == '0' then
  redis.call('HDEL', KEYS[1], 'text')
end
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', fresh + tonumber(ARGV[5])))
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
";

/// KEYS: lease. ARGV: lease token. Gives the lease back if the token
/// holds it.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// KEYS: entry, lease. ARGV: channel, message. Drops the entry and any
/// lease (a fetch under way cannot store what it read before the purge),
/// then tells every node. Returns how many subscribers heard it.
const PURGE_SCRIPT: &str = r"
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return redis.call('PUBLISH', ARGV[1], ARGV[2])
";

static LOOK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(LOOK_SCRIPT));
static STORE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(STORE_SCRIPT));
static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_SCRIPT));
static PURGE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PURGE_SCRIPT));

/// The largest `meta` stored or read back (a corrupted or hostile Redis
/// could hold any size; an origin's redirect URLs and ETag are in it):
/// larger counts as none, and is not stored.
pub const MAX_META: usize = 64 * 1024;

/// The largest text shared, compressed: a larger one is not stored, and
/// each node fetches its own (a client can have the fleet fetch files of
/// its choosing, 500 KiB each and incompressible; a robots.txt that is
/// text compresses to a fifth or less).
pub const MAX_SHARED_TEXT: usize = 128 * 1024;

/// The most time left a look returns (a year, in milliseconds: what
/// the scripts write in `expires`), whatever a hash says: the robots
/// store bounds it by `robots.max_ttl` in any case.
pub const MAX_LEFT: Duration = Duration::from_millis(31_536_000_000);

/// A document the fleet shares per origin, each under keys of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doc {
    /// `/robots.txt`.
    Robots,
    /// `/.well-known/tdmrep.json` (W3C TDMRep).
    Tdmrep,
}

impl Doc {
    /// The version of the shared entry's form, in its key: nodes of
    /// another version keep apart instead of overwriting each other's
    /// entries.
    fn form(self) -> &'static str {
        match self {
            Doc::Robots => "robots.1",
            Doc::Tdmrep => "tdmrep.1",
        }
    }

    /// The lease's name, in its key.
    fn lease(self) -> &'static str {
        match self {
            Doc::Robots => "lease",
            Doc::Tdmrep => "tdmrep.lease",
        }
    }

    /// What an entry failing its fleet-key check counts as.
    fn kind(self) -> super::key::Kind {
        match self {
            Doc::Robots => super::key::Kind::Robots,
            Doc::Tdmrep => super::key::Kind::Tdmrep,
        }
    }

    /// The name the replay stamps of `origin`'s entry are kept under.
    fn generation(self, origin: &str) -> std::borrow::Cow<'_, str> {
        match self {
            Doc::Robots => origin.into(),
            Doc::Tdmrep => format!("{origin} tdmrep").into(),
        }
    }
}

/// An origin's entry as the fleet shares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRobots {
    /// The robots store's description of the entry.
    pub meta: Vec<u8>,
    /// The file in force, if any (decompressed).
    pub text: Option<Vec<u8>>,
    /// Time left until it expires (zero: expired).
    pub left: Duration,
    /// How long ago the file was fetched, on Redis's clock (`None`: an
    /// entry stored without it).
    pub age: Option<Duration>,
}

/// The right to fetch an origin's robots.txt for the fleet: a token
/// unique to one fetch of one process, and when it was taken (ms on
/// Redis's clock: the entry stored under it is stamped with it,
/// [`super::stamp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease(String, u64, Instant);

/// What a look at the shared entry found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// A fresh entry: judge by it.
    Fresh(SharedRobots),
    /// This node holds the lease: fetch, then [`Fleet::store_robots`];
    /// the entry, if any, is the stale-on-error copy.
    Lead(Option<SharedRobots>, Lease),
    /// Another node is fetching.
    Busy,
}

/// Whether a look takes the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Look only.
    No,
    /// When there is no fresh entry.
    IfNotFresh,
    /// Even over a fresh entry (one this node could not read).
    Always,
}

/// What to do with the stored text when an entry is stored.
#[derive(Debug, Clone)]
pub enum Text {
    /// This file is in force.
    Set(Bytes),
    /// No file is in force.
    Drop,
    /// The file already stored stays in force (a stale copy).
    Keep,
}

/// The lease lasts the fetch's own timeout and this much more: a node
/// that died while fetching holds the others up no longer than that.
const LEASE_MARGIN: Duration = Duration::from_secs(2);

impl Fleet {
    fn doc_keys(&self, doc: Doc, origin: &str) -> (String, String) {
        (self.key(origin, doc.form()), self.key(origin, doc.lease()))
    }

    /// [`Fleet::look_doc`] of robots.txt.
    pub async fn look_robots(
        &self,
        origin: &str,
        take: Take,
        fetch_timeout: Duration,
        max_text: usize,
    ) -> Result<Look, Unavailable> {
        self.look_doc(Doc::Robots, origin, take, fetch_timeout, max_text)
            .await
    }

    /// Looks up `origin`'s shared entry of `doc`, taking the lease to
    /// fetch it (for `fetch_timeout` plus a margin) as `take` says. A text
    /// larger than `max_text` once decompressed (a corrupted or hostile
    /// Redis) counts as none.
    pub async fn look_doc(
        &self,
        doc: Doc,
        origin: &str,
        take: Take,
        fetch_timeout: Duration,
        max_text: usize,
    ) -> Result<Look, Unavailable> {
        let (entry, lease) = self.doc_keys(doc, origin);
        let place = entry.clone();
        let token = match take {
            Take::No => String::new(),
            Take::IfNotFresh | Take::Always => self.lease_token(),
        };
        let always = if take == Take::Always { "1" } else { "0" };
        let lease_ms = super::micros(fetch_timeout + LEASE_MARGIN) / 1000;
        // Deflate grows what it cannot compress by a little.
        let max_compressed = max_text + max_text / 64 + 1024;
        let (state, meta, text, left, age, now) = self
            .call(|mut conn| {
                let token = token.clone();
                async move {
                    LOOK.key(&entry)
                        .key(&lease)
                        .arg(token)
                        .arg(lease_ms)
                        .arg(always)
                        .arg(MAX_META + super::key::TAG_LEN + super::stamp::STAMP_MAX)
                        .arg(max_compressed)
                        .invoke_async::<(i64, Vec<u8>, Vec<u8>, i64, i64, u64)>(&mut conn)
                        .await
                }
            })
            .await?;
        // A `meta` whose fleet-key tag fails counts as none: a fresh one
        // is fetched again under the lease, an expired one is no
        // stale-on-error copy.
        let meta = if meta.is_empty() {
            meta
        } else {
            self.keys
                .open_entry(doc.kind(), &place, meta)
                .and_then(|opened| self.unstamped(doc, origin, &place, &opened, now))
                .unwrap_or_default()
        };
        // Decompressed on the blocking pool: a text of up to `max_text`
        // takes a millisecond or more, which would stall every connection
        // an async worker serves.
        let shared = async move {
            if meta.is_empty() || meta.len() > MAX_META {
                return None;
            }
            let text = if text.is_empty() {
                None
            } else {
                tokio::task::spawn_blocking(move || decompress(&text, max_text))
                    .await
                    .ok()
                    .flatten()
            };
            Some(SharedRobots {
                meta,
                text,
                left: Duration::from_millis(u64::try_from(left).unwrap_or(0)).min(MAX_LEFT),
                age: u64::try_from(age)
                    .ok()
                    .map(|ms| Duration::from_millis(ms).min(MAX_LEFT)),
            })
        };
        Ok(match state {
            // Fresh with no time left (the script says fresh only with
            // time left; kept as a guard): nothing fresh. A look only
            // finds nothing; otherwise fetched again, under the lease.
            1 if left <= 0 => match take {
                Take::No => Look::Busy,
                Take::IfNotFresh | Take::Always => {
                    Box::pin(self.look_doc(doc, origin, Take::Always, fetch_timeout, max_text))
                        .await?
                }
            },
            // Fresh but too large to read: fetched again, under the lease.
            1 => match shared.await {
                Some(s) => Look::Fresh(s),
                None => {
                    Box::pin(self.look_doc(doc, origin, Take::Always, fetch_timeout, max_text))
                        .await?
                }
            },
            2 => Look::Lead(shared.await, Lease(token, now, Instant::now())),
            _ => Look::Busy,
        })
    }

    /// The `meta` of an opened entry of `origin` (under `place`), read at
    /// `now` (ms on Redis's clock), without its stamp; `None` (and
    /// counted) when it has none, or is an old copy ([`super::stamp`]).
    /// Unchanged in an unauthenticated fleet.
    fn unstamped(
        &self,
        doc: Doc,
        origin: &str,
        place: &str,
        opened: &[u8],
        now: u64,
    ) -> Option<Vec<u8>> {
        if !self.keys.enabled() {
            return Some(opened.to_vec());
        }
        let Some((stored, until, meta)) = super::stamp::unstamp(opened) else {
            self.keys.rejected(doc.kind(), place);
            return None;
        };
        match self
            .generations
            .admit(&doc.generation(origin), stored, until, now)
        {
            Ok(()) => Some(meta.to_vec()),
            Err(_) => {
                self.keys.rejected(super::key::Kind::Replay, place);
                None
            }
        }
    }

    /// A lease token: this node, this instance of the proxy (random: two
    /// nodes of one name, say two containers whose process is pid 1, are
    /// told apart), this fetch.
    fn lease_token(&self) -> String {
        static FETCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = FETCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{} {:016x} {n}", self.node(), self.instance)
    }

    /// Waits for the node holding `origin`'s lease to store its result,
    /// until `deadline`: the fresh entry, or the lease when the other
    /// node gave up or died (this node fetches then). `Err` when Redis
    /// stops answering or the deadline passes.
    pub async fn wait_robots(
        &self,
        origin: &str,
        fetch_timeout: Duration,
        max_text: usize,
        deadline: Instant,
    ) -> Result<Look, Unavailable> {
        self.wait_doc(Doc::Robots, origin, fetch_timeout, max_text, deadline)
            .await
    }

    /// [`Fleet::wait_robots`] for `doc`.
    pub async fn wait_doc(
        &self,
        doc: Doc,
        origin: &str,
        fetch_timeout: Duration,
        max_text: usize,
        deadline: Instant,
    ) -> Result<Look, Unavailable> {
        let mut events = self.events();
        loop {
            let woken = tokio::time::timeout_at(deadline.min(Instant::now() + POLL_EVERY), async {
                loop {
                    match events.recv().await {
                        Ok(Event::Fetched(o)) if *o == *origin => return,
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await
                        }
                    }
                }
            })
            .await;
            if woken.is_err() && Instant::now() >= deadline {
                return Err(Unavailable);
            }
            match self
                .look_doc(doc, origin, Take::IfNotFresh, fetch_timeout, max_text)
                .await?
            {
                Look::Busy => {}
                found => return Ok(found),
            }
        }
    }

    /// [`Fleet::store_robots_fetched`] of a file fetched just now.
    pub async fn store_robots(
        &self,
        origin: &str,
        lease: &Lease,
        meta: &[u8],
        text: Text,
        fresh: Duration,
        kept_after: Duration,
    ) -> Result<bool, Unavailable> {
        self.store_robots_fetched(origin, lease, meta, text, fresh, kept_after, Duration::ZERO)
            .await
    }

    /// Stores `origin`'s entry for the fleet while `lease` holds: fresh
    /// for `fresh`, kept `kept_after` longer as the stale-on-error copy,
    /// its file fetched `age` ago; gives the lease back and tells the
    /// other nodes. `Ok(false)`: not stored (the lease was lost to a purge
    /// or ran out, the text to keep is no longer in Redis, `meta` is
    /// larger than [`MAX_META`], the text larger than [`MAX_SHARED_TEXT`]
    /// compressed, or Redis's memory past the entries' share).
    #[allow(clippy::too_many_arguments)]
    pub async fn store_robots_fetched(
        &self,
        origin: &str,
        lease: &Lease,
        meta: &[u8],
        text: Text,
        fresh: Duration,
        kept_after: Duration,
        age: Duration,
    ) -> Result<bool, Unavailable> {
        self.store_doc(
            Doc::Robots,
            origin,
            lease,
            meta,
            text,
            fresh,
            kept_after,
            age,
        )
        .await
    }

    /// [`Fleet::store_robots_fetched`] for `doc`.
    #[allow(clippy::too_many_arguments)]
    pub async fn store_doc(
        &self,
        doc: Doc,
        origin: &str,
        lease: &Lease,
        meta: &[u8],
        text: Text,
        fresh: Duration,
        kept_after: Duration,
        age: Duration,
    ) -> Result<bool, Unavailable> {
        if meta.len() > MAX_META {
            self.release_doc(doc, origin, lease).await?;
            return Ok(false);
        }
        let (entry, lease_key) = self.doc_keys(doc, origin);
        let (mode, compressed) = match text {
            // On the blocking pool, as a text is decompressed.
            Text::Set(t) => match tokio::task::spawn_blocking(move || compress(&t)).await {
                Ok(packed) => ("1", packed),
                Err(_) => {
                    self.release_doc(doc, origin, lease).await?;
                    return Ok(false);
                }
            },
            Text::Drop => ("0", Vec::new()),
            Text::Keep => ("2", Vec::new()),
        };
        if compressed.len() > MAX_SHARED_TEXT {
            self.memory_stats()
                .robots_too_large
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(
                origin,
                compressed = compressed.len(),
                ?doc,
                "not shared: larger than a shared entry may be"
            );
            self.release_doc(doc, origin, lease).await?;
            return Ok(false);
        }
        let message = self.message(&Event::Fetched(origin.into()));
        let channel = self.channel();
        // Stamped with the lease's time and its life in Redis, both on
        // Redis's clock, for replays ([`super::stamp`]).
        let stored_ms = lease.1;
        let until_ms =
            stored_ms.saturating_add(super::millis(lease.2.elapsed() + fresh + kept_after));
        self.generations.stored(&doc.generation(origin), stored_ms);
        let meta = if self.keys.enabled() {
            self.keys
                .seal_entry(&entry, &super::stamp::stamp(meta, stored_ms, until_ms))
        } else {
            meta.to_vec()
        };
        let stored = self
            .call(|mut conn| async move {
                STORE
                    .key(&entry)
                    .key(&lease_key)
                    .arg(&meta)
                    .arg(compressed)
                    .arg(mode)
                    .arg(super::micros(fresh.max(Duration::from_millis(1))) / 1000)
                    .arg(super::micros(kept_after) / 1000)
                    .arg(&lease.0)
                    .arg(channel)
                    .arg(message)
                    .arg(super::memory::ROBOTS_SHARE)
                    .arg(super::micros(age) / 1000)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        let counter = match stored {
            1 => &self.memory_stats().robots_stored,
            2 => {
                tracing::debug!(
                    origin,
                    ?doc,
                    "not shared: Redis's memory is past the entries' share"
                );
                &self.memory_stats().robots_over_share
            }
            _ => return Ok(false),
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(stored == 1)
    }

    /// Gives `origin`'s lease back without a result (what this node
    /// found says nothing about the origin: its own shortage, its own
    /// network): the next node fetches.
    pub async fn release_robots(&self, origin: &str, lease: &Lease) -> Result<(), Unavailable> {
        self.release_doc(Doc::Robots, origin, lease).await
    }

    /// [`Fleet::release_robots`] for `doc`.
    pub async fn release_doc(
        &self,
        doc: Doc,
        origin: &str,
        lease: &Lease,
    ) -> Result<(), Unavailable> {
        let (_, lease_key) = self.doc_keys(doc, origin);
        self.call(|mut conn| async move {
            RELEASE
                .key(&lease_key)
                .arg(&lease.0)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(drop)
    }

    /// Drops `origin`'s shared entries (robots.txt and tdmrep.json, both
    /// under the origin's hash tag) and any lease on them, and tells every
    /// node to drop its own copies. Returns how many nodes heard it (on a
    /// Redis Cluster, those subscribed through the origin's master).
    pub async fn purge_robots(&self, origin: &str) -> Result<u64, Unavailable> {
        let (entry, lease) = self.doc_keys(Doc::Robots, origin);
        let (tdm_entry, tdm_lease) = self.doc_keys(Doc::Tdmrep, origin);
        let message = self.message(&Event::Purged {
            what: Purge::Robots(origin.into()),
            from: self.author(),
        });
        let channel = self.channel();
        self.call(|mut conn| async move {
            PURGE
                .key(&entry)
                .key(&lease)
                .key(&tdm_entry)
                .key(&tdm_lease)
                .arg(channel)
                .arg(message)
                .invoke_async::<u64>(&mut conn)
                .await
        })
        .await
    }
}

fn compress(text: &[u8]) -> Vec<u8> {
    let mut encoder = DeflateEncoder::new(Vec::new(), Compression::fast());
    // Writing to a Vec cannot fail.
    encoder
        .write_all(text)
        .and_then(|()| encoder.finish())
        .unwrap_or_default()
}

/// `None` when the bytes are not deflate or hold more than `limit`.
fn decompress(bytes: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    DeflateDecoder::new(bytes)
        .take(cap)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() <= limit).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_look_script_bounds_the_time_left_as_max_left_says() {
        assert!(LOOK_SCRIPT.contains(&format!("math.min(left, {})", MAX_LEFT.as_millis())));
    }

    #[test]
    fn texts_come_back_whole_and_bombs_do_not() {
        let text = b"User-agent: *\nDisallow: /private\n".repeat(100);
        let packed = compress(&text);
        assert!(packed.len() < text.len() / 10);
        assert_eq!(decompress(&packed, text.len()).as_deref(), Some(&text[..]));
        assert_eq!(decompress(&packed, text.len() - 1), None);
        assert_eq!(decompress(b"not deflate at all", 1000), None);
    }
}
