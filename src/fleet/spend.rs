//! The fleet's pay per crawl spending of a day (`payments.budget_per_day`
//! for the whole fleet): one counter per day (`…:{spend}:<day>`, integer
//! millionths of the budget's currency), reserved with an atomic
//! check-and-add before a price is paid and settled to what was charged
//! after, kept two days. A node counts its own spending as well and pays
//! only when both counts hold the price: a counter in Redis can make a
//! node stricter, never let it spend past its own budget.

use std::sync::LazyLock;

use super::{Fleet, Unavailable};

/// How long a day's counter is kept (ms): past its day, and the next.
const KEPT_MS: u64 = 2 * 86_400 * 1000;

/// KEYS: the day's counter. ARGV: the price, the budget (millionths), ms
/// kept. Returns {1, spent after} when the price was added, {0, spent}
/// when the budget does not hold it. A value that is not a number counts
/// as the whole budget spent.
const RESERVE_SCRIPT: &str = r"
local raw = redis.call('GET', KEYS[1])
local spent = 0
if raw then spent = tonumber(raw) or tonumber(ARGV[2]) end
if spent + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, spent} end
local after = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, after}
";

/// KEYS: the day's counter. ARGV: what to add (negative: give back).
/// Never below 0.
const SETTLE_SCRIPT: &str = r"
if not redis.call('GET', KEYS[1]) then return 0 end
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') return 0 end
return v
";

static RESERVE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RESERVE_SCRIPT));
static SETTLE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SETTLE_SCRIPT));

impl Fleet {
    fn spend_key(&self, day: u64) -> String {
        self.key("spend", &day.to_string())
    }

    /// Adds `price` to `day`'s spending if `budget` holds it: `Ok(spent
    /// after)`, or `Err(spent)` when it does not.
    pub async fn reserve_spend(
        &self,
        day: u64,
        price: u64,
        budget: u64,
    ) -> Result<Result<u64, u64>, Unavailable> {
        let key = self.spend_key(day);
        let (added, spent): (i64, i64) = self
            .call(|mut conn| async move {
                RESERVE
                    .key(key)
                    .arg(price)
                    .arg(budget)
                    .arg(KEPT_MS)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let spent = u64::try_from(spent).unwrap_or(0);
        Ok(if added == 1 { Ok(spent) } else { Err(spent) })
    }

    /// Adds `delta` (negative: gives back) to `day`'s spending.
    pub async fn settle_spend(&self, day: u64, delta: i64) -> Result<(), Unavailable> {
        if delta == 0 {
            return Ok(());
        }
        let key = self.spend_key(day);
        self.call(|mut conn| async move {
            SETTLE
                .key(key)
                .arg(delta)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await?;
        Ok(())
    }

    /// `day`'s spending as the fleet counted it (a value that is not a
    /// number: `u64::MAX`, all spent).
    pub async fn spent(&self, day: u64) -> Result<u64, Unavailable> {
        let key = self.spend_key(day);
        let raw: Option<String> = self
            .call(|mut conn| async move { redis::cmd("GET").arg(key).query_async(&mut conn).await })
            .await?;
        Ok(match raw {
            None => 0,
            Some(v) => v.parse().unwrap_or(u64::MAX),
        })
    }
}
