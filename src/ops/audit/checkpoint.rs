//! Checkpoint lines: written at start and after every reopen, each says
//! what the chain's head was (the previous line's chain) and, with a
//! signing key, signs it, so a copy kept elsewhere proves every line up
//! to it. A checkpoint is chained like any line.

use std::io;
use std::time::SystemTime;

use serde::Serialize;

use super::chain::{self, Head};
use super::key::SigningKey;

/// Why a checkpoint was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The proxy started.
    Start,
    /// The file was reopened: SIGHUP, a replaced or deleted file, or
    /// writes coming back after a failure.
    Reopen,
    /// `audit.checkpoint_every` passed with lines written since the last.
    Interval,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Start => "start",
            Reason::Reopen => "reopen",
            Reason::Interval => "interval",
        }
    }
}

/// The checkpoint's fields, in the order they are written (M: the bytes
/// a signature covers).
#[derive(Serialize)]
struct Fields<'a> {
    seq: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    time: String,
    reason: &'static str,
    /// The checkpoint is the first line of its file.
    file_start: bool,
    /// Why a new chain begins here (see `tail::Resume::chain_start`).
    #[serde(skip_serializing_if = "Option::is_none")]
    chain_start: Option<&'a str>,
    /// The previous line's chain (64 zeros when a chain begins here).
    head: String,
}

/// The checkpoint line after `prev` (newline included) and the head it
/// makes.
pub(crate) fn line(
    prev: &Head,
    reason: Reason,
    file_start: bool,
    chain_start: Option<&str>,
    key: Option<&SigningKey>,
) -> io::Result<(Vec<u8>, Head)> {
    let seq = prev.seq + 1;
    let fields = Fields {
        seq,
        kind: "checkpoint",
        time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        reason: reason.name(),
        file_start,
        chain_start,
        head: chain::hex(&prev.chain),
    };
    let mut body = serde_json::to_vec(&fields).map_err(io::Error::other)?;
    if let Some(key) = key {
        let sig = key.sign(&body);
        chain::append_sig(&mut body, &sig);
    }
    let chain = chain::seal(&mut body, 0, &prev.chain);
    Ok((body, Head { seq, chain }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::audit::chain::Sealed;
    use crate::ops::audit::key::verifies;

    #[test]
    fn a_signed_checkpoint_links_to_the_head_and_its_signature_checks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (key, _) = SigningKey::load_or_create(&dir.path().join("k.pem")).expect("key");
        let prev = Head {
            seq: 41,
            chain: [9; 32],
        };
        let (line, head) = line(&prev, Reason::Reopen, true, None, Some(&key)).expect("line");
        assert_eq!(head.seq, 42);
        let text = std::str::from_utf8(&line).expect("utf-8");
        assert!(
            text.starts_with("{\"seq\":42,\"type\":\"checkpoint\",\"time\":\""),
            "{text}"
        );
        assert!(text.contains(&format!(
            "\"reason\":\"reopen\",\"file_start\":true,\"head\":\"{}\",\"sig\":\"",
            chain::hex(&[9; 32])
        )));
        let sealed = Sealed::split(&line[..line.len() - 1]).expect("sealed");
        assert_eq!(sealed.expected(&prev.chain), head.chain);
        let (message, sig) = sealed.signed().expect("signed");
        assert!(verifies(&key.public(), &message, &sig));
        assert!(!message.windows(5).any(|w| w == b"\"sig\""));
    }
}
