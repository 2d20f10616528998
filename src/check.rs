//! The `check` command: judge many URLs against one robots.txt file.

use std::borrow::Cow;
use std::io::{self, BufRead, Write};

use crate::robots::{AgentRules, Verdict};

/// Counts of what [`check_lines`] and [`check_urls`] printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub allowed: u64,
    pub disallowed: u64,
}

/// Writes verdicts. Each rule's text (`\tline 3: Disallow: /x\n`) is
/// rendered once, the first time it decides a URL, and then copied: no
/// formatting per URL.
struct Printer<'r> {
    rules: &'r AgentRules,
    rendered: Vec<Option<Box<[u8]>>>,
    summary: Summary,
}

impl<'r> Printer<'r> {
    fn new(rules: &'r AgentRules) -> Printer<'r> {
        Printer {
            rules,
            rendered: vec![None; rules.rules().len()],
            summary: Summary::default(),
        }
    }

    fn judge(&mut self, url: &str, out: &mut impl Write) -> io::Result<()> {
        let verdict = self.rules.check_url(url);
        self.print(url, verdict, out)
    }

    fn print(&mut self, url: &str, verdict: Verdict<'r>, out: &mut impl Write) -> io::Result<()> {
        if verdict.allowed {
            self.summary.allowed += 1;
            out.write_all(b"ALLOWED ")?;
        } else {
            self.summary.disallowed += 1;
            out.write_all(b"DISALLOWED ")?;
        }
        out.write_all(url.as_bytes())?;
        let Some(rule) = verdict.rule else {
            return out.write_all(b"\n");
        };
        match self.rules.rule_index(rule) {
            Some(i) => {
                let text = self.rendered[i]
                    .get_or_insert_with(|| format!("\t{rule}\n").into_bytes().into_boxed_slice());
                out.write_all(text)
            }
            None => writeln!(out, "\t{rule}"),
        }
    }
}

/// Judges each URL and prints one line per URL to `out`.
pub fn check_urls<'u>(
    rules: &AgentRules,
    urls: impl IntoIterator<Item = &'u str>,
    out: &mut impl Write,
) -> io::Result<Summary> {
    let mut printer = Printer::new(rules);
    for url in urls {
        printer.judge(url, out)?;
    }
    Ok(printer.summary)
}

/// Judges every line of `input` as a URL (CR/LF stripped; invalid UTF-8
/// replaced) and prints one line per URL to `out`. Lines are judged where
/// they lie in `input`'s buffer; only a line that straddles two buffer
/// fills is copied. No allocation per URL in the common case.
pub fn check_lines(
    rules: &AgentRules,
    mut input: impl BufRead,
    out: &mut impl Write,
) -> io::Result<Summary> {
    let mut printer = Printer::new(rules);
    // The start of a line whose end is in a later buffer fill.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if !carry.is_empty() {
                judge_line(&mut printer, &carry, out)?;
            }
            break;
        }
        let n = chunk.len();
        let mut start = 0;
        if !carry.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    carry.extend_from_slice(&chunk[..i]);
                    judge_line(&mut printer, &carry, out)?;
                    carry.clear();
                    start = i + 1;
                }
                None => {
                    carry.extend_from_slice(chunk);
                    input.consume(n);
                    continue;
                }
            }
        }
        let base = start;
        for end in memchr::memchr_iter(b'\n', &chunk[base..]) {
            judge_line(&mut printer, &chunk[start..base + end], out)?;
            start = base + end + 1;
        }
        carry.extend_from_slice(&chunk[start..]);
        input.consume(n);
    }
    Ok(printer.summary)
}

/// One line without its `\n`: strips a CR (or several) and judges it.
fn judge_line(printer: &mut Printer<'_>, mut line: &[u8], out: &mut impl Write) -> io::Result<()> {
    while let [rest @ .., b'\n' | b'\r'] = line {
        line = rest;
    }
    let url = match std::str::from_utf8(line) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(line),
    };
    printer.judge(&url, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robots::Robots;

    fn run(robots: &str, input: &[u8], capacity: usize) -> (String, Summary) {
        let rules = Robots::parse(robots.as_bytes()).agent_rules("x");
        let reader = io::BufReader::with_capacity(capacity, input);
        let mut out = Vec::new();
        let summary = check_lines(&rules, reader, &mut out).expect("in-memory I/O");
        (String::from_utf8(out).expect("output is UTF-8"), summary)
    }

    #[test]
    fn lines_are_judged_whatever_the_buffer_size() {
        let robots = "user-agent: *\ndisallow: /private\n";
        let input = b"/a\r\n/private/x\n\n/b\xFF\n/private";
        let expected = "ALLOWED /a\n\
                        DISALLOWED /private/x\tline 2: Disallow: /private\n\
                        ALLOWED \n\
                        ALLOWED /b\u{FFFD}\n\
                        DISALLOWED /private\tline 2: Disallow: /private\n";
        for capacity in [1, 2, 3, 5, 8, 64, 8192] {
            let (out, summary) = run(robots, input, capacity);
            assert_eq!(out, expected, "capacity {capacity}");
            assert_eq!(
                summary,
                Summary {
                    allowed: 3,
                    disallowed: 2
                }
            );
        }
    }

    #[test]
    fn urls_are_judged_in_order() {
        let rules = Robots::parse(b"user-agent: *\nallow: /a\ndisallow: /").agent_rules("x");
        let mut out = Vec::new();
        let summary = check_urls(&rules, ["/a", "/b"], &mut out).expect("in-memory I/O");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            "ALLOWED /a\tline 2: Allow: /a\nDISALLOWED /b\tline 3: Disallow: /\n"
        );
        assert_eq!(summary.disallowed, 1);
    }
}
