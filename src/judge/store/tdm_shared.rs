//! tdmrep.json in a fleet: one fetch per origin for the whole fleet,
//! through the same shared entries, lease, tags and replay stamps as
//! robots.txt ([`crate::fleet::robots`], [`crate::fleet::robots::Doc::Tdmrep`]).
//!
//! The shared `meta` says what the origin answered (status, final URL,
//! content type, the file's SHA-256) and which node fetched; the text is
//! the file as served, for a 2xx answer. Every node concludes from them
//! by the same status policy as from its own fetch, for the time the
//! entry has left on Redis's clock. A failure with no answer from the
//! origin (network, timeout) is this node's alone: not shared, the lease
//! given back. Redis unavailable, or another node's fetch not finished
//! within its lease: this node fetches for itself.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::RobotsCache;
use super::shared::WAIT_MARGIN;
use super::tdm::{Got, TdmState};
use crate::fleet::Fleet;
use crate::fleet::robots::{Doc, Lease, Look, POLL_EVERY, SharedRobots, Take, Text};
use crate::http::origin::Origin;
use crate::judge::archive::Digest;
use crate::judge::signals::tdmrep::MAX_BYTES;

/// What the fetching node got, as the fleet shares it.
#[derive(Debug, Serialize, Deserialize)]
struct SharedTdm {
    url: String,
    status: u16,
    final_url: String,
    #[serde(default)]
    content_type: Option<String>,
    /// The text's SHA-256 (with a text).
    #[serde(default)]
    sha256: Option<String>,
    /// The node that fetched.
    node: String,
}

impl RobotsCache {
    /// `origin`'s tdmrep.json in a fleet: as another node fetched it, or
    /// fetched by this one for all.
    pub(super) async fn tdmrep_shared(&self, fleet: &Arc<Fleet>, origin: &Origin) -> Arc<TdmState> {
        let key = origin.to_string();
        let timeout = self.fetcher.settings().timeout;
        let max_text = MAX_BYTES + 1;
        let mut take = Take::IfNotFresh;
        // At most: a look, a wait, a look that takes the lease over an
        // entry this node could not read, a wait.
        for _ in 0..2 {
            let look = match fleet
                .look_doc(Doc::Tdmrep, &key, take, timeout, max_text)
                .await
            {
                Ok(Look::Busy) => {
                    tracing::debug!(origin = %key, "waiting for another node's tdmrep.json fetch");
                    let deadline = tokio::time::Instant::now() + timeout + WAIT_MARGIN + POLL_EVERY;
                    fleet
                        .wait_doc(Doc::Tdmrep, &key, timeout, max_text, deadline)
                        .await
                }
                other => other,
            };
            match look {
                Ok(Look::Fresh(shared)) => match self.adopt_tdmrep(origin, shared) {
                    Some(state) => return Arc::new(state),
                    // Unreadable: fetched again, under the lease.
                    None => take = Take::Always,
                },
                Ok(Look::Lead(_, lease)) => return self.lead_tdmrep(fleet, origin, lease).await,
                Ok(Look::Busy) | Err(_) => break,
            }
        }
        tracing::debug!(origin = %key, "tdmrep.json not shared through the fleet's Redis (unavailable, or another node's fetch did not finish): fetched by this node");
        let (url, fetched) = self.get_tdmrep(origin).await;
        Arc::new(self.conclude_tdmrep(url, fetched, None))
    }

    /// Fetches `origin`'s tdmrep.json under `lease` and stores what the
    /// origin answered for the other nodes.
    async fn lead_tdmrep(
        &self,
        fleet: &Arc<Fleet>,
        origin: &Origin,
        lease: Lease,
    ) -> Arc<TdmState> {
        let key = origin.to_string();
        let (url, fetched) = self.get_tdmrep(origin).await;
        let shared = fetched.as_ref().ok().map(|got| {
            let success = (200..300).contains(&got.status);
            let meta = SharedTdm {
                url: url.clone(),
                status: got.status,
                final_url: got.final_url.clone(),
                content_type: got.content_type.clone(),
                sha256: success.then(|| Digest::of(&got.body).to_string()),
                node: fleet.node().to_string(),
            };
            let text = if success {
                Text::Set(got.body.clone())
            } else {
                Text::Drop
            };
            (meta, text)
        });
        let state = self.conclude_tdmrep(url, fetched, None);
        let fresh = state
            .until
            .saturating_duration_since(std::time::Instant::now());
        let stored = match shared.and_then(|(m, t)| Some((serde_json::to_vec(&m).ok()?, t))) {
            Some((meta, text)) => {
                fleet
                    .store_doc(
                        Doc::Tdmrep,
                        &key,
                        &lease,
                        &meta,
                        text,
                        fresh,
                        Duration::ZERO,
                        Duration::ZERO,
                    )
                    .await
            }
            // No answer from the origin: the next node fetches for itself.
            None => fleet
                .release_doc(Doc::Tdmrep, &key, &lease)
                .await
                .map(|()| false),
        };
        if !matches!(stored, Ok(true)) {
            tracing::debug!(origin = %key, "tdmrep.json fetched, not shared");
        }
        Arc::new(state)
    }

    /// The state another node's fetch says; `None` when the entry cannot
    /// be read back whole (not this origin's, a text that is not the one
    /// described).
    fn adopt_tdmrep(&self, origin: &Origin, shared: SharedRobots) -> Option<TdmState> {
        let meta: SharedTdm = serde_json::from_slice(&shared.meta).ok()?;
        let url = origin.url("/.well-known/tdmrep.json");
        if meta.url != url {
            return None;
        }
        let body = match (&meta.sha256, shared.text) {
            (Some(sha), Some(text)) => {
                (Digest::of(&text) == Digest::parse(sha)?).then_some(text)?
            }
            (Some(_), None) => return None,
            (None, _) => Vec::new(),
        };
        tracing::debug!(origin = %origin, node = meta.node, "tdmrep.json as another node fetched it");
        let got = Got {
            status: meta.status,
            final_url: meta.final_url,
            content_type: meta.content_type,
            max_age: None,
            body: body.into(),
        };
        Some(self.conclude_tdmrep(url, Ok(got), Some(shared.left)))
    }
}
