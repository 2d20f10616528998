//! RSL 1.0 (Really Simple Licensing, RSL-SPEC-1.0, rslstandard.org/rsl)
//! licence documents, read purely with quick-xml's pull parser: at most
//! [`MAX_BYTES`] read, [`MAX_CONTENTS`] `<content>` and [`MAX_LICENSES`]
//! `<license>` elements kept, one pass over the text.
//!
//! * `<rsl xmlns="https://rslstandard.org/rsl">` holds `<content url=…
//!   [server=…]>` elements; `url` is a full URL or a path, matched by
//!   robots.txt's rules (RFC 9309: `*` and `$`). The first `<content>`
//!   that matches the request decides (a more specific one is expected
//!   first, as in TDMRep).
//! * Each `<license>` of it may `<permits type="usage">` and
//!   `<prohibits type="usage">` uses, a list of tokens: `all`, `ai-all`,
//!   `ai-train`, `ai-input`, `ai-index`, `search` (and the aipref
//!   vocabulary's `train-ai`, which RSL's own guides write). They map onto
//!   purposes: `all` every purpose, `ai-all` `train-ai`, `ai-input` and
//!   `ai-index`, `ai-train`/`train-ai` `train-ai`, the others themselves.
//!   A purpose a licence prohibits is `n`, whatever another permits
//!   (prohibition wins); one it permits is `y`; one it names neither way
//!   is unknown.
//! * `server=` names an RSL License Server: "clients must obtain a
//!   license for this asset, even if the license is free". The purposes
//!   the content's licences permit then need a licence token
//!   ([`Verdict::server`]).
//! * A document that is not XML, has no `<rsl>` root or no `<content>`
//!   cannot be read: the caller fails closed for the AI purposes.

use quick_xml::events::Event;

/// The most of an RSL document read.
pub const MAX_BYTES: usize = 256 * 1024;

/// `<content>` elements kept.
pub const MAX_CONTENTS: usize = 256;

/// `<license>` elements kept per `<content>`.
pub const MAX_LICENSES: usize = 16;

/// The purposes an RSL usage token covers.
pub fn purposes_of(token: &str) -> &'static [&'static str] {
    match token {
        "all" => &["train-ai", "ai-input", "ai-index", "search", "*"],
        "ai-all" => &["train-ai", "ai-input", "ai-index"],
        "ai-train" | "train-ai" => &["train-ai"],
        "ai-input" => &["ai-input"],
        "ai-index" => &["ai-index"],
        "search" => &["search"],
        _ => &[],
    }
}

fn covers(tokens: &[String], purpose: &str) -> Option<String> {
    tokens
        .iter()
        .find(|t| purposes_of(t).iter().any(|p| *p == purpose || *p == "*"))
        .cloned()
}

/// One `<license>`: the usage tokens it permits and prohibits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct License {
    pub permits: Vec<String>,
    pub prohibits: Vec<String>,
}

/// One `<content>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Content {
    /// 1-based position among the document's `<content>` elements.
    pub index: usize,
    /// `url` as written.
    pub url: String,
    pub server: Option<String>,
    pub licenses: Vec<License>,
}

/// A parsed RSL document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RslDoc {
    pub contents: Vec<Content>,
}

/// What a document says of one purpose for one URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `Some(false)`: prohibited; `Some(true)`: permitted; `None`: not named.
    pub permitted: Option<bool>,
    /// The token that decided.
    pub token: Option<String>,
    /// `<content>`'s licence server, when it names one.
    pub server: Option<String>,
    /// `content 1 (url "/", server "…")`.
    pub element: String,
}

impl RslDoc {
    /// Reads a document. `Err` (with why) when it cannot be read.
    pub fn parse(bytes: &[u8]) -> Result<RslDoc, String> {
        if bytes.len() > MAX_BYTES {
            return Err(format!("{} octets, longer than {MAX_BYTES}", bytes.len()));
        }
        let mut reader = quick_xml::Reader::from_reader(bytes);
        reader.config_mut().trim_text(true);
        let mut doc = RslDoc::default();
        let mut root = false;
        // Where the reader is: inside <content>, <license>, and a
        // <permits>/<prohibits> of type usage (true: prohibits).
        let mut content: Option<Content> = None;
        let mut license: Option<License> = None;
        let mut usage: Option<bool> = None;
        let mut count = 0usize;
        let mut buf = Vec::new();
        loop {
            let event = reader
                .read_event_into(&mut buf)
                .map_err(|e| format!("not XML at octet {}: {e}", reader.error_position()))?;
            match event {
                Event::Start(e) | Event::Empty(e) => {
                    let name = e.local_name();
                    let attr = |key: &str| -> Option<String> {
                        e.attributes().flatten().find_map(|a| {
                            (a.key.local_name().into_inner() == key)
                                .then(|| {
                                    a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                                        .ok()
                                        .map(|v| v.into_owned())
                                })
                                .flatten()
                        })
                    };
                    match name.into_inner() {
                        "rsl" => root = true,
                        "content" if root => {
                            count += 1;
                            content = (doc.contents.len() < MAX_CONTENTS).then(|| Content {
                                index: count,
                                url: attr("url").unwrap_or_default(),
                                server: attr("server"),
                                licenses: Vec::new(),
                            });
                        }
                        "license" if content.is_some() => license = Some(License::default()),
                        "permits" | "prohibits" if license.is_some() => {
                            usage = (attr("type").as_deref().unwrap_or("usage") == "usage")
                                .then_some(name.into_inner() == "prohibits");
                        }
                        _ => {}
                    }
                }
                Event::Text(t) => {
                    if let (Some(prohibits), Some(l)) = (usage, license.as_mut()) {
                        let text = t.xml10_content();
                        let tokens = text
                            .split([',', ' ', '\t', '\n', '\r'])
                            .filter(|s| !s.is_empty())
                            .take(64)
                            .map(str::to_ascii_lowercase);
                        if prohibits {
                            l.prohibits.extend(tokens);
                        } else {
                            l.permits.extend(tokens);
                        }
                    }
                }
                Event::End(e) => match e.local_name().into_inner() {
                    "permits" | "prohibits" => usage = None,
                    "license" => {
                        if let (Some(l), Some(c)) = (license.take(), content.as_mut())
                            && c.licenses.len() < MAX_LICENSES
                        {
                            c.licenses.push(l);
                        }
                    }
                    "content" => {
                        if let Some(c) = content.take() {
                            doc.contents.push(c);
                        }
                    }
                    _ => {}
                },
                Event::Eof => break,
                _ => {}
            }
            buf.clear();
        }
        if !root {
            return Err("no <rsl> element".into());
        }
        if doc.contents.is_empty() {
            return Err("no <content> element".into());
        }
        Ok(doc)
    }

    /// The first `<content>` that matches `url` (scheme://host/path) or its
    /// path and query.
    pub fn content_for(&self, url: &str, path_and_query: &str) -> Option<&Content> {
        use crate::robots::normalize::{Side, normalize_str};
        let path = normalize_str(path_and_query, Side::Url);
        self.contents.iter().find(|c| {
            let pattern = c.url.as_str();
            if pattern.starts_with('/') {
                crate::robots::pattern::matches(&normalize_str(pattern, Side::Pattern), &path)
            } else {
                // A full URL: its origin must be the request's, then the
                // rest is a path pattern.
                let Some(rest) = pattern
                    .split_once("://")
                    .and_then(|(_, r)| r.find('/').map(|i| &r[i..]).or(Some("/")))
                else {
                    return false;
                };
                let origin_len = pattern.len() - rest.len();
                url.get(..origin_len)
                    .is_some_and(|o| o.eq_ignore_ascii_case(&pattern[..origin_len]))
                    && crate::robots::pattern::matches(&normalize_str(rest, Side::Pattern), &path)
            }
        })
    }

    /// What the document says of `purpose` for a URL.
    pub fn verdict(&self, url: &str, path_and_query: &str, purpose: &str) -> Option<Verdict> {
        let c = self.content_for(url, path_and_query)?;
        let element = format!(
            "content {} (url {:?}{})",
            c.index,
            c.url,
            c.server
                .as_deref()
                .map(|s| format!(", server {s:?}"))
                .unwrap_or_default()
        );
        let prohibited = c
            .licenses
            .iter()
            .find_map(|l| covers(&l.prohibits, purpose));
        let permitted = c.licenses.iter().find_map(|l| covers(&l.permits, purpose));
        let (permitted, token) = match (prohibited, permitted) {
            (Some(t), _) => (Some(false), Some(t)),
            (None, Some(t)) => (Some(true), Some(t)),
            (None, None) => (None, None),
        };
        Some(Verdict {
            permitted,
            token,
            server: c.server.clone(),
            element,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://example.com/a/b";

    /// RSL's guide, "Prohibit AI training" (its quotes made ASCII).
    #[test]
    fn prohibit_ai_training() {
        let doc = RslDoc::parse(
            br#"<rsl xmlns="https://rslstandard.org/rsl">
  <content url="/">
    <license>
      <prohibits type="usage">train-ai</prohibits>
    </license>
  </content>
</rsl>"#,
        )
        .expect("parses");
        let v = doc.verdict(URL, "/a/b", "train-ai").expect("content");
        assert_eq!(v.permitted, Some(false));
        assert_eq!(v.element, "content 1 (url \"/\")");
        assert_eq!(
            doc.verdict(URL, "/a/b", "search").and_then(|v| v.permitted),
            None
        );
    }

    /// RSL and AI Preferences: a permitted use with a payment.
    #[test]
    fn permit_ai_training_with_payment() {
        let doc = RslDoc::parse(
            br#"<rsl xmlns="https://rslstandard.org/rsl">
  <content url="/">
    <license>
      <permits type="usage">train-ai</permits>
      <payment type="subscription">
        <custom>https://your-website.com/contact-form.html</custom>
      </payment>
    </license>
  </content>
</rsl>"#,
        )
        .expect("parses");
        let v = doc.verdict(URL, "/", "train-ai").expect("content");
        assert_eq!((v.permitted, v.server), (Some(true), None));
    }

    /// A licence server: the permitted uses need a licence.
    #[test]
    fn a_licence_server_is_named() {
        let doc = RslDoc::parse(
            br#"<rsl xmlns="https://rslstandard.org/rsl">
  <content url="/" server="https://rslcollective.org/api">
    <license>
      <permits type="usage">ai-all</permits>
      <payment type="use"><amount currency="USD">0.01</amount></payment>
    </license>
  </content>
</rsl>"#,
        )
        .expect("parses");
        let v = doc.verdict(URL, "/x", "ai-input").expect("content");
        assert_eq!(v.permitted, Some(true));
        assert_eq!(v.server.as_deref(), Some("https://rslcollective.org/api"));
        assert_eq!(v.token.as_deref(), Some("ai-all"));
    }

    #[test]
    fn prohibition_wins_and_the_first_matching_content_decides() {
        let doc = RslDoc::parse(
            br#"<rsl xmlns="https://rslstandard.org/rsl">
  <content url="https://example.com/premium/*">
    <license><permits type="usage">all</permits></license>
    <license><prohibits type="usage">ai-train ai-input</prohibits></license>
  </content>
  <content url="/">
    <license><permits type="usage">search, ai-index</permits></license>
    <license><prohibits type="user">commercial</prohibits></license>
  </content>
</rsl>"#,
        )
        .expect("parses");
        let premium = "https://example.com/premium/x";
        let v = doc
            .verdict(premium, "/premium/x", "train-ai")
            .expect("content");
        assert_eq!(
            (v.permitted, v.token.as_deref()),
            (Some(false), Some("ai-train"))
        );
        let v = doc
            .verdict(premium, "/premium/x", "search")
            .expect("content");
        assert_eq!(v.permitted, Some(true), "`all` permits search");
        // Another origin's full URL does not match: the path rule does.
        let v = doc
            .verdict("https://other.example/premium/x", "/premium/x", "train-ai")
            .expect("content");
        assert_eq!(v.element, "content 2 (url \"/\")");
        assert_eq!(v.permitted, None);
        // `type="user"` is not a usage.
        assert_eq!(
            doc.verdict(URL, "/a", "search").and_then(|v| v.permitted),
            Some(true)
        );
    }

    #[test]
    fn unreadable_documents_are_errors() {
        assert!(RslDoc::parse(b"not xml <<<").is_err());
        assert!(RslDoc::parse(b"<html><body/></html>").is_err());
        assert!(RslDoc::parse(b"<rsl xmlns=\"https://rslstandard.org/rsl\"></rsl>").is_err());
        assert!(RslDoc::parse(b"<rsl><content url=\"/\"><license>").is_err());
        assert!(RslDoc::parse(&vec![b' '; MAX_BYTES + 1]).is_err());
    }

    #[test]
    fn many_elements_stay_within_the_caps() {
        let many = "<content url=\"/\"><license><permits type=\"usage\">search</permits></license></content>"
            .repeat(1000);
        let doc = RslDoc::parse(format!("<rsl>{many}</rsl>").as_bytes()).expect("parses");
        assert_eq!(doc.contents.len(), MAX_CONTENTS);
        let deep = format!("<rsl>{}</rsl>", "<a>".repeat(10_000));
        let _ = RslDoc::parse(deep.as_bytes());
    }
}
