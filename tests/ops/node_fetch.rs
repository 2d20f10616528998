//! Node's `fetch` through the proxy, as the `/ca` page tells Node users to
//! set it up: Node 20 and 22 ignore `HTTP_PROXY` (and `NODE_USE_ENV_PROXY`,
//! which only Node 24 reads), so a crawler's `fetch` goes straight to the
//! site; undici's `EnvHttpProxyAgent`, made the global dispatcher by a
//! file given to `node --require`, sends it through the proxy, plain and
//! intercepted HTTPS alike. Runs the machine's `node` with undici 6 from
//! `target/node-deps` (`.ci/run` installs it there).

use std::path::PathBuf;
use std::process::Command;

use crate::support::Origin;
use crate::support::component;
use crate::support::tls::{proxy_trusting, tls_origin_with_robots};

/// The file the `/ca` page tells Node users to write.
const USE_PROXY: &str = "const undici = require('undici');\n\
                         undici.setGlobalDispatcher(new undici.EnvHttpProxyAgent());\n";

/// The crawler: fetches each URL, prints status, decision header, first line.
const CRAWLER: &str = "(async () => {\n\
  for (const url of process.argv.slice(1)) {\n\
    const r = await fetch(url);\n\
    const body = await r.text();\n\
    console.log(r.status, r.headers.get('x-robots-proxy-decision') ? 'decided' : '-', body.split('\\n')[0]);\n\
  }\n\
})();\n";

/// Runs the crawler under `node --require use-proxy.cjs` with the
/// environment the `/ca` page gives; one output line per URL.
fn crawl(
    proxy: std::net::SocketAddr,
    ca: PathBuf,
    modules: PathBuf,
    urls: Vec<String>,
) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let use_proxy = dir.path().join("use-proxy.cjs");
    std::fs::write(&use_proxy, USE_PROXY).expect("write");
    let out = Command::new("node")
        .arg("--no-warnings")
        .arg("--require")
        .arg(&use_proxy)
        .arg("-e")
        .arg(CRAWLER)
        .args(urls)
        .env("NODE_PATH", modules)
        .env("HTTP_PROXY", format!("http://{proxy}"))
        .env("HTTPS_PROXY", format!("http://{proxy}"))
        .env("NODE_EXTRA_CA_CERTS", ca)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("node runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_fetch_goes_through_the_proxy_as_the_ca_page_sets_it_up() {
    let Some(modules) = component::node_modules("undici") else {
        component::missing("undici", "not in target/node-deps");
        return;
    };
    if Command::new("node").arg("--version").output().is_err() {
        component::missing("node", "not installed");
        return;
    }
    component::used("node");
    let plain = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    plain.route("/page", crate::support::Reply::ok("page"));
    let tls = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /private\n").await;
    tls.origin
        .route("/page", crate::support::Reply::ok("tls page"));
    let proxy = proxy_trusting(&tls).await;
    // Node's own trust store does not hold the proxy's CA: the recipe's
    // NODE_EXTRA_CA_CERTS is what makes HTTPS work.
    let port = tls.origin.addr.port();
    let urls = vec![
        plain.url("/page"),
        plain.url("/private/x"),
        format!("https://127.0.0.1:{port}/page"),
        format!("https://127.0.0.1:{port}/private/x"),
    ];
    let (addr, ca) = (proxy.addr, proxy.state_dir.join("ca/ca.pem"));
    let out = tokio::task::spawn_blocking(move || crawl(addr, ca, modules, urls))
        .await
        .expect("node crawl");
    assert_eq!(
        out,
        vec![
            "200 - page".to_string(),
            "403 decided Blocked by robots.txt".to_string(),
            "200 - tls page".to_string(),
            "403 decided Blocked by robots.txt".to_string(),
        ],
        "{out:?}"
    );
    assert_eq!(plain.hits("/private/x"), 0);
    assert_eq!(tls.origin.hits("/private/x"), 0);
}
