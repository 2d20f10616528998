//! The reloadable settings as each thread reads them, once per request.
//!
//! One shared `Arc` would have every request on every serving thread
//! write the same two cache lines (the lock's reader count and the `Arc`'s
//! count), which then move between cores on each request. Each thread
//! keeps a copy of its own instead (its own `Arc`), taken again when a
//! reload has bumped the generation: a request reads the generation (a
//! line only a reload writes) and counts on its thread's copy. A copy
//! (and the state its `Arc`s share) outlives a reload until its thread
//! next reads the settings: a serving thread does at its next request.

use parking_lot::RwLock;
use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Tells apart the settings of the proxies of one process (tests run
/// several).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A thread's copy: whose it is, the generation it was taken at, the
/// settings.
type ThreadCopy = (u64, u64, Arc<dyn Any + Send + Sync>);

thread_local! {
    static LOCAL: RefCell<Option<ThreadCopy>> = const { RefCell::new(None) };
}

/// A proxy's settings, replaced whole by a reload.
pub(crate) struct Current<T> {
    shared: RwLock<Arc<T>>,
    /// Bumped by each [`Current::set`], after the new settings are in.
    generation: AtomicU64,
    id: u64,
}

impl<T: Clone + Send + Sync + 'static> Current<T> {
    pub(crate) fn new(settings: T) -> Current<T> {
        Current {
            shared: RwLock::new(Arc::new(settings)),
            generation: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The settings in force: this thread's copy, taken again when a
    /// reload has come since (or other settings used the thread last).
    pub(crate) fn get(&self) -> Arc<T> {
        let generation = self.generation.load(Ordering::Acquire);
        LOCAL.with_borrow_mut(|local| {
            if let Some((id, taken, settings)) = local
                && *id == self.id
                && *taken == generation
                && let Ok(own) = settings.clone().downcast::<T>()
            {
                return own;
            }
            let own = Arc::new(T::clone(&self.shared.read()));
            *local = Some((self.id, generation, own.clone()));
            own
        })
    }

    pub(crate) fn set(&self, settings: T) {
        *self.shared.write() = Arc::new(settings);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_reaches_every_thread() {
        let current = Arc::new(Current::new(String::from("first")));
        assert_eq!(*current.get(), "first");
        current.set("second".into());
        assert_eq!(*current.get(), "second");
        let other = current.clone();
        let seen = std::thread::spawn(move || other.get().to_string())
            .join()
            .expect("thread");
        assert_eq!(seen, "second");
        // Other settings on the same thread are their own.
        let more = Current::new(String::from("more"));
        assert_eq!(*more.get(), "more");
        assert_eq!(*current.get(), "second");
        current.set("third".into());
        assert_eq!(*more.get(), "more");
        assert_eq!(*current.get(), "third");
    }
}
