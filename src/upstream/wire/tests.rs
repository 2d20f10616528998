use super::*;

fn parse(text: &str, method: &Method) -> (Result<Parsed, WireError>, BytesMut) {
    let mut buf = BytesMut::from(text.as_bytes());
    let parsed = parse_response(&mut buf, method);
    (parsed, buf)
}

#[test]
fn a_length_framed_response_leaves_its_body_in_the_buffer() {
    let (parsed, mut rest) = parse(
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello",
        &Method::GET,
    );
    let Ok(Parsed::Final(head)) = parsed else {
        panic!("not a final head: {parsed:?}");
    };
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.framing, Framing::Length(5));
    assert!(head.reusable);
    assert_eq!(head.headers["x-a"], "b");
    let mut body = BodyReader::new(head.framing);
    assert_eq!(
        body.read(&mut rest),
        Ok(Read::Data(Bytes::from_static(b"hello")))
    );
    assert_eq!(body.read(&mut rest), Ok(Read::End));
}
