//! `audit verify`'s witness in a fleet's Redis (`fleet::witness`): the
//! checkpoints a node pushed, read back and checked under the fleet key,
//! written to a file `verify` reads as it reads `audit.witness_file`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Config, FleetConfig, RedisTarget};
use crate::fleet::Fleet;

/// Where the witness is: a Redis URL given with `--witness`, the fleet of
/// the config file, and the key and node given on the command line.
pub(crate) struct RedisWitness<'a> {
    pub url: Option<&'a str>,
    pub fleet_key: Option<&'a Path>,
    pub fleet_name: Option<&'a str>,
    pub node: Option<&'a str>,
}

/// What was read: the file of good checkpoint lines (removed when this
/// is dropped), and what to say.
pub(crate) struct Read {
    pub file: PathBuf,
    /// One line on where the witness came from.
    pub said: String,
    /// The list's Redis key.
    key: String,
    /// Entries whose fleet-key tag failed: a finding.
    pub forged: Option<String>,
}

/// Whether `--witness` names a Redis server rather than a file.
pub(crate) fn is_redis(witness: &Path) -> bool {
    witness
        .to_str()
        .is_some_and(|w| w.starts_with("redis://") || w.starts_with("rediss://"))
}

/// Reads the witness: from `--witness redis://…` (with `--fleet-key`,
/// `--node` and `--fleet-name`, or what the config's `[fleet]` says),
/// else from the config's fleet. `Ok(None)`: no Redis witness to read.
pub(crate) fn read(given: &RedisWitness<'_>, config: &Config) -> Result<Option<Read>, String> {
    let fleet = match (given.url, &config.fleet) {
        (Some(url), f) => FleetConfig {
            redis: RedisTarget::Server(url.to_owned()),
            ..f.clone().unwrap_or_default()
        },
        (None, Some(f)) => f.clone(),
        (None, None) => return Ok(None),
    };
    let fleet = FleetConfig {
        key_file: given.fleet_key.map(Path::to_path_buf).or(fleet.key_file),
        name: given.fleet_name.map_or(fleet.name, str::to_owned),
        node: given.node.map_or(fleet.node, str::to_owned),
        // A list of a day's checkpoints is read whole.
        timeout: Duration::from_secs(30),
        ..fleet
    };
    if fleet.key_file.is_none() && !fleet.unauthenticated {
        return Err("the witness in Redis: give the fleet key (--fleet-key FILE, or fleet.key_file in --config)".into());
    }
    if fleet.node.is_empty() {
        return Err("the witness in Redis: give the node whose log this is (--node NAME, or fleet.node in --config)".into());
    }
    let mut settings = fleet.settings(config.listen);
    settings.keys = fleet.keys()?;
    let client = Fleet::new(&settings).map_err(|e| format!("the witness in Redis: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the witness in Redis: {e}"))?;
    let witnessed = runtime
        .block_on(client.witnessed(&settings.node))
        .map_err(|_| "the witness in Redis: Redis did not answer".to_string())?;
    let file = std::env::temp_dir().join(format!(
        "robots-proxy-redis-witness-{}-{}.jsonl",
        std::process::id(),
        crate::fleet::now_micros()
    ));
    write_new(&file, &witnessed.lines.concat()).map_err(|e| format!("{}: {e}", file.display()))?;
    let said = format!(
        "witness: {} checkpoints of node {} from Redis ({})",
        witnessed.lines.len(),
        settings.node,
        witnessed.key
    );
    let forged = (!witnessed.forged.is_empty()).then(|| {
        let at: Vec<String> = witnessed.forged.iter().map(usize::to_string).collect();
        format!(
            "{} witness entries in Redis ({}) failed their fleet-key check and were ignored \
             (written by something without the fleet key): at {} (0 the newest)",
            witnessed.forged.len(),
            witnessed.key,
            at.join(", ")
        )
    });
    Ok(Some(Read {
        key: witnessed.key.clone(),
        file,
        said,
        forged,
    }))
}

impl Read {
    /// `text` with the file the witness was read into named as what it is
    /// (its line N is the Nth checkpoint in Redis, oldest first).
    pub(crate) fn name_in(&self, text: &str) -> String {
        text.replace(
            &format!("{} line ", self.file.display()),
            &format!("the witness in Redis ({}), checkpoint ", self.key),
        )
    }
}

impl Drop for Read {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Writes `bytes` to a file that did not exist, readable by its owner only.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(bytes)
}
