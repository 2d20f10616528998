//! The decision header carries text from robots.txt files: it stays one
//! well-formed list of parameters (RFC 8941 strings) whatever the file
//! says, and short enough for any client.

use crate::support::{Origin, Proxy};

#[tokio::test]
async fn rule_text_cannot_forge_parameters_and_long_rules_are_cut() {
    let origin = Origin::start().await;
    let long = format!("/long{}", "y".repeat(3000));
    origin.robots(&format!(
        "User-agent: *\nDisallow: /x\"; decision=allowed; x=\"\nDisallow: {long}\n"
    ));
    let proxy = Proxy::start().await;

    let resp = proxy
        .get(&origin.url("/x%22;%20decision=allowed;%20x=%22"))
        .await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    let header = resp.header("x-robots-proxy-decision").expect("header");
    assert!(header.starts_with("disallowed;"), "{header}");
    assert!(
        header.ends_with(r#"; rule="line 2: Disallow: /x\"; decision=allowed; x=\"""#),
        "{header}"
    );

    let resp = proxy.get(&origin.url(&long)).await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    let header = resp.header("x-robots-proxy-decision").expect("header");
    assert!(header.len() <= 1024, "{} octets", header.len());
    assert!(
        header.contains("; rule=\"line 3: Disallow: /longyyy"),
        "{header}"
    );
    assert!(header.ends_with(r#"..."; truncated"#), "{header}");
}
