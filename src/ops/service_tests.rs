//! The types and futures of the request path fit a hyper service: shared
//! across threads (`Send + Sync`) and awaited on any of them (`Send`).

use std::sync::Arc;

use crate::admit::auth_tests::{LOCAL, auth, basic};

#[test]
fn futures_and_types_fit_a_hyper_service() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let a = Arc::new(auth());
    send_sync(&a);
    let h = basic("bob:hunter2");
    send(a.check_async(LOCAL, Some(&h)));
    send_sync(&crate::admit::ClientAcl::default());
    let m = crate::metrics::Registry::new();
    send_sync(&m);
    send(crate::metrics::GaugeGuard::new(&Default::default()));
    let p = crate::judge::politeness::Politeness::new(Default::default());
    send_sync(&p);
    send(p.acquire("k", Some(1.0)));
}
