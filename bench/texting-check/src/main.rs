//! `robots-proxy check`'s loop written on the `texting_robots` crate, the
//! baseline that `bench/robots-check` times it against:
//!
//! ```text
//! texting-check ROBOTS_TXT AGENT < urls > verdicts
//! ```
//!
//! One line per URL read from stdin, `ALLOWED url` or `DISALLOWED url`.
//! texting_robots does not say which rule decided, so unlike
//! `robots-proxy check` this prints no rule (less output, less work).

use std::io::{self, BufRead, BufWriter, Write};
use std::process::ExitCode;

use texting_robots::Robot;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, agent] = args.as_slice() else {
        eprintln!("usage: texting-check ROBOTS_TXT AGENT < urls");
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("texting-check: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let robot = match Robot::new(agent, &bytes) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("texting-check: {e}");
            return ExitCode::from(2);
        }
    };
    let stdin = io::stdin().lock();
    let mut out = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut disallowed = false;
    for line in stdin.split(b'\n') {
        let Ok(line) = line else {
            return ExitCode::from(2);
        };
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let url = String::from_utf8_lossy(line);
        let verdict: &[u8] = if robot.allowed(&url) {
            b"ALLOWED "
        } else {
            disallowed = true;
            b"DISALLOWED "
        };
        let written = out
            .write_all(verdict)
            .and_then(|()| out.write_all(url.as_bytes()))
            .and_then(|()| out.write_all(b"\n"));
        if written.is_err() {
            return ExitCode::SUCCESS;
        }
    }
    if out.flush().is_err() {
        return ExitCode::SUCCESS;
    }
    if disallowed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
