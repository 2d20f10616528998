//! wire.rs against hyper's own HTTP/1 client: the same response bytes, cut
//! at the same places, go through `parse_response` + `BodyReader` and
//! through a `hyper::client::conn::http1` connection over an in-memory
//! duplex; status, fields, reason, body and success must agree, and a
//! response wire.rs calls reusable must let hyper send a second request on
//! its connection.
//!
//! Kept out of the generator, where the two legitimately differ (each case
//! is a unit test in `tests.rs` instead):
//! - a `Transfer-Encoding` value with an empty list element or obs-text
//!   (hyper reads "chunked," and "g\x80zip, chunked" as not chunked);
//! - HTTP/1.0 `Connection: keep-alive` (hyper reuses, wire.rs does not; the
//!   generator sends it, and only wire.rs's reusable answers are checked);
//! - trailer fields that are not field lines, and bare LF in the trailer
//!   section (hyper parses trailers, wire.rs skips them and refuses a bare
//!   LF);
//! - obs-fold (both refuse it with their default parser configuration; a
//!   unit test checks wire.rs);
//! - extension and trailer sizes near the 16 KiB caps (hyper's limits
//!   count slightly differently).
//!
//! Transfer-Encoding in HTTP/1.0 is refused by both and stays in.
//!
//! A second property corrupts a few bytes of the same responses, and
//! allows only the differences above and one more: a broken head arriving
//! in pieces is refused by wire.rs at once, where hyper waits for the end
//! of the head before it parses again.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use proptest::sample::Index;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::upstream::wire::{BodyReader, Framing, Parsed, Read, WireError, parse_response};

const NAMES: [&str; 6] = [
    "Server",
    "X-A",
    "Set-Cookie",
    "Cache-Control",
    "Vary",
    "x-a",
];
const CONNECTION: [Option<&str>; 7] = [
    None,
    Some("close"),
    Some("keep-alive"),
    Some("Close"),
    Some("foo, close"),
    Some("keep-alive, CLOSE"),
    Some("Keep-Alive"),
];
const STATUS: [u16; 10] = [200, 201, 204, 206, 299, 304, 404, 410, 500, 599];
const INTERIM: [u16; 3] = [100, 102, 103];
const EXTENSIONS: [&str; 6] = ["", ";a", ";a=b", ";n=\"q;v\"", " ; x = y", "\t;a;b=c"];
const TRAILERS: [&str; 3] = ["Expires", "X-Checksum", "Server-Timing"];

/// How the body is framed, and the variant of the framing fields.
#[derive(Debug, Clone)]
enum Kind {
    Length(u8),
    /// Chunked, with `Content-Length` too when the flag is set.
    Chunked(u8, bool),
    UntilClose,
    /// A transfer coding that does not end in chunked: until close.
    NotChunked(u8),
    /// A `Content-Length` that is an error.
    BadLength(u8),
}

#[derive(Debug, Clone)]
struct Chunk {
    len: usize,
    zeros: usize,
    upper: bool,
    bws: usize,
    ext: usize,
}

#[derive(Debug, Clone)]
struct Spec {
    head: bool,
    http10: bool,
    interim: Vec<(u16, bool)>,
    status: u16,
    reason: u8,
    fields: Vec<(usize, Vec<u8>)>,
    connection: usize,
    kind: Kind,
    body: Vec<u8>,
    chunks: Vec<Chunk>,
    last: Chunk,
    trailers: Vec<(usize, Vec<u8>)>,
    close: bool,
    truncate: Option<Index>,
    cuts: Vec<Index>,
}

/// The bytes a test origin sends, in pieces, and whether it closes the
/// connection after them.
struct Case {
    method: Method,
    pieces: Vec<Vec<u8>>,
    close: bool,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pieces: Vec<String> = self
            .pieces
            .iter()
            .map(|p| p.escape_ascii().to_string())
            .collect();
        f.debug_struct("Case")
            .field("method", &self.method)
            .field("pieces", &pieces)
            .field("close", &self.close)
            .finish()
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Response {
        status: u16,
        fields: Vec<(String, Vec<u8>)>,
        reason: Option<Vec<u8>>,
        body: Vec<u8>,
    },
    Failed,
    /// Waiting for bytes the origin does not send, on an open connection.
    Stalled,
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

fn chunk(len: std::ops::Range<usize>) -> impl Strategy<Value = Chunk> {
    (
        len,
        0..3usize,
        any::<bool>(),
        0..3usize,
        0..EXTENSIONS.len(),
    )
        .prop_map(|(len, zeros, upper, bws, ext)| Chunk {
            len,
            zeros,
            upper,
            bws,
            ext,
        })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => (0..4u8).prop_map(Kind::Length),
        3 => (0..4u8, prop::bool::weighted(0.2)).prop_map(|(s, cl)| Kind::Chunked(s, cl)),
        1 => Just(Kind::UntilClose),
        1 => (0..3u8).prop_map(Kind::NotChunked),
        1 => (0..5u8).prop_map(Kind::BadLength),
    ]
}

prop_compose! {
    fn spec()(
        (head, http10, interim, status, reason) in (
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
            prop::collection::vec((prop::sample::select(&INTERIM[..]), any::<bool>()), 0..3),
            prop::sample::select(&STATUS[..]),
            0..3u8,
        ),
        (fields, connection, kind, body) in (
            prop::collection::vec((0..NAMES.len(), value()), 0..4),
            prop_oneof![Just(0), 0..CONNECTION.len()],
            kind(),
            prop::collection::vec(any::<u8>(), 0..48),
        ),
        (chunks, last, trailers) in (
            prop::collection::vec(chunk(1..20), 0..5),
            chunk(0..1),
            prop::collection::vec((0..TRAILERS.len(), value()), 0..3),
        ),
        (close, truncate, cuts) in (
            any::<bool>(),
            prop::option::weighted(0.15, any::<Index>()),
            prop::collection::vec(any::<Index>(), 0..5),
        ),
    ) -> Spec {
        Spec {
            head, http10, interim, status, reason, fields, connection, kind, body, chunks, last,
            trailers, close, truncate, cuts,
        }
    }
}

fn chunk_line(out: &mut Vec<u8>, c: &Chunk, len: usize) {
    out.extend(std::iter::repeat_n(b'0', c.zeros));
    let size = if c.upper {
        format!("{len:X}")
    } else {
        format!("{len:x}")
    };
    out.extend_from_slice(size.as_bytes());
    out.extend(std::iter::repeat_n(b' ', c.bws));
    out.extend_from_slice(EXTENSIONS[c.ext].as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The response `spec` describes, with the bytes at `mutate` replaced.
fn build(spec: &Spec, mutate: &[(Index, u8)]) -> Case {
    let mut out = Vec::new();
    for &(code, link) in &spec.interim {
        out.extend_from_slice(format!("HTTP/1.1 {code} Info\r\n").as_bytes());
        if link {
            out.extend_from_slice(b"Link: </a.css>; rel=preload\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
    let version = if spec.http10 { "HTTP/1.0" } else { "HTTP/1.1" };
    let status = StatusCode::from_u16(spec.status).expect("a valid status");
    let reason = match spec.reason {
        0 => status.canonical_reason().unwrap_or("Whatever"),
        1 => "Custom Reason",
        _ => "",
    };
    out.extend_from_slice(format!("{version} {} {reason}\r\n", spec.status).as_bytes());
    let field = |out: &mut Vec<u8>, name: &str, value: &[u8]| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    for (name, value) in &spec.fields {
        field(&mut out, NAMES[*name], value);
    }
    if let Some(connection) = CONNECTION[spec.connection] {
        field(&mut out, "Connection", connection.as_bytes());
    }
    let n = spec.body.len();
    match spec.kind {
        Kind::Length(style) => match style {
            0 => field(&mut out, "Content-Length", n.to_string().as_bytes()),
            1 => field(&mut out, "Content-Length", format!("{n}, {n}").as_bytes()),
            2 => {
                field(&mut out, "Content-Length", n.to_string().as_bytes());
                field(&mut out, "content-length", n.to_string().as_bytes());
            }
            _ => field(&mut out, "Content-Length", format!("0{n}").as_bytes()),
        },
        Kind::Chunked(style, also_length) => {
            if also_length {
                field(&mut out, "Content-Length", (n + 3).to_string().as_bytes());
            }
            match style {
                0 => field(&mut out, "Transfer-Encoding", b"chunked"),
                1 => field(&mut out, "Transfer-Encoding", b"Chunked"),
                2 => field(&mut out, "Transfer-Encoding", b"gzip, chunked"),
                _ => {
                    field(&mut out, "Transfer-Encoding", b"gzip");
                    field(&mut out, "transfer-encoding", b"chunked");
                }
            }
        }
        Kind::UntilClose => {}
        Kind::NotChunked(style) => {
            let coding: &[u8] = match style {
                0 => b"gzip",
                1 => b"chunked, gzip",
                _ => b"identity",
            };
            field(&mut out, "Transfer-Encoding", coding);
        }
        Kind::BadLength(style) => {
            let value = match style {
                0 => format!("{n}, {}", n + 1),
                1 => format!("+{n}"),
                2 => format!("0x{n}"),
                3 => format!("{n} {n}"),
                _ => "18446744073709551616".to_owned(),
            };
            field(&mut out, "Content-Length", value.as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    let empty = spec.head || spec.status == 204 || spec.status == 304;
    if !empty {
        if let Kind::Chunked(..) = spec.kind {
            let mut rest = &spec.body[..];
            let mut sizes = spec.chunks.iter().cycle();
            while !rest.is_empty() {
                let c = sizes.next().unwrap_or(&spec.last);
                let len = if c.len == 0 {
                    rest.len()
                } else {
                    c.len.min(rest.len())
                };
                chunk_line(&mut out, c, len);
                out.extend_from_slice(&rest[..len]);
                out.extend_from_slice(b"\r\n");
                rest = &rest[len..];
            }
            chunk_line(&mut out, &spec.last, 0);
            for (name, value) in &spec.trailers {
                field(&mut out, TRAILERS[*name], value);
            }
            out.extend_from_slice(b"\r\n");
        } else {
            out.extend_from_slice(&spec.body);
        }
    }
    if !out.is_empty() {
        for (at, byte) in mutate {
            let at = at.index(out.len());
            out[at] = *byte;
        }
    }
    let mut close = spec.close;
    if let Some(at) = spec.truncate.filter(|_| !out.is_empty()) {
        out.truncate(at.index(out.len()));
        close = true;
    }
    let mut cuts: Vec<usize> = if out.is_empty() {
        Vec::new()
    } else {
        spec.cuts.iter().map(|i| i.index(out.len())).collect()
    };
    cuts.push(0);
    cuts.push(out.len());
    cuts.sort_unstable();
    cuts.dedup();
    let pieces = cuts.windows(2).map(|w| out[w[0]..w[1]].to_vec()).collect();
    let method = if spec.head { Method::HEAD } else { Method::GET };
    Case {
        method,
        pieces,
        close,
    }
}

fn fields(headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// What wire.rs made of the final head.
#[derive(Debug, Clone, Copy)]
struct Seen {
    framing: Framing,
    version: Version,
    reusable: bool,
    /// A `Transfer-Encoding` value with obs-text or an empty list element,
    /// which hyper reads as not chunked.
    odd_coding: bool,
}

fn odd_coding(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .any(|v| {
            !v.as_bytes().is_ascii()
                || v.as_bytes()
                    .split(|&b| b == b',')
                    .any(|c| c.trim_ascii().is_empty())
        })
}

/// What wire.rs reads, and what it made of the final head; `exact`: the
/// response is framed exactly, nothing may be left after it.
fn through_wire(case: &Case, exact: bool) -> (Outcome, Option<Seen>, Option<WireError>) {
    let mut pieces = case.pieces.iter();
    let mut buf = BytesMut::new();
    let ended = |close: bool| {
        if close {
            Outcome::Failed
        } else {
            Outcome::Stalled
        }
    };
    let head = loop {
        match parse_response(&mut buf, &case.method, &mut http::HeaderMap::new()) {
            Err(e) => return (Outcome::Failed, None, Some(e)),
            Ok(Parsed::Interim) => {}
            Ok(Parsed::Final(head)) => break head,
            Ok(Parsed::Partial) => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None => return (ended(case.close), None, None),
            },
        }
    };
    let seen = Some(Seen {
        framing: head.framing,
        version: head.version,
        reusable: head.reusable,
        odd_coding: odd_coding(&head.headers),
    });
    let mut reader = BodyReader::new(head.framing);
    let mut body = Vec::new();
    loop {
        match reader.read(&mut buf) {
            Err(e) => return (Outcome::Failed, seen, Some(e)),
            Ok(Read::Data(data)) => body.extend_from_slice(&data),
            Ok(Read::End) => break,
            Ok(Read::More) => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None if !case.close => return (Outcome::Stalled, seen, None),
                None => match reader.eof() {
                    Ok(()) => break,
                    Err(e) => return (Outcome::Failed, seen, Some(e)),
                },
            },
        }
    }
    assert!(
        !exact || (buf.is_empty() && pieces.next().is_none()),
        "bytes left after the body: {case:?}"
    );
    let outcome = Outcome::Response {
        status: head.status.as_u16(),
        fields: fields(&head.headers),
        reason: head.reason.map(|r| r.to_vec()),
        body,
    };
    (outcome, seen, None)
}

/// Reads a request head off the origin's end; false if the connection ends
/// first.
async fn read_request(io: &mut DuplexStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn exchange(sender: &mut Sender, method: &Method) -> Result<Outcome, hyper::Error> {
    sender.ready().await?;
    let request = http::Request::builder()
        .method(method.clone())
        .uri("/")
        .header(http::header::HOST, "origin.test")
        .body(Empty::<Bytes>::new())
        .expect("a valid request");
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let fields = fields(response.headers());
    let reason = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| r.as_bytes().to_vec());
    let mut incoming = response.into_body();
    let mut body = Vec::new();
    while let Some(frame) = incoming.frame().await {
        if let Ok(data) = frame?.into_data() {
            body.extend_from_slice(&data);
        }
    }
    Ok(Outcome::Response {
        status,
        fields,
        reason,
        body,
    })
}

/// What hyper's client reads from the same bytes, its error's words, and,
/// if asked, whether it then carries a second request on the same
/// connection.
fn through_hyper(case: &Case, second: bool) -> (Outcome, String, Option<bool>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    // Paused: the clock moves only when every task waits, so the timeout
    // fires exactly when hyper waits for bytes that will never come.
    let limit = Duration::from_secs(60);
    runtime.block_on(async {
        let (client, mut origin) = tokio::io::duplex(1 << 16);
        let pieces = case.pieces.clone();
        let close = case.close;
        tokio::spawn(async move {
            if !read_request(&mut origin).await {
                return;
            }
            for piece in pieces {
                if origin.write_all(&piece).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            if close {
                let _ = origin.shutdown().await;
            } else if read_request(&mut origin).await {
                let again = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond";
                let _ = origin.write_all(again).await;
            }
            let mut sink = [0u8; 256];
            while matches!(origin.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client))
            .await
            .expect("a handshake");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let (outcome, error) =
            match tokio::time::timeout(limit, exchange(&mut sender, &case.method)).await {
                Err(_) => (Outcome::Stalled, String::new()),
                Ok(Err(e)) => {
                    let mut words = e.to_string();
                    let mut cause = std::error::Error::source(&e);
                    while let Some(c) = cause {
                        words = format!("{words}: {c}");
                        cause = c.source();
                    }
                    (Outcome::Failed, words)
                }
                Ok(Ok(outcome)) => (outcome, String::new()),
            };
        let again = if second {
            let got = tokio::time::timeout(limit, exchange(&mut sender, &Method::GET)).await;
            Some(matches!(got, Ok(Ok(Outcome::Response { status: 200, ref body, .. })) if body == b"second"))
        } else {
            None
        };
        (outcome, error, again)
    })
}

/// Differences a corrupted response may show, each legitimate: wire.rs
/// re-parses a growing head each time and refuses a broken one at once,
/// where hyper waits for the end of the head first (and the same for a bare
/// LF in the trailer section, which wire.rs refuses and hyper reads as a
/// field line's end); hyper reads a coding with obs-text or an empty list
/// element as not chunked; wire.rs skips trailer fields, hyper parses them
/// and fails on a broken one.
fn allowed(
    (wire, wire_error): (&Outcome, Option<&WireError>),
    (hyper, hyper_error): (&Outcome, &str),
    seen: Option<Seen>,
) -> bool {
    match (wire, hyper) {
        _ if seen.is_some_and(|s| s.odd_coding) => true,
        (Outcome::Failed, Outcome::Stalled) => true,
        (Outcome::Failed, Outcome::Response { .. }) => {
            wire_error == Some(&WireError::Chunk("bare LF in the trailer section"))
        }
        (Outcome::Response { .. }, Outcome::Failed) => {
            seen.is_some_and(|s| s.framing == Framing::Chunked)
                && [
                    "Invalid header",
                    "Partial header",
                    "invalid header",
                    "invalid token",
                    "invalid new line",
                ]
                .iter()
                .any(|w| hyper_error.contains(w))
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn wire_reads_what_hyper_reads(spec in spec()) {
        let case = build(&spec, &[]);
        let (wire, seen, _) = through_wire(&case, true);
        let reusable = matches!(wire, Outcome::Response { .. }) && seen.is_some_and(|s| s.reusable);
        if reusable {
            let seen = seen.expect("a head");
            // Reuse only after a self-delimited body on HTTP/1.1.
            prop_assert!(seen.framing != Framing::UntilClose && seen.version == Version::HTTP_11);
        }
        let second = reusable && !case.close;
        let (hyper, error, again) = through_hyper(&case, second);
        prop_assert_eq!(&wire, &hyper, "hyper: {}; {:?}", error, case);
        if second {
            prop_assert_eq!(again, Some(true), "hyper does not reuse the connection: {:?}", case);
        }
    }

    /// The same responses with a few bytes replaced by framing-relevant
    /// ones: both read them alike, or differ only as [`allowed`] says.
    #[test]
    fn wire_reads_corrupted_responses_as_hyper_does(
        spec in spec(),
        mutate in prop::collection::vec(
            (any::<Index>(), prop::sample::select(&b"\r\n :;,\t0aF-+\x00\x7f\x80"[..])),
            1..4,
        ),
    ) {
        let case = build(&spec, &mutate);
        let (wire, seen, wire_error) = through_wire(&case, false);
        let (hyper, hyper_error, _) = through_hyper(&case, false);
        prop_assert!(
            wire == hyper || allowed((&wire, wire_error.as_ref()), (&hyper, &hyper_error), seen),
            "wire.rs: {:?} {:?}\nhyper: {:?} {}\n{:?}", wire, wire_error, hyper, hyper_error, case
        );
    }
}
