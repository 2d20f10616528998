//! The real components tests run beside the proxy (nginx, Node and the
//! npm packages `.ci/run` puts in `target/node-deps`, Python's
//! `http.server`, redis-server and redis-cli, Chromium and chromedriver,
//! Scrapy, Crawlee). A test that needs one asks here: [`missing`] when it cannot
//! run, which fails the test under `CI=true` (what `.ci/run` sets, after
//! installing them all) and skips it elsewhere, saying so; [`used`] when it
//! started one, which `.ci/run` counts per component, so a green run shows
//! how many tests ran against each.

use std::io::Write;
use std::path::PathBuf;

/// True under `CI=true` (or any value but `false` and `0`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// `component` cannot run here (`why`): a failure under CI, else a skip
/// (the caller returns) with a line on stderr naming what to install.
#[track_caller]
pub fn missing(component: &str, why: impl std::fmt::Display) {
    if in_ci() {
        panic!(
            "{component} is needed under CI=true and cannot run here: {why} (.ci/run installs it)"
        );
    }
    eprintln!("skipped: {component} cannot run here ({why}); .ci/run installs it");
}

/// This test started `component`: one line, `component<TAB>binary::test`,
/// appended to the file `$ROBOTS_PROXY_COMPONENTS_LOG` names (if set).
pub fn used(component: &str) {
    let Some(log) = std::env::var_os("ROBOTS_PROXY_COMPONENTS_LOG") else {
        return;
    };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let binary = binary.split('-').next().unwrap_or_default().to_owned();
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("{component}\t{binary}::{test}\n");
    // One write of one short line: appends from parallel tests do not mix.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("cannot write {}: {e}", log.to_string_lossy());
    }
}

/// `target/node-deps/node_modules` (under `$CARGO_TARGET_DIR` if set),
/// where `.ci/run` installs the npm packages the tests run, if `package`
/// is installed there: a `NODE_PATH` for `require`.
pub fn node_modules(package: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")));
    let modules = target.join("node-deps/node_modules");
    modules
        .join(package)
        .join("package.json")
        .exists()
        .then_some(modules)
}
