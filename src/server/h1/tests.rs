//! The own HTTP/1.1 server side's codec.

use super::*;

mod differential;

const DATE: &[u8; 29] = b"Sat, 28 Nov 2026 04:00:00 GMT";

fn parse(bytes: &[u8]) -> (Parsed, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let parsed = parse_request(&mut buf, HeaderMap::new());
    (parsed, buf)
}

fn simple(bytes: &[u8]) -> (Simple, BytesMut) {
    match parse(bytes) {
        (Parsed::Simple(s), rest) => (s, rest),
        (other, _) => panic!("{other:?} for {}", bytes.escape_ascii()),
    }
}

/// `Other`, with every byte left in the buffer for hyper.
fn assert_other(bytes: &[u8]) {
    let (parsed, rest) = parse(bytes);
    assert!(
        matches!(parsed, Parsed::Other),
        "{parsed:?} for {}",
        bytes.escape_ascii()
    );
    assert_eq!(&rest[..], bytes, "the bytes stay for hyper");
}

#[test]
fn a_simple_get_in_absolute_form_is_read_and_split_off() {
    let first = b"GET http://example.com/a?b=c HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\nAccept: */*\r\nx-a: \t2 \xff\r\n\r\n";
    let second = b"GET / HTTP/1.1\r\nHost: b\r\n\r\n";
    let (s, rest) = simple(&[&first[..], &second[..]].concat());
    assert_eq!(&rest[..], second, "the pipelined request stays");
    assert!(s.keep_alive);
    let r = &s.request;
    assert_eq!(r.method(), Method::GET);
    assert_eq!(r.uri(), "http://example.com/a?b=c");
    assert_eq!(r.uri().host(), Some("example.com"));
    assert_eq!(r.version(), Version::HTTP_11);
    let fields: Vec<(&str, &[u8])> = r
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    // Values of one name are grouped (as in hyper's map), in their order.
    assert_eq!(
        fields,
        [
            ("host", &b"example.com"[..]),
            ("x-a", b"1"),
            ("x-a", b"2 \xff"),
            ("accept", b"*/*"),
        ]
    );
    assert!(r.extensions().is_empty());
    // The pipelined one is read next.
    let mut buf = rest;
    match parse_request(&mut buf, HeaderMap::new()) {
        Parsed::Simple(s) => assert_eq!(s.request.uri(), "/"),
        other => panic!("{other:?}"),
    }
    assert!(buf.is_empty());
}

#[test]
fn origin_form_and_other_methods_are_read() {
    for method in ["HEAD", "POST", "DELETE", "OPTIONS", "PROPFIND", "X-Odd!"] {
        let req = format!("{method} /p HTTP/1.1\r\nHost: h\r\n\r\n");
        let (s, rest) = simple(req.as_bytes());
        assert_eq!(s.request.method().as_str(), method);
        assert_eq!(s.request.uri(), "/p");
        assert!(rest.is_empty());
    }
    // Bytes past ASCII in the path: `http` (and so hyper) takes them.
    let (s, _) = simple(b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n");
    assert_eq!(s.request.uri().path(), "/\u{e9}");
}

#[test]
fn bodies_expectations_upgrades_and_connect_are_hypers() {
    for field in [
        "Content-Length: 0",
        "content-length: 5",
        "Transfer-Encoding: chunked",
        "TRANSFER-ENCODING: gzip",
        "Expect: 100-continue",
        "expect: foo",
        "Upgrade: websocket",
    ] {
        assert_other(format!("POST / HTTP/1.1\r\nHost: h\r\n{field}\r\nX: y\r\n\r\n").as_bytes());
    }
    assert_other(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    assert_other(b"GET / HTTP/1.0\r\nHost: h\r\n\r\n");
}

#[test]
fn malformed_heads_are_hypers() {
    for req in [
        &b"GET / HTTP/1.2\r\n\r\n"[..],
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1 \r\n\r\n",
        b"G(T / HTTP/1.1\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\n\r\n",
        b"GET\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad\x7fname: v\r\n\r\n",
        b"GET / HTTP/1.1\r\n: v\r\n\r\n",
        b"GET / HTTP/1.1\r\nName : v\r\n\r\n",
        b"GET / HTTP/1.1\r\nName: a\x7fb\r\n\r\n",
        b"GET / HTTP/1.1\r\nName: a\x00b\r\n\r\n",
        b"GET / HTTP/1.1\r\nName: a\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nNo-colon\r\n\r\n",
        // A target httparse takes and `http` does not: split, then given back.
        b"GET http://[::1 HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET http:// HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /\xc3\xa9\x80 HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    ] {
        assert_other(req);
    }
}

#[test]
fn more_than_a_hundred_fields_are_hypers() {
    let head = |n: usize| {
        let mut r = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            r.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        r
    };
    let (s, _) = simple(&head(100));
    assert_eq!(s.request.headers().len(), 100);
    assert_other(&head(101));
}

#[test]
fn a_long_head_is_hypers() {
    let long = |filler: usize, end: bool| {
        let mut r = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
        r.resize(r.len() + filler, b'a');
        r.extend_from_slice(if end { b"\r\n\r\n" } else { b"\r\n" });
        r
    };
    // Unfinished: partial below MAX_HEAD, hyper's from MAX_HEAD on.
    let start = long(0, false).len();
    assert!(matches!(
        parse(&long(MAX_HEAD - start - 1, false)).0,
        Parsed::Partial
    ));
    assert_other(&long(MAX_HEAD - start, false));
    assert_other(&long(MAX_HEAD * 2, false));
    // Whole: read here up to MAX_HEAD, hyper's beyond.
    let whole = long(MAX_HEAD - start - 2, true);
    assert_eq!(whole.len(), MAX_HEAD);
    simple(&whole);
    assert_other(&long(MAX_HEAD - start - 1, true));
}

#[test]
fn a_head_cut_anywhere_is_partial() {
    let req = b"\r\nGET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\nConnection: close\r\n\r\n";
    for cut in 0..req.len() {
        let (parsed, rest) = parse(&req[..cut]);
        assert!(matches!(parsed, Parsed::Partial), "{cut}: {parsed:?}");
        assert_eq!(&rest[..], &req[..cut]);
    }
    let (s, rest) = simple(req);
    assert!(!s.keep_alive);
    assert!(rest.is_empty());
}

#[test]
fn connection_close_anywhere_ends_keep_alive() {
    for fields in [
        "Connection: close\r\n",
        "Connection: CLOSE\r\n",
        "Connection: foo, close\r\n",
        "Connection: foo ,  Close ,bar\r\n",
        "Connection: keep-alive\r\nConnection: close\r\n",
        "Connection: close\r\nConnection: keep-alive\r\n",
        "Connection: foo\r\nX: y\r\nconnection: close\r\n",
    ] {
        let req = format!("GET / HTTP/1.1\r\n{fields}\r\n");
        assert!(!simple(req.as_bytes()).0.keep_alive, "{fields}");
    }
    for fields in [
        &b""[..],
        b"Connection: keep-alive\r\n",
        b"Connection: closed\r\n",
        b"Connection: clo se\r\n",
        b"Connection: \"close\"\r\n",
        b"Connection: close\xff\r\n",
        b"X-Connection: close\r\n",
    ] {
        let req = [&b"GET / HTTP/1.1\r\n"[..], fields, b"\r\n"].concat();
        assert!(simple(&req).0.keep_alive, "{}", fields.escape_ascii());
    }
    // obs-text: not a token list at all (hyper's reading).
    let req = b"GET / HTTP/1.1\r\nConnection: close, \xff\r\n\r\n";
    assert!(simple(req).0.keep_alive);
}

#[test]
fn leading_empty_lines_are_skipped() {
    let (s, rest) = simple(b"\r\n\r\nGET /a HTTP/1.1\r\n\r\n");
    assert_eq!(s.request.uri(), "/a");
    assert!(rest.is_empty());
    let (s, _) = simple(b"\nGET /b HTTP/1.1\r\n\r\n");
    assert_eq!(s.request.uri(), "/b");
}

#[test]
fn an_empty_buffer_is_partial() {
    assert!(matches!(parse(b"").0, Parsed::Partial));
}

/// A response's parts.
fn response(status: u16, fields: &[(&str, &str)]) -> http::response::Parts {
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = StatusCode::from_u16(status).expect("a status");
    for (n, v) in fields {
        parts.headers.append(
            HeaderName::from_bytes(n.as_bytes()).expect("a name"),
            HeaderValue::from_str(v).expect("a value"),
        );
    }
    parts
}

fn encode_with(
    mut parts: http::response::Parts,
    body: Option<BodyLength>,
    head: bool,
    keep_alive: bool,
) -> (Result<Encoded, Unwritable>, String) {
    let mut dst = b"before".to_vec();
    let result = encode_head(&mut parts, body, head, keep_alive, DATE, &mut dst);
    assert!(dst.starts_with(b"before"));
    assert!(parts.headers.is_empty(), "drained");
    (
        result,
        String::from_utf8_lossy(&dst["before".len()..]).into_owned(),
    )
}

fn encoded(framing: Framing, last: bool) -> Result<Encoded, Unwritable> {
    Ok(Encoded { framing, last })
}

const D: &str = "date: Sat, 28 Nov 2026 04:00:00 GMT\r\n";

#[test]
fn a_200_with_its_content_length() {
    let parts = response(200, &[("content-length", "5"), ("server", "p")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Known(5)), false, true);
    assert_eq!(r, encoded(Framing::Length(5), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nserver: p\r\n{D}\r\n")
    );
}

#[test]
fn a_known_length_gets_its_field() {
    let parts = response(404, &[("x-a", "1"), ("x-a", "2")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Known(12)), false, true);
    assert_eq!(r, encoded(Framing::Length(12), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 404 Not Found\r\nx-a: 1\r\nx-a: 2\r\ncontent-length: 12\r\n{D}\r\n")
    );
    // No body at all: content-length 0, a stated length dropped.
    let parts = response(200, &[("content-length", "7")]);
    let (r, text) = encode_with(parts, None, false, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n{D}\r\n")
    );
}

#[test]
fn an_unknown_length_is_chunked() {
    let (r, text) = encode_with(response(200, &[]), Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::Chunked, false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n{D}\r\n")
    );
    // A coding list gets chunked added; trailer kept. hyper's flag for the
    // added `chunked` stays set for the joined lines after it (trailer,
    // connection), which get one too: copied.
    let parts = response(
        200,
        &[
            ("transfer-encoding", "gzip"),
            ("trailer", "x-sum"),
            ("trailer", "x-b"),
        ],
    );
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::Chunked, false));
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ntrailer: x-sum, x-b, chunked\r\n{D}\r\n"
        )
    );
    // A stated length with an unknown body frames it.
    let parts = response(200, &[("content-length", "3"), ("content-length", "3")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::Length(3), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n{D}\r\n")
    );
}

#[test]
fn the_added_chunked_follows_the_joined_lines_after_the_coding() {
    // hyper's flag for the `chunked` it adds to a coding list is not reset
    // by the next field: a `connection` after the coding gets one too.
    let parts = response(200, &[("transfer-encoding", "gzip"), ("connection", "foo")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, false);
    assert_eq!(r, encoded(Framing::Chunked, true));
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\nconnection: foo, close, chunked\r\n{D}\r\n"
        )
    );
}

#[test]
fn an_unknown_length_in_http10_is_close_delimited() {
    let mut parts = response(200, &[("transfer-encoding", "chunked"), ("trailer", "x")]);
    parts.version = Version::HTTP_10;
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::CloseDelimited, true));
    assert_eq!(text, format!("HTTP/1.0 200 OK\r\n{D}\r\n"));
    // HTTP/2 is written as HTTP/1.1.
    let mut parts = response(201, &[]);
    parts.version = Version::HTTP_2;
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::Chunked, false));
    assert_eq!(
        text,
        format!("HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n{D}\r\n")
    );
}

#[test]
fn a_head_response_has_no_body_and_keeps_its_length() {
    let parts = response(200, &[("content-length", "42"), ("trailer", "x")]);
    let (r, text) = encode_with(parts, None, true, true);
    // The length is written as it is, the trailer dropped.
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: 42\r\n{D}\r\n")
    );
    // A coding after it: hyper refuses the pair, even for HEAD.
    let parts = response(200, &[("content-length", "42"), ("transfer-encoding", "x")]);
    assert_eq!(encode_with(parts, None, true, true).0, Err(Unwritable));
    // A coding alone is dropped.
    let parts = response(200, &[("transfer-encoding", "chunked")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), true, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(text, format!("HTTP/1.1 200 OK\r\n{D}\r\n"));
    let (r, text) = encode_with(response(200, &[]), Some(BodyLength::Known(9)), true, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n{D}\r\n")
    );
    let (r, text) = encode_with(response(200, &[]), Some(BodyLength::Unknown), true, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(text, format!("HTTP/1.1 200 OK\r\n{D}\r\n"));
    let (r, text) = encode_with(response(200, &[]), None, true, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
    assert_eq!(text, format!("HTTP/1.1 200 OK\r\n{D}\r\n"));
}

#[test]
fn no_content_and_not_modified_have_no_body() {
    for (status, line) in [(204, "204 No Content"), (304, "304 Not Modified")] {
        for body in [None, Some(BodyLength::Known(5)), Some(BodyLength::Unknown)] {
            let (r, text) = encode_with(response(status, &[("etag", "\"e\"")]), body, false, true);
            assert_eq!(r, encoded(Framing::Length(0), false), "{status} {body:?}");
            assert_eq!(text, format!("HTTP/1.1 {line}\r\netag: \"e\"\r\n{D}\r\n"));
        }
        // A length field is kept (as hyper), a coding field is not.
        let parts = response(status, &[("content-length", "5")]);
        let (r, text) = encode_with(parts, Some(BodyLength::Known(5)), false, true);
        assert_eq!(r, encoded(Framing::Length(0), false));
        assert_eq!(
            text,
            format!("HTTP/1.1 {line}\r\ncontent-length: 5\r\n{D}\r\n")
        );
        let parts = response(
            status,
            &[("transfer-encoding", "chunked"), ("trailer", "x")],
        );
        let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
        assert_eq!(r, encoded(Framing::Length(0), false));
        assert_eq!(text, format!("HTTP/1.1 {line}\r\n{D}\r\n"));
        let parts = response(
            status,
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
        );
        assert_eq!(
            encode_with(parts, Some(BodyLength::Known(5)), false, true).0,
            Err(Unwritable)
        );
        let parts = response(status, &[("content-length", "5")]);
        let (r, text) = encode_with(parts, Some(BodyLength::Known(5)), false, true);
        assert_eq!(r, encoded(Framing::Length(0), false));
        assert_eq!(
            text,
            format!("HTTP/1.1 {line}\r\ncontent-length: 5\r\n{D}\r\n")
        );
    }
}

#[test]
fn closing_adds_connection_close_once() {
    let (r, text) = encode_with(response(200, &[]), None, false, false);
    assert_eq!(r, encoded(Framing::Length(0), true));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n{D}\r\n")
    );
    let parts = response(200, &[("connection", "Close")]);
    let (r, text) = encode_with(parts, None, false, false);
    assert_eq!(r, encoded(Framing::Length(0), true));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n{D}\r\n")
    );
    let parts = response(200, &[("connection", "keep-alive"), ("connection", "x")]);
    let (r, text) = encode_with(parts, None, false, false);
    assert_eq!(r, encoded(Framing::Length(0), true));
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, x, close\r\ncontent-length: 0\r\n{D}\r\n"
        )
    );
}

#[test]
fn a_response_asking_to_close_is_the_last() {
    let parts = response(200, &[("connection", "foo, close")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Unknown), false, true);
    assert_eq!(r, encoded(Framing::Chunked, true));
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 200 OK\r\nconnection: foo, close\r\ntransfer-encoding: chunked\r\n{D}\r\n"
        )
    );
    let parts = response(200, &[("connection", "keep-alive")]);
    let (r, _) = encode_with(parts, None, false, true);
    assert_eq!(r, encoded(Framing::Length(0), false));
}

#[test]
fn conflicting_or_invalid_lengths_are_unwritable() {
    for (fields, body) in [
        (
            &[("content-length", "3"), ("content-length", "4")][..],
            Some(BodyLength::Unknown),
        ),
        (&[("content-length", "x")], Some(BodyLength::Unknown)),
        (&[("content-length", "")], Some(BodyLength::Unknown)),
        (&[("content-length", "+3")], Some(BodyLength::Unknown)),
        (&[("content-length", "3, 3")], Some(BodyLength::Unknown)),
        (
            &[("content-length", "99999999999999999999")],
            Some(BodyLength::Unknown),
        ),
        // A coding after a length, and a length after a coding.
        (
            &[("content-length", "3"), ("transfer-encoding", "chunked")],
            Some(BodyLength::Unknown),
        ),
        (
            &[("transfer-encoding", "chunked"), ("content-length", "3")],
            Some(BodyLength::Unknown),
        ),
        (
            &[("content-length", "3"), ("transfer-encoding", "chunked")],
            Some(BodyLength::Known(3)),
        ),
    ] {
        let (r, text) = encode_with(response(200, fields), body, false, true);
        assert_eq!(r, Err(Unwritable), "{fields:?}");
        assert_eq!(text, "", "nothing written");
    }
    // Known: only the first value is written (hyper trusts the body).
    let parts = response(200, &[("content-length", "x"), ("content-length", "y")]);
    let (r, text) = encode_with(parts, Some(BodyLength::Known(3)), false, true);
    assert_eq!(r, encoded(Framing::Length(3), false));
    assert_eq!(
        text,
        format!("HTTP/1.1 200 OK\r\ncontent-length: x\r\n{D}\r\n")
    );
}

#[test]
fn a_custom_reason_phrase_is_written() {
    for status in [200, 404, 599] {
        let mut parts = response(status, &[]);
        parts
            .extensions
            .insert(hyper::ext::ReasonPhrase::try_from(&b"Very Fine \xe9"[..]).expect("a reason"));
        let mut dst = Vec::new();
        let r = encode_head(&mut parts, None, false, true, DATE, &mut dst);
        assert_eq!(r, encoded(Framing::Length(0), false));
        let start = format!("HTTP/1.1 {status} Very Fine ");
        assert!(dst.starts_with(start.as_bytes()));
        assert_eq!(dst[start.len()..start.len() + 3], *b"\xe9\r\n");
    }
    // Unknown status, no phrase.
    let (_, text) = encode_with(response(599, &[]), None, false, true);
    assert!(text.starts_with("HTTP/1.1 599 <none>\r\n"), "{text}");
}

#[test]
fn a_date_of_the_response_is_kept() {
    let parts = response(200, &[("date", "Thu, 01 Jan 1970 00:00:00 GMT")]);
    let (_, text) = encode_with(parts, None, false, true);
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\ndate: Thu, 01 Jan 1970 00:00:00 GMT\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn an_informational_status_becomes_a_bare_500_and_closes() {
    for status in [100, 102, 103] {
        let parts = response(status, &[("x-a", "1"), ("content-length", "3")]);
        let (r, text) = encode_with(parts, Some(BodyLength::Known(3)), false, true);
        assert_eq!(r, encoded(Framing::Length(0), true));
        assert_eq!(
            text,
            format!("HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n{D}\r\n")
        );
        let (r, text) = encode_with(response(status, &[]), None, true, false);
        assert_eq!(r, encoded(Framing::Length(0), true));
        assert_eq!(
            text,
            format!("HTTP/1.1 500 Internal Server Error\r\n{D}\r\n")
        );
    }
}

#[test]
fn date_is_an_imf_fixdate() {
    let now = tokio::time::Instant::now();
    let d = date(now);
    assert_eq!(d.len(), 29);
    let text = std::str::from_utf8(&d).expect("ascii");
    assert!(text.ends_with(" GMT"), "{text}");
    assert_eq!(&text[3..5], ", ");
    let parsed = httpdate::parse_http_date(text).expect("an HTTP date");
    let wall = std::time::SystemTime::now();
    let age = wall.duration_since(parsed).expect("not in the future");
    assert!(age.as_secs() < 3, "{text}");
    assert_eq!(date(now), d, "rendered once for the same instant");
}

#[test]
fn chunk_heads_are_hex() {
    let mut dst = Vec::new();
    chunk_head(0x1a2b, &mut dst);
    assert_eq!(dst, b"1A2B\r\n");
}

#[test]
fn switching_protocols_is_written_without_a_body_and_closes() {
    let parts = response(
        101,
        &[
            ("upgrade", "x"),
            ("content-length", "3"),
            ("transfer-encoding", "chunked"),
        ],
    );
    // A length stated for a body of unknown length is kept, the coding
    // (after it) refused, as for any status.
    assert_eq!(
        encode_with(parts, Some(BodyLength::Unknown), false, true).0,
        Err(Unwritable)
    );
    for body in [None, Some(BodyLength::Known(3)), Some(BodyLength::Unknown)] {
        let parts = response(101, &[("upgrade", "x"), ("trailer", "t")]);
        let (r, text) = encode_with(parts, body, false, true);
        assert_eq!(r, encoded(Framing::Length(0), true), "{body:?}");
        assert_eq!(
            text,
            format!("HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n{D}\r\n")
        );
    }
}

#[test]
fn the_map_given_is_cleared_and_used() {
    let mut map = HeaderMap::with_capacity(32);
    map.insert(header::SERVER, HeaderValue::from_static("old"));
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"[..]);
    let Parsed::Simple(s) = parse_request(&mut buf, map) else {
        panic!("not read");
    };
    let headers = s.request.headers();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[header::ACCEPT], "*/*");
    assert!(headers.capacity() >= 32);
}
