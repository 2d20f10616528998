//! The proxy's own log events as a test's synchronisation points: a layer
//! that sends each event's message to a channel, installed for the test's
//! thread (the in-process proxy runs its tasks there on the current-thread
//! runtime of `#[tokio::test]`).

use std::fmt;

use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::NO_HANG;

/// The messages of the events logged on this thread, in order.
pub struct Events {
    rx: mpsc::UnboundedReceiver<String>,
    _guard: DefaultGuard,
}

impl Events {
    /// Starts capturing every event (all levels) logged on this thread.
    pub fn capture() -> Events {
        let (tx, rx) = mpsc::unbounded_channel();
        let subscriber = tracing_subscriber::registry().with(Forward(tx));
        Events {
            rx,
            _guard: tracing::subscriber::set_default(subscriber),
        }
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

struct Forward(mpsc::UnboundedSender<String>);

impl<S: tracing::Subscriber> Layer<S> for Forward {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let _ = self.0.send(message.0);
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
