//! Reading audit files on threads of their own for `audit report`: one
//! thread reads (and inflates) the files and cuts them into blocks of
//! whole lines; workers read the fields of each block's lines
//! ([`Fields`], without the JSON parser); the caller folds the blocks in
//! the order read, so the report is the same line for line as read on one
//! thread. A line the scanner leaves (see [`super::scan`]) is parsed by
//! the caller. Blocks go to the workers in turn and come back from them
//! in the same turn, so order needs no sorting; at most a few blocks per
//! worker wait at any time, and folded blocks go back to the reading
//! thread to be filled again: memory stays bounded whatever the size of
//! the files.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};

use super::Entry;
use super::scan::Fields;
use crate::ops::audit::input::Lines;

/// Bytes of lines per block (a longer line makes a block of its own).
const BLOCK: usize = 1 << 20;

/// Blocks waiting on each side of a worker.
const QUEUE: usize = 2;

/// Whole lines of one file, without their newlines.
pub(super) struct Block {
    /// The lines, while the block is filled, or if they are not UTF-8.
    bytes: Vec<u8>,
    /// The lines as text, once read as UTF-8 as a whole (the usual case).
    text: String,
    /// Where each line ends.
    ends: Vec<usize>,
    /// Each line's fields, if the scanner reads it.
    fields: Vec<Option<Fields>>,
}

impl Block {
    fn new() -> Block {
        Block {
            bytes: Vec::with_capacity(BLOCK),
            text: String::new(),
            ends: Vec::with_capacity(BLOCK / 256),
            fields: Vec::with_capacity(BLOCK / 256),
        }
    }

    /// Empties the block, keeping its room.
    fn clear(&mut self) {
        if self.text.capacity() > self.bytes.capacity() {
            self.bytes = std::mem::take(&mut self.text).into_bytes();
        }
        self.bytes.clear();
        self.text.clear();
        self.ends.clear();
        self.fields.clear();
    }

    /// The text of the line from `from` to `to`, if UTF-8.
    fn text(&self, from: usize, to: usize) -> Option<&str> {
        if self.text.is_empty() {
            std::str::from_utf8(self.bytes.get(from..to)?).ok()
        } else {
            // Not on a character's boundary: the line is not UTF-8.
            self.text.get(from..to)
        }
    }

    /// The lines, in order: the entry of each line the scanner read, the
    /// bytes of the others.
    pub(super) fn lines(&self) -> impl Iterator<Item = Result<Entry<'_>, &[u8]>> {
        let bytes = if self.text.is_empty() {
            &self.bytes[..]
        } else {
            self.text.as_bytes()
        };
        let mut start = 0;
        self.ends
            .iter()
            .zip(&self.fields)
            .map(move |(&end, fields)| {
                let from = std::mem::replace(&mut start, end);
                fields
                    .and_then(|f| f.entry(self.text(from, end)?))
                    .ok_or(&bytes[from..end])
            })
    }

    /// Reads the fields of its lines: as text, checked as UTF-8 once for
    /// the whole block.
    fn scan(&mut self) {
        match String::from_utf8(std::mem::take(&mut self.bytes)) {
            Ok(text) => self.text = text,
            Err(e) => self.bytes = e.into_bytes(),
        }
        let mut start = 0;
        for &end in &self.ends {
            let fields = self.text(start, end).and_then(Fields::of);
            self.fields.push(fields);
            start = end;
        }
    }
}

/// What the reading thread hands on.
enum Item {
    Block(Block),
    /// The end of a file.
    FileDone,
    /// A file that could not be read; nothing follows.
    Failed(PathBuf, io::Error),
}

/// What the caller is given, in order.
pub(super) enum Got<'a> {
    Block(&'a Block),
    FileDone,
}

/// Reads `files` on other threads (the fields read by `workers` threads,
/// or by the reading thread itself if none), calling `each` with every
/// block and file end in order on this one; stops at the first file that
/// cannot be read, and returns it.
pub(super) fn read(
    files: &[PathBuf],
    workers: usize,
    mut each: impl FnMut(Got<'_>),
) -> Result<(), (PathBuf, io::Error)> {
    let (spare_tx, spare_rx) = mpsc::channel::<Block>();
    let mut failed = Ok(());
    std::thread::scope(|s| {
        let mut inboxes = Vec::new();
        let mut outboxes = Vec::new();
        for _ in 0..workers {
            let (in_tx, in_rx) = mpsc::sync_channel::<Item>(QUEUE);
            let (out_tx, out_rx) = mpsc::sync_channel::<Item>(QUEUE);
            s.spawn(move || {
                for mut item in in_rx {
                    if let Item::Block(block) = &mut item {
                        block.scan();
                    }
                    if out_tx.send(item).is_err() {
                        return;
                    }
                }
            });
            inboxes.push(in_tx);
            outboxes.push(out_rx);
        }
        let outboxes = if workers == 0 {
            let (tx, rx) = mpsc::sync_channel::<Item>(QUEUE);
            s.spawn(move || reader(files, &[tx], true, &spare_rx));
            vec![rx]
        } else {
            s.spawn(move || reader(files, &inboxes, false, &spare_rx));
            outboxes
        };
        // Items come back in the turn they were handed out in; a closed
        // outbox is the end (the reader is done).
        for outbox in outboxes.iter().cycle() {
            match outbox.recv() {
                Ok(Item::Block(mut block)) => {
                    each(Got::Block(&block));
                    block.clear();
                    // The reader may be done already.
                    let _ = spare_tx.send(block);
                }
                Ok(Item::FileDone) => each(Got::FileDone),
                Ok(Item::Failed(path, e)) => failed = Err((path, e)),
                Err(_) => break,
            }
        }
    });
    failed
}

/// Sends `files` as blocks, in turn to `to`, reading their fields first
/// if `scan`.
fn reader(files: &[PathBuf], to: &[SyncSender<Item>], scan: bool, spare: &Receiver<Block>) {
    let mut turn = to.iter().cycle();
    let mut send = |item| turn.next().is_some_and(|tx| tx.send(item).is_ok());
    for path in files {
        if let Err(e) = read_file(path, scan, spare, &mut send) {
            send(Item::Failed(path.clone(), e));
            return;
        }
        if !send(Item::FileDone) {
            return;
        }
    }
}

/// Sends the lines of `path` in blocks.
fn read_file(
    path: &Path,
    scan: bool,
    spare: &Receiver<Block>,
    send: &mut impl FnMut(Item) -> bool,
) -> io::Result<()> {
    let mut lines = Lines::open(path)?;
    let next = || spare.try_recv().unwrap_or_else(|_| Block::new());
    let mut block = next();
    while let Some(line) = lines.next_line()? {
        block.bytes.extend_from_slice(line.bytes);
        block.ends.push(block.bytes.len());
        if block.bytes.len() >= BLOCK {
            let mut full = std::mem::replace(&mut block, next());
            if scan {
                full.scan();
            }
            if !send(Item::Block(full)) {
                return Ok(());
            }
        }
    }
    if !block.ends.is_empty() {
        if scan {
            block.scan();
        }
        send(Item::Block(block));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_back_in_the_order_read_whatever_the_number_of_workers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Vec::new();
        let mut want = Vec::new();
        for f in 0..3 {
            let mut text = String::new();
            for i in 0..40_000 {
                let line = format!("{{\"url\":\"https://a.example/{f}/{i}\",\"n\":{i}}}");
                text.push_str(&line);
                text.push('\n');
                want.push(line);
            }
            let path = dir.path().join(format!("audit.jsonl.{f}"));
            std::fs::write(&path, text).expect("write");
            files.push(path);
        }
        for workers in [0, 1, 3] {
            let mut got = Vec::new();
            let mut done = 0;
            read(&files, workers, |g| match g {
                Got::Block(block) => {
                    for e in block.lines() {
                        let url = e.ok().and_then(|e| e.url).expect("scanned");
                        got.push(format!(
                            "{{\"url\":\"{url}\",\"n\":{}}}",
                            got.len() % 40_000
                        ));
                    }
                }
                Got::FileDone => done += 1,
            })
            .expect("read");
            assert_eq!(done, 3);
            assert_eq!(got, want, "{workers} workers");
        }
        // Lines that are not UTF-8 each, though the two together are.
        let odd = dir.path().join("odd.jsonl");
        std::fs::write(&odd, b"{\"url\":\"a\xc3\n\xa9\"}\n{\"url\":\"b\"}\n").expect("write");
        for workers in [0, 1] {
            let mut got = Vec::new();
            read(std::slice::from_ref(&odd), workers, |g| {
                if let Got::Block(block) = g {
                    for line in block.lines() {
                        got.push(
                            line.map(|e| e.url.map(|u| u.into_owned()))
                                .map_err(<[u8]>::to_vec),
                        );
                    }
                }
            })
            .expect("read");
            assert_eq!(
                got,
                [
                    Err(b"{\"url\":\"a\xc3".to_vec()),
                    Err(b"\xa9\"}".to_vec()),
                    Ok(Some("b".to_owned()))
                ]
            );
        }
        let missing = dir.path().join("gone");
        let e = read(&[files[0].clone(), missing.clone()], 2, |_| {}).expect_err("missing");
        assert_eq!(e.0, missing);
    }
}
