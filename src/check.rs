//! The `check` command: judge many URLs against one robots.txt file.

use std::io::{self, BufRead, Write};

use crate::robots::{AgentRules, Verdict};

/// Counts of what [`check_lines`] and [`check_urls`] printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub allowed: u64,
    pub disallowed: u64,
}

fn write_verdict(out: &mut impl Write, url: &str, verdict: Verdict<'_>) -> io::Result<()> {
    out.write_all(if verdict.allowed {
        b"ALLOWED "
    } else {
        b"DISALLOWED "
    })?;
    out.write_all(url.as_bytes())?;
    if let Some(rule) = verdict.rule {
        write!(out, "\t{rule}")?;
    }
    out.write_all(b"\n")
}

fn tally(summary: &mut Summary, verdict: Verdict<'_>) {
    if verdict.allowed {
        summary.allowed += 1;
    } else {
        summary.disallowed += 1;
    }
}

/// Judges each URL and prints one line per URL to `out`.
pub fn check_urls<'u>(
    rules: &AgentRules,
    urls: impl IntoIterator<Item = &'u str>,
    out: &mut impl Write,
) -> io::Result<Summary> {
    let mut summary = Summary::default();
    for url in urls {
        let verdict = rules.check_url(url);
        tally(&mut summary, verdict);
        write_verdict(out, url, verdict)?;
    }
    Ok(summary)
}

/// Judges every line of `input` as a URL (CR/LF stripped; invalid UTF-8
/// replaced) and prints one line per URL to `out`. One reused line buffer:
/// no allocation per URL in the common case.
pub fn check_lines(
    rules: &AgentRules,
    mut input: impl BufRead,
    out: &mut impl Write,
) -> io::Result<Summary> {
    let mut summary = Summary::default();
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        let mut line: &[u8] = &buf;
        while let [rest @ .., b'\n' | b'\r'] = line {
            line = rest;
        }
        let url = String::from_utf8_lossy(line);
        let verdict = rules.check_url(&url);
        tally(&mut summary, verdict);
        write_verdict(out, &url, verdict)?;
    }
    Ok(summary)
}
