//! h1.rs against hyper's own HTTP/1.1 server (default settings, over an
//! in-memory duplex, on a paused clock).
//!
//! Requests: the same bytes go to `parse_request` and to hyper. Every
//! request `parse_request` reads (`Simple`, and the pipelined ones after it
//! while the connection stays open) must reach hyper's service identical
//! (method, target, version, fields in order, no extensions, an empty body
//! at its end); a request that asks to close must be hyper's last, one
//! that does not must leave the connection open when nothing else follows;
//! `Partial` must leave hyper waiting without an answer.
//!
//! Responses: a service returns a generated response to a GET or HEAD;
//! hyper's bytes up to the end of the head must be `encode_head`'s, hyper
//! writing nothing must be `Unwritable`, and the body that follows and the
//! connection's end must be as `Encoded` says.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use proptest::prelude::*;
use proptest::sample::Index;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;

use crate::server::h1::{
    BodyLength, Encoded, Framing, Parsed, Unwritable, encode_head, parse_request,
};

/// Cases per property: `PROPTEST_CASES` if set.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// How long a quiet connection is watched (paused clock: only when every
/// task waits does it move, so this is how long hyper would wait).
const QUIET: Duration = Duration::from_secs(5);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// Serves `io` with hyper's HTTP/1.1 server, default settings.
fn serve<F, B>(io: DuplexStream, respond: F) -> JoinHandle<Result<(), hyper::Error>>
where
    F: Fn(Request<Incoming>) -> Response<B> + Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = hyper::service::service_fn(move |req| {
        let response = respond(req);
        async move { Ok::<_, Infallible>(response) }
    });
    tokio::spawn(
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(io), service),
    )
}

/// Writes `bytes` and reads what comes back until the connection closes
/// (true) or stays quiet.
async fn exchange(client: &mut DuplexStream, bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    if client.write_all(bytes).await.is_err() {
        return (out, true);
    }
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(QUIET, client.read(&mut buf)).await {
            Err(_) => return (out, false),
            Ok(Ok(0) | Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

// ---------------------------------------------------------------- requests

const METHODS: [&[u8]; 15] = [
    b"GET",
    b"GET",
    b"GET",
    b"GET",
    b"GET",
    b"GET",
    b"HEAD",
    b"POST",
    b"DELETE",
    b"OPTIONS",
    b"CONNECT",
    b"PROPFIND",
    b"X-Odd!~",
    b"get",
    b"G(T",
];
const TARGETS: [&[u8]; 23] = [
    b"http://example.com/",
    b"http://example.com/a/b?c=d",
    b"http://Example.COM:8080",
    b"https://b.example/x?y",
    b"http://u:p@h/",
    b"http://[::1]:80/",
    b"http://h:99999/",
    b"http://",
    b"http://[::1",
    b"/",
    b"/a/b?c=d",
    b"/a#frag",
    b"*",
    b"example.com:443",
    b"/%zz%41",
    b"/a{b}|c",
    b"/a\"b\\c^`",
    b"/\xc3\xa9\x80",
    b"/\xc3\xa9",
    b"/\x7f",
    b"//x",
    b"?q",
    b"a/b",
];
const VERSIONS: [&[u8]; 4] = [b"HTTP/1.0", b"HTTP/1.2", b"http/1.1", b"HTTP/2.0"];
const NAMES: [&[u8]; 8] = [
    b"Host",
    b"User-Agent",
    b"Connection",
    b"connection",
    b"CONNECTION",
    b"Accept",
    b"X-A",
    b"x-a",
];
/// Fields that leave the request to hyper.
const HYPERS: [&[u8]; 5] = [
    b"Content-Length",
    b"Transfer-Encoding",
    b"transfer-encoding",
    b"Expect",
    b"Upgrade",
];
const CONNECTION: [&[u8]; 10] = [
    b"close",
    b"keep-alive",
    b"Close",
    b"KEEP-ALIVE",
    b"foo, close",
    b"close , keep-alive",
    b"upgrade",
    b"closed",
    b"close\xff",
    b"",
];
const SPECIAL: [&[u8]; 7] = [
    b"0",
    b"5",
    b"chunked",
    b"gzip",
    b"100-continue",
    b"websocket",
    b"example.com",
];

fn token() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(&b"abcdefXYZ0189!#$%&'*+-.^_`|~"[..]),
        1..10,
    )
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        8 => 0x21u8..0x7f,
        1 => Just(b' '),
        1 => Just(b'\t'),
        1 => 0x80u8..=0xff,
    ];
    prop::collection::vec(byte, 0..12)
}

/// A field: a name from the list or a token, a value to go with it.
fn field() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let name = prop_oneof![
        12 => prop::sample::select(&NAMES[..]).prop_map(<[u8]>::to_vec),
        1 => prop::sample::select(&HYPERS[..]).prop_map(<[u8]>::to_vec),
        3 => token(),
    ];
    let value = prop_oneof![
        2 => prop::sample::select(&CONNECTION[..]).prop_map(<[u8]>::to_vec),
        1 => prop::sample::select(&SPECIAL[..]).prop_map(<[u8]>::to_vec),
        2 => value(),
    ];
    (name, value, 0..3usize).prop_map(|(name, mut value, ws)| {
        // Optional whitespace around the value.
        let pad = [&b""[..], b" ", b"\t "][ws];
        value.splice(0..0, pad.iter().copied());
        value.extend_from_slice(pad);
        (name, value)
    })
}

#[derive(Debug, Clone)]
struct Head {
    crlf: usize,
    method: &'static [u8],
    target: &'static [u8],
    version: &'static [u8],
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

fn head() -> impl Strategy<Value = Head> {
    (
        prop_oneof![6 => Just(0usize), 1 => 1..3usize],
        prop::sample::select(&METHODS[..]),
        prop::sample::select(&TARGETS[..]),
        prop_oneof![
            8 => Just(&b"HTTP/1.1"[..]),
            1 => prop::sample::select(&VERSIONS[..]),
        ],
        prop::collection::vec(field(), 0..13),
    )
        .prop_map(|(crlf, method, target, version, fields)| Head {
            crlf,
            method,
            target,
            version,
            fields,
        })
}

impl Head {
    fn write(&self, out: &mut Vec<u8>) {
        for _ in 0..self.crlf {
            out.extend_from_slice(b"\r\n");
        }
        for part in [self.method, b" ", self.target, b" ", self.version, b"\r\n"] {
            out.extend_from_slice(part);
        }
        for (name, value) in &self.fields {
            out.extend_from_slice(name);
            out.extend_from_slice(b":");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Request bytes: one head, perhaps corrupted, perhaps cut, perhaps a
/// second one pipelined after it.
#[derive(Clone)]
struct Bytes2(Vec<u8>);

impl std::fmt::Debug for Bytes2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

fn request_bytes() -> impl Strategy<Value = Bytes2> {
    (
        head(),
        prop::option::weighted(0.4, head()),
        prop::option::weighted(
            0.2,
            prop::collection::vec(
                (
                    any::<Index>(),
                    prop::sample::select(&b"\r\n :\t\x00\x7f\xffa/"[..]),
                ),
                1..3,
            ),
        ),
        prop::option::weighted(0.15, any::<Index>()),
    )
        .prop_map(|(first, second, corrupt, cut)| {
            let mut out = Vec::new();
            first.write(&mut out);
            for (at, byte) in corrupt.unwrap_or_default() {
                let i = at.index(out.len());
                out[i] = byte;
            }
            if let Some(second) = second {
                second.write(&mut out);
            }
            if let Some(cut) = cut {
                out.truncate(cut.index(out.len() + 1));
            }
            Bytes2(out)
        })
}

/// What a request's service sees that matters.
#[derive(Debug, PartialEq)]
struct Seen {
    method: Method,
    uri: Uri,
    version: Version,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    extensions: usize,
    end: bool,
}

fn seen<B: Body>(r: &Request<B>) -> Seen {
    Seen {
        method: r.method().clone(),
        uri: r.uri().clone(),
        version: r.version(),
        headers: fields(r.headers()),
        extensions: r.extensions().len(),
        end: r.body().is_end_stream(),
    }
}

fn fields(h: &HeaderMap) -> Vec<(http::HeaderName, http::HeaderValue)> {
    h.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
}

/// What hyper's server did with request bytes: the requests its service
/// got, whether it wrote anything, whether it closed.
fn hyper_requests(bytes: &[u8]) -> (Vec<Seen>, Vec<u8>, bool) {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let got = Arc::new(Mutex::new(Vec::new()));
        let log = got.clone();
        let conn = serve(server, move |req| {
            log.lock().expect("the log").push(seen(&req));
            Response::new(Empty::<Bytes>::new())
        });
        let (out, closed) = exchange(&mut client, bytes).await;
        drop(client);
        let _ = conn.await;
        let got = std::mem::take(&mut *got.lock().expect("the log"));
        (got, out, closed)
    })
}

/// The requests `parse_request` reads one after the other while each keeps
/// the connection open, and what it says of the bytes after them.
fn codec_requests(bytes: &[u8]) -> (Vec<(Seen, bool)>, Parsed) {
    let mut buf = bytes::BytesMut::from(bytes);
    let mut read = Vec::new();
    loop {
        let before = buf.clone();
        match parse_request(&mut buf, HeaderMap::new()) {
            Parsed::Simple(s) => {
                let keep_alive = s.keep_alive;
                read.push((seen(&s.request.map(|()| Empty::<Bytes>::new())), keep_alive));
                if !keep_alive {
                    return (read, Parsed::Other);
                }
                if buf.is_empty() {
                    return (read, Parsed::Partial);
                }
            }
            end => {
                // Left to hyper or to the next read: every byte stays.
                assert_eq!(buf, before, "{end:?}");
                return (read, end);
            }
        }
    }
}

fn check_request(bytes: &Bytes2) -> Result<(), TestCaseError> {
    let (read, end) = codec_requests(&bytes.0);
    if read.is_empty() && matches!(end, Parsed::Other) {
        // hyper's alone: nothing to compare.
        return Ok(());
    }
    let (got, out, closed) = hyper_requests(&bytes.0);
    let out = out.escape_ascii().to_string();
    for (i, (mine, _)) in read.iter().enumerate() {
        prop_assert_eq!(Some(mine), got.get(i), "request {}; hyper wrote {}", i, out);
    }
    let last_closes = read.last().is_some_and(|(_, keep_alive)| !keep_alive);
    if last_closes {
        prop_assert_eq!(got.len(), read.len(), "hyper read past a close: {}", out);
        prop_assert!(closed, "hyper kept the connection open: {}", out);
    } else if matches!(end, Parsed::Partial) {
        prop_assert_eq!(got.len(), read.len(), "hyper wrote {}", out);
        prop_assert!(!closed, "hyper closed the connection: {}", out);
        let answers = out.matches("HTTP/1.1 200 OK").count();
        prop_assert_eq!(answers, read.len(), "hyper wrote {}", out);
    }
    Ok(())
}

// --------------------------------------------------------------- responses

const STATUS: [u16; 8] = [200, 200, 204, 206, 304, 404, 500, 599];
const INTERIM: [u16; 4] = [100, 101, 102, 103];
const VERSIONS_OUT: [Version; 4] = [
    Version::HTTP_11,
    Version::HTTP_11,
    Version::HTTP_10,
    Version::HTTP_2,
];
const REASONS: [&[u8]; 3] = [b"Fine", b"Very \xe9 Odd", b""];
const DATE: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

#[derive(Debug, Clone, Copy)]
enum Length {
    Matching,
    Conflicting,
    Zero,
    Invalid(&'static str),
}

#[derive(Debug, Clone)]
enum Field {
    Length(Length),
    Coding(&'static str),
    Connection(&'static str),
    Trailer(&'static str),
    Date,
    Other(Vec<u8>, Vec<u8>),
}

#[derive(Debug, Clone)]
enum BodyKind {
    /// At its end from the start: no length.
    Empty,
    /// Known length, at its end once read.
    Full(usize),
    /// Unknown length.
    Stream(Vec<usize>),
    /// Known length (perhaps 0), not at its end before it is read.
    Hinted(Vec<usize>),
}

/// A body that states its exact length and is not at its end until read.
struct Hinted {
    chunks: std::collections::VecDeque<Bytes>,
    hint: u64,
}

impl Body for Hinted {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.chunks.pop_front().map(|c| Ok(Frame::data(c))))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.hint)
    }
}

#[derive(Debug, Clone)]
struct Answer {
    head: bool,
    close: bool,
    status: u16,
    version: Version,
    fields: Vec<Field>,
    reason: Option<&'static [u8]>,
    body: BodyKind,
}

fn response_field() -> impl Strategy<Value = Field> {
    let length = prop_oneof![
        3 => Just(Length::Matching),
        1 => Just(Length::Conflicting),
        1 => Just(Length::Zero),
        1 => prop::sample::select(&["abc", "", "-1", "+5", "5, 5", " 5", "99999999999999999999"][..])
            .prop_map(Length::Invalid),
    ];
    prop_oneof![
        3 => length.prop_map(Field::Length),
        2 => prop::sample::select(&["chunked", "gzip", "gzip, chunked", "Chunked", "chunked, gzip"][..])
            .prop_map(Field::Coding),
        2 => prop::sample::select(&["close", "keep-alive", "foo", "Close, x", "upgrade", "x, keep-alive"][..])
            .prop_map(Field::Connection),
        1 => prop::sample::select(&["x-sum", "expires, x-b", "Bad Name"][..]).prop_map(Field::Trailer),
        1 => Just(Field::Date),
        2 => (token(), value()).prop_map(|(n, v)| {
            // A value is what it is written as: no outer whitespace.
            let v = v.trim_ascii().to_vec();
            Field::Other(n, v)
        }),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    let body = prop_oneof![
        2 => Just(BodyKind::Empty),
        3 => (1..20usize).prop_map(BodyKind::Full),
        3 => prop::collection::vec(1..10usize, 0..4).prop_map(BodyKind::Stream),
        1 => prop::collection::vec(1..10usize, 0..3).prop_map(BodyKind::Hinted),
    ];
    (
        (
            prop::bool::weighted(0.25),
            prop::bool::weighted(0.25),
            prop_oneof![
                12 => prop::sample::select(&STATUS[..]),
                1 => prop::sample::select(&INTERIM[..]),
            ],
            prop::sample::select(&VERSIONS_OUT[..]),
        ),
        prop::collection::vec(response_field(), 0..6),
        prop::option::weighted(0.15, prop::sample::select(&REASONS[..])),
        body,
    )
        .prop_map(
            |((head, close, status, version), fields, reason, body)| Answer {
                head,
                close,
                status,
                version,
                fields,
                reason,
                body,
            },
        )
}

impl Answer {
    /// The body's bytes, as the chunks it yields.
    fn chunks(&self) -> Vec<Vec<u8>> {
        let piece = |i: usize, n: usize| vec![b'a' + (i % 26) as u8; n];
        match &self.body {
            BodyKind::Empty => Vec::new(),
            BodyKind::Full(n) => vec![piece(0, *n)],
            BodyKind::Stream(sizes) | BodyKind::Hinted(sizes) => sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| piece(i, n))
                .collect(),
        }
    }

    fn body_len(&self) -> usize {
        self.chunks().iter().map(Vec::len).sum()
    }

    /// What hyper's dispatcher learns of the body.
    fn body_length(&self) -> Option<BodyLength> {
        match &self.body {
            BodyKind::Empty => None,
            BodyKind::Full(n) => Some(BodyLength::Known(*n as u64)),
            BodyKind::Stream(_) => Some(BodyLength::Unknown),
            BodyKind::Hinted(_) => Some(BodyLength::Known(self.body_len() as u64)),
        }
    }

    fn known(&self) -> bool {
        matches!(self.body, BodyKind::Full(_) | BodyKind::Hinted(_))
    }

    fn response(&self) -> Response<()> {
        let mut r = Response::new(());
        *r.status_mut() = http::StatusCode::from_u16(self.status).expect("a status");
        *r.version_mut() = self.version;
        let n = self.body_len();
        for f in &self.fields {
            let (name, value): (http::HeaderName, Vec<u8>) = match f {
                Field::Length(l) => (
                    http::header::CONTENT_LENGTH,
                    match l {
                        Length::Matching => n.to_string().into_bytes(),
                        // hyper asserts (in debug builds) that a length
                        // stated for a body of known length is its length.
                        Length::Conflicting if self.known() => n.to_string().into_bytes(),
                        Length::Conflicting => (n + 1).to_string().into_bytes(),
                        Length::Zero if self.known() => n.to_string().into_bytes(),
                        Length::Zero => b"0".to_vec(),
                        Length::Invalid(v) => v.as_bytes().to_vec(),
                    },
                ),
                Field::Coding(v) => (http::header::TRANSFER_ENCODING, v.as_bytes().to_vec()),
                Field::Connection(v) => (http::header::CONNECTION, v.as_bytes().to_vec()),
                Field::Trailer(v) => (http::header::TRAILER, v.as_bytes().to_vec()),
                Field::Date => (http::header::DATE, DATE.as_bytes().to_vec()),
                Field::Other(name, value) => (
                    http::HeaderName::from_bytes(name).expect("a token"),
                    value.clone(),
                ),
            };
            let value = http::HeaderValue::from_bytes(&value).expect("a value");
            r.headers_mut().append(name, value);
        }
        if let Some(reason) = self.reason {
            r.extensions_mut()
                .insert(hyper::ext::ReasonPhrase::try_from(reason).expect("a reason phrase"));
        }
        r
    }

    fn request(&self) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(if self.head { &b"HEAD"[..] } else { b"GET" });
        r.extend_from_slice(b" /x HTTP/1.1\r\nHost: h\r\n");
        if self.close {
            r.extend_from_slice(b"Connection: close\r\n");
        }
        r.extend_from_slice(b"\r\n");
        r
    }
}

/// hyper's bytes for the answer, and whether it closed after them.
fn hyper_response(a: &Answer, chunks: Vec<Vec<u8>>) -> (Vec<u8>, bool) {
    let response = a.response();
    let kind = a.body.clone();
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let conn = serve(server, move |_req| {
            let body: BoxBody<Bytes, Infallible> = match kind {
                BodyKind::Empty => Empty::new().boxed(),
                BodyKind::Full(_) => Full::new(Bytes::from(chunks.concat())).boxed(),
                BodyKind::Stream(_) => {
                    let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
                        .iter()
                        .map(|c| Ok(Frame::data(Bytes::from(c.clone()))))
                        .collect();
                    StreamBody::new(futures_util::stream::iter(frames)).boxed()
                }
                BodyKind::Hinted(_) => Hinted {
                    hint: chunks.iter().map(|c| c.len() as u64).sum(),
                    chunks: chunks.iter().map(|c| Bytes::from(c.clone())).collect(),
                }
                .boxed(),
            };
            let (mut parts, ()) = response.clone().into_parts();
            parts.extensions = response.extensions().clone();
            Response::from_parts(parts, body)
        });
        let (out, closed) = exchange(&mut client, &a.request()).await;
        drop(client);
        let _ = conn.await;
        (out, closed)
    })
}

/// The body bytes `framing` puts on the wire for `chunks`.
fn framed(framing: Framing, chunks: &[Vec<u8>]) -> Vec<u8> {
    match framing {
        Framing::Length(_) | Framing::CloseDelimited => chunks.concat(),
        Framing::Chunked => {
            let mut out = Vec::new();
            for c in chunks {
                crate::server::h1::chunk_head(c.len(), &mut out);
                out.extend_from_slice(c);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
    }
}

fn check_response(a: &Answer) -> Result<(), TestCaseError> {
    // A length stated for a body of unknown length: hyper sends nothing if
    // the body falls short (the head is dropped with the error) and stops
    // after the stated bytes if it is longer, so the body is made to meet
    // it, and the head and framing are compared.
    let mut chunks = a.chunks();
    let (mut parts, ()) = a.response().into_parts();
    let stated = encode_head(
        &mut parts,
        a.body_length(),
        a.head,
        !a.close,
        b"",
        &mut Vec::new(),
    );
    if let (
        BodyKind::Stream(_),
        Ok(Encoded {
            framing: Framing::Length(n),
            ..
        }),
    ) = (&a.body, stated)
        && n > 0
        && n < 4096
    {
        chunks = vec![vec![b'z'; n as usize]];
    }
    let body_len = chunks.iter().map(Vec::len).sum::<usize>() as u64;
    let (out, closed) = hyper_response(a, chunks.clone());
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    // The date hyper wrote, if it wrote one: the value before the end.
    let date = match end {
        Some(end) if end >= 4 + 29 + 6 && out[..end - 4].ends_with(b"GMT") => {
            out[end - 4 - 29..end - 4].to_vec()
        }
        _ => DATE.as_bytes().to_vec(),
    };
    let (mut parts, ()) = a.response().into_parts();
    let mut dst = Vec::new();
    let encoded = encode_head(
        &mut parts,
        a.body_length(),
        a.head,
        !a.close,
        &date,
        &mut dst,
    );
    let shown = out.escape_ascii().to_string();
    // A stated length the body does not meet: hyper's error when the body
    // ends (the head may not be sent at all), not the head's framing.
    let consistent = match encoded {
        Ok(Encoded {
            framing: Framing::Length(n),
            ..
        }) => n == 0 || n == body_len,
        _ => true,
    };
    let Some(end) = end else {
        if !consistent {
            return Ok(());
        }
        prop_assert_eq!(encoded, Err(Unwritable), "hyper wrote {}", shown);
        prop_assert!(closed);
        return Ok(());
    };
    prop_assert_eq!(
        dst.escape_ascii().to_string(),
        out[..end].escape_ascii().to_string(),
        "{:?}",
        encoded
    );
    let Ok(Encoded { framing, last }) = encoded else {
        return Err(TestCaseError::fail(format!(
            "{encoded:?}; hyper wrote {shown}"
        )));
    };
    let body = &out[end..];
    if !consistent {
        return Ok(());
    }
    let expected = match framing {
        Framing::Length(0) => Vec::new(),
        f => framed(f, &chunks),
    };
    prop_assert_eq!(
        body.escape_ascii().to_string(),
        expected.escape_ascii().to_string(),
        "{:?}",
        framing
    );
    prop_assert_eq!(last, closed, "{:?}; hyper wrote {}", framing, shown);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn requests_read_here_are_hypers(bytes in request_bytes()) {
        check_request(&bytes)?;
    }

    #[test]
    fn response_heads_are_hypers(answer in answer()) {
        check_response(&answer)?;
    }
}

/// Fixed requests at the limits: a hundred fields, a head of MAX_HEAD
/// bytes, empty lines before the request line, a long pipeline.
#[test]
fn requests_at_the_limits_are_hypers() {
    let mut hundred = b"GET http://h/ HTTP/1.1\r\n".to_vec();
    for i in 0..100 {
        hundred.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
    }
    hundred.extend_from_slice(b"\r\n");
    let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
    long.resize(crate::server::h1::MAX_HEAD - 4, b'a');
    long.extend_from_slice(b"\r\n\r\n");
    let pipeline = b"GET /1 HTTP/1.1\r\n\r\nHEAD /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\nConnection: close\r\n\r\nGET /4 HTTP/1.1\r\n\r\n";
    for bytes in [
        hundred,
        long,
        b"\r\n\r\nGET / HTTP/1.1\r\n\r\n".to_vec(),
        b"\nGET / HTTP/1.1\nHost: h\n\n".to_vec(),
        pipeline.to_vec(),
    ] {
        let (read, _) = codec_requests(&bytes);
        assert!(!read.is_empty(), "{}", bytes.escape_ascii());
        check_request(&Bytes2(bytes)).expect("as hyper");
    }
}

/// Fixed responses hyper writes oddly: the `chunked` added to a coding
/// list is added to the joined lines after it too; a 1xx other than 101
/// becomes a bare 500; a body of known length 0 that is not at its end.
#[test]
fn odd_responses_are_hypers() {
    let answer = |status, fields: Vec<Field>, body| Answer {
        head: false,
        close: false,
        status,
        version: Version::HTTP_11,
        fields,
        reason: None,
        body,
    };
    let coded = vec![
        Field::Coding("gzip"),
        Field::Connection("foo"),
        Field::Trailer("x-sum"),
    ];
    for a in [
        answer(200, coded.clone(), BodyKind::Stream(vec![3, 4])),
        answer(200, coded.clone(), BodyKind::Full(5)),
        Answer {
            close: true,
            ..answer(200, coded, BodyKind::Stream(vec![3]))
        },
        answer(
            101,
            vec![Field::Connection("upgrade")],
            BodyKind::Stream(vec![2]),
        ),
        answer(100, vec![Field::Date], BodyKind::Full(2)),
        Answer {
            head: true,
            ..answer(103, vec![], BodyKind::Empty)
        },
        answer(200, vec![], BodyKind::Hinted(vec![])),
        answer(
            304,
            vec![Field::Length(Length::Zero)],
            BodyKind::Hinted(vec![]),
        ),
        Answer {
            version: Version::HTTP_10,
            ..answer(
                200,
                vec![Field::Coding("chunked")],
                BodyKind::Stream(vec![1]),
            )
        },
    ] {
        check_response(&a).unwrap_or_else(|e| panic!("{e}: {a:?}"));
    }
}
