//! The `check` command: judge many URLs against one robots.txt file.

use parking_lot::Mutex;
use std::borrow::Cow;
use std::io::{self, Read, Write};

use crate::robots::{AgentRules, Verdict};

/// Counts of what [`check_lines`] and [`check_urls`] printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub(crate) allowed: u64,
    pub disallowed: u64,
    /// Lines that are neither a path nor an http(s) URL (`INVALID`).
    pub invalid: u64,
}

/// Why `url` cannot be judged, if it cannot: it must be a path (`/a?b`),
/// an `http://` or `https://` URL with a host, or empty (the root).
pub(crate) fn invalid_url(url: &str) -> Option<&'static str> {
    let b = url.as_bytes();
    if b.is_empty() || b[0] == b'/' {
        return None;
    }
    let rest = if b.len() >= 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        &url[7..]
    } else if b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        &url[8..]
    } else if url.contains("://") || url.split_once(':').is_some_and(|(s, _)| !s.contains('/')) {
        return Some("not an http or https URL");
    } else {
        return Some("neither a path (/...) nor an absolute http(s) URL");
    };
    let rest = rest.as_bytes();
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.first().is_none_or(|&b| b == b':') || authority.iter().any(|&b| b <= b' ') {
        return Some("URL without a valid host");
    }
    None
}

/// Writes verdicts. Each rule's text (`\tline 3: Disallow: /x\n`) is
/// rendered once, the first time it decides a URL, and then copied: no
/// formatting per URL.
struct Printer<'r> {
    rules: &'r AgentRules,
    opts: &'r Options,
    rendered: Vec<Option<Box<[u8]>>>,
    summary: Summary,
}

impl<'r> Printer<'r> {
    fn new(rules: &'r AgentRules, opts: &'r Options) -> Printer<'r> {
        Printer {
            rules,
            opts,
            rendered: vec![None; rules.rules().len()],
            summary: Summary::default(),
        }
    }

    /// Judges `url` as the proxy would: every path an origin may resolve
    /// it to (see [`crate::robots::canon`]).
    fn judge(&mut self, url: &str, out: &mut impl Write) -> io::Result<()> {
        // An empty line is the root, and is printed as such.
        let url = if url.is_empty() { "/" } else { url };
        if let Some(reason) = invalid_url(url) {
            self.summary.invalid += 1;
            return writeln!(out, "INVALID {url}\t{reason}");
        }
        let resolved = self.rules.check_resolved_in(
            crate::robots::normalize::path_and_query(url),
            self.opts.case_insensitive,
        );
        if resolved.verdict.allowed && !self.opts.purposes.is_empty() {
            let path = crate::robots::normalize::path_and_query(url);
            for purpose in &self.opts.purposes {
                if let Some(v) = self.rules.usage(path, purpose)
                    && v.pref == crate::robots::usage::Pref::Disallowed
                {
                    self.summary.disallowed += 1;
                    return writeln!(out, "DISALLOWED {url}\t{}\tusage {purpose}=n", v.rule);
                }
            }
            if let Some(file) = &self.opts.tdmrep
                && let Some(rule) = file.decide(path)
                && rule.reservation == Some(crate::judge::signals::tdmrep::Reservation::Reserved)
                && let Some(purpose) = self
                    .opts
                    .purposes
                    .iter()
                    .find(|p| crate::judge::signals::is_tdm_purpose(p))
            {
                self.summary.disallowed += 1;
                return writeln!(
                    out,
                    "DISALLOWED {url}\ttdmrep.json {}\tusage {purpose}=n",
                    rule.element()
                );
            }
            if let Some(doc) = &self.opts.rsl {
                for purpose in &self.opts.purposes {
                    if let Some(v) = doc.verdict(url, path, purpose)
                        && v.permitted == Some(false)
                    {
                        self.summary.disallowed += 1;
                        let token = v.token.unwrap_or_default();
                        return writeln!(
                            out,
                            "DISALLOWED {url}\trsl {} prohibits {token}\tusage {purpose}=n",
                            v.element
                        );
                    }
                }
            }
        }
        // Rare: disallowed in another reading of the path (named last), or
        // by a rule read into its spelling (`Disallow: /wiki/Special%3A`
        // for `/wiki/Special:`).
        let tag = match (&resolved.judged_as, resolved.reading) {
            (Some(path), _) => Some(format!("judged as {path}")),
            (None, Some(reading)) if !resolved.verdict.allowed => {
                Some(format!("read as {}", reading.name()))
            }
            _ => None,
        };
        match tag {
            Some(tag) => {
                self.summary.disallowed += 1;
                let rule = resolved
                    .verdict
                    .rule
                    .map(|r| r.to_string())
                    .unwrap_or_default();
                writeln!(out, "DISALLOWED {url}\t{rule}\t{tag}")
            }
            None => self.print(url, resolved.verdict, out),
        }
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
    check_urls_with(rules, urls, out, &Options::default())
}

/// How URLs are judged beyond the rules as sent.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Also judge the case-folding readings (a case-insensitive origin).
    pub case_insensitive: bool,
    /// Declared purposes (usage categories such as `train-ai`): a URL whose
    /// usage preference for one of them is `n` is disallowed.
    pub purposes: Vec<String>,
    /// The origin's tdmrep.json: a URL it reserves is disallowed for the
    /// purposes a reservation speaks for (`train-ai`, `ai-input`).
    pub tdmrep: Option<crate::judge::signals::tdmrep::TdmFile>,
    /// An RSL licence document: a URL whose content it prohibits a
    /// declared purpose for is disallowed.
    pub rsl: Option<crate::judge::signals::rsl::RslDoc>,
}

/// [`check_urls`] with [`Options`].
pub fn check_urls_with<'u>(
    rules: &AgentRules,
    urls: impl IntoIterator<Item = &'u str>,
    out: &mut impl Write,
    opts: &Options,
) -> io::Result<Summary> {
    let mut printer = Printer::new(rules, opts);
    for url in urls {
        printer.judge(url, out)?;
    }
    Ok(printer.summary)
}

/// Input is judged in blocks of about this many octets (a line longer than
/// that grows its block): large enough that a block's threads start once per
/// several thousand URLs, small enough that output starts early.
const BLOCK: usize = 1 << 20;

/// Blocks shorter than this are judged on the calling thread alone.
const PARALLEL_MIN: usize = 64 * 1024;

/// Blocks judged on several threads are cut into runs of about this many
/// octets (a thousand URLs or so), which the threads take in turn.
const RUN: usize = 64 * 1024;

/// Judges every line of `input` as a URL (CR/LF stripped; invalid UTF-8
/// replaced) and prints one line per URL to `out`, in input order.
///
/// `input` is read in large blocks; each block's complete lines are cut into
/// runs of whole lines that `threads` threads judge at the same time (see
/// `judge_block`), and printed in order. The calling thread reads the next
/// block while the others start on this one. Lines are judged where they lie
/// in the block: no allocation per URL in the common case, and UTF-8 is
/// checked once per run, not per line.
pub fn check_lines(
    rules: &AgentRules,
    input: impl Read,
    out: &mut impl Write,
    threads: usize,
) -> io::Result<Summary> {
    check_lines_with(rules, input, out, threads, &Options::default())
}

/// [`check_lines`] with [`Options`].
pub fn check_lines_with(
    rules: &AgentRules,
    mut input: impl Read,
    out: &mut impl Write,
    threads: usize,
    opts: &Options,
) -> io::Result<Summary> {
    let threads = threads.max(1);
    let mut printers: Vec<Printer<'_>> = (0..threads).map(|_| Printer::new(rules, opts)).collect();
    let mut buffers: Vec<Vec<u8>> = Vec::new();
    let mut block: Vec<u8> = Vec::new();
    let mut next: Vec<u8> = Vec::new();
    let mut eof = fill(&mut input, &mut block)?;
    loop {
        // `fill` stops after a line end, unless the input ended.
        let end = match memchr::memrchr(b'\n', &block) {
            Some(i) if !eof => i + 1,
            _ => block.len(),
        };
        // The next block: the start of a line that ends in it, then more
        // input, read while other threads judge this one.
        let mut read = Ok(true);
        judge_block(&block[..end], &mut printers, &mut buffers, out, || {
            next.clear();
            next.extend_from_slice(&block[end..]);
            if !eof {
                read = fill(&mut input, &mut next);
            }
        })?;
        if eof {
            break;
        }
        eof = read?;
        std::mem::swap(&mut block, &mut next);
    }
    Ok(printers.iter().fold(Summary::default(), |sum, p| Summary {
        allowed: sum.allowed + p.summary.allowed,
        disallowed: sum.disallowed + p.summary.disallowed,
        invalid: sum.invalid + p.summary.invalid,
    }))
}

/// Reads into `buf` until it holds [`BLOCK`] octets, or more until a line
/// ends in what was read, or the input ends (then true).
fn fill(input: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<bool> {
    let kept = buf.len();
    let mut want = BLOCK.max(kept + 4096);
    loop {
        let missing = want - buf.len();
        let got = read_up_to(input, buf, missing)?;
        if got < missing {
            return Ok(true);
        }
        // What was kept holds no line end.
        if memchr::memrchr(b'\n', &buf[kept..]).is_some() {
            return Ok(false);
        }
        // One line fills the block: read on until it ends.
        want = buf.len() + BLOCK;
    }
}

/// Appends up to `n` octets of `input` to `buf`; fewer only at the end of
/// the input.
fn read_up_to(input: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> io::Result<usize> {
    let mut got = 0;
    while got < n {
        match input.by_ref().take((n - got) as u64).read_to_end(buf) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Judges the lines of `block` (whole lines; the last may lack its `\n`)
/// and prints them in order. `meanwhile` runs on the calling thread while
/// the others start judging.
///
/// The block is cut into runs of about [`RUN`] octets, which the threads
/// (one printer each) take in turn, each into a buffer of its own: a thread
/// that another program's work holds back delays only the runs it took.
fn judge_block(
    block: &[u8],
    printers: &mut [Printer<'_>],
    buffers: &mut Vec<Vec<u8>>,
    out: &mut impl Write,
    meanwhile: impl FnOnce(),
) -> io::Result<()> {
    let (first, others) = printers.split_first_mut().expect("at least one printer");
    if others.is_empty() || block.len() < PARALLEL_MIN {
        judge_run(first, block, out)?;
        meanwhile();
        return Ok(());
    }
    let mut runs: Vec<&[u8]> = Vec::with_capacity(block.len() / RUN + 1);
    let mut start = 0;
    while start < block.len() {
        let from = (start + RUN).min(block.len());
        let end = memchr::memchr(b'\n', &block[from..]).map_or(block.len(), |i| from + i + 1);
        runs.push(&block[start..end]);
        start = end;
    }
    if buffers.len() < runs.len() {
        buffers.resize_with(runs.len(), Vec::new);
    }
    let work = Mutex::new(runs.iter().zip(buffers.iter_mut()));
    let take_and_judge = |printer: &mut Printer<'_>| {
        loop {
            let next = work.lock().next();
            let Some((run, buf)) = next else {
                break;
            };
            buf.clear();
            judge_run(printer, run, buf).expect("a Vec takes every write");
        }
    };
    std::thread::scope(|scope| {
        for printer in others.iter_mut() {
            scope.spawn(|| take_and_judge(printer));
        }
        meanwhile();
        take_and_judge(first);
    });
    for buf in &buffers[..runs.len()] {
        out.write_all(buf)?;
    }
    Ok(())
}

/// Judges the lines of `run` in order.
fn judge_run(printer: &mut Printer<'_>, run: &[u8], out: &mut impl Write) -> io::Result<()> {
    let mut start = 0;
    match std::str::from_utf8(run) {
        Ok(text) => {
            // `\n` is ASCII: every cut is on a character boundary.
            for end in memchr::memchr_iter(b'\n', run) {
                judge_str(printer, &text[start..end], out)?;
                start = end + 1;
            }
            if start < run.len() {
                judge_str(printer, &text[start..], out)?;
            }
        }
        Err(_) => {
            for end in memchr::memchr_iter(b'\n', run) {
                judge_line(printer, &run[start..end], out)?;
                start = end + 1;
            }
            if start < run.len() {
                judge_line(printer, &run[start..], out)?;
            }
        }
    }
    Ok(())
}

/// One line without its `\n`, known to be UTF-8: strips a CR (or several)
/// and judges it.
#[inline]
fn judge_str(printer: &mut Printer<'_>, line: &str, out: &mut impl Write) -> io::Result<()> {
    printer.judge(line.trim_end_matches(['\r', '\n']), out)
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

    #[test]
    fn only_paths_and_http_urls_are_judged() {
        for ok in [
            "",
            "/",
            "/a?b",
            "http://x.example",
            "HTTPS://x.example/p",
            "http://[::1]:8080/",
        ] {
            assert_eq!(invalid_url(ok), None, "{ok:?}");
        }
        for bad in [
            "not a url",
            "mailto:x@example.com",
            "x.com/private",
            "ftp://x.example/",
            "http://",
            "https:///path",
            "private",
        ] {
            assert!(invalid_url(bad).is_some(), "{bad:?}");
        }
    }

    fn run(robots: &str, input: &[u8], capacity: usize) -> (String, Summary) {
        let rules = Robots::parse(robots.as_bytes()).agent_rules("x");
        let reader = io::BufReader::with_capacity(capacity, input);
        let mut out = Vec::new();
        let summary = check_lines(&rules, reader, &mut out, 2).expect("in-memory I/O");
        (String::from_utf8(out).expect("output is UTF-8"), summary)
    }

    #[test]
    fn lines_are_judged_whatever_the_buffer_size() {
        let robots = "user-agent: *\ndisallow: /private\n";
        let input = b"/a\r\n/private/x\n\n/b\xFF\n/private";
        let expected = "ALLOWED /a\n\
                        DISALLOWED /private/x\tline 2: Disallow: /private\n\
                        ALLOWED /\n\
                        ALLOWED /b\u{FFFD}\n\
                        DISALLOWED /private\tline 2: Disallow: /private\n";
        for capacity in [1, 2, 3, 5, 8, 64, 8192] {
            let (out, summary) = run(robots, input, capacity);
            assert_eq!(out, expected, "capacity {capacity}");
            assert_eq!(
                summary,
                Summary {
                    allowed: 3,
                    disallowed: 2,
                    invalid: 0,
                }
            );
        }
    }

    /// Several blocks, runs judged on several threads, a line longer than
    /// a block, CRLF and invalid UTF-8 in some runs: the same output, in the
    /// same order, as one thread gives.
    #[test]
    fn threads_and_blocks_keep_the_output_in_order() {
        let rules =
            Robots::parse(b"user-agent: *\ndisallow: /*/p\nallow: /a/p$\n").agent_rules("x");
        let mut input = Vec::new();
        for i in 0..120_000u32 {
            match i % 7 {
                0 => input.extend_from_slice(format!("https://h/{i}/p?q\r\n").as_bytes()),
                1 => input.extend_from_slice(b"/a/p\n"),
                2 if i % 5000 == 2 => input.extend_from_slice(b"/x/\xFF/p\n"),
                _ => input.extend_from_slice(format!("/{i}\n").as_bytes()),
            }
            if i == 60_000 {
                input.push(b'/');
                input.extend(std::iter::repeat_n(b'z', BLOCK + 10));
                input.extend_from_slice(b"/p\n");
            }
        }
        input.extend_from_slice(b"/last/p");
        let run = |threads| {
            let mut out = Vec::new();
            let summary =
                check_lines(&rules, &input[..], &mut out, threads).expect("in-memory I/O");
            (out, summary)
        };
        let (one, one_summary) = run(1);
        assert_eq!(one.iter().filter(|&&b| b == b'\n').count(), 120_002);
        assert!(one.ends_with(b"DISALLOWED /last/p\tline 2: Disallow: /*/p\n"));
        for threads in [2, 3] {
            let (many, summary) = run(threads);
            assert!(many == one, "{threads} threads");
            assert_eq!(summary, one_summary);
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
