//! Origins: the (scheme, host, port) a robots.txt file applies to.

use std::fmt;
use std::net::IpAddr;

use http::Uri;

/// URL scheme of an origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
    pub(crate) fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// The key robots.txt applies to: host lower-cased and in punycode, default
/// ports folded, so `http://A:80` and `http://a` are the same origin.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    scheme: Scheme,
    /// Lower-case ASCII; IPv6 literals without brackets.
    host: Box<str>,
    port: u16,
}

/// Why a URL has no usable origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("unsupported scheme {0:?} (only http and https)")]
    Scheme(String),
    #[error("URL has no host")]
    NoHost,
    #[error("invalid host name {0:?}")]
    Host(String),
    #[error("invalid port {0:?} (a port is a number from 1 to 65535)")]
    Port(String),
}

/// The port an authority (`[userinfo@]host[:port]`) names: `None` when it
/// has none or an empty one (RFC 3986 §3.2.3: the scheme's default), else
/// decimal digits for a number from 1 to 65535. `http::Uri` accepts any
/// port text and then reports none for one out of range, which would send
/// `host:65616` to the default port: the text is checked here instead.
pub(crate) fn authority_port(authority: &str) -> Result<Option<u16>, OriginError> {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    // After the last ':' unless that is inside an IPv6 literal.
    let port = match host_port.rfind(':') {
        Some(i) if !host_port[i..].contains(']') => &host_port[i + 1..],
        _ => return Ok(None),
    };
    if port.is_empty() {
        return Ok(None);
    }
    match port.parse::<u16>() {
        // `parse` also takes a leading '+'.
        Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(p)),
        _ => Err(OriginError::Port(port.into())),
    }
}

/// An octet an origin's host may hold once in ASCII form: letters, digits,
/// `-`, `_` (seen in real host names) and `.`.
fn host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
}

/// True for a label of a host that IDNA leaves as it is (lower-cased): not
/// empty, not in punycode already (`xn--`, which IDNA validates).
fn plain_label(label: &[u8]) -> bool {
    !label.is_empty()
        && !label
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"xn--"))
}

/// The host as IDNA would give it, for the common case where that is just
/// lower-casing: ASCII letters, digits, `-`, `_` and `.`, no empty label and
/// no label in punycode already (`xn--`, which IDNA validates). `None`
/// otherwise.
fn plain_ascii_host(host: &str) -> Option<Box<str>> {
    let plain = !host.is_empty()
        && host.bytes().all(host_byte)
        && host.split('.').all(|label| plain_label(label.as_bytes()));
    plain.then(|| host.to_ascii_lowercase().into())
}

impl Origin {
    /// Builds an origin, normalising the host (IDNA to punycode, lower case).
    pub fn new(scheme: Scheme, host: &str, port: Option<u16>) -> Result<Origin, OriginError> {
        let host = host.trim_end_matches('.');
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host: Box<str> = if let Ok(ip) = bare.parse::<IpAddr>() {
            match ip {
                // The parser takes only the canonical dotted quad.
                IpAddr::V4(_) => bare.into(),
                IpAddr::V6(_) => ip.to_string().into(),
            }
        } else if let Some(plain) = plain_ascii_host(bare) {
            plain
        } else {
            if bare.is_empty() {
                return Err(OriginError::NoHost);
            }
            let ascii = idna::domain_to_ascii(bare).map_err(|_| OriginError::Host(bare.into()))?;
            if ascii.is_empty() || !ascii.bytes().all(host_byte) {
                return Err(OriginError::Host(bare.into()));
            }
            ascii.into()
        };
        Ok(Origin {
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
        })
    }

    /// The origin of an absolute URI.
    pub(crate) fn from_uri(uri: &Uri) -> Result<Origin, OriginError> {
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            Some(s) => return Err(OriginError::Scheme(s.into())),
            None => return Err(OriginError::Scheme(String::new())),
        };
        let authority = uri.authority().ok_or(OriginError::NoHost)?;
        if let Some(origin) = Origin::plain(scheme, authority.as_str()) {
            return Ok(origin);
        }
        let port = authority_port(authority.as_str())?;
        Origin::new(scheme, authority.host(), port)
    }

    /// The origin of the common authority, in one pass over its bytes: a
    /// host of ASCII letters, digits, `-`, `_` and dots (no empty label, no
    /// label in punycode, no trailing dot), then optionally `:` and a port
    /// of one to five digits from 1 to 65535. What [`Origin::new`] makes
    /// of such a host is the host lower-cased (a dotted quad included: its
    /// digits have no case). `None` for anything else (user info, an IPv6
    /// literal, another port text, a name for IDNA): the general path
    /// decides it.
    fn plain(scheme: Scheme, authority: &str) -> Option<Origin> {
        let bytes = authority.as_bytes();
        let (host, port) = match bytes.iter().position(|&b| b == b':') {
            Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
            None => (bytes, None),
        };
        let port = match port {
            None => scheme.default_port(),
            Some(digits) if (1..=5).contains(&digits.len()) => {
                let mut n = 0u32;
                for &d in digits {
                    if !d.is_ascii_digit() {
                        return None;
                    }
                    n = n * 10 + u32::from(d - b'0');
                }
                u16::try_from(n).ok().filter(|&p| p != 0)?
            }
            Some(_) => return None,
        };
        let mut label_start = 0;
        for (i, &b) in host.iter().enumerate() {
            if b == b'.' {
                if !plain_label(&host[label_start..i]) {
                    return None;
                }
                label_start = i + 1;
            } else if !host_byte(b) {
                return None;
            }
        }
        if !plain_label(&host[label_start..]) {
            return None;
        }
        let host = std::str::from_utf8(host).ok()?;
        Some(Origin {
            scheme,
            host: host.to_ascii_lowercase().into_boxed_str(),
            port,
        })
    }

    pub(crate) fn scheme(&self) -> Scheme {
        self.scheme
    }
    /// Host, lower-case ASCII; IPv6 without brackets.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
    /// The host as an IP address, if it is a literal.
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// `host:port` (IPv6 bracketed), as in a CONNECT request or a Host header.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL of this origin's robots.txt.
    pub(crate) fn robots_url(&self) -> String {
        format!("{self}/robots.txt")
    }

    /// An absolute URL on this origin for `path_and_query` (which starts with `/`).
    pub(crate) fn url(&self, path_and_query: &str) -> String {
        format!("{self}{path_and_query}")
    }
}

impl fmt::Display for Origin {
    /// `https://example.com`, `http://example.com:8080`, `http://[::1]:8080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// `reference` (a `Location` or `Content-Location` value) resolved against
/// `base` as RFC 3986 §5.2 says, by the url crate's join: an http(s) URI
/// without its fragment; `None` for a value that does not parse or names
/// another scheme.
pub(crate) fn resolve_reference(base: &str, reference: &str) -> Option<Uri> {
    let target = url::Url::parse(base).ok()?.join(reference).ok()?;
    if !matches!(target.scheme(), "http" | "https") {
        return None;
    }
    target[..url::Position::AfterQuery].parse().ok()
}

/// The path and query of a request target, `/` when it has none.
pub(crate) fn path_of(uri: &Uri) -> String {
    match uri.path_and_query().map(|pq| pq.as_str()) {
        Some(pq) if pq.starts_with('/') => pq.to_string(),
        Some(pq) if !pq.is_empty() => format!("/{pq}"),
        _ => "/".to_string(),
    }
}

/// True if `host` is on `list`: an entry is a host name (`example.com`,
/// any case) or `*.suffix`, which matches every name under the suffix but
/// not the suffix itself.
pub(crate) fn host_listed(list: &[String], host: &str) -> bool {
    list.iter().any(|entry| match entry.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len()
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        None => entry.eq_ignore_ascii_case(host),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Origin {
        Origin::from_uri(&s.parse().expect("uri")).expect("origin")
    }

    /// The one-pass path gives what the general one does, and leaves to
    /// it everything it does not take.
    #[test]
    fn plain_authorities_take_the_general_paths_origin() {
        for authority in [
            "a",
            "a.example",
            "A.Example",
            "a.example:8080",
            "a.example:80",
            "a.example:080",
            "a.example:00080",
            "a.example:000080",
            "a.example:0",
            "a.example:65535",
            "a.example:65536",
            "a.example:99999",
            "a.example:",
            "a.example:+80",
            "a.example:8a",
            "127.0.0.1",
            "127.0.0.1:3128",
            "127.1",
            "010.0.0.1",
            "1..2",
            "a..example",
            ".a.example",
            "a.example.",
            "a.example.:81",
            "xn--bcher-kva.example",
            "XN--bcher-kva.example",
            "a.xn--p1ai",
            "u@a.example",
            "u:p@a.example:81",
            "[::1]",
            "[::1]:8080",
            "a_b-c.example",
            "a b",
            "bücher.example",
            "a:b:80",
            ":80",
        ] {
            for scheme in [Scheme::Http, Scheme::Https] {
                let general = authority_port(authority)
                    .and_then(|port| Origin::new(scheme, host_of(authority), port));
                if let Some(plain) = Origin::plain(scheme, authority) {
                    assert_eq!(Ok(plain), general, "{authority}");
                }
            }
        }
        for taken in [
            "a.example",
            "A.Example:8080",
            "127.0.0.1:3128",
            "a_b-c.example:080",
        ] {
            assert!(Origin::plain(Scheme::Http, taken).is_some(), "{taken}");
        }
        assert!(Origin::plain(Scheme::Http, "a.example.").is_none());
        assert!(Origin::plain(Scheme::Http, "[::1]:80").is_none());
    }

    /// The host of an authority as `http::uri::Authority::host` gives it.
    fn host_of(authority: &str) -> &str {
        let host_port = authority.rsplit('@').next().unwrap_or(authority);
        if host_port.starts_with('[') {
            host_port.find(']').map_or(host_port, |i| &host_port[..=i])
        } else {
            host_port.split(':').next().unwrap_or(host_port)
        }
    }

    #[test]
    fn default_ports_are_folded() {
        assert_eq!(o("http://a:80/x"), o("http://a/"));
        assert_eq!(o("https://example.com:443/"), o("https://example.com/"));
        assert_ne!(o("https://example.com:444/"), o("https://example.com/"));
        assert_ne!(o("http://example.com/"), o("https://example.com/"));
    }

    #[test]
    fn host_is_lowercased_and_idn_is_punycode() {
        assert_eq!(o("http://EXAMPLE.com/"), o("http://example.com/"));
        let idn = Origin::new(Scheme::Https, "www.exämple.com", None).expect("idn");
        assert_eq!(idn.host(), "www.xn--exmple-cua.com");
        assert_eq!(idn, o("https://www.xn--exmple-cua.com/"));
    }

    #[test]
    fn the_plain_ascii_fast_path_agrees_with_idna() {
        for host in [
            "example.com",
            "WWW.Example.COM",
            "a-b_c.d9.example",
            "-lead.example",
            "trail-.example",
            "xn--exmple-cua.com",
            "XN--EXMPLE-CUA.com",
            "a..b",
            ".a",
            "x",
            "127.0.0.1.example",
        ] {
            let fast = plain_ascii_host(host);
            if let Some(fast) = &fast {
                assert_eq!(
                    Ok(fast.to_string()),
                    idna::domain_to_ascii(host).map_err(|_| ()),
                    "{host}"
                );
            }
            assert_eq!(
                fast.is_some(),
                !host.contains("..")
                    && !host.starts_with('.')
                    && !host.to_ascii_lowercase().contains("xn--"),
                "{host}"
            );
        }
        assert_eq!(o("http://127.0.0.1:8080/").host(), "127.0.0.1");
        // Not a canonical dotted quad: a name, checked when it is resolved.
        let odd = Origin::new(Scheme::Http, "127.000.0.1", None).expect("a name");
        assert!(odd.ip().is_none());
    }

    #[test]
    fn display_and_robots_url() {
        assert_eq!(
            o("http://a:8080/x").robots_url(),
            "http://a:8080/robots.txt"
        );
        assert_eq!(o("https://[::1]:8443/").to_string(), "https://[::1]:8443");
        assert_eq!(o("https://[::1]:8443/").authority(), "[::1]:8443");
        assert_eq!(
            o("http://127.0.0.1/").robots_url(),
            "http://127.0.0.1/robots.txt"
        );
    }

    #[test]
    fn bad_origins_are_errors() {
        assert!(matches!(
            Origin::from_uri(&"ftp://a/".parse().expect("uri")),
            Err(OriginError::Scheme(_))
        ));
        assert!(Origin::from_uri(&"/relative".parse().expect("uri")).is_err());
    }

    #[test]
    fn ports_are_numbers_from_1_to_65535_and_empty_is_the_default() {
        for (authority, port) in [
            ("a", None),
            ("a:", None),
            ("a:80", Some(80)),
            ("a:080", Some(80)),
            ("a:65535", Some(65535)),
            ("u:p@a:81", Some(81)),
            ("u:p@a", None),
            ("[::1]", None),
            ("[::1]:", None),
            ("[::1]:8080", Some(8080)),
        ] {
            assert_eq!(authority_port(authority), Ok(port), "{authority}");
        }
        for authority in [
            "a:65536",
            "a:65616",
            "a:0",
            "a:+80",
            "a:-1",
            "a:8o",
            "a: 80",
            "[::1]:99999",
        ] {
            assert!(
                matches!(authority_port(authority), Err(OriginError::Port(_))),
                "{authority}"
            );
        }
        let uri = |s: &str| Origin::from_uri(&s.parse().expect("uri"));
        assert!(matches!(uri("http://a:65616/x"), Err(OriginError::Port(_))));
        assert_eq!(uri("http://a:/x"), Ok(o("http://a/")));
        assert_eq!(uri("https://a:/x"), Ok(o("https://a:443/")));
    }
}
