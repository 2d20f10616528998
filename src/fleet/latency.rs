//! An origin's recent response times, shared by the fleet
//! (`politeness.latency_factor`).
//!
//! Each response's time to first byte is pushed on one capped list per
//! origin (`…:{<origin>}:ttfb`, the newest [`SAMPLES`], microseconds),
//! kept [`KEPT_FOR`] after the last; the same script returns the median
//! of what the list holds, which the node keeps and uses for the
//! origin's next bookings. One round trip per response, only when
//! `latency_factor` is set.

use std::sync::LazyLock;
use std::time::Duration;

use super::{Fleet, Unavailable, micros, millis};

/// Samples kept per origin, here and on every node.
pub const SAMPLES: usize = 15;

/// How long an origin's samples are kept after its last response: an
/// origin not asked for that long is measured afresh.
pub const KEPT_FOR: Duration = Duration::from_secs(600);

/// KEYS: the origin's list. ARGV: the sample (µs), samples kept, ms kept.
/// Returns the upper median of the samples (µs); entries that are not
/// numbers count as 0.
const RECORD_SCRIPT: &str = r"
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local v = {}
for _, s in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local n = tonumber(s)
  if n == nil or n ~= n then n = 0 end
  v[#v + 1] = n
end
table.sort(v)
return math.floor(v[math.floor(#v / 2) + 1])
";

static RECORD: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RECORD_SCRIPT));

impl Fleet {
    /// Records `ttfb` for `origin`; returns the fleet's median of its
    /// recent samples.
    pub async fn record_ttfb(&self, origin: &str, ttfb: Duration) -> Result<Duration, Unavailable> {
        let key = self.key(origin, "ttfb");
        let median = self
            .call(|mut conn| async move {
                RECORD
                    .key(key)
                    .arg(micros(ttfb))
                    .arg(SAMPLES as u64)
                    .arg(millis(KEPT_FOR))
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(Duration::from_micros(u64::try_from(median).unwrap_or(0)))
    }
}
