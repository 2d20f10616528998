//! A CONNECT to a no-intercept host on a plain-HTTP port: the client speaks
//! plain HTTP inside the tunnel, so every request is judged by path against
//! the http origin (robots.txt fetched over http), not refused with a 502
//! after trying robots.txt over https.

use crate::support::tls::connect;
use crate::support::{Conn, Origin, Proxy, get_with};

#[tokio::test]
async fn plain_http_inside_a_no_intercept_tunnel_is_judged_by_path() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start_with(|c| c.tls.no_intercept = vec!["localhost".into()]).await;
    let target = format!("localhost:{}", origin.addr.port());
    let tunnel = connect(&proxy, &target).await.expect("tunnel opened");
    let mut conn = Conn::over(tunnel).await;
    let mut get = async |path: &str| {
        let resp = conn.send(get_with(path, &[("host", &target)])).await;
        (resp.status, resp.body)
    };
    assert_eq!(get("/page").await, (200, "page /page".to_string()));
    let (status, body) = get("/private/x").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(origin.hits("/private/x"), 0);
    let audit = proxy.audit();
    let blocked: Vec<_> = audit
        .iter()
        .filter(|l| l["decision"] == "disallowed")
        .collect();
    assert_eq!(blocked.len(), 1, "{audit:?}");
    assert_eq!(
        blocked[0]["robots_url"],
        format!("http://localhost:{}/robots.txt", origin.addr.port())
    );
}
