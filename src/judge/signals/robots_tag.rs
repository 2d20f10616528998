//! `X-Robots-Tag` response headers and `<meta name="robots">` /
//! `<meta name="AGENT">` contents, as Google documents them ("Robots meta
//! tag, data-nosnippet, and X-Robots-Tag specifications",
//! developers.google.com/search/docs/crawling-indexing/robots-meta-tag),
//! plus `noai` and `noimageai`. Pure, linear, at most [`MAX_DIRECTIVES`]
//! directives read from one value.
//!
//! What each rule means for a declared purpose:
//!
//! | directive | purpose | why |
//! |---|---|---|
//! | `noai` | `train-ai=n` | the directive's meaning: no use in AI training sets |
//! | `noimageai` | `train-ai=n`, for an `image/*` response only | the same, for images |
//! | `noindex`, `none` | `search=n` | Google: "do not show this page … in search results" (`none` = `noindex, nofollow`) |
//! | `nosnippet` | `ai-input=n` | Google: it "will also prevent the content from being used as a direct input for AI Overviews and AI Mode" |
//! | `unavailable_after: DATE`, DATE past | `search=n` | Google: do not show the page in search results after DATE |
//! | `noarchive`, `nofollow`, `max-snippet` … | none | they govern how a result is shown or which links are followed, not whether the content is used |
//!
//! A value's directives apply to every crawler unless a user agent name
//! prefixes them (`examplebot: noai`); Google reads such a prefix as
//! scoping the directives after it. A scoped directive applies only when
//! the name is the proxy's robots product token (case-insensitive).
//! `unavailable_after` reads RFC 3339 and ISO 8601 dates
//! (`2025-06-25`, `2025-06-25T15:00:00Z`); another format is ignored.

use std::time::SystemTime;

/// Directives read from one value at most.
pub const MAX_DIRECTIVES: usize = 64;

/// A directive that speaks for a purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The purpose it disallows (`train-ai`, `search`, `ai-input`).
    pub purpose: &'static str,
    /// The directive as written, with its scope (`examplebot: noai`).
    pub directive: String,
}

/// Directives that take a value after a colon: their colon is not a user
/// agent's.
fn takes_value(name: &str) -> bool {
    matches!(
        name,
        "unavailable_after" | "max-snippet" | "max-image-preview" | "max-video-preview"
    )
}

/// The hits of one `X-Robots-Tag` value or meta `content`, for `agent`
/// (the robots product token), on a response of `content_type`, at `now`.
/// `scope`: the meta's own name when it is an agent's (`<meta
/// name="examplebot">`), which scopes every directive.
pub fn hits(
    value: &str,
    scope: Option<&str>,
    agent: &str,
    content_type: Option<&str>,
    now: SystemTime,
) -> Vec<Hit> {
    let is_image = content_type.is_some_and(|t| {
        t.trim_start()
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("image/"))
    });
    let mut scope: Option<String> = scope.map(str::to_owned);
    let mut out = Vec::new();
    for item in value.split(',').take(MAX_DIRECTIVES) {
        let mut item = item.trim();
        // `examplebot: noindex`: a user agent's name before a directive.
        if let Some((head, rest)) = item.split_once(':') {
            let head = head.trim();
            if !takes_value(&head.to_ascii_lowercase()) && !head.contains(' ') {
                scope = Some(head.to_owned());
                item = rest.trim();
            }
        }
        let applies = scope
            .as_deref()
            .is_none_or(|s| s.eq_ignore_ascii_case(agent));
        if !applies || item.is_empty() {
            continue;
        }
        let (name, arg) = match item.split_once(':') {
            Some((n, a)) => (n.trim().to_ascii_lowercase(), Some(a.trim())),
            None => (item.to_ascii_lowercase(), None),
        };
        let purposes: &[&'static str] = match name.as_str() {
            "noai" => &["train-ai"],
            "noimageai" if is_image => &["train-ai"],
            "noindex" | "none" => &["search"],
            "nosnippet" => &["ai-input"],
            "unavailable_after" if arg.and_then(parse_date).is_some_and(|d| d <= now) => {
                &["search"]
            }
            _ => &[],
        };
        let directive = match &scope {
            Some(s) => format!("{s}: {item}"),
            None => item.to_owned(),
        };
        for &purpose in purposes {
            out.push(Hit {
                purpose,
                directive: directive.clone(),
            });
        }
    }
    out
}

/// An RFC 3339 date-time, or an ISO 8601 date (midnight UTC).
fn parse_date(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    humantime::parse_rfc3339_weak(s)
        .or_else(|_| humantime::parse_rfc3339_weak(&format!("{s}T00:00:00")))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purposes(value: &str, agent: &str, ct: Option<&str>) -> Vec<&'static str> {
        hits(value, None, agent, ct, SystemTime::now())
            .into_iter()
            .map(|h| h.purpose)
            .collect()
    }

    #[test]
    fn noai_and_noimageai_disallow_training() {
        assert_eq!(purposes("noai", "x", Some("text/html")), ["train-ai"]);
        assert_eq!(
            purposes("noimageai", "x", Some("text/html")),
            Vec::<&str>::new()
        );
        assert_eq!(purposes("noimageai", "x", Some("image/png")), ["train-ai"]);
        assert_eq!(purposes("NoAI, noindex", "x", None), ["train-ai", "search"]);
    }

    /// Google's examples: `noindex`, `none`, `nosnippet`, scoped forms.
    #[test]
    fn googles_examples() {
        assert_eq!(purposes("noindex", "x", None), ["search"]);
        assert_eq!(purposes("none", "x", None), ["search"]);
        assert_eq!(
            purposes("noarchive, nofollow", "x", None),
            Vec::<&str>::new()
        );
        assert_eq!(
            purposes("max-snippet: 20, nosnippet", "x", None),
            ["ai-input"]
        );
        // `X-Robots-Tag: googlebot: nofollow` and `otherbot: noindex, nofollow`.
        assert_eq!(
            purposes("googlebot: nofollow", "googlebot", None),
            Vec::<&str>::new()
        );
        assert_eq!(
            purposes("otherbot: noindex, nofollow", "otherbot", None),
            ["search"]
        );
        assert_eq!(
            purposes("otherbot: noindex, nofollow", "googlebot", None),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_scoped_directive_applies_only_to_its_agent() {
        assert_eq!(
            purposes("examplebot: noai", "ExampleBot", None),
            ["train-ai"]
        );
        assert_eq!(
            purposes("otherbot: noai", "ExampleBot", None),
            Vec::<&str>::new()
        );
        let h = hits(
            "noai",
            Some("examplebot"),
            "examplebot",
            None,
            SystemTime::now(),
        );
        assert_eq!(h[0].directive, "examplebot: noai");
        assert!(
            hits(
                "noai",
                Some("otherbot"),
                "examplebot",
                None,
                SystemTime::now()
            )
            .is_empty()
        );
    }

    #[test]
    fn unavailable_after_a_past_date_disallows_search() {
        assert_eq!(
            purposes("unavailable_after: 2020-09-21", "x", None),
            ["search"]
        );
        assert_eq!(
            purposes("unavailable_after: 2020-09-21T15:00:00Z", "x", None),
            ["search"]
        );
        assert_eq!(
            purposes("unavailable_after: 2999-01-01", "x", None),
            Vec::<&str>::new()
        );
        assert_eq!(
            purposes("unavailable_after: 25 Jun 2010 15:00:00 PST", "x", None),
            Vec::<&str>::new(),
            "a format not read is ignored"
        );
    }

    #[test]
    fn long_values_read_at_most_the_cap() {
        let v = format!("{}noai", "nofollow, ".repeat(10_000));
        assert!(purposes(&v, "x", None).is_empty());
    }
}
