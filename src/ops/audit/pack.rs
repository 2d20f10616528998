//! Evidence packs: `robots-proxy audit export` writes, for a period, every
//! piece an auditor needs into one directory, and `audit verify --pack`
//! checks such a directory offline, on another machine:
//!
//! - `logs/`: the audit files holding the period's lines, whole (a file
//!   cut to the period would not verify), plus the earlier ones back to
//!   one the chain can be checked from (seq 1's start checkpoint, or a
//!   checkpoint the witness file holds), plus later ones holding an
//!   `evidence_removed` line about a document the period's lines name;
//! - `witness.jsonl`: the witness file's copy (`audit.witness_file`);
//! - `public-key.txt`: the Ed25519 key the checkpoints are signed with;
//! - `documents/<sha256>.txt` (and `.json`, its archive metadata): every
//!   archived document a period's line names by a `…_sha256` field
//!   (`robots_sha256` today; any later document kind named the same way
//!   is collected alike);
//! - `verify.txt`, `verify.json`: the chain's verification at export;
//! - `report.html`, `report.csv`: `audit report` over the period;
//! - `manifest.json`: the period, the files' SHA-256 and sizes, the
//!   documents, and the documents gone (each with the `evidence_removed`
//!   line that says why, when there is one).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::chain::{self, ChainFields};
use super::input::Lines;
use super::{report, verify};
use crate::judge::archive::{self, ArchiveError, Digest};

/// What the manifest's `format` says.
const FORMAT: &str = "robots-proxy evidence pack 1";
const MANIFEST: &str = "manifest.json";
const WITNESS: &str = "witness.jsonl";
const PUBLIC_KEY: &str = "public-key.txt";

/// The period and where everything comes from.
pub(crate) struct Export {
    pub(crate) from: OffsetDateTime,
    pub(crate) to: OffsetDateTime,
    /// The log's files, any order.
    pub(crate) files: Vec<PathBuf>,
    pub(crate) archive: PathBuf,
    pub(crate) key: Option<[u8; 32]>,
    pub(crate) witness: Option<PathBuf>,
    pub(crate) out: PathBuf,
}

/// A file of the pack, as the manifest lists it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Relative to the pack, `/`-separated.
    pub(crate) path: String,
    pub(crate) bytes: u64,
    pub(crate) sha256: String,
}

/// A document the period's lines name that is not in the pack.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Gone {
    pub(crate) sha256: String,
    /// The field that names it (`robots_sha256`).
    pub(crate) field: String,
    /// The `evidence_removed` line that says it is gone, when there is one.
    pub(crate) removed_at_seq: Option<u64>,
    pub(crate) reason: String,
}

/// `manifest.json`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) format: String,
    pub(crate) created: String,
    /// The period: lines at or after `from`, before `to` (RFC 3339).
    pub(crate) from: String,
    pub(crate) to: String,
    /// The audit files, oldest first.
    pub(crate) logs: Vec<String>,
    pub(crate) witness: Option<String>,
    pub(crate) public_key: Option<String>,
    /// Each archived document: its digest and the field naming it.
    pub(crate) documents: BTreeMap<String, String>,
    pub(crate) gone: Vec<Gone>,
    pub(crate) files: Vec<Entry>,
}

/// What an export made.
pub(crate) struct Exported {
    pub(crate) verify: String,
    pub(crate) intact: bool,
    pub(crate) manifest_sha256: String,
    pub(crate) logs: usize,
    pub(crate) documents: usize,
    pub(crate) gone: Vec<Gone>,
}

/// Why an export or a pack check could not be done at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PackError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}")]
    Usage(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The fields of a line a pack looks at: `seq`, `time`, `type`, `reason`
/// and every field whose name ends in `_sha256` (a document named).
#[derive(Default)]
struct Scan<'a> {
    seq: Option<u64>,
    time: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    reason: Option<Cow<'a, str>>,
    digests: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de> Deserialize<'de> for Scan<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Scan<'de>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Scan<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an audit line (a JSON object)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Scan<'de>, A::Error> {
                let mut scan = Scan::default();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    match &*key {
                        "seq" => scan.seq = map.next_value()?,
                        "time" => scan.time = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
                        "type" => scan.kind = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
                        "reason" => {
                            scan.reason = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0)
                        }
                        // The opt-out documents (tdmrep.json, RSL) a verdict
                        // rests on: `purpose=protocol: document sha256=… element`.
                        "usage_evidence" => {
                            for Text(evidence) in map
                                .next_value::<Option<Vec<Text<'de>>>>()?
                                .unwrap_or_default()
                            {
                                if let Some(digest) = evidence_digest(&evidence) {
                                    scan.digests.push((
                                        Cow::Borrowed("usage_evidence"),
                                        Cow::Owned(digest.to_owned()),
                                    ));
                                }
                            }
                        }
                        k if k.ends_with("_sha256") => {
                            if let Some(Text(value)) = map.next_value::<Option<Text<'de>>>()? {
                                scan.digests.push((key, value));
                            }
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(scan)
            }
        }
        d.deserialize_map(Visitor)
    }
}

impl Scan<'_> {
    fn removal(&self) -> bool {
        self.kind.as_deref() == Some("evidence_removed")
    }

    /// Whether the line's time falls in `[from, to)`.
    fn within(&self, from: OffsetDateTime, to: OffsetDateTime) -> bool {
        self.time
            .as_deref()
            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
            .is_some_and(|t| from <= t && t < to)
    }
}

/// The SHA-256 a `usage_evidence` entry names (`sha256=` and 64 hex
/// digits), if any.
fn evidence_digest(evidence: &str) -> Option<&str> {
    let (_, rest) = evidence.split_once("sha256=")?;
    let digest = rest.get(..64)?;
    digest
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some(digest)
}

/// Where a document is first named: digest → (field, file index, line).
type Named = BTreeMap<String, (String, usize, u64)>;
/// `evidence_removed` lines: digest → (seq, reason, file index).
type Removed = BTreeMap<String, (u64, String, usize)>;

/// What one pass over the files finds.
#[derive(Default)]
struct Found {
    /// Per file: whether a line falls in the period.
    in_period: Vec<bool>,
    /// Per file: its first chained line's seq, whether it begins a chain,
    /// and the line's SHA-256.
    first: Vec<Option<(u64, bool, [u8; 32])>>,
    named: Named,
    removed: Removed,
    /// Lines that do not parse, with their place (file, line).
    bad: Vec<(usize, u64, String)>,
}

/// Reads `files` (oldest first) for the documents the period's lines
/// name and the `evidence_removed` lines of every file.
fn scan(files: &[PathBuf], from: OffsetDateTime, to: OffsetDateTime) -> Result<Found, PackError> {
    let mut found = Found::default();
    for (index, path) in files.iter().enumerate() {
        let mut lines = Lines::open(path).map_err(io_at(path))?;
        found.in_period.push(false);
        found.first.push(None);
        while let Some(line) = lines.next_line().map_err(io_at(path))? {
            let Ok(fields) = serde_json::from_slice::<Scan<'_>>(line.bytes) else {
                found
                    .bad
                    .push((index, line.number, "not a JSON object".into()));
                continue;
            };
            if found.first[index].is_none()
                && let Some(seq) = fields.seq
            {
                let start = serde_json::from_slice::<ChainFields<'_>>(line.bytes)
                    .is_ok_and(|c| c.chain_start.is_some() && c.is_checkpoint());
                found.first[index] = Some((seq, start, sha256(line.bytes)));
            }
            if fields.removal() {
                for (_, digest) in &fields.digests {
                    found.removed.insert(
                        digest.to_ascii_lowercase(),
                        (
                            fields.seq.unwrap_or(0),
                            fields.reason.as_deref().unwrap_or("-").to_owned(),
                            index,
                        ),
                    );
                }
                continue;
            }
            if !fields.within(from, to) {
                continue;
            }
            found.in_period[index] = true;
            for (field, digest) in &fields.digests {
                found
                    .named
                    .entry(digest.to_ascii_lowercase())
                    .or_insert_with(|| (field.to_string(), index, line.number));
            }
        }
    }
    Ok(found)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Digest::of(bytes).0
}

/// The SHA-256 of every line of the witness file.
fn witnessed(path: &Path) -> Result<HashSet<[u8; 32]>, PackError> {
    let mut out = HashSet::new();
    let mut lines = Lines::open(path).map_err(io_at(path))?;
    while let Some(line) = lines.next_line().map_err(io_at(path))? {
        out.insert(sha256(line.bytes));
    }
    Ok(out)
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// Writes the pack of `e.from..e.to` into `e.out` (which must not exist,
/// or be empty).
pub(crate) fn export(e: &Export) -> Result<Exported, PackError> {
    if e.from >= e.to {
        return Err(PackError::Usage("--from must be before --to".into()));
    }
    let mut files = e.files.clone();
    super::files::sort_by_first_seq(&mut files)
        .map_err(|(path, source)| PackError::Io { path, source })?;
    let found = scan(&files, e.from, e.to)?;
    let (Some(first), Some(last)) = (
        found.in_period.iter().position(|&b| b),
        found.in_period.iter().rposition(|&b| b),
    ) else {
        return Err(PackError::Usage(format!(
            "no audit line from {} to {} in {}",
            rfc3339(e.from),
            rfc3339(e.to),
            count_files(files.len())
        )));
    };
    let witness = e.witness.as_deref().map(witnessed).transpose()?;
    // Back to a file the chain can be checked from.
    let anchored = |i: usize| match found.first[i] {
        Some((seq, start, digest)) => {
            (seq == 1 && start) || witness.as_ref().is_some_and(|w| w.contains(&digest))
        }
        None => false,
    };
    let begin = (0..=first).rev().find(|&i| anchored(i)).unwrap_or(0);
    // On to the files saying why a named document is gone.
    let mut gone = Vec::new();
    let mut documents = BTreeMap::new();
    let mut end = last;
    for (digest, (field, _, _)) in &found.named {
        match Digest::parse(digest) {
            Some(d) if archive::read(&e.archive, &d.to_string()).is_ok() => {
                documents.insert(d.to_string(), field.clone());
            }
            parsed => {
                let removed = found.removed.get(digest);
                if let Some((_, _, file)) = removed {
                    end = end.max(*file);
                }
                gone.push(Gone {
                    sha256: digest.clone(),
                    field: field.clone(),
                    removed_at_seq: removed.map(|r| r.0),
                    reason: match (parsed, removed) {
                        (None, _) => "not a SHA-256".into(),
                        (_, Some((_, reason, _))) => reason.clone(),
                        (Some(d), None) => match archive::read(&e.archive, &d.to_string()) {
                            Err(err) => err.to_string(),
                            Ok(_) => "unreadable".into(),
                        },
                    },
                });
            }
        }
    }
    let logs = &files[begin..=end];

    create_empty_dir(&e.out)?;
    let mut names = Vec::new();
    let mut seen = BTreeSet::new();
    for path in logs {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PackError::Usage(format!("{}: no usable file name", path.display())))?;
        if !seen.insert(name.to_owned()) {
            return Err(PackError::Usage(format!(
                "two audit files are named {name}: give files with distinct names"
            )));
        }
        let to = format!("logs/{name}");
        copy(path, &e.out.join(&to))?;
        names.push(to);
    }
    let witness_name = match &e.witness {
        Some(path) => {
            copy(path, &e.out.join(WITNESS))?;
            Some(WITNESS.to_owned())
        }
        None => None,
    };
    let key_name = match &e.key {
        Some(key) => {
            write(
                &e.out.join(PUBLIC_KEY),
                format!("{}\n", chain::hex(key)).as_bytes(),
            )?;
            Some(PUBLIC_KEY.to_owned())
        }
        None => None,
    };
    for digest in documents.keys() {
        let (text, meta) = archive::read(&e.archive, digest).map_err(|err| match err {
            ArchiveError::Io { path, source } => PackError::Io { path, source },
            other => PackError::Usage(other.to_string()),
        })?;
        write(&e.out.join(format!("documents/{digest}.txt")), &text)?;
        let mut json = serde_json::to_vec_pretty(&meta)
            .map_err(io::Error::other)
            .map_err(io_at(&e.out))?;
        json.push(b'\n');
        write(&e.out.join(format!("documents/{digest}.json")), &json)?;
    }

    let pack_logs: Vec<PathBuf> = names.iter().map(|n| e.out.join(n)).collect();
    let outcome = verify::verify(
        &pack_logs,
        &verify::Options {
            key: e.key,
            witness: witness_name.as_ref().map(|w| e.out.join(w)),
            kept_go_on: true,
            ..verify::Options::default()
        },
    )
    .map_err(|err| PackError::Usage(err.to_string()))?;
    let (text, json, intact) = verdict(&outcome, &e.out);
    write(&e.out.join("verify.txt"), format!("{text}\n").as_bytes())?;
    write(&e.out.join("verify.json"), &json)?;

    let opts = report::Options {
        since: Some(e.from),
        until: Some(e.to),
        top: 20,
        // The opt-out signals each refusal rests on belong in the pack.
        usage: true,
    };
    let summed = report::report(&pack_logs, &opts).map_err(|err| PackError::Io {
        path: err.path,
        source: err.source,
    })?;
    for (name, format) in [
        ("report.html", report::Format::Html),
        ("report.csv", report::Format::Csv),
    ] {
        let mut out = Vec::new();
        report::write(&summed, format, &mut out).map_err(io_at(&e.out))?;
        write(&e.out.join(name), &out)?;
    }

    let manifest = Manifest {
        format: FORMAT.into(),
        created: rfc3339(OffsetDateTime::now_utc()),
        from: rfc3339(e.from),
        to: rfc3339(e.to),
        logs: names,
        witness: witness_name,
        public_key: key_name,
        documents,
        gone,
        files: entries(&e.out)?,
    };
    let mut json = serde_json::to_vec_pretty(&manifest)
        .map_err(io::Error::other)
        .map_err(io_at(&e.out))?;
    json.push(b'\n');
    write(&e.out.join(MANIFEST), &json)?;
    Ok(Exported {
        verify: text,
        intact,
        manifest_sha256: chain::hex(&sha256(&json)),
        logs: manifest.logs.len(),
        documents: manifest.documents.len(),
        gone: manifest.gone,
    })
}

fn count_files(n: usize) -> String {
    if n == 1 {
        "1 file".into()
    } else {
        format!("{n} files")
    }
}

/// The verification as text (paths relative to the pack) and JSON, and
/// whether it passed.
fn verdict(outcome: &verify::Outcome, pack: &Path) -> (String, Vec<u8>, bool) {
    let (text, value) = match outcome {
        verify::Outcome::Intact(summary) => (
            summary.to_string(),
            serde_json::json!({ "intact": true, "summary": summary }),
        ),
        verify::Outcome::Broken(finding) => {
            let file = finding.file.strip_prefix(pack).unwrap_or(&finding.file);
            let text = format!(
                "FAILED: {} line {}: {}",
                file.display(),
                finding.line,
                finding.reason
            );
            let value = serde_json::json!({
                "intact": false,
                "file": file,
                "line": finding.line,
                "reason": finding.reason,
            });
            (text, value)
        }
    };
    let text = text.replace(&format!("{}/", pack.display()), "");
    let mut json = serde_json::to_vec_pretty(&serde_json::json!({
        "text": text,
        "verify": value,
    }))
    .unwrap_or_default();
    json.push(b'\n');
    let intact = matches!(outcome, verify::Outcome::Intact(_));
    (text, json, intact)
}

fn create_empty_dir(dir: &Path) -> Result<(), PackError> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(PackError::Usage(format!(
                    "--out {}: not empty (a pack is written into a new directory)",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io_at(dir))
        }
        Err(e) => Err(io_at(dir)(e)),
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), PackError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
    }
    let mut file = fs::File::create(path).map_err(io_at(path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_at(path))
}

fn copy(from: &Path, to: &Path) -> Result<(), PackError> {
    let bytes = fs::read(from).map_err(io_at(from))?;
    write(to, &bytes)
}

/// Every file under `pack` but the manifest, sorted, with its size and
/// SHA-256.
fn entries(pack: &Path) -> Result<Vec<Entry>, PackError> {
    let mut out = Vec::new();
    for rel in walk(pack)? {
        let path = pack.join(&rel);
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        out.push(Entry {
            path: rel,
            bytes: bytes.len() as u64,
            sha256: chain::hex(&sha256(&bytes)),
        });
    }
    Ok(out)
}

/// The files under `root` (relative, `/`-separated, sorted), the
/// manifest left out.
fn walk(root: &Path) -> Result<Vec<String>, PackError> {
    let mut out = Vec::new();
    let mut dirs = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        for entry in fs::read_dir(&dir).map_err(io_at(&dir))? {
            let entry = entry.map_err(io_at(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("{prefix}{name}");
            let kind = entry.file_type().map_err(io_at(&entry.path()))?;
            if kind.is_dir() {
                dirs.push((entry.path(), format!("{rel}/")));
            } else if rel != MANIFEST {
                out.push(rel);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A pack checked: what is wrong (nothing when it holds), and what it
/// says.
pub(crate) struct PackCheck {
    pub(crate) problems: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// A manifest path: relative, no `..`, no root.
fn inside(pack: &Path, rel: &str) -> Option<PathBuf> {
    let path = Path::new(rel);
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| pack.join(path))
}

/// Checks the pack in `pack`: every file against the manifest, the chain
/// (with the pack's key and witness), and every document the period's
/// lines name.
pub(crate) fn check(pack: &Path) -> Result<PackCheck, PackError> {
    let manifest_path = pack.join(MANIFEST);
    let bytes = fs::read(&manifest_path).map_err(io_at(&manifest_path))?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        PackError::Usage(format!(
            "{}: not a pack manifest: {e}",
            manifest_path.display()
        ))
    })?;
    if manifest.format != FORMAT {
        return Err(PackError::Usage(format!(
            "{}: format {:?}, not {FORMAT:?}",
            manifest_path.display(),
            manifest.format
        )));
    }
    let mut c = PackCheck {
        problems: Vec::new(),
        notes: vec![format!("manifest SHA-256 {}", chain::hex(&sha256(&bytes)))],
    };
    let path_of = |rel: &str| {
        inside(pack, rel).ok_or_else(|| {
            PackError::Usage(format!("{MANIFEST}: {rel:?} is not a path inside the pack"))
        })
    };
    // Every file as listed.
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    for entry in &manifest.files {
        let path = path_of(&entry.path)?;
        match fs::read(&path) {
            Ok(bytes)
                if bytes.len() as u64 != entry.bytes
                    || chain::hex(&sha256(&bytes)) != entry.sha256 =>
            {
                c.problems.push(format!(
                    "{}: changed since the pack was made (its size or SHA-256 is not \
                     the manifest's)",
                    entry.path
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => c
                .problems
                .push(format!("{}: missing from the pack", entry.path)),
            Err(e) => return Err(io_at(&path)(e)),
        }
    }
    for rel in walk(pack)? {
        if !listed.contains(rel.as_str()) {
            c.problems
                .push(format!("{rel}: in the pack but not in the manifest"));
        }
    }
    for rel in manifest
        .logs
        .iter()
        .chain(&manifest.witness)
        .chain(&manifest.public_key)
    {
        if !listed.contains(rel.as_str()) {
            c.problems.push(format!(
                "{rel}: named by the manifest but not listed with a SHA-256"
            ));
        }
    }
    c.notes.push(format!(
        "{} listed in the manifest",
        count_files(manifest.files.len())
    ));

    // The chain, with the pack's own key and witness.
    let key = match &manifest.public_key {
        Some(rel) => {
            let path = path_of(rel)?;
            let text = fs::read_to_string(&path).map_err(io_at(&path))?;
            match chain::parse_hex32(text.trim().as_bytes()) {
                Some(key) => Some(key),
                None => {
                    c.problems
                        .push(format!("{rel}: not a public key (64 hex digits)"));
                    None
                }
            }
        }
        None => None,
    };
    let logs = manifest
        .logs
        .iter()
        .map(|rel| path_of(rel))
        .collect::<Result<Vec<_>, _>>()?;
    let missing_log = logs.iter().any(|p| !p.exists());
    if logs.is_empty() {
        c.problems.push(format!("{MANIFEST}: no audit file"));
    } else if !missing_log {
        let witness = manifest.witness.as_deref().map(path_of).transpose()?;
        let outcome = verify::verify(
            &logs,
            &verify::Options {
                key,
                witness: witness.filter(|w| w.exists()),
                kept_go_on: true,
                ..verify::Options::default()
            },
        );
        match outcome {
            Ok(outcome) => {
                let (text, _, intact) = verdict(&outcome, pack);
                if intact {
                    c.notes.push(format!("the log: {text}"));
                } else {
                    c.problems.push(format!("the log: {text}"));
                }
            }
            Err(e) => c.problems.push(format!("the log cannot be read: {e}")),
        }
    }

    // Every document the period's lines name.
    let parse = |t: &str| {
        OffsetDateTime::parse(t, &Rfc3339)
            .map_err(|e| PackError::Usage(format!("{MANIFEST}: bad period time {t:?}: {e}")))
    };
    let (from, to) = (parse(&manifest.from)?, parse(&manifest.to)?);
    let present = logs
        .iter()
        .filter(|p| p.exists())
        .cloned()
        .collect::<Vec<_>>();
    let found = scan(&present, from, to)?;
    for (index, line, what) in &found.bad {
        c.problems.push(format!(
            "{} line {line}: {what}",
            rel_name(&present[*index], pack)
        ));
    }
    let mut held = 0;
    let mut explained = 0;
    for (digest, (field, index, line)) in &found.named {
        let place = format!("{} line {line}", rel_name(&present[*index], pack));
        let Some(d) = Digest::parse(digest) else {
            c.problems
                .push(format!("{place}: {field} {digest:?} is not a SHA-256"));
            continue;
        };
        let rel = format!("documents/{d}.txt");
        match fs::read(pack.join(&rel)) {
            Ok(text) if Digest::of(&text) == d => held += 1,
            Ok(_) => c.problems.push(format!(
                "{rel}: its text does not hash to its name ({field} named by {place})"
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match found.removed.get(digest) {
                Some((seq, reason, _)) => {
                    explained += 1;
                    c.notes.push(format!(
                        "{field} {d} (named by {place}) is not in the pack: it left the \
                         archive, evidence_removed at seq {seq}: {}",
                        report::printable_text(reason)
                    ));
                }
                None => c.problems.push(format!(
                    "{field} {d} (named by {place}) is not in the pack, and no \
                     evidence_removed line says why"
                )),
            },
            Err(e) => return Err(io_at(&pack.join(&rel))(e)),
        }
    }
    c.notes.push(format!(
        "{held} of {} documents named by the period's lines present and matching their \
         SHA-256{}",
        found.named.len(),
        if explained > 0 {
            format!(", {explained} gone with an evidence_removed line")
        } else {
            String::new()
        }
    ));
    Ok(c)
}

fn rel_name(path: &Path, pack: &Path) -> String {
    path.strip_prefix(pack)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::audit::chain::{Head, seal};
    use crate::ops::audit::checkpoint::{self, Reason};

    /// A log: its start checkpoint, then `bodies` chained after it.
    fn log(path: &Path, bodies: &[String]) {
        let (first, mut head) =
            checkpoint::line(&Head::GENESIS, Reason::Start, true, Some("empty"), None)
                .expect("checkpoint");
        let mut text = first;
        for body in bodies {
            let seq = head.seq + 1;
            let mut line = format!("{{\"seq\":{seq},{}", &body[1..]).into_bytes();
            head.chain = seal(&mut line, 0, &head.chain);
            head.seq = seq;
            text.extend_from_slice(&line);
        }
        std::fs::write(path, text).expect("write");
    }

    fn request(sha: &str) -> String {
        format!(
            "{{\"time\":\"2026-01-01T10:00:00.000Z\",\"url\":\"http://a/private\",\
             \"decision\":\"disallowed\",\"robots_sha256\":\"{sha}\"}}"
        )
    }

    fn pack_of(dir: &Path, bodies: &[String]) -> (PathBuf, Exported) {
        let path = dir.join("audit.jsonl");
        log(&path, bodies);
        let out = dir.join("pack");
        let made = export(&Export {
            from: report::parse_time("2026-01-01", false).expect("time"),
            to: report::parse_time("2026-01-01", true).expect("time"),
            files: vec![path],
            archive: dir.join("no-archive"),
            key: None,
            witness: None,
            out: out.clone(),
        })
        .expect("export");
        (out, made)
    }

    #[test]
    fn a_document_gone_with_an_evidence_removed_line_is_named_with_its_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sha = "ab".repeat(32);
        let removed = format!(
            "{{\"type\":\"evidence_removed\",\"time\":\"2026-02-01T00:00:00.000Z\",\
             \"robots_sha256\":\"{sha}\",\"bytes\":10,\"reason\":\"archive_max reached\"}}"
        );
        let (out, made) = pack_of(dir.path(), &[request(&sha), removed]);
        assert!(made.intact, "{}", made.verify);
        assert_eq!(made.gone.len(), 1);
        assert_eq!(made.gone[0].removed_at_seq, Some(3));
        assert_eq!(made.gone[0].reason, "archive_max reached");
        let checked = check(&out).expect("check");
        assert!(checked.problems.is_empty(), "{:?}", checked.problems);
        assert!(
            checked.notes.iter().any(|n| n.contains(&format!(
                "robots_sha256 {sha} (named by logs/audit.jsonl line 2) is not in the pack: \
                 it left the archive, evidence_removed at seq 3: archive_max reached"
            ))),
            "{:?}",
            checked.notes
        );
    }

    #[test]
    fn a_document_gone_without_a_word_is_a_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sha = "cd".repeat(32);
        let (out, made) = pack_of(dir.path(), &[request(&sha)]);
        assert_eq!(made.gone.len(), 1);
        assert_eq!(made.gone[0].removed_at_seq, None);
        let checked = check(&out).expect("check");
        assert_eq!(
            checked.problems,
            [format!(
                "robots_sha256 {sha} (named by logs/audit.jsonl line 2) is not in the pack, \
                 and no evidence_removed line says why"
            )]
        );
    }

    #[test]
    fn the_opt_out_documents_a_verdict_rests_on_are_named_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sha = "ef".repeat(32);
        let refused = format!(
            "{{\"time\":\"2026-01-01T10:00:00.000Z\",\"url\":\"http://a/books/1\",\
             \"decision\":\"usage_disallowed\",\"usage_evidence\":[\"train-ai=tdmrep.json: \
             http://a/.well-known/tdmrep.json sha256={sha} rule 1 (location \\\"/books/\\\", \
             tdm-reservation 1)\",\"search=x-robots-tag: noindex\"]}}"
        );
        let (out, made) = pack_of(dir.path(), &[refused]);
        assert!(made.intact, "{}", made.verify);
        assert_eq!(made.gone.len(), 1, "the tdmrep.json the line names");
        let checked = check(&out).expect("check");
        assert_eq!(
            checked.problems,
            [format!(
                "usage_evidence {sha} (named by logs/audit.jsonl line 2) is not in the pack, \
                 and no evidence_removed line says why"
            )]
        );
    }

    #[test]
    fn an_evidence_digest_is_64_hex_digits_after_sha256() {
        let sha = "0a".repeat(32);
        assert_eq!(
            evidence_digest(&format!("p: d sha256={sha} rule 1")),
            Some(sha.as_str())
        );
        assert_eq!(evidence_digest("p: d sha256=abc rule"), None);
        assert_eq!(
            evidence_digest(&format!("p: d sha256={}", "zz".repeat(32))),
            None
        );
        assert_eq!(evidence_digest("robots.txt line 3"), None);
    }
}
