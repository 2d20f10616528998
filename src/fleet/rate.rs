//! Rate limits that hold across the fleet: a proxy user's `max_rps` and a
//! client address's password verifications (`auth_failures_per_minute`).
//!
//! The same GCRA as governor applies on one node (`admit::limits`), run as
//! one Lua script on Redis, on Redis's own clock (`TIME`): the key holds
//! the theoretical arrival time (TAT) in microseconds. A request at `now`
//! is refused while `now < TAT - interval × (burst - 1)`, with that
//! difference as its wait; otherwise it is admitted and the TAT becomes
//! `max(TAT, now) + interval`. A refusal stores nothing. The key expires
//! at its TAT, when a fresh key would say the same: idle allowances
//! vanish.
//!
//! A user's allowance is tagged `user:<name>` and an address's
//! `client:<address>`, so neither can share a key with an origin's state
//! (whose tag starts with a scheme). A user name is escaped: `{`, `}`,
//! `%`, spaces, controls and non-ASCII octets as `%XX`, so no name can end
//! the hash tag or meet another name's key.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Duration;

use super::{Fleet, Unavailable, micros};

/// Takes one request from KEYS[1]'s allowance. ARGV: the emission
/// interval (microseconds, at least 1), the burst (at least 1), and the
/// TAT this node's own last admission left (its floor, 0 if none).
/// Returns `{wait, tat, lowered}`: wait 0 when admitted (the TAT it
/// left), else the wait in microseconds (more than 0); lowered 1 when the
/// stored TAT was below the floor (then the floor is written back).
/// A stored value that is no number, or more than a day ahead (a corrupted
/// or hostile Redis), is read as none.
/// Microseconds since the epoch fit a Lua double exactly; they are
/// written with `%.0f` since `tostring` would round them.
const RATE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat ~= tat or tat > now + 86400000000 then tat = now end
if tat < now then tat = now end
local floor = tonumber(ARGV[3]) or 0
local lowered = 0
if tat < floor then
  tat = floor
  lowered = 1
  redis.call('SET', KEYS[1], string.format('%.0f', tat),
    'PX', string.format('%.0f', math.ceil((tat - now) / 1000)))
end
if now < tat - tau then
  return {string.format('%.0f', tat - tau - now), '0', lowered}
end
local next = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', next),
  'PX', string.format('%.0f', math.ceil((next - now) / 1000)))
return {'0', string.format('%.0f', next), lowered}
";

static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RATE_SCRIPT));

/// Whose allowance a fleet-wide rate limit takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rated<'a> {
    /// A proxy user (`max_rps`).
    User(&'a str),
    /// A client address (password verifications); an IPv6 address by its
    /// /64, as on one node.
    Client(IpAddr),
}

/// `name` with every octet that could end a hash tag, or make two names
/// one, written `%XX`: `{`, `}`, `%`, and anything outside printable
/// ASCII.
pub(crate) fn escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'{' | b'}' | b'%') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl Fleet {
    /// The Redis key of an allowance:
    /// `robots-proxy:<name>:{user:<escaped name>}:max_rps` or
    /// `robots-proxy:<name>:{client:<address>}:auth`.
    pub fn rate_key(&self, rated: Rated<'_>) -> String {
        match rated {
            Rated::User(user) => self.key(&format!("user:{}", escaped(user)), "max_rps"),
            Rated::Client(ip) => {
                let ip = crate::http::destination::client_key(ip);
                self.key(&format!("client:{ip}"), "auth")
            }
        }
    }

    /// Takes one request from `rated`'s fleet-wide allowance: one every
    /// `emission_interval`, up to `burst` at once (governor's quota of
    /// `with_period(emission_interval).allow_burst(burst)`). `Ok(Err(wait))`
    /// when refused: the next request is admitted after `wait`. Within
    /// the fleet's timeout, or `Unavailable`.
    pub async fn admit_rate(
        &self,
        rated: Rated<'_>,
        emission_interval: Duration,
        burst: u32,
    ) -> Result<Result<(), Duration>, Unavailable> {
        let key = self.rate_key(rated);
        let interval = micros(emission_interval).max(1);
        let burst = burst.max(1);
        let floor = self.rate_floors.get(&key);
        let place = &key;
        let (wait, tat, lowered) = self
            .call(|mut conn| async move {
                SCRIPT
                    .key(place)
                    .arg(interval)
                    .arg(burst)
                    .arg(floor)
                    .invoke_async::<(String, String, i64)>(&mut conn)
                    .await
            })
            .await?;
        if lowered == 1 {
            self.keys.rejected(super::key::Kind::Rate, &key);
        }
        let (Ok(wait), Ok(tat)) = (wait.parse::<u64>(), tat.parse::<u64>()) else {
            // No answer the script gives: the local limit applies.
            return Err(Unavailable);
        };
        if wait == 0 {
            self.rate_floors.raise(&key, tat);
            Ok(Ok(()))
        } else {
            Ok(Err(Duration::from_micros(wait)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_end_the_hash_tag_or_meet() {
        assert_eq!(escaped("alice"), "alice");
        assert_eq!(escaped("a}:x:{b"), "a%7D:x:%7Bb");
        assert_eq!(escaped("50%"), "50%25");
        assert_eq!(escaped("%7D"), "%257D");
        assert_eq!(escaped("é x\n"), "%C3%A9%20x%0A");
    }

    #[test]
    fn keys_are_tagged_by_user_or_address() {
        let fleet = Fleet::new(&crate::fleet::FleetSettings {
            redis: "redis://127.0.0.1:1/0".into(),
            name: "n".into(),
            node: "a".into(),
            timeout: Duration::from_millis(50),
            on_unavailable: crate::fleet::OnUnavailable::Local,
            keys: None,
        })
        .expect("fleet");
        assert_eq!(
            fleet.rate_key(Rated::User("a}b")),
            "robots-proxy:n:{user:a%7Db}:max_rps"
        );
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(
            fleet.rate_key(Rated::Client(ip("2001:db8:1:2::7"))),
            "robots-proxy:n:{client:2001:db8:1:2::}:auth"
        );
        assert_eq!(
            fleet.rate_key(Rated::Client(ip("::ffff:10.1.2.3"))),
            "robots-proxy:n:{client:10.1.2.3}:auth"
        );
    }
}
