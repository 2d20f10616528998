//! The janitor: removals change the index at once and leave the files to
//! it; what it has not deleted yet never comes back.

use super::*;

const KEEP: &str = "http://example.test/keep";

fn fresh(body: &'static str) -> impl FnMut(&HeaderMap) -> Response<Body> {
    move |_| resp(200, &[("cache-control", "max-age=600")], body)
}

async fn body_of(cache: &ResponseCache, url: &str) -> Option<Bytes> {
    match cache.lookup(&get(url, &[]), None).await {
        Lookup::Hit(r) => Some(read(r).await.1),
        _ => None,
    }
}

fn purges_file(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("cache/purges")).expect("purges file")
}

/// Copies a directory tree: the cache as a crash would leave it.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

#[tokio::test]
async fn a_purge_of_many_objects_leaves_the_files_to_the_janitor_while_requests_are_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    // More than one batch of the index (store::PURGE_BATCH URLs).
    const MANY: usize = 1500;
    for i in 0..MANY {
        let url = format!("http://example.test/many/{i}");
        fetch(&cache, &get(&url, &[]), None, fresh("purged")).await;
    }
    // Right before and after the prefix's range of URLs.
    let neighbours = ["http://example.test/many", "http://example.test/many0"];
    for url in neighbours.into_iter().chain([KEEP]) {
        fetch(&cache, &get(url, &[]), None, fresh("kept")).await;
    }
    assert_eq!(object_files(dir.path()).len(), 2 * (MANY + 3));

    // Nothing is deleted while the janitor is held: the purge returns all
    // the same, and requests are answered meanwhile.
    let hold = cache.inner.store.hold_janitor();
    assert_eq!(cache.purge_prefix("http://example.test/many/"), MANY);
    let c = cache.counters();
    assert_eq!((c.disk_objects, c.deletions_pending), (3, MANY as u64));
    assert_eq!(object_files(dir.path()).len(), 2 * (MANY + 3));
    assert!(!purges_file(dir.path()).is_empty(), "the purge is recorded");
    for url in neighbours.into_iter().chain([KEEP]) {
        assert_eq!(body_of(&cache, url).await.as_deref(), Some(&b"kept"[..]));
    }
    assert_eq!(body_of(&cache, "http://example.test/many/7").await, None);
    let (_, body, origin) = fetch(
        &cache,
        &get("http://example.test/new", &[]),
        None,
        fresh("stored meanwhile"),
    )
    .await;
    assert!(origin);
    assert_eq!(body, "stored meanwhile");
    assert_eq!(
        body_of(&cache, "http://example.test/new").await.as_deref(),
        Some(&b"stored meanwhile"[..])
    );

    drop(hold);
    cache.settled().await;
    assert_eq!(
        object_files(dir.path()).len(),
        8,
        "four kept, two files each"
    );
    assert_eq!(cache.counters().deletions_pending, 0);
    assert!(
        purges_file(dir.path()).is_empty(),
        "emptied once its deletions are done"
    );
    assert_eq!(cache.counters().delete_errors, 0);
}

#[tokio::test]
async fn an_object_stored_again_before_the_janitor_ran_is_kept_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let cache = open(dir.path(), &cfg);
    fetch(&cache, &get(URL, &[]), None, fresh("old")).await;
    let hold = cache.inner.store.hold_janitor();
    assert_eq!(cache.purge_url(URL), 1);
    // The same key again: its meta file has the same name as the purged
    // one's, queued for deletion.
    let (_, body, origin) = fetch(&cache, &get(URL, &[]), None, fresh("new")).await;
    assert!(origin);
    assert_eq!(body, "new");
    drop(hold);
    cache.settled().await;
    assert_eq!(object_files(dir.path()).len(), 2, "the new meta and body");
    // Out of the memory tier too: read from its files.
    drop(cache);
    let cache = open(dir.path(), &cfg);
    assert_eq!(body_of(&cache, URL).await.as_deref(), Some(&b"new"[..]));
    assert_eq!(cache.counters().corrupt, 0);
}

#[tokio::test]
async fn a_replaced_object_keeps_its_meta_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let cache = open(dir.path(), &cfg);
    let stale = |body: &'static str| {
        move |_: &HeaderMap| {
            resp(
                200,
                &[("cache-control", "max-age=0"), ("etag", "\"v\"")],
                body,
            )
        }
    };
    fetch(&cache, &get(URL, &[]), None, stale("first")).await;
    // Revalidated, and answered with a whole new response: it replaces
    // the stored one under the same key.
    let (_, body, origin) = fetch(&cache, &get(URL, &[]), None, stale("second")).await;
    assert!(origin);
    assert_eq!(body, "second");
    cache.settled().await;
    assert_eq!(object_files(dir.path()).len(), 2);
    drop(cache);
    let cache = open(dir.path(), &cfg);
    assert_eq!(cache.counters().disk_objects, 1);
    let (_, body, _) = fetch(&cache, &get(URL, &[]), None, |h| {
        assert_eq!(h["if-none-match"], "\"v\"");
        resp(
            304,
            &[("cache-control", "max-age=0"), ("etag", "\"v\"")],
            "",
        )
    })
    .await;
    assert_eq!(body, "second");
}

#[tokio::test]
async fn a_purge_cut_short_by_a_crash_is_done_at_the_next_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let cache = open(dir.path(), &cfg);
    for u in ["http://example.test/a/1", "http://example.test/a/2"] {
        fetch(&cache, &get(u, &[]), None, fresh("purged")).await;
    }
    fetch(&cache, &get(KEEP, &[]), None, fresh("kept")).await;
    fetch(&cache, &get(URL, &[]), None, fresh("unstorable now")).await;
    let hold = cache.inner.store.hold_janitor();
    assert_eq!(cache.purge_prefix("http://example.test/a/"), 2);
    // Stored again after the purge: not the purge's.
    fetch(
        &cache,
        &get("http://example.test/a/1", &[]),
        None,
        fresh("again"),
    )
    .await;
    // Removed because the origin said so (a 304 making it private).
    let key = obj_key(&primary_key(URL, None, false));
    assert!(cache.inner.store.remove(&key));

    // The files as a crash now would leave them: nothing deleted yet.
    let crashed = tempfile::tempdir().expect("tmp");
    copy_tree(&dir.path().join("cache"), &crashed.path().join("cache"));
    drop(hold);
    drop(cache);

    let cache = open(crashed.path(), &cfg);
    assert_eq!(cache.counters().disk_objects, 2, "{:?}", cache.counters());
    assert_eq!(body_of(&cache, "http://example.test/a/2").await, None);
    assert_eq!(body_of(&cache, URL).await, None);
    assert_eq!(
        body_of(&cache, "http://example.test/a/1").await.as_deref(),
        Some(&b"again"[..])
    );
    assert_eq!(body_of(&cache, KEEP).await.as_deref(), Some(&b"kept"[..]));
    cache.settled().await;
    assert_eq!(object_files(crashed.path()).len(), 4);
    assert!(purges_file(crashed.path()).is_empty());
}

#[tokio::test]
async fn dropping_the_cache_finishes_the_deletions() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let cache = open(dir.path(), &cfg);
    for i in 0..50 {
        let url = format!("http://example.test/many/{i}");
        fetch(&cache, &get(&url, &[]), None, fresh("purged")).await;
    }
    let hold = cache.inner.store.hold_janitor();
    assert_eq!(cache.purge_prefix("http://example.test/"), 50);
    assert_eq!(object_files(dir.path()).len(), 100);
    drop(hold);
    drop(cache);
    assert!(object_files(dir.path()).is_empty());
    assert!(purges_file(dir.path()).is_empty());
}

#[tokio::test]
async fn a_file_that_cannot_be_deleted_is_counted_not_a_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let writer = cache.inner.store.writer().await.expect("writer");
    // Its directory replaced by a file: unlinking the temporary body
    // fails (ENOTDIR), whoever runs the test.
    let tmp = dir.path().join("cache/tmp");
    std::fs::remove_dir_all(&tmp).expect("rm tmp");
    std::fs::write(&tmp, b"not a directory").expect("write");
    drop(writer);
    cache.settled().await;
    let c = cache.counters();
    assert_eq!((c.delete_errors, c.deletions_pending), (1, 0));
    // The cache goes on.
    std::fs::remove_file(&tmp).expect("rm");
    std::fs::create_dir(&tmp).expect("mkdir");
    fetch(&cache, &get(KEEP, &[]), None, fresh("kept")).await;
    assert_eq!(body_of(&cache, KEEP).await.as_deref(), Some(&b"kept"[..]));
}

#[tokio::test]
async fn deletions_left_at_a_stop_are_done_by_the_next_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let cache = open(dir.path(), &cfg);
    for i in 0..50 {
        let url = format!("http://example.test/many/{i}");
        fetch(&cache, &get(&url, &[]), None, fresh("purged")).await;
    }
    fetch(&cache, &get(KEEP, &[]), None, fresh("kept")).await;
    let hold = cache.inner.store.hold_janitor();
    assert_eq!(cache.purge_prefix("http://example.test/many/"), 50);
    // No time left: the queue is left as it is.
    assert_eq!(cache.finish_deletions(Duration::ZERO).await, 50);
    drop(hold);
    drop(cache);
    assert_eq!(object_files(dir.path()).len(), 102);
    assert!(!purges_file(dir.path()).is_empty());

    let cache = open(dir.path(), &cfg);
    assert_eq!(cache.counters().disk_objects, 1);
    assert_eq!(body_of(&cache, "http://example.test/many/3").await, None);
    assert_eq!(body_of(&cache, KEEP).await.as_deref(), Some(&b"kept"[..]));
    cache.settled().await;
    assert_eq!(object_files(dir.path()).len(), 2);
    assert!(purges_file(dir.path()).is_empty());
}
