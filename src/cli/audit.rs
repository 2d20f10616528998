//! `robots-proxy audit`: what the audit log and the robots.txt archive
//! hold.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::config::Config;

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Print an archived robots.txt (the `robots_sha256` of an audit line),
    /// checked against its digest; with --meta, its metadata (JSON: each
    /// origin that served it, URLs, status, headers, first and last time in
    /// force) instead.
    ///
    /// Exit status: 0 when found and intact, 1 when missing or corrupt,
    /// 2 on a usage or I/O error.
    Robots {
        /// The SHA-256 (64 hex digits).
        sha256: String,
        /// Find the archive (`<state_dir>/robots-archive`) from this config.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the metadata instead of the text.
        #[arg(long)]
        meta: bool,
    },
}

pub(crate) fn run(command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Robots {
            sha256,
            config,
            meta,
        } => robots(&sha256, config.as_deref(), meta),
    }
}

fn robots(sha256: &str, config: Option<&std::path::Path>, meta: bool) -> ExitCode {
    use crate::judge::archive::{self, ArchiveError};
    let config = match config.map(Config::load).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            eprintln!("robots-proxy: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = config.archive_dir();
    let (text, found) = match archive::read(&dir, sha256) {
        Ok(found) => found,
        Err(e @ (ArchiveError::BadDigest(_) | ArchiveError::Io { .. })) => {
            eprintln!("robots-proxy: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("robots-proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if meta {
        serde_json::to_vec_pretty(&found)
            .map_err(std::io::Error::other)
            .and_then(|mut json| {
                json.push(b'\n');
                out.write_all(&json)
            })
    } else {
        out.write_all(&text)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("robots-proxy: {e}");
            ExitCode::from(2)
        }
    }
}
