//! `audit.witness_command`: a command run for each checkpoint line, the
//! line on its standard input (for example `logger -t
//! robots-proxy-witness`, so that journald keeps a copy). Run from a
//! thread of its own, one at a time, without a shell; the writer only
//! hands the line over and never waits: a checkpoint that comes while
//! one is still pending is not passed on. A command that fails, runs past
//! its time (it is killed) or cannot be started is logged and counted
//! (`robots_proxy_audit_witness_command_failures_total`); the audit line
//! stands.

use std::io::{self, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// How long a command may run when checkpoints are only written at start
/// and reopen (`checkpoint_every = "0s"`).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The command's thread, fed one checkpoint line at a time.
pub(crate) struct WitnessCommand {
    tx: SyncSender<Vec<u8>>,
    failures: Counter,
    #[cfg(test)]
    done: std::sync::Arc<(parking_lot::Mutex<u64>, parking_lot::Condvar)>,
}

impl WitnessCommand {
    /// Starts the thread that runs `argv` (a program and its arguments)
    /// for each line handed over, killing a run after `timeout`; failures
    /// are counted in `failures`.
    pub(crate) fn start(
        argv: &[String],
        timeout: Duration,
        failures: Counter,
    ) -> io::Result<WitnessCommand> {
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "audit.witness_command: the first element must name the program",
            ));
        }
        // One line waiting while one runs: bounded whatever the command does.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let command = WitnessCommand {
            tx,
            failures: failures.clone(),
            #[cfg(test)]
            done: Default::default(),
        };
        #[cfg(test)]
        let done = command.done.clone();
        let argv = argv.to_vec();
        std::thread::Builder::new()
            .name("audit-witness-command".into())
            .spawn(move || {
                serve(&argv, timeout, &failures, rx, || {
                    #[cfg(test)]
                    {
                        *done.0.lock() += 1;
                        done.1.notify_all();
                    }
                })
            })?;
        Ok(command)
    }

    /// Hands `line` (a checkpoint line, newline included) to the command;
    /// never blocks.
    pub(crate) fn send(&self, line: &[u8]) {
        match self.tx.try_send(line.to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.failures.inc();
                tracing::error!(
                    "audit.witness_command is still busy with earlier checkpoints: \
                     this checkpoint is not passed to it"
                );
            }
            Err(TrySendError::Disconnected(_)) => {
                self.failures.inc();
                tracing::error!("audit.witness_command's thread is gone");
            }
        }
    }

    /// Waits until `n` runs have ended.
    #[cfg(test)]
    pub(crate) fn wait_runs(&self, n: u64) {
        let mut done = self.done.0.lock();
        while *done < n {
            self.done.1.wait(&mut done);
        }
    }
}

fn serve(
    argv: &[String],
    timeout: Duration,
    failures: &Counter,
    rx: Receiver<Vec<u8>>,
    ran: impl Fn(),
) {
    for line in rx {
        if let Err(e) = run(argv, &line, timeout) {
            failures.inc();
            tracing::error!(command = ?argv, error = %e,
                "audit.witness_command failed for a checkpoint");
        }
        ran();
    }
}

/// Runs `argv` once with `line` on its standard input.
fn run(argv: &[String], line: &[u8], timeout: Duration) -> Result<(), String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    let written = match child.stdin.take() {
        // A command that exits without reading its input is its own
        // business: its exit status says whether it failed.
        Some(mut stdin) => match stdin.write_all(line) {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
            _ => Ok(()),
        },
        None => Ok(()),
    };
    let status = wait(&mut child, timeout)?;
    written.map_err(|e| format!("cannot write the checkpoint to it: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("it {status}"))
    }
}

/// Waits for `child` at most `timeout`, then kills it.
fn wait(child: &mut Child, timeout: Duration) -> Result<std::process::ExitStatus, String> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if started.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "still running after {}: killed",
                humantime::format_duration(timeout)
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_line_reaches_the_command_on_its_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("witness.jsonl");
        let script = format!("cat >> '{}'", out.display());
        let failures = Counter::default();
        let cmd = WitnessCommand::start(
            &argv(&["sh", "-c", &script]),
            Duration::from_secs(30),
            failures.clone(),
        )
        .expect("start");
        cmd.send(b"{\"seq\":1}\n");
        cmd.wait_runs(1);
        cmd.send(b"{\"seq\":2}\n");
        cmd.wait_runs(2);
        assert_eq!(
            std::fs::read_to_string(&out).expect("read"),
            "{\"seq\":1}\n{\"seq\":2}\n"
        );
        assert_eq!(failures.get(), 0);
    }

    #[test]
    fn a_failure_a_missing_program_and_a_command_past_its_time_are_counted() {
        let failures = Counter::default();
        let fails =
            WitnessCommand::start(&argv(&["false"]), Duration::from_secs(30), failures.clone())
                .expect("start");
        fails.send(b"{}\n");
        fails.wait_runs(1);
        assert_eq!(failures.get(), 1);
        let missing = WitnessCommand::start(
            &argv(&["/nonexistent/witness"]),
            Duration::from_secs(30),
            failures.clone(),
        )
        .expect("start");
        missing.send(b"{}\n");
        missing.wait_runs(1);
        assert_eq!(failures.get(), 2);
        let slow = WitnessCommand::start(
            &argv(&["sleep", "30"]),
            Duration::from_millis(200),
            failures.clone(),
        )
        .expect("start");
        let started = Instant::now();
        // One runs, one waits: a line finding no room is counted at once.
        for _ in 0..3 {
            slow.send(b"{}\n");
        }
        let dropped = failures.get() - 2;
        assert!((1..=2).contains(&dropped), "{dropped}");
        slow.wait_runs(3 - dropped);
        assert_eq!(failures.get(), 5);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(WitnessCommand::start(&[], Duration::from_secs(1), Counter::default()).is_err());
    }
}
