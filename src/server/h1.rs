//! The proxy listener's own HTTP/1.1 server side for the common request
//! (pure: no I/O). A request whose head is well formed, HTTP/1.1, not
//! CONNECT, without a body (no `Content-Length`, no `Transfer-Encoding`),
//! without `Expect` or `Upgrade`, is read here and answered by
//! [`encode_head`]; any other one, and any head this parser does not
//! accept, is left to hyper's server with the bytes read so far (see
//! `server::conn`), so malformed requests get hyper's answers (400, 431,
//! 505) and bodies, upgrades and `100-continue` hyper's handling.
//!
//! What is read and written is hyper's: httparse with hyper's parser
//! configuration and header limit, header values sharing the read buffer,
//! and responses encoded by hyper's rules (`Server::encode` in hyper's
//! `proto::h1::role`): framing from `Content-Length` or the body's length,
//! chunked when unknown, none for HEAD, 204 and 304, `connection: close`
//! added when the connection will close, a cached `date`. A property test
//! (`h1/tests/differential.rs`) holds both to hyper's.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri, Version};
use smallvec::SmallVec;

#[cfg(test)]
mod tests;

/// The most header fields a request may have (hyper's default).
pub(crate) const MAX_HEADERS: usize = 100;

/// The longest request head read here: a longer one is left to hyper,
/// whose own limit (about 400 KiB) then applies.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// What the bytes read so far hold.
#[derive(Debug)]
// Returned once per request and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Parsed {
    /// The start of a request head (or nothing yet): read more.
    Partial,
    /// A whole request without a body, its head split off the buffer.
    Simple(Simple),
    /// Anything else: hyper serves the connection from these bytes on.
    Other,
}

/// A request read here.
#[derive(Debug)]
pub(crate) struct Simple {
    /// The request, with an empty body.
    pub(crate) request: Request<()>,
    /// False if the client asked to close (`Connection: close`).
    pub(crate) keep_alive: bool,
}

/// Reads the request head at the start of `buf`; a whole one read here is
/// split off it. `headers` is a map to reuse (cleared).
pub(crate) fn parse_request(buf: &mut BytesMut, headers: HeaderMap) -> Parsed {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    // hyper's server parses with httparse's default configuration.
    let len = match httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        // Too long, too many fields, malformed: hyper's to answer.
        Ok(httparse::Status::Partial) | Err(_) => return Parsed::Other,
    };
    if req.version != Some(1) {
        return Parsed::Other;
    }
    let Some(method) = req
        .method
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok())
    else {
        return Parsed::Other;
    };
    let Some(path) = req.path else {
        return Parsed::Other;
    };
    if method == Method::CONNECT || len > MAX_HEAD {
        return Parsed::Other;
    }
    // The fields are named while the head is borrowed; their values are
    // taken from it, shared, once it is split off.
    let base = buf.as_ptr() as usize;
    let span = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let path = span(path.as_bytes());
    let mut fields: SmallVec<[(HeaderName, std::ops::Range<usize>); 24]> = SmallVec::new();
    let mut keep_alive = true;
    for h in req.headers.iter() {
        let Ok(name) = crate::http::names::parse(h.name.as_bytes()) else {
            return Parsed::Other;
        };
        match name {
            header::CONTENT_LENGTH
            | header::TRANSFER_ENCODING
            | header::EXPECT
            | header::UPGRADE => return Parsed::Other,
            header::CONNECTION if keep_alive && has_token(h.value, "close") => keep_alive = false,
            _ => {}
        }
        fields.push((name, span(h.value)));
    }
    let head = buf.split_to(len).freeze();
    // A target or field value that httparse accepts and `http` does not
    // (rare): the bytes go back for hyper to answer (a copy, on this path
    // only).
    let give_back = |buf: &mut BytesMut| {
        let mut whole = BytesMut::with_capacity(head.len() + buf.len());
        whole.extend_from_slice(&head);
        whole.extend_from_slice(buf);
        *buf = whole;
        Parsed::Other
    };
    let Ok(uri) = Uri::from_maybe_shared(head.slice(path)) else {
        return give_back(buf);
    };
    let mut headers = headers;
    headers.clear();
    headers.reserve(fields.len());
    for (name, value) in fields {
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(value)) else {
            return give_back(buf);
        };
        headers.append(name, value);
    }
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Parsed::Simple(Simple {
        request,
        keep_alive,
    })
}

/// A response body's length as hyper's server learns it: `None` for a body
/// that is already at its end, else its exact size if known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyLength {
    Known(u64),
    Unknown,
}

/// How a response's body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Exactly this many bytes (0: none are written).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes.
    CloseDelimited,
}

/// What [`encode_head`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Encoded {
    pub(crate) framing: Framing,
    /// The connection closes once this response is written.
    pub(crate) last: bool,
}

/// A response head hyper would refuse to write (conflicting or invalid
/// `Content-Length` values for a body of unknown length, a length field
/// and a coding field both): the connection closes without it. A 1xx
/// other than 101 is not refused: hyper answers a bare 500 instead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unwritable;

/// Writes the head of `parts`, the answer to a HTTP/1.1 request (`head`:
/// to a HEAD request), to `dst`, as hyper's server writes it; `keep_alive`
/// false adds `connection: close`. `date` is the `date` value to add when
/// the response has none. The headers are drained (the map is kept for
/// reuse).
pub(crate) fn encode_head(
    parts: &mut http::response::Parts,
    body: Option<BodyLength>,
    head: bool,
    keep_alive: bool,
    date: &[u8],
    dst: &mut Vec<u8>,
) -> Result<Encoded, Unwritable> {
    if parts.status.is_informational() && parts.status != StatusCode::SWITCHING_PROTOCOLS {
        // hyper cannot send a 1xx as a final response: it answers 500
        // (no fields of the response's) and closes. 101 is written (with
        // no body) and closes the connection.
        parts.headers.clear();
        let mut empty = http::Response::new(()).into_parts().0;
        empty.status = StatusCode::INTERNAL_SERVER_ERROR;
        let encoded = encode(&mut empty, None, head, false, date, dst)?;
        return Ok(Encoded {
            last: true,
            ..encoded
        });
    }
    if !keep_alive {
        match parts.headers.entry(header::CONNECTION) {
            header::Entry::Occupied(mut e) => {
                if !e.iter().any(|v| has_token(v.as_bytes(), "close")) {
                    e.append(HeaderValue::from_static("close"));
                }
            }
            header::Entry::Vacant(e) => {
                e.insert(HeaderValue::from_static("close"));
            }
        }
    }
    let start = dst.len();
    let result = encode(parts, body, head, keep_alive, date, dst);
    if result.is_err() {
        dst.truncate(start);
    }
    result
}

fn encode(
    parts: &mut http::response::Parts,
    body: Option<BodyLength>,
    head: bool,
    keep_alive: bool,
    date: &[u8],
    dst: &mut Vec<u8>,
) -> Result<Encoded, Unwritable> {
    let status = parts.status;
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    let http10 = parts.version == Version::HTTP_10;
    dst.reserve(30 + parts.headers.len() * 30);
    if !http10 && status == StatusCode::OK && reason.is_none() {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        match reason {
            Some(r) => dst.extend_from_slice(r.as_bytes()),
            None => dst.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
        }
        dst.extend_from_slice(b"\r\n");
    }
    let chunkable = can_chunk(head, status);
    let mut last = !keep_alive || status == StatusCode::SWITCHING_PROTOCOLS;
    let mut framing = Framing::Length(0);
    let mut wrote_len = false;
    let mut wrote_date = false;
    // A field whose values hyper joins on one line (length, coding,
    // connection, trailer): its name and first value are written, the
    // line is ended when the next name comes.
    let mut open_line = false;
    let mut must_chunk = false;
    let mut prev_len: Option<u64> = None;
    let mut current: Option<HeaderName> = None;
    for (name, value) in parts.headers.drain() {
        if let Some(n) = name {
            if open_line {
                end_line(dst, must_chunk);
            }
            open_line = false;
            current = Some(n);
        }
        let Some(name) = current.as_ref() else {
            continue;
        };
        match *name {
            header::CONTENT_LENGTH => {
                if wrote_len && !open_line {
                    return Err(Unwritable);
                }
                match body {
                    Some(BodyLength::Known(n)) => {
                        if !open_line {
                            framing = Framing::Length(n);
                            dst.extend_from_slice(b"content-length: ");
                            dst.extend_from_slice(value.as_bytes());
                            wrote_len = true;
                            open_line = true;
                        }
                        continue;
                    }
                    Some(BodyLength::Unknown) => {
                        let Some(n) = digits(value.as_bytes()) else {
                            return Err(Unwritable);
                        };
                        match prev_len {
                            Some(prev) if prev != n => return Err(Unwritable),
                            Some(_) => {}
                            None => {
                                framing = Framing::Length(n);
                                dst.extend_from_slice(b"content-length: ");
                                dst.extend_from_slice(value.as_bytes());
                                wrote_len = true;
                                open_line = true;
                                prev_len = Some(n);
                            }
                        }
                        continue;
                    }
                    None if !head => continue,
                    // A HEAD response's length is written as it is.
                    None => wrote_len = true,
                }
            }
            header::TRANSFER_ENCODING => {
                if wrote_len && !open_line {
                    return Err(Unwritable);
                }
                if http10 || !chunkable {
                    continue;
                }
                wrote_len = true;
                must_chunk = !is_chunked(&value);
                if !open_line {
                    framing = Framing::Chunked;
                }
                join(dst, &mut open_line, b"transfer-encoding: ", &value);
                continue;
            }
            header::CONNECTION => {
                if !last && has_token(value.as_bytes(), "close") {
                    last = true;
                }
                join(dst, &mut open_line, b"connection: ", &value);
                continue;
            }
            header::TRAILER => {
                if http10 || !chunkable {
                    continue;
                }
                join(dst, &mut open_line, b"trailer: ", &value);
                continue;
            }
            header::DATE => wrote_date = true,
            _ => {}
        }
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    if open_line {
        end_line(dst, must_chunk);
    }
    if !wrote_len {
        framing = match body {
            Some(BodyLength::Unknown) if http10 || !chunkable => Framing::CloseDelimited,
            Some(BodyLength::Unknown) => {
                dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
            None | Some(BodyLength::Known(0)) => {
                if can_have_length(status) && !head {
                    dst.extend_from_slice(b"content-length: 0\r\n");
                }
                Framing::Length(0)
            }
            Some(BodyLength::Known(n)) => {
                if can_have_length(status) {
                    dst.extend_from_slice(b"content-length: ");
                    dst.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                    dst.extend_from_slice(b"\r\n");
                    Framing::Length(n)
                } else {
                    Framing::Length(0)
                }
            }
        };
    }
    if !chunkable {
        framing = Framing::Length(0);
    }
    if !wrote_date {
        dst.extend_from_slice(b"date: ");
        dst.extend_from_slice(date);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    // A close-delimited body ends with the connection.
    last |= framing == Framing::CloseDelimited;
    Ok(Encoded { framing, last })
}

/// Writes `value` on the joined line open for its field (`, ` before it),
/// or opens the line with `name` (which ends in `: `).
fn join(dst: &mut Vec<u8>, open_line: &mut bool, name: &[u8], value: &HeaderValue) {
    if *open_line {
        dst.extend_from_slice(b", ");
    } else {
        *open_line = true;
        dst.extend_from_slice(name);
    }
    dst.extend_from_slice(value.as_bytes());
}

/// Ends a joined line; a coding list whose last coding is not chunked gets
/// `chunked` added (hyper frames it so).
fn end_line(dst: &mut Vec<u8>, must_chunk: bool) {
    if must_chunk {
        dst.extend_from_slice(b", chunked\r\n");
    } else {
        dst.extend_from_slice(b"\r\n");
    }
}

/// hyper's `can_chunked` for a response to a non-CONNECT request: whether
/// the response has a body at all.
fn can_chunk(head: bool, status: StatusCode) -> bool {
    !head && can_have_length(status)
}

/// hyper's `can_have_content_length` for a response to a non-CONNECT
/// request (of 1xx, only 101 gets here).
fn can_have_length(status: StatusCode) -> bool {
    !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

/// A `Content-Length` value: digits only (hyper's reading).
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

/// True if the comma-separated `value` has `token` (hyper's reading of
/// `Connection`: a value that is not visible ASCII has none).
fn has_token(value: &[u8], token: &str) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        && std::str::from_utf8(value)
            .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// True if the last coding of `value` is chunked (hyper's reading).
fn is_chunked(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|s| {
        s.rsplit(',')
            .next()
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"))
    })
}

/// The head of a chunk of `len` bytes.
pub(crate) fn chunk_head(len: usize, dst: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(dst, "{len:X}\r\n");
}

/// The `date` value hyper's server writes at `now` (the caller's clock
/// read, shared with its other uses): the wall clock is read and the text
/// rendered at most once a second per thread.
pub(crate) fn date(now: tokio::time::Instant) -> [u8; 29] {
    use std::cell::Cell;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    thread_local!(static CACHED: Cell<Option<(tokio::time::Instant, [u8; 29])>> = const { Cell::new(None) });
    CACHED.with(|c| {
        if let Some((until, text)) = c.get()
            && now < until
        {
            return text;
        }
        let wall = SystemTime::now();
        let into_second = wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut rendered = [0u8; 29];
        let formatted = httpdate::fmt_http_date(wall);
        let n = formatted.len().min(29);
        rendered[..n].copy_from_slice(&formatted.as_bytes()[..n]);
        let until = now + Duration::from_secs(1) - Duration::from_nanos(u64::from(into_second));
        c.set(Some((until, rendered)));
        rendered
    })
}
