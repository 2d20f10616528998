//! sd_notify(3) messages for `Type=notify` units; each call is a no-op when
//! `NOTIFY_SOCKET` is unset (not started by systemd), so callers need no
//! special casing for foreground runs and tests.

use sd_notify::NotifyState;

/// Tells systemd the proxy is listening (`READY=1`): `systemctl start`
/// returns and units ordered after this one start. Send after `bind()`.
pub fn notify_ready() {
    send(&[NotifyState::Ready]);
}

/// Tells systemd the proxy is shutting down (`STOPPING=1`).
pub fn notify_stopping() {
    send(&[NotifyState::Stopping]);
}

/// Tells systemd a reload (SIGHUP) started; follow with [`notify_ready`]
/// when the new config is in force. The timestamp is what systemd >= 253
/// expects with `RELOADING=1`; older versions ignore it.
pub fn notify_reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

fn send(states: &[NotifyState<'_>]) {
    // Failing to notify must not stop the proxy; systemd will time the unit
    // out if READY never arrives, which is the right signal.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

#[cfg(test)]
#[path = "systemd_tests.rs"]
mod tests;
