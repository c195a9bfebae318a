//! Directories whose entries are named by a number: Spark's metadata logs
//! (`offsets/N`, `commits/N`, a source's `sources/i/N` and `N.compact`, after Hadoop's
//! `HDFSMetadataLog`) and a checkpoint's state operators (`state/<operator id>`).
//!
//! Names starting with `.` (Hadoop's `.crc` sidecars, temp files) and names that are not
//! a number are skipped, as Spark's `HDFSMetadataLog.listBatches` skips them.

use std::io;
use std::path::Path;

/// An entry named `N` or, in a compacted source log, `N.compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Numbered {
    pub id: u64,
    /// Named `N.compact` (Spark's `CompactibleFileStreamLog`).
    pub compact: bool,
}

/// The numbered entries of `dir`, ascending; none when `dir` does not exist.
pub fn entries(dir: &Path) -> io::Result<Vec<Numbered>> {
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in listing {
        let name = entry?.file_name();
        let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) else {
            continue;
        };
        let (number, compact) = match name.strip_suffix(".compact") {
            Some(n) => (n, true),
            None => (name, false),
        };
        if let Ok(id) = number.parse::<u64>() {
            out.push(Numbered { id, compact });
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The ids of `dir`'s entries named by a number alone, ascending.
pub fn ids(dir: &Path) -> io::Result<Vec<u64>> {
    Ok(entries(dir)?
        .into_iter()
        .filter(|e| !e.compact)
        .map(|e| e.id)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_compacted_logs_ascending_others_skipped() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["10", "2", "3.compact", ".4.crc", "5.tmp", "x", "007"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let found = entries(dir.path()).unwrap();
        let id = |id, compact| Numbered { id, compact };
        assert_eq!(
            found,
            vec![id(2, false), id(3, true), id(7, false), id(10, false)]
        );
        assert_eq!(ids(dir.path()).unwrap(), vec![2, 7, 10]);
        assert!(ids(&dir.path().join("missing")).unwrap().is_empty());
    }
}
