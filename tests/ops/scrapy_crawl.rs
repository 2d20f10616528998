//! A real Scrapy crawl through the proxy of a site with a Crawl-delay, at
//! Scrapy's default concurrency (8 requests per domain): every allowed page
//! arrives (held in arrival order, none refused and retried to exhaustion),
//! and the disallowed one is a 403. Skips when Scrapy is not installed
//! (`.ci/run` installs it with pip).

use std::process::Command;
use std::time::Instant;

use crate::support::{Origin, Proxy};

const PAGES: usize = 9;
/// Eight requests held at once behind a 4 s delay wait up to 32 s: longer
/// than the 30 s a request used to be held at most.
const CRAWL_DELAY: u32 = 4;

fn scrapy_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import scrapy"])
        .status()
        .is_ok_and(|s| s.success())
}

const SPIDER: &str = r#"
import scrapy

class Site(scrapy.Spider):
    name = "site"

    def __init__(self, start="", **kw):
        super().__init__(**kw)
        self.start_urls = [start]

    def parse(self, response):
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)
"#;

#[tokio::test]
async fn scrapy_gets_every_allowed_page_of_a_crawl_delay_site() {
    if !scrapy_installed() {
        crate::support::component::missing("scrapy", "not installed (pip install scrapy)");
        return;
    }
    crate::support::component::used("scrapy");
    let origin = Origin::with_robots(&format!(
        "User-agent: *\nCrawl-delay: {CRAWL_DELAY}\nDisallow: /private\n"
    ))
    .await;
    origin.link_site(PAGES, &["/private/secret"]);
    let proxy = Proxy::start().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let spider = dir.path().join("delay_spider.py");
    std::fs::write(&spider, SPIDER).expect("spider");
    let out = dir.path().join("items.json");
    let proxy_url = format!("http://{}", proxy.addr);
    let start = Instant::now();
    let run = tokio::process::Command::new("python3")
        .args(["-m", "scrapy", "runspider"])
        .arg(&spider)
        .arg("-a")
        .arg(format!("start={}", origin.url("/")))
        .arg("-O")
        .arg(&out)
        .args(["-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=False"])
        .args(["-s", "ROBOTSTXT_OBEY=False"])
        .env("http_proxy", &proxy_url)
        .env("HTTP_PROXY", &proxy_url)
        .env_remove("https_proxy")
        .env_remove("no_proxy")
        .env_remove("NO_PROXY")
        .current_dir(dir.path())
        .output()
        .await
        .expect("run scrapy");
    let took = start.elapsed();
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "scrapy failed:\n{log}");
    let items: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("items")).expect("json");
    let mut pages: Vec<String> = items
        .iter()
        .filter_map(|i| i["url"].as_str().map(str::to_owned))
        .collect();
    pages.sort();
    eprintln!(
        "scrapy: {} pages in {:.1} s (Crawl-delay {CRAWL_DELAY} s)",
        pages.len(),
        took.as_secs_f64()
    );
    assert_eq!(
        pages.len(),
        PAGES + 1,
        "every allowed page: {pages:?}\n{log}"
    );
    assert!(!log.contains("retry/max_reached"), "{log}");
    assert!(
        !log.contains("'downloader/response_status_count/429'"),
        "{log}"
    );
    assert!(
        log.contains("'downloader/response_status_count/403': 1"),
        "{log}"
    );
    assert_eq!(origin.hits("/private/secret"), 0);
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "disallowed");
}
