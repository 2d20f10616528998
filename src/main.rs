use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use robots_proxy::check;
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            robots,
            agent,
            urls,
        } => run_check(&robots, &agent, &urls),
    }
}

fn run_check(path: &std::path::Path, agent: &str, urls: &[String]) -> ExitCode {
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
