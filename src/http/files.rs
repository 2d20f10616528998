//! Files only the proxy's user may read: the CA, the audit signing key,
//! the robots.txt archive and the response cache are created through
//! these, with one behaviour for all.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Creates `dir` and its missing parents, mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `data` to `path` through a temporary file beside it, created with
/// `mode` (never readable by others, not even for a moment), synced, then
/// renamed over `path`: a reader sees the old file or the new one, whole.
/// The parent directory is created (0700) if missing. Concurrent writers
/// of one path each use a temporary name of their own.
pub(crate) fn write_atomically(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        create_private_dir(dir)?;
    }
    let tmp = tmp_path(path);
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `.NAME.tmpPID.N` beside `path`: unique within the process, and a
/// leftover of a crashed process never clashes with a live one's.
fn tmp_path(path: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp{}.{n}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_are_written_whole_with_their_mode_in_private_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a/b/key.pem");
        write_atomically(&path, b"one", 0o600).expect("write");
        write_atomically(&path, b"two", 0o600).expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("a/b")), 0o700);
        // No temporary file left behind.
        assert_eq!(
            fs::read_dir(dir.path().join("a/b")).expect("dir").count(),
            1
        );
    }
}
