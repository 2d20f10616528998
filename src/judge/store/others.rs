//! Entries for agents the cache's entries are not compiled for (an
//! `/explain` question about another crawler): few, small, bounded by
//! count and by bytes.

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use super::entry::Entry;
use crate::http::origin::Origin;

/// An origin and an agent token the cache's entries are not compiled for.
type OtherKey = (Origin, Box<str>);

/// Memory budget of the entries for other agents.
const OTHER_AGENT_BYTES: usize = 16 << 20;

/// How many (origin, agent) entries for agents the proxy does not judge as
/// are kept.
const OTHER_AGENT_ENTRIES: usize = 64;

/// The side cache of other agents' entries.
pub(super) struct OtherAgents(Mutex<LruCache<OtherKey, Arc<Entry>>>);

impl OtherAgents {
    pub(super) fn new() -> OtherAgents {
        let cap = NonZeroUsize::new(OTHER_AGENT_ENTRIES).unwrap_or(NonZeroUsize::MIN);
        OtherAgents(Mutex::new(LruCache::new(cap)))
    }

    /// `origin`'s entry for `token`, fresh or not.
    pub(super) fn get(&self, origin: &Origin, token: &str) -> Option<Arc<Entry>> {
        self.0
            .lock()
            .get(&(origin.clone(), Box::from(token)))
            .cloned()
    }

    /// Keeps `entry`, then drops least recently used entries while over the
    /// byte budget: a few huge files must not hold memory outside the
    /// cache's budget.
    pub(super) fn put(&self, origin: &Origin, token: &str, entry: Arc<Entry>) {
        let mut others = self.0.lock();
        others.put((origin.clone(), Box::from(token)), entry);
        let mut bytes: usize = others.iter().map(|(_, e)| e.memory_usage()).sum();
        while bytes > OTHER_AGENT_BYTES && others.len() > 1 {
            match others.pop_lru() {
                Some((_, old)) => bytes = bytes.saturating_sub(old.memory_usage()),
                None => break,
            }
        }
    }

    /// Drops every agent's entry for `origin`.
    pub(super) fn forget(&self, origin: &Origin) {
        let mut others = self.0.lock();
        let keys: Vec<_> = others
            .iter()
            .filter(|((o, _), _)| o == origin)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            others.pop(&k);
        }
    }

    pub(super) fn clear(&self) {
        self.0.lock().clear();
    }
}
