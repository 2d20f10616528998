//! The usage phase of a response, for a request that declares purposes:
//! every signal the response carries, combined most restrictively with
//! those known before the fetch (robots.txt lines, tdmrep.json) into one
//! verdict per purpose.
//!
//! * `Content-Usage` (draft-ietf-aipref-attach) for any declared purpose;
//! * `tdm-reservation` / `tdm-policy` headers and the HTML
//!   `<meta name="tdm-reservation">`, for `train-ai` and `ai-input`, with
//!   TDMRep's precedence (§"Processing priority": the meta supersedes the
//!   header, the header the file; an absent value resets nothing);
//! * `X-Robots-Tag` and `<meta name="robots">` / `<meta name="AGENT">`
//!   ([`crate::judge::signals::robots_tag`]).
//!
//! The HTML head is read only for a declared purpose, a 2xx `text/html`
//! response sent without a content coding or with one of gzip, deflate
//! and br, and `usage.html_meta`: at most [`MAX_HEAD`] octets are held, up
//! to `</head>` or `<body`, and then sent on as they came before the rest
//! of the body, which streams as before.
//!
//! `enforce`: a response a signal says `n` to is withheld, a 403 naming
//! the signal; `annotate`: forwarded with one `X-Robots-Proxy-Usage` per
//! signal. Either way the audit line names them (`usage_evidence`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, LINK};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};

use super::phases::{Answer, Outcome, Recorded};
use super::pipeline::Ctx;
use super::{CONTENT_USAGE, Proxy, respond};
use crate::http::body::{Body, BodyError};
use crate::judge::signals::html::{self, MAX_HEAD};
use crate::judge::signals::tdmrep::Reservation;
use crate::judge::signals::{Protocol, is_tdm_purpose, robots_tag};
use crate::judge::{Decision, Judgement, UsageMode, UsageNote};

static TDM_RESERVATION: http::header::HeaderName =
    http::header::HeaderName::from_static("tdm-reservation");
static TDM_POLICY: http::header::HeaderName = http::header::HeaderName::from_static("tdm-policy");
static X_ROBOTS_TAG: http::header::HeaderName =
    http::header::HeaderName::from_static("x-robots-tag");

impl Proxy {
    pub(super) async fn response_usage(&self, ctx: &Ctx<'_>, mut answer: Answer) -> Answer {
        let judged = &ctx.judgement;
        let settings = ctx.settings;
        let resp = &answer.resp;
        let forwarded = answer.outcome == Outcome::Allowed && resp.status().is_success();
        let headers = resp.headers();
        let has_signal_header = headers.contains_key(&CONTENT_USAGE)
            || headers.contains_key(&TDM_RESERVATION)
            || headers.contains_key(&X_ROBOTS_TAG)
            || headers.contains_key(LINK);
        let coding = html_coding(headers);
        let scan = forwarded && settings.usage_html_meta && coding.is_some();
        if judged.usage.is_none() && !has_signal_header && !scan {
            return answer;
        }
        // Built when a signal needs it: not for a response that has none.
        let url_cell = std::sync::OnceLock::new();
        let url = || url_cell.get_or_init(|| judged.url()).as_str();
        let mut notes = Vec::new();
        // The origin's Content-Usage header, applied like robots.txt lines.
        if let Some(value) = headers.get(&CONTENT_USAGE).and_then(|v| v.to_str().ok()) {
            let statement = crate::robots::usage::parse_statement(value);
            for p in &ctx.purposes {
                if statement.get(p) == Some(crate::robots::usage::Pref::Disallowed) {
                    let text = format!(
                        "Content-Usage: {value} (the origin's response header{})",
                        if settings.usage_mode == UsageMode::Enforce {
                            "; fetched and withheld"
                        } else {
                            ""
                        }
                    );
                    let mut note = UsageNote::signal(
                        p,
                        Protocol::ContentUsageHeader,
                        text,
                        format!("{} header Content-Usage: {value}", url()),
                    );
                    note.protocol = "";
                    notes.push(note);
                }
            }
        }
        // TDMRep: the header, then the meta, each superseding the last.
        let mut tdm: Option<(Reservation, Protocol, String)> = headers
            .get(&TDM_RESERVATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let r = Reservation::parse(v)?;
                let policy = headers
                    .get(&TDM_POLICY)
                    .and_then(|p| p.to_str().ok())
                    .map(|p| format!(", tdm-policy: {p}"))
                    .unwrap_or_default();
                Some((
                    r,
                    Protocol::TdmHeader,
                    format!("header tdm-reservation: {v}{policy}"),
                ))
            });
        // RSL 1.0 documents the response links to (`Link: rel="license"`).
        let links = crate::judge::licensing::license_links(
            headers.get_all(LINK).iter().filter_map(|v| v.to_str().ok()),
            url(),
        );
        if !links.is_empty() {
            let mut licensed = crate::judge::licensing::Licensed::default();
            for doc in &links {
                let state = self.gate.rsl(doc).await;
                let tokens = &settings.usage_licenses;
                licensed.add(
                    &state,
                    "Link header",
                    (url(), &judged.path),
                    &ctx.purposes,
                    tokens,
                );
            }
            notes.extend(licensed.notes);
        }
        let headers = answer.resp.headers();
        let agent = judged.agent.as_str();
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = content_type.as_deref();
        let now = SystemTime::now();
        let mut tag_hits: Vec<(Protocol, robots_tag::Hit)> = headers
            .get_all(&X_ROBOTS_TAG)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| robots_tag::hits(v, None, agent, content_type, now))
            .map(|h| (Protocol::RobotsTagHeader, h))
            .collect();
        if scan {
            let coding = coding.unwrap_or(Coding::Identity);
            let (resp, metas) = read_head(std::mem::take(&mut answer.resp), coding).await;
            answer.resp = resp;
            let policy = metas
                .iter()
                .find(|m| m.name == "tdm-policy")
                .map(|m| format!(" <meta name=\"tdm-policy\" content=\"{}\">", m.content))
                .unwrap_or_default();
            for m in metas {
                match m.name.as_str() {
                    "tdm-reservation" => {
                        if let Some(r) = Reservation::parse(&m.content) {
                            let element = format!(
                                "<meta name=\"tdm-reservation\" content=\"{}\">{policy}",
                                m.content
                            );
                            tdm = Some((r, Protocol::TdmMeta, element));
                        }
                    }
                    "robots" => tag_hits.extend(
                        robots_tag::hits(&m.content, None, agent, content_type, now)
                            .into_iter()
                            .map(|h| (Protocol::RobotsMeta, h)),
                    ),
                    name if name.eq_ignore_ascii_case(agent) => tag_hits.extend(
                        robots_tag::hits(&m.content, Some(name), agent, content_type, now)
                            .into_iter()
                            .map(|h| (Protocol::RobotsMeta, h)),
                    ),
                    _ => {}
                }
            }
        }
        // A header or meta value of 0 supersedes the file's reservation.
        let file_superseded = matches!(tdm, Some((Reservation::NotReserved, ..)));
        if let Some((Reservation::Reserved, protocol, element)) = &tdm {
            for p in ctx.purposes.iter().filter(|p| is_tdm_purpose(p)) {
                notes.push(UsageNote::signal(
                    p,
                    *protocol,
                    format!("{}: {element}", protocol.as_str()),
                    format!("{} {element}", url()),
                ));
            }
        }
        for (protocol, hit) in tag_hits {
            if ctx.purposes.iter().any(|p| p == hit.purpose) {
                let element = match protocol {
                    Protocol::RobotsMeta => format!("<meta content=\"{}\">", hit.directive),
                    _ => format!("header X-Robots-Tag: {}", hit.directive),
                };
                notes.push(UsageNote::signal(
                    hit.purpose,
                    protocol,
                    format!("{}: {element}", protocol.as_str()),
                    format!("{} {element}", url()),
                ));
            }
        }
        // What the judge phase annotated (robots.txt, tdmrep.json), less a
        // file reservation the response superseded.
        let before = judged.usage.as_deref().map(|n| {
            n.all()
                .filter(|n| !(file_superseded && n.protocol == Protocol::TdmFile.as_str()))
                .cloned()
                .map(|mut n| {
                    n.more.clear();
                    n
                })
                .collect::<Vec<_>>()
        });
        if let Some(before) = &before {
            for n in before {
                let line = respond::usage_line(n, &judged.robots_url());
                answer
                    .resp
                    .headers_mut()
                    .append(respond::USAGE_HEADER, respond::header_value(&line));
            }
        }
        if notes.is_empty() {
            return answer;
        }
        let note = UsageNote::combine(None, notes).unwrap_or_default();
        match settings.usage_mode {
            UsageMode::Annotate => {
                for n in note.all() {
                    let line = respond::usage_line(n, &judged.robots_url());
                    answer
                        .resp
                        .headers_mut()
                        .append(respond::USAGE_HEADER, respond::header_value(&line));
                }
                let all = UsageNote::combine(
                    before.and_then(|b| UsageNote::combine(None, b)),
                    note.all()
                        .cloned()
                        .map(|mut n| {
                            n.more.clear();
                            n
                        })
                        .collect(),
                );
                // The annotation is evidence: recorded whatever log_all.
                let annotated = Judgement {
                    usage: all,
                    ..judged.clone()
                };
                match self.record(ctx.line_again(&annotated)) {
                    Recorded::Passed => answer,
                    Recorded::Blocked(refusal) | Recorded::AuditFailed(refusal) => refusal,
                }
            }
            UsageMode::Enforce => {
                tracing::info!(url = %url(), purpose = %note.purpose, signal = %note.rule,
                    "response withheld: a signal it carries disallows a declared purpose");
                let withheld = judged.clone().overruled(Decision::UsageDisallowed(note));
                // The response (and its body) is dropped unread.
                match self.record(ctx.line_again(&withheld)) {
                    Recorded::Passed => Answer::new(Outcome::Refused, respond::blocked(&withheld)),
                    Recorded::Blocked(blocked) | Recorded::AuditFailed(blocked) => blocked,
                }
            }
        }
    }
}

/// How an HTML response's body is coded, when its head can be read: no
/// coding, or one of gzip, deflate and br. `None`: not HTML, or another
/// coding (or several).
fn html_coding(headers: &http::HeaderMap) -> Option<Coding> {
    let html = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            let t = t.trim_start().as_bytes();
            t.get(..9)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"text/html"))
                || t.get(..21)
                    .is_some_and(|p| p.eq_ignore_ascii_case(b"application/xhtml+xml"))
        });
    if !html {
        return None;
    }
    let mut codings = headers.get_all(CONTENT_ENCODING).iter();
    let coding = match (codings.next(), codings.next()) {
        (None, _) => return Some(Coding::Identity),
        (Some(v), None) => v.to_str().ok()?.trim().to_ascii_lowercase(),
        _ => return None,
    };
    match coding.as_str() {
        "identity" | "" => Some(Coding::Identity),
        "gzip" | "x-gzip" => Some(Coding::Gzip),
        "deflate" => Some(Coding::Deflate),
        "br" => Some(Coding::Brotli),
        _ => None,
    }
}

/// A body coding the head reader undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coding {
    Identity,
    Gzip,
    Deflate,
    Brotli,
}

/// What a coded prefix of a body decodes to, at most [`MAX_HEAD`]
/// octets: a stream cut short yields what came before the cut.
fn decode_prefix(coding: Coding, body: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::io::Read;
    let reader: Box<dyn Read + '_> = match coding {
        Coding::Identity => return body[..body.len().min(MAX_HEAD)].into(),
        Coding::Gzip => Box::new(flate2::read::GzDecoder::new(body)),
        // zlib-wrapped as the RFC says, or raw as some servers send it.
        Coding::Deflate
            if body.len() >= 2
                && body[0] & 0x0f == 8
                && (u16::from(body[0]) << 8 | u16::from(body[1])) % 31 == 0 =>
        {
            Box::new(flate2::read::ZlibDecoder::new(body))
        }
        Coding::Deflate => Box::new(flate2::read::DeflateDecoder::new(body)),
        Coding::Brotli => Box::new(brotli_decompressor::Decompressor::new(body, 4096)),
    };
    let mut out = Vec::new();
    // An error (the cut) leaves what was decoded before it in `out`.
    let _ = reader.take(MAX_HEAD as u64).read_to_end(&mut out);
    out.into()
}

/// Reads the response's body up to the end of its HTML head (at most
/// [`MAX_HEAD`] octets as sent, and as decoded), and gives the response
/// back with what was read sent first, unchanged. A coded body is decoded
/// again each time [`DECODE_STEP`] more octets arrived: at most 16
/// decodes of at most 64 KiB.
async fn read_head(
    resp: http::Response<Body>,
    coding: Coding,
) -> (http::Response<Body>, Vec<html::Meta>) {
    let (parts, mut body) = resp.into_parts();
    let mut head = Held::default();
    let mut error = None;
    let mut trailers = None;
    let mut decoded_at = 0;
    let mut ended = false;
    while head.len() < MAX_HEAD {
        match body.frame().await {
            None => {
                ended = true;
                break;
            }
            Some(Err(e)) => {
                error = Some(e);
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let from = head.len();
                    head.push(data);
                    let found = match coding {
                        Coding::Identity => html::head_ends(head.view(), from),
                        _ if head.len() - decoded_at >= DECODE_STEP => {
                            decoded_at = head.len();
                            html::head_ends(&decode_prefix(coding, head.view()), 0)
                        }
                        _ => false,
                    };
                    if found {
                        break;
                    }
                    // The whole body in hand: no poll more to learn it ended.
                    if hyper::body::Body::is_end_stream(&body) {
                        ended = true;
                        break;
                    }
                }
                Err(frame) => {
                    // Trailers end the body: kept for the client.
                    trailers = Some(frame);
                    ended = true;
                    break;
                }
            },
        }
    }
    let head = head.into_bytes();
    let metas = html::metas(&decode_prefix(coding, &head));
    let rest = Prefixed {
        head: Some(head),
        trailers,
        error,
        rest: (!ended).then_some(body),
    };
    (http::Response::from_parts(parts, rest.boxed()), metas)
}

/// What was read of a body: its first frame as it came (no copy: most
/// small pages are one frame), the frames after it appended to one buffer.
#[derive(Default)]
struct Held {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Held {
    fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn push(&mut self, data: Bytes) {
        match &mut self.more {
            Some(more) => more.extend_from_slice(&data),
            None if self.first.is_empty() => self.first = data,
            None => {
                let mut more = BytesMut::with_capacity(self.first.len() + data.len());
                more.extend_from_slice(&self.first);
                more.extend_from_slice(&data);
                self.more = Some(more);
            }
        }
    }

    fn view(&self) -> &[u8] {
        self.more.as_deref().unwrap_or(&self.first)
    }

    fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
    }
}

/// Octets of a coded body between two decodes of its head.
const DECODE_STEP: usize = 4096;

/// A body that sends what was read of it first, then the rest.
struct Prefixed {
    head: Option<Bytes>,
    trailers: Option<Frame<Bytes>>,
    error: Option<BodyError>,
    rest: Option<Body>,
}

impl hyper::body::Body for Prefixed {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Some(head) = self.head.take()
            && !head.is_empty()
        {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if let Some(e) = self.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match &mut self.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().is_none_or(Bytes::is_empty)
            && self.trailers.is_none()
            && self.error.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.len() as u64);
        match &self.rest {
            Some(rest) => {
                let hint = rest.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(hint.lower() + head);
                if let Some(upper) = hint.upper() {
                    out.set_upper(upper + head);
                }
                out
            }
            None => SizeHint::with_exact(head),
        }
    }
}
