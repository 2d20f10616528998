//! RSL 1.0 licence documents as usage signals: what a document says of
//! each declared purpose for a URL ([`crate::judge::signals::rsl`]), the
//! licence token a `server=` asks for, and failing closed for the AI
//! purposes when the document cannot be read.
//!
//! The proxy does not buy licences: a token obtained from a License
//! Server is configured (`[[usage.licenses]]`) and sent as
//! `Authorization: License <token>`; without one, the AI purposes the
//! document licenses through that server are refused.

use http::HeaderValue;

use super::UsageNote;
use super::signals::Protocol;
use super::store::rsl::{RslOutcome, RslState};

/// Purposes an RSL document's licensing speaks for (and fails closed for).
pub(crate) fn is_ai_purpose(purpose: &str) -> bool {
    matches!(purpose, "train-ai" | "ai-input" | "ai-index")
}

/// What the licence documents of a request say.
#[derive(Default)]
pub(crate) struct Licensed {
    /// One per declared purpose a document disallows.
    pub(crate) notes: Vec<UsageNote>,
    /// The configured token for the License Server of the content, when
    /// one is needed and configured.
    pub(crate) authorization: Option<HeaderValue>,
}

impl Licensed {
    /// Adds what `state` (named by `source`: `robots.txt line 3 License`,
    /// `Link header`) says of `purposes` for `url` (`path` its path and
    /// query); `tokens`, the configured License Servers' tokens.
    pub(crate) fn add(
        &mut self,
        state: &RslState,
        source: &str,
        (url, path): (&str, &str),
        purposes: &[String],
        tokens: &[(String, HeaderValue)],
    ) {
        let digest = state
            .digest
            .map(|d| format!(" sha256={d}"))
            .unwrap_or_default();
        let mut note = |purpose: &str, what: String| {
            self.notes.push(UsageNote::signal(
                purpose,
                Protocol::Rsl,
                format!("rsl: {} ({source}): {what}", state.url),
                format!("{}{digest} ({source}) {what}", state.url),
            ));
        };
        let doc = match &state.outcome {
            RslOutcome::Absent(_) => return,
            RslOutcome::Failed(why) => {
                for p in purposes.iter().filter(|p| is_ai_purpose(p)) {
                    note(p, format!("unusable, refused for AI purposes: {why}"));
                }
                return;
            }
            RslOutcome::Doc(doc) => doc,
        };
        for p in purposes {
            let Some(v) = doc.verdict(url, path, p) else {
                continue;
            };
            let token = v.token.as_deref().unwrap_or("");
            match (v.permitted, &v.server) {
                (Some(false), _) => note(p, format!("{} prohibits {token}", v.element)),
                (Some(true), Some(server)) if is_ai_purpose(p) => {
                    let wanted = server.trim_end_matches('/');
                    match tokens.iter().find(|(s, _)| s == wanted) {
                        Some((_, value)) => self.authorization = Some(value.clone()),
                        None => note(
                            p,
                            format!(
                                "{} permits {token} under a licence from {server}: no token configured (usage.licenses)",
                                v.element
                            ),
                        ),
                    }
                }
                _ => {}
            }
        }
    }
}

/// The `rel="license"` targets of `Link` header values (RFC 8288), resolved
/// against `base`; at most 8.
pub(crate) fn license_links<'a>(values: impl Iterator<Item = &'a str>, base: &str) -> Vec<String> {
    let mut out = Vec::new();
    for value in values {
        for link in value.split(',') {
            let Some((target, params)) = link.trim().split_once('>') else {
                continue;
            };
            let target = target.trim().trim_start_matches('<');
            let is_license = params.split(';').any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel")
                        && v.trim()
                            .trim_matches('"')
                            .split_ascii_whitespace()
                            .any(|r| r.eq_ignore_ascii_case("license"))
                })
            });
            if is_license
                && out.len() < 8
                && let Some(uri) = crate::http::origin::resolve_reference(base, target)
            {
                out.push(uri.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn license_links_are_read_and_resolved() {
        let links = license_links(
            [
                r#"</license.xml>; rel="license"; type="application/rsl+xml""#,
                r#"<https://a.example/x>; rel="alternate", <https://b.example/l.rsl>; rel=license"#,
            ]
            .into_iter(),
            "https://site.example/page",
        );
        assert_eq!(
            links,
            [
                "https://site.example/license.xml",
                "https://b.example/l.rsl"
            ]
        );
    }
}
