//! Reading audit files for `audit verify` and `audit report`: plain or
//! gzip (told by the first two bytes, whatever the name), line by line in
//! a buffer of bounded size, so memory does not grow with the file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::tail::MAX_LINE;

const BUFFER: usize = 256 << 10;

/// The lines of one file.
pub(crate) struct Lines {
    reader: Box<dyn BufRead>,
    line: Vec<u8>,
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
        let mut file = BufReader::with_capacity(BUFFER, File::open(path)?);
        let gzip = file.fill_buf()?.starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn BufRead> = if gzip {
            Box::new(BufReader::with_capacity(BUFFER, MultiGzDecoder::new(file)))
        } else {
            Box::new(file)
        };
        Ok(Lines::new(reader))
    }

    pub(crate) fn new(reader: Box<dyn BufRead>) -> Lines {
        Lines {
            reader,
            line: Vec::with_capacity(4096),
            number: 0,
        }
    }

    /// The next line; `None` at the end. A line longer than 16 MiB is an
    /// error of kind `InvalidData`.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<LineRef<'_>>> {
        self.line.clear();
        let limit = MAX_LINE + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.line)?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        let complete = self.line.last() == Some(&b'\n');
        if !complete && n as u64 == limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {} is longer than {} MiB", self.number, MAX_LINE >> 20),
            ));
        }
        let bytes = if complete {
            &self.line[..self.line.len() - 1]
        } else {
            &self.line[..]
        };
        Ok(Some(LineRef {
            bytes,
            number: self.number,
            complete,
        }))
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
}
