//! `audit report --payments`: what pay per crawl cost, from the `payment`
//! lines: charges per day, origin and user, the total per currency, and
//! how many prices were refused or failed. Amounts are summed exactly
//! (integer millionths, [`crate::http::price::Price`]).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Options, ReportError, within};
use crate::http::price::Price;
use crate::ops::audit::input::Lines;

/// Rows kept (day, origin, user): a report over more folds the rest into
/// one row per day and currency.
const ROWS_CAP: usize = 100_000;

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    charged: Option<String>,
}

/// One row: a day, origin and user, and what was charged there.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) day: String,
    pub(crate) origin: String,
    pub(crate) user: String,
    pub(crate) charges: u64,
    pub(crate) amount: String,
}

/// The payments report.
#[derive(Debug, Serialize)]
pub(crate) struct PaymentsReport {
    pub(crate) rows: Vec<Row>,
    /// Per currency: the total charged.
    pub(crate) total: Vec<String>,
    pub(crate) charges: u64,
    pub(crate) refused: u64,
    pub(crate) errors: u64,
}

/// Sums the `payment` lines of `files`.
pub(crate) fn payments(files: &[PathBuf], opts: &Options) -> Result<PaymentsReport, ReportError> {
    // (day, origin, user, currency) → (charges, millionths).
    let mut rows: BTreeMap<(String, String, String, String), (u64, u64)> = BTreeMap::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let (mut charges, mut refused, mut errors) = (0u64, 0u64, 0u64);
    for path in files {
        let io = |source| ReportError {
            path: path.clone(),
            source,
        };
        let mut lines = Lines::open(path).map_err(io)?;
        while let Some(line) = lines.next_line().map_err(io)? {
            let Ok(e) = serde_json::from_slice::<Entry>(line.bytes) else {
                continue;
            };
            if e.kind.as_deref() != Some("payment") {
                continue;
            }
            let time = e.time.unwrap_or_default();
            if (opts.since.is_some() || opts.until.is_some()) && !within(&time, opts) {
                continue;
            }
            match e.outcome.as_deref() {
                Some("charged") => {}
                Some("refused") => {
                    refused += 1;
                    continue;
                }
                _ => {
                    errors += 1;
                    continue;
                }
            }
            let Some(Ok(price)) = e.charged.as_deref().map(Price::parse) else {
                errors += 1;
                continue;
            };
            charges += 1;
            let day = time.get(..10).unwrap_or("-").to_string();
            let mut key = (
                day,
                e.origin.unwrap_or_default(),
                e.user.unwrap_or_else(|| "-".into()),
                price.currency.clone(),
            );
            if rows.len() >= ROWS_CAP && !rows.contains_key(&key) {
                key.1 = "(other origins)".into();
                key.2 = "-".into();
            }
            let row = rows.entry(key).or_default();
            row.0 += 1;
            row.1 = row.1.saturating_add(price.micros);
            let total = totals.entry(price.currency).or_default();
            *total = total.saturating_add(price.micros);
        }
    }
    let amount = |currency: String, micros: u64| Price { currency, micros }.to_string();
    Ok(PaymentsReport {
        rows: rows
            .into_iter()
            .map(|((day, origin, user, currency), (n, micros))| Row {
                day,
                origin,
                user,
                charges: n,
                amount: amount(currency, micros),
            })
            .collect(),
        total: totals.into_iter().map(|(c, m)| amount(c, m)).collect(),
        charges,
        refused,
        errors,
    })
}

/// Writes `r` as text (a table), CSV or JSON.
pub(crate) fn write(
    r: &PaymentsReport,
    format: super::Format,
    out: &mut impl Write,
) -> io::Result<()> {
    match format {
        super::Format::Json => {
            serde_json::to_writer_pretty(&mut *out, r)?;
            writeln!(out)
        }
        super::Format::Csv => {
            writeln!(out, "day,origin,user,charges,amount")?;
            for row in &r.rows {
                writeln!(
                    out,
                    "{},{},{},{},{}",
                    csv(&row.day),
                    csv(&row.origin),
                    csv(&row.user),
                    row.charges,
                    csv(&row.amount)
                )?;
            }
            Ok(())
        }
        super::Format::Text | super::Format::Html => {
            writeln!(out, "Payments (pay per crawl)")?;
            writeln!(
                out,
                "{:<10}  {:<40}  {:<16}  {:>8}  amount",
                "day", "origin", "user", "charges"
            )?;
            for row in &r.rows {
                writeln!(
                    out,
                    "{:<10}  {:<40}  {:<16}  {:>8}  {}",
                    row.day, row.origin, row.user, row.charges, row.amount
                )?;
            }
            let total = if r.total.is_empty() {
                "nothing".to_string()
            } else {
                r.total.join(", ")
            };
            writeln!(
                out,
                "total: {total} in {} charges; {} refused by the proxy's limits, {} not charged (crawler-error or no response)",
                r.charges, r.refused, r.errors
            )
        }
    }
}

/// A CSV field, quoted when it must be.
fn csv(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
