//! Product tokens: how a crawler names itself and how a `User-agent:` line
//! names the crawlers it is for.

/// True for the characters RFC 9309 allows in a product token.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'-'
}

/// The leading product token of a `User-agent:` line's value, lower-cased:
/// `Googlebot/2.1` → `googlebot`, `foo bar` → `foo`, `googlebot*` →
/// `googlebot`, `AB42bot` → `ab` (RFC 9309 §2.2.1's characters only, as
/// Google's parser reads the file). Empty if `s` does not start with one.
pub(crate) fn leading_token(s: &str) -> String {
    leading(s, is_token_byte)
}

/// True for the characters of a crawler's own product token: RFC 9309's
/// and digits (`AB42bot`), which crawler names hold and files cannot.
fn is_tchar(b: u8) -> bool {
    is_token_byte(b) || b.is_ascii_digit()
}

fn leading(s: &str, keep: fn(u8) -> bool) -> String {
    let s = s.trim_start();
    let end = s.bytes().position(|b| !keep(b)).unwrap_or(s.len());
    s[..end].to_ascii_lowercase()
}

/// The product token to select robots.txt groups with, from either a bare
/// token (`ExampleBot`) or a whole User-Agent header: the crawler's own
/// name up to its version (`ExampleBot/1.0`), lower-cased, and *not* cut
/// at the first character a `User-agent:` line may not hold: a crawler
/// named `AB42bot` is `ab42bot`, which no line of a file names (the file's
/// `User-agent: AB42bot` is read as `ab`), so it falls under `*` there, as
/// in Google's matcher (its `stress/369883` vectors).
///
/// Browser-style strings such as
/// `Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)` name
/// the crawler after `compatible;` (RFC 9309 §2.2.1's example); for those the
/// token is taken from there. Otherwise it is the leading token.
pub fn product_token(user_agent: &str) -> String {
    let ua = user_agent.trim();
    // Compared as bytes: the 8th byte need not be a char boundary.
    if ua
        .as_bytes()
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"mozilla/"))
    {
        let lower = ua.to_ascii_lowercase();
        if let Some(i) = lower.find("compatible;") {
            let token = leading(&ua[i + "compatible;".len()..], is_tchar);
            if !token.is_empty() {
                return token;
            }
        }
    }
    leading(ua, is_tchar)
}

/// What a `User-agent:` line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentSpec {
    /// `*`: every crawler without a group of its own.
    Any,
    /// A product token, lower-cased.
    Token(Box<str>),
}

impl AgentSpec {
    /// Reads the value of a `User-agent:` line. `None` if it names nothing
    /// usable (an empty value, or one that starts with a non-token character
    /// other than `*`).
    pub(crate) fn parse(value: &str) -> Option<AgentSpec> {
        let v = value.trim();
        if let Some(rest) = v.strip_prefix('*') {
            // `*` alone, or followed by a space and anything (`* Disallow: /`
            // written on one line), is the global group, as Google reads it.
            // `*bot*` is not: a glob there names some crawler, and reading it
            // as `*` would put the whole site under that crawler's ban
            // (`User-agent: *WordPress*` + `Disallow: /` is a real example).
            // It names no product token either, so it matches nobody.
            return match rest.chars().next() {
                None => Some(AgentSpec::Any),
                Some(c) if c.is_whitespace() => Some(AgentSpec::Any),
                Some(_) => None,
            };
        }
        let token = leading_token(v);
        if token.is_empty() {
            None
        } else {
            Some(AgentSpec::Token(token.into_boxed_str()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_token_of_versioned_agent() {
        assert_eq!(product_token("Googlebot/2.1"), "googlebot");
        assert_eq!(product_token("foo bar"), "foo");
        assert_eq!(product_token("  ExampleBot  "), "examplebot");
    }

    #[test]
    fn a_crawler_token_is_read_whole_and_a_file_token_up_to_its_first_other_character() {
        assert_eq!(product_token("AB42bot"), "ab42bot");
        assert_eq!(product_token("AB42bot/1.0 (+https://x)"), "ab42bot");
        assert_eq!(product_token("AB"), "ab");
        assert_eq!(
            AgentSpec::parse("AB42bot"),
            Some(AgentSpec::Token("ab".into()))
        );
    }

    #[test]
    fn product_token_of_non_ascii_agent_does_not_panic() {
        // Found by fuzzing: a multi-byte character across byte 8.
        assert_eq!(product_token("\u{FFFD}\u{FFFD}\u{FFFD}sarawl-delay:"), "");
        assert_eq!(product_token("Mozill\u{e9}/5.0"), "mozill");
        assert_eq!(product_token("bot\u{e9}"), "bot");
    }

    #[test]
    fn product_token_of_browser_style_header() {
        assert_eq!(
            product_token(
                "Mozilla/5.0 (compatible; ExampleBot/0.1; https://www.example.com/bot.html)"
            ),
            "examplebot"
        );
        assert_eq!(product_token("Mozilla/5.0 (X11; Linux)"), "mozilla");
    }

    #[test]
    fn agent_spec_reads_star_and_tokens() {
        assert_eq!(AgentSpec::parse("*"), Some(AgentSpec::Any));
        assert_eq!(AgentSpec::parse("* all robots"), Some(AgentSpec::Any));
        assert_eq!(AgentSpec::parse("*bot*"), None);
        assert_eq!(AgentSpec::parse("*<br/>"), None);
        assert_eq!(
            AgentSpec::parse("googlebot*"),
            Some(AgentSpec::Token("googlebot".into()))
        );
        assert_eq!(
            AgentSpec::parse("Googlebot/1.2"),
            Some(AgentSpec::Token("googlebot".into()))
        );
        assert_eq!(AgentSpec::parse(""), None);
        assert_eq!(AgentSpec::parse("/x"), None);
    }
}
