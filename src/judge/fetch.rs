//! Retrieving robots.txt with RFC 9309's status-code policy.
//!
//! | result                                   | outcome                    |
//! |------------------------------------------|----------------------------|
//! | 2xx                                      | parse the first 500 KiB    |
//! | 3xx                                      | follow, up to `max_redirects` hops, across hosts |
//! | more redirects than that                 | redirect limit (allow all) |
//! | 4xx except 429                           | unavailable (allow all)    |
//! | 429, 5xx, other codes, network errors, timeouts | unreachable (disallow all) |
//! | a `Content-Encoding` that cannot be decoded | unreachable (disallow all) |
//! | a hop the destination policy refuses     | refused (403, nothing sent) |
//! | the proxy out of descriptors, memory or local ports | local error (503, not cached) |
//!
//! A compressed file (`gzip`, `deflate`, `br`) is decoded on the blocking
//! pool with a bounded decoder: at most [`MAX_BYTES`] + 1 decoded bytes
//! are produced whatever the file expands to, and at most
//! [`MAX_COMPRESSED_BYTES`] are read from the network.

use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{
    ACCEPT, ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, LOCATION, USER_AGENT,
};
use http::{Request, StatusCode, Uri};
use http_body_util::BodyExt;

use crate::http::body::empty_body;
use crate::http::origin::Origin;
use crate::judge::archive::{Digest, Evidence};
use crate::judge::fetch_budget::{FetchBudget, Reservation};
use crate::robots::Robots;
use crate::robots::parse::MAX_BYTES;
use crate::upstream::informational::capped;
use crate::upstream::{ErrorKind, HttpClient, UpstreamError};

/// What a robots.txt fetch concluded.
#[derive(Debug)]
pub(crate) enum Concluded {
    /// A 2xx response, parsed; with its text, for the archive.
    Parsed(Robots, Option<Box<FetchedText>>),
    /// 4xx (not 429), or a redirect without a usable `Location`: no
    /// restrictions apply.
    Unavailable(String),
    /// More than `max_redirects` redirects: no restrictions apply.
    RedirectLimit(String),
    /// 429, 5xx or a network failure: everything is disallowed.
    Unreachable(String),
    /// The destination policy forbids connecting to the origin.
    Refused(String),
    /// TLS with the origin failed (untrusted or mismatched certificate...).
    BadTls(String),
    /// The proxy ran short of a local resource (file descriptors, memory,
    /// local ports): nothing is known about the origin, so nothing about
    /// it may be cached.
    LocalError(String),
}

/// The text of a fetched robots.txt (its content coding removed) and
/// where it came from, for the archive ([`crate::judge::archive`]).
#[derive(Debug)]
pub(crate) struct FetchedText {
    pub(crate) text: Bytes,
    pub(crate) digest: Digest,
    pub(crate) evidence: Evidence,
}

/// A finished fetch.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub(crate) outcome: Concluded,
    /// Final HTTP status, if a response arrived.
    pub(crate) status: Option<u16>,
    /// `Cache-Control: max-age` of the final response.
    pub(crate) max_age: Option<Duration>,
    /// `Retry-After` of a final 429 or 5xx response.
    pub(crate) retry_after: Option<Duration>,
}

impl Fetched {
    /// Whether what the fetch concluded is the origin's, for a fleet to
    /// share: not what only this node's destination policy, trust
    /// anchors, resources or network decided. An unreachable robots.txt
    /// is the origin's only when the origin answered it with an error
    /// status (5xx, 429, another code); a failure with no answer (DNS,
    /// connect, a timeout, a connection reset) or a 2xx whose body could
    /// not be read may be this node's alone.
    pub(crate) fn is_the_origins(&self) -> bool {
        match &self.outcome {
            Concluded::Parsed(..) | Concluded::Unavailable(_) | Concluded::RedirectLimit(_) => true,
            Concluded::Unreachable(_) => self.status.is_some_and(|s| !(200..300).contains(&s)),
            Concluded::Refused(_) | Concluded::BadTls(_) | Concluded::LocalError(_) => false,
        }
    }
}

/// Settings for [`fetch`].
#[derive(Clone, Debug)]
pub struct FetchSettings {
    pub user_agent: String,
    pub timeout: Duration,
    pub max_redirects: u8,
    /// 1xx responses allowed before the final one; more makes robots.txt
    /// unreachable, as a network error would
    /// ([`crate::upstream::informational`]).
    pub max_informational: usize,
}

/// Fetches `origin`'s robots.txt. Never fails: errors are an [`Concluded`].
/// With a `budget`, a file's body is read only once what it may hold is
/// reserved ([`crate::judge::fetch_budget`]); the reservation comes back with the
/// result, to be kept until the entry is built from it.
pub(crate) async fn fetch(
    client: &HttpClient,
    origin: &Origin,
    settings: &FetchSettings,
    budget: Option<&Arc<FetchBudget>>,
) -> (Fetched, Option<Reservation>) {
    let mut reservation = None;
    // The client's fetches in flight: waited for before the origin's
    // timeout starts.
    let _in_flight = match budget {
        Some(b) => b.start_fetch().await,
        None => None,
    };
    // The timeout is the origin's: time spent waiting for the budget (the
    // proxy's own limit) moves the deadline on by as much.
    let waited = BudgetWait::default();
    let chain = fetch_chain(client, origin, settings, budget, &mut reservation, &waited);
    let result = timeout_but_waits(settings.timeout, &waited, chain).await;
    let (outcome, status, hint) = match result {
        Ok(r) => r,
        Err(_) => (
            Concluded::Unreachable(format!(
                "timed out after {} fetching {}",
                humantime::format_duration(settings.timeout),
                origin.robots_url()
            )),
            None,
            None,
        ),
    };
    // The answer's own lifetime: for how long it holds (2xx, 4xx), or when
    // to ask again (429, 5xx).
    let (max_age, retry_after) = match outcome {
        Concluded::Unreachable(_) => (None, hint),
        _ => (hint, None),
    };
    let fetched = Fetched {
        outcome,
        status,
        max_age,
        retry_after,
    };
    (fetched, reservation)
}

/// `work`, unless it takes longer than `timeout` plus the time it spent
/// waiting for the budget (as `waited` tells).
async fn timeout_but_waits<T>(
    timeout: Duration,
    waited: &BudgetWait,
    work: impl Future<Output = T>,
) -> Result<T, ()> {
    let mut work = std::pin::pin!(work);
    let mut deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::select! {
            r = &mut work => return Ok(r),
            () = tokio::time::sleep_until(deadline) => match waited.credit() {
                Some(more) => deadline += more,
                None => return Err(()),
            },
        }
    }
}

/// Time a fetch spent waiting for the budget, not yet added to its
/// deadline; and since when it has been waiting, if it is.
#[derive(Default)]
struct BudgetWait(parking_lot::Mutex<(Duration, Option<tokio::time::Instant>)>);

impl BudgetWait {
    fn start(&self) {
        self.0.lock().1 = Some(tokio::time::Instant::now());
    }

    fn end(&self) {
        let mut w = self.0.lock();
        if let Some(since) = w.1.take() {
            w.0 += since.elapsed();
        }
    }

    /// The wait not yet credited (a wait in progress up to now); `None`
    /// if there is none.
    fn credit(&self) -> Option<Duration> {
        let mut w = self.0.lock();
        let now = tokio::time::Instant::now();
        if let Some(since) = w.1 {
            w.0 += now.duration_since(since);
            w.1 = Some(now);
        }
        let credit = std::mem::take(&mut w.0);
        (!credit.is_zero()).then_some(credit)
    }
}

/// What a file's body may hold in memory until its entry is built: the
/// body as read (`raw`, at most `limit`), the decoded text when it is
/// compressed, and the parsed and compiled rules, about twice the text
/// (measured: 1,000 files of 500 KiB fetched at once peaked at 1.5 GB,
/// three times the text).
fn body_cost(raw: Option<u64>, limit: usize, compressed: bool) -> usize {
    let raw = raw.map_or(limit, |n| usize::try_from(n).unwrap_or(limit).min(limit));
    let text = if compressed { MAX_BYTES + 1 } else { raw };
    raw + if compressed { text } else { 0 } + 2 * text
}

async fn fetch_chain(
    client: &HttpClient,
    origin: &Origin,
    settings: &FetchSettings,
    budget: Option<&Arc<FetchBudget>>,
    reservation: &mut Option<Reservation>,
    waited: &BudgetWait,
) -> (Concluded, Option<u16>, Option<Duration>) {
    let mut url: Uri = match origin.robots_url().parse() {
        Ok(u) => u,
        Err(e) => {
            return (
                Concluded::Unreachable(format!("bad robots.txt URL: {e}")),
                None,
                None,
            );
        }
    };
    let mut hops = 0u8;
    loop {
        let request = Request::get(url.clone())
            .header(USER_AGENT, settings.user_agent.as_str())
            .header(ACCEPT, "text/plain, */*;q=0.5")
            .header(ACCEPT_ENCODING, "gzip, br, deflate")
            .body(empty_body());
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                return (
                    Concluded::Unreachable(format!("bad request: {e}")),
                    None,
                    None,
                );
            }
        };
        let sent = capped(request, settings.max_informational, |r| client.request(r)).await;
        let response = match sent {
            Ok(Ok(r)) => r,
            Err(flooded) => {
                return (
                    Concluded::Unreachable(format!("fetching {url}: {flooded}")),
                    None,
                    None,
                );
            }
            Ok(Err(e)) => {
                let e = UpstreamError::new(e, url.host().unwrap_or_default());
                if e.kind() == ErrorKind::Refused {
                    // Nothing was sent: no connect error to tell.
                    let reason = if hops == 0 {
                        e.reason().to_string()
                    } else {
                        format!("robots.txt redirected to {url}: {}", e.reason())
                    };
                    return (Concluded::Refused(reason), None, None);
                }
                if let Some(shortage) = e.shortage() {
                    let reason = format!(
                        "{shortage} ({}) fetching {url}; not cached: the next request fetches it again",
                        e.chain()
                    );
                    warn_local_error(&reason);
                    return (Concluded::LocalError(reason), None, None);
                }
                let reason = e.reason();
                if e.kind() == ErrorKind::Tls {
                    return (
                        Concluded::BadTls(format!("fetching {url}: {reason}")),
                        None,
                        None,
                    );
                }
                // The short reason for clients, the whole chain for the log.
                tracing::debug!(%url, error = %e.chain(), "robots.txt fetch failed");
                return (
                    Concluded::Unreachable(format!("fetching {url}: {reason}")),
                    None,
                    None,
                );
            }
        };
        let status = response.status();
        let code = Some(status.as_u16());
        if status.is_redirection() {
            if hops >= settings.max_redirects {
                return (
                    Concluded::RedirectLimit(format!(
                        "more than {} redirects fetching {}",
                        settings.max_redirects,
                        origin.robots_url()
                    )),
                    code,
                    None,
                );
            }
            let next = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| resolve_location(&url, loc));
            match next {
                Some(next) => {
                    hops += 1;
                    url = next;
                    continue;
                }
                None => {
                    return (
                        Concluded::Unavailable(format!(
                            "{status} from {url} without a usable Location"
                        )),
                        code,
                        None,
                    );
                }
            }
        }
        let max_age = max_age(response.headers());
        if status.is_success() {
            let codings = match content_codings(response.headers()) {
                Ok(c) => c,
                Err(e) => {
                    return (
                        Concluded::Unreachable(format!("cannot decode {url}: {e}")),
                        code,
                        None,
                    );
                }
            };
            let limit = if codings.is_empty() {
                MAX_BYTES + 1
            } else {
                MAX_COMPRESSED_BYTES
            };
            if let Some(budget) = budget {
                let length = hyper::body::Body::size_hint(response.body()).exact();
                let cost = body_cost(length, limit, !codings.is_empty());
                waited.start();
                *reservation = Some(budget.reserve(cost).await);
                waited.end();
            }
            let response_headers = response.headers().clone();
            return match read_capped(response.into_body(), limit).await {
                Ok(body) => {
                    let cut = body.len() >= limit;
                    let header = |name| {
                        response_headers
                            .get(name)
                            .and_then(|v: &http::HeaderValue| v.to_str().ok())
                            .map(str::to_string)
                    };
                    let evidence = Evidence {
                        url: origin.robots_url(),
                        final_url: url.to_string(),
                        content_type: header(http::header::CONTENT_TYPE),
                        etag: header(http::header::ETAG),
                        last_modified: header(http::header::LAST_MODIFIED),
                    };
                    match parse_off_the_workers(body, codings, cut, evidence).await {
                        Ok(outcome) => (outcome, code, max_age),
                        Err(e) => (
                            Concluded::Unreachable(format!("cannot decode {url}: {e}")),
                            code,
                            None,
                        ),
                    }
                }
                Err(e) => (
                    Concluded::Unreachable(format!("reading {url}: {e}")),
                    code,
                    None,
                ),
            };
        }
        if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
            return (
                Concluded::Unavailable(format!("{status} from {url}")),
                code,
                max_age,
            );
        }
        let retry = retry_after(response.headers(), std::time::SystemTime::now());
        return (
            Concluded::Unreachable(format!("{status} from {url}")),
            code,
            retry,
        );
    }
}

/// How often a fetch failed for lack of a local resource is logged, at most.
const LOCAL_ERROR_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Logs a fetch that failed for lack of a local resource: at most once per
/// [`LOCAL_ERROR_WARNING_EVERY`], with the number left unlogged since (a
/// crawl at the descriptor limit fails this way many times a second).
fn warn_local_error(reason: &str) {
    static LAST: parking_lot::Mutex<(Option<Instant>, u64)> = parking_lot::Mutex::new((None, 0));
    let mut last = LAST.lock();
    let (at, skipped) = &mut *last;
    if at.is_some_and(|t| t.elapsed() < LOCAL_ERROR_WARNING_EVERY) {
        *skipped += 1;
        return;
    }
    tracing::warn!(
        reason,
        unlogged_since_last = *skipped,
        "robots.txt fetch failed for lack of a local resource: the request gets 503, nothing is cached"
    );
    *at = Some(Instant::now());
    *skipped = 0;
}

/// Decodes and parses a fetched file on the blocking pool: a large one
/// takes milliseconds, which on an async worker would stall every
/// connection it serves. `cut`: the body was cut at the read limit.
/// `Err`: it could not be decoded.
async fn parse_off_the_workers(
    body: Bytes,
    codings: Vec<Coding>,
    cut: bool,
    evidence: Evidence,
) -> Result<Concluded, String> {
    let work = move || {
        let text = if codings.is_empty() {
            body
        } else {
            Bytes::from(decode_capped(&body, &codings, MAX_BYTES + 1, cut)?)
        };
        let robots = Robots::parse(&text);
        let digest = Digest::of(&text);
        let text = Box::new(FetchedText {
            text,
            digest,
            evidence,
        });
        Ok(Concluded::Parsed(robots, Some(text)))
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Ok(Concluded::Unreachable(format!(
            "internal error parsing robots.txt: {e}"
        ))),
    }
}

/// Compressed bytes read at most. A deflate or brotli stream decodes to at
/// least about its own length (stored blocks add a few octets per 64 KiB),
/// so more than this always decodes past the 500 KiB cap: reading further
/// would only hold memory.
pub(crate) const MAX_COMPRESSED_BYTES: usize = MAX_BYTES + 64 * 1024;

/// Content codings applied in turn: at most this many.
const MAX_CODINGS: usize = 3;

/// A content coding robots.txt fetches accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Gzip,
    Deflate,
    Brotli,
}

/// The codings of a response in the order the server applied them
/// (`identity` dropped); an unknown one is an error.
fn content_codings(headers: &http::HeaderMap) -> Result<Vec<Coding>, String> {
    let mut codings = Vec::new();
    for value in headers.get_all(CONTENT_ENCODING) {
        let value = value
            .to_str()
            .map_err(|_| "unreadable Content-Encoding".to_string())?;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            codings.push(match name.to_ascii_lowercase().as_str() {
                "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                "br" => Coding::Brotli,
                _ => return Err(format!("unsupported Content-Encoding {name:?}")),
            });
        }
    }
    if codings.len() > MAX_CODINGS {
        return Err(format!(
            "{} content codings (at most {MAX_CODINGS} are decoded)",
            codings.len()
        ));
    }
    Ok(codings)
}

/// Undoes `codings` (as applied, so in reverse order) on `body`, stopping
/// after `limit` decoded bytes: a bomb costs at most that much. A stream
/// ended early is an error unless `cut` says the read limit ended it.
fn decode_capped(
    body: &[u8],
    codings: &[Coding],
    limit: usize,
    cut: bool,
) -> Result<Vec<u8>, String> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let consumed = std::cell::Cell::new(0usize);
    let mut reader: Box<dyn Read + '_> = Box::new(Counted {
        inner: body,
        count: &consumed,
    });
    for coding in codings.iter().rev() {
        reader = match coding {
            Coding::Gzip => Box::new(flate2::read::GzDecoder::new(reader)),
            Coding::Deflate => {
                // zlib-wrapped as the RFC says, or raw as some servers
                // send it: browsers accept both.
                let mut buffered = BufReader::new(reader);
                let head = buffered.fill_buf().map_err(|e| e.to_string())?;
                if is_zlib_header(head) {
                    Box::new(flate2::read::ZlibDecoder::new(buffered))
                } else {
                    Box::new(flate2::read::DeflateDecoder::new(buffered))
                }
            }
            Coding::Brotli => Box::new(brotli_decompressor::Decompressor::new(reader, 4096)),
        };
    }
    let mut out = Vec::new();
    // A stream cut by the read limit ends in the middle of a line (say
    // `Allow: /public-docs` cut to `Allow: /`): keep whole lines only.
    let whole_lines = |mut out: Vec<u8>| {
        if cut && out.len() < limit {
            let keep = memchr::memrchr(b'\n', &out).map_or(0, |i| i + 1);
            out.truncate(keep);
        }
        out
    };
    match reader.take(limit as u64).read_to_end(&mut out) {
        Ok(_) => Ok(whole_lines(out)),
        // The stream ended where the read limit cut it (not corrupt
        // earlier): what came before is a prefix of the file.
        Err(_) if cut && consumed.get() == body.len() => Ok(whole_lines(out)),
        Err(e) => {
            let names: Vec<&str> = codings.iter().map(|c| c.name()).collect();
            Err(format!("Content-Encoding {}: {e}", names.join(", ")))
        }
    }
}

impl Coding {
    fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Brotli => "br",
        }
    }
}

/// A reader that counts the bytes read through it.
struct Counted<'a, R> {
    inner: R,
    count: &'a std::cell::Cell<usize>,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n);
        Ok(n)
    }
}

/// A zlib header (RFC 1950): deflate method, a check that makes the first
/// two bytes a multiple of 31.
fn is_zlib_header(head: &[u8]) -> bool {
    match head {
        [cmf, flg, ..] => cmf & 0x0f == 8 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0,
        _ => false,
    }
}

/// Reads at most `limit` bytes of a body; the rest is not read.
async fn read_capped(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes, hyper::Error> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            let room = limit - buf.len();
            buf.extend_from_slice(&data[..data.len().min(room)]);
            if buf.len() >= limit {
                break;
            }
        }
    }
    Ok(buf.freeze())
}

/// Resolves a `Location` header against the URL that returned it.
fn resolve_location(base: &Uri, location: &str) -> Option<Uri> {
    crate::http::origin::resolve_reference(&base.to_string(), location.trim())
}

/// `Retry-After` (delay in seconds, or an HTTP date after `now`).
fn retry_after(headers: &http::HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = crate::http::date::parse(value)?;
    let when = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(when).ok()?);
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `max-age` from `Cache-Control` (`s-maxage` is for shared caches: this
/// cache is one, so it wins when present).
fn max_age(headers: &http::HeaderMap) -> Option<Duration> {
    let mut max_age = None;
    let mut s_maxage = None;
    for value in headers.get_all(CACHE_CONTROL) {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',') {
            let directive = directive.trim();
            let Some((name, v)) = directive.split_once('=') else {
                continue;
            };
            let Ok(secs) = v.trim().trim_matches('"').parse::<u64>() else {
                continue;
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "max-age" => max_age = Some(Duration::from_secs(secs)),
                "s-maxage" => s_maxage = Some(Duration::from_secs(secs)),
                _ => {}
            }
        }
    }
    s_maxage.or(max_age)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Time spent waiting for the budget moves the fetch's deadline on,
    /// a wait in progress included, each part once.
    #[tokio::test(start_paused = true)]
    async fn waiting_for_the_budget_is_credited_to_the_deadline() {
        let wait = BudgetWait::default();
        assert_eq!(wait.credit(), None);
        wait.start();
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(wait.credit(), Some(Duration::from_secs(3)));
        tokio::time::advance(Duration::from_secs(2)).await;
        wait.end();
        assert_eq!(wait.credit(), Some(Duration::from_secs(2)));
        assert_eq!(wait.credit(), None);
    }

    /// Over the budget, a fetch waits, and the wait does not count against
    /// its timeout: a one-second fetch timeout, a budget held for three.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_waiting_for_the_budget_does_not_time_out() {
        let budget = FetchBudget::new(1);
        let held = budget.reserve(1 << 20).await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(held);
        });
        let wait = BudgetWait::default();
        let fetch = async {
            wait.start();
            let r = budget.reserve(1024).await;
            wait.end();
            // The origin's own part, within the timeout.
            tokio::time::sleep(Duration::from_millis(500)).await;
            r
        };
        let done = timeout_but_waits(Duration::from_secs(1), &wait, fetch).await;
        assert!(done.is_ok(), "the wait timed the fetch out");
        // Work of its own beyond the timeout still times out.
        let slow = tokio::time::sleep(Duration::from_secs(2));
        let wait = BudgetWait::default();
        assert!(
            timeout_but_waits(Duration::from_secs(1), &wait, slow)
                .await
                .is_err()
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // 06 Nov 1994 08:49:37
        let mut h = http::HeaderMap::new();
        assert_eq!(retry_after(&h, now), None);
        h.insert(http::header::RETRY_AFTER, "120".parse().expect("hv"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(120)));
        h.insert(
            http::header::RETRY_AFTER,
            "Sun, 06 Nov 1994 08:50:07 GMT".parse().expect("hv"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
        h.insert(
            http::header::RETRY_AFTER,
            "Sun, 06 Nov 1994 08:00:00 GMT".parse().expect("hv"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO), "in the past");
        h.insert(http::header::RETRY_AFTER, "soon".parse().expect("hv"));
        assert_eq!(retry_after(&h, now), None);
    }

    #[test]
    fn locations_resolve_against_the_base() {
        let base: Uri = "http://a.example:8080/robots.txt".parse().expect("uri");
        let r = |l: &str| resolve_location(&base, l).map(|u| u.to_string());
        assert_eq!(
            r("/r2.txt").as_deref(),
            Some("http://a.example:8080/r2.txt")
        );
        assert_eq!(r("r3.txt").as_deref(), Some("http://a.example:8080/r3.txt"));
        assert_eq!(
            r("//b.example/robots.txt").as_deref(),
            Some("http://b.example/robots.txt")
        );
        assert_eq!(
            r("https://c.example/x").as_deref(),
            Some("https://c.example/x")
        );
        assert_eq!(r("ftp://c.example/x"), None);
        let base: Uri = "http://a.example/dir/robots.txt?v=1".parse().expect("uri");
        let r = |l: &str| resolve_location(&base, l).map(|u| u.to_string());
        assert_eq!(
            r("?v=2").as_deref(),
            Some("http://a.example/dir/robots.txt?v=2")
        );
        assert_eq!(r("../r.txt").as_deref(), Some("http://a.example/r.txt"));
        assert_eq!(r("r.txt#x").as_deref(), Some("http://a.example/dir/r.txt"));
        assert_eq!(r("mailto:x@example.com"), None);
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("compress");
        e.finish().expect("compress")
    }

    fn brotli(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let params = ::brotli::enc::BrotliEncoderParams {
            quality: 5,
            ..Default::default()
        };
        ::brotli::BrotliCompress(&mut &data[..], &mut out, &params).expect("compress");
        out
    }

    fn codings(value: &str) -> Result<Vec<Coding>, String> {
        let mut h = http::HeaderMap::new();
        h.insert(CONTENT_ENCODING, value.parse().expect("hv"));
        content_codings(&h)
    }

    const TEXT: &[u8] = b"User-agent: *\nDisallow: /private\n";

    #[test]
    fn content_codings_are_read_in_order_and_unknown_ones_refused() {
        use Coding::*;
        assert_eq!(codings("gzip"), Ok(vec![Gzip]));
        assert_eq!(codings("X-Gzip"), Ok(vec![Gzip]));
        assert_eq!(codings("identity"), Ok(vec![]));
        assert_eq!(codings("gzip, identity, br"), Ok(vec![Gzip, Brotli]));
        assert_eq!(codings("deflate"), Ok(vec![Deflate]));
        assert!(codings("compress").is_err_and(|e| e.contains("compress")));
        assert!(codings("zstd").is_err());
        assert!(codings("gzip, gzip, gzip, gzip").is_err());
    }

    #[test]
    fn each_coding_and_a_chain_of_them_decode() {
        use std::io::Write;
        let limit = MAX_BYTES + 1;
        let decode = |body: &[u8], c: &[Coding]| decode_capped(body, c, limit, false);
        assert_eq!(decode(&gzip(TEXT), &[Coding::Gzip]).as_deref(), Ok(TEXT));
        assert_eq!(
            decode(&brotli(TEXT), &[Coding::Brotli]).as_deref(),
            Ok(TEXT)
        );
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zlib.write_all(TEXT).expect("compress");
        let zlib = zlib.finish().expect("compress");
        assert!(is_zlib_header(&zlib));
        assert_eq!(decode(&zlib, &[Coding::Deflate]).as_deref(), Ok(TEXT));
        let mut raw =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(TEXT).expect("compress");
        let raw = raw.finish().expect("compress");
        assert!(!is_zlib_header(&raw));
        assert_eq!(decode(&raw, &[Coding::Deflate]).as_deref(), Ok(TEXT));
        // `Content-Encoding: gzip, br`: gzip applied first, so undone last.
        let both = brotli(&gzip(TEXT));
        assert_eq!(
            decode(&both, &[Coding::Gzip, Coding::Brotli]).as_deref(),
            Ok(TEXT)
        );
        assert!(decode(&both, &[Coding::Brotli, Coding::Gzip]).is_err());
        assert_eq!(decode(b"", &[Coding::Gzip]).as_deref(), Ok(&b""[..]));
    }

    #[test]
    fn corrupt_streams_are_errors_unless_cut_by_the_read_limit() {
        let limit = MAX_BYTES + 1;
        let garbage = vec![0xff; 100_000];
        for c in [Coding::Gzip, Coding::Deflate, Coding::Brotli] {
            assert!(
                decode_capped(&garbage, &[c], limit, false).is_err(),
                "{c:?}"
            );
            // Cut by the limit but corrupt from the start: still an error.
            assert!(decode_capped(&garbage, &[c], limit, true).is_err(), "{c:?}");
        }
        let whole = gzip(TEXT);
        let half = &whole[..whole.len() / 2];
        assert!(decode_capped(half, &[Coding::Gzip], limit, false).is_err());
        let prefix = decode_capped(half, &[Coding::Gzip], limit, true).expect("a prefix");
        assert!(TEXT.starts_with(&prefix));
    }

    /// A bomb is decoded to the limit and no further.
    #[test]
    fn a_bomb_costs_at_most_the_limit() {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(TEXT).expect("compress");
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            e.write_all(&zeros).expect("compress");
        }
        let bomb = e.finish().expect("compress");
        let limit = MAX_BYTES + 1;
        let out = decode_capped(&bomb, &[Coding::Gzip], limit, false).expect("decodes");
        assert_eq!(out.len(), limit);
        assert!(out.starts_with(TEXT));
    }

    #[test]
    fn max_age_reads_cache_control() {
        let mut h = http::HeaderMap::new();
        h.insert(CACHE_CONTROL, "public, max-age=3600".parse().expect("hv"));
        assert_eq!(max_age(&h), Some(Duration::from_secs(3600)));
        h.insert(CACHE_CONTROL, "no-cache".parse().expect("hv"));
        assert_eq!(max_age(&h), None);
    }
}
