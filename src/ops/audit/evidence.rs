//! `evidence_removed` lines: an archived robots.txt that audit lines name
//! left the archive (or was never archived), said in the chained log so
//! that `audit verify` and `audit report` show which evidence is gone and
//! why.

use std::io;
use std::time::SystemTime;

use serde::Serialize;

use super::AuditLog;

/// `{"type":"evidence_removed","robots_sha256":…,"bytes":…,"reason":…}`.
#[derive(Debug, Serialize)]
pub(crate) struct EvidenceRemoved<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    /// RFC 3339, UTC.
    pub(crate) time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<&'a str>,
    pub(crate) robots_sha256: String,
    /// The text's length.
    pub(crate) bytes: u64,
    pub(crate) reason: &'a str,
}

impl AuditLog {
    /// Writes the line saying the archived text `sha256` is gone.
    pub(crate) fn write_evidence_removed(
        &self,
        sha256: String,
        bytes: u64,
        reason: &str,
    ) -> io::Result<()> {
        self.write(&EvidenceRemoved {
            kind: "evidence_removed",
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            node: self.node(),
            robots_sha256: sha256,
            bytes,
            reason,
        })
    }
}
