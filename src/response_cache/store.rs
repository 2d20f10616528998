//! Storage: plain files under `<state_dir>/cache/` and an in-memory index.
//!
//! Each stored response is two files in `objects/<kk>/` (`kk` the key's
//! first two hex digits): `<key>.meta` (a
//! SHA-256 line, then JSON: URL, Vary, the cache policy, the response
//! headers, the body's length and SHA-256, the body file's name) and
//! `<key>-<n>.body` (the body as received). Both are written to `tmp/`
//! and renamed into place, the body first, so a meta names only a body
//! that was complete; a replaced object gets a new body name, so a
//! reader of the old one is never handed a mix. Reads check the length
//! (and, for bodies up to the memory tier's threshold, the digest before
//! serving; for larger ones while streaming, holding the last chunk back
//! so that a corrupt body ends short of its Content-Length and is never
//! delivered whole). A file that fails is deleted and the lookup is a
//! miss. At start `tmp/` is emptied and `objects/` scanned to rebuild the
//! index; anything unreadable is deleted.
//!
//! Why plain files and not `foyer` or `cacache`: the index has to know
//! URL, Vary and policy of every object anyway (purge by prefix, Vary
//! keys), and whole-file rename gives the crash safety asked for, with no
//! dependency beyond `ring`'s SHA-256. Measured (release, one task, every
//! file operation through Tokio's blocking pool): storing 10,000
//! responses of 1.4 KB takes 1.8 s on a quiet machine (0.18 ms each,
//! policy included; 5 to 12 s while other builds load it), rebuilding the
//! index from them at start 0.2 s, reading them all back from disk with
//! the digest checked 1.0 to 1.2 s (0.1 ms each): far below an origin
//! round trip. The alternatives' cost on this 2-core machine:
//! `cacache` 13 (tokio runtime) adds 25 crates (ssri, sha1, sha2,
//! miette, memmap2, reflink-copy, ...) and 21 s to a clean debug build;
//! with its default async-std runtime 47 crates; `foyer` 0.22 adds 28
//! crates, among them zstd-sys and lz4-sys (C code built by `cc`), and
//! 57 s. Neither would remove the index above.
//!
//! The index keeps only what finding, evicting and purging an object need
//! (its primary key, which holds the URL, body file number, sizes and
//! time: an [`IndexEntry`], about 360 bytes plus the URL, 399 bytes with a
//! 38-byte URL, `index_entry_memory`), so a miss never reads a file and
//! its memory is bounded by `cache.max_objects`. The policy and headers
//! (the meta, about 10 KB once parsed) are read from the meta file when
//! an object is used
//! and then kept in the memory tier with the object's small body, counted
//! in `cache.memory_size` and evicted with it. Disk use is counted in
//! whole 4 KiB blocks per file, so small objects are not undercounted
//! eightfold; at most `cache.max_variants` objects are kept per URL
//! (variants and users), the oldest evicted first. At start only the
//! newest `max_objects` meta files (by the sequence number in their body
//! file's name) are read, and then only their index fields; the rest are
//! deleted after the cache opened.
//!
//! Files are deleted by one thread, the janitor (`store/janitor.rs`):
//! removing objects, however many, changes the index and queues their
//! files. Measured (release): a purge of 100,000 objects takes its caller
//! 85 ms, a lookup meanwhile waiting 1 ms at most for the index lock
//! (`purge_index_time`); bench/cache-purge's janitor deletes their
//! 200,000 files in 32 s while the proxy serves at full load on one core.

mod janitor;

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_cache_semantics::CachePolicy;
use hyper::body::Frame;
use lru::LruCache;
use ring::digest;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Stats;
use super::body::{self, READ_CHUNK};
use crate::http::body::{Body, full_body};
use crate::http::files::create_private_dir;
use janitor::{Janitor, Job, Rule};

/// Object key: SHA-256 of the key text (primary key and Vary'd values).
pub(crate) type ObjKey = [u8; 32];

pub(crate) fn obj_key(text: &str) -> ObjKey {
    let d = digest::digest(&digest::SHA256, text.as_bytes());
    let mut k = [0u8; 32];
    k.copy_from_slice(d.as_ref());
    k
}

pub(crate) use crate::http::text::hex;

/// What is known of a stored response besides its body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Meta {
    /// The absolute URL (scheme included) it answers.
    pub url: String,
    /// The key before Vary: the URL, and the user in `store-all`.
    pub primary: String,
    /// Request headers named by the response's Vary, lower-case.
    pub vary: Vec<String>,
    /// The proxy user it belongs to (`store-all` only).
    pub user: Option<String>,
    pub policy: CachePolicy,
    pub status: u16,
    /// Response headers as served (hop-by-hop ones removed).
    #[serde(with = "http_serde::header_map")]
    pub headers: HeaderMap,
    pub body_file: String,
    pub body_len: u64,
    pub body_sha256: String,
    /// Seconds since the epoch when stored (or last revalidated).
    pub stored_at: u64,
    /// `store-all`: served until then (seconds since the epoch).
    pub expires_at: Option<u64>,
    /// `rfc9111`: when the policy's freshness ends, worked out on first
    /// use (a stored response's age grows with the clock, so it is one
    /// instant); a refreshed response is a new `Meta`.
    #[serde(skip)]
    pub fresh_until: FreshUntil,
}

/// [`Meta::is_fresh`]'s memory. A clone starts empty: a copy of a `Meta`
/// is made to change it (a 304 gives it a new policy), and must work its
/// freshness out again.
#[derive(Debug, Default)]
pub(crate) struct FreshUntil(std::sync::OnceLock<std::time::SystemTime>);

impl Clone for FreshUntil {
    fn clone(&self) -> Self {
        FreshUntil::default()
    }
}

impl Meta {
    /// True if the stored response is fresh at `now`: its freshness
    /// lifetime is longer than its age (RFC 9111 §4.2), what
    /// `CachePolicy::is_stale` answers, without working it out again.
    pub(crate) fn is_fresh(&self, now: std::time::SystemTime) -> bool {
        let until = self
            .fresh_until
            .0
            .get_or_init(|| now + self.policy.time_to_live(now));
        now < *until
    }
}

/// Bytes a file of `len` bytes takes on disk: whole 4 KiB blocks, one
/// at least (a file costs its inode and directory entry too).
pub(crate) fn on_disk(len: u64) -> u64 {
    const BLOCK: u64 = 4096;
    len.div_ceil(BLOCK).max(1) * BLOCK
}

/// Memory a parsed meta is counted for in the memory tier: its file's
/// length times this. Measured (bench/cache-index, 2,000 objects all in
/// the memory tier): a 1,119-byte meta file costs about 10.8 KB parsed
/// (the policy's and the response's header maps, the Cache-Control maps,
/// the strings), so a 64 MiB memory tier holds about 6,000 of them.
const META_MEMORY_FACTOR: u64 = 10;

/// What the index keeps of a stored object: no headers, no policy.
struct IndexEntry {
    /// Its URL: `Index::by_url`'s key, shared.
    url: UrlKey,
    /// Shared with `Index::vary`'s key (and, most often, with `url`).
    primary: Arc<str>,
    /// The body file is `<key>-<seq>.body`.
    seq: u64,
    body_len: u64,
    /// Disk use of both files, in blocks.
    size: u64,
    stored_at: u64,
}

/// An object in the memory tier: its parsed meta and, when small, its body.
struct Hot {
    meta: Arc<Meta>,
    body: Option<Bytes>,
    /// What it is counted for in `memory_size`.
    cost: u64,
}

struct Index {
    disk: LruCache<ObjKey, IndexEntry>,
    disk_bytes: u64,
    mem: LruCache<ObjKey, Hot>,
    mem_bytes: u64,
    /// Bodies held in `mem`.
    mem_bodies: u64,
    /// Primary key → Vary names of its last stored response, and how many
    /// objects are stored under it.
    vary: HashMap<Arc<str>, (Vec<String>, usize)>,
    /// URL → objects stored for it (every variant and user), in order: a
    /// prefix is a range, which a purge goes through in batches.
    by_url: BTreeMap<UrlKey, Keys>,
}

/// The URL in a primary key (`GET\n<url>`, `store-all\n<url>\n<user>`).
fn url_of(primary: &str) -> &str {
    primary.split('\n').nth(1).unwrap_or("")
}

/// A URL held as a primary key that contains it, so that the URL needs
/// no string of its own in the index: it hashes and compares as the URL.
#[derive(Clone)]
struct UrlKey(Arc<str>);

impl UrlKey {
    fn new(url: &str, primary: &Arc<str>) -> UrlKey {
        if url_of(primary) == url {
            UrlKey(primary.clone())
        } else {
            UrlKey(Arc::from(format!("\n{url}")))
        }
    }

    fn url(&self) -> &str {
        url_of(&self.0)
    }
}

impl PartialEq for UrlKey {
    fn eq(&self, other: &Self) -> bool {
        self.url() == other.url()
    }
}

impl Eq for UrlKey {}

impl Ord for UrlKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.url().cmp(other.url())
    }
}

impl PartialOrd for UrlKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::borrow::Borrow<str> for UrlKey {
    fn borrow(&self) -> &str {
        self.url()
    }
}

/// The objects of one URL: one, most often, held without an allocation.
enum Keys {
    One(ObjKey),
    Many(Vec<ObjKey>),
}

impl Keys {
    fn as_slice(&self) -> &[ObjKey] {
        match self {
            Keys::One(k) => std::slice::from_ref(k),
            Keys::Many(v) => v,
        }
    }

    fn add(&mut self, key: ObjKey) {
        if self.as_slice().contains(&key) {
            return;
        }
        match self {
            Keys::One(k) => *self = Keys::Many(vec![*k, key]),
            Keys::Many(v) => v.push(key),
        }
    }

    /// Removes `key`; returns whether none is left.
    fn remove(&mut self, key: &ObjKey) -> bool {
        match self {
            Keys::One(k) => k == key,
            Keys::Many(v) => {
                v.retain(|k| k != key);
                let empty = v.is_empty();
                if let [one] = v.as_slice() {
                    let one = *one;
                    *self = Keys::One(one);
                }
                empty
            }
        }
    }
}

impl Index {
    /// Counts one more object under `primary`, whose Vary is now `vary`;
    /// returns the primary key as the index shares it.
    fn set_vary(&mut self, primary: &str, vary: &[String]) -> Arc<str> {
        let shared = match self.vary.get_key_value(primary) {
            Some((k, _)) => k.clone(),
            None => Arc::from(primary),
        };
        let e = self
            .vary
            .entry(shared.clone())
            .or_insert_with(|| (Vec::new(), 0));
        if e.0 != vary {
            e.0 = vary.to_vec();
        }
        e.1 += 1;
        shared
    }

    /// Lists `key` under `url`; returns the URL as the index shares it.
    fn add_url(&mut self, url: &str, primary: &Arc<str>, key: ObjKey) -> UrlKey {
        if let Some(shared) = self.by_url.get_key_value(url).map(|(k, _)| k.clone()) {
            if let Some(keys) = self.by_url.get_mut(url) {
                keys.add(key);
            }
            return shared;
        }
        let shared = UrlKey::new(url, primary);
        self.by_url.insert(shared.clone(), Keys::One(key));
        shared
    }

    fn drop_hot(&mut self, key: &ObjKey) {
        if let Some(h) = self.mem.pop(key) {
            self.mem_bytes -= h.cost;
            self.mem_bodies -= u64::from(h.body.is_some());
        }
    }

    /// Takes `key` out of every map; returns its body file's sequence
    /// number, for the caller to delete its files.
    fn remove(&mut self, key: &ObjKey) -> Option<u64> {
        self.drop_hot(key);
        let e = self.disk.pop(key)?;
        self.disk_bytes -= e.size;
        if let Some((_, n)) = self.vary.get_mut(&e.primary) {
            *n -= 1;
            if *n == 0 {
                self.vary.remove(&e.primary);
            }
        }
        if let Some(keys) = self.by_url.get_mut(e.url.url())
            && keys.remove(key)
        {
            self.by_url.remove(e.url.url());
        }
        Some(e.seq)
    }
}

/// The name of an object's body file.
pub(crate) fn body_name(key: &ObjKey, seq: u64) -> String {
    format!("{}-{seq:016x}.body", hex(key))
}

/// The name of an object's meta file.
fn meta_name(key: &ObjKey) -> String {
    format!("{}.meta", hex(key))
}

/// `objects/<first two hex digits>/<name>`: names start with their
/// object's key, and 256 directories keep each one small.
fn object_file(objects: &Path, name: &str) -> PathBuf {
    match name.get(..2).filter(|_| !name.contains(['/', '\\'])) {
        Some(shard) => objects.join(shard).join(name),
        None => objects.join("invalid"),
    }
}

/// URLs a purge goes through per hold of the index lock.
const PURGE_BATCH: usize = 1024;

/// The sequence number in a body file's name, if it is `key`'s.
fn body_seq(key: &ObjKey, name: &str) -> Option<u64> {
    let rest = name.strip_prefix(&hex(key))?.strip_prefix('-')?;
    let seq = rest.strip_suffix(".body")?;
    if seq.len() != 16 {
        return None;
    }
    u64::from_str_radix(seq, 16).ok()
}

/// The fields of a meta file the index needs (the rest is skipped, not
/// parsed, at start).
#[derive(Deserialize)]
struct MetaHead {
    url: String,
    primary: String,
    vary: Vec<String>,
    body_file: String,
    body_len: u64,
    stored_at: u64,
}

/// An entry found for a lookup.
#[derive(Clone)]
pub(crate) struct Found {
    pub key: ObjKey,
    pub meta: Arc<Meta>,
}

pub(crate) struct Store {
    objects: PathBuf,
    tmp: PathBuf,
    /// Fair when a purge lets go of it between batches (parking_lot's
    /// `unlock_fair`): std's would let the purge take it again at once,
    /// and lookups wait for the whole purge.
    index: Arc<parking_lot::Mutex<Index>>,
    /// Held while a meta file is written and indexed (and while the
    /// janitor checks a key before deleting its meta).
    commit_lock: Arc<Mutex<()>>,
    memory_size: u64,
    disk_size: u64,
    max_objects: usize,
    max_variants: usize,
    /// Bodies up to this size are kept in memory too and verified whole
    /// before being served.
    small_max: u64,
    seq: AtomicU64,
    stats: Arc<Stats>,
    janitor: Janitor,
}

/// Stored responses are the clients' traffic: readable by the proxy's
/// user only, as the CA's key is.
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// Sets [`DIR_MODE`] on an existing directory.
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

pub(crate) fn unix_now(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The store's budgets (from `[cache]`).
pub(crate) struct Limits {
    pub memory_size: u64,
    pub disk_size: u64,
    pub max_objects: usize,
    pub max_variants: usize,
}

impl Store {
    /// Opens (creating) `dir`, empties its `tmp/` and rebuilds the index
    /// from `objects/`.
    pub fn open(dir: &Path, limits: &Limits, stats: Arc<Stats>) -> std::io::Result<Arc<Store>> {
        let objects = dir.join("objects");
        let tmp = dir.join("tmp");
        create_private_dir(&objects)?;
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        create_private_dir(&tmp)?;
        // A cache made by an earlier version (0755): closing its top
        // directories closes every file below them.
        for d in [dir, objects.as_path()] {
            make_private(d)?;
        }
        let small_max = (limits.memory_size / 8).min(256 * 1024);
        let index = Arc::new(parking_lot::Mutex::new(Index {
            disk: LruCache::unbounded(),
            disk_bytes: 0,
            mem: LruCache::unbounded(),
            mem_bytes: 0,
            mem_bodies: 0,
            vary: HashMap::new(),
            by_url: BTreeMap::new(),
        }));
        let commit_lock = Arc::new(Mutex::new(()));
        let (janitor, queue, rules) = Janitor::new(
            dir,
            &objects,
            index.clone(),
            commit_lock.clone(),
            stats.clone(),
        );
        let store = Store {
            objects,
            tmp,
            index,
            commit_lock,
            memory_size: limits.memory_size,
            disk_size: limits.disk_size,
            max_objects: limits.max_objects.max(1),
            max_variants: limits.max_variants.max(1),
            small_max,
            seq: AtomicU64::new(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            ),
            stats,
            janitor,
        };
        // What the scan leaves out of the index is deleted once the cache
        // is open: after a budget was lowered that can be most of the
        // files, and the proxy should not wait for it to listen.
        let scanned = store.scan(&rules);
        store.janitor.start(queue)?;
        scanned?;
        Ok(Arc::new(store))
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock()
    }

    /// Rebuilds the index: the newest `max_objects` meta files (by the
    /// sequence number in their body's name) are read, oldest first, only
    /// for their index fields; older ones, those the `purges` file
    /// removes (`rules`), bodies no meta names and anything unreadable are
    /// queued for the janitor. What it holds besides the index is 40
    /// bytes per file (keys and numbers, no names).
    fn scan(&self, rules: &janitor::Rules) -> std::io::Result<()> {
        let mut metas: Vec<ObjKey> = Vec::new();
        let mut bodies: Vec<(ObjKey, u64)> = Vec::new();
        let mut strays: Vec<PathBuf> = Vec::new();
        for top in std::fs::read_dir(&self.objects)? {
            let top = top?;
            let shard = top.file_name().to_string_lossy().into_owned();
            if !top.file_type()?.is_dir() {
                strays.push(top.path());
                continue;
            }
            if shard.len() != 2 || !shard.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            for entry in std::fs::read_dir(top.path())? {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let meta = name.strip_suffix(".meta").and_then(parse_hex);
                let body = name.strip_suffix(".body").and_then(|n| {
                    let (key, _) = n.split_once('-')?;
                    let key = parse_hex(key)?;
                    Some((key, body_seq(&key, &name)?))
                });
                match (meta, body) {
                    _ if !name.starts_with(&shard) => strays.push(entry.path()),
                    (Some(k), _) => metas.push(k),
                    (_, Some(b)) => bodies.push(b),
                    _ => strays.push(entry.path()),
                }
            }
        }
        // A body's name carries the store's sequence number (it only
        // grows, across restarts too): the newest objects are known from
        // the listing alone, and the oldest over the budget go unread.
        bodies.sort_unstable();
        let newest = |key: &ObjKey| {
            let end = bodies.partition_point(|(k, _)| k <= key);
            end.checked_sub(1)
                .and_then(|i| bodies.get(i))
                .filter(|(k, _)| k == key)
                .map_or(0, |(_, seq)| *seq)
        };
        let mut order: Vec<(u64, ObjKey)> = metas.iter().map(|k| (newest(k), *k)).collect();
        drop(metas);
        order.sort_unstable();
        let over = order.len().saturating_sub(self.max_objects);
        // Metas not indexed: their bodies go with the unindexed ones below.
        let mut unindexed: Vec<ObjKey> = Vec::new();
        for (_, key) in order.drain(..over) {
            unindexed.push(key);
            self.stats.evictions_disk.fetch_add(1, Ordering::Relaxed);
        }
        let mut victims = Vec::new();
        {
            let mut ix = self.lock();
            for (_, key) in order {
                let path = self.meta_path(&key);
                let bytes = std::fs::read(&path).ok();
                let head = bytes.as_deref().and_then(decode_meta_head);
                let valid = head.as_ref().and_then(|m| {
                    let seq = body_seq(&key, &m.body_file)?;
                    let len = std::fs::metadata(self.file(&m.body_file)).ok()?.len();
                    (len == m.body_len).then_some(seq)
                });
                let (Some(m), Some(seq)) = (head, valid) else {
                    self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
                    unindexed.push(key);
                    continue;
                };
                if rules.removes(&key, seq, &m) {
                    // Purged before a crash, its files not deleted yet.
                    unindexed.push(key);
                    continue;
                }
                let meta_len = bytes.map_or(0, |b| b.len() as u64);
                victims.extend(self.insert(
                    &mut ix,
                    key,
                    seq,
                    &m.url,
                    &m.primary,
                    &m.vary,
                    m.body_len,
                    meta_len,
                    m.stored_at,
                ));
            }
            // A body's name is never used again: one unindexed now stays
            // unindexed.
            bodies.retain(|(key, seq)| ix.disk.peek(key).map(|e| e.seq) != Some(*seq));
            victims.extend(self.evict(&mut ix));
        }
        self.janitor.queue(Job::Files(strays));
        self.janitor.queue(Job::Metas(unindexed));
        self.janitor.queue(Job::Bodies(bodies));
        self.delete_files(victims);
        Ok(())
    }

    /// Resolves once every deletion queued so far is done.
    pub fn settled(&self) -> impl Future<Output = ()> + use<> {
        self.janitor.settled()
    }

    /// Leaves what is queued for deletion to the next start.
    pub fn abandon_deletions(&self) {
        self.janitor.abandon();
    }

    /// Holds the janitor (nothing queued is deleted) until the returned
    /// sender is dropped.
    #[cfg(test)]
    pub fn hold_janitor(&self) -> std::sync::mpsc::Sender<()> {
        self.janitor.hold()
    }

    /// Indexes an object (replacing `key`'s previous one), keeping at most
    /// `max_variants` per URL: returns the objects it pushed out, whose
    /// files the caller deletes.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        ix: &mut Index,
        key: ObjKey,
        seq: u64,
        url: &str,
        primary: &str,
        vary: &[String],
        body_len: u64,
        meta_len: u64,
        stored_at: u64,
    ) -> Vec<(ObjKey, u64)> {
        let mut victims = Vec::new();
        if let Some(old) = ix.remove(&key)
            && old != seq
        {
            victims.push((key, old));
        }
        loop {
            let others = ix.by_url.get(url).map_or(0, |k| k.as_slice().len());
            if others < self.max_variants {
                break;
            }
            let oldest = ix.by_url.get(url).and_then(|keys| {
                keys.as_slice()
                    .iter()
                    .filter_map(|k| ix.disk.peek(k).map(|e| (e.stored_at, *k)))
                    .min()
                    .map(|(_, k)| k)
            });
            let Some(oldest) = oldest else { break };
            if let Some(s) = ix.remove(&oldest) {
                self.stats.evictions_disk.fetch_add(1, Ordering::Relaxed);
                victims.push((oldest, s));
            }
        }
        let primary = ix.set_vary(primary, vary);
        let url = ix.add_url(url, &primary, key);
        let size = on_disk(body_len) + on_disk(meta_len);
        ix.disk_bytes += size;
        ix.disk.put(
            key,
            IndexEntry {
                url,
                primary,
                seq,
                body_len,
                size,
                stored_at,
            },
        );
        victims
    }

    /// The Vary names last stored for `primary`, `None` if nothing is.
    pub fn vary_of(&self, primary: &str) -> Option<Vec<String>> {
        self.lock().vary.get(primary).map(|(v, _)| v.clone())
    }

    /// The stored object `key`, its meta from the memory tier or else
    /// read from its file (and then kept in the memory tier).
    pub async fn get(&self, key: &ObjKey) -> Option<Found> {
        let seq = {
            let mut ix = self.lock();
            let seq = ix.disk.get(key)?.seq;
            if let Some(h) = ix.mem.get(key) {
                return Some(Found {
                    key: *key,
                    meta: h.meta.clone(),
                });
            }
            seq
        };
        let bytes = tokio::fs::read(self.meta_path(key)).await.ok();
        let Some(meta) = bytes.as_deref().and_then(decode_meta) else {
            // Unreadable while still indexed as it was: damaged. (Removed
            // meanwhile: a miss, nothing wrong.)
            if self.lock().disk.peek(key).map(|e| e.seq) == Some(seq) {
                self.discard(key);
            }
            return None;
        };
        if meta.body_file != body_name(key, seq) {
            // Replaced while read: a miss.
            return None;
        }
        let meta = Arc::new(meta);
        let meta_len = bytes.map_or(0, |b| b.len() as u64);
        self.hold(key, seq, &meta, meta_len * META_MEMORY_FACTOR, None);
        Some(Found { key: *key, meta })
    }

    /// Puts an object's parsed meta (and small body) in the memory tier,
    /// if it is still the indexed one; `meta_cost` is what the meta counts
    /// for (its file's length times [`META_MEMORY_FACTOR`]).
    fn hold(&self, key: &ObjKey, seq: u64, meta: &Arc<Meta>, meta_cost: u64, body: Option<Bytes>) {
        let victims = {
            let mut ix = self.lock();
            if ix.disk.peek(key).map(|e| e.seq) != Some(seq) {
                return;
            }
            ix.drop_hot(key);
            let cost = meta_cost + body.as_ref().map_or(0, |b| b.len() as u64);
            ix.mem_bytes += cost;
            ix.mem_bodies += u64::from(body.is_some());
            ix.mem.put(
                *key,
                Hot {
                    meta: meta.clone(),
                    body,
                    cost,
                },
            );
            self.evict(&mut ix)
        };
        self.delete_files(victims);
    }

    pub fn has_url(&self, url: &str) -> bool {
        self.lock().by_url.contains_key(url)
    }

    /// Every stored object for `url` (metas read from their files when
    /// not in memory: for `/explain`, a handful of small files).
    pub fn entries_for_url(&self, url: &str) -> Vec<(Arc<Meta>, bool)> {
        let found: Vec<(ObjKey, Option<Arc<Meta>>, bool)> = {
            let ix = self.lock();
            ix.by_url
                .get(url)
                .map_or(&[][..], Keys::as_slice)
                .iter()
                .map(|k| {
                    let hot = ix.mem.peek(k);
                    (
                        *k,
                        hot.map(|h| h.meta.clone()),
                        hot.is_some_and(|h| h.body.is_some()),
                    )
                })
                .collect()
        };
        found
            .into_iter()
            .filter_map(|(k, meta, in_memory)| {
                let meta = meta.or_else(|| {
                    let bytes = std::fs::read(self.meta_path(&k)).ok()?;
                    decode_meta(&bytes).map(Arc::new)
                })?;
                Some((meta, in_memory))
            })
            .collect()
    }

    /// Removes every object stored for `url`; returns how many.
    pub fn purge_url(&self, url: &str) -> usize {
        self.purge_url_before(url, u64::MAX)
    }

    /// Removes the objects stored for `url` at or before `before`
    /// (seconds since the epoch); returns how many.
    pub fn purge_url_before(&self, url: &str, before: u64) -> usize {
        self.purge(url, false, before)
    }

    /// Removes every object whose URL starts with `prefix`.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        self.purge_prefix_before(prefix, u64::MAX)
    }

    /// Removes the objects whose URL starts with `prefix` stored at or
    /// before `before` (seconds since the epoch).
    pub fn purge_prefix_before(&self, prefix: &str, before: u64) -> usize {
        self.purge(prefix, true, before)
    }

    /// Removes the objects of `url` (of every URL it starts, `prefix`)
    /// stored at or before `before` and before the purge began, from the
    /// index, and queues their files, recorded in the `purges` file first;
    /// returns how many. The index lock is held for [`PURGE_BATCH`] URLs at
    /// most at a time (the URLs are in order: a prefix is a range, gone
    /// through from where the last batch ended), so lookups go on
    /// meanwhile, however large the index.
    fn purge(&self, url: &str, prefix: bool, before: u64) -> usize {
        use std::ops::Bound;
        let purging = self.janitor.purging();
        // Objects stored since have a higher number and are kept, now and
        // by a start after a crash that finds this purge recorded.
        let below = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut recorded = false;
        let mut n = 0;
        // The last URL of the batch before.
        let mut after: Option<String> = None;
        loop {
            let (victims, last) = {
                let mut ix = self.lock();
                let from = match &after {
                    Some(last) => Bound::Excluded(last.as_str()),
                    None => Bound::Included(url),
                };
                let urls: Vec<UrlKey> = ix
                    .by_url
                    .range::<str, _>((from, Bound::Unbounded))
                    .map(|(u, _)| u)
                    .take_while(|u| {
                        if prefix {
                            u.url().starts_with(url)
                        } else {
                            u.url() == url
                        }
                    })
                    .take(PURGE_BATCH)
                    .cloned()
                    .collect();
                let mut victims = Vec::new();
                for u in &urls {
                    let keys: Vec<ObjKey> = ix
                        .by_url
                        .get(u.url())
                        .map_or(&[][..], Keys::as_slice)
                        .iter()
                        .filter(|k| {
                            ix.disk
                                .peek(*k)
                                .is_some_and(|e| e.stored_at <= before && e.seq < below)
                        })
                        .copied()
                        .collect();
                    victims.extend(keys.iter().filter_map(|k| ix.remove(k).map(|s| (*k, s))));
                }
                self.publish(&ix);
                // A lookup waiting meanwhile goes first.
                parking_lot::MutexGuard::unlock_fair(ix);
                let last = (urls.len() == PURGE_BATCH)
                    .then(|| urls.last().map(|u| u.url().to_string()))
                    .flatten();
                (victims, last)
            };
            if !victims.is_empty() {
                if !recorded {
                    purging.record(&Rule::Url {
                        url: url.to_string(),
                        prefix,
                        before,
                        below,
                    });
                    recorded = true;
                }
                n += victims.len();
                self.janitor.queue(Job::Objects(victims));
            }
            match last {
                Some(last) => after = Some(last),
                None => return n,
            }
        }
    }

    /// Removes one object (the origin made it unstorable); returns whether
    /// it was still there.
    pub fn remove(&self, key: &ObjKey) -> bool {
        let purging = self.janitor.purging();
        let victim = {
            let mut ix = self.lock();
            let v = ix.remove(key).map(|s| (*key, s));
            self.publish(&ix);
            v
        };
        let Some((key, seq)) = victim else {
            return false;
        };
        purging.record(&Rule::Object {
            key: hex(&key),
            seq,
        });
        self.janitor.queue(Job::Objects(vec![(key, seq)]));
        true
    }

    /// Drops an object that failed verification.
    pub fn discard(&self, key: &ObjKey) {
        let victim = {
            let mut ix = self.lock();
            let v = ix.remove(key).map(|s| (*key, s));
            self.publish(&ix);
            v
        };
        // Already gone: evicted or replaced while it was being read.
        if victim.is_some() {
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
        }
        self.delete_files(victim);
    }

    /// Queues the files of objects taken out of the index.
    fn delete_files(&self, victims: impl IntoIterator<Item = (ObjKey, u64)>) {
        self.janitor
            .queue(Job::Objects(victims.into_iter().collect()));
    }

    fn meta_path(&self, key: &ObjKey) -> PathBuf {
        self.file(&meta_name(key))
    }

    fn file(&self, name: &str) -> PathBuf {
        object_file(&self.objects, name)
    }

    /// Removes least recently used objects until both tiers fit (disk by
    /// bytes and by count); returns the disk victims, whose files the
    /// caller deletes outside the lock.
    fn evict(&self, ix: &mut Index) -> Vec<(ObjKey, u64)> {
        while ix.mem_bytes > self.memory_size {
            match ix.mem.pop_lru() {
                Some((_, h)) => {
                    ix.mem_bytes -= h.cost;
                    if h.body.is_some() {
                        ix.mem_bodies -= 1;
                        self.stats.evictions_memory.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => break,
            }
        }
        let mut victims = Vec::new();
        while ix.disk_bytes > self.disk_size || ix.disk.len() > self.max_objects {
            let Some((key, _)) = ix.disk.peek_lru() else {
                break;
            };
            let key = *key;
            if let Some(s) = ix.remove(&key) {
                self.stats.evictions_disk.fetch_add(1, Ordering::Relaxed);
                victims.push((key, s));
            }
        }
        self.publish(ix);
        victims
    }

    fn publish(&self, ix: &Index) {
        self.stats
            .memory_bytes
            .store(ix.mem_bytes, Ordering::Relaxed);
        self.stats
            .disk_bytes
            .store(ix.disk_bytes, Ordering::Relaxed);
        self.stats
            .memory_objects
            .store(ix.mem_bodies, Ordering::Relaxed);
        self.stats
            .disk_objects
            .store(ix.disk.len() as u64, Ordering::Relaxed);
    }

    /// The body of a found object, verified as described in the module
    /// doc; `None` (and the object deleted) when it fails.
    pub async fn open_body(self: &Arc<Self>, found: &Found) -> Option<Body> {
        let mem = self.lock().mem.get(&found.key).and_then(|h| h.body.clone());
        if let Some(b) = mem {
            return Some(full_body(b));
        }
        let meta = &found.meta;
        let path = self.file(&meta.body_file);
        if meta.body_len <= self.small_max {
            let bytes = tokio::fs::read(&path).await.ok();
            let ok = bytes.as_ref().is_some_and(|b| {
                b.len() as u64 == meta.body_len
                    && hex(digest::digest(&digest::SHA256, b).as_ref()) == meta.body_sha256
            });
            let Some(bytes) = bytes.filter(|_| ok) else {
                self.discard(&found.key);
                return None;
            };
            let bytes = Bytes::from(bytes);
            self.remember(found, bytes.clone());
            return Some(full_body(bytes));
        }
        let file = tokio::fs::File::open(&path).await.ok();
        let len_ok = match &file {
            Some(f) => f.metadata().await.ok().map(|m| m.len()) == Some(meta.body_len),
            None => false,
        };
        let Some(file) = file.filter(|_| len_ok) else {
            self.discard(&found.key);
            return None;
        };
        let (tx, body) = body::channel(Some(meta.body_len));
        let store = self.clone();
        let found = found.clone();
        tokio::spawn(async move {
            stream_verified(store, found, file, tx).await;
        });
        Some(body)
    }

    /// Keeps a small body read from disk in the memory tier, with its meta.
    fn remember(&self, found: &Found, bytes: Bytes) {
        if bytes.len() as u64 > self.small_max {
            return;
        }
        let Some(seq) = body_seq(&found.key, &found.meta.body_file) else {
            return;
        };
        // The meta is held already (the lookup put it there), counted for
        // what its file's length made it; gone meanwhile, the body is not
        // kept either.
        let meta_cost = {
            let ix = self.lock();
            match ix.mem.peek(&found.key) {
                Some(h) => h.cost - h.body.as_ref().map_or(0, |b| b.len() as u64),
                None => return,
            }
        };
        self.hold(&found.key, seq, &found.meta, meta_cost, Some(bytes));
    }

    /// A writer for a new body in `tmp/`.
    pub async fn writer(self: &Arc<Self>) -> std::io::Result<BodyWriter> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = self.tmp.join(format!("{n:016x}.body.tmp"));
        let mut opts = tokio::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true).mode(FILE_MODE);
        let file = opts.open(&path).await?;
        Ok(BodyWriter {
            store: self.clone(),
            path,
            file: Some(tokio::io::BufWriter::with_capacity(READ_CHUNK, file)),
            hash: digest::Context::new(&digest::SHA256),
            len: 0,
            small: Some(BytesMut::new()),
            seq: n,
        })
    }

    /// Puts a complete body and its meta in place and in the index.
    fn commit(
        &self,
        key: ObjKey,
        mut meta: Meta,
        tmp_body: &Path,
        seq: u64,
        small: Option<Bytes>,
    ) -> std::io::Result<()> {
        meta.body_file = body_name(&key, seq);
        let body_path = self.file(&meta.body_file);
        if let Some(shard) = body_path.parent() {
            create_private_dir(shard)?;
        }
        std::fs::rename(tmp_body, &body_path)?;
        // Meta files and the index change together, one object at a time,
        // so the meta on disk is always the indexed one.
        let _commit = self.commit_lock.lock();
        let meta_len = match self.write_meta(&key, &meta) {
            Ok(n) => n,
            Err(e) => {
                self.janitor.queue(Job::Bodies(vec![(key, seq)]));
                return Err(e);
            }
        };
        let meta = Arc::new(meta);
        let victims = {
            let mut ix = self.lock();
            let mut victims = self.insert(
                &mut ix,
                key,
                seq,
                &meta.url,
                &meta.primary,
                &meta.vary,
                meta.body_len,
                meta_len,
                meta.stored_at,
            );
            victims.extend(self.evict(&mut ix));
            victims
        };
        // A victim may be the object just stored (larger than the whole
        // disk tier): its files go like any other's.
        self.delete_files(victims);
        self.hold(&key, seq, &meta, meta_len * META_MEMORY_FACTOR, small);
        Ok(())
    }

    /// Writes `meta` for `key` through `tmp/` and a rename; returns its size.
    fn write_meta(&self, key: &ObjKey, meta: &Meta) -> std::io::Result<u64> {
        let bytes = encode_meta(meta)?;
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.tmp.join(format!("{n:016x}.meta.tmp"));
        let mut f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(FILE_MODE)
                .open(&tmp)?
        };
        f.write_all(&bytes)?;
        drop(f);
        std::fs::rename(&tmp, self.meta_path(key))?;
        Ok(bytes.len() as u64)
    }

    /// Replaces the meta of a stored object (a 304 refreshed it), unless
    /// the object was replaced or removed meanwhile.
    pub async fn update_meta(self: &Arc<Self>, key: ObjKey, meta: Meta) {
        let store = self.clone();
        let done = tokio::task::spawn_blocking(move || {
            let _commit = store.commit_lock.lock();
            let Some(seq) = body_seq(&key, &meta.body_file) else {
                return Ok(());
            };
            if store.lock().disk.peek(&key).map(|e| e.seq) != Some(seq) {
                return Ok(());
            }
            let meta_len = store.write_meta(&key, &meta)?;
            let body = {
                let mut ix = store.lock();
                if let Some(e) = ix.disk.get_mut(&key) {
                    let old = e.size;
                    e.size = on_disk(e.body_len) + on_disk(meta_len);
                    e.stored_at = meta.stored_at;
                    let new = e.size;
                    ix.disk_bytes = ix.disk_bytes - old + new;
                }
                store.publish(&ix);
                ix.mem.peek(&key).and_then(|h| h.body.clone())
            };
            store.hold(
                &key,
                seq,
                &Arc::new(meta),
                meta_len * META_MEMORY_FACTOR,
                body,
            );
            Ok::<(), std::io::Error>(())
        })
        .await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cache: could not update a stored response"),
            Err(e) => tracing::warn!(error = %e, "cache: could not update a stored response"),
        }
    }
}

async fn stream_verified(
    store: Arc<Store>,
    found: Found,
    mut file: tokio::fs::File,
    tx: body::FrameTx,
) {
    let mut hash = digest::Context::new(&digest::SHA256);
    let mut held: Option<Bytes> = None;
    let mut total = 0u64;
    loop {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        match file.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                let chunk = buf.freeze();
                hash.update(&chunk);
                if let Some(prev) = held.replace(chunk)
                    && tx.send(Ok(Frame::data(prev))).await.is_err()
                {
                    return;
                }
            }
            Err(_) => break,
        }
    }
    if total == found.meta.body_len && hex(hash.finish().as_ref()) == found.meta.body_sha256 {
        if let Some(last) = held {
            let _ = tx.send(Ok(Frame::data(last))).await;
        }
    } else {
        // The last chunk is withheld: the response ends short of its
        // Content-Length, which the client sees as an aborted transfer.
        tracing::warn!(url = %found.meta.url, "cache: stored body failed verification; deleted");
        store.discard(&found.key);
    }
}

/// Writes one body into `tmp/` while it streams to the client.
pub(crate) struct BodyWriter {
    store: Arc<Store>,
    path: PathBuf,
    file: Option<tokio::io::BufWriter<tokio::fs::File>>,
    hash: digest::Context,
    len: u64,
    small: Option<BytesMut>,
    seq: u64,
}

impl BodyWriter {
    pub async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        let Some(f) = self.file.as_mut() else {
            return Err(std::io::Error::other("writer closed"));
        };
        f.write_all(data).await?;
        self.hash.update(data);
        self.len += data.len() as u64;
        if let Some(s) = self.small.as_mut() {
            if self.len <= self.store.small_max {
                s.extend_from_slice(data);
            } else {
                self.small = None;
            }
        }
        Ok(())
    }

    /// Flushes, renames into place and indexes the body under `key`.
    pub async fn finish(mut self, key: ObjKey, mut meta: Meta) -> std::io::Result<()> {
        let Some(mut f) = self.file.take() else {
            return Err(std::io::Error::other("writer closed"));
        };
        f.flush().await?;
        drop(f);
        meta.body_len = self.len;
        meta.body_sha256 = hex(self.hash.clone().finish().as_ref());
        let small = self.small.take().map(BytesMut::freeze);
        let store = self.store.clone();
        let path = std::mem::take(&mut self.path);
        let seq = self.seq;
        let res = tokio::task::spawn_blocking(move || {
            let r = store.commit(key, meta, &path, seq, small);
            if r.is_err() {
                store.janitor.queue(Job::Files(vec![path]));
            }
            r
        })
        .await;
        match res {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}

impl Drop for BodyWriter {
    fn drop(&mut self) {
        // An unfinished body (over the size cap, upstream error, shutdown).
        if !self.path.as_os_str().is_empty() {
            self.file = None;
            let path = std::mem::take(&mut self.path);
            self.store.janitor.queue(Job::Files(vec![path]));
        }
    }
}

impl Drop for Store {
    /// Deletions still queued are done before the store is gone (a cache
    /// opened again on the same directory must not meet them).
    fn drop(&mut self) {
        self.janitor.close();
    }
}

fn encode_meta(meta: &Meta) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let mut out = hex(digest::digest(&digest::SHA256, &json).as_ref()).into_bytes();
    out.push(b'\n');
    out.extend_from_slice(&json);
    Ok(out)
}

fn decode_meta(bytes: &[u8]) -> Option<Meta> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let (sum, json) = (&bytes[..nl], &bytes[nl + 1..]);
    if sum != hex(digest::digest(&digest::SHA256, json).as_ref()).as_bytes() {
        return None;
    }
    serde_json::from_slice(json).ok()
}

/// The index fields of a meta file, its checksum verified.
fn decode_meta_head(bytes: &[u8]) -> Option<MetaHead> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let (sum, json) = (&bytes[..nl], &bytes[nl + 1..]);
    if sum != hex(digest::digest(&digest::SHA256, json).as_ref()).as_bytes() {
        return None;
    }
    serde_json::from_slice(json).ok()
}

fn parse_hex(s: &str) -> Option<ObjKey> {
    if s.len() != 64 {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, out) in k.iter_mut().enumerate() {
        *out = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    }

    /// A store with room for a million objects and no memory tier to
    /// speak of, for the measurements below.
    fn roomy_store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().expect("tmp");
        let limits = Limits {
            memory_size: 1 << 20,
            disk_size: u64::MAX,
            max_objects: 1 << 20,
            max_variants: 32,
        };
        let store = Store::open(dir.path(), &limits, Arc::default()).expect("open");
        (dir, store)
    }

    /// What an index entry costs: 100,000 objects of 38-byte URLs indexed
    /// (no files, no memory tier).
    #[test]
    #[ignore = "a measurement: cargo test --release --lib index_entry_memory -- --ignored --nocapture"]
    fn index_entry_memory() {
        let (_dir, store) = roomy_store();
        let n = 100_000u64;
        let before = rss_kib();
        {
            let mut ix = store.lock();
            for i in 0..n {
                let url = format!("http://127.0.0.1:21136/obj/{i:06}");
                let primary = format!("GET\n{url}");
                let key = obj_key(&primary);
                let _ = store.insert(&mut ix, key, i, &url, &primary, &[], 13, 1119, i);
            }
        }
        let after = rss_kib();
        println!(
            "{n} entries: +{} KiB, {} B per entry",
            after - before,
            (after - before) * 1024 / n
        );
    }

    /// What a purge of 100,000 objects costs its caller (the index only:
    /// their files are queued), and the longest another thread waited for
    /// the index lock meanwhile (a lookup takes it).
    #[test]
    #[ignore = "a measurement: cargo test --release --lib purge_index_time -- --ignored --nocapture"]
    fn purge_index_time() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        let (_dir, store) = roomy_store();
        let n = 100_000u64;
        {
            let mut ix = store.lock();
            for i in 0..n + 1000 {
                let dir = if i < n { "obj" } else { "other" };
                let url = format!("http://127.0.0.1:21136/{dir}/{i:06}");
                let primary = format!("GET\n{url}");
                let key = obj_key(&primary);
                let _ = store.insert(&mut ix, key, i, &url, &primary, &[], 13, 1119, i);
            }
        }
        let prefix = "http://127.0.0.1:21136/obj/";
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                let mut longest = Duration::ZERO;
                while !done.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    drop(store.lock());
                    longest = longest.max(t.elapsed());
                    std::thread::yield_now();
                }
                longest
            })
        };
        // The janitor waits: this is the caller's cost alone.
        let hold = store.janitor.hold();
        let t = Instant::now();
        let purged = store.purge_prefix(prefix);
        let took = t.elapsed();
        done.store(true, Ordering::Relaxed);
        let longest = waiter.join().expect("waiter");
        drop(hold);
        assert_eq!(purged, n as usize);
        println!(
            "purge of {purged} objects: {took:?} in all; another thread waited {longest:?} at most for the index lock"
        );
    }
}
