//! `audit report --payments`: what pay per crawl cost, from the `payment`
//! lines: charges per day, origin and user, the total per currency, and
//! how many prices were refused or failed. Amounts are summed exactly
//! (integer millionths, [`crate::http::price::Price`]).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use maud::html;
use serde::{Deserialize, Serialize};

use super::render::field;
use super::sections::printable;
use super::{Options, ReportError, within};
use crate::http::price::Price;
use crate::ops::audit::input::Lines;

/// Rows kept (day, origin, user): a report over more folds the rest into
/// one row per day and currency.
const ROWS_CAP: usize = 100_000;

/// The fields of a `payment` line that are read back (by this report, and
/// by a node counting the day's charges at start).
#[derive(Deserialize)]
pub(crate) struct Entry {
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) time: Option<String>,
    #[serde(default)]
    origin: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    pub(crate) outcome: Option<String>,
    #[serde(default)]
    pub(crate) charged: Option<String>,
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

/// Writes `r` as text (a table), CSV, JSON or one self-contained HTML
/// page. Origins and user names are the client's own text: CSV cells are
/// neutralised as in the main report and every text output escapes control
/// characters and bidirectional overrides.
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
                    field(&row.day),
                    field(&row.origin),
                    field(&row.user),
                    row.charges,
                    field(&row.amount)
                )?;
            }
            Ok(())
        }
        super::Format::Text => {
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
                    printable(&row.day),
                    printable(&row.origin),
                    printable(&row.user),
                    row.charges,
                    printable(&row.amount)
                )?;
            }
            writeln!(out, "{}", summary(r))
        }
        super::Format::Html => out.write_all(html(r).as_bytes()),
    }
}

/// The closing line: totals and what was not charged.
fn summary(r: &PaymentsReport) -> String {
    let total = if r.total.is_empty() {
        "nothing".to_string()
    } else {
        r.total.join(", ")
    };
    format!(
        "total: {} in {} charges; {} refused by the proxy's limits, {} not charged (crawler-error or no response)",
        printable(&total),
        r.charges,
        r.refused,
        r.errors
    )
}

/// The report as one HTML page (no script, nothing outside the file);
/// every value is spliced in as escaped text.
fn html(r: &PaymentsReport) -> String {
    let body = html! {
        "\n" h1 { "Payments (pay per crawl)" } "\n"
        p { (summary(r)) } "\n"
        table {
            tr {
                th { "day" } th { "origin" } th { "user" }
                th class="n" { "charges" } th class="n" { "amount" }
            } "\n"
            @for row in &r.rows {
                tr {
                    td { (printable(&row.day)) }
                    td class="k" { (printable(&row.origin)) }
                    td class="k" { (printable(&row.user)) }
                    td class="n" { (row.charges) }
                    td class="n" { (printable(&row.amount)) }
                } "\n"
            }
        } "\n"
    };
    super::html::page("robots-proxy payments report", body).into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile() -> PaymentsReport {
        PaymentsReport {
            rows: vec![
                Row {
                    day: "2026-11-27".into(),
                    origin: "https://a.example".into(),
                    user: " =HYPERLINK(\"http://x\")".into(),
                    charges: 1,
                    amount: "USD 0.001".into(),
                },
                Row {
                    day: "2026-11-27".into(),
                    origin: "https://b.example".into(),
                    user: "bob\u{1b}]0;owned\u{7}\u{202e}<script>".into(),
                    charges: 2,
                    amount: "USD 0.002".into(),
                },
                Row {
                    day: "2026-11-27".into(),
                    origin: "https://c.example".into(),
                    user: "-".into(),
                    charges: 3,
                    amount: "USD 0.003".into(),
                },
            ],
            total: vec!["USD 0.006".into()],
            charges: 6,
            refused: 0,
            errors: 0,
        }
    }

    fn written(format: crate::ops::audit::report::Format) -> String {
        let mut out = Vec::new();
        write(&hostile(), format, &mut out).expect("write");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn csv_cells_a_spreadsheet_would_run_are_neutralised() {
        let csv = written(crate::ops::audit::report::Format::Csv);
        assert!(csv.contains("\"' =HYPERLINK(\"\"http://x\"\")\""), "{csv}");
        assert!(csv.contains("https://c.example,-,3"), "{csv}");
        assert!(
            !csv.contains('\u{1b}') && !csv.contains('\u{202e}'),
            "{csv}"
        );
    }

    #[test]
    fn text_escapes_control_characters_and_bidi_overrides() {
        let text = written(crate::ops::audit::report::Format::Text);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(!text.contains('\u{7}'), "{text}");
        assert!(!text.contains('\u{202e}'), "{text}");
        assert!(text.contains("total: USD 0.006 in 6 charges"), "{text}");
    }

    #[test]
    fn html_is_a_page_with_every_value_escaped() {
        let html = written(crate::ops::audit::report::Format::Html);
        assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
        assert!(html.contains("<table>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(
            !html.contains('\u{1b}') && !html.contains('\u{202e}'),
            "{html}"
        );
        assert!(html.contains("USD 0.006"), "{html}");
    }
}
