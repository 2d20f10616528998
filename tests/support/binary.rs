//! The real binary, started on a config file in a temp dir (or on any
//! command line): its address from the start-up log line, its stderr,
//! signals; and its one-shot commands.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};

use tokio::sync::mpsc;

pub use super::NO_HANG;

/// The binary, to be given its arguments.
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_robots-proxy"))
}

/// Runs the binary with `args` to its end (no stdin): status and output.
pub fn run(args: &[&str]) -> Output {
    command().args(args).output().expect("run robots-proxy")
}

/// A file holding `text` in a temp dir of its own (a config file, a
/// robots.txt), removed when dropped.
pub struct TextFile {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TextFile {
    pub fn new(name: &str, text: &str) -> TextFile {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        TextFile { path, _dir: dir }
    }

    /// Runs the binary with `args`, then this file's path, to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        command()
            .args(args)
            .arg(&self.path)
            .output()
            .expect("run robots-proxy")
    }
}

/// The `[access]` table of a config: `per_minute` password verifications
/// per address, and user `name` whose password hash is `hash`; `more`
/// (tables) after it.
pub fn access_with_user(per_minute: u32, name: &str, hash: &str, more: &str) -> String {
    format!(
        "[access]\nauth_failures_per_minute = {per_minute}\n\
         [[access.users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\n{more}"
    )
}

/// Runs the binary with `args`, then the path of a file `name` holding
/// `text` (a config file), to its end.
pub fn run_on(name: &str, text: &str, args: &[&str]) -> Output {
    TextFile::new(name, text).run(args)
}

/// The binary running, its address, and its stderr lines.
pub struct Running {
    pub child: Child,
    pub addr: SocketAddr,
    /// The log line that says where it listens.
    pub listening: String,
    stderr: mpsc::UnboundedReceiver<String>,
    /// Every stderr line seen so far, for failure messages.
    seen: Vec<String>,
}

/// A temp dir holding a config file, the audit log and the CA.
pub struct Setup {
    pub dir: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A setup whose config file [`Setup::write_config`] wrote.
    pub fn with_config(agent: &str, extra: &str) -> Setup {
        let setup = Setup::new();
        setup.write_config(agent, extra);
        setup
    }

    /// [`Setup::with_config`], started.
    pub async fn running(agent: &str, extra: &str) -> (Setup, Running) {
        let setup = Setup::with_config(agent, extra);
        let running = setup.start().await;
        (setup, running)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("robots-proxy.toml")
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// Writes the config file as [`Setup::write_config`] does, with
    /// `shutdown_grace` set to `grace` instead of 30 s.
    pub fn write_config_with_grace(&self, agent: &str, grace: &str) {
        self.write_config(agent, "");
        let text = std::fs::read_to_string(self.config_path()).expect("config");
        let changed = text.replace(
            "shutdown_grace = \"30s\"",
            &format!("shutdown_grace = \"{grace}\""),
        );
        assert_ne!(changed, text, "no shutdown_grace line to change");
        std::fs::write(self.config_path(), changed).expect("write");
    }

    /// Writes the config file: the common keys, then `extra` (top-level
    /// keys first, tables after).
    pub fn write_config(&self, agent: &str, extra: &str) {
        let text = format!(
            "listen = \"127.0.0.1:0\"\n\
             agent = \"{agent}\"\n\
             allow_private_destinations = true\n\
             state_dir = {state:?}\n\
             shutdown_grace = \"30s\"\n\
             [audit]\n\
             path = {audit:?}\n\
             {extra}",
            state = self.dir.path().display().to_string(),
            audit = self.audit_path().display().to_string(),
        );
        // Written in place (not renamed) like an editor saving the file.
        std::fs::write(self.config_path(), text).expect("write config");
    }

    pub fn audit_lines(&self, path: &Path) -> Vec<serde_json::Value> {
        super::json_lines(path)
    }

    pub async fn start(&self) -> Running {
        self.start_notifying(None).await
    }

    /// Starts the binary, with `NOTIFY_SOCKET` set to `notify` if given.
    pub async fn start_notifying(&self, notify: Option<&Path>) -> Running {
        self.spawn(notify, true).await
    }

    /// Starts the binary without `RUST_LOG`: the config's `log.level`
    /// decides what is logged (it must log `info` at start).
    pub async fn start_with_config_log_level(&self) -> Running {
        self.spawn(None, false).await
    }

    async fn spawn(&self, notify: Option<&Path>, rust_log: bool) -> Running {
        let mut command = command();
        match notify {
            Some(socket) => command.env("NOTIFY_SOCKET", socket),
            None => command.env_remove("NOTIFY_SOCKET"),
        };
        if rust_log {
            command.env("RUST_LOG", "info");
        } else {
            command.env_remove("RUST_LOG");
        }
        command.args(["run", "--config"]).arg(self.config_path());
        Running::start(command).await
    }
}

impl Running {
    /// Starts `command` (the binary and its arguments, perhaps behind a
    /// shell or a wrapper such as faketime, which forks it) and waits for
    /// the log line that says where it listens. The command leads a
    /// process group of its own, so dropping the `Running` stops the proxy
    /// behind a wrapper too.
    pub async fn start(mut command: Command) -> Running {
        let mut child = command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start robots-proxy");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::unbounded_channel();
        // Drains stderr for the whole run so the proxy never blocks on it.
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut running = Running {
            child,
            addr: "0.0.0.0:0".parse().expect("addr"),
            listening: String::new(),
            stderr: rx,
            seen: Vec::new(),
        };
        let line = running.wait_for("listen=").await;
        let rest = &line[line.find("listen=").expect("listen=") + "listen=".len()..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        running.addr = rest[..end]
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {line}"));
        running.listening = line;
        running
    }

    /// The next stderr line containing `needle` (bounded wait): an event,
    /// read as it comes.
    pub async fn wait_for(&mut self, needle: &str) -> String {
        let (stderr, seen) = (&mut self.stderr, &mut self.seen);
        let next = async {
            while let Some(line) = stderr.recv().await {
                seen.push(line.clone());
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        };
        match tokio::time::timeout(NO_HANG, next).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "robots-proxy exited before logging {needle:?}:\n{}",
                self.seen.join("\n")
            ),
            Err(_) => panic!(
                "no {needle:?} on stderr within {NO_HANG:?}:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// The stderr lines read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Every stderr line up to and including the process's exit.
    pub async fn rest_of_stderr(&mut self) -> Vec<String> {
        while let Ok(Some(line)) = tokio::time::timeout(NO_HANG, self.stderr.recv()).await {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    /// Sends a signal with kill(1) to the process this test started.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -{name} failed");
    }

    /// SIGHUP, then waits for the outcome's log line (`configuration
    /// reloaded` or `reload rejected`) and returns it.
    pub async fn reload(&mut self, expect: &str) -> String {
        self.signal("HUP");
        self.wait_for(expect).await
    }

    pub async fn wait_exit(&mut self) -> ExitStatus {
        let child = &mut self.child;
        super::until("robots-proxy to exit", || {
            let status = child.try_wait().expect("wait");
            async move { status }
        })
        .await
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }
}

/// An open-file limit: soft and hard, `None` meaning unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// The open-file limit of process `pid` (`None`: this process), from the
/// "Max open files" line of `/proc/PID/limits`; `None` if unreadable.
pub fn open_files(pid: Option<u32>) -> Option<OpenFiles> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/limits"),
        None => "/proc/self/limits".to_owned(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let limit = |field: &str| match field {
        "unlimited" => Some(None),
        n => n.parse().ok().map(Some),
    };
    let mut fields = line.split_whitespace().skip(3);
    Some(OpenFiles {
        soft: limit(fields.next()?)?,
        hard: limit(fields.next()?)?,
    })
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only this test's own processes: the child's group (the child and
        // what it started), then the child by its handle.
        if self.is_running() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How many file descriptors process `pid` has open, and the highest.
pub fn descriptors(pid: u32) -> (usize, u64) {
    let fds: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the proxy's /proc/PID/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (fds.len(), fds.iter().copied().max().unwrap_or(0))
}

/// Sets process `pid`'s descriptor limit, soft and hard, to `limit`.
pub fn limit_descriptors(pid: u32, limit: u64) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::prlimit(
        Some(pid),
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        },
    )
    .expect("prlimit");
}
