//! The `<meta>` elements of an HTML document's head, read from its first
//! octets: linear in what it is given (at most [`MAX_HEAD`] by the
//! caller), at most [`MAX_METAS`] elements kept; comments, `<script>` and
//! `<style>` skipped; reading stops at `</head>` or `<body`.

/// The most of a response read for its head.
pub const MAX_HEAD: usize = 64 * 1024;

/// `<meta>` elements kept at most.
pub const MAX_METAS: usize = 64;

/// A `<meta name=… content=…>`: the name lower-cased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub name: String,
    pub content: String,
}

/// True when `buf` holds the end of the head (`</head>` or `<body`),
/// searching from `from` (less a few octets, for a tag cut between two
/// reads): each octet is looked at a bounded number of times.
pub fn head_ends(buf: &[u8], from: usize) -> bool {
    let start = from.saturating_sub(6);
    let Some(tail) = buf.get(start..) else {
        return false;
    };
    // Only at a `<`: text without markup costs one memchr pass.
    memchr::memchr_iter(b'<', tail)
        .any(|at| starts_ci(&tail[at..], b"</head") || starts_ci(&tail[at..], b"<body"))
}

/// The `<meta>` elements with a `name` in `buf`'s head.
pub fn metas(buf: &[u8]) -> Vec<Meta> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() && out.len() < MAX_METAS {
        let Some(lt) = memchr::memchr(b'<', &buf[i..]) else {
            break;
        };
        i += lt;
        let rest = &buf[i..];
        if rest.starts_with(b"<!--") {
            i = skip_past(buf, i + 4, b"-->");
            continue;
        }
        if starts_ci(rest, b"<script") || starts_ci(rest, b"<style") {
            let close: &[u8] = if starts_ci(rest, b"<script") {
                b"</script"
            } else {
                b"</style"
            };
            i = skip_past_ci(buf, i + 1, close);
            continue;
        }
        if starts_ci(rest, b"</head") || starts_ci(rest, b"<body") {
            break;
        }
        let end = memchr::memchr(b'>', rest).map_or(rest.len(), |e| e + 1);
        if starts_ci(rest, b"<meta")
            && rest
                .get(5)
                .is_some_and(|c| c.is_ascii_whitespace() || *c == b'/')
        {
            let (name, content) = attributes(&rest[5..end]);
            if let (Some(name), Some(content)) = (name, content) {
                out.push(Meta {
                    name: name.to_ascii_lowercase(),
                    content,
                });
            }
        }
        i += end.max(1);
    }
    out
}

fn starts_ci(b: &[u8], prefix: &[u8]) -> bool {
    b.get(..prefix.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

fn skip_past(buf: &[u8], from: usize, what: &[u8]) -> usize {
    buf.get(from..)
        .and_then(|t| memchr::memmem::find(t, what))
        .map_or(buf.len(), |at| from + at + what.len())
}

fn skip_past_ci(buf: &[u8], from: usize, what: &[u8]) -> usize {
    let mut i = from;
    while let Some(at) = buf.get(i..).and_then(|t| memchr::memchr(b'<', t)) {
        i += at;
        if starts_ci(&buf[i..], what) {
            return i + what.len();
        }
        i += 1;
    }
    buf.len()
}

/// `name` and `content` of a tag's attributes (quoted or not).
fn attributes(tag: &[u8]) -> (Option<String>, Option<String>) {
    let (mut name, mut content) = (None, None);
    let mut i = 0;
    while i < tag.len() {
        while i < tag.len() && (tag[i].is_ascii_whitespace() || tag[i] == b'/') {
            i += 1;
        }
        let start = i;
        while i < tag.len() && !b" \t\r\n=>/".contains(&tag[i]) {
            i += 1;
        }
        let attr = &tag[start..i];
        if attr.is_empty() {
            i += 1;
            continue;
        }
        while i < tag.len() && tag[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = None;
        if tag.get(i) == Some(&b'=') {
            i += 1;
            while i < tag.len() && tag[i].is_ascii_whitespace() {
                i += 1;
            }
            let (v, next) = match tag.get(i) {
                Some(&q @ (b'"' | b'\'')) => {
                    let from = i + 1;
                    let to = memchr::memchr(q, &tag[from..]).map_or(tag.len(), |e| from + e);
                    (&tag[from..to], to + 1)
                }
                _ => {
                    let from = i;
                    let mut to = i;
                    while to < tag.len() && !b" \t\r\n>".contains(&tag[to]) {
                        to += 1;
                    }
                    (&tag[from..to], to)
                }
            };
            value = Some(String::from_utf8_lossy(v).into_owned());
            i = next;
        }
        if attr.eq_ignore_ascii_case(b"name") {
            name = value;
        } else if attr.eq_ignore_ascii_case(b"content") {
            content = value;
        }
    }
    (name, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TDMRep §"TDM Metadata in HTML Content", the spec's example.
    #[test]
    fn the_tdmrep_example() {
        let html = br#"<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="tdm-reservation" content="1">
    <meta name="tdm-policy" content="https://provider.com/policies/policy.json">
    <title>Document title</title>
  </head>
  <body>
    <meta name="robots" content="noai">
  </body>
</html>"#;
        let m = metas(html);
        assert_eq!(
            m,
            [
                Meta {
                    name: "tdm-reservation".into(),
                    content: "1".into()
                },
                Meta {
                    name: "tdm-policy".into(),
                    content: "https://provider.com/policies/policy.json".into()
                },
            ]
        );
        assert!(head_ends(html, 0));
    }

    #[test]
    fn robots_metas_in_any_form() {
        let html = b"<HEAD><META NAME=Robots CONTENT='noindex, noai'/>\
<!-- <meta name=\"robots\" content=\"none\"> -->\
<script>var s = '<meta name=\"robots\" content=\"none\">';</script>\
<meta content=\"noai\" name=\"ExampleBot\"><meta name=x>";
        let m = metas(html);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].name, "robots");
        assert_eq!(m[0].content, "noindex, noai");
        assert_eq!(m[1].name, "examplebot");
        assert!(!head_ends(html, 0));
    }

    #[test]
    fn the_end_of_the_head_is_found_across_reads() {
        let html = b"<html><head><title>t</title></he";
        assert!(!head_ends(html, 0));
        let more = b"<html><head><title>t</title></head>";
        assert!(head_ends(more, html.len()));
    }

    #[test]
    fn garbage_is_read_in_one_pass_within_the_caps() {
        let junk = "<meta name=a content=b>".repeat(10_000);
        assert_eq!(metas(junk.as_bytes()).len(), MAX_METAS);
        let lts = "<".repeat(MAX_HEAD);
        assert!(metas(lts.as_bytes()).is_empty());
        assert!(metas(b"<meta name=\"x").is_empty());
        assert!(metas(b"<!-- never closed <meta name=a content=b>").is_empty());
    }
}
