//! `robots-proxy identity init-key | directory`: the Web Bot Auth keys and
//! their directory, for teams that publish it on their own domain.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Subcommand;

use crate::config::Config;
use crate::identity::{directory, keys, unix};

#[derive(Subcommand)]
pub(crate) enum IdentityCommand {
    /// Add a new Ed25519 signing key to FILE (`identity.signing.key_file`,
    /// mode 0600; made if absent). The newest key whose start has come
    /// signs; the others stay in the directory until their end. Prints the
    /// key's id (its JWK thumbprint).
    InitKey {
        /// The key file.
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
        /// When the key starts signing, from now (publish the directory
        /// before then: verifiers cache it), e.g. "1d".
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "0s")]
        start_in: Duration,
        /// How long after its start the key stays in the directory.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "365days")]
        valid: Duration,
    },
    /// Print the key directory of a configuration
    /// (`/.well-known/http-message-signatures-directory` of its
    /// `identity.signing.signature_agent`), signed for that authority.
    Directory {
        /// The configuration file.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Print the response headers to serve it with, instead of the body.
        #[arg(long)]
        headers: bool,
    },
}

pub(crate) fn main(command: IdentityCommand) -> ExitCode {
    let result = match command {
        IdentityCommand::InitKey {
            key_file,
            start_in,
            valid,
        } => init_key(&key_file, start_in, valid),
        IdentityCommand::Directory { config, headers } => print_directory(&config, headers),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("robots-proxy identity: {e}");
            ExitCode::from(2)
        }
    }
}

fn init_key(path: &Path, start_in: Duration, valid: Duration) -> Result<(), String> {
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let now = unix(SystemTime::now());
    let nbf = now.saturating_add(start_in.as_secs());
    let exp = nbf.saturating_add(valid.as_secs().max(1));
    let (text, kid) = keys::add_key(existing.as_deref(), now, nbf, Some(exp))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    write_private(path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("{kid}");
    eprintln!(
        "{}: key {kid} added (mode 0600), signing in {}; publish the directory \
         (robots-proxy identity directory) before then, and reload every node",
        path.display(),
        humantime::format_duration(start_in)
    );
    Ok(())
}

/// Writes `text` to `path` through a temporary file of mode 0600 renamed
/// over it.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn print_directory(config: &Path, headers: bool) -> Result<(), String> {
    let config = Config::load(config).map_err(|e| e.to_string())?;
    let signer = config
        .identity
        .signer()?
        .ok_or("identity.signing.key_file is not set")?;
    let url: http::Uri = signer
        .agent_url()
        .parse()
        .map_err(|e| format!("identity.signing.signature_agent: {e}"))?;
    let authority = url
        .authority()
        .map(|a| a.as_str().to_ascii_lowercase())
        .unwrap_or_default();
    let authority = authority.strip_suffix(":443").unwrap_or(&authority);
    let dir = directory::directory(
        &signer,
        authority,
        SystemTime::now(),
        crate::app::DIRECTORY_VALID,
    );
    if headers {
        println!("Content-Type: {}", directory::MEDIA_TYPE);
        println!("Content-Digest: {}", dir.content_digest);
        if let (Some(input), Some(sig)) = (dir.signature_input, dir.signature) {
            println!("Signature-Input: {input}");
            println!("Signature: {sig}");
        }
    } else {
        print!("{}", dir.body);
    }
    Ok(())
}
