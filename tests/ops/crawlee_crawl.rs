//! Crawlee for Python (1.x, `BeautifulSoupCrawler`) and Crawlee for
//! JavaScript (3.x, `HttpCrawler` from `@crawlee/http`) crawling through
//! the proxy with the settings the README gives, plain and intercepted
//! HTTPS: every allowed page arrives; each disallowed URL is asked once
//! (one audit line), where their defaults retry the proxy's 403 as a
//! blocked session; each checks the proxy's certificate (Python by
//! default, JavaScript with `ignoreSslErrors: false`); and a Crawl-delay
//! crawl as wide as `politeness.max_queue` loses no page, nor a wider one
//! in Python with a `ThrottlingRequestManager`, which honours the 429's
//! `Retry-After` (JavaScript retries a 429 at once). Skips when they are
//! not installed (`.ci/run` installs them: pip, and npm into
//! `target/node-deps`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::component;
use crate::support::tls::{proxy_trusting, tls_origin};
use crate::support::{Origin, Proxy};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";
const DISALLOWED: [&str; 2] = ["/private/a", "/private/b"];
const PAGES: usize = 4;
/// Longest one crawl of these small sites may take.
const CRAWL_LIMIT: Duration = Duration::from_secs(120);

/// The Python crawler: the README's settings when `SETTINGS=documented`,
/// else Crawlee's defaults; writes the URLs it fetched to `$OUT`.
const PYTHON: &str = r#"
import asyncio, json, os, sys
from crawlee import ConcurrencySettings
from crawlee.crawlers import BeautifulSoupCrawler
from crawlee.proxy_configuration import ProxyConfiguration
from crawlee.request_loaders import ThrottlingRequestManager
from crawlee.storages import RequestQueue
from yarl import URL

async def main():
    starts = sys.argv[1:]
    settings = {"proxy_configuration": ProxyConfiguration(proxy_urls=[os.environ["PROXY"]])}
    if os.environ["SETTINGS"] == "documented":
        settings["retry_on_blocked"] = False
    if n := int(os.environ.get("CONCURRENCY", "0")):
        # min too: on a busy machine Crawlee scales down to min_concurrency.
        settings["concurrency_settings"] = ConcurrencySettings(
            min_concurrency=n, desired_concurrency=n, max_concurrency=n)
    if os.environ.get("THROTTLE"):
        settings["request_manager"] = ThrottlingRequestManager(
            await RequestQueue.open(),
            domains=sorted({URL(u).host for u in starts}),
            request_manager_opener=RequestQueue.open)
    crawler = BeautifulSoupCrawler(**settings)
    fetched = []

    @crawler.router.default_handler
    async def page(context):
        fetched.append(context.request.url)
        await context.enqueue_links()

    await crawler.run(starts)
    with open(os.environ["OUT"], "w") as out:
        json.dump(fetched, out)

asyncio.run(main())
"#;

/// The JavaScript crawler, likewise.
const JS: &str = r#"
const { HttpCrawler, ProxyConfiguration, Configuration } = require('@crawlee/http');
const fs = require('fs');
const fetched = [];
const settings = {
  proxyConfiguration: new ProxyConfiguration({ proxyUrls: [process.env.PROXY] }),
  async requestHandler({ request, parseWithCheerio, enqueueLinks }) {
    fetched.push(request.url);
    const $ = await parseWithCheerio();
    const urls = $('a[href]').map((_, a) => new URL($(a).attr('href'), request.loadedUrl).href).get();
    await enqueueLinks({ urls });
  },
};
if (process.env.SETTINGS === 'documented') {
  settings.ignoreSslErrors = false;
  settings.errorHandler = ({ request, response }) => {
    if (response?.statusCode === 403 && response.headers['x-robots-proxy-decision']) request.noRetry = true;
  };
}
const n = Number(process.env.CONCURRENCY || 0);
if (n) Object.assign(settings, { minConcurrency: n, maxConcurrency: n });
new HttpCrawler(settings, new Configuration({ persistStorage: false }))
  .run(process.argv.slice(2))
  .then(() => fs.writeFileSync(process.env.OUT, JSON.stringify(fetched)));
"#;

#[derive(Clone, Copy)]
enum Framework {
    Python,
    Js,
}

impl Framework {
    fn name(self) -> &'static str {
        match self {
            Framework::Python => "crawlee-python",
            Framework::Js => "crawlee-js",
        }
    }

    /// What runs it, if installed here; else a skip (a failure under CI).
    fn available(self) -> Option<Runner> {
        let present = match self {
            Framework::Python => std::process::Command::new("python3")
                .args([
                    "-c",
                    "import bs4, crawlee.request_loaders as r; r.ThrottlingRequestManager",
                ])
                .output()
                .is_ok_and(|o| o.status.success()),
            Framework::Js => std::process::Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
        };
        let modules = match self {
            Framework::Python => Some(None),
            Framework::Js => component::node_modules("@crawlee/http").map(Some),
        };
        match (present, modules) {
            (true, Some(modules)) => {
                component::used(self.name());
                Some(Runner {
                    framework: self,
                    modules,
                })
            }
            (false, _) => {
                let what = match self {
                    Framework::Python => "crawlee 1.x with beautifulsoup not importable",
                    Framework::Js => "node not installed",
                };
                component::missing(self.name(), what);
                None
            }
            (true, None) => {
                component::missing(self.name(), "@crawlee/http not in target/node-deps");
                None
            }
        }
    }
}

struct Runner {
    framework: Framework,
    /// `NODE_PATH` for the JavaScript crawler.
    modules: Option<PathBuf>,
}

/// One crawl's settings.
#[derive(Clone, Copy)]
struct Settings<'a> {
    /// The README's settings, else the framework's defaults.
    documented: bool,
    /// The proxy's CA, given as the README says (`SSL_CERT_FILE`,
    /// `NODE_EXTRA_CA_CERTS`); `None` leaves the crawler without it.
    ca: Option<&'a Path>,
    /// Fixed concurrency; `None` leaves the framework's own.
    concurrency: Option<usize>,
    /// Python: a `ThrottlingRequestManager` for the start URLs' hosts.
    throttle: bool,
}

const DOCUMENTED: Settings<'static> = Settings {
    documented: true,
    ca: None,
    concurrency: None,
    throttle: false,
};

struct Crawl {
    /// The URLs whose page reached the request handler, sorted.
    fetched: Vec<String>,
    log: String,
}

impl Runner {
    async fn crawl(&self, proxy: &Proxy, settings: Settings<'_>, starts: &[String]) -> Crawl {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("fetched.json");
        let mut cmd = match self.framework {
            Framework::Python => {
                let script = dir.path().join("crawl.py");
                std::fs::write(&script, PYTHON).expect("script");
                let mut cmd = tokio::process::Command::new("python3");
                cmd.arg(script);
                cmd
            }
            Framework::Js => {
                let script = dir.path().join("crawl.cjs");
                std::fs::write(&script, JS).expect("script");
                let mut cmd = tokio::process::Command::new("node");
                cmd.arg("--no-warnings").arg(script);
                if let Some(modules) = &self.modules {
                    cmd.env("NODE_PATH", modules);
                }
                cmd
            }
        };
        let ca_variable = match self.framework {
            Framework::Python => "SSL_CERT_FILE",
            Framework::Js => "NODE_EXTRA_CA_CERTS",
        };
        for variable in [
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "NODE_EXTRA_CA_CERTS",
            "http_proxy",
            "https_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "no_proxy",
            "NO_PROXY",
        ] {
            cmd.env_remove(variable);
        }
        if let Some(ca) = settings.ca {
            cmd.env(ca_variable, ca);
        }
        if let Some(n) = settings.concurrency {
            cmd.env("CONCURRENCY", n.to_string());
        }
        if settings.throttle {
            cmd.env("THROTTLE", "1");
        }
        cmd.args(starts)
            .env("PROXY", format!("http://{}", proxy.addr))
            .env("OUT", &out)
            .env(
                "SETTINGS",
                if settings.documented {
                    "documented"
                } else {
                    "defaults"
                },
            )
            .current_dir(dir.path())
            .kill_on_drop(true);
        let run = tokio::time::timeout(CRAWL_LIMIT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{} crawl over {CRAWL_LIMIT:?}", self.framework.name()))
            .expect("run the crawler");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            run.status.success(),
            "{} failed:\n{log}",
            self.framework.name()
        );
        let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}:\n{log}"));
        let mut fetched: Vec<String> = serde_json::from_str(&text).expect("fetched URLs");
        fetched.sort();
        Crawl { fetched, log }
    }
}

/// Audit lines per URL with `decision`, from line `from` on.
fn audited(proxy: &Proxy, from: usize, decision: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in proxy.audit().iter().skip(from) {
        if line["decision"] == decision
            && let Some(url) = line["url"].as_str()
        {
            *counts.entry(url.to_owned()).or_default() += 1;
        }
    }
    counts
}

/// A plain and an HTTPS origin with the same small site, a proxy
/// trusting the HTTPS origin's CA; the start URLs, the allowed and the
/// disallowed URLs of both.
struct Sites {
    plain: Origin,
    tls: crate::support::tls::TlsOrigin,
    proxy: Proxy,
    allowed: Vec<String>,
    disallowed: Vec<String>,
}

impl Sites {
    async fn start() -> Sites {
        let plain = Origin::with_robots(ROBOTS).await;
        let tls = tls_origin("127.0.0.1").await;
        tls.origin.robots(ROBOTS);
        let proxy = proxy_trusting(&tls).await;
        let mut allowed = Vec::new();
        let mut disallowed = Vec::new();
        for (origin, url) in [
            (&plain, Origin::url as fn(&Origin, &str) -> String),
            (&tls.origin, Origin::https_url),
        ] {
            for path in origin.link_site(PAGES, &DISALLOWED) {
                allowed.push(url(origin, &path));
            }
            disallowed.extend(DISALLOWED.iter().map(|p| url(origin, p)));
        }
        allowed.sort();
        disallowed.sort();
        Sites {
            plain,
            tls,
            proxy,
            allowed,
            disallowed,
        }
    }

    fn starts(&self) -> Vec<String> {
        vec![self.plain.url("/"), self.tls.origin.https_url("/")]
    }

    fn ca(&self) -> PathBuf {
        self.proxy.state_dir.join("ca/ca.pem")
    }

    fn no_origin_saw_a_disallowed_path(&self) {
        for path in DISALLOWED {
            assert_eq!(self.plain.hits(path), 0, "{path}");
            assert_eq!(self.tls.origin.hits(path), 0, "{path}");
        }
    }
}

/// With the defaults, then with the README's settings: the allowed pages
/// of both origins, and how often each disallowed URL was audited.
async fn asks_once_per_disallowed_url(framework: Framework) {
    let Some(runner) = framework.available() else {
        return;
    };
    let sites = Sites::start().await;
    let ca = sites.ca();
    let (name, proxy) = (framework.name(), &sites.proxy);

    let from = proxy.audit().len();
    let defaults = Settings {
        documented: false,
        ca: Some(&ca),
        ..DOCUMENTED
    };
    let crawl = runner.crawl(proxy, defaults, &sites.starts()).await;
    assert_eq!(crawl.fetched, sites.allowed, "{}", crawl.log);
    let before = audited(proxy, from, "disallowed");
    assert_eq!(before.keys().cloned().collect::<Vec<_>>(), sites.disallowed);

    let from = proxy.audit().len();
    let start = Instant::now();
    let settings = Settings {
        ca: Some(&ca),
        ..DOCUMENTED
    };
    let crawl = runner.crawl(proxy, settings, &sites.starts()).await;
    let took = start.elapsed();
    assert_eq!(crawl.fetched, sites.allowed, "{}", crawl.log);
    let after = audited(proxy, from, "disallowed");
    eprintln!(
        "{name}: audit lines per disallowed URL: defaults {:?}, documented settings {:?}; \
         {} pages in {:.1} s",
        before.values().collect::<Vec<_>>(),
        after.values().collect::<Vec<_>>(),
        crawl.fetched.len(),
        took.as_secs_f64()
    );
    // The defaults retry the proxy's 403 as a blocked session.
    assert!(before.values().all(|&n| n > 1), "{before:?}");
    let once: BTreeMap<String, usize> = sites.disallowed.iter().map(|u| (u.clone(), 1)).collect();
    assert_eq!(after, once, "{}", crawl.log);
    sites.no_origin_saw_a_disallowed_path();
}

#[tokio::test]
async fn crawlee_python_asks_once_per_disallowed_url_with_the_readme_settings() {
    asks_once_per_disallowed_url(Framework::Python).await;
}

#[tokio::test]
async fn crawlee_js_asks_once_per_disallowed_url_with_the_readme_settings() {
    asks_once_per_disallowed_url(Framework::Js).await;
}

/// Without the proxy's CA, no intercepted page reaches the crawler, and
/// the log says the certificate was the reason.
async fn no_https_page_without_the_ca(runner: &Runner, sites: &Sites, settings: Settings<'_>) {
    let start = vec![sites.tls.origin.https_url("/")];
    let crawl = runner.crawl(&sites.proxy, settings, &start).await;
    assert_eq!(crawl.fetched, Vec::<String>::new(), "{}", crawl.log);
    assert!(
        crawl.log.to_lowercase().contains("certificate"),
        "{}",
        crawl.log
    );
    assert_eq!(sites.tls.origin.hits("/"), 0);
}

#[tokio::test]
async fn crawlee_python_checks_the_proxys_certificate() {
    let Some(runner) = Framework::Python.available() else {
        return;
    };
    let sites = Sites::start().await;
    // Its defaults verify: without SSL_CERT_FILE the proxy's CA is unknown.
    let defaults = Settings {
        documented: false,
        ..DOCUMENTED
    };
    no_https_page_without_the_ca(&runner, &sites, defaults).await;
    no_https_page_without_the_ca(&runner, &sites, DOCUMENTED).await;
}

#[tokio::test]
async fn crawlee_js_checks_the_proxys_certificate_with_ignore_ssl_errors_false() {
    let Some(runner) = Framework::Js.available() else {
        return;
    };
    let sites = Sites::start().await;
    no_https_page_without_the_ca(&runner, &sites, DOCUMENTED).await;
    // Its default, ignoreSslErrors: true, takes any certificate.
    let defaults = Settings {
        documented: false,
        ..DOCUMENTED
    };
    let start = vec![sites.tls.origin.https_url("/")];
    let crawl = runner.crawl(&sites.proxy, defaults, &start).await;
    assert_eq!(crawl.fetched.len(), PAGES + 1, "{}", crawl.log);
}

/// Held requests per origin, and a crawl wider than that.
const MAX_QUEUE: usize = 2;
const WIDE: usize = 6;

/// A `Crawl-delay: 1` site behind a proxy holding at most [`MAX_QUEUE`]
/// requests per origin: the URLs of its allowed pages.
async fn crawl_delay_site() -> (Origin, Proxy, Vec<String>) {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\nDisallow: /private\n").await;
    let mut allowed: Vec<String> = origin
        .link_site(WIDE, &DISALLOWED)
        .iter()
        .map(|p| origin.url(p))
        .collect();
    allowed.sort();
    let proxy = Proxy::start_with(|c| c.politeness.max_queue = MAX_QUEUE).await;
    (origin, proxy, allowed)
}

#[tokio::test]
async fn crawlee_python_loses_no_page_within_the_politeness_queue_or_throttled_beyond_it() {
    let Some(runner) = Framework::Python.available() else {
        return;
    };
    let (origin, proxy, allowed) = crawl_delay_site().await;
    let at_most = Settings {
        concurrency: Some(MAX_QUEUE),
        ..DOCUMENTED
    };
    let start = Instant::now();
    let crawl = runner.crawl(&proxy, at_most, &[origin.url("/")]).await;
    let took = start.elapsed();
    assert_eq!(crawl.fetched, allowed, "{}", crawl.log);
    assert_eq!(audited(&proxy, 0, "rate_limited").len(), 0);

    // Wider than the queue, with a ThrottlingRequestManager: the 429s
    // defer their requests by Retry-After, and none is lost.
    let from = proxy.audit().len();
    let throttled = Settings {
        concurrency: Some(WIDE),
        throttle: true,
        ..DOCUMENTED
    };
    let start = Instant::now();
    let crawl = runner.crawl(&proxy, throttled, &[origin.url("/")]).await;
    let refused = audited(&proxy, from, "rate_limited")
        .values()
        .sum::<usize>();
    eprintln!(
        "crawlee-python: max_concurrency {MAX_QUEUE} = max_queue: {} pages in {:.1} s; \
         concurrency {WIDE}, throttled: {} of {} pages in {:.1} s, {refused} answered 429 and deferred",
        allowed.len(),
        took.as_secs_f64(),
        crawl.fetched.len(),
        allowed.len(),
        start.elapsed().as_secs_f64()
    );
    assert_eq!(crawl.fetched, allowed, "{}", crawl.log);
    // The queue did overflow: the 429s were honoured, not lost.
    assert!(refused > 0, "{}", crawl.log);
    assert!(
        audited(&proxy, 0, "disallowed").values().all(|&n| n == 2),
        "one per crawl: {:?}",
        audited(&proxy, 0, "disallowed")
    );
}

#[tokio::test]
async fn crawlee_js_within_the_politeness_queue_loses_no_page() {
    let Some(runner) = Framework::Js.available() else {
        return;
    };
    let (origin, proxy, allowed) = crawl_delay_site().await;
    let at_most = Settings {
        concurrency: Some(MAX_QUEUE),
        ..DOCUMENTED
    };
    let start = Instant::now();
    let crawl = runner.crawl(&proxy, at_most, &[origin.url("/")]).await;
    let took = start.elapsed();
    assert_eq!(crawl.fetched, allowed, "{}", crawl.log);
    assert_eq!(audited(&proxy, 0, "rate_limited").len(), 0);

    // Wider than the queue, the proxy refuses some requests with 429,
    // which Crawlee retries at once, ignoring Retry-After.
    let from = proxy.audit().len();
    let wide = Settings {
        concurrency: Some(WIDE),
        ..DOCUMENTED
    };
    let crawl = runner.crawl(&proxy, wide, &[origin.url("/")]).await;
    let refused = audited(&proxy, from, "rate_limited")
        .values()
        .sum::<usize>();
    eprintln!(
        "crawlee-js: maxConcurrency {MAX_QUEUE} = max_queue: {} pages in {:.1} s; \
         maxConcurrency {WIDE}: {} of {} pages, {refused} answered 429",
        allowed.len(),
        took.as_secs_f64(),
        crawl.fetched.len(),
        allowed.len()
    );
    assert!(refused > 0, "{}", crawl.log);
}
