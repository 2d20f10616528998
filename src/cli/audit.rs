//! `robots-proxy audit key | verify | report | robots`: the audit log's
//! hash chain checked, its signing key shown, its contents summed up, and
//! the archived robots.txt its lines name.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};

use crate::config::Config;
use crate::ops::audit::{SigningKey, chain, files, report, verify};

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Print the public key that checks signed checkpoints: the raw
    /// 32-byte Ed25519 key as 64 hex digits (give it to `verify --key`).
    ///
    /// Exit status: 0, or 2 when signing is off or the key cannot be read.
    Key {
        /// The config file whose `audit.signing_key` to read.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Check the hash chain of audit files (plain or gzip, in any order:
    /// they are read in the order of their first seq): prints a one-line
    /// summary, or the first bad file and line and why.
    ///
    /// Exit status: 0 intact, 1 a line is wrong, 2 on a usage or I/O error.
    Verify {
        /// Config file: its audit log is the default FILE, its signing
        /// key the default --key.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Public key that signed the checkpoints: 64 hex digits (as
        /// `audit key` prints them), or a file holding them.
        #[arg(long, value_name = "PUBKEY")]
        key: Option<String>,
        /// Checkpoint lines copied out of the log earlier: each must still
        /// be in the log, and the log must reach the newest of them.
        #[arg(long, value_name = "FILE")]
        checkpoints: Option<PathBuf>,
        /// The witness file (`audit.witness_file`, found from --config
        /// when not given): the checkpoints the proxy copied out as it
        /// wrote them, checked as --checkpoints are. A `redis://` or
        /// `rediss://` URL: the checkpoints a fleet node pushed to its
        /// Redis (with --fleet-key and --node, or the config's [fleet];
        /// with --config and a [fleet], found there when there is no
        /// witness file).
        #[arg(long, value_name = "FILE|URL")]
        witness: Option<PathBuf>,
        /// The fleet key that tagged the checkpoints in Redis
        /// (`fleet.key_file`).
        #[arg(long, value_name = "FILE")]
        fleet_key: Option<PathBuf>,
        /// The fleet's name (`fleet.name`), for the witness in Redis.
        #[arg(long, value_name = "NAME")]
        fleet_name: Option<String>,
        /// The node whose log this is (`fleet.node`), for the witness in
        /// Redis.
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Check from this seq on, skipping the lines before it: its line
        /// must match a copy kept in --checkpoints or --witness byte for
        /// byte (a log whose first files were rotated away).
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        from_seq: Option<u64>,
        /// The directory holding the log: its live file (the configured
        /// file name, audit.jsonl by default) and every rotation.
        #[arg(long, value_name = "DIR", conflicts_with = "files")]
        dir: Option<PathBuf>,
        /// Check an evidence pack (`audit export --out DIR`) offline: every
        /// file against its manifest, the chain with the pack's public key
        /// and witness, and every document the period's lines name.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "key", "checkpoints", "witness", "from_seq", "dir", "files"])]
        pack: Option<PathBuf>,
        /// Audit files, in any order; default: the configured audit log
        /// and every rotation beside it (.1, .2.gz, …).
        files: Vec<PathBuf>,
    },
    /// Write an evidence pack for a period into a new directory: the
    /// audit files holding it (whole, so the chain verifies), the witness
    /// file, the public key, every archived document the period's lines
    /// name, the verification, the HTML and CSV reports, and a manifest
    /// with each file's SHA-256 (check it with `audit verify --pack DIR`).
    ///
    /// Exit status: 0 when the pack is written, its log intact and every
    /// named document in it; 1 when written but not so (it says what);
    /// 2 on a usage or I/O error.
    Export {
        /// The period's start: RFC 3339 or a date (UTC).
        #[arg(long, value_name = "T")]
        from: String,
        /// The period's end: RFC 3339 (excluded), or a date (UTC, that
        /// whole day included).
        #[arg(long, value_name = "T")]
        to: String,
        /// The directory to write (new, or empty).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Config file: its audit log, archive, signing key and witness
        /// file are the defaults.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Public key that signed the checkpoints (64 hex digits or a
        /// file); default: the configured key's.
        #[arg(long, value_name = "PUBKEY")]
        key: Option<String>,
        /// The witness file; default: the configured `audit.witness_file`.
        #[arg(long, value_name = "FILE")]
        witness: Option<PathBuf>,
        /// The robots.txt archive; default: `<state_dir>/robots-archive`.
        #[arg(long, value_name = "DIR")]
        archive: Option<PathBuf>,
        /// The directory holding the log: its live file and every rotation.
        #[arg(long, value_name = "DIR", conflicts_with = "files")]
        dir: Option<PathBuf>,
        /// Audit files; default: the configured audit log and every
        /// rotation beside it.
        files: Vec<PathBuf>,
    },
    /// Sum audit files up: requests and blocks per day, by decision,
    /// origin, rule, agent, client and user, the most blocked URLs and
    /// the robots.txt versions seen.
    ///
    /// Exit status: 0, or 2 on a usage or I/O error.
    Report {
        /// Only lines at or after this time: RFC 3339 or a date (UTC).
        #[arg(long, value_name = "T")]
        since: Option<String>,
        /// Only lines before this time: RFC 3339, or a date (UTC, that
        /// whole day included).
        #[arg(long, value_name = "T")]
        until: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
        /// Rows per table.
        #[arg(long, value_name = "N", default_value_t = 20,
              value_parser = clap::value_parser!(u32).range(1..))]
        top: u32,
        /// Add the usage table: per origin, signal protocol and purpose,
        /// the requests refused (usage_disallowed) and annotated.
        #[arg(long)]
        usage: bool,
        /// Config file: its audit log is the default FILE.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Pay per crawl instead: charges per day, origin and user, and
        /// the total (from the `payment` lines).
        #[arg(long)]
        payments: bool,
        /// The directory holding the log: its live file and every rotation.
        #[arg(long, value_name = "DIR", conflicts_with = "files")]
        dir: Option<PathBuf>,
        /// Audit files (plain or gzip); default: the configured audit log
        /// and every rotation beside it.
        files: Vec<PathBuf>,
    },
    /// Print an archived robots.txt (the `robots_sha256` of an audit line),
    /// checked against its digest; with --meta, its metadata (JSON: each
    /// origin that served it, URLs, status, headers, first and last time in
    /// force) instead.
    ///
    /// Exit status: 0 when found and intact, 1 when missing or corrupt,
    /// 2 on a usage or I/O error.
    Robots {
        /// The SHA-256 (64 hex digits), or an unambiguous prefix of it (8 or
        /// more).
        sha256: String,
        /// Find the archive (`<state_dir>/robots-archive`) from this config.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the metadata instead of the text.
        #[arg(long)]
        meta: bool,
    },
}

/// `--format` of `audit report`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum ReportFormat {
    Text,
    Csv,
    Json,
    /// One self-contained file: inline CSS and SVG, no script.
    Html,
}

pub(crate) fn main(command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Key { config } => key(config.as_deref()),
        AuditCommand::Verify {
            pack: Some(pack), ..
        } => verify_pack(&pack),
        AuditCommand::Verify {
            config,
            key,
            checkpoints,
            witness,
            fleet_key,
            fleet_name,
            node,
            from_seq,
            dir,
            pack: None,
            files,
        } => verify_command(
            config.as_deref(),
            key.as_deref(),
            Kept {
                checkpoints,
                witness,
                from_seq,
                fleet: super::witness::RedisWitness {
                    url: None,
                    fleet_key: fleet_key.as_deref(),
                    fleet_name: fleet_name.as_deref(),
                    node: node.as_deref(),
                },
            },
            Source { dir, files },
        ),
        AuditCommand::Report {
            since,
            until,
            format,
            top,
            usage,
            config,
            payments,
            dir,
            files,
        } => report_command(
            Period { since, until },
            format,
            (top, usage),
            config.as_deref(),
            payments,
            Source { dir, files },
        ),
        AuditCommand::Export {
            from,
            to,
            out,
            config,
            key,
            witness,
            archive,
            dir,
            files,
        } => export(
            ExportPeriod { from, to, out },
            config.as_deref(),
            key.as_deref(),
            witness,
            archive,
            Source { dir, files },
        ),
        AuditCommand::Robots {
            sha256,
            config,
            meta,
        } => robots(&sha256, config.as_deref(), meta),
    }
}

fn robots(sha256: &str, config: Option<&Path>, meta: bool) -> ExitCode {
    use crate::judge::archive::{self, ArchiveError};
    let config = match load(config) {
        Ok(c) => c,
        Err(e) => return usage("robots", e),
    };
    let dir = config.archive_dir();
    let (text, found) = match archive::read(&dir, sha256) {
        Ok(found) => found,
        Err(
            e
            @ (ArchiveError::BadDigest(_) | ArchiveError::Ambiguous(..) | ArchiveError::Io { .. }),
        ) => {
            return usage("robots", e);
        }
        Err(e) => {
            eprintln!("robots-proxy audit robots: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = io::stdout().lock();
    let written = if meta {
        serde_json::to_vec_pretty(&found)
            .map_err(io::Error::other)
            .and_then(|mut json| {
                json.push(b'\n');
                out.write_all(&json)
            })
    } else {
        out.write_all(&text)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage("robots", e),
    }
}

/// Prints `robots-proxy audit <command>: <message>` and returns exit status 2.
fn usage(command: &str, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("robots-proxy audit {command}: {message}");
    ExitCode::from(2)
}

fn load(config: Option<&Path>) -> Result<Config, String> {
    match config {
        Some(path) => Config::load(path).map_err(|e| e.to_string()),
        None => Ok(Config::default()),
    }
}

/// The configured signing key's public half.
fn configured_key(config: &Config) -> Result<Option<[u8; 32]>, String> {
    match config.audit_signing_key() {
        Some(path) => SigningKey::load(&path)
            .map(|k| Some(k.public()))
            .map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

fn key(config: Option<&Path>) -> ExitCode {
    let config = match load(config) {
        Ok(c) => c,
        Err(e) => return usage("key", e),
    };
    let Some(path) = config.audit_signing_key() else {
        return usage(
            "key",
            "checkpoints are not signed: set `audit.signing_key` (true, or a path) in the config",
        );
    };
    if !path.exists() {
        return usage(
            "key",
            format!(
                "{}: no key yet: the proxy creates it when it starts with this config",
                path.display()
            ),
        );
    }
    match SigningKey::load(&path) {
        Ok(key) => {
            println!("{}", chain::hex(&key.public()));
            ExitCode::SUCCESS
        }
        Err(e) => usage("key", e),
    }
}

/// A public key given as 64 hex digits, or a file holding them.
fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let from = |s: &str| chain::parse_hex32(s.trim().to_ascii_lowercase().as_bytes());
    if let Some(key) = from(text) {
        return Ok(key);
    }
    let contents = std::fs::read_to_string(text).map_err(|e| {
        format!("--key {text:?} is neither 64 hex digits nor a file holding them: {e}")
    })?;
    from(&contents).ok_or_else(|| format!("{text}: not 64 hex digits (as `audit key` prints)"))
}

/// The copies the log is checked against.
struct Kept<'a> {
    checkpoints: Option<PathBuf>,
    witness: Option<PathBuf>,
    from_seq: Option<u64>,
    /// The witness in a fleet's Redis.
    fleet: super::witness::RedisWitness<'a>,
}

/// Where the audit files are: given, or found beside the live file.
struct Source {
    dir: Option<PathBuf>,
    files: Vec<PathBuf>,
}

/// The files given, else the live file (in `--dir`, or the configured
/// one) and every rotation beside it.
fn files_or_default(source: Source, config: &Config) -> Result<Vec<PathBuf>, String> {
    if !source.files.is_empty() {
        return Ok(source.files);
    }
    let mut live = config.audit_path();
    if let Some(dir) = source.dir {
        if !dir.is_dir() {
            return Err(format!("--dir {}: not a directory", dir.display()));
        }
        let name = live
            .file_name()
            .map(ToOwned::to_owned)
            .unwrap_or_else(|| "audit.jsonl".into());
        live = dir.join(name);
    }
    files::discover(&live).map_err(|e| format!("{}: {e}", live.display()))
}

fn verify_command(
    config: Option<&Path>,
    key: Option<&str>,
    kept: Kept<'_>,
    source: Source,
) -> ExitCode {
    let config = match load(config) {
        Ok(c) => c,
        Err(e) => return usage("verify", e),
    };
    let key = match key_or_configured(key, &config) {
        Ok(key) => key,
        Err(e) => return usage("verify", e),
    };
    let files = match files_or_default(source, &config) {
        Ok(files) => files,
        Err(e) => return usage("verify", e),
    };
    // The configured witness, when there is one to read; else a
    // fleet's, in Redis.
    let mut fleet = kept.fleet;
    let url = kept
        .witness
        .as_deref()
        .filter(|w| super::witness::is_redis(w));
    fleet.url = url.and_then(Path::to_str);
    let witness = kept.witness.clone().filter(|_| url.is_none()).or_else(|| {
        config
            .audit
            .witness_file
            .clone()
            .filter(|path| path.exists() && url.is_none())
    });
    let redis = if witness.is_none() {
        match super::witness::read(&fleet, &config) {
            Ok(read) => read,
            Err(e) if fleet.url.is_some() => return usage("verify", e),
            // Found from the config only: said, and verified without it.
            Err(e) => {
                eprintln!("robots-proxy audit verify: {e}: not checked against it");
                None
            }
        }
    } else {
        None
    };
    let witness = witness.or_else(|| redis.as_ref().map(|r| r.file.clone()));
    let opts = verify::Options {
        key,
        kept: kept.checkpoints,
        witness,
        from_seq: kept.from_seq,
        kept_go_on: false,
    };
    let outcome = verify::verify(&files, &opts);
    if let Some(read) = &redis {
        println!("{}", read.said);
    }
    let forged = redis.as_ref().and_then(|r| r.forged.as_deref());
    match outcome {
        Ok(verify::Outcome::Intact(summary)) => {
            println!("{summary}");
            match forged {
                Some(forged) => {
                    println!("FAILED: {forged}");
                    ExitCode::from(1)
                }
                None => ExitCode::SUCCESS,
            }
        }
        Ok(verify::Outcome::Broken(finding)) => {
            // A copy kept in the witness in Redis is named there, not by
            // the file it was read into.
            let finding = match &redis {
                Some(read) => read.name_in(&finding.to_string()),
                None => finding.to_string(),
            };
            println!("FAILED: {finding}");
            if let Some(forged) = forged {
                println!("FAILED: {forged}");
            }
            ExitCode::from(1)
        }
        Err(e) => usage("verify", e),
    }
}

/// `--since` and `--until` as given.
struct Period {
    since: Option<String>,
    until: Option<String>,
}

fn report_command(
    Period { since, until }: Period,
    format: ReportFormat,
    (top, usage_table): (u32, bool),
    config: Option<&Path>,
    payments: bool,
    source: Source,
) -> ExitCode {
    let config = match load(config) {
        Ok(c) => c,
        Err(e) => return usage("report", e),
    };
    let time = |text: Option<String>, end_of_day, flag| match text {
        Some(t) => report::parse_time(&t, end_of_day)
            .map(Some)
            .map_err(|e| format!("{flag}: {e}")),
        None => Ok(None),
    };
    let (since, until) = match (time(since, false, "--since"), time(until, true, "--until")) {
        (Ok(s), Ok(u)) => (s, u),
        (Err(e), _) | (_, Err(e)) => return usage("report", e),
    };
    let opts = report::Options {
        since,
        until,
        top: top as usize,
        usage: usage_table,
    };
    let files = match files_or_default(source, &config) {
        Ok(files) => files,
        Err(e) => return usage("report", e),
    };
    let format = match format {
        ReportFormat::Text => report::Format::Text,
        ReportFormat::Csv => report::Format::Csv,
        ReportFormat::Json => report::Format::Json,
        ReportFormat::Html => report::Format::Html,
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let written = if payments {
        match report::payments::payments(&files, &opts) {
            Ok(r) => report::payments::write(&r, format, &mut out),
            Err(e) => return usage("report", e),
        }
    } else {
        match report::report(&files, &opts) {
            Ok(r) => report::write(&r, format, &mut out),
            Err(e) => return usage("report", e),
        }
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => usage("report", e),
    }
}

/// `audit export`'s period and directory.
struct ExportPeriod {
    from: String,
    to: String,
    out: PathBuf,
}

/// The key given, else the configured one's public half.
fn key_or_configured(key: Option<&str>, config: &Config) -> Result<Option<[u8; 32]>, String> {
    match key.map(parse_key).transpose()? {
        Some(key) => Ok(Some(key)),
        None => configured_key(config).map_err(|e| format!("the configured signing key: {e}")),
    }
}

/// The witness given, else the configured one when it exists.
fn witness_or_configured(witness: Option<PathBuf>, config: &Config) -> Option<PathBuf> {
    witness.or_else(|| {
        config
            .audit
            .witness_file
            .clone()
            .filter(|path| path.exists())
    })
}

fn export(
    period: ExportPeriod,
    config: Option<&Path>,
    key: Option<&str>,
    witness: Option<PathBuf>,
    archive: Option<PathBuf>,
    source: Source,
) -> ExitCode {
    use crate::ops::audit::pack;
    let config = match load(config) {
        Ok(c) => c,
        Err(e) => return usage("export", e),
    };
    let (from, to) = match (
        report::parse_time(&period.from, false),
        report::parse_time(&period.to, true),
    ) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) => return usage("export", format!("--from: {e}")),
        (_, Err(e)) => return usage("export", format!("--to: {e}")),
    };
    let key = match key_or_configured(key, &config) {
        Ok(key) => key,
        Err(e) => return usage("export", e),
    };
    let files = match files_or_default(source, &config) {
        Ok(files) => files,
        Err(e) => return usage("export", e),
    };
    let job = pack::Export {
        from,
        to,
        files,
        archive: archive.unwrap_or_else(|| config.archive_dir()),
        key,
        witness: witness_or_configured(witness, &config),
        out: period.out,
    };
    let made = match pack::export(&job) {
        Ok(made) => made,
        Err(e) => return usage("export", e),
    };
    println!(
        "wrote {}: {} audit file(s), {} document(s); manifest SHA-256 {}",
        job.out.display(),
        made.logs,
        made.documents,
        made.manifest_sha256
    );
    println!("verify: {}", made.verify);
    let mut unexplained = 0;
    for gone in &made.gone {
        match gone.removed_at_seq {
            Some(seq) => println!(
                "not in the pack: {} {}: evidence_removed at seq {seq}: {}",
                gone.field,
                gone.sha256,
                report::printable_text(&gone.reason)
            ),
            None => {
                unexplained += 1;
                println!(
                    "MISSING: {} {}: {}",
                    gone.field,
                    report::printable_text(&gone.sha256),
                    report::printable_text(&gone.reason)
                );
            }
        }
    }
    if made.intact && unexplained == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn verify_pack(dir: &Path) -> ExitCode {
    match crate::ops::audit::pack::check(dir) {
        Ok(checked) => {
            for problem in &checked.problems {
                println!("FAILED: {problem}");
            }
            if checked.problems.is_empty() {
                println!("pack intact: {}", dir.display());
            }
            for note in &checked.notes {
                println!("  {note}");
            }
            if checked.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => usage("verify", e),
    }
}
