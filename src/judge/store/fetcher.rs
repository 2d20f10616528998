//! How the cache fetches: the client, the fetch settings a reload
//! changes, and the fetch budget bodies wait for.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::http::origin::Origin;
use crate::judge::fetch::{self, FetchSettings, Fetched};
use crate::judge::fetch_budget::{FetchBudget, Reservation};
use crate::upstream::HttpClient;

pub(super) struct Fetcher {
    client: HttpClient,
    /// User-Agent, timeout, redirects: changed by a reload.
    settings: RwLock<Arc<FetchSettings>>,
    /// Bytes of files being fetched and compiled at once
    /// (`robots.fetch_budget_mib`), if bounded.
    pub(super) budget: Option<Arc<FetchBudget>>,
}

impl Fetcher {
    pub(super) fn new(client: HttpClient, settings: FetchSettings) -> Fetcher {
        Fetcher {
            client,
            settings: RwLock::new(Arc::new(settings)),
            budget: None,
        }
    }

    pub(super) fn client(&self) -> &HttpClient {
        &self.client
    }

    pub(super) fn settings(&self) -> Arc<FetchSettings> {
        self.settings.read().clone()
    }

    pub(super) fn set_settings(&self, settings: FetchSettings) {
        *self.settings.write() = Arc::new(settings);
    }

    /// Fetches `origin`'s robots.txt; the reservation holds the budget for
    /// the body until its rules are compiled.
    pub(super) async fn fetch(&self, origin: &Origin) -> (Fetched, Option<Reservation>) {
        let settings = self.settings();
        fetch::fetch(&self.client, origin, &settings, self.budget.as_ref()).await
    }
}
