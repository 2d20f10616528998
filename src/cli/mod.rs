//! The command line: `run`, `check`, `config check`, `ca init`, `fleet init-key`,
//! `hash-password`, `audit key | verify | report` and the rest;
//! `src/main.rs` only calls [`main`].

mod audit;
pub mod check;
mod identity;
mod witness;

use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::config::{Config, LogFormat};
use crate::proxy::Proxy;
use crate::robots::Robots;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};

/// A caching forward HTTP(S) proxy that enforces robots.txt.
#[derive(Parser)]
#[command(name = "robots-proxy", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (defaults: listen on 127.0.0.1:3128, agent robots-proxy).
    Run(RunArgs),
    /// Judge URLs against a robots.txt file: prints ALLOWED/DISALLOWED per URL.
    ///
    /// Exit status: 0 if every URL is allowed, 1 if any is disallowed,
    /// 2 on a usage or I/O error.
    Check {
        /// The robots.txt file to read.
        #[arg(long, value_name = "FILE")]
        robots: PathBuf,
        /// Product token (ExampleBot) or whole User-Agent string; default:
        /// the `agent` of `--config`, else the built-in `robots-proxy`.
        #[arg(long, value_name = "TOKEN")]
        agent: Option<String>,
        /// Take the agent from this config file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The origin's paths are case-insensitive (IIS, Windows, macOS):
        /// also judge them lower-cased, as `robots.case_insensitive_hosts`.
        #[arg(long)]
        case_insensitive: bool,
        /// A declared purpose (usage category: train-ai, search, ai-input):
        /// a URL whose Content-Usage or Content-Signal preference for it is
        /// `n` is DISALLOWED. Repeatable.
        #[arg(long = "purpose", value_name = "CATEGORY")]
        purposes: Vec<String>,
        /// The origin's `/.well-known/tdmrep.json` (W3C TDMRep): a URL its
        /// first matching rule reserves (`tdm-reservation: 1`) is
        /// DISALLOWED for a declared `train-ai` or `ai-input`.
        #[arg(long, value_name = "FILE")]
        tdmrep: Option<PathBuf>,
        /// An RSL 1.0 licence document: a URL its first matching
        /// `<content>` prohibits a declared purpose for is DISALLOWED (the
        /// URLs are then best given whole, `https://host/path`, for the
        /// documents' full-URL patterns).
        #[arg(long, value_name = "FILE")]
        rsl: Option<PathBuf>,
        /// URLs (absolute or paths); read from stdin, one per line, if none.
        urls: Vec<String>,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Certificate authority for HTTPS interception.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Fleet mode tools.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Print an Argon2id hash of a password (read from stdin) for `access.users`.
    HashPassword,
    /// The audit log and its evidence: verify its hash chain, print its
    /// signing key, report on it, print an archived robots.txt.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// The crawler's Web Bot Auth keys and their directory.
    #[command(subcommand)]
    Identity(identity::IdentityCommand),
}

#[derive(Subcommand)]
enum CaCommand {
    /// Create a new CA: DIR/ca.pem (trust this) and DIR/ca.key (mode 0600).
    Init {
        /// Directory for the CA files.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum FleetCommand {
    /// Make a fleet key (`fleet.key_file`): 32 random bytes as 64 hex
    /// digits in FILE (mode 0600), never over an existing file. Copy it
    /// to every node of the fleet.
    InitKey {
        /// The key file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without starting the proxy.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(Args, Clone)]
struct RunArgs {
    /// TOML configuration file; command-line flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address.
    #[arg(long, value_name = "ADDR", value_parser = crate::config::parse_listen)]
    listen: Option<SocketAddr>,
    /// Robots product token to obey.
    #[arg(long, value_name = "TOKEN")]
    agent: Option<String>,
    /// Audit log file (JSON lines).
    #[arg(long, value_name = "PATH")]
    audit_log: Option<PathBuf>,
    /// Allow private, loopback and link-local destinations.
    #[arg(long)]
    allow_private_destinations: bool,
    /// Admin listener address (health, metrics, explain).
    #[arg(long, value_name = "ADDR", value_parser = crate::config::parse_listen)]
    admin_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    log_json: bool,
    /// CA directory for HTTPS interception (created on first start).
    #[arg(long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    /// Extra trusted CA certificates (PEM) for upstream TLS; repeatable.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Vec<PathBuf>,
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            robots,
            agent,
            config,
            case_insensitive,
            purposes,
            tdmrep,
            rsl,
            urls,
        } => {
            let rsl = match rsl.map(|f| (std::fs::read(&f), f)) {
                None => None,
                Some((Ok(bytes), f)) => match crate::judge::signals::rsl::RslDoc::parse(&bytes) {
                    Ok(doc) => Some(doc),
                    Err(e) => {
                        eprintln!(
                            "robots-proxy check: {}: not an RSL document: {e}",
                            f.display()
                        );
                        return ExitCode::from(2);
                    }
                },
                Some((Err(e), f)) => {
                    eprintln!("robots-proxy check: cannot read {}: {e}", f.display());
                    return ExitCode::from(2);
                }
            };
            let tdmrep = match tdmrep.map(|f| (std::fs::read(&f), f)) {
                None => None,
                Some((Ok(bytes), f)) => match crate::judge::signals::tdmrep::TdmFile::parse(&bytes)
                {
                    Ok(file) => Some(file),
                    Err(e) => {
                        eprintln!("robots-proxy check: {}: {e}", f.display());
                        return ExitCode::from(2);
                    }
                },
                Some((Err(e), f)) => {
                    eprintln!("robots-proxy check: cannot read {}: {e}", f.display());
                    return ExitCode::from(2);
                }
            };
            let agent = match (agent, config) {
                (Some(agent), _) => agent,
                (None, Some(file)) => match Config::load(&file) {
                    Ok(c) => c.agent,
                    Err(e) => {
                        eprintln!("robots-proxy check: {e:#}");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => Config::default().agent,
            };
            let opts = check::Options {
                case_insensitive,
                purposes,
                tdmrep,
                rsl,
            };
            run_check(&robots, &agent, &urls, &opts)
        }
        Command::Config(ConfigCommand::Check { file }) => match Config::load(&file) {
            Ok(_) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("robots-proxy: {e}");
                ExitCode::from(2)
            }
        },
        Command::Ca(CaCommand::Init { dir }) => ca_init(&dir),
        Command::Fleet(FleetCommand::InitKey { out }) => match crate::fleet::key::generate(&out) {
            Ok(()) => {
                println!(
                    "{}: fleet key written (mode 0600); copy it to every node and set fleet.key_file",
                    out.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("robots-proxy fleet init-key: {e}");
                ExitCode::from(2)
            }
        },
        Command::HashPassword => hash_password(),
        Command::Audit(command) => audit::main(command),
        Command::Identity(command) => identity::main(command),
        Command::Run(args) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                // Each cause once: an error whose text already holds its
                // source is not followed by it again.
                let error: &(dyn std::error::Error + 'static) = e.as_ref();
                eprintln!("robots-proxy: {}", crate::upstream::error_chain(error));
                ExitCode::from(1)
            }
        },
    }
}

fn load_config(args: &RunArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(agent) = &args.agent {
        anyhow::ensure!(
            !crate::robots::product_token(agent).is_empty(),
            "--agent {agent:?} has no product token (letters, digits, '-', '_')"
        );
        config.agent = agent.clone();
    }
    if let Some(path) = &args.audit_log {
        config.audit.path = Some(path.clone());
    }
    if args.allow_private_destinations {
        config.allow_private_destinations = true;
    }
    if let Some(admin) = args.admin_listen {
        config.admin.listen = Some(admin);
    }
    if args.log_json {
        config.log.format = LogFormat::Json;
    }
    if let Some(dir) = &args.ca_dir {
        config.tls.ca_dir = Some(dir.clone());
    }
    config
        .upstream
        .ca_files
        .extend(args.upstream_ca.iter().cloned());
    Ok(config)
}

/// Changes the log filter of the running process (`log.level` on reload).
type LogLevel =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// Installs the log subscriber. Returns the handle that changes its
/// filter, unless `RUST_LOG` set it (which then overrides `log.level`).
fn init_logging(config: &Config) -> Option<LogLevel> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let from_env = EnvFilter::try_from_default_env().ok();
    let reloadable = from_env.is_none();
    let filter = from_env
        .or_else(|| EnvFilter::try_new(&config.log.level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(io::stderr().is_terminal())
        .with_writer(io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    match config.log.format {
        LogFormat::Json => registry.with(output.json()).init(),
        LogFormat::Human => registry.with(output).init(),
    }
    reloadable.then_some(handle)
}

/// Applies a reloaded `log.level` (already validated with the config).
fn apply_log_level(handle: Option<&LogLevel>, old: &str, new: &str) {
    if old == new {
        return;
    }
    let Some(handle) = handle else {
        tracing::warn!("log.level changed, but RUST_LOG is set and overrides it");
        return;
    };
    match tracing_subscriber::EnvFilter::try_new(new) {
        Ok(filter) => match handle.reload(filter) {
            Ok(()) => tracing::info!(level = new, "log level changed"),
            Err(e) => tracing::error!("cannot change the log level: {e}"),
        },
        Err(e) => tracing::error!("log.level {new:?} is not a valid filter: {e}"),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    let log_level = init_logging(&config);
    let (before, open_files) = crate::ops::limits::raise_open_files();
    if before != open_files {
        tracing::debug!(from = ?before, to = ?open_files, "raised the open-file limit");
    }
    let workers = config.worker_threads();
    // This thread's runtime serves connections, the admin listener and the
    // background work; `App::serve` starts `workers` - 1 more threads,
    // each serving connections on an event loop of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let mut app = App::bind(config).await?;
        let (ca_pem, created) = &app.ca;
        if *created {
            tracing::info!(ca = %ca_pem.display(),
                "created a new CA for HTTPS interception: clients must trust this file");
        } else {
            tracing::info!(ca = %ca_pem.display(), "HTTPS interception CA");
        }
        let max_connections = app.max_connections;
        let needed = max_connections.saturating_mul(2).saturating_add(64);
        if open_files.is_some_and(|n| usize::try_from(n).is_ok_and(|n| n < needed)) {
            tracing::warn!(
                open_files = open_files.unwrap_or(0),
                max_connections,
                "the open-file limit is low for max_connections: raise LimitNOFILE / ulimit -n"
            );
        }
        // Handlers are registered before the "listening" line and READY=1:
        // a SIGHUP or SIGTERM sent right after (systemctl reload/stop, or a
        // script that waits for the line) must not meet the default action,
        // which kills the process.
        use tokio::signal::unix::{SignalKind, signal};
        let hup = signal(SignalKind::hangup());
        let stop = [SignalKind::terminate(), SignalKind::interrupt()].map(signal);
        tracing::info!(listen = %app.local_addr(), agent = %app.config.agent,
            workers, max_connections,
            audit_log = %app.proxy.audit.path().display(),
            admin = %app.admin_addr().map_or_else(|| "off".to_string(), |a| a.to_string()),
            "robots-proxy listening");
        match app.proxy.response_cache() {
            Some(cache) => tracing::info!(mode = cache.mode_name(), dir = %cache.dir().display(),
                "response cache on"),
            None => tracing::info!("response cache off (cache.enabled = false)"),
        }
        let asks = app.reload_asks();
        spawn_reloader(
            args,
            app.proxy.clone(),
            app.config.clone(),
            log_level,
            hup,
            asks,
        );
        spawn_sweeper(app.proxy.clone());
        crate::ops::systemd::notify_ready();
        let cut = app.serve(shutdown_signal(stop)).await;
        if cut > 0 {
            tracing::warn!(
                connections = cut,
                "grace period over; closing remaining connections"
            );
        }
        tracing::info!("stopped");
        Ok(())
    })
}

/// SIGHUP or `POST /reload`: re-read the configuration (same file and
/// flags) and apply it; an invalid one is rejected and the running one
/// stays. The keys that need a restart are those whose new value differs
/// from the one the process started with (the value still in force). The
/// file is read and the settings built (password hashes among them) on
/// the blocking pool, never on the threads that serve requests. In a
/// fleet, a reload asked of this node (signal or admin) reloads every
/// node, each from its own file, and this node reloads when another says
/// so; the fleet's messages are bounded by the fleet layer.
fn spawn_reloader(
    args: RunArgs,
    proxy: Arc<Proxy>,
    started: Config,
    log_level: Option<LogLevel>,
    hup: io::Result<tokio::signal::unix::Signal>,
    mut asks: tokio::sync::mpsc::Receiver<crate::app::ReloadAsk>,
) {
    let mut level = started.log.level.clone();
    let read_file = |args: &RunArgs| {
        args.config
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    };
    let mut text = read_file(&args);
    let fleet = proxy.settings().fleet.clone();
    let mut reloads = fleet.as_ref().map(|f| f.events());
    tokio::spawn(async move {
        let mut hup = match hup {
            Ok(hup) => Some(hup),
            Err(_) => {
                tracing::warn!("cannot listen for SIGHUP: reload by signal disabled");
                None
            }
        };
        // Another node's reloads: the first at once, then at most one per
        // FLEET_RELOAD_EVERY, those in between folded into the next (a
        // flood of messages costs one reload per interval).
        let mut fleet_due: Option<tokio::time::Instant> = None;
        let mut folded: Option<Arc<str>> = None;
        loop {
            let wait_for_due = async {
                match fleet_due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            let from_fleet = |from: &str| {
                tracing::info!(from = %from, "reloading as another node of the fleet did");
                crate::ops::audit::AdminEvent::new("reload", format!("fleet node {from}"))
            };
            let (asked_here, reply, mut event) = tokio::select! {
                Some(()) = async { hup.as_mut()?.recv().await } => {
                    tracing::info!("reloading on SIGHUP");
                    (true, None, crate::ops::audit::AdminEvent::new("reload", "SIGHUP".into()))
                }
                Some(ask) = asks.recv() => {
                    tracing::info!(by = %ask.by, "reloading as the admin listener was asked");
                    let mut event = crate::ops::audit::AdminEvent::new("reload", ask.by);
                    event.client = ask.client;
                    (true, Some(ask.reply), event)
                }
                () = wait_for_due, if folded.is_some() => {
                    let from = folded.take().unwrap_or_else(|| Arc::from("?"));
                    fleet_due = Some(tokio::time::Instant::now() + FLEET_RELOAD_EVERY);
                    (false, None, from_fleet(&from))
                }
                Some(from) = another_nodes_reload(reloads.as_mut(), fleet.as_deref()) => {
                    let now = tokio::time::Instant::now();
                    if fleet_due.is_some_and(|due| now < due) {
                        if folded.replace(from).is_none() {
                            tracing::debug!("another node's reload folded into the next one");
                        }
                        continue;
                    }
                    fleet_due = Some(now + FLEET_RELOAD_EVERY);
                    (false, None, from_fleet(&from))
                }
                else => return,
            };
            crate::ops::systemd::notify_reloading();
            let work = {
                let (args, proxy, started) = (args.clone(), proxy.clone(), started.clone());
                tokio::task::spawn_blocking(move || {
                    let new = load_config(&args).map_err(|e| one_line(&format!("{e:#}")))?;
                    let restart =
                        crate::app::reload(&proxy, &started, &new).map_err(|e| e.to_string())?;
                    let new_text = read_file(&args);
                    Ok::<_, String>((new, restart, new_text))
                })
            };
            let outcome = match work.await {
                Ok(Ok((new, restart, new_text))) => {
                    let changed = crate::config::changed_keys(&text, &new_text);
                    text = new_text;
                    apply_log_level(log_level.as_ref(), &level, &new.log.level);
                    level = new.log.level;
                    if !restart.is_empty() {
                        tracing::warn!(keys = %restart.join(", "),
                            "these changes need a restart to apply");
                    }
                    let shown = if changed.is_empty() {
                        "none".to_string()
                    } else {
                        changed.join(", ")
                    };
                    tracing::info!(changed = %shown, "configuration reloaded");
                    crate::app::ReloadDone::Applied {
                        changed,
                        needs_restart: restart.iter().map(|k| k.to_string()).collect(),
                        fleet: None,
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!("reload rejected, keeping the running configuration: {e}");
                    crate::app::ReloadDone::Rejected(e)
                }
                Err(e) => {
                    tracing::error!("reload failed, keeping the running configuration: {e}");
                    crate::app::ReloadDone::Rejected(format!("reload failed: {e}"))
                }
            };
            crate::ops::systemd::notify_ready();
            let mut outcome = outcome;
            if asked_here && let Some(fleet) = &fleet {
                let told = fleet.publish_reload().await.is_ok();
                if !told {
                    tracing::warn!("the fleet's Redis is unavailable: only this node reloaded");
                }
                if let crate::app::ReloadDone::Applied { fleet, .. } = &mut outcome {
                    *fleet = Some(told);
                }
            }
            match &outcome {
                crate::app::ReloadDone::Applied { changed, .. } => {
                    event.changed = Some(changed.clone());
                    event.outcome = Some("applied".into());
                }
                crate::app::ReloadDone::Rejected(e) => {
                    event.outcome = Some(format!("rejected: {e}"));
                }
            }
            event.scope = fleet
                .as_ref()
                .map(|_| if asked_here { "fleet" } else { "node" });
            // A signal's reload that changed nothing (logrotate's) is in
            // the log as its reopen checkpoint already.
            let unchanged = matches!(&outcome,
                crate::app::ReloadDone::Applied { changed, .. } if changed.is_empty());
            if (reply.is_some() || !unchanged)
                && let Err(e) = crate::app::state::ProxyView::record_admin(&*proxy, event)
            {
                tracing::error!(error = %e, "cannot write the audit line of a reload");
            }
            if let Some(reply) = reply {
                let _ = reply.send(outcome);
            }
        }
    });
}

/// The most often another node's reload messages make this node reload.
const FLEET_RELOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The name of the next other node of the fleet that reloaded; `None`
/// once the fleet's events end (or without a fleet).
async fn another_nodes_reload(
    events: Option<&mut tokio::sync::broadcast::Receiver<crate::fleet::events::Event>>,
    fleet: Option<&crate::fleet::Fleet>,
) -> Option<Arc<str>> {
    use crate::fleet::events::Event;
    use tokio::sync::broadcast::error::RecvError;
    let (events, fleet) = (events?, fleet?);
    loop {
        match events.recv().await {
            Ok(Event::Reload { from }) if !fleet.is_me(&from) => return Some(from.node),
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return None,
        }
    }
}

/// A multi-line error message as one log line. The TOML parser's message
/// spans several lines (position, excerpt, caret marker, reason); in a log
/// (journald takes one entry per line) only the first would carry the
/// "reload rejected" context. The excerpt and reason are kept, the caret and
/// gutter-only lines dropped: `..., column 8; 9 | mode = "x"; unknown variant ...`.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| l.chars().any(|c| !matches!(c, '|' | '^' | ' ' | '\t')))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Drops idle politeness state once a minute.
fn spawn_sweeper(proxy: Arc<Proxy>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            proxy.settings().politeness.sweep();
        }
    });
}

fn ca_init(dir: &Path) -> ExitCode {
    let cert = dir.join(crate::tls::ca::CERT_FILE);
    let key = dir.join(crate::tls::ca::KEY_FILE);
    // Either file alone is enough to refuse: never overwrite a private key.
    if let Some(existing) = [&cert, &key].into_iter().find(|p| p.exists()) {
        eprintln!(
            "robots-proxy ca init: {} already exists; remove ca.pem and ca.key first to replace the CA",
            existing.display()
        );
        return ExitCode::from(2);
    }
    match crate::tls::Ca::generate().and_then(|ca| ca.write(dir).map(|()| ca)) {
        Ok(ca) => {
            println!(
                "{}\nSHA-256 fingerprint {}",
                cert.display(),
                ca.fingerprint_sha256()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("robots-proxy ca init: {e}");
            ExitCode::from(2)
        }
    }
}

fn hash_password() -> ExitCode {
    let mut line = String::new();
    if let Err(e) = io::stdin().read_line(&mut line) {
        eprintln!("robots-proxy hash-password: {e}");
        return ExitCode::from(2);
    }
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        eprintln!("robots-proxy hash-password: empty password (write it on stdin)");
        return ExitCode::from(2);
    }
    match crate::admit::hash_password(password) {
        Ok(hash) => {
            println!("{hash}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("robots-proxy hash-password: {e}");
            ExitCode::from(2)
        }
    }
}

/// Completes on the first SIGTERM or SIGINT (handlers registered by the caller).
async fn shutdown_signal(stop: [io::Result<tokio::signal::unix::Signal>; 2]) {
    let mut signals: Vec<_> = stop.into_iter().filter_map(Result::ok).collect();
    if signals.is_empty() {
        tracing::warn!("cannot listen for SIGTERM or SIGINT: stop with SIGKILL");
        std::future::pending::<()>().await;
    }
    futures_util::future::select_all(signals.iter_mut().map(|s| Box::pin(s.recv()))).await;
    crate::ops::systemd::notify_stopping();
    tracing::info!("shutting down: no new connections, finishing requests in flight");
}

fn run_check(path: &Path, agent: &str, urls: &[String], opts: &check::Options) -> ExitCode {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("robots-proxy check: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    if crate::robots::product_token(agent).is_empty() {
        eprintln!(
            "robots-proxy check: --agent {agent:?} has no product token (letters, digits, '-', '_')"
        );
        return ExitCode::from(2);
    }
    let rules = Robots::parse(&bytes).agent_rules(agent);
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let result = if urls.is_empty() {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        check::check_lines_with(&rules, io::stdin().lock(), &mut out, threads, opts)
    } else {
        check::check_urls_with(&rules, urls.iter().map(String::as_str), &mut out, opts)
    };
    match result.and_then(|s| out.flush().map(|()| s)) {
        Ok(summary) if summary.invalid > 0 => {
            eprintln!(
                "robots-proxy check: {} line(s) were not a path or an http(s) URL (INVALID)",
                summary.invalid
            );
            ExitCode::from(2)
        }
        Ok(summary) if summary.disallowed > 0 => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("robots-proxy check: {e}");
            ExitCode::from(2)
        }
    }
}
