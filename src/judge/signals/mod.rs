//! Opt-out signals beyond robots.txt, read purely (no I/O, linear in their
//! input, capped in size and count), and the verdict they give for each
//! declared purpose.
//!
//! | signal | where | purposes it speaks for |
//! |---|---|---|
//! | `/.well-known/tdmrep.json` ([`tdmrep`]) | before the fetch | `train-ai`, `ai-input` |
//! | `tdm-reservation` / `tdm-policy` response headers | response | `train-ai`, `ai-input` |
//! | `<meta name="tdm-reservation">` | HTML head | `train-ai`, `ai-input` |
//! | `X-Robots-Tag` / `<meta name="robots">` ([`robots_tag`]) | response / HTML head | see [`robots_tag`] |
//! | RSL 1.0 documents ([`rsl`]) named by robots.txt `License:` | before the fetch | what they permit and prohibit |
//! | RSL 1.0 documents named by `Link: rel="license"` | response | the same |
//!
//! TDMRep speaks for AI purposes only, never `search`: the W3C TDM
//! Reservation Protocol (Community Group Final Report, 2024) reserves
//! "TDM rights", text and data mining as the DSM Directive defines it
//! (art. 2(2): "any automated analytical technique aimed at analysing text
//! and data in digital form in order to generate information which
//! includes but is not limited to patterns, trends and correlations"), the
//! exception its art. 4(3) lets rightsholders reserve. Indexing a page so
//! that a search engine links back to it is not the analysis the
//! reservation is about (aipref vocab §4.2 defines `search` apart from
//! `train-ai` for the same reason); model training (`train-ai`) and using
//! content as input to an AI answer (`ai-input`) are.

pub(crate) mod html;
pub mod robots_tag;
pub mod rsl;
pub mod tdmrep;

/// Purposes a TDM reservation speaks for.
pub fn is_tdm_purpose(purpose: &str) -> bool {
    matches!(purpose, "train-ai" | "ai-input")
}

/// Where a signal came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The response's `Content-Usage` header.
    ContentUsageHeader,
    /// `/.well-known/tdmrep.json`.
    TdmFile,
    /// The response's `tdm-reservation` header.
    TdmHeader,
    /// `<meta name="tdm-reservation">` in the HTML head.
    TdmMeta,
    /// The response's `X-Robots-Tag` header.
    RobotsTagHeader,
    /// `<meta name="robots">` (or the agent's name) in the HTML head.
    RobotsMeta,
    /// An RSL 1.0 licence document (robots.txt `License:`, `Link:
    /// rel="license"`).
    Rsl,
}

impl Protocol {
    /// The name written on annotations, audit lines and 403 bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::ContentUsageHeader => "content-usage-header",
            Protocol::TdmFile => "tdmrep.json",
            Protocol::TdmHeader => "tdm-header",
            Protocol::TdmMeta => "tdm-meta",
            Protocol::RobotsTagHeader => "x-robots-tag",
            Protocol::RobotsMeta => "meta-robots",
            Protocol::Rsl => "rsl",
        }
    }
}
