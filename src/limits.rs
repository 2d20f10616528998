//! The process's open-file limit.
//!
//! A proxy holds a socket per client connection, often one more towards
//! the origin, and idle pooled ones besides; the soft limit many shells
//! and service managers start a process with (1,024) is soon used up, and
//! then accepts and connects fail. Like nginx (`worker_rlimit_nofile`) and
//! Go's runtime, robots-proxy raises the soft limit to the hard one at
//! start; `max_connections` is derived from the result.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft open-file limit; `None` if unlimited.
pub fn open_files() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises the soft open-file limit to the hard one. Returns the limit
/// before and after (`None`: unlimited); unchanged if it is already at the
/// hard limit or the kernel refuses.
pub fn raise_open_files() -> (Option<u64>, Option<u64>) {
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    if before == limit.maximum {
        return (before, before);
    }
    // The kernel caps the limit at fs.nr_open even when the hard limit
    // says "unlimited"; ask for that rather than fail.
    let target = limit.maximum.or_else(nr_open);
    let raised = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: target,
            maximum: limit.maximum,
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
    /// first is tested on the binary (tests/ops_proxy.rs).
    #[test]
    fn raising_reaches_the_hard_limit() {
        let limit = getrlimit(Resource::Nofile);
        let (_, after) = raise_open_files();
        assert_eq!(after, open_files());
        match limit.maximum {
            // Reached the hard limit (or fs.nr_open below an unlimited one).
            Some(hard) => assert_eq!(after, Some(hard)),
            None => assert!(after.is_none() || after >= limit.current),
        }
    }
}
