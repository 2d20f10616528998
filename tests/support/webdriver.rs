//! A real headless Chromium, driven through chromedriver's W3C WebDriver
//! HTTP API: JSON requests over HTTP/1.1 with the support module's hyper
//! client, no WebDriver crate. `.ci/run` installs Debian's `chromium` and
//! `chromium-driver`; [`tools`] finds them, and a test says it skipped
//! without them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::Request;
use serde_json::{Value, json};

use super::{Conn, until, until_within};

/// The browser and its driver, found on this machine.
pub struct Tools {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// The first of `names` that is an executable in `/usr/bin` or on `PATH`.
fn find(names: &[&str]) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    names
        .iter()
        .flat_map(|n| dirs.iter().map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, if both are installed.
pub fn tools() -> Option<Tools> {
    Some(Tools {
        chromium: find(&["chromium", "chromium-browser"])?,
        chromedriver: find(&["chromedriver"])?,
    })
}

/// Where tests keep what they produce for people to look at (screenshots):
/// `target/test-output/`, created.
pub fn output_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("test-output");
    std::fs::create_dir_all(&dir).expect("create target/test-output");
    dir
}

/// A chromedriver process with one browser session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

/// A free loopback port, for chromedriver to listen on.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One WebDriver command: its `value`, or a panic naming the command and
/// the driver's error.
async fn command(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let mut conn = Conn::open(addr).await;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string())
        .header(
            http::header::CONTENT_TYPE,
            "application/json; charset=utf-8",
        )
        .body(Bytes::from(body))
        .expect("webdriver request");
    let resp = conn.send(req).await;
    let value: Value = serde_json::from_str(&resp.body)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", resp.body));
    if resp.status != 200 {
        panic!("{method} {path}: {} {:#}", resp.status, value["value"]);
    }
    value["value"].clone()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session that keeps its
    /// console messages (`goog:loggingPrefs`).
    pub async fn start(tools: &Tools) -> Browser {
        let port = free_port();
        let driver = Command::new(&tools.chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        until_within(
            "chromedriver to be ready",
            Duration::from_secs(30),
            || async {
                let up = tokio::net::TcpStream::connect(addr).await.is_ok()
                    && command(addr, "GET", "/status", None).await["ready"] == true;
                up.then_some(())
            },
        )
        .await;
        let caps = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": tools.chromium,
                    "args": [
                        "--headless=new",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--no-proxy-server",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--window-size=1280,2000",
                        format!("--user-data-dir={}", browser._profile.path().display()),
                    ],
                },
                "goog:loggingPrefs": {"browser": "ALL"},
            }}
        });
        let session = command(addr, "POST", "/session", Some(caps)).await;
        browser.session = session["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        browser
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        command(self.addr, method, &path, body).await
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// Runs `body` (a function body: `return …`) in the page.
    pub async fn script(&self, body: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": body, "args": [] })),
        )
        .await
    }

    /// The element `css` selects (a panic if none does).
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element id for {css}: {found}"))
            .to_string()
    }

    /// Types `text` into an element.
    pub async fn type_into(&self, element: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Clicks an element.
    pub async fn click(&self, element: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Waits until `condition` (a script returning a boolean) holds.
    pub async fn wait_for(&self, condition: &str) {
        until(condition, || async {
            (self.script(condition).await == true).then_some(())
        })
        .await;
    }

    /// Saves a PNG of the window.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64 PNG"))
            .expect("PNG");
        std::fs::write(path, bytes).expect("write the screenshot");
    }

    /// The browser's console messages since the last call: a blocked
    /// load, a Content-Security-Policy violation or a script error is one.
    pub async fn console(&self) -> Vec<Value> {
        let log = self
            .call("POST", "/se/log", Some(json!({ "type": "browser" })))
            .await;
        log.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Browser {
    /// Ends the session (Chromium quits) with a blocking request, as no
    /// runtime may be left, then stops chromedriver.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        if !self.session.is_empty()
            && let Ok(mut s) = std::net::TcpStream::connect(self.addr)
        {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.session, self.addr
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
