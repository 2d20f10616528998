//! `robots-proxy audit verify`: reads audit files in rotation order
//! (oldest first, plain or gzip) and checks that every line links to the
//! one before it ([`super::chain`]), that `seq` counts up by one across
//! files, that checkpoint signatures verify with the given public key, and
//! that every checkpoint copied elsewhere earlier (`--checkpoints`) is
//! still in the log with the same chain. It streams: one line in memory at
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
}

/// The outcome of a verification that could read everything.
#[derive(Debug)]
pub(crate) enum Outcome {
    Intact(Summary),
    /// The first line found wrong.
    Broken(Finding),
}

/// An intact log, summed up.
#[derive(Debug, Default)]
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
    /// Whether `--checkpoints` was given.
    kept_given: bool,
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
        if self.kept_given && self.kept_matched == 0 {
            notes.push("no kept checkpoint falls within these files".into());
        }
        for note in notes {
            write!(f, "; {note}")?;
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
#[derive(Debug)]
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

/// Verifies `files`, given oldest first.
pub(crate) fn verify(files: &[PathBuf], opts: &Options) -> Result<Outcome, VerifyError> {
    match run(files, opts) {
        Ok(summary) => Ok(Outcome::Intact(summary)),
        Err(Stop::Broken(finding)) => Ok(Outcome::Broken(finding)),
        Err(Stop::Error(e)) => Err(e),
    }
}

fn run(files: &[PathBuf], opts: &Options) -> Result<Summary, Stop> {
    let kept = match &opts.kept {
        Some(path) => load_kept(path, opts.key.as_ref())?,
        None => BTreeMap::new(),
    };
    let mut v = Verifier {
        key: opts.key,
        kept,
        kept_path: opts.kept.clone().unwrap_or_default(),
        prev: None,
        prev_at: None,
        signed_seen: false,
        summary: Summary {
            kept_given: opts.kept.is_some(),
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
            v.line(files, index, number, line)
                .map_err(|reason| broken(path, number, reason))?;
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
    /// Its line in the kept file.
    line: u64,
}

struct Verifier {
    key: Option<[u8; 32]>,
    kept: BTreeMap<u64, Kept>,
    kept_path: PathBuf,
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
        let fields: ChainFields<'_> =
            serde_json::from_slice(line.bytes).map_err(|e| format!("not a JSON object: {e}"))?;
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
                // The first line given: it links to the head it names, to
                // zeros if it is the first of all, else it is the anchor.
                head.or((seq == 1).then_some(GENESIS))
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
        if let Some(kept) = self.kept.get(&seq) {
            if kept.chain != sealed.chain {
                return Err(format!(
                    "seq {seq} has another chain than the copy kept in {} line {}: \
                     the log was rewritten after that copy was taken",
                    self.kept_path.display(),
                    kept.line
                ));
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
        if let Some((seq, kept)) = self.kept.range(last.seq + 1..).next() {
            return Err(broken(
                &files[file],
                number + 1,
                format!(
                    "the log ends at seq {} (line {number}), but the copy kept in {} line {} \
                     has seq {seq}: lines were cut from the end (or a newer file is missing)",
                    last.seq,
                    self.kept_path.display(),
                    kept.line
                ),
            ));
        }
        if let Some(first) = self.summary.first_seq {
            self.summary.kept_before = self.kept.range(..first).count() as u64;
        }
        Ok(self.summary)
    }
}

/// Reads the kept copies: each a chained line; a kept checkpoint must
/// match its own head and, with a key, its signature.
fn load_kept(path: &Path, key: Option<&[u8; 32]>) -> Result<BTreeMap<u64, Kept>, Stop> {
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
    let mut kept: BTreeMap<u64, Kept> = BTreeMap::new();
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
        let entry = Kept {
            chain: sealed.chain,
            line: number,
        };
        if let Some(before) = kept.get(&seq)
            && before.chain != entry.chain
        {
            let Kept { line: first, .. } = before;
            return Err(broken(
                path,
                number,
                format!("seq {seq} was kept before (line {first}) with another chain"),
            ));
        }
        kept.entry(seq).or_insert(entry);
    }
    Ok(kept)
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
        };
        assert!(matches!(check(&lines, &right), Outcome::Intact(_)));
        let wrong = Options {
            key: Some(other.public()),
            kept: None,
        };
        let (line, why) = reason(check(&lines, &wrong));
        assert_eq!(line, 1);
        assert!(why.contains("signature does not verify"), "{why}");
        let unsigned = log(3, None);
        let (_, why) = reason(check(&unsigned, &right));
        assert!(why.contains("no checkpoint is signed"), "{why}");
    }
}
