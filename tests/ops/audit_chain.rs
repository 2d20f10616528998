//! The audit log shows tampering: the real binary writes a log over three
//! rotations (renamed, reopened on SIGHUP, gzip-compressed as logrotate
//! does), `robots-proxy audit verify` passes on it and names the first
//! bad line of every tampered copy, each of which a plain JSON parse
//! reads without complaint. A torn last line is cut when the proxy
//! starts, and the chain goes on from the last complete line.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

use crate::support::Conn;
use crate::support::Origin;
use crate::support::binary::{Running, Setup, command};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// A file's lines, gzip or not.
fn read_lines(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).expect("read");
    let mut text = String::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .expect("gunzip");
    } else {
        text = String::from_utf8(bytes).expect("utf-8");
    }
    text.lines().map(str::to_owned).collect()
}

/// Writes `lines` to `path`, gzip-compressed when its name ends in `.gz`.
fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    if path.extension().is_some_and(|e| e == "gz") {
        let mut enc = GzEncoder::new(
            std::fs::File::create(path).expect("create"),
            Compression::default(),
        );
        enc.write_all(text.as_bytes()).expect("gzip");
        enc.finish().expect("gzip");
    } else {
        std::fs::write(path, text).expect("write");
    }
}

fn gzip(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    let gz = PathBuf::from(name);
    write_lines(&gz, &read_lines(path));
    std::fs::remove_file(path).expect("rm");
    gz
}

/// What logrotate does with `compress` and `delaycompress`: .2.gz becomes
/// .3.gz, .1 becomes .2.gz, the log becomes .1; then the proxy is told.
async fn rotate(setup: &Setup, proxy: &mut Running) {
    let dir = setup.dir.path();
    let name = |suffix: &str| dir.join(format!("audit.jsonl{suffix}"));
    if name(".2.gz").exists() {
        std::fs::rename(name(".2.gz"), name(".3.gz")).expect("rename");
    }
    if name(".1").exists() {
        std::fs::rename(name(".1"), name(".2")).expect("rename");
        gzip(&name(".2"));
    }
    std::fs::rename(setup.audit_path(), name(".1")).expect("rename");
    proxy.reload("configuration reloaded").await;
}

async fn block(conn: &mut Conn, origin: &Origin, path: &str) {
    let resp = conn.get(&origin.url(path)).await;
    assert_eq!(resp.status, 403, "{resp:?}");
}

/// A signed log written by the binary over three rotations: the files
/// oldest first (.3.gz, .2.gz, .1, the live file) and the public key.
/// Four blocked requests per file, after each file's checkpoint.
async fn rotated_log() -> (Setup, Vec<PathBuf>, String) {
    let origin = Origin::with_robots(ROBOTS).await;
    let setup = Setup::with_config("alphabot", "signing_key = true\n");
    let mut proxy = setup.start().await;
    let mut conn = Conn::open(proxy.addr).await;
    for round in 0..4 {
        for i in 0..3 {
            block(&mut conn, &origin, &format!("/private/{round}/{i}")).await;
        }
        if round < 3 {
            rotate(&setup, &mut proxy).await;
        }
    }
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());
    let dir = setup.dir.path();
    let files = [".3.gz", ".2.gz", ".1", ""]
        .map(|s| dir.join(format!("audit.jsonl{s}")))
        .to_vec();
    let key = audit(&["key", "--config", &path_str(&setup.config_path())]);
    assert!(key.status.success(), "{}", stderr(&key));
    let key = stdout(&key).trim().to_owned();
    (setup, files, key)
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `robots-proxy audit ARGS…`, run to its end.
fn audit(args: &[&str]) -> Output {
    command()
        .arg("audit")
        .args(args)
        .output()
        .expect("run robots-proxy")
}

/// `audit verify [--key KEY] [extra…] FILES…`: exit code and stdout.
fn verify(key: Option<&str>, extra: &[&str], files: &[PathBuf]) -> (Option<i32>, String) {
    let mut args = vec!["verify".to_owned()];
    if let Some(key) = key {
        args.extend(["--key".to_owned(), key.to_owned()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(files.iter().map(|f| path_str(f)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = audit(&args);
    (out.status.code(), stdout(&out) + &stderr(&out))
}

/// What a reader without the chain checks: every line is a JSON object,
/// a checkpoint or a request line with its URL and decision.
fn plain_parse_finds_nothing(files: &[PathBuf]) -> bool {
    files.iter().flat_map(|f| read_lines(f)).all(|line| {
        serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| {
            v["type"] == "checkpoint" || (v["url"].is_string() && v["decision"].is_string())
        })
    })
}

/// Copies `files` into a directory of their own, keeping their names.
fn copy(files: &[PathBuf], into: &Path) -> Vec<PathBuf> {
    files
        .iter()
        .map(|f| {
            let to = into.join(f.file_name().expect("name"));
            std::fs::copy(f, &to).expect("copy");
            to
        })
        .collect()
}

/// Changes line `n` (from 1) of `path` with `edit`.
fn edit_line(path: &Path, n: usize, edit: impl FnOnce(&str) -> String) {
    let mut lines = read_lines(path);
    lines[n - 1] = edit(&lines[n - 1]);
    write_lines(path, &lines);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What someone who can write the files but holds no key does after an
/// edit: recomputes every `chain` (and every checkpoint's `head`) from the
/// first line on, as the chain is defined.
fn rechain(files: &[PathBuf]) {
    let mut prev = [0u8; 32];
    let mut first = true;
    for path in files {
        let mut lines = read_lines(path);
        for line in &mut lines {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            let cut = line.rfind(",\"chain\":\"").expect("chain field");
            let mut body = format!("{}}}", &line[..cut]);
            if first {
                // The first line given is the anchor.
                first = false;
                let chain = v["chain"].as_str().expect("chain");
                prev.copy_from_slice(
                    &(0..32)
                        .map(|i| u8::from_str_radix(&chain[2 * i..2 * i + 2], 16).expect("hex"))
                        .collect::<Vec<_>>(),
                );
                continue;
            }
            if v["type"] == "checkpoint" {
                let old = v["head"].as_str().expect("head");
                body = body.replace(old, &hex(&prev));
            }
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            ctx.update(&prev);
            ctx.update(body.as_bytes());
            prev.copy_from_slice(ctx.finish().as_ref());
            *line = format!("{},\"chain\":\"{}\"}}", &body[..body.len() - 1], hex(&prev));
        }
        write_lines(path, &lines);
    }
}

fn failed_at(out: &(Option<i32>, String), file: &Path, line: usize, why: &str) {
    let (code, text) = out;
    assert_eq!(*code, Some(1), "{text}");
    let expected = format!("FAILED: {} line {line}: {why}", file.display());
    assert!(
        text.starts_with(&expected),
        "expected {expected:?}, got {text:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_over_three_compressed_rotations_verifies_and_every_file_opens_with_a_signed_checkpoint()
 {
    let (setup, files, key) = rotated_log().await;
    assert_eq!(key.len(), 64, "{key}");
    for (i, file) in files.iter().enumerate() {
        let lines = read_lines(file);
        assert_eq!(lines.len(), 4, "{}: {lines:?}", file.display());
        let first: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
        assert_eq!(first["type"], "checkpoint");
        assert_eq!(first["file_start"], true);
        assert_eq!(first["reason"], if i == 0 { "start" } else { "reopen" });
        assert_eq!(first["seq"], 4 * i + 1);
        assert!(first["sig"].as_str().is_some_and(|s| s.len() == 128));
    }
    let out = verify(Some(&key), &[], &files);
    assert_eq!(
        out,
        (
            Some(0),
            "intact: 4 files, 16 lines (seq 1 to 16), 4 checkpoints, 4 signatures checked\n"
                .to_owned()
        )
    );
    // The key from the config, the default; without any key the
    // signatures are counted, not checked.
    let config = path_str(&setup.config_path());
    assert_eq!(verify(None, &["--config", &config], &files).0, Some(0));
    let (code, text) = verify(None, &[], &files);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("4 signatures not checked (no --key)"),
        "{text}"
    );
    // The key file is private.
    let key_file = setup.dir.path().join("audit-key").join("signing.pem");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&key_file), 0o600);
    assert_eq!(mode(key_file.parent().expect("dir")), 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tampering_is_named_by_file_and_line_though_a_plain_parse_reads_it_all() {
    let (_setup, files, key) = rotated_log().await;
    let key = Some(key.as_str());
    let work = tempfile::tempdir().expect("tempdir");
    let mut case = 0;
    let mut fresh = || {
        case += 1;
        let dir = work.path().join(case.to_string());
        std::fs::create_dir(&dir).expect("mkdir");
        copy(&files, &dir)
    };

    // An edited URL, inside a compressed file.
    let f = fresh();
    edit_line(&f[0], 3, |l| l.replace("/private/0/1", "/public/0/1"));
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[0],
        3,
        "its chain does not match its content",
    );

    // A deleted line.
    let f = fresh();
    let mut lines = read_lines(&f[3]);
    lines.remove(2);
    write_lines(&f[3], &lines);
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[3],
        3,
        "seq 16 follows seq 14: 1 line missing here",
    );

    // An inserted line: a copy of a real one.
    let f = fresh();
    let mut lines = read_lines(&f[2]);
    lines.insert(3, lines[1].clone());
    write_lines(&f[2], &lines);
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[2],
        4,
        "seq 10 follows seq 11: a line out of place",
    );

    // Two lines swapped.
    let f = fresh();
    let mut lines = read_lines(&f[1]);
    lines.swap(1, 2);
    write_lines(&f[1], &lines);
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[1],
        2,
        "seq 7 follows seq 5: 1 line missing here",
    );

    // A rotated file left out.
    let f = fresh();
    let without = [f[0].clone(), f[2].clone(), f[3].clone()];
    failed_at(
        &verify(key, &[], &without),
        &f[2],
        1,
        &format!(
            "seq 9 begins this file, but {} ended at seq 4: 4 lines missing between them",
            f[0].display()
        ),
    );

    // A checkpoint's signature changed, the chain recomputed after it:
    // only the signature tells.
    let f = fresh();
    edit_line(&f[2], 1, |l| {
        let at = l.find("\"sig\":\"").expect("sig") + 7;
        let flipped = if &l[at..=at] == "0" { "1" } else { "0" };
        format!("{}{flipped}{}", &l[..at], &l[at + 1..])
    });
    rechain(&f);
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[2],
        1,
        "the checkpoint's signature does not verify with the given key",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_the_end_or_recomputing_the_chain_is_caught_by_checkpoints_kept_elsewhere() {
    let (_setup, files, key) = rotated_log().await;
    let work = tempfile::tempdir().expect("tempdir");
    // What cron copies out: every checkpoint line so far.
    let kept = work.path().join("checkpoints.jsonl");
    let copies: Vec<String> = files
        .iter()
        .flat_map(|f| read_lines(f))
        .filter(|l| l.contains("\"type\":\"checkpoint\""))
        .collect();
    write_lines(&kept, &copies);
    let kept_arg = path_str(&kept);
    let with_kept = ["--checkpoints", kept_arg.as_str()];
    assert_eq!(
        verify(Some(&key), &with_kept, &files),
        (
            Some(0),
            "intact: 4 files, 16 lines (seq 1 to 16), 4 checkpoints, 4 signatures checked, \
             4 kept checkpoints matched\n"
                .to_owned()
        )
    );

    // The end cut off: the live file emptied, .1 cut after its second line.
    let dir = work.path().join("cut");
    std::fs::create_dir(&dir).expect("mkdir");
    let f = copy(&files, &dir);
    write_lines(&f[3], &[]);
    let mut lines = read_lines(&f[2]);
    lines.truncate(2);
    write_lines(&f[2], &lines);
    assert!(plain_parse_finds_nothing(&f));
    // Nothing in the files themselves shows it.
    let (code, text) = verify(Some(&key), &[], &f);
    assert_eq!(code, Some(0), "{text}");
    failed_at(
        &verify(Some(&key), &with_kept, &f),
        &f[2],
        3,
        &format!(
            "the log ends at seq 10 (line 2), but the copy kept in {} line 4 has seq 13: \
             lines were cut from the end",
            kept.display()
        ),
    );

    // A URL edited and the chain recomputed after it, without the key:
    // the chain alone no longer tells, the signed checkpoint after it and
    // the kept copies do.
    let dir = work.path().join("rechained");
    std::fs::create_dir(&dir).expect("mkdir");
    let f = copy(&files, &dir);
    edit_line(&f[1], 3, |l| l.replace("/private/1/1", "/public/1/1"));
    rechain(&f);
    assert!(plain_parse_finds_nothing(&f));
    let (code, text) = verify(None, &[], &f);
    assert_eq!(code, Some(0), "{text}");
    failed_at(
        &verify(Some(&key), &[], &f),
        &f[2],
        1,
        "the checkpoint's signature does not verify with the given key",
    );
    failed_at(
        &verify(None, &with_kept, &f),
        &f[2],
        1,
        &format!(
            "seq 9 has another chain than the copy kept in {} line 3",
            kept.display()
        ),
    );
}

/// Every checkpoint line of `files`, as cron copies them out, written to
/// `dir/checkpoints.jsonl` with `extra` lines after them.
fn keep_checkpoints(files: &[PathBuf], dir: &Path, extra: &[String]) -> PathBuf {
    let kept = dir.join("checkpoints.jsonl");
    let mut copies: Vec<String> = files
        .iter()
        .flat_map(|f| read_lines(f))
        .filter(|l| l.contains("\"type\":\"checkpoint\""))
        .collect();
    copies.extend_from_slice(extra);
    write_lines(&kept, &copies);
    kept
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_is_checked_only_from_a_trusted_anchor_and_a_forged_or_cut_head_is_named() {
    let (_setup, files, key) = rotated_log().await;
    let key = Some(key.as_str());
    let work = tempfile::tempdir().expect("tempdir");
    let original = read_lines(&files[0]);
    let kept = keep_checkpoints(&files, work.path(), &[original[1].clone()]);
    let kept_arg = path_str(&kept);
    let with_kept = ["--checkpoints", kept_arg.as_str()];

    // The start checkpoint deleted and the next record rewritten from a
    // block to an allow, its chain field left as it was.
    let dir = work.path().join("forged");
    std::fs::create_dir(&dir).expect("mkdir");
    let f = copy(&files, &dir);
    let mut lines = original.clone();
    lines.remove(0);
    lines[0] = lines[0]
        .replace("\"decision\":\"disallowed\"", "\"decision\":\"allowed\"")
        .replace("/private/0/0", "/public/0/0");
    assert!(lines[0].contains("/public/0/0") && lines[0].contains("\"allowed\""));
    write_lines(&f[0], &lines);
    assert!(plain_parse_finds_nothing(&f));
    failed_at(
        &verify(key, &[], &f),
        &f[0],
        1,
        &format!(
            "no trusted anchor: the first 15 lines cannot be checked (seq 2 to 16: {} line 1 \
             to {} line 4)",
            f[0].display(),
            f[3].display()
        ),
    );
    // The original copy of that very line kept: same chain field, another line.
    failed_at(
        &verify(key, &with_kept, &f),
        &f[0],
        1,
        &format!(
            "seq 2 differs from the copy kept in {} line 5",
            kept.display()
        ),
    );

    // The first lines of the oldest file deleted, its start checkpoint
    // with them.
    let dir = work.path().join("cut-head");
    std::fs::create_dir(&dir).expect("mkdir");
    let f = copy(&files, &dir);
    write_lines(&f[0], &original[2..]);
    failed_at(
        &verify(key, &[], &f),
        &f[0],
        1,
        "no trusted anchor: the first 14 lines cannot be checked (seq 3 to 16",
    );
    let out = verify(key, &with_kept, &f);
    failed_at(
        &out,
        &f[0],
        1,
        &format!(
            "no trusted anchor: the first 2 lines cannot be checked (seq 3 to 4: {} lines 1 \
             to 2)",
            f[0].display()
        ),
    );
    assert!(
        out.1.contains("give --from-seq 5 to verify from it on"),
        "{}",
        out.1
    );
    // Checked from the kept checkpoint on, the lines before it named as
    // skipped; the same for a log whose oldest file was rotated away.
    let (code, text) = verify(key, &["--from-seq", "5", "--checkpoints", &kept_arg], &f);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with("intact: 4 files, 14 lines (seq 5 to 16), 3 checkpoints")
            && text.contains("checked from the kept copy of seq 5; 2 lines before seq 5 skipped"),
        "{text}"
    );
    let (code, text) = verify(key, &with_kept, &files[1..]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with("intact: 3 files, 12 lines (seq 5 to 16)")
            && text.contains("checked from the kept copy of seq 5"),
        "{text}"
    );
    // An untouched log from seq 1 needs no kept copy.
    assert_eq!(verify(key, &[], &files).0, Some(0));
}

/// The shipped logrotate configuration, run by the real logrotate four
/// times (`-f`, a state file of its own) on a log the binary writes, its
/// postrotate reload sending SIGHUP as `systemctl reload` does: the result
/// verifies in any file order, as the docs write the command, and found by
/// `--config` or `--dir` alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_rotated_four_times_by_logrotate_verifies_in_any_file_order() {
    let logrotate = Path::new("/usr/sbin/logrotate");
    if !logrotate.exists() {
        return crate::support::component::missing("logrotate", "no /usr/sbin/logrotate");
    }
    crate::support::component::used("logrotate");
    let origin = Origin::with_robots(ROBOTS).await;
    let setup = Setup::with_config("alphabot", "signing_key = true\n");
    let mut proxy = setup.start().await;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/robots-proxy.logrotate");
    let shipped = std::fs::read_to_string(&shipped).expect("systemd/robots-proxy.logrotate");
    let live = setup.audit_path();
    let reload = "systemctl reload robots-proxy.service";
    assert!(shipped.contains("/var/log/robots-proxy/audit.jsonl {") && shipped.contains(reload));
    let conf = shipped
        .replace("/var/log/robots-proxy/audit.jsonl", &path_str(&live))
        .replace(reload, &format!("kill -HUP {}", proxy.child.id()));
    let rotate_dir = tempfile::tempdir().expect("tempdir");
    let conf_path = rotate_dir.path().join("robots-proxy");
    std::fs::write(&conf_path, conf).expect("write");
    let state = rotate_dir.path().join("logrotate.status");
    let mut conn = Conn::open(proxy.addr).await;
    for round in 0..5 {
        for i in 0..3 {
            block(&mut conn, &origin, &format!("/private/{round}/{i}")).await;
        }
        if round < 4 {
            let out = std::process::Command::new(logrotate)
                .arg("-f")
                .arg("-s")
                .arg(&state)
                .arg(&conf_path)
                .output()
                .expect("run logrotate");
            assert!(out.status.success(), "logrotate: {}", stderr(&out));
            proxy.wait_for("configuration reloaded").await;
        }
    }
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());

    let dir = setup.dir.path();
    let name = |s: &str| dir.join(format!("audit.jsonl{s}"));
    for s in [".4.gz", ".3.gz", ".2.gz", ".1", ""] {
        assert!(name(s).exists(), "{}", name(s).display());
    }
    assert!(!name(".1.gz").exists() && !name(".5.gz").exists());
    let intact = "intact: 5 files, 20 lines (seq 1 to 20), 5 checkpoints, 5 signatures checked\n";
    let config = path_str(&setup.config_path());
    // What a shell makes of the documented forms, and the glob sorted as
    // a name order would (.10.gz before .2.gz once there are ten).
    for files in [
        vec![".2.gz", ".3.gz", ".4.gz", ".1", ""],
        vec!["", ".1", ".2.gz", ".3.gz", ".4.gz"],
        vec![".4.gz", ".3.gz", ".2.gz", ".1", ""],
        vec![".1", ".3.gz", "", ".4.gz", ".2.gz"],
    ] {
        let files: Vec<PathBuf> = files.iter().map(|s| name(s)).collect();
        assert_eq!(
            verify(None, &["--config", &config], &files),
            (Some(0), intact.to_owned()),
            "{files:?}"
        );
    }
    // The live file and every rotation, found.
    assert_eq!(
        verify(None, &["--config", &config], &[]),
        (Some(0), intact.to_owned())
    );
    let dir_arg = path_str(dir);
    let key = audit(&["key", "--config", &config]);
    let key = stdout(&key).trim().to_owned();
    assert_eq!(
        verify(Some(&key), &["--dir", &dir_arg], &[]),
        (Some(0), intact.to_owned())
    );
    // A rotation left out is still named, whatever the order.
    let without: Vec<PathBuf> = [".1", "", ".4.gz", ".2.gz"]
        .iter()
        .map(|s| name(s))
        .collect();
    failed_at(
        &verify(Some(&key), &[], &without),
        &name(".2.gz"),
        1,
        &format!(
            "seq 9 begins this file, but {} ended at seq 4: 4 lines missing between them",
            name(".4.gz").display()
        ),
    );
}

/// A checkpoint a second while lines come, each also appended to the
/// witness file on another path: cutting the log's end back before the
/// last witnessed checkpoint is found by `audit verify --config` alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_tail_older_than_the_last_witnessed_checkpoint_is_found() {
    let origin = Origin::with_robots(ROBOTS).await;
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let witness = elsewhere.path().join("checkpoints.jsonl");
    let setup = Setup::with_config(
        "alphabot",
        &format!(
            "signing_key = true\ncheckpoint_every = \"1s\"\nwitness_file = {:?}\n",
            path_str(&witness)
        ),
    );
    let mut proxy = setup.start().await;
    let mut conn = Conn::open(proxy.addr).await;
    for i in 0..3 {
        block(&mut conn, &origin, &format!("/private/{i}")).await;
    }
    // The interval checkpoint after the three lines, in the witness.
    let witnessed = |reason: &'static str| {
        let witness = witness.clone();
        move || {
            let lines = std::fs::read_to_string(&witness).unwrap_or_default();
            let found = lines
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["reason"] == reason && v["seq"].as_u64() >= Some(5));
            std::future::ready(found.ok_or(lines))
        }
    };
    crate::support::until("an interval checkpoint", witnessed("interval")).await;
    block(&mut conn, &origin, "/private/3").await;
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());
    let config = path_str(&setup.config_path());
    let live = setup.audit_path();
    let (code, text) = verify(None, &["--config", &config], &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("kept checkpoints matched"), "{text}");
    // The log cut back to just before the last witnessed checkpoint.
    let kept = read_lines(&witness);
    let (at, last) = kept
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((i + 1, v["seq"].as_u64()?))
        })
        .max_by_key(|(_, seq)| *seq)
        .expect("witnessed checkpoints");
    assert!(last >= 5, "{kept:?}");
    let lines = read_lines(&live);
    write_lines(&live, &lines[..last as usize - 1]);
    assert!(plain_parse_finds_nothing(std::slice::from_ref(&live)));
    failed_at(
        &verify(None, &["--config", &config], &[]),
        &live,
        last as usize,
        &format!(
            "the log ends at seq {} (line {}), but the copy kept in {} line {at} has seq {last}: \
             lines were cut from the end",
            last - 1,
            last - 1,
            witness.display()
        ),
    );
    // Named explicitly, the same.
    let witness_arg = path_str(&witness);
    assert_eq!(
        verify(
            None,
            &["--witness", &witness_arg],
            std::slice::from_ref(&live)
        )
        .0,
        Some(1)
    );
}

/// `audit.witness_command`: a script run for every checkpoint, the line
/// on its input, appends it to a file elsewhere; that file is a witness
/// `audit verify --witness` reads as it is, and a cut tail is found by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_command_records_each_checkpoint_for_verify() {
    let origin = Origin::with_robots(ROBOTS).await;
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let recorded = elsewhere.path().join("recorded.jsonl");
    let script = elsewhere.path().join("witness.sh");
    std::fs::write(&script, "#!/bin/sh\nexec cat >> \"$1\"\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let setup = Setup::with_config(
        "alphabot",
        &format!(
            "signing_key = true\ncheckpoint_every = \"1s\"\nwitness_command = [{:?}, {:?}]\n",
            path_str(&script),
            path_str(&recorded)
        ),
    );
    let mut proxy = setup.start().await;
    let mut conn = Conn::open(proxy.addr).await;
    for i in 0..3 {
        block(&mut conn, &origin, &format!("/private/{i}")).await;
    }
    let interval = {
        let recorded = recorded.clone();
        move || {
            let lines = std::fs::read_to_string(&recorded).unwrap_or_default();
            let found = lines
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["reason"] == "interval" && v["seq"].as_u64() >= Some(5));
            std::future::ready(found.ok_or(lines))
        }
    };
    let last = crate::support::until("an interval checkpoint recorded", interval).await;
    block(&mut conn, &origin, "/private/3").await;
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());
    let live = setup.audit_path();
    let recorded_arg = path_str(&recorded);
    let (code, text) = verify(
        None,
        &["--witness", &recorded_arg],
        std::slice::from_ref(&live),
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(" kept checkpoints matched"), "{text}");
    // The recorded lines are the log's checkpoint lines, byte for byte (a
    // checkpoint written as the proxy stopped may not have been passed on).
    let checkpoints: Vec<String> = read_lines(&live)
        .into_iter()
        .filter(|l| l.contains("\"type\":\"checkpoint\""))
        .collect();
    let witnessed = read_lines(&recorded);
    assert!(witnessed.len() >= 2, "{witnessed:?}");
    assert_eq!(witnessed[..], checkpoints[..witnessed.len()]);
    let seq = last["seq"].as_u64().expect("seq") as usize;
    let lines = read_lines(&live);
    write_lines(&live, &lines[..seq - 1]);
    let (code, text) = verify(
        None,
        &["--witness", &recorded_arg],
        std::slice::from_ref(&live),
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("lines were cut from the end"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_line_is_cut_at_start_and_the_chain_goes_on_from_the_last_whole_line() {
    let origin = Origin::with_robots(ROBOTS).await;
    let setup = Setup::with_config("alphabot", "");
    let audit_path = setup.audit_path();
    for (run, torn) in [(0, true), (1, false)] {
        let mut proxy = setup.start().await;
        if run == 1 {
            let log = proxy.seen().join("\n");
            assert!(log.contains("cut a torn last line"), "{log}");
        }
        let mut conn = Conn::open(proxy.addr).await;
        for i in 0..2 {
            block(&mut conn, &origin, &format!("/private/{run}/{i}")).await;
        }
        drop(conn);
        proxy.signal("TERM");
        assert!(proxy.wait_exit().await.success());
        if torn {
            // A crash mid-write: half a line at the end.
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&audit_path)
                .expect("open");
            f.write_all(b"{\"seq\":4,\"time\":\"2026-11-22T01:1")
                .expect("tear");
        }
    }
    let text = std::fs::read_to_string(&audit_path).expect("read");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line whole"))
        .collect();
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    assert_eq!(lines[3]["reason"], "start");
    assert_eq!(lines[3]["head"], lines[2]["chain"]);
    let (code, out) = verify(None, &[], &[audit_path]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with("intact: 1 file, 6 lines (seq 1 to 6), 2 checkpoints"),
        "{out}"
    );
}

#[test]
fn usage_and_read_errors_exit_2_naming_what() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.jsonl");
    let out = audit(&["verify", &path_str(&missing)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&path_str(&missing)),
        "{}",
        stderr(&out)
    );
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, "").expect("write");
    let out = audit(&["verify", "--key", "xyz", &path_str(&log)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--key \"xyz\""), "{}", stderr(&out));
    // Signing off: no key to print.
    let config = dir.path().join("robots-proxy.toml");
    std::fs::write(&config, "[audit]\nsigning_key = false\n").expect("write");
    let out = audit(&["key", "--config", &path_str(&config)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("audit.signing_key"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&config, "[audit]\nsigning_key = 3\n").expect("write");
    let out = audit(&["key", "--config", &path_str(&config)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line 2") && stderr(&out).contains("false, true or the path"),
        "{}",
        stderr(&out)
    );
}
