//! A summary of one State Anchor's upper layer against its lower: which
//! paths it adds, changes and deletes, and how many bytes it holds. It
//! never reads a file's content (DX-6) and never follows a symlink.
//!
//! Upper layers hold files of the sandbox's subordinate IDs, so the scan
//! runs inside the Domain's user namespace (`lazaret-supervisor
//! --scan-anchor`), where it can read every directory.

use lazaret_protocol::display;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Every path in the lists is in its escaped form
/// ([`lazaret_protocol::display::escape`] of the path's bytes): printable,
/// one line, and lossless (`display::unescape` gives the exact bytes back),
/// because the sandbox names these files.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Summary {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
    /// Directories whose lower content is hidden as a whole.
    pub opaque: Vec<String>,
    pub added_count: u64,
    pub changed_count: u64,
    pub deleted_count: u64,
    /// Bytes the upper takes on disk: the blocks allocated to every entry
    /// in it (`st_blocks`), each inode once. A sparse file counts its
    /// data, not its apparent size (which the sandbox sets at will).
    pub bytes: u64,
    /// True when the path lists were cut at the limit (the counts are not).
    pub truncated: bool,
}

fn push(list: &mut Vec<String>, count: &mut u64, truncated: &mut bool, limit: usize, p: String) {
    *count += 1;
    if list.len() < limit {
        list.push(p);
    } else {
        *truncated = true;
    }
}

fn is_opaque(p: &Path) -> bool {
    for name in ["user.overlay.opaque", "trusted.overlay.opaque"] {
        let mut buf = [0u8; 4];
        if let Ok(n) = rustix::fs::lgetxattr(p, name, &mut buf) {
            if buf[..n] == *b"y" {
                return true;
            }
        }
    }
    false
}

/// Scans `upper` (the anchor for sandbox path `anchor`) against `lower`.
pub fn scan(anchor: &str, upper: &Path, lower: &Path, limit: usize) -> std::io::Result<Summary> {
    let mut s = Summary::default();
    // Inodes with more than one link, counted once.
    let mut linked = std::collections::HashSet::new();
    let mut stack = vec![std::path::PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = upper.join(&rel);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel = rel.join(e.file_name());
            let shown = format!(
                "{}/{}",
                display::escape(anchor.trim_end_matches('/')),
                display::escape_os(&rel)
            );
            let md = e.path().symlink_metadata()?;
            let ft = md.file_type();
            if md.nlink() < 2 || ft.is_dir() || linked.insert((md.dev(), md.ino())) {
                s.bytes = s.bytes.saturating_add(md.blocks().saturating_mul(512));
            }
            if ft.is_char_device() && md.rdev() == 0 {
                push(
                    &mut s.deleted,
                    &mut s.deleted_count,
                    &mut s.truncated,
                    limit,
                    shown,
                );
            } else if ft.is_dir() {
                if is_opaque(&e.path()) {
                    s.opaque.push(shown.clone());
                }
                if lower.join(&rel).symlink_metadata().is_err() {
                    push(
                        &mut s.added,
                        &mut s.added_count,
                        &mut s.truncated,
                        limit,
                        shown + "/",
                    );
                }
                stack.push(rel);
            } else {
                if lower.join(&rel).symlink_metadata().is_ok() {
                    push(
                        &mut s.changed,
                        &mut s.changed_count,
                        &mut s.truncated,
                        limit,
                        shown,
                    );
                } else {
                    push(
                        &mut s.added,
                        &mut s.added_count,
                        &mut s.truncated,
                        limit,
                        shown,
                    );
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_changed_and_never_content() {
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(lower.path().join("bin")).unwrap();
        std::fs::write(lower.path().join("bin/ls"), "old").unwrap();
        std::fs::create_dir_all(upper.path().join("bin")).unwrap();
        std::fs::write(upper.path().join("bin/ls"), "secret-content").unwrap();
        std::fs::create_dir_all(upper.path().join("local/bin")).unwrap();
        std::fs::write(upper.path().join("local/bin/tool"), "x").unwrap();
        let s = scan("/usr", upper.path(), lower.path(), 100).unwrap();
        assert_eq!(s.changed, ["/usr/bin/ls"]);
        assert!(s.added.contains(&"/usr/local/bin/tool".to_string()));
        assert!(s.added.contains(&"/usr/local/".to_string()));
        let allocated: u64 = ["bin", "bin/ls", "local", "local/bin", "local/bin/tool"]
            .iter()
            .map(|p| upper.path().join(p).symlink_metadata().unwrap().blocks() * 512)
            .sum();
        assert_eq!(s.bytes, allocated);
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("secret-content"));
    }

    #[test]
    fn bytes_are_what_the_upper_takes_on_disk() {
        use std::os::unix::fs::FileExt;
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        // Far larger than any bound in apparent size, one block of data.
        let f = std::fs::File::create(upper.path().join("sparse")).unwrap();
        f.set_len(1 << 40).unwrap();
        f.write_all_at(b"x", 1 << 39).unwrap();
        // One file of 1 MiB under three names.
        std::fs::write(upper.path().join("data"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(upper.path().join("data"), upper.path().join("l1")).unwrap();
        std::fs::hard_link(upper.path().join("data"), upper.path().join("l2")).unwrap();
        let s = scan("/root", upper.path(), lower.path(), 100).unwrap();
        let blocks = |n: &str| upper.path().join(n).metadata().unwrap().blocks() * 512;
        assert_eq!(s.bytes, blocks("sparse") + blocks("data"));
        assert!(s.bytes < (1 << 20) + (1 << 18), "{}", s.bytes);
    }

    #[test]
    fn names_are_escaped_losslessly() {
        use std::os::unix::ffi::OsStrExt;
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"\x1b[2J\xff\xc2\x9b\\x");
        std::fs::write(upper.path().join(name), "").unwrap();
        let s = scan("/root", upper.path(), lower.path(), 100).unwrap();
        assert_eq!(s.added, ["/root/\\x1b[2J\\xff\\u{9b}\\\\x"]);
        let back = display::unescape(&s.added[0]).unwrap();
        assert_eq!(back, b"/root/\x1b[2J\xff\xc2\x9b\\x");
    }

    #[test]
    fn limit_truncates_lists_not_counts() {
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(upper.path().join(format!("f{i}")), "").unwrap();
        }
        let s = scan("/root", upper.path(), lower.path(), 2).unwrap();
        assert_eq!(s.added.len(), 2);
        assert_eq!(s.added_count, 5);
        assert!(s.truncated);
    }
}
