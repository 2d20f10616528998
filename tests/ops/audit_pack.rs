//! Evidence packs: the real binary writes a signed, witnessed log over a
//! rotation; `audit export` packs a period of it; the pack, copied to
//! another directory, passes `audit verify --pack` there; a file edited,
//! an archived document removed or a log line changed (with or without
//! the manifest rewritten to match) fails it, naming what.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::Conn;
use crate::support::Origin;
use crate::support::binary::{Setup, command};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

fn audit(args: &[&str]) -> Output {
    command()
        .arg("audit")
        .args(args)
        .output()
        .expect("run robots-proxy")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// Copies the directory `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// A copy of the pack `pack` in a new temporary directory.
fn copied(pack: &Path) -> (tempfile::TempDir, PathBuf) {
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let to = elsewhere.path().join("pack");
    copy_dir(pack, &to);
    (elsewhere, to)
}

/// `audit verify --pack DIR`: exit code and output.
fn verify_pack(pack: &Path) -> (Option<i32>, String) {
    let out = audit(&["verify", "--pack", &path_str(pack)]);
    (out.status.code(), text(&out))
}

fn manifest(pack: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(pack.join("manifest.json")).expect("manifest"))
        .expect("manifest JSON")
}

/// Rewrites the manifest's size and SHA-256 of `rel` to match the file.
fn rehash(pack: &Path, rel: &str) {
    let mut m = manifest(pack);
    let bytes = std::fs::read(pack.join(rel)).expect("read");
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let entry = m["files"]
        .as_array_mut()
        .expect("files")
        .iter_mut()
        .find(|f| f["path"] == rel)
        .expect("listed");
    entry["sha256"] = hex.into();
    entry["bytes"] = bytes.len().into();
    std::fs::write(
        pack.join("manifest.json"),
        serde_json::to_vec_pretty(&m).expect("json"),
    )
    .expect("write");
}

/// Replaces `from` by `to` in the pack's file `rel`.
fn edit(pack: &Path, rel: &str, from: &str, to: &str) {
    let path = pack.join(rel);
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.contains(from), "{rel} has no {from:?}");
    std::fs::write(&path, text.replacen(from, to, 1)).expect("write");
}

/// A log over one rotation, signed and witnessed, with three blocked
/// requests before the rotation and two after.
async fn written_log() -> (Setup, tempfile::TempDir) {
    let origin = Origin::with_robots(ROBOTS).await;
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let witness = elsewhere.path().join("checkpoints.jsonl");
    let setup = Setup::with_config(
        "alphabot",
        &format!(
            "signing_key = true\nwitness_file = {:?}\n",
            path_str(&witness)
        ),
    );
    let mut proxy = setup.start().await;
    let mut conn = Conn::open(proxy.addr).await;
    for path in ["/private/1", "/private/2", "/private/3"] {
        assert_eq!(conn.get(&origin.url(path)).await.status, 403);
    }
    std::fs::rename(setup.audit_path(), setup.dir.path().join("audit.jsonl.1")).expect("rotate");
    proxy.reload("configuration reloaded").await;
    for path in ["/private/4", "/private/5"] {
        assert_eq!(conn.get(&origin.url(path)).await.status, 403);
    }
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());
    (setup, elsewhere)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_pack_verifies_elsewhere_and_any_change_is_named() {
    let (setup, _witness_dir) = written_log().await;
    let made = tempfile::tempdir().expect("tempdir");
    let pack = made.path().join("pack");
    let config = path_str(&setup.config_path());
    let out = audit(&[
        "export",
        "--config",
        &config,
        "--from",
        "2000-01-01",
        "--to",
        "2999-12-31T00:00:00Z",
        "--out",
        &path_str(&pack),
    ]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("2 audit file(s), 1 document(s)"), "{said}");
    assert!(said.contains("verify: intact: 2 files, 7 lines"), "{said}");
    let m = manifest(&pack);
    assert_eq!(
        m["logs"],
        serde_json::json!(["logs/audit.jsonl.1", "logs/audit.jsonl"])
    );
    let digest = m["documents"]
        .as_object()
        .expect("documents")
        .keys()
        .next()
        .expect("one document")
        .clone();
    let listed: Vec<&str> = m["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    let doc = format!("documents/{digest}.txt");
    for rel in [
        "logs/audit.jsonl.1",
        "logs/audit.jsonl",
        "witness.jsonl",
        "public-key.txt",
        "verify.txt",
        "verify.json",
        "report.html",
        "report.csv",
        doc.as_str(),
    ] {
        assert!(listed.contains(&rel), "{rel} not in {listed:?}");
    }
    assert_eq!(
        std::fs::read_to_string(pack.join(&doc)).expect("document"),
        ROBOTS
    );

    // Copied elsewhere (the source log and archive out of reach), intact.
    let (_a, intact) = copied(&pack);
    drop(setup);
    let (code, said) = verify_pack(&intact);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.starts_with("pack intact: "), "{said}");
    assert!(
        said.contains("intact: 2 files, 7 lines (seq 1 to 7), 2 checkpoints, 2 signatures checked"),
        "{said}"
    );
    assert!(
        said.contains("1 of 1 documents named by the period's lines present"),
        "{said}"
    );

    // A report edited.
    let (_b, csv) = copied(&pack);
    edit(&csv, "report.csv", "alphabot", "betabot");
    let (code, said) = verify_pack(&csv);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: report.csv: changed since the pack was made"),
        "{said}"
    );

    // An archived document removed.
    let (_c, removed) = copied(&pack);
    std::fs::remove_file(removed.join(&doc)).expect("rm");
    let (code, said) = verify_pack(&removed);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!("FAILED: {doc}: missing from the pack")),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "FAILED: robots_sha256 {digest} (named by logs/audit.jsonl.1 line 2) is not in \
             the pack, and no evidence_removed line says why"
        )),
        "{said}"
    );

    // A log line edited: named by the manifest, and by the chain once the
    // manifest is rewritten to match.
    let (_d, forged) = copied(&pack);
    edit(&forged, "logs/audit.jsonl.1", "/private/2", "/public/2");
    let (code, said) = verify_pack(&forged);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: logs/audit.jsonl.1: changed since the pack was made"),
        "{said}"
    );
    assert!(
        said.contains(
            "FAILED: the log: FAILED: logs/audit.jsonl.1 line 3: its chain does not match"
        ),
        "{said}"
    );
    rehash(&forged, "logs/audit.jsonl.1");
    let (code, said) = verify_pack(&forged);
    assert_eq!(code, Some(1), "{said}");
    assert!(!said.contains("changed since"), "{said}");
    assert!(
        said.contains(
            "FAILED: the log: FAILED: logs/audit.jsonl.1 line 3: its chain does not match"
        ),
        "{said}"
    );
}

/// A period ending before the live file: only the rotated file is packed,
/// and the witness (which goes on) shows it ends where the log went on;
/// its last line cut is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_of_an_earlier_period_ends_where_the_witness_goes_on() {
    let (setup, _witness_dir) = written_log().await;
    let live = setup.audit_path();
    let first_live: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&live)
            .expect("live")
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("JSON");
    let to = first_live["time"].as_str().expect("time").to_owned();
    let made = tempfile::tempdir().expect("tempdir");
    let pack = made.path().join("pack");
    let out = audit(&[
        "export",
        "--config",
        &path_str(&setup.config_path()),
        "--from",
        "2000-01-01T00:00:00Z",
        "--to",
        &to,
        "--out",
        &path_str(&pack),
    ]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("1 audit file(s)"), "{said}");
    assert_eq!(
        manifest(&pack)["logs"],
        serde_json::json!(["logs/audit.jsonl.1"])
    );
    let (code, said) = verify_pack(&pack);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("the files end where the kept checkpoint of seq 5 goes on"),
        "{said}"
    );

    // The rotated file's last line cut, the manifest rewritten to match.
    let rel = "logs/audit.jsonl.1";
    let text = std::fs::read_to_string(pack.join(rel)).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(
        pack.join(rel),
        format!("{}\n", lines[..lines.len() - 1].join("\n")),
    )
    .expect("write");
    rehash(&pack, rel);
    let (code, said) = verify_pack(&pack);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("lines were cut from the end"), "{said}");
}

#[test]
fn export_names_a_bad_period_and_an_empty_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, "").expect("write");
    let out_dir = path_str(&dir.path().join("pack"));
    let out = audit(&[
        "export",
        "--from",
        "yesterday",
        "--to",
        "2026-01-01",
        "--out",
        &out_dir,
        &path_str(&log),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("--from: \"yesterday\" is neither an RFC 3339 time"),
        "{}",
        text(&out)
    );
    let out = audit(&[
        "export",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-01",
        "--out",
        &out_dir,
        &path_str(&log),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .contains("no audit line from 2026-01-01T00:00:00Z to 2026-01-02T00:00:00Z in 1 file"),
        "{}",
        text(&out)
    );
}
