use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use robots_proxy::app::App;
use robots_proxy::check;
use robots_proxy::config::{Config, LogFormat};
use robots_proxy::robots::Robots;

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
        /// Product token (ExampleBot) or whole User-Agent string.
        #[arg(long, value_name = "TOKEN")]
        agent: String,
        /// URLs (absolute or paths); read from stdin, one per line, if none.
        urls: Vec<String>,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without starting the proxy.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(Args)]
struct RunArgs {
    /// TOML configuration file; command-line flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen address.
    #[arg(long, value_name = "ADDR")]
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
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    log_json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            robots,
            agent,
            urls,
        } => run_check(&robots, &agent, &urls),
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
        Command::Run(args) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("robots-proxy: {e:#}");
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
            !robots_proxy::robots::product_token(agent).is_empty(),
            "--agent {agent:?} has no product token (letters, '-', '_')"
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
    Ok(config)
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal())
        .with_writer(io::stderr);
    match config.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    init_logging(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let app = App::bind(config).await?;
        tracing::info!(listen = %app.local_addr(), agent = %app.config.agent,
            audit_log = %app.proxy.audit.path().display(), "robots-proxy listening");
        let cut = app.serve(shutdown_signal()).await;
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

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down: no new connections, finishing requests in flight");
}

fn run_check(path: &Path, agent: &str, urls: &[String]) -> ExitCode {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("robots-proxy check: cannot read {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    if robots_proxy::robots::product_token(agent).is_empty() {
        eprintln!("robots-proxy check: --agent {agent:?} has no product token (letters, '-', '_')");
        return ExitCode::from(2);
    }
    let rules = Robots::parse(&bytes).agent_rules(agent);
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let result = if urls.is_empty() {
        check::check_lines(&rules, io::stdin().lock(), &mut out)
    } else {
        check::check_urls(&rules, urls.iter().map(String::as_str), &mut out)
    };
    match result.and_then(|s| out.flush().map(|()| s)) {
        Ok(summary) if summary.disallowed > 0 => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("robots-proxy check: {e}");
            ExitCode::from(2)
        }
    }
}
