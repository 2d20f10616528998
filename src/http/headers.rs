//! Header rules both sides of the proxy and the response cache share.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
pub(crate) static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// The index of `name` in [`HOP_BY_HOP`], if it is there: a match on the
/// lower-case name (as a `HeaderName` is), cheaper than comparing with each
/// `HeaderName`.
fn hop_by_hop_index(name: &str) -> Option<usize> {
    Some(match name {
        "connection" => 0,
        "proxy-connection" => 1,
        "proxy-authorization" => 2,
        "keep-alive" => 3,
        "te" => 4,
        "trailer" => 5,
        "transfer-encoding" => 6,
        "upgrade" => 7,
        _ => return None,
    })
}

/// Messages with at most this many header names are looked through
/// rather than looked up in ([`has`]).
const LOOK_THROUGH: usize = 16;

/// True if `headers` hold `name`. Most messages carry a few names (a
/// crawler's request often two or three), and comparing each is cheaper
/// than hashing `name` for a lookup (a custom name hashes all its bytes).
pub(crate) fn has(headers: &HeaderMap, name: &HeaderName) -> bool {
    if headers.keys_len() <= LOOK_THROUGH {
        headers.keys().any(|n| n == name)
    } else {
        headers.contains_key(name)
    }
}

/// The first value of `name` in `headers`, found as [`has`] finds it.
pub(crate) fn get<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h HeaderValue> {
    if headers.keys_len() <= LOOK_THROUGH {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    } else {
        headers.get(name)
    }
}

/// Removes hop-by-hop headers, including those `Connection` lists.
///
/// One pass over the message's names finds which are present, so a message
/// without any (most requests) costs no lookups, and one with only
/// `Connection: keep-alive` (most responses) only the removals it needs.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_present(headers, hop_by_hop_present(headers));
}

/// [`hop_by_hop_present`]'s bit for `Transfer-Encoding`.
pub(crate) const TRANSFER_ENCODING_PRESENT: u8 = 1 << 6;

/// The hop-by-hop headers `headers` holds, one bit each by its place in
/// [`HOP_BY_HOP`]: one pass over the names.
pub(crate) fn hop_by_hop_present(headers: &HeaderMap) -> u8 {
    let mut present = 0u8;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index(name.as_str()) {
            present |= 1 << i;
        }
    }
    present
}

/// [`strip_hop_by_hop`] for headers whose [`hop_by_hop_present`] is known.
pub(crate) fn strip_present(headers: &mut HeaderMap, present: u8) {
    if present == 0 {
        return;
    }
    // HOP_BY_HOP[0] is Connection: remove the headers it lists (names are
    // looked up case-insensitively; invalid ones match nothing). A listed
    // name that is itself hop-by-hop is in `present` already (one written
    // in upper case is looked up like any other name and removed with
    // it), and one that is not a header here (`close`, `keep-alive`
    // without its header) needs no removal: only the rest are collected,
    // so the usual `Connection: keep-alive` costs no allocation.
    if present & 1 != 0 {
        let mut listed: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(header::CONNECTION) {
            // Most messages say only this (itself hop-by-hop): nothing
            // listed to look up.
            let value = value.as_bytes();
            if value.eq_ignore_ascii_case(b"keep-alive") {
                continue;
            }
            for token in value.split(|&b| b == b',') {
                let Ok(token) = std::str::from_utf8(token.trim_ascii()) else {
                    continue;
                };
                if hop_by_hop_index(token).is_some() {
                    continue;
                }
                // Looked up borrowed first: a name is built (allocated)
                // only for a header that is really there.
                if headers.contains_key(token)
                    && let Ok(name) = HeaderName::from_bytes(token.as_bytes())
                {
                    listed.push(name);
                }
            }
        }
        for name in &listed {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

/// True if `headers` ask to switch to WebSocket (RFC 9110 §7.8, RFC 6455):
/// `Upgrade: websocket`, and `upgrade` among the `Connection` options.
/// Other protocols (`h2c`, custom ones) are not forwarded as upgrades:
/// after the switch nothing could be judged.
pub(crate) fn is_upgrade(headers: &http::HeaderMap) -> bool {
    names_websocket(headers)
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|o| o.trim().eq_ignore_ascii_case("upgrade"))
}

/// True if the `Upgrade` header names WebSocket.
pub(crate) fn names_websocket(headers: &http::HeaderMap) -> bool {
    has(headers, &header::UPGRADE)
        && headers
            .get_all(http::header::UPGRADE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| {
                let p = p.trim();
                p.get(..9)
                    .is_some_and(|n| n.eq_ignore_ascii_case("websocket"))
                    && p[9..].trim_start().is_empty()
            })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hop_by_hop_name_is_found_by_its_index() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name.as_str()), Some(i), "{name}");
        }
        assert_eq!(HOP_BY_HOP[6], header::TRANSFER_ENCODING);
        assert_eq!(TRANSFER_ENCODING_PRESENT, 1 << 6);
        for other in [
            "host",
            "via",
            "te2",
            "connections",
            "keep-alives",
            "",
            "a-name-longer-than-thirty-two-bytes",
        ] {
            assert_eq!(hop_by_hop_index(other), None, "{other}");
        }
    }

    #[test]
    fn small_and_large_maps_are_searched_alike() {
        for n in [0, 3, LOOK_THROUGH, LOOK_THROUGH + 1, 40] {
            let mut h = HeaderMap::new();
            for i in 0..n {
                let name = HeaderName::from_bytes(format!("x-h{i}").as_bytes()).expect("name");
                h.insert(name, HeaderValue::from_static("v"));
            }
            h.append(header::VIA, HeaderValue::from_static("first"));
            h.append(header::VIA, HeaderValue::from_static("second"));
            assert!(has(&h, &header::VIA), "{n}");
            assert!(!has(&h, &header::UPGRADE), "{n}");
            assert_eq!(get(&h, &header::VIA), h.get(header::VIA), "{n}");
            assert_eq!(get(&h, &header::UPGRADE), None, "{n}");
        }
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::ACCEPT));
    }

    #[test]
    fn hop_by_hop_names_are_matched_case_insensitively_and_bad_ones_ignored() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("X-A ,, b c"));
        h.append(header::CONNECTION, HeaderValue::from_static("close, x-b"));
        h.insert("x-a", HeaderValue::from_static("1"));
        h.insert("x-b", HeaderValue::from_static("2"));
        h.insert("close", HeaderValue::from_static("3"));
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::ACCEPT));
        // Nothing hop-by-hop: left as it is.
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        h.insert("x-c", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn hop_by_hop_index_matches_the_list() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name.as_str()), Some(i), "{name}");
        }
        assert_eq!(hop_by_hop_index(header::ACCEPT.as_str()), None);
        assert_eq!(
            hop_by_hop_index(HeaderName::from_static("x-te").as_str()),
            None
        );
    }
}

/// True if the message head at the start of `buf` is worth parsing now:
/// nothing of it was looked through yet (`seen` is `None`), it is longer
/// than `longest` (its parser refuses it or hands it on), or an empty line
/// may have ended it since `seen`. A head that trickles in is thus parsed
/// again only when it may be whole: it costs its length, not the square
/// of it.
pub(crate) fn head_worth_parsing(buf: &[u8], seen: Option<usize>, longest: usize) -> bool {
    match seen {
        None => !buf.is_empty(),
        Some(from) => buf.len() > longest || may_end_head(buf, from),
    }
}

/// True if `buf` may hold a whole message head: an empty line (LF LF, or
/// LF CR LF) ends one. Looked for from `seen` on (with the two bytes
/// before it, where such a line may have begun).
fn may_end_head(buf: &[u8], seen: usize) -> bool {
    let start = seen.min(buf.len()).saturating_sub(2);
    memchr::memchr_iter(b'\n', &buf[start..]).any(|i| {
        let rest = &buf[start + i + 1..];
        rest.first() == Some(&b'\n') || rest.starts_with(b"\r\n")
    })
}

#[cfg(test)]
mod head_end_tests {
    use super::may_end_head;

    #[test]
    fn a_head_is_parsed_only_once_an_empty_line_may_end_it() {
        assert!(!may_end_head(b"", 0));
        assert!(!may_end_head(b"HTTP/1.1 200 OK\r\nA: b\r\n", 0));
        assert!(may_end_head(b"HTTP/1.1 200 OK\r\n\r\n", 0));
        assert!(may_end_head(b"HTTP/1.1 200 OK\n\n", 0));
        // The empty line's start was looked through before, its last byte
        // is new.
        let head = b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n";
        for seen in 0..head.len() {
            assert!(may_end_head(head, seen), "from {seen}");
        }
        // Found before: not looked for again.
        assert!(!may_end_head(b"\n\nHTTP/1.1 200 OK\r\nA: b", 4));
    }
}
