//! Reading audit files on a thread of their own for `audit report`: one
//! thread reads (and inflates) the files and cuts them into blocks of
//! whole lines, while the caller parses and folds the lines in the order
//! read, so the report is the same line for line as read on one thread.
//! At most [`IN_FLIGHT`] blocks wait between the two: memory stays bounded
//! whatever the size of the files.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

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
}

impl Block {
    fn new() -> Block {
        Block {
            bytes: Vec::with_capacity(BLOCK),
            ends: Vec::with_capacity(BLOCK / 256),
        }
    }

    /// The lines, in order.
    pub(super) fn lines(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let line = &self.bytes[start..end];
            start = end;
            line
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
