//! The proxy's own log events as a test's synchronisation points: one
//! global subscriber (installed once per test binary, so every callsite is
//! always of interest, whichever test's thread reaches it first) sends each
//! event's message to the test whose thread logged it (the in-process proxy
//! runs its tasks there, on the current-thread runtime of `#[tokio::test]`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, Once};
use std::thread::ThreadId;

use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::NO_HANG;

/// The capturing test of each thread.
static SINKS: Mutex<Option<HashMap<ThreadId, mpsc::UnboundedSender<String>>>> = Mutex::new(None);

fn sinks<T>(f: impl FnOnce(&mut HashMap<ThreadId, mpsc::UnboundedSender<String>>) -> T) -> T {
    let mut guard = SINKS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// The messages of the events logged on this thread, in order.
pub struct Events {
    rx: mpsc::UnboundedReceiver<String>,
}

impl Events {
    /// Starts capturing every event (all levels) logged on this thread.
    pub fn capture() -> Events {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::registry().with(Forward);
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        let (tx, rx) = mpsc::unbounded_channel();
        sinks(|s| s.insert(std::thread::current().id(), tx));
        Events { rx }
    }

    /// Waits (bounded) for the next event whose message contains `needle`.
    pub async fn next(&mut self, needle: &str) -> String {
        let wait = async {
            while let Some(message) = self.rx.recv().await {
                if message.contains(needle) {
                    return message;
                }
            }
            panic!("event channel closed before {needle:?}")
        };
        tokio::time::timeout(NO_HANG, wait)
            .await
            .unwrap_or_else(|_| panic!("no event {needle:?} within {NO_HANG:?}"))
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        sinks(|s| s.remove(&std::thread::current().id()));
    }
}

struct Forward;

impl<S: tracing::Subscriber> Layer<S> for Forward {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let Some(tx) = sinks(|s| s.get(&std::thread::current().id()).cloned()) else {
            return;
        };
        let mut message = Message(String::new());
        event.record(&mut message);
        let _ = tx.send(message.0);
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
