//! The process's open-file limit.
//!
//! A proxy holds a socket per client connection, often one more towards
//! the origin, and idle pooled ones besides; the soft limit many shells
//! and service managers start a process with (1,024) is soon used up, and
//! then accepts and connects fail. Like nginx (`worker_rlimit_nofile`) and
//! Go's runtime, robots-proxy raises the soft limit to the hard one at
//! start; `max_connections` is derived from the result.

use rustix::process::{Resource, Rlimit, setrlimit};

/// The open-file limit: soft and hard, `None` meaning unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Reads the limit of process `pid` (`None`: this process) from
/// `/proc/PID/limits`. (`getrlimit` cannot fail in rustix's API, but the
/// call can: older systemd filters `prlimit64` with `@resources`, and the
/// unit filters that set.) `None` if unreadable.
pub fn of_process(pid: Option<u32>) -> Option<Limit> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/limits"),
        None => "/proc/self/limits".to_owned(),
    };
    parse_limits(&std::fs::read_to_string(path).ok()?)
}

fn current() -> Option<Limit> {
    of_process(None)
}

/// The "Max open files" line of a `/proc/PID/limits` text.
fn parse_limits(text: &str) -> Option<Limit> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let mut values = rest.split_whitespace().map(|v| match v {
        "unlimited" => Some(None),
        n => n.parse::<u64>().ok().map(Some),
    });
    Some(Limit {
        soft: values.next()??,
        hard: values.next()??,
    })
}

/// The soft open-file limit; `None` if unlimited or unreadable.
pub(crate) fn open_files() -> Option<u64> {
    current().and_then(|l| l.soft)
}

/// Raises the soft open-file limit to the hard one. Returns the limit
/// before and after (`None`: unlimited or unreadable); unchanged if it is
/// already at the hard limit, cannot be read, or the kernel refuses.
pub fn raise_open_files() -> (Option<u64>, Option<u64>) {
    let Some(limit) = current() else {
        return (None, None);
    };
    let before = limit.soft;
    if before == limit.hard {
        return (before, before);
    }
    // The kernel caps the limit at fs.nr_open even when the hard limit
    // says "unlimited"; ask for that rather than fail.
    let target = limit.hard.or_else(nr_open);
    let raised = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: target,
            maximum: limit.hard,
        },
    );
    match raised {
        Ok(()) => (before, open_files()),
        Err(_) => (before, before),
    }
}

fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raising is harmless to the other tests in this process; lowering
    /// first is tested on the binary (tests/ops/e2e_curl.rs).
    #[test]
    fn raising_reaches_the_hard_limit() {
        let limit = current().expect("/proc/self/limits");
        let (_, after) = raise_open_files();
        assert_eq!(after, open_files());
        match limit.hard {
            Some(hard) => assert_eq!(after, Some(hard)),
            // Unlimited: as far as fs.nr_open allows.
            None => assert!(after.is_none() || after >= limit.soft),
        }
    }

    #[test]
    fn limits_text_is_read_leniently() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max processes             95712                95712                processes\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(
            parse_limits(text),
            Some(Limit {
                soft: Some(1024),
                hard: Some(524288)
            })
        );
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(
            parse_limits(unlimited),
            Some(Limit {
                soft: None,
                hard: None
            })
        );
        assert_eq!(parse_limits("Max open files  lots  more  files\n"), None);
        assert_eq!(parse_limits(""), None);
    }
}
