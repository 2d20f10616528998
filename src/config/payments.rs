//! `[payments]`: pay per crawl within limits (see [`crate::proxy::payments`]).

use std::collections::HashMap;

use serde::Deserialize;

use crate::proxy::payments::{Payments, Price};

/// `[payments]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentsConfig {
    /// The most paid for one request, e.g. `USD 0.002`; "" = payments off.
    pub max_price: String,
    /// What may be spent a day (UTC), in the same currency.
    pub budget_per_day: String,
    /// Per-origin limits.
    pub origins: Vec<OriginPrice>,
}

/// `[[payments.origins]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginPrice {
    /// `https://example.com` (scheme, host, port if not the default).
    pub origin: String,
    pub max_price: String,
}

fn price(key: &str, text: &str) -> Result<Price, String> {
    Price::parse(text).map_err(|e| format!("key `{key}`: {e}"))
}

impl PaymentsConfig {
    /// The payments in force for `config` (what `previous` spent kept);
    /// `None` when `payments.max_price` is unset.
    pub(crate) fn build(
        &self,
        config: &super::Config,
        previous: Option<&Payments>,
    ) -> Result<Option<Payments>, String> {
        let users_set = config.access.users.iter().any(|u| u.max_price.is_some());
        if self.max_price.is_empty() {
            if !self.budget_per_day.is_empty() || !self.origins.is_empty() || users_set {
                return Err(
                    "key `payments.max_price`: empty while other payment keys are \
                            set (set it to turn payments on, e.g. \"USD 0.002\")"
                        .into(),
                );
            }
            return Ok(None);
        }
        if config.identity.key_file().is_none() {
            return Err(
                "key `payments.max_price`: payments need `identity.signing` \
                        (pay per crawl charges signed requests only)"
                    .into(),
            );
        }
        let max_price = price("payments.max_price", &self.max_price)?;
        if self.budget_per_day.is_empty() {
            return Err(
                "key `payments.budget_per_day`: empty; set what may be spent a \
                        day, e.g. \"USD 5\""
                    .into(),
            );
        }
        let budget = price("payments.budget_per_day", &self.budget_per_day)?;
        let mut origins = HashMap::new();
        for o in &self.origins {
            let uri: http::Uri = o
                .origin
                .parse()
                .map_err(|e| format!("key `payments.origins.origin`: {:?}: {e}", o.origin))?;
            let origin = crate::http::origin::Origin::from_uri(&uri).map_err(|e| {
                format!(
                    "key `payments.origins.origin`: {:?}: {e} (e.g. \"https://example.com\")",
                    o.origin
                )
            })?;
            let limit = price("payments.origins.max_price", &o.max_price)?;
            if origins.insert(origin.to_string(), limit).is_some() {
                return Err(format!(
                    "key `payments.origins.origin`: {:?} is listed twice",
                    o.origin
                ));
            }
        }
        let mut users = HashMap::new();
        for u in &config.access.users {
            if let Some(m) = &u.max_price {
                users.insert(u.name.clone(), price("access.users.max_price", m)?);
            }
        }
        Payments::new(max_price, origins, users, budget, previous).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn check(text: &str) -> String {
        match crate::config::Config::from_toml(text, Path::new("t.toml")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn payments_need_signing_a_budget_and_one_currency() {
        assert_eq!(check(""), "");
        let e = check("[payments]\nmax_price = \"USD 0.002\"\nbudget_per_day = \"USD 5\"\n");
        assert!(e.contains("payments need `identity.signing`"), "{e}");
        let e = check("[payments]\nbudget_per_day = \"USD 5\"\n");
        assert!(e.contains("key `payments.max_price`: empty"), "{e}");
        let e = check("[payments]\nmax_price = \"USD 0.002\"\nbudget = \"USD 5\"\n");
        assert!(e.contains("budget"), "{e}");
    }

    #[test]
    fn prices_and_origins_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys.json");
        // RFC 9421's Ed25519 test key.
        let key = r#"{"keys":[{"kty":"OKP","crv":"Ed25519",
            "d":"n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
            "x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;
        std::fs::write(&keys, key).expect("write");
        let base = format!(
            "[identity.signing]\nkey_file = {:?}\nsignature_agent = \"https://example.com\"\n",
            keys.to_string_lossy()
        );
        let ok = format!(
            "{base}[payments]\nmax_price = \"USD 0.002\"\nbudget_per_day = \"USD 5\"\n\
             [[payments.origins]]\norigin = \"https://A.example:443\"\nmax_price = \"USD 0.01\"\n"
        );
        assert_eq!(check(&ok), "");
        let e = check(&format!(
            "{base}[payments]\nmax_price = \"USD 0.002\"\nbudget_per_day = \"EUR 5\"\n"
        ));
        assert!(e.contains("not in the budget's currency"), "{e}");
        let e = check(&format!(
            "{base}[payments]\nmax_price = \"0.002\"\nbudget_per_day = \"USD 5\"\n"
        ));
        assert!(e.contains("key `payments.max_price`"), "{e}");
        let e = check(&format!(
            "{base}[payments]\nmax_price = \"USD 0.002\"\nbudget_per_day = \"USD 5\"\n\
             [[payments.origins]]\norigin = \"example.com\"\nmax_price = \"USD 0.01\"\n"
        ));
        assert!(e.contains("key `payments.origins.origin`"), "{e}");
    }
}
