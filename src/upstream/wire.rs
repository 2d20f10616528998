//! HTTP/1.1 on the wire towards a plain-http origin, for the requests the
//! in-task pool ([`super::Pool`]) sends: a request without a body written
//! in one piece, and the response's head and body framing read back
//! (RFC 9112 §4-§7). Pure: no I/O, no async; the bytes come and go through
//! buffers the caller owns, so every function here can be tested and
//! fuzzed alone.
//!
//! The head is parsed by `httparse` (hyper's own parser); what is decided
//! here is what hyper's client decides: which responses are interim, how
//! the body is framed, and whether the connection can carry another
//! request. Anything that could let one response be read as two, or two as
//! one, is an error or ends the connection after the response.

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// Header fields read in one response head at most (hyper's default).
pub(crate) const MAX_HEADERS: usize = 100;
/// Bytes a response head may take at most (hyper's default buffer limit).
pub(crate) const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;
/// Bytes of chunk extensions and trailer fields read over a whole body at
/// most: they are skipped, and an origin sending them without end would
/// otherwise hold the reader (and its CPU) for nothing.
const MAX_SKIPPED_BYTES: u64 = 16 * 1024;

/// What went wrong reading or writing a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The response head is not HTTP/1.x (httparse's reason).
    Head(&'static str),
    /// More header fields than [`MAX_HEADERS`] or bytes than
    /// [`MAX_HEAD_BYTES`].
    HeadTooLarge,
    /// `Content-Length` missing digits, with other characters, or given
    /// twice with different values.
    ContentLength,
    /// `Transfer-Encoding` in an HTTP/1.0 response (RFC 9112 §6.1).
    TransferEncodingInHttp10,
    /// A status the request did not ask for (101 without an upgrade).
    UnexpectedStatus(u16),
    /// A malformed chunked body.
    Chunk(&'static str),
    /// The connection closed before the message was complete.
    Incomplete,
    /// A header field the request's map holds cannot be written.
    Request(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Head(why) => write!(f, "invalid HTTP response head: {why}"),
            WireError::HeadTooLarge => write!(f, "response head too large"),
            WireError::ContentLength => write!(f, "invalid Content-Length in the response"),
            WireError::TransferEncodingInHttp10 => {
                write!(f, "Transfer-Encoding in an HTTP/1.0 response")
            }
            WireError::UnexpectedStatus(s) => write!(f, "unexpected status {s} in the response"),
            WireError::Chunk(why) => write!(f, "invalid chunked body: {why}"),
            WireError::Incomplete => write!(f, "connection closed before message completed"),
            WireError::Request(why) => write!(f, "cannot write the request: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Writes a request head without a body: request line, the fields of
/// `headers` in their order, empty line. `Transfer-Encoding` is left out
/// (there is no body to encode). `target` is origin-form.
pub(crate) fn encode_request(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
) -> Result<(), WireError> {
    check_target(target)?;
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == header::TRANSFER_ENCODING {
            continue;
        }
        // HeaderValue refuses CR, LF and NUL when made; the check stays
        // here too, as this is where a field could end a line early.
        if value.as_bytes().iter().any(|&b| b == b'\r' || b == b'\n') {
            return Err(WireError::Request("a field value holds a line break"));
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// A request target that can be written on the request line: not empty,
/// no space or control byte (bytes beyond ASCII go out as they came, as
/// hyper's server took them and its client sent them).
pub(crate) fn check_target(target: &str) -> Result<(), WireError> {
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(WireError::Request(
            "the target holds a space or control byte",
        ));
    }
    Ok(())
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the origin closes the connection.
    UntilClose,
}

/// A final response head, taken off the front of the read buffer.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    pub(crate) framing: Framing,
    /// The connection can carry another request once this response's body
    /// has been read to its end.
    pub(crate) reusable: bool,
    /// The reason phrase, when it is not the status's own.
    pub(crate) reason: Option<Bytes>,
}

/// What [`parse_response`] found at the front of the buffer.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not a whole head yet: read more.
    Partial,
    /// An informational (1xx) response, taken off the buffer: another
    /// head follows.
    Interim,
    /// The final response head, taken off the buffer.
    Final(Head),
}

/// Parses the response head at the front of `buf`, the answer to a
/// `method` request; a whole head is split off `buf` (its field values
/// share the bytes, nothing is copied), what follows it stays. Its fields
/// go into `headers` (taken, cleared: a map to reuse, such as the
/// request's once it is written).
pub(crate) fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
    headers: &mut HeaderMap,
) -> Result<Parsed, WireError> {
    // Offsets of each field's name and value in `buf`, kept while httparse
    // borrows it, so that the values can be slices of the frozen head.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    let (len, code, version, count, reason) = {
        let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut res,
            buf,
            &mut fields,
        ) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => {
                if buf.len() > MAX_HEAD_BYTES {
                    return Err(WireError::HeadTooLarge);
                }
                return Ok(Parsed::Partial);
            }
            Err(httparse::Error::TooManyHeaders) => return Err(WireError::HeadTooLarge),
            Err(e) => return Err(WireError::Head(head_error(e))),
        };
        if len > MAX_HEAD_BYTES {
            return Err(WireError::HeadTooLarge);
        }
        let base = buf.as_ptr() as usize;
        // Offsets within the head, which is at most MAX_HEAD_BYTES long.
        let at = |p: *const u8| (p as usize - base) as u32;
        let mut count = 0;
        for (span, field) in spans.iter_mut().zip(res.headers.iter()) {
            let (name, value) = (at(field.name.as_ptr()), at(field.value.as_ptr()));
            *span = (
                name,
                name + field.name.len() as u32,
                value,
                value + field.value.len() as u32,
            );
            count += 1;
        }
        let version = match res.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let code = res.code.unwrap_or(0);
        // A reason phrase other than the status's own is relayed as sent.
        let reason = res
            .reason
            .filter(|r| {
                StatusCode::from_u16(code)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    != Some(*r)
            })
            .map(|r| Bytes::copy_from_slice(r.as_bytes()));
        (len, code, version, count, reason)
    };
    let status = StatusCode::from_u16(code).map_err(|_| WireError::Head("invalid status code"))?;
    if status.is_informational() {
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(WireError::UnexpectedStatus(code));
        }
        buf.advance(len);
        return Ok(Parsed::Interim);
    }
    let head = buf.split_to(len).freeze();
    let mut headers = std::mem::take(headers);
    headers.clear();
    headers.reserve(count);
    for &(n0, n1, v0, v1) in &spans[..count] {
        let (n0, n1, v0, v1) = (n0 as usize, n1 as usize, v0 as usize, v1 as usize);
        let name = crate::http::names::parse(&head[n0..n1])
            .map_err(|_| WireError::Head("invalid header name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(v0..v1))
            .map_err(|_| WireError::Head("invalid header value"))?;
        headers.append(name, value);
    }
    let (framing, clean) = framing(method, status, version, &headers)?;
    let reusable = clean
        && version == Version::HTTP_11
        && framing != Framing::UntilClose
        && !has_token(&headers, header::CONNECTION, b"close");
    Ok(Parsed::Final(Head {
        status,
        version,
        headers,
        framing,
        reusable,
        reason,
    }))
}

fn head_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        httparse::Error::Version => "invalid version",
        httparse::Error::TooManyHeaders => "too many header fields",
    }
}

/// The body's framing, and false if the head's framing fields conflict
/// (the connection is not reused after such a response).
fn framing(
    method: &Method,
    status: StatusCode,
    version: Version,
    headers: &HeaderMap,
) -> Result<(Framing, bool), WireError> {
    if method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        if version == Version::HTTP_10 {
            return Err(WireError::TransferEncodingInHttp10);
        }
        // Both fields: the coding wins (RFC 9112 §6.3), and the connection
        // ends after the response.
        let clean = !headers.contains_key(header::CONTENT_LENGTH);
        return Ok(if last_coding_is_chunked(headers) {
            (Framing::Chunked, clean)
        } else {
            (Framing::UntilClose, false)
        });
    }
    let mut length: Option<u64> = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let n = parse_decimal(part.trim_ascii()).ok_or(WireError::ContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(WireError::ContentLength);
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(n) => (Framing::Length(n), true),
        None => (Framing::UntilClose, false),
    })
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    // No cap on the digits' count: leading zeros are valid, and the checked
    // arithmetic refuses what overflows.
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

fn last_coding_is_chunked(headers: &HeaderMap) -> bool {
    let last = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .rfind(|c| !c.is_empty());
    last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
}

fn has_token(headers: &HeaderMap, name: HeaderName, token: &[u8]) -> bool {
    headers
        .get_all(name)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// What [`BodyReader::read`] took from the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Body bytes.
    Data(Bytes),
    /// Nothing usable in the buffer: read more from the connection.
    More,
    /// The body is complete.
    End,
}

/// Reads a response body of a known [`Framing`] off the front of the
/// connection's read buffer.
#[derive(Debug)]
pub(crate) struct BodyReader {
    state: State,
    /// Chunk-extension and trailer bytes skipped so far.
    skipped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of a `Content-Length` body are left.
    Length(u64),
    UntilClose,
    /// Chunked: reading a chunk's size (the value so far, and whether a
    /// digit has been seen).
    Size(u64, bool),
    /// After the size: whitespace, then a `;` extension or the CR.
    SizeEnd(u64),
    /// Skipping an extension up to the CR.
    Extension(u64),
    /// The CR is read, the LF follows.
    SizeLf(u64),
    /// This many bytes of the current chunk are left.
    Data(u64),
    /// The CR after a chunk's data, then its LF.
    DataCr,
    DataLf,
    /// After the last chunk: at the start of a trailer line (or the final
    /// empty line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// The CR of a line in the trailer section; true if the line was
    /// empty (the end of the message).
    TrailerLf(bool),
    Done,
}

impl BodyReader {
    pub(crate) fn new(framing: Framing) -> BodyReader {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size(0, false),
            Framing::UntilClose => State::UntilClose,
        };
        BodyReader { state, skipped: 0 }
    }

    /// True once the whole body has been read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body bytes left, where the framing says (`Content-Length`).
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Takes what it can off the front of `buf`.
    pub(crate) fn read(&mut self, buf: &mut BytesMut) -> Result<Read, WireError> {
        loop {
            match self.state {
                State::Done => return Ok(Read::End),
                State::Length(_) | State::UntilClose | State::Data(_) if buf.is_empty() => {
                    return Ok(Read::More);
                }
                State::UntilClose => return Ok(Read::Data(buf.split().freeze())),
                // A whole body's or a chunk's data: as much of it as is here.
                State::Length(left) | State::Data(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let left = left - n as u64;
                    self.state = match (self.state, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), left) => State::Length(left),
                        (_, 0) => State::DataCr,
                        (_, left) => State::Data(left),
                    };
                    return Ok(Read::Data(buf.split_to(n).freeze()));
                }
                _ => {
                    // Framing bytes, one at a time.
                    let Some(&b) = buf.first() else {
                        return Ok(Read::More);
                    };
                    buf.advance(1);
                    self.step(b)?;
                }
            }
        }
    }

    /// The connection reached its end: the end of an `UntilClose` body, an
    /// error for any other unfinished one.
    pub(crate) fn eof(&mut self) -> Result<(), WireError> {
        match self.state {
            State::Done => Ok(()),
            State::UntilClose => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(WireError::Incomplete),
        }
    }

    fn skip(&mut self) -> Result<(), WireError> {
        self.skipped += 1;
        if self.skipped > MAX_SKIPPED_BYTES {
            return Err(WireError::Chunk("too many extension or trailer bytes"));
        }
        Ok(())
    }

    /// One framing byte of a chunked body.
    fn step(&mut self, b: u8) -> Result<(), WireError> {
        self.state = match self.state {
            State::Size(n, seen) => match hex(b) {
                Some(d) => {
                    let n = n
                        .checked_mul(16)
                        .and_then(|n| n.checked_add(u64::from(d)))
                        .ok_or(WireError::Chunk("chunk size too large"))?;
                    State::Size(n, true)
                }
                None if !seen => return Err(WireError::Chunk("chunk size without digits")),
                None => return self.after_size(n, b),
            },
            State::SizeEnd(n) => return self.after_size(n, b),
            State::Extension(n) => match b {
                b'\r' => State::SizeLf(n),
                b'\n' => return Err(WireError::Chunk("bare LF in a chunk extension")),
                _ => {
                    self.skip()?;
                    State::Extension(n)
                }
            },
            State::SizeLf(n) => match b {
                b'\n' if n == 0 => State::TrailerStart,
                b'\n' => State::Data(n),
                _ => return Err(WireError::Chunk("chunk size line not ended by CRLF")),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(WireError::Chunk("chunk data not followed by CRLF")),
            },
            State::DataLf => match b {
                b'\n' => State::Size(0, false),
                _ => return Err(WireError::Chunk("chunk data not followed by CRLF")),
            },
            State::TrailerStart => match b {
                b'\r' => State::TrailerLf(true),
                _ => {
                    self.skip()?;
                    State::Trailer
                }
            },
            State::Trailer => match b {
                b'\r' => State::TrailerLf(false),
                b'\n' => return Err(WireError::Chunk("bare LF in the trailer section")),
                _ => {
                    self.skip()?;
                    State::Trailer
                }
            },
            State::TrailerLf(last) => match b {
                b'\n' if last => State::Done,
                b'\n' => State::TrailerStart,
                _ => return Err(WireError::Chunk("trailer line not ended by CRLF")),
            },
            // Read in bulk by `read`, never a byte at a time.
            State::Length(_) | State::UntilClose | State::Data(_) | State::Done => {
                return Err(WireError::Chunk("framing byte outside the framing"));
            }
        };
        Ok(())
    }

    /// After a chunk size's digits: optional whitespace, an extension, or
    /// the line's end.
    fn after_size(&mut self, n: u64, b: u8) -> Result<(), WireError> {
        self.state = match b {
            b' ' | b'\t' => {
                self.skip()?;
                State::SizeEnd(n)
            }
            b';' => State::Extension(n),
            b'\r' => State::SizeLf(n),
            _ => return Err(WireError::Chunk("invalid byte after the chunk size")),
        };
        Ok(())
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
