//! Where the chain goes on when the proxy starts: the last complete line
//! of the file already at the audit path, read from its end (never the
//! whole file). Bytes after the last newline are a line torn by a crash
//! mid-write: they are cut off first.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::chain::{ChainFields, Head, Sealed};

/// The longest line looked for. A file whose last this-many bytes hold no
/// newline is not an audit log.
pub(crate) const MAX_LINE: u64 = 16 << 20;

/// Bytes read at a time while looking for a newline.
const STEP: u64 = 64 << 10;

/// What the start checkpoint links to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The last line's `seq` and `chain`, or [`Head::GENESIS`].
    pub(crate) head: Head,
    /// Why a new chain begins, when it does: `empty` (no line in the
    /// file), `unchained` (its last line has no chain: a log written
    /// before chaining) or `unreadable` (its last line is not JSON with
    /// `seq` and `chain`).
    pub(crate) chain_start: Option<&'static str>,
    /// Torn bytes cut from the end.
    pub(crate) cut: u64,
}

/// Reads the head of the log in `file` (opened for reading and writing),
/// cutting a torn last line.
pub(crate) fn resume(file: &File) -> io::Result<Resume> {
    let len = file.metadata()?.len();
    let mut end = len;
    if end > 0 && read_at(file, end - 1, 1)? != b"\n" {
        end = match last_newline(file, end)? {
            Some(at) => at + 1,
            None if end <= MAX_LINE => 0,
            None => return Err(no_newline()),
        };
        file.set_len(end)?;
    }
    let cut = len - end;
    if end == 0 {
        return Ok(Resume {
            head: Head::GENESIS,
            chain_start: Some("empty"),
            cut,
        });
    }
    // The last line is (start, end - 1): without its newline.
    let start = match last_newline(file, end - 1)? {
        Some(at) => at + 1,
        None if end - 1 <= MAX_LINE => 0,
        None => return Err(no_newline()),
    };
    let line = read_at(file, start, end - 1 - start)?;
    let (head, chain_start) = match head_of(&line) {
        Ok(head) => (head, None),
        Err(why) => (Head::GENESIS, Some(why)),
    };
    Ok(Resume {
        head,
        chain_start,
        cut,
    })
}

/// The `seq` and `chain` of a line, or why there are none.
fn head_of(line: &[u8]) -> Result<Head, &'static str> {
    let fields: ChainFields<'_> = serde_json::from_slice(line).map_err(|_| "unreadable")?;
    if fields.chain.is_none() {
        return Err("unchained");
    }
    match (fields.seq, Sealed::split(line)) {
        (Some(seq), Some(sealed)) => Ok(Head {
            seq,
            chain: sealed.chain,
        }),
        _ => Err("unreadable"),
    }
}

fn no_newline() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "no line end in the last {} MiB: not an audit log",
            MAX_LINE >> 20
        ),
    )
}

/// The offset of the last `\n` before `end`, looking back at most
/// [`MAX_LINE`] bytes.
fn last_newline(file: &File, end: u64) -> io::Result<Option<u64>> {
    let floor = end.saturating_sub(MAX_LINE);
    let mut hi = end;
    while hi > floor {
        let lo = hi.saturating_sub(STEP).max(floor);
        let chunk = read_at(file, lo, hi - lo)?;
        if let Some(i) = memchr::memrchr(b'\n', &chunk) {
            return Ok(Some(lo + i as u64));
        }
        hi = lo;
    }
    Ok(None)
}

fn read_at(file: &File, at: u64, len: u64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(io::Error::other)?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::audit::chain::{GENESIS, seal};

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, bytes).expect("write");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .expect("open");
        (dir, file)
    }

    fn sealed(seq: u64) -> (Vec<u8>, [u8; 32]) {
        let mut line = format!("{{\"seq\":{seq},\"url\":\"http://a/\"}}").into_bytes();
        let chain = seal(&mut line, 0, &GENESIS);
        (line, chain)
    }

    #[test]
    fn the_last_complete_line_gives_the_head_and_a_torn_one_is_cut() {
        let (one, _) = sealed(1);
        let (two, chain) = sealed(2);
        let mut bytes = [one, two].concat();
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(b"{\"seq\":3,\"url\":\"htt");
        let (_dir, file) = file_with(&bytes);
        let resume = resume(&file).expect("resume");
        assert_eq!(resume.head, Head { seq: 2, chain });
        assert_eq!(resume.chain_start, None);
        assert_eq!(resume.cut, bytes.len() as u64 - whole);
        assert_eq!(file.metadata().expect("len").len(), whole);
    }

    #[test]
    fn a_log_from_before_chaining_or_an_empty_one_starts_a_chain() {
        let (_dir, file) = file_with(b"{\"url\":\"http://a/\"}\n");
        let r = resume(&file).expect("resume");
        assert_eq!((r.head, r.chain_start), (Head::GENESIS, Some("unchained")));
        let (_dir, file) = file_with(b"");
        let r = resume(&file).expect("resume");
        assert_eq!((r.head, r.chain_start), (Head::GENESIS, Some("empty")));
        let (_dir, file) = file_with(b"only torn");
        let r = resume(&file).expect("resume");
        assert_eq!((r.chain_start, r.cut), (Some("empty"), 9));
        let (_dir, file) = file_with(b"not json\n");
        let r = resume(&file).expect("resume");
        assert_eq!(r.chain_start, Some("unreadable"));
    }

    #[test]
    fn a_long_last_line_is_found_across_reads() {
        let mut line =
            format!("{{\"seq\":9,\"url\":\"http://a/{}\"}}", "x".repeat(200_000)).into_bytes();
        let chain = seal(&mut line, 0, &GENESIS);
        let (_dir, file) = file_with(&[b"{}\n".as_slice(), &line].concat());
        let r = resume(&file).expect("resume");
        assert_eq!(r.head, Head { seq: 9, chain });
    }
}
