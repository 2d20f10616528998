//! Reading audit files on a thread of their own for `audit report`: one
//! thread reads (and inflates) the files, cuts them into blocks of whole
//! lines and parses each request line into the places of its fields in
//! the line, while the caller folds the lines in the order read, so the
//! report is the same line for line as read on one thread. A line the
//! places cannot tell (not a request line, escapes in a field, usage
//! evidence, not JSON) is parsed again by the caller.
//! At most [`IN_FLIGHT`] blocks wait between the two: memory stays bounded
//! whatever the size of the files.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use std::borrow::Cow;

use super::Entry;
use crate::ops::audit::input::Lines;

/// Bytes of lines per block (a longer line makes a block of its own).
const BLOCK: usize = 1 << 20;

/// Blocks read and not yet folded.
const IN_FLIGHT: usize = 4;

/// Whole lines of one file, without their newlines.
pub(super) struct Block {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`.
    ends: Vec<usize>,
    /// Each line's fields, if it is a plain request line.
    fields: Vec<Option<Fields>>,
}

/// Where a field's text is in its line.
type Span = Option<(usize, usize)>;

/// The fields a report reads of a request line with no escape in them.
#[derive(Clone, Copy)]
pub(super) struct Fields {
    time: Span,
    client: Span,
    user: Span,
    url: Span,
    agent: Span,
    decision: Span,
    rule: Span,
    rule_line: Option<u64>,
    robots_sha256: Span,
    node: Span,
}

impl Fields {
    /// The fields of `line`, if a request line with no escape in them.
    fn of(line: &[u8]) -> Option<Fields> {
        let e = serde_json::from_slice::<Entry<'_>>(line).ok()?;
        if e.kind.is_some() || !e.usage_evidence.is_empty() {
            return None;
        }
        let base = line.as_ptr() as usize;
        let span = |f: &Option<Cow<'_, str>>| -> Option<Span> {
            match f {
                None => Some(None),
                Some(Cow::Borrowed(s)) => {
                    let from = (s.as_ptr() as usize).checked_sub(base)?;
                    Some(Some((from, from + s.len())))
                }
                Some(Cow::Owned(_)) => None,
            }
        };
        Some(Fields {
            time: span(&e.time)?,
            client: span(&e.client)?,
            user: span(&e.user)?,
            url: span(&e.url)?,
            agent: span(&e.agent)?,
            decision: span(&e.decision)?,
            rule: span(&e.rule)?,
            rule_line: e.rule_line,
            robots_sha256: span(&e.robots_sha256)?,
            node: span(&e.node)?,
        })
    }

    /// The entry of `line`, whose fields these are.
    pub(super) fn entry<'a>(&self, line: &'a [u8]) -> Option<Entry<'a>> {
        let text = |span: Span| -> Option<Option<Cow<'a, str>>> {
            match span {
                None => Some(None),
                Some((from, to)) => {
                    let s = std::str::from_utf8(line.get(from..to)?).ok()?;
                    Some(Some(Cow::Borrowed(s)))
                }
            }
        };
        Some(Entry {
            kind: None,
            time: text(self.time)?,
            client: text(self.client)?,
            user: text(self.user)?,
            url: text(self.url)?,
            agent: text(self.agent)?,
            decision: text(self.decision)?,
            rule: text(self.rule)?,
            rule_line: self.rule_line,
            robots_sha256: text(self.robots_sha256)?,
            node: text(self.node)?,
            action: None,
            by: None,
            target: None,
            scope: None,
            count: None,
            changed: None,
            outcome: None,
            reason: None,
            usage_evidence: Vec::new(),
        })
    }
}

impl Block {
    fn new() -> Block {
        Block {
            bytes: Vec::with_capacity(BLOCK),
            ends: Vec::with_capacity(BLOCK / 256),
            fields: Vec::with_capacity(BLOCK / 256),
        }
    }

    /// The lines, in order, each with its fields if a plain request line.
    pub(super) fn lines(&self) -> impl Iterator<Item = (&[u8], Option<Fields>)> {
        let mut start = 0;
        self.ends
            .iter()
            .zip(&self.fields)
            .map(move |(&end, fields)| {
                let line = &self.bytes[start..end];
                start = end;
                (line, *fields)
            })
    }
}

/// What the reading thread hands over.
pub(super) enum Read {
    Block(Block),
    /// The end of a file.
    FileDone,
    /// A file that could not be read; nothing follows.
    Failed(PathBuf, io::Error),
}

/// Reads `files` on a second thread, calling `each` with every block and
/// file end in order on this one; stops at the first file that cannot be
/// read.
pub(super) fn read(files: &[PathBuf], mut each: impl FnMut(Read)) {
    let (tx, rx) = mpsc::sync_channel::<Read>(IN_FLIGHT);
    std::thread::scope(|s| {
        s.spawn(move || {
            for path in files {
                if let Err(e) = read_file(path, &tx) {
                    // The receiver only goes away with this scope.
                    let _ = tx.send(Read::Failed(path.clone(), e));
                    return;
                }
                if tx.send(Read::FileDone).is_err() {
                    return;
                }
            }
        });
        for got in rx {
            each(got);
        }
    });
}

/// Sends the lines of `path` in blocks.
fn read_file(path: &Path, tx: &mpsc::SyncSender<Read>) -> io::Result<()> {
    let mut lines = Lines::open(path)?;
    let mut block = Block::new();
    while let Some(line) = lines.next_line()? {
        block.bytes.extend_from_slice(line.bytes);
        block.ends.push(block.bytes.len());
        block.fields.push(Fields::of(line.bytes));
        if block.bytes.len() >= BLOCK {
            let full = std::mem::replace(&mut block, Block::new());
            if tx.send(Read::Block(full)).is_err() {
                return Ok(());
            }
        }
    }
    if !block.ends.is_empty() {
        let _ = tx.send(Read::Block(block));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_request_line_is_read_by_places_and_others_are_left_to_the_parser() {
        let line = br#"{"seq":7,"time":"2026-11-22T01:00:00Z","client":"10.0.0.1:4711","url":"https://a.example/x","agent":"bot","decision":"disallowed","rule":"Disallow: /x","rule_line":3,"robots_sha256":"ab","node":"n1"}"#;
        let fields = Fields::of(line).expect("a plain request line");
        let e = fields.entry(line).expect("its entry");
        assert_eq!(e.time.as_deref(), Some("2026-11-22T01:00:00Z"));
        assert_eq!(e.client.as_deref(), Some("10.0.0.1:4711"));
        assert_eq!(e.url.as_deref(), Some("https://a.example/x"));
        assert_eq!(e.agent.as_deref(), Some("bot"));
        assert_eq!(e.decision.as_deref(), Some("disallowed"));
        assert_eq!(e.rule.as_deref(), Some("Disallow: /x"));
        assert_eq!(e.rule_line, Some(3));
        assert_eq!(e.robots_sha256.as_deref(), Some("ab"));
        assert_eq!(e.node.as_deref(), Some("n1"));
        assert_eq!(e.user, None);
        for other in [
            &br#"{"type":"checkpoint","time":"2026-11-22T01:00:00Z"}"#[..],
            br#"{"url":"https://a.example/\u0041"}"#,
            br#"{"url":"https://a.example/","usage_evidence":["train-ai=tdmrep.json: x"]}"#,
            b"not json",
        ] {
            assert!(Fields::of(other).is_none());
        }
    }
}
