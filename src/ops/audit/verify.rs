//! `robots-proxy audit verify`: reads audit files in rotation order
//! (oldest first, plain or gzip) and checks that every line links to the
//! one before it ([`super::chain`]), that `seq` counts up by one across
//! files, that checkpoint signatures verify with the given public key, and
//! that every checkpoint copied elsewhere earlier (`--checkpoints`) is
//! still in the log, byte for byte. The chain is checked from a trusted
//! anchor only: seq 1's start checkpoint, or a line matching a kept copy
//! (`--from-seq` skips the lines before one). It streams: one line in memory at
//! a time, plus the kept checkpoints (about 50 bytes each).

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::chain::{ChainFields, GENESIS, Head, Sealed, parse_hex32};
use super::input::{LineRef, Lines};
use super::key::verifies;

/// What to check the files against.
#[derive(Debug, Default)]
pub(crate) struct Options {
    /// The Ed25519 public key checkpoints are signed with.
    pub(crate) key: Option<[u8; 32]>,
    /// Checkpoint (or any chained) lines copied out of the log earlier.
    pub(crate) kept: Option<PathBuf>,
    /// The witness file (`audit.witness_file`): checkpoint lines the proxy
    /// copied out as it wrote them, checked as kept copies are.
    pub(crate) witness: Option<PathBuf>,
    /// Check from this `seq` on, anchored at its kept copy: lines before
    /// it are skipped (a log whose head was rotated away).
    pub(crate) from_seq: Option<u64>,
    /// The files are a period's (an evidence pack): the kept copies may
    /// go on past their end, provided the first kept line after it is the
    /// checkpoint that links to their last line.
    pub(crate) kept_go_on: bool,
}

/// The outcome of a verification that could read everything.
#[derive(Debug)]
pub(crate) enum Outcome {
    Intact(Summary),
    /// The first line found wrong.
    Broken(Finding),
}

/// An intact log, summed up.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct Summary {
    pub(crate) files: usize,
    pub(crate) lines: u64,
    pub(crate) first_seq: Option<u64>,
    pub(crate) last_seq: Option<u64>,
    pub(crate) checkpoints: u64,
    /// Checkpoint signatures checked with the key.
    pub(crate) signatures_checked: u64,
    /// Signatures present, not checked (no key given).
    pub(crate) signatures_unchecked: u64,
    /// Checkpoints without a signature.
    pub(crate) unsigned: u64,
    /// Lines before the chain began (a log from before chaining).
    pub(crate) unchained: u64,
    /// Kept checkpoints found in the log with the same chain.
    pub(crate) kept_matched: u64,
    /// Kept checkpoints older than the first file given.
    pub(crate) kept_before: u64,
    /// Lines before `--from-seq`, skipped.
    pub(crate) skipped: u64,
    /// The `seq` the chain was checked from, when not 1: a kept copy.
    pub(crate) anchored_at: Option<u64>,
    /// Whether `--checkpoints` was given.
    #[serde(skip)]
    kept_given: bool,
    /// The kept checkpoint after the files' last line that links to it
    /// ([`Options::kept_go_on`]).
    pub(crate) continued_at: Option<u64>,
    /// `evidence_removed` lines read: archived robots.txt texts gone.
    pub(crate) removed_total: u64,
    /// The first [`REMOVED_LISTED`] of them: seq, digest, reason.
    pub(crate) removed: Vec<(u64, String, String)>,
}

/// `evidence_removed` lines a summary lists.
const REMOVED_LISTED: usize = 1000;

/// The fields of an `evidence_removed` line.
#[derive(serde::Deserialize)]
struct RemovedFields {
    #[serde(default)]
    robots_sha256: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "intact: {}, {}",
            count(self.files as u64, "file"),
            count(self.lines, "line")
        )?;
        if let (Some(first), Some(last)) = (self.first_seq, self.last_seq) {
            write!(f, " (seq {first} to {last})")?;
        }
        write!(
            f,
            ", {}, {} checked",
            count(self.checkpoints, "checkpoint"),
            count(self.signatures_checked, "signature")
        )?;
        if self.kept_given {
            write!(
                f,
                ", {} matched",
                count(self.kept_matched, "kept checkpoint")
            )?;
        }
        let mut notes = Vec::new();
        if let Some(seq) = self.anchored_at {
            notes.push(format!("checked from the kept copy of seq {seq}"));
        }
        if self.skipped > 0 {
            notes.push(format!(
                "{} before seq {} skipped (--from-seq), not verified",
                count(self.skipped, "line"),
                self.anchored_at.unwrap_or(1)
            ));
        }
        if self.signatures_unchecked > 0 {
            notes.push(format!(
                "{} not checked (no --key)",
                count(self.signatures_unchecked, "signature")
            ));
        }
        if self.unsigned > 0 {
            notes.push(format!("{} unsigned", count(self.unsigned, "checkpoint")));
        }
        if self.unchained > 0 {
            notes.push(format!(
                "{} before the chain began, not verified",
                count(self.unchained, "line")
            ));
        }
        if self.kept_before > 0 {
            notes.push(format!(
                "{} older than the first file",
                count(self.kept_before, "kept checkpoint")
            ));
        }
        if let Some(seq) = self.continued_at {
            notes.push(format!(
                "the files end where the kept checkpoint of seq {seq} goes on"
            ));
        }
        if self.kept_given && self.kept_matched == 0 {
            notes.push("no kept checkpoint falls within these files".into());
        }
        if self.removed_total > 0 {
            notes.push(format!(
                "{} gone from the archive (evidence_removed lines, listed below)",
                count(self.removed_total, "robots.txt text")
            ));
        }
        for note in notes {
            write!(f, "; {note}")?;
        }
        for (seq, sha, reason) in &self.removed {
            write!(
                f,
                "\nevidence removed at seq {seq}: robots_sha256 {}: {}",
                super::report::printable_text(sha),
                super::report::printable_text(reason)
            )?;
        }
        if self.removed_total > self.removed.len() as u64 {
            write!(
                f,
                "\nand {} more evidence_removed lines",
                self.removed_total - self.removed.len() as u64
            )?;
        }
        Ok(())
    }
}

/// `n` and `what`, plural unless `n` is 1.
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The first bad line: its file, its number (from 1) and why.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Finding {
    pub(crate) file: PathBuf,
    pub(crate) line: u64,
    pub(crate) reason: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} line {}: {}",
            self.file.display(),
            self.line,
            self.reason
        )
    }
}

/// A file that could not be read, or a kept-checkpoints file that is
/// not made of audit lines: not a verdict on the log.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} line {line}: {what}")]
    Input {
        path: PathBuf,
        line: u64,
        what: String,
    },
}

/// Why verification stopped early.
enum Stop {
    Broken(Finding),
    Error(VerifyError),
}

impl From<VerifyError> for Stop {
    fn from(e: VerifyError) -> Stop {
        Stop::Error(e)
    }
}

/// Verifies `files`, in the order of their first `seq` (the order given
/// does not matter).
pub(crate) fn verify(files: &[PathBuf], opts: &Options) -> Result<Outcome, VerifyError> {
    let mut files = files.to_vec();
    super::files::sort_by_first_seq(&mut files)
        .map_err(|(path, source)| VerifyError::Io { path, source })?;
    match run(&files, opts) {
        Ok(summary) => Ok(Outcome::Intact(summary)),
        Err(Stop::Broken(finding)) => Ok(Outcome::Broken(finding)),
        Err(Stop::Error(e)) => Err(e),
    }
}

fn run(files: &[PathBuf], opts: &Options) -> Result<Summary, Stop> {
    let kept_paths: Vec<PathBuf> = opts.kept.iter().chain(&opts.witness).cloned().collect();
    let mut kept = BTreeMap::new();
    for source in 0..kept_paths.len() {
        load_kept(&mut kept, source, &kept_paths, opts.key.as_ref())?;
    }
    let mut v = Verifier {
        key: opts.key,
        kept_go_on: opts.kept_go_on,
        from_seq: opts.from_seq,
        untrusted: None,
        blame: None,
        kept,
        kept_paths,
        prev: None,
        prev_at: None,
        signed_seen: false,
        summary: Summary {
            kept_given: opts.kept.is_some() || opts.witness.is_some(),
            ..Summary::default()
        },
    };
    for (index, path) in files.iter().enumerate() {
        let io = |source| VerifyError::Io {
            path: path.clone(),
            source,
        };
        let mut lines = Lines::open(path).map_err(io)?;
        while let Some(line) = lines.next_line().map_err(io)? {
            let number = line.number;
            if let Err(reason) = v.line(files, index, number, line) {
                // A finding about earlier lines names the first of them.
                return Err(match v.blame.take() {
                    Some((file, line)) => broken(&files[file], line, reason),
                    None => broken(path, number, reason),
                });
            }
        }
        v.summary.files += 1;
    }
    v.finish(files)
}

fn broken(path: &Path, line: u64, reason: String) -> Stop {
    Stop::Broken(Finding {
        file: path.to_owned(),
        line,
        reason,
    })
}

/// A line copied out of the log earlier.
struct Kept {
    chain: [u8; 32],
    /// SHA-256 of the whole line: a copy is a match only byte for byte.
    digest: [u8; 32],
    /// A kept checkpoint's head: the chain of the line before it.
    head: Option<[u8; 32]>,
    /// Which file it was kept in (`--checkpoints`, `--witness`).
    source: usize,
    /// Its line in the kept file.
    line: u64,
}

/// Chained lines read before any trusted anchor: they cannot be checked.
struct Untrusted {
    lines: u64,
    first: (usize, u64, u64),
    last: (usize, u64, u64),
}

impl Untrusted {
    /// "the first N lines cannot be checked (seq A to B: F line X to G line Y)".
    fn describe(&self, files: &[PathBuf]) -> String {
        let (f0, l0, s0) = self.first;
        let (f1, l1, s1) = self.last;
        let place = if (f0, l0) == (f1, l1) {
            format!("{} line {l0}", files[f0].display())
        } else if f0 == f1 {
            format!("{} lines {l0} to {l1}", files[f0].display())
        } else {
            format!(
                "{} line {l0} to {} line {l1}",
                files[f0].display(),
                files[f1].display()
            )
        };
        let seqs = if s0 == s1 {
            format!("seq {s0}")
        } else {
            format!("seq {s0} to {s1}")
        };
        let what = if self.lines == 1 {
            "the first line cannot be checked".to_owned()
        } else {
            format!("the first {} lines cannot be checked", self.lines)
        };
        format!("no trusted anchor: {what} ({seqs}: {place})")
    }
}

/// Why the first lines given are no anchor.
const NO_ANCHOR: &str = "the chain can be checked only from seq 1's start checkpoint \
     (chain_start) or from a copy kept elsewhere (--checkpoints) that matches \
     the line byte for byte";

struct Verifier {
    key: Option<[u8; 32]>,
    kept_go_on: bool,
    from_seq: Option<u64>,
    /// Lines read before the anchor, when there is none yet.
    untrusted: Option<Untrusted>,
    /// Where a finding about earlier lines points: file index and line.
    blame: Option<(usize, u64)>,
    kept: BTreeMap<u64, Kept>,
    /// The files the kept copies come from.
    kept_paths: Vec<PathBuf>,
    /// The last chained line.
    prev: Option<Head>,
    /// Where it is: file index and line number.
    prev_at: Option<(usize, u64)>,
    /// A signed checkpoint was seen: every later one must be signed.
    signed_seen: bool,
    summary: Summary,
}

impl Verifier {
    /// Checks one line; the error is why it is wrong.
    fn line(
        &mut self,
        files: &[PathBuf],
        file: usize,
        number: u64,
        line: LineRef<'_>,
    ) -> Result<(), String> {
        if !line.complete {
            return Err("the last line has no newline: a write cut short \
                 (a crash, or the file is still being written)"
                .into());
        }
        if line.bytes.is_empty() {
            return Err("an empty line (the proxy writes none)".into());
        }
        let fields: ChainFields<'_> = match ChainFields::plain(line.bytes) {
            Some(fields) => fields,
            None => {
                serde_json::from_slice(line.bytes).map_err(|e| format!("not a JSON object: {e}"))?
            }
        };
        self.summary.lines += 1;
        if fields.chain.is_none() {
            if self.prev.is_none() {
                self.summary.unchained += 1;
                return Ok(());
            }
            return Err(
                "no chain field, though every line after the chain began has one: \
                 a line inserted (or its chain removed)"
                    .into(),
            );
        }
        let sealed = Sealed::split(line.bytes)
            .ok_or("the chain field is not the last one, written ,\"chain\":\"<64 hex>\"}")?;
        let seq = fields.seq.ok_or("a chain but no seq")?;
        let checkpoint = fields.is_checkpoint();
        let head = match (&fields.head, checkpoint) {
            (Some(h), true) => {
                Some(parse_hex32(h.as_bytes()).ok_or("a checkpoint whose head is not 64 hex")?)
            }
            (None, true) => return Err("a checkpoint without a head".into()),
            (_, false) => None,
        };
        if let Some(why) = &fields.chain_start
            && (seq != 1 || head != Some(GENESIS))
        {
            return Err(format!(
                "a checkpoint beginning a chain ({why}) must be seq 1 with a head of zeros"
            ));
        }
        let prev_chain = match self.prev {
            None => {
                if self.summary.unchained > 0 && fields.chain_start.is_none() {
                    return Err(format!(
                        "the {} before this one carry no chain, but no new chain \
                         begins here: chain fields removed?",
                        count(self.summary.unchained, "line")
                    ));
                }
                if self.from_seq.is_some_and(|from| seq < from) {
                    self.summary.skipped += 1;
                    return Ok(());
                }
                if !self.anchor(files, file, number, seq, &fields, line.bytes)? {
                    return Ok(());
                }
                // A start checkpoint links to zeros, a kept checkpoint to
                // the head it names; a kept record is taken as it is.
                head
            }
            Some(prev) => {
                if seq != prev.seq + 1 {
                    return Err(self.out_of_sequence(files, file, number, prev, seq, &fields));
                }
                if head.is_some_and(|h| h != prev.chain) {
                    return Err("the checkpoint's head is not the previous line's chain".into());
                }
                Some(prev.chain)
            }
        };
        if let Some(prev) = prev_chain
            && sealed.expected(&prev) != sealed.chain
        {
            return Err(
                "its chain does not match its content and the previous line's chain: \
                 this line was changed (or the line before it, with its chain recomputed)"
                    .into(),
            );
        }
        if checkpoint {
            self.checkpoint(&fields, &sealed)?;
        }
        if fields.kind.as_deref() == Some("evidence_removed") {
            self.summary.removed_total += 1;
            if self.summary.removed.len() < REMOVED_LISTED {
                let r: RemovedFields = serde_json::from_slice(line.bytes)
                    .map_err(|e| format!("an evidence_removed line that does not parse: {e}"))?;
                self.summary.removed.push((
                    seq,
                    r.robots_sha256.unwrap_or_else(|| "-".into()),
                    r.reason.unwrap_or_else(|| "-".into()),
                ));
            }
        }
        if let Some(kept) = self.kept.get(&seq) {
            if kept.chain != sealed.chain {
                return Err(format!(
                    "seq {seq} has another chain than the copy kept in {} line {}: \
                     the log was rewritten after that copy was taken",
                    self.kept_paths[kept.source].display(),
                    kept.line
                ));
            }
            if kept.digest != digest(line.bytes) {
                return Err(self.differs(seq, kept));
            }
            self.summary.kept_matched += 1;
        }
        self.summary.first_seq.get_or_insert(seq);
        self.summary.last_seq = Some(seq);
        self.prev = Some(Head {
            seq,
            chain: sealed.chain,
        });
        self.prev_at = Some((file, number));
        Ok(())
    }

    /// Takes the first chained line checked as the chain's anchor, or
    /// says why it cannot be: it must be seq 1's start checkpoint, or
    /// match a kept copy byte for byte. Lines before an anchor are counted
    /// and, once an anchor (or the end) is reached, named as unchecked.
    fn anchor(
        &mut self,
        files: &[PathBuf],
        file: usize,
        number: u64,
        seq: u64,
        fields: &ChainFields<'_>,
        bytes: &[u8],
    ) -> Result<bool, String> {
        let start = fields.chain_start.is_some() && seq == 1;
        let kept = match self.kept.get(&seq) {
            Some(k) if k.digest == digest(bytes) => true,
            Some(k) => return Err(self.differs(seq, k)),
            None => false,
        };
        if let Some(from) = self.from_seq {
            if seq > from {
                return Err(format!(
                    "--from-seq {from}: that line is not in these files (the first line \
                     from it on is seq {seq})"
                ));
            }
            if !start && !kept {
                return Err(format!(
                    "no trusted anchor at seq {from} (--from-seq): it matches no copy \
                     kept in --checkpoints byte for byte, so it cannot be checked"
                ));
            }
        }
        if start || kept {
            if let Some(untrusted) = self.untrusted.take() {
                let (file, line, _) = untrusted.first;
                self.blame = Some((file, line));
                return Err(format!(
                    "{}: {NO_ANCHOR}; the copy kept of seq {seq} is one: give \
                     --from-seq {seq} to verify from it on",
                    untrusted.describe(files)
                ));
            }
            if !start {
                self.summary.anchored_at = Some(seq);
            }
            return Ok(true);
        }
        let at = (file, number, seq);
        let untrusted = self.untrusted.get_or_insert(Untrusted {
            lines: 0,
            first: at,
            last: at,
        });
        untrusted.lines += 1;
        untrusted.last = at;
        Ok(false)
    }

    /// Why a line whose chain field is its kept copy's is still wrong.
    fn differs(&self, seq: u64, kept: &Kept) -> String {
        format!(
            "seq {seq} differs from the copy kept in {} line {}: the line was \
             rewritten after that copy was taken",
            self.kept_paths[kept.source].display(),
            kept.line
        )
    }

    /// Why `seq` cannot follow `prev`.
    fn out_of_sequence(
        &self,
        files: &[PathBuf],
        file: usize,
        number: u64,
        prev: Head,
        seq: u64,
        fields: &ChainFields<'_>,
    ) -> String {
        let p = prev.seq;
        if let Some(why) = &fields.chain_start {
            return format!(
                "a new chain begins here ({why}) after seq {p}: the lines before it cannot \
                 be linked to the lines after it; verify the files before this line and \
                 from it on separately"
            );
        }
        let prev_file = self.prev_at.map(|(f, _)| f).unwrap_or(file);
        let file_start = number == 1 && prev_file != file;
        match (seq > p, file_start) {
            (true, true) => format!(
                "seq {seq} begins this file, but {} ended at seq {p}: {} missing \
                 between them (a rotated file left out, or lines cut)",
                files[prev_file].display(),
                count(seq - p - 1, "line")
            ),
            (true, false) => format!(
                "seq {seq} follows seq {p}: {} missing here (deleted, or moved further down)",
                count(seq - p - 1, "line")
            ),
            (false, true) => format!(
                "seq {seq} begins this file, but {} ended at seq {p}: files out of \
                 rotation order, or a line inserted",
                files[prev_file].display()
            ),
            (false, false) => format!(
                "seq {seq} follows seq {p}: a line out of place (inserted, copied or moved)"
            ),
        }
    }

    /// Counts a checkpoint and checks its signature.
    fn checkpoint(&mut self, fields: &ChainFields<'_>, sealed: &Sealed<'_>) -> Result<(), String> {
        self.summary.checkpoints += 1;
        let Some((message, sig)) = sealed.signed() else {
            if fields.sig.is_some() {
                return Err("the sig field is not written just before the chain".into());
            }
            if self.key.is_some() && self.signed_seen {
                return Err("an unsigned checkpoint after signed ones: \
                     its signature was removed (or signing was turned off)"
                    .into());
            }
            self.summary.unsigned += 1;
            return Ok(());
        };
        self.signed_seen = true;
        match &self.key {
            Some(key) if verifies(key, &message, &sig) => self.summary.signatures_checked += 1,
            Some(_) => {
                return Err("the checkpoint's signature does not verify with the given key".into());
            }
            None => self.summary.signatures_unchecked += 1,
        }
        Ok(())
    }

    fn finish(mut self, files: &[PathBuf]) -> Result<Summary, Stop> {
        if let Some(untrusted) = self.untrusted.take() {
            let (file, line, _) = untrusted.first;
            return Err(broken(
                &files[file],
                line,
                format!(
                    "{}: {NO_ANCHOR}; none of these lines is one",
                    untrusted.describe(files)
                ),
            ));
        }
        if let (Some(from), None) = (self.from_seq, self.prev)
            && let Some(first) = files.first()
        {
            return Err(broken(
                first,
                1,
                format!("--from-seq {from}: no line from it on in these files"),
            ));
        }
        let (Some(last), Some((file, number))) = (self.prev, self.prev_at) else {
            if self.summary.unchained > 0
                && let Some(first) = files.first()
            {
                return Err(broken(
                    first,
                    1,
                    "no line carries a chain: a log written before chaining".into(),
                ));
            }
            return Ok(self.summary);
        };
        if self.key.is_some() && self.summary.signatures_checked == 0 {
            return Err(broken(
                &files[file],
                number,
                "a key was given, but no checkpoint is signed".into(),
            ));
        }
        if let Some(first) = self.summary.first_seq {
            self.summary.kept_before = self.kept.range(..first).count() as u64;
        }
        if let Some((seq, kept)) = self.kept.range(last.seq + 1..).next() {
            if self.kept_go_on && *seq == last.seq + 1 && kept.head == Some(last.chain) {
                self.summary.continued_at = Some(*seq);
                return Ok(self.summary);
            }
            return Err(broken(
                &files[file],
                number + 1,
                format!(
                    "the log ends at seq {} (line {number}), but the copy kept in {} line {} \
                     has seq {seq}: lines were cut from the end (or a newer file is missing)",
                    last.seq,
                    self.kept_paths[kept.source].display(),
                    kept.line
                ),
            ));
        }
        Ok(self.summary)
    }
}

/// SHA-256 of a whole line (without its newline).
fn digest(line: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, line).as_ref());
    out
}

/// Reads the kept copies of `paths[source]` into `kept`: each a chained
/// line; a kept checkpoint must match its own head and, with a key, its
/// signature.
fn load_kept(
    kept: &mut BTreeMap<u64, Kept>,
    source: usize,
    paths: &[PathBuf],
    key: Option<&[u8; 32]>,
) -> Result<(), Stop> {
    let path = &paths[source];
    let io = |source| VerifyError::Io {
        path: path.to_owned(),
        source,
    };
    let input = |line, what: &str| {
        Stop::Error(VerifyError::Input {
            path: path.to_owned(),
            line,
            what: what.to_owned(),
        })
    };
    let mut lines = Lines::open(path).map_err(io)?;
    while let Some(line) = lines.next_line().map_err(io)? {
        let number = line.number;
        if line.bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let not_audit = "not an audit line with seq and chain";
        let fields: ChainFields<'_> =
            serde_json::from_slice(line.bytes).map_err(|_| input(number, not_audit))?;
        let (Some(seq), Some(sealed)) = (fields.seq, Sealed::split(line.bytes)) else {
            return Err(input(number, not_audit));
        };
        if fields.is_checkpoint() {
            let head = fields
                .head
                .as_deref()
                .and_then(|h| parse_hex32(h.as_bytes()));
            if head.is_none_or(|h| sealed.expected(&h) != sealed.chain) {
                return Err(broken(
                    path,
                    number,
                    "this kept checkpoint's chain does not match its own content".into(),
                ));
            }
            if let (Some(key), Some((message, sig))) = (key, sealed.signed())
                && !verifies(key, &message, &sig)
            {
                return Err(broken(
                    path,
                    number,
                    "this kept checkpoint's signature does not verify with the given key".into(),
                ));
            }
        }
        let head = match fields.is_checkpoint() {
            true => fields
                .head
                .as_deref()
                .and_then(|h| parse_hex32(h.as_bytes())),
            false => None,
        };
        let entry = Kept {
            chain: sealed.chain,
            digest: digest(line.bytes),
            head,
            source,
            line: number,
        };
        if let Some(before) = kept.get(&seq)
            && (before.chain != entry.chain || before.digest != entry.digest)
        {
            return Err(broken(
                path,
                number,
                format!(
                    "seq {seq} was kept before ({} line {}) as another line",
                    paths[before.source].display(),
                    before.line
                ),
            ));
        }
        kept.entry(seq).or_insert(entry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::audit::chain::seal;
    use crate::ops::audit::checkpoint::{self, Reason};
    use crate::ops::audit::key::SigningKey;

    /// A log of `n` lines: a start checkpoint, then records.
    fn log(n: u64, key: Option<&SigningKey>) -> Vec<Vec<u8>> {
        let (first, mut head) =
            checkpoint::line(&Head::GENESIS, Reason::Start, true, Some("empty"), key)
                .expect("checkpoint");
        let mut lines = vec![first];
        for seq in 2..=n {
            let mut line = format!("{{\"seq\":{seq},\"url\":\"http://a/{seq}\"}}").into_bytes();
            head.chain = seal(&mut line, 0, &head.chain);
            head.seq = seq;
            lines.push(line);
        }
        lines
    }

    fn check(lines: &[Vec<u8>], opts: &Options) -> Outcome {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, lines.concat()).expect("write");
        verify(&[path], opts).expect("readable")
    }

    fn reason(outcome: Outcome) -> (u64, String) {
        match outcome {
            Outcome::Broken(f) => (f.line, f.reason),
            Outcome::Intact(s) => panic!("intact: {s}"),
        }
    }

    #[test]
    fn an_intact_log_is_summed_up() {
        match check(&log(5, None), &Options::default()) {
            Outcome::Intact(s) => {
                assert_eq!(
                    s.to_string(),
                    "intact: 1 file, 5 lines (seq 1 to 5), 1 checkpoint, 0 signatures checked; \
                     1 checkpoint unsigned"
                );
            }
            Outcome::Broken(f) => panic!("{f}"),
        }
    }

    #[test]
    fn edits_deletions_insertions_and_swaps_name_their_line() {
        let lines = log(6, None);
        let mut edited = lines.clone();
        edited[2] = String::from_utf8_lossy(&edited[2])
            .replace("http://a/3", "http://b/3")
            .into_bytes();
        let (line, why) = reason(check(&edited, &Options::default()));
        assert_eq!(line, 3);
        assert!(why.contains("this line was changed"), "{why}");

        let mut deleted = lines.clone();
        deleted.remove(3);
        let (line, why) = reason(check(&deleted, &Options::default()));
        assert_eq!(
            (line, why.as_str()),
            (
                4,
                "seq 5 follows seq 3: 1 line missing here (deleted, or moved further down)"
            )
        );

        let mut inserted = lines.clone();
        inserted.insert(4, lines[1].clone());
        let (line, why) = reason(check(&inserted, &Options::default()));
        assert_eq!(line, 5);
        assert!(why.contains("out of place"), "{why}");

        let mut swapped = lines.clone();
        swapped.swap(2, 3);
        let (line, why) = reason(check(&swapped, &Options::default()));
        assert_eq!(line, 3);
        assert!(why.starts_with("seq 4 follows seq 2"), "{why}");
    }

    #[test]
    fn a_torn_or_unchained_line_after_the_chain_is_named() {
        let mut lines = log(3, None);
        lines.push(b"{\"url\":\"http://forged/\"}\n".to_vec());
        let (line, why) = reason(check(&lines, &Options::default()));
        assert_eq!(line, 4);
        assert!(why.starts_with("no chain field"), "{why}");
        let mut lines = log(3, None);
        let last = lines.len() - 1;
        lines[last].pop();
        let (line, why) = reason(check(&lines, &Options::default()));
        assert_eq!(line, 3);
        assert!(why.contains("no newline"), "{why}");
    }

    #[test]
    fn a_wrong_key_or_a_stripped_signature_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (key, _) = SigningKey::load_or_create(&dir.path().join("k.pem")).expect("key");
        let (other, _) = SigningKey::load_or_create(&dir.path().join("o.pem")).expect("key");
        let lines = log(3, Some(&key));
        let right = Options {
            key: Some(key.public()),
            kept: None,
            ..Options::default()
        };
        assert!(matches!(check(&lines, &right), Outcome::Intact(_)));
        let wrong = Options {
            key: Some(other.public()),
            kept: None,
            ..Options::default()
        };
        let (line, why) = reason(check(&lines, &wrong));
        assert_eq!(line, 1);
        assert!(why.contains("signature does not verify"), "{why}");
        let unsigned = log(3, None);
        let (_, why) = reason(check(&unsigned, &right));
        assert!(why.contains("no checkpoint is signed"), "{why}");
    }

    /// Verifies `lines` with copies of `kept` (lines of the log) kept
    /// elsewhere, from `from_seq`.
    fn check_kept(lines: &[Vec<u8>], kept: &[Vec<u8>], from_seq: Option<u64>) -> Outcome {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kept.jsonl");
        std::fs::write(&path, kept.concat()).expect("write");
        check(
            lines,
            &Options {
                kept: Some(path),
                from_seq,
                ..Options::default()
            },
        )
    }

    /// Line `i` with `from` replaced by `to`, its chain field kept.
    fn forged(lines: &[Vec<u8>], i: usize, from: &str, to: &str) -> Vec<u8> {
        String::from_utf8_lossy(&lines[i])
            .replace(from, to)
            .into_bytes()
    }

    #[test]
    fn a_forged_first_record_without_its_start_checkpoint_has_no_anchor() {
        let lines = log(6, None);
        let mut cut = lines[1..].to_vec();
        cut[0] = forged(&cut, 0, "http://a/2", "http://b/2");
        let (line, why) = reason(check(&cut, &Options::default()));
        assert_eq!(line, 1);
        assert!(
            why.starts_with("no trusted anchor: the first 5 lines cannot be checked (seq 2 to 6: "),
            "{why}"
        );
        assert!(why.contains("audit.jsonl lines 1 to 5)"), "{why}");
        // The original copy of that very line, kept: its chain field is
        // the same, the line is not.
        let (line, why) = reason(check_kept(&cut, &[lines[1].clone()], None));
        assert_eq!(line, 1);
        assert!(
            why.starts_with("seq 2 differs from the copy kept in ") && why.contains(" line 1: "),
            "{why}"
        );
        let (_, why) = reason(check_kept(&cut, &[lines[1].clone()], Some(2)));
        assert!(why.starts_with("seq 2 differs from the copy kept"), "{why}");
        // Unforged, the kept copy is the anchor.
        match check_kept(&lines[1..], &[lines[1].clone()], None) {
            Outcome::Intact(s) => assert_eq!(
                s.to_string(),
                "intact: 1 file, 5 lines (seq 2 to 6), 0 checkpoints, 0 signatures checked, \
                 1 kept checkpoint matched; checked from the kept copy of seq 2"
            ),
            Outcome::Broken(f) => panic!("{f}"),
        }
    }

    #[test]
    fn deleted_first_lines_are_named_and_from_seq_checks_from_a_kept_copy() {
        let lines = log(8, None);
        let cut = lines[2..].to_vec();
        let (line, why) = reason(check(&cut, &Options::default()));
        assert_eq!(line, 1);
        assert!(
            why.starts_with("no trusted anchor: the first 6 lines cannot be checked (seq 3 to 8"),
            "{why}"
        );
        assert!(why.ends_with("none of these lines is one"), "{why}");
        // A kept copy further on: the lines before it are named.
        let (line, why) = reason(check_kept(&cut, &[lines[4].clone()], None));
        assert_eq!(line, 1);
        assert!(
            why.starts_with("no trusted anchor: the first 2 lines cannot be checked (seq 3 to 4: ")
                && why.ends_with("give --from-seq 5 to verify from it on"),
            "{why}"
        );
        match check_kept(&cut, &[lines[4].clone()], Some(5)) {
            Outcome::Intact(s) => {
                let s = s.to_string();
                assert!(s.starts_with("intact: 1 file, 6 lines (seq 5 to 8)"), "{s}");
                assert!(
                    s.ends_with(
                        "checked from the kept copy of seq 5; \
                         2 lines before seq 5 skipped (--from-seq), not verified"
                    ),
                    "{s}"
                );
            }
            Outcome::Broken(f) => panic!("{f}"),
        }
        // An edit after the anchor is still found.
        let mut edited = cut.clone();
        edited[4] = forged(&edited, 4, "http://a/7", "http://b/7");
        let (line, why) = reason(check_kept(&edited, &[lines[4].clone()], Some(5)));
        assert_eq!(line, 5);
        assert!(why.contains("this line was changed"), "{why}");
        // --from-seq at a line with no kept copy, or not in the files.
        let (_, why) = reason(check_kept(&cut, &[lines[4].clone()], Some(6)));
        assert!(
            why.starts_with("no trusted anchor at seq 6 (--from-seq)"),
            "{why}"
        );
        let (_, why) = reason(check_kept(&cut, &[lines[4].clone()], Some(9)));
        assert_eq!(why, "--from-seq 9: no line from it on in these files");
    }
}
