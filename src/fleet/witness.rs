//! Audit checkpoints witnessed in the fleet's Redis.
//!
//! Each checkpoint line a node's audit log writes (every
//! `audit.checkpoint_every` while lines are written, at start and at
//! reopen) is pushed, tagged under the fleet key ([`super::key`]), onto a
//! list of the node's own: `robots-proxy:<name>:{audit:<node>}:witness`,
//! newest first, trimmed to what `audit.witness_keep` holds at one
//! checkpoint per `checkpoint_every` (and a margin for reopens), and
//! expiring `witness_keep` after the last push. A cut of the log older
//! than the last witnessed checkpoint is then found by `audit verify`,
//! which reads the list back ([`Fleet::witnessed`]): an entry whose tag
//! fails is left out and reported, never taken as a kept copy.
//!
//! A push is one pipelined call off the writer's path (spawned); a
//! failure is logged once a minute, and the line stands in the log.
//!
//! What a writer to Redis can still do: delete or trim the list (a cut
//! newer than the oldest entry left is then found by no witness in Redis;
//! the `audit.witness_file` copy, if any, still holds), or push back an
//! entry of the same node taken earlier (a copy of a true checkpoint,
//! which proves nothing new). It cannot add a checkpoint the node did not
//! write, nor move one to another node's list.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Fleet, Unavailable};

/// Entries a list keeps beyond one per `checkpoint_every` over
/// `witness_keep`: checkpoints written at start and reopen.
const MARGIN: u64 = 64;

/// Most entries read back (a hostile list could hold millions).
pub const MAX_READ: usize = 1_000_000;

/// The minute a failed push was last logged.
static LOGGED: AtomicU64 = AtomicU64::new(0);

/// What the witness in Redis holds for a node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Witnessed {
    /// The checkpoint lines whose tag holds, oldest first.
    pub lines: Vec<Vec<u8>>,
    /// Entries whose tag failed (position in the list, 0 the newest).
    pub forged: Vec<usize>,
    /// The list's Redis key.
    pub key: String,
}

/// How many entries a list keeps: one per `every` over `keep`, and a
/// margin (`every` of zero: as if one a second).
pub fn kept_entries(keep: Duration, every: Duration) -> u64 {
    let every = every.max(Duration::from_secs(1)).as_secs_f64();
    (keep.as_secs_f64() / every).ceil() as u64 + MARGIN
}

impl Fleet {
    /// The Redis key of `node`'s witnessed checkpoints.
    pub fn witness_key(&self, node: &str) -> String {
        self.key(&format!("audit:{}", super::rate::escaped(node)), "witness")
    }

    /// Pushes a checkpoint `line` onto this node's list, in the
    /// background on `rt` (the audit log's checkpoints are written on a
    /// thread of their own); kept `keep`, with checkpoints every `every`.
    pub fn witness(
        self: &Arc<Self>,
        rt: &tokio::runtime::Handle,
        line: &[u8],
        keep: Duration,
        every: Duration,
    ) {
        let key = self.witness_key(&self.node);
        let sealed = self.keys.seal_entry(&key, line);
        let last = i64::try_from(kept_entries(keep, every)).unwrap_or(i64::MAX) - 1;
        let keep_ms = i64::try_from(super::millis(keep).max(1)).unwrap_or(i64::MAX);
        let fleet = self.clone();
        rt.spawn(async move {
            let pushed = fleet
                .call(|mut conn| async move {
                    redis::pipe()
                        .lpush(&key, sealed)
                        .ignore()
                        .ltrim(&key, 0, isize::try_from(last).unwrap_or(isize::MAX))
                        .ignore()
                        .pexpire(&key, keep_ms)
                        .ignore()
                        .query_async::<()>(&mut conn)
                        .await
                })
                .await;
            let minute = super::now_micros() / 60_000_000;
            if pushed.is_err() && LOGGED.swap(minute, Ordering::Relaxed) != minute {
                tracing::warn!(
                    "fleet: cannot push the audit checkpoint to the witness in Redis (the line stands in the log)"
                );
            }
        });
    }

    /// The checkpoints witnessed for `node`, oldest first, those whose
    /// tag fails left out and listed.
    pub async fn witnessed(&self, node: &str) -> Result<Witnessed, Unavailable> {
        let key = self.witness_key(node);
        let entries = self
            .call_always(|mut conn| {
                let key = key.clone();
                async move {
                    redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(MAX_READ as i64 - 1)
                        .query_async::<Vec<Vec<u8>>>(&mut conn)
                        .await
                }
            })
            .await?;
        let mut out = Witnessed {
            key,
            ..Witnessed::default()
        };
        for (i, entry) in entries.into_iter().enumerate() {
            match self
                .keys
                .open_entry(super::key::Kind::Witness, &out.key, entry)
            {
                Some(mut line) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    out.lines.push(line);
                }
                None => out.forged.push(i),
            }
        }
        out.lines.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_keeps_what_witness_keep_holds() {
        let day = Duration::from_secs(86_400);
        assert_eq!(kept_entries(day, Duration::from_secs(10)), 8_640 + MARGIN);
        assert_eq!(kept_entries(day, Duration::ZERO), 86_400 + MARGIN);
    }
}
