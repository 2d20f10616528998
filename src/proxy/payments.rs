//! Pay per crawl (HTTP 402, as Cloudflare's pay per crawl speaks it): an
//! origin that charges answers `402` with `crawler-price: USD 0.01`; the
//! proxy, as its team's budget holder, retries once with
//! `crawler-exact-price` (covered by the Web Bot Auth signature) when the
//! price is within the request's `max_price` and the day's budget, and
//! records the `crawler-charged` that comes back. Past the limit or the
//! budget it answers `402` itself. Off unless `[payments]` is configured
//! (which needs `[identity.signing]`: unsigned requests are never charged).
//!
//! Prices are decimal amounts held exactly, as integer millionths of the
//! currency unit; prices in another currency than the limit's are never
//! paid.

use std::collections::HashMap;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use parking_lot::Mutex;

use super::Proxy;
use super::phases::Forwarded;
use super::pipeline::Ctx;
use crate::http::body::Body;
pub use crate::http::price::Price;

/// The origin's quote, on a 402 (`crawler-price: USD 0.01`).
pub static CRAWLER_PRICE: HeaderName = HeaderName::from_static("crawler-price");
/// The price the crawler accepts to pay, on the retry.
pub static CRAWLER_EXACT_PRICE: HeaderName = HeaderName::from_static("crawler-exact-price");
/// What the origin charged, on the paid response.
pub static CRAWLER_CHARGED: HeaderName = HeaderName::from_static("crawler-charged");
/// Why a paid request failed (`InvalidCrawlerExactPrice`, `PaymentFailed`…).
pub static CRAWLER_ERROR: HeaderName = HeaderName::from_static("crawler-error");
/// The client's choice for this request: `yes` (pay within the limits,
/// the default) or `no` (never pay: the origin's 402 is answered as it
/// came). Taken off before forwarding.
pub static PAY_HEADER: HeaderName = HeaderName::from_static("robots-proxy-pay");

/// Origins remembered as charging (for refusing past the budget without
/// asking them): at most this many, the oldest forgotten first.
const PRICED_ORIGINS: usize = 10_000;

/// The running state of `[payments]`.
pub struct Payments {
    max_price: Price,
    /// `[[payments.origins]]`, by origin (`https://example.com`).
    origins: HashMap<String, Price>,
    /// `[[access.users]] max_price`, by user.
    users: HashMap<String, Price>,
    budget: Price,
    /// Kept across reloads.
    ledger: std::sync::Arc<Ledger>,
}

/// What was spent and who charges: kept across reloads.
#[derive(Default)]
struct Ledger {
    /// The day (days since the Unix epoch, UTC) and what was spent on it,
    /// reservations of payments under way included.
    spent: Mutex<(u64, u64)>,
    /// Origins that quoted a price, with their least quote in millionths.
    priced: Mutex<HashMap<String, u64>>,
}

/// Why a price is not paid.
#[derive(Debug, PartialEq, Eq)]
pub enum Unpaid {
    /// Above the request's limit, or in another currency.
    AboveLimit { price: Price, limit: Price },
    /// The day's budget does not hold it.
    Budget {
        price: Option<Price>,
        budget: Price,
        spent: u64,
    },
    /// The fleet's count of the day's spending could not be had (Redis
    /// unavailable): nothing is paid without it.
    FleetUnavailable,
}

impl Unpaid {
    /// `above_max_price`, `budget_exhausted` or `budget_unavailable`.
    pub fn reason(&self) -> &'static str {
        match self {
            Unpaid::AboveLimit { .. } => "above_max_price",
            Unpaid::Budget { .. } => "budget_exhausted",
            Unpaid::FleetUnavailable => "budget_unavailable",
        }
    }

    /// The proxy's own 402, saying what was asked and what the limits are.
    pub fn response(&self, origin: &str) -> Response<Body> {
        let text = match self {
            Unpaid::AboveLimit { price, limit } => format!(
                "Not paid by robots-proxy: {origin} asks {price}, above this request's \
                 max_price {limit}.\n"
            ),
            Unpaid::Budget {
                price,
                budget,
                spent,
            } => {
                let spent = Price {
                    currency: budget.currency.clone(),
                    micros: *spent,
                };
                let asked = price
                    .as_ref()
                    .map(|p| format!("asks {p}"))
                    .unwrap_or_else(|| "charges for its pages".into());
                format!(
                    "Not paid by robots-proxy: {origin} {asked}, and today's budget \
                     (budget_per_day {budget}, {spent} spent) does not hold it.\n"
                )
            }
            Unpaid::FleetUnavailable => format!(
                "Not paid by robots-proxy: {origin} charges, and the fleet's budget \
                 cannot be read now (Redis unavailable).\n"
            ),
        };
        let mut resp = crate::http::body::text(StatusCode::PAYMENT_REQUIRED, text);
        resp.headers_mut().insert(
            super::respond::DECISION_HEADER,
            super::respond::header_value(&format!("not-paid; reason={}", self.reason())),
        );
        resp
    }
}

/// Days since the Unix epoch (UTC) at `now`.
pub fn day_of(now: std::time::SystemTime) -> u64 {
    crate::identity::unix(now) / 86_400
}

impl Payments {
    /// Payments with `max_price` by default, `origins` and `users`
    /// overrides, `budget` a day; what `previous` counted is kept. The
    /// limits' currencies must be the budget's.
    pub fn new(
        max_price: Price,
        origins: HashMap<String, Price>,
        users: HashMap<String, Price>,
        budget: Price,
        previous: Option<&Payments>,
    ) -> Result<Payments, String> {
        for (what, p) in std::iter::once(("payments.max_price", &max_price))
            .chain(origins.values().map(|p| ("payments.origins max_price", p)))
            .chain(users.values().map(|p| ("access.users max_price", p)))
        {
            if p.currency != budget.currency {
                return Err(format!(
                    "key `{what}`: {p} is not in the budget's currency ({budget})"
                ));
            }
        }
        Ok(Payments {
            max_price,
            origins,
            users,
            budget,
            ledger: previous.map(|p| p.ledger.clone()).unwrap_or_default(),
        })
    }

    /// The limit for a request of `user` to `origin`: the user's, else the
    /// origin's, else `max_price`.
    pub fn limit(&self, origin: &str, user: Option<&str>) -> &Price {
        user.and_then(|u| self.users.get(u))
            .or_else(|| self.origins.get(origin))
            .unwrap_or(&self.max_price)
    }

    /// Notes that `origin` quoted `price` (its least quote is kept).
    pub fn quoted(&self, origin: &str, price: &Price) {
        let mut priced = self.ledger.priced.lock();
        if priced.len() >= PRICED_ORIGINS && !priced.contains_key(origin) {
            // Forget one: the map only saves asking an origin, never pays.
            if let Some(k) = priced.keys().next().cloned() {
                priced.remove(&k);
            }
        }
        let least = priced.entry(origin.to_string()).or_insert(price.micros);
        *least = (*least).min(price.micros);
    }

    /// Before contacting `origin`: `Err` when it is known to charge and
    /// today's budget cannot hold even the least price it has quoted.
    #[cfg(test)]
    pub fn before(&self, origin: &str, day: u64) -> Result<(), Unpaid> {
        self.before_with(origin, day, 0)
    }

    /// The least price `origin` quoted, if it did.
    pub fn least_quote(&self, origin: &str) -> Option<u64> {
        self.ledger.priced.lock().get(origin).copied()
    }

    /// [`Payments::before`], the day's spending taken as at least
    /// `fleet_spent`.
    pub fn before_with(&self, origin: &str, day: u64, fleet_spent: u64) -> Result<(), Unpaid> {
        let Some(quote) = self.least_quote(origin) else {
            return Ok(());
        };
        let spent = self.spent_on(day).max(fleet_spent);
        if spent.saturating_add(quote) > self.budget.micros {
            return Err(Unpaid::Budget {
                price: None,
                budget: self.budget.clone(),
                spent,
            });
        }
        Ok(())
    }

    fn spent_on(&self, day: u64) -> u64 {
        let spent = self.ledger.spent.lock();
        if spent.0 == day { spent.1 } else { 0 }
    }

    /// `micros` millionths in the budget's currency.
    pub fn amount(&self, micros: u64) -> Price {
        Price {
            currency: self.budget.currency.clone(),
            micros,
        }
    }

    /// The budget a day, in millionths.
    pub fn budget_micros(&self) -> u64 {
        self.budget.micros
    }

    /// The refusal of `price` when the fleet has `spent` today.
    pub fn over_fleet_budget(&self, price: &Price, spent: u64) -> Unpaid {
        Unpaid::Budget {
            price: Some(price.clone()),
            budget: self.budget.clone(),
            spent,
        }
    }

    /// Decides on `price` for `user` at `origin` on `day`: within the
    /// limit and the budget, the price is reserved from the budget (give
    /// back what is not charged with [`Payments::settle`]).
    pub fn reserve(
        &self,
        origin: &str,
        user: Option<&str>,
        price: &Price,
        day: u64,
    ) -> Result<(), Unpaid> {
        let limit = self.limit(origin, user);
        if !price.within(limit) {
            return Err(Unpaid::AboveLimit {
                price: price.clone(),
                limit: limit.clone(),
            });
        }
        let mut spent = self.ledger.spent.lock();
        if spent.0 != day {
            *spent = (day, 0);
        }
        let after = spent.1.saturating_add(price.micros);
        if after > self.budget.micros {
            return Err(Unpaid::Budget {
                price: Some(price.clone()),
                budget: self.budget.clone(),
                spent: spent.1,
            });
        }
        spent.1 = after;
        Ok(())
    }

    /// Settles a reservation of `reserved` made on `day`: `charged` (none
    /// if nothing was) is counted instead.
    pub fn settle(&self, reserved: &Price, charged: Option<&Price>, day: u64) {
        let charged = charged
            .filter(|c| c.currency == self.budget.currency)
            .map_or(0, |c| c.micros);
        let mut spent = self.ledger.spent.lock();
        if spent.0 == day {
            spent.1 = spent
                .1
                .saturating_sub(reserved.micros)
                .saturating_add(charged);
        }
    }

    /// Counts what the audit log at `audit_path` (and its rotations) says
    /// was charged today (`payment` lines with `outcome` `charged`, in
    /// the budget's currency) as spent: a restart does not give the day's
    /// budget back. Returns the charges and millionths counted.
    pub fn count_charged_in_audit(
        &self,
        audit_path: &std::path::Path,
        now: std::time::SystemTime,
    ) -> (u64, u64) {
        use crate::ops::audit::report::payments::Entry;
        let day = day_of(now);
        let finder = memchr::memmem::Finder::new(b"\"type\":\"payment\"");
        let (mut charges, mut micros) = (0u64, 0u64);
        crate::ops::activity::each_line_since(audit_path, day * 86_400, |line| {
            if finder.find(line).is_none() {
                return;
            }
            let Ok(l) = serde_json::from_slice::<Entry>(line) else {
                return;
            };
            let on_day = l
                .time
                .as_deref()
                .and_then(crate::ops::activity::parse_time)
                .map(|t| t / 86_400);
            if l.kind.as_deref() != Some("payment")
                || l.outcome.as_deref() != Some("charged")
                || on_day != Some(day)
            {
                return;
            }
            if let Some(Ok(price)) = l.charged.as_deref().map(Price::parse)
                && price.currency == self.budget.currency
            {
                charges += 1;
                micros = micros.saturating_add(price.micros);
            }
        });
        let mut spent = self.ledger.spent.lock();
        if spent.0 != day {
            *spent = (day, 0);
        }
        spent.1 = spent.1.saturating_add(micros);
        (charges, micros)
    }

    /// What was spent on `day`, in the budget's currency.
    #[cfg(test)]
    pub fn spent(&self, day: u64) -> Price {
        Price {
            currency: self.budget.currency.clone(),
            micros: self.spent_on(day),
        }
    }
}

/// Takes the client's `Robots-Proxy-Pay` off `headers`: `false` for `no`
/// (also `0`, `false`), `true` otherwise.
pub fn take_choice(headers: &mut HeaderMap) -> bool {
    if !crate::http::headers::has(headers, &PAY_HEADER) {
        return true;
    }
    match headers.remove(&PAY_HEADER) {
        Some(v) => !matches!(
            v.to_str().map(|s| s.trim().to_ascii_lowercase()).as_deref(),
            Ok("no" | "0" | "false")
        ),
        None => true,
    }
}

/// A header's value as text, if it is.
pub fn header_text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// `price` as the value of `crawler-exact-price`: the quote as the origin
/// wrote it, which the draft asks to match exactly.
pub fn exact_price_value(quote: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(quote).ok()
}

/// A `payment` audit line: a price paid, refused or failed.
#[derive(Debug, serde::Serialize)]
pub(crate) struct PaymentRecord<'a> {
    /// `payment`.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<&'a str>,
    pub(crate) origin: &'a str,
    pub(crate) url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<&'a str>,
    /// `charged` (the origin charged), `refused` (the proxy did not pay:
    /// see `reason`), `error` (the origin answered `crawler-error` or did
    /// not charge), `failed` (the paid retry got no response).
    pub(crate) outcome: &'static str,
    /// The origin's quote (`USD 0.01`), when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) price: Option<String>,
    /// What the origin said it charged (`crawler-charged`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) charged: Option<String>,
    /// `above_max_price`, `budget_exhausted` or `budget_unavailable`
    /// (refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<&'static str>,
    /// The origin's `crawler-error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) crawler_error: Option<String>,
    /// The status of the response the line is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
}

/// A request the proxy may pay for: its head, kept for the paid retry
/// (only a request without a body is retried), and the day it came.
pub(crate) struct Payable {
    payments: Arc<Payments>,
    head: Option<http::Request<()>>,
    day: u64,
}

impl Proxy {
    /// Takes the client's `Robots-Proxy-Pay` off `req` and, when payments
    /// are on for it, keeps its head. `Err` when its origin is known to
    /// charge and today's budget cannot pay it (the origin is not asked:
    /// the client gets [`Unpaid::response`]).
    pub(crate) async fn payable(
        &self,
        ctx: &Ctx<'_>,
        req: &mut Request<Body>,
    ) -> Result<Option<Payable>, Unpaid> {
        let wanted = take_choice(req.headers_mut());
        let Some(payments) = ctx.settings.payments.clone().filter(|_| wanted) else {
            return Ok(None);
        };
        let day = day_of(std::time::SystemTime::now());
        let origin = ctx.judgement.origin.to_string();
        // The fleet's count, asked only for an origin known to charge.
        let fleet_spent = match (&ctx.settings.fleet, payments.least_quote(&origin)) {
            (Some(fleet), Some(_)) => fleet.spent(day).await.ok().unwrap_or(0),
            _ => 0,
        };
        if let Err(unpaid) = payments.before_with(&origin, day, fleet_spent) {
            self.payment_line(
                ctx,
                "refused",
                None,
                None,
                Some(unpaid.reason()),
                None,
                None,
            );
            return Err(unpaid);
        }
        use hyper::body::Body as _;
        let head = req.body().is_end_stream().then(|| {
            let mut head = Request::new(());
            *head.method_mut() = req.method().clone();
            *head.uri_mut() = req.uri().clone();
            *head.version_mut() = req.version();
            *head.headers_mut() = req.headers().clone();
            head
        });
        Ok(Some(Payable {
            payments,
            head,
            day,
        }))
    }

    /// After the origin answered `forwarded`: a `402` with a price within
    /// the limits is paid (the request sent again, once, with
    /// `crawler-exact-price`, signed); one above them is answered with the
    /// proxy's own `402`. A `crawler-error` is logged. What the client
    /// gets is returned.
    pub(crate) async fn pay(
        &self,
        ctx: &Ctx<'_>,
        payable: Payable,
        forwarded: Forwarded,
        send: impl AsyncFnOnce(Request<Body>) -> Forwarded,
    ) -> Forwarded {
        let Forwarded::Response(resp) = &forwarded else {
            return forwarded;
        };
        if resp.status() != StatusCode::PAYMENT_REQUIRED {
            self.crawler_error(ctx, resp, None);
            return forwarded;
        }
        let Some(quote) = header_text(resp.headers(), &CRAWLER_PRICE).map(str::to_string) else {
            return forwarded;
        };
        let origin = ctx.judgement.origin.to_string();
        let price = match Price::parse(&quote) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(origin, error = %e, "an origin's crawler-price is not a price: its 402 goes to the client");
                return forwarded;
            }
        };
        let payments = payable.payments;
        payments.quoted(&origin, &price);
        let (Some(head), Some(value)) = (payable.head, exact_price_value(&quote)) else {
            tracing::info!(origin, price = %price, "a request with a body is not paid for: the origin's 402 goes to the client");
            return forwarded;
        };
        let user = ctx.caller.user.as_deref();
        let day = payable.day;
        let reserved = match payments.reserve(&origin, user, &price, day) {
            Ok(()) => self.reserve_in_fleet(ctx, &payments, &price, day).await,
            Err(unpaid) => Err(unpaid),
        };
        if let Err(unpaid) = reserved {
            self.payment_line(
                ctx,
                "refused",
                Some(&price),
                None,
                Some(unpaid.reason()),
                None,
                None,
            );
            return Forwarded::Response(unpaid.response(&origin));
        }
        // The paid request is one more request to the origin: it takes a
        // Crawl-delay slot of its own (held for it like any other). Not
        // given one within `max_wait`: nothing is paid, and the client
        // gets the origin's 402 as it came.
        if let (Err(_), cause) = self.politeness(ctx).await {
            self.settle(ctx, &payments, &price, None, day).await;
            tracing::info!(origin, price = %price, cause, "no Crawl-delay slot for the paid request: the origin's 402 goes to the client");
            self.payment_line(
                ctx,
                "refused",
                Some(&price),
                None,
                Some("no_politeness_slot"),
                None,
                None,
            );
            return forwarded;
        }
        // The 402 is done with: its connection's place is given back.
        drop(forwarded);
        let (mut parts, ()) = head.into_parts();
        parts.headers.insert(CRAWLER_EXACT_PRICE.clone(), value);
        let mut req = Request::from_parts(parts, crate::http::body::empty_body());
        if let Some(signer) = ctx.settings.identity.as_deref().and_then(|i| i.signer()) {
            crate::identity::sign_for_origin(signer, &ctx.judgement.origin, &mut req);
        }
        let paid = send(req).await;
        match &paid {
            Forwarded::Response(resp) => {
                let charged = header_text(resp.headers(), &CRAWLER_CHARGED).map(Price::parse);
                match charged {
                    Some(Ok(charged)) => {
                        self.settle(ctx, &payments, &price, Some(&charged), day)
                            .await;
                        tracing::info!(origin, price = %price, charged = %charged, "paid");
                        self.metrics.payment("charged");
                        self.payment_line(
                            ctx,
                            "charged",
                            Some(&price),
                            Some(&charged),
                            None,
                            None,
                            Some(resp.status().as_u16()),
                        );
                    }
                    _ => {
                        self.settle(ctx, &payments, &price, None, day).await;
                        self.crawler_error(ctx, resp, Some(&price));
                    }
                }
            }
            Forwarded::Failed(..) | Forwarded::Refused(_) => {
                self.settle(ctx, &payments, &price, None, day).await;
                self.payment_line(ctx, "failed", Some(&price), None, None, None, None);
            }
        }
        paid
    }

    /// With a fleet, `price` reserved from the fleet's budget too (the
    /// node's reservation given back when it is not).
    async fn reserve_in_fleet(
        &self,
        ctx: &Ctx<'_>,
        payments: &Payments,
        price: &Price,
        day: u64,
    ) -> Result<(), Unpaid> {
        let Some(fleet) = &ctx.settings.fleet else {
            return Ok(());
        };
        let unpaid = match fleet
            .reserve_spend(day, price.micros, payments.budget_micros())
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(spent)) => payments.over_fleet_budget(price, spent),
            Err(_) => Unpaid::FleetUnavailable,
        };
        payments.settle(price, None, day);
        Err(unpaid)
    }

    /// Settles a reservation of `price` on this node and in the fleet:
    /// `charged` counted instead.
    async fn settle(
        &self,
        ctx: &Ctx<'_>,
        payments: &Payments,
        price: &Price,
        charged: Option<&Price>,
        day: u64,
    ) {
        payments.settle(price, charged, day);
        if let Some(fleet) = &ctx.settings.fleet {
            let charged = charged
                .filter(|c| c.currency == price.currency)
                .map_or(0, |c| c.micros);
            let delta = i64::try_from(charged).unwrap_or(i64::MAX)
                - i64::try_from(price.micros).unwrap_or(i64::MAX);
            if fleet.settle_spend(day, delta).await.is_err() {
                tracing::warn!(
                    "pay per crawl: the fleet's spending could not be settled (Redis unavailable)"
                );
            }
        }
    }

    /// Logs and records a response's `crawler-error` (or, after a paid
    /// retry, its lack of `crawler-charged`).
    fn crawler_error(&self, ctx: &Ctx<'_>, resp: &Response<Body>, price: Option<&Price>) {
        let error = header_text(resp.headers(), &CRAWLER_ERROR).map(str::to_string);
        if error.is_none() && price.is_none() {
            return;
        }
        let origin = ctx.judgement.origin.to_string();
        tracing::warn!(origin, status = resp.status().as_u16(), crawler_error = ?error,
            "pay per crawl: the origin did not charge");
        self.metrics.payment("error");
        self.payment_line(
            ctx,
            "error",
            price,
            None,
            None,
            error,
            Some(resp.status().as_u16()),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn payment_line(
        &self,
        ctx: &Ctx<'_>,
        outcome: &'static str,
        price: Option<&Price>,
        charged: Option<&Price>,
        reason: Option<&'static str>,
        crawler_error: Option<String>,
        status: Option<u16>,
    ) {
        if outcome == "refused" {
            self.metrics.payment("refused");
        }
        let origin = ctx.judgement.origin.to_string();
        let url = ctx.judgement.origin.url(&ctx.judgement.path);
        let record = PaymentRecord {
            kind: "payment",
            time: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            node: self.audit.node(),
            origin: &origin,
            url: &url,
            user: ctx.caller.user.as_deref(),
            outcome,
            price: price.map(ToString::to_string),
            charged: charged.map(ToString::to_string),
            reason,
            crawler_error,
            status,
        };
        if self.audit.write(&record).is_err() {
            tracing::warn!(origin, "the payment line could not be written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Price {
        Price::parse(s).expect(s)
    }

    #[test]
    fn limits_currencies_and_the_budget() {
        let origins = HashMap::from([("https://a.example".to_string(), p("USD 0.05"))]);
        let users = HashMap::from([("alice".to_string(), p("USD 0.001"))]);
        let pay = Payments::new(p("USD 0.002"), origins, users, p("USD 0.01"), None).expect("ok");
        let price = p("USD 0.002");
        assert_eq!(pay.limit("https://b.example", None), &p("USD 0.002"));
        assert_eq!(pay.limit("https://a.example", None), &p("USD 0.05"));
        assert_eq!(
            pay.limit("https://a.example", Some("alice")),
            &p("USD 0.001")
        );
        assert!(matches!(
            pay.reserve("https://b.example", Some("alice"), &price, 1),
            Err(Unpaid::AboveLimit { .. })
        ));
        assert!(matches!(
            pay.reserve("https://b.example", None, &p("EUR 0.001"), 1),
            Err(Unpaid::AboveLimit { .. })
        ));
        for _ in 0..5 {
            pay.reserve("https://b.example", None, &price, 1)
                .expect("within");
        }
        assert_eq!(pay.spent(1), p("USD 0.01"));
        let refused = pay.reserve("https://b.example", None, &price, 1);
        assert!(matches!(refused, Err(Unpaid::Budget { .. })), "{refused:?}");
        // Nothing charged: given back. A new day starts from nothing.
        pay.settle(&price, None, 1);
        assert_eq!(pay.spent(1), p("USD 0.008"));
        pay.reserve("https://b.example", None, &price, 2)
            .expect("a new day");
        assert_eq!(pay.spent(2), p("USD 0.002"));
        // A known charging origin is refused before it is asked.
        pay.quoted("https://b.example", &p("USD 0.009"));
        assert!(pay.before("https://b.example", 2).is_err());
        pay.quoted("https://b.example", &p("USD 0.05"));
        assert!(pay.before("https://b.example", 2).is_err());
        pay.quoted("https://b.example", &p("USD 0.001"));
        assert!(pay.before("https://b.example", 2).is_ok());
        assert!(pay.before("https://c.example", 2).is_ok());
        assert!(
            Payments::new(
                p("EUR 0.002"),
                HashMap::new(),
                HashMap::new(),
                p("USD 1"),
                None
            )
            .is_err()
        );
    }

    #[test]
    fn the_choice_header_is_taken_off() {
        let mut h = HeaderMap::new();
        assert!(take_choice(&mut h));
        h.insert(&PAY_HEADER, HeaderValue::from_static("No"));
        assert!(!take_choice(&mut h));
        assert!(h.get(&PAY_HEADER).is_none());
        h.insert(&PAY_HEADER, HeaderValue::from_static("yes"));
        assert!(take_choice(&mut h));
    }
}
