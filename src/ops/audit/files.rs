//! Which audit files make up a log, and in which order: the live file and
//! every rotation beside it (`audit.jsonl.1`, `audit.jsonl.2.gz`, and
//! logrotate's `dateext` names `audit.jsonl-20261127[.gz]`), read in the
//! order of their first `seq`, whatever order a shell glob gives.

use std::io;
use std::path::{Path, PathBuf};

use super::chain::ChainFields;
use super::input::Lines;

/// The live file `live` and its rotations in its directory, oldest first.
/// Only the live file when no rotation is there (even if it is missing:
/// reading it then names it).
pub(crate) fn discover(live: &Path) -> io::Result<Vec<PathBuf>> {
    let Some(name) = live.file_name().and_then(|n| n.to_str()) else {
        return Ok(vec![live.to_owned()]);
    };
    let dir = match live.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![live.to_owned()]),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(other) = file_name.to_str() else {
            continue;
        };
        if other == name || other.strip_prefix(name).is_some_and(is_rotation_suffix) {
            files.push(dir.join(other));
        }
    }
    if files.is_empty() {
        return Ok(vec![live.to_owned()]);
    }
    // The live file last among equals: sort_by_first_seq is stable.
    files.sort_by_key(|f| (f.file_name() == live.file_name(), f.clone()));
    sort_by_first_seq(&mut files)
        .map_err(|(path, e)| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(files)
}

/// `.N`, `.N.gz`, `-DIGITS`, `-DIGITS.gz`.
fn is_rotation_suffix(rest: &str) -> bool {
    let rest = rest.strip_suffix(".gz").unwrap_or(rest);
    let digits = rest.strip_prefix('.').or_else(|| rest.strip_prefix('-'));
    digits.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Orders `files` by the `seq` of their first chained line: files whose
/// first line carries no chain (a log from before chaining) first, empty
/// files last, ties in the order given. The error names the file that
/// could not be read.
pub(crate) fn sort_by_first_seq(files: &mut [PathBuf]) -> Result<(), (PathBuf, io::Error)> {
    let mut keyed = Vec::with_capacity(files.len());
    for path in files.iter() {
        let key = first_seq(path).map_err(|e| (path.clone(), e))?;
        keyed.push((key, path.clone()));
    }
    keyed.sort_by_key(|(key, _)| *key);
    for (slot, (_, path)) in files.iter_mut().zip(keyed) {
        *slot = path;
    }
    Ok(())
}

/// The sort key of one file: its first line's `seq` when it is chained,
/// 0 when it is not (or is no audit line), `u64::MAX` when empty.
fn first_seq(path: &Path) -> io::Result<u64> {
    let mut lines = Lines::open(path)?;
    let Some(line) = lines.next_line()? else {
        return Ok(u64::MAX);
    };
    Ok(serde_json::from_slice::<ChainFields<'_>>(line.bytes)
        .ok()
        .filter(|f| f.chain.is_some())
        .and_then(|f| f.seq)
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_are_found_beside_the_live_file_and_ordered_by_seq() {
        let dir = tempfile::tempdir().expect("tempdir");
        let line = |seq: u64| format!("{{\"seq\":{seq},\"chain\":\"{}\"}}\n", "0".repeat(64));
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            if name.ends_with(".gz") {
                use std::io::Write;
                let mut enc = flate2::write::GzEncoder::new(
                    std::fs::File::create(&path).expect("create"),
                    flate2::Compression::default(),
                );
                enc.write_all(text.as_bytes()).expect("gzip");
                enc.finish().expect("gzip");
            } else {
                std::fs::write(&path, text).expect("write");
            }
        };
        // .10.gz is older than .2.gz though a glob puts it first.
        write("audit.jsonl.10.gz", &line(1));
        write("audit.jsonl.2.gz", &line(20));
        write("audit.jsonl.1", &line(30));
        write("audit.jsonl", &line(40));
        write("audit.jsonl-20261127.gz", &line(10));
        for other in [
            "audit.jsonl.bak",
            "audit.jsonl.1.old",
            "other.jsonl",
            "audit.jsonl.x.gz",
        ] {
            write(other, &line(5));
        }
        let found = discover(&dir.path().join("audit.jsonl")).expect("discover");
        let names: Vec<_> = found
            .iter()
            .map(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "audit.jsonl.10.gz",
                "audit.jsonl-20261127.gz",
                "audit.jsonl.2.gz",
                "audit.jsonl.1",
                "audit.jsonl"
            ]
        );
        let missing = dir.path().join("none").join("audit.jsonl");
        assert_eq!(discover(&missing).expect("discover"), [missing]);
    }

    #[test]
    fn unchained_files_come_first_and_empty_ones_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        let chained = dir.path().join("b");
        std::fs::write(
            &chained,
            format!("{{\"seq\":7,\"chain\":\"{}\"}}\n", "0".repeat(64)),
        )
        .expect("write");
        let old = dir.path().join("a");
        std::fs::write(&old, "{\"url\":\"x\"}\n").expect("write");
        let empty = dir.path().join("c");
        std::fs::write(&empty, "").expect("write");
        let mut files = vec![empty.clone(), chained.clone(), old.clone()];
        sort_by_first_seq(&mut files).expect("sort");
        assert_eq!(files, [old, chained, empty]);
    }
}
