//! `[identity]`: who the crawler says it is (see [`crate::identity`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

pub use crate::identity::UaMode;

/// `[identity]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// The User-Agent sent, e.g. `ExampleBot/1.0 (+https://example.com/bot)`;
    /// "" = the clients' own.
    pub user_agent: String,
    /// `keep`, `append` or `replace`.
    pub user_agent_mode: UaMode,
    /// Public listener for the key directory and the crawler pages; ""
    /// = the admin listener only.
    pub listen: String,
    /// Shown on the crawler page.
    pub contact: String,
    /// CIDRs the traffic leaves from, for client-ranges.
    pub egress_ranges: Vec<IpNet>,
    pub signing: SigningConfig,
}

/// `[identity.signing]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningConfig {
    /// The key file (`robots-proxy identity init-key`); "" = no signatures.
    pub key_file: String,
    /// Where the key directory is published (`Signature-Agent`), an https URL.
    pub signature_agent: String,
    /// How long a signature is valid.
    #[serde(deserialize_with = "super::duration")]
    pub expires: Duration,
}

impl Default for SigningConfig {
    fn default() -> Self {
        SigningConfig {
            key_file: String::new(),
            signature_agent: String::new(),
            expires: Duration::from_secs(300),
        }
    }
}

impl IdentityConfig {
    /// `identity.listen`, if set.
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, String> {
        if self.listen.is_empty() {
            return Ok(None);
        }
        super::parse_listen(&self.listen)
            .map(Some)
            .map_err(|e| format!("key `identity.listen`: {e}"))
    }

    /// `identity.signing.key_file`, if set.
    pub fn key_file(&self) -> Option<PathBuf> {
        (!self.signing.key_file.is_empty()).then(|| PathBuf::from(&self.signing.key_file))
    }

    /// The signer: the key file read, the URL checked.
    pub(crate) fn signer(&self) -> Result<Option<crate::identity::Signer>, String> {
        let Some(path) = self.key_file() else {
            if !self.signing.signature_agent.is_empty() {
                return Err("key `identity.signing.signature_agent`: set without \
                            identity.signing.key_file (nothing would sign)"
                    .into());
            }
            return Ok(None);
        };
        let keys = crate::identity::keys::KeyRing::load(&path)
            .map_err(|e| format!("key `identity.signing.key_file`: {e}"))?;
        if self.signing.signature_agent.is_empty() {
            return Err(
                "key `identity.signing.signature_agent`: empty; set where the key \
                        directory is published, e.g. \"https://example.com\""
                    .into(),
            );
        }
        crate::identity::Signer::new(keys, &self.signing.signature_agent, self.signing.expires)
            .map(Some)
            .map_err(|e| format!("key `identity.signing`: {e}"))
    }

    /// The identity in force for `config`, with its users' overrides;
    /// `None` when nothing is configured.
    pub(crate) fn build(
        &self,
        config: &super::Config,
    ) -> Result<Option<crate::identity::Identity>, String> {
        let users = config
            .access
            .users
            .iter()
            .map(|u| crate::identity::UserOverride {
                name: &u.name,
                user_agent: u.user_agent.as_deref(),
                mode: u.user_agent_mode,
            });
        let page = crate::identity::Page {
            user_agent: self.user_agent.clone(),
            contact: self.contact.clone(),
            egress_ranges: self.egress_ranges.clone(),
            purposes: config.usage.purposes.clone(),
            tokens: Vec::new(),
            names: Vec::new(),
        };
        crate::identity::Identity::new(
            &self.user_agent,
            self.user_agent_mode,
            users,
            self.signer()?,
            page,
        )
    }
}
