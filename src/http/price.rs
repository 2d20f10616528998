//! Prices as pay per crawl writes them (`crawler-price: USD 0.01`): a
//! currency code and a decimal amount, held exactly as integer millionths
//! of the unit (no floating point: sums and comparisons are exact).

use std::fmt;

/// Millionths in a currency unit.
const SCALE: u64 = 1_000_000;

/// A price: a currency code and an exact amount in millionths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Price {
    /// Three upper-case letters (ISO 4217), e.g. `USD`.
    pub currency: String,
    /// Millionths of the unit: `USD 0.002` is 2000.
    pub micros: u64,
}

impl Price {
    /// Parses `USD 0.01` (a currency code, whitespace, a decimal amount
    /// with at most six decimals). Refuses anything else, with why.
    pub fn parse(text: &str) -> Result<Price, String> {
        let mut parts = text.split_ascii_whitespace();
        let (Some(currency), Some(amount), None) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "{text:?} is not a price (a currency and an amount, e.g. \"USD 0.01\")"
            ));
        };
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "{text:?}: {currency:?} is not a currency code (three upper-case letters, e.g. USD)"
            ));
        }
        let (whole, frac) = amount.split_once('.').unwrap_or((amount, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || !digits(whole)
            || !digits(frac)
            || (amount.contains('.') && frac.is_empty())
        {
            return Err(format!(
                "{text:?}: {amount:?} is not a decimal amount (e.g. 0.01)"
            ));
        }
        if frac.len() > 6 {
            return Err(format!("{text:?}: more than six decimals"));
        }
        let whole: u64 = whole
            .parse()
            .ok()
            .filter(|w| *w <= u64::MAX / SCALE / 2)
            .ok_or_else(|| format!("{text:?}: the amount is too large"))?;
        let mut micros = 0u64;
        for (i, b) in frac.bytes().enumerate() {
            micros += u64::from(b - b'0') * 10u64.pow(5 - i as u32);
        }
        Ok(Price {
            currency: currency.to_string(),
            micros: whole * SCALE + micros,
        })
    }

    /// `self` is payable within `limit`: the same currency, not more.
    pub fn within(&self, limit: &Price) -> bool {
        self.currency == limit.currency && self.micros <= limit.micros
    }
}

impl fmt::Display for Price {
    /// `USD 0.002`, `USD 5` (no trailing zeros).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.micros / SCALE, self.micros % SCALE);
        if frac == 0 {
            return write!(f, "{} {whole}", self.currency);
        }
        let frac = format!("{frac:06}");
        write!(
            f,
            "{} {whole}.{}",
            self.currency,
            frac.trim_end_matches('0')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Price {
        Price::parse(s).expect(s)
    }

    #[test]
    fn prices_parse_exactly_and_refuse_what_they_are_not() {
        assert_eq!(p("USD 0.002").micros, 2_000);
        assert_eq!(p("USD 0.01").micros, 10_000);
        assert_eq!(p(" EUR   5 ").micros, 5_000_000);
        assert_eq!(p("USD 1.000001").micros, 1_000_001);
        assert_eq!(p("USD 0.002").to_string(), "USD 0.002");
        assert_eq!(p("USD 5.00").to_string(), "USD 5");
        for bad in [
            "",
            "USD",
            "0.01",
            "usd 0.01",
            "USD -1",
            "USD 1.",
            "USD .5",
            "USD 1e3",
            "USD 0.0000001",
            "USD 0,01",
            "USD 1 2",
            "US 1",
            "USD 99999999999999999999",
        ] {
            assert!(Price::parse(bad).is_err(), "{bad:?}");
        }
        // 0.1 + 0.2 is 0.3, exactly.
        assert_eq!(
            p("USD 0.1").micros + p("USD 0.2").micros,
            p("USD 0.3").micros
        );
    }
}
