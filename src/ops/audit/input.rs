//! Reading audit files for `audit verify` and `audit report`: plain or
//! gzip (told by the first two bytes, whatever the name), line by line in
//! a buffer of bounded size, so memory does not grow with the file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::tail::MAX_LINE;

const BUFFER: usize = 1 << 20;

/// The lines of one file, read in large blocks: a line is handed out as a
/// slice of the block it is in (copied only when it straddles two).
pub(crate) struct Lines {
    reader: Box<dyn Read>,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// No newline in `buf[start..scanned]`.
    scanned: usize,
    eof: bool,
    /// Lines returned so far.
    number: u64,
}

/// One line, without its newline.
pub(crate) struct LineRef<'a> {
    pub(crate) bytes: &'a [u8],
    /// Its number in the file, from 1.
    pub(crate) number: u64,
    /// False for a last line with no newline after it (a torn write).
    pub(crate) complete: bool,
}

impl Lines {
    /// Opens `path`, decompressing it if it is gzip.
    pub(crate) fn open(path: &Path) -> io::Result<Lines> {
        let mut file = BufReader::with_capacity(256 << 10, File::open(path)?);
        let gzip = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn Read> = if gzip {
            Box::new(MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(Lines::new(reader))
    }

    pub(crate) fn new(reader: Box<dyn Read>) -> Lines {
        Lines {
            reader,
            buf: vec![0; BUFFER],
            start: 0,
            end: 0,
            scanned: 0,
            eof: false,
            number: 0,
        }
    }

    /// The next line; `None` at the end. A line longer than 16 MiB is an
    /// error of kind `InvalidData`.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<LineRef<'_>>> {
        let (from, to, complete) = loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..self.end]) {
                let nl = self.scanned + i;
                break (self.start, nl, true);
            }
            self.scanned = self.end;
            if self.end - self.start > MAX_LINE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "line {} is longer than {} MiB",
                        self.number + 1,
                        MAX_LINE >> 20
                    ),
                ));
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                break (self.start, self.end, false);
            }
            self.fill()?;
        };
        self.number += 1;
        self.start = if complete { to + 1 } else { to };
        self.scanned = self.start;
        Ok(Some(LineRef {
            bytes: &self.buf[from..to],
            number: self.number,
            complete,
        }))
    }

    /// Reads more after the unread bytes, moving them to the front (or
    /// growing the buffer for a line longer than it).
    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.scanned -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let more = self.buf.len().min(MAX_LINE as usize + 1);
            self.buf.resize(self.buf.len() + more, 0);
        }
        loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn plain_and_gzip_files_read_alike_and_a_torn_last_line_is_marked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = b"{\"a\":1}\n{\"a\":2}\n{\"a\":";
        let plain = dir.path().join("audit.jsonl");
        std::fs::write(&plain, text).expect("write");
        let gz = dir.path().join("audit.jsonl.1");
        let mut enc = flate2::write::GzEncoder::new(
            File::create(&gz).expect("create"),
            flate2::Compression::default(),
        );
        enc.write_all(text).expect("compress");
        enc.finish().expect("finish");
        for path in [plain, gz] {
            let mut lines = Lines::open(&path).expect("open");
            let mut seen = Vec::new();
            while let Some(line) = lines.next_line().expect("read") {
                seen.push((
                    String::from_utf8_lossy(line.bytes).into_owned(),
                    line.complete,
                ));
            }
            assert_eq!(
                seen,
                [
                    ("{\"a\":1}".to_owned(), true),
                    ("{\"a\":2}".to_owned(), true),
                    ("{\"a\":".to_owned(), false)
                ]
            );
            assert_eq!(lines.number, 3);
        }
    }

    #[test]
    fn lines_longer_than_the_buffer_and_across_blocks_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        let lines: Vec<Vec<u8>> = [700_000, 10, 2_500_000, 300_000]
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![b'a' + i as u8; n])
            .collect();
        let mut text = lines.join(&b'\n');
        text.push(b'\n');
        std::fs::write(&path, &text).expect("write");
        let mut read = Lines::open(&path).expect("open");
        for want in &lines {
            let line = read.next_line().expect("read").expect("a line");
            assert!(line.complete);
            assert_eq!(line.bytes, &want[..]);
        }
        assert!(read.next_line().expect("read").is_none());
    }
}
