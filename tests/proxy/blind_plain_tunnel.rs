//! A CONNECT to a no-intercept host on a plain-HTTP port: the client speaks
//! plain HTTP inside the tunnel, so every request is judged by path against
//! the http origin (robots.txt fetched over http), not refused with a 502
//! after trying robots.txt over https.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::support::tls::connect;
use crate::support::{Origin, Proxy};

#[tokio::test]
async fn plain_http_inside_a_no_intercept_tunnel_is_judged_by_path() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let proxy = Proxy::start_with(|c| c.tls.no_intercept = vec!["localhost".into()]).await;
    let target = format!("localhost:{}", origin.addr.port());
    let tunnel = connect(&proxy, &target).await.expect("tunnel opened");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tunnel))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut get = async |path: &str| {
        let req = Request::get(path)
            .header("host", &target)
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
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
