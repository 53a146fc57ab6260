//! Reads of the host workspace confined beneath it (SR-4, threat model row
//! "paths named inside Git files").
//!
//! Enforces: every path the Git Sentry takes from a sandbox-writable file
//! (the index, a worktree's `gitdir`, the directories under
//! `.git/modules` and `.git/worktrees`) is a plain relative path (no `..`,
//! no `.`, not absolute) resolved by the kernel from a descriptor of the
//! workspace with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`, before it is stat'ed, read, listed, created or
//! named as a mount source. A symlink anywhere on the way, the last
//! component included, makes the path refused, never followed. So the
//! absolute path [`Root::abs`] returns for an accepted path is the file
//! itself, beneath the workspace.
//!
//! Left to others: the workspace path itself is trusted (canonicalised by
//! the CLI from the developer's own arguments), and nothing inside the
//! sandbox runs while a Domain is planned (the previous generation is gone),
//! so the tree cannot change between this check and the mount.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// What a path beneath the root is (never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

/// Why a path was not used.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error("{path}: not a plain relative path beneath the workspace")]
    NotPlain { path: PathBuf },
    #[error("{path}: a symbolic link on the way (refused, not followed)")]
    Symlink { path: PathBuf },
    #[error("{path}: leaves the workspace (refused)")]
    Escapes { path: PathBuf },
    #[error("{path}: larger than {limit} bytes (refused)")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

impl BeneathError {
    fn from_errno(path: &Path, e: rustix::io::Errno) -> Self {
        let path = path.to_path_buf();
        match e {
            rustix::io::Errno::LOOP => BeneathError::Symlink { path },
            rustix::io::Errno::XDEV => BeneathError::Escapes { path },
            e => BeneathError::Io {
                path,
                source: e.into(),
            },
        }
    }
}

/// A descriptor of the workspace and its path.
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// Whether `rel` is non-empty and made of plain names only: no leading,
/// doubled or trailing `/`, no `.` or `..` (checked on the bytes, since
/// `Path::components` hides `.` and doubled slashes).
pub fn is_plain(rel: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = rel.as_os_str().as_bytes();
    !b.is_empty()
        && b.split(|c| *c == b'/')
            .all(|n| !n.is_empty() && n != b"." && n != b"..")
}

fn dot(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

impl Root {
    /// Opens the workspace (refusing a symlink there too).
    pub fn open(path: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The absolute path of an accepted `rel` (a mount source).
    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// `rel` (empty: the root itself) opened with `flags`, beneath the root.
    fn open_rel(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, BeneathError> {
        if !rel.as_os_str().is_empty() && !is_plain(rel) {
            return Err(BeneathError::NotPlain {
                path: rel.to_path_buf(),
            });
        }
        rustix::fs::openat2(
            &self.fd,
            dot(rel),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| BeneathError::from_errno(rel, e))
    }

    /// What `rel` is, its last component not followed; `None` when it (or
    /// a directory on the way) does not exist. A symlink on the way is an
    /// error; a symlink as the last component is [`Kind::Symlink`].
    pub fn kind(&self, rel: &Path) -> Result<Option<Kind>, BeneathError> {
        if !is_plain(rel) {
            return Err(BeneathError::NotPlain {
                path: rel.to_path_buf(),
            });
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = rel.file_name().unwrap_or_default();
        let dir = match self.open_rel(parent, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(d) => d,
            Err(BeneathError::Io { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Kind::File,
                FileType::Directory => Kind::Dir,
                FileType::Symlink => Kind::Symlink,
                _ => Kind::Other,
            })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(BeneathError::from_errno(rel, e)),
        }
    }

    /// Whether `rel` is a regular file reached without any symlink.
    pub fn is_file(&self, rel: &Path) -> Result<bool, BeneathError> {
        Ok(self.kind(rel)? == Some(Kind::File))
    }

    /// The content of the regular file `rel`, at most `limit` bytes.
    pub fn read(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, BeneathError> {
        let fd = self.open_rel(rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| BeneathError::from_errno(rel, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(BeneathError::Io {
                path: rel.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            });
        }
        let mut buf = Vec::new();
        std::fs::File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(|source| BeneathError::Io {
                path: rel.to_path_buf(),
                source,
            })?;
        if buf.len() as u64 > limit {
            return Err(BeneathError::TooLarge {
                path: rel.to_path_buf(),
                limit,
            });
        }
        Ok(buf)
    }

    /// The names in directory `rel` (without `.` and `..`), sorted.
    pub fn list(&self, rel: &Path) -> Result<Vec<OsString>, BeneathError> {
        let fd = self.open_rel(rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut dir =
            rustix::fs::Dir::read_from(fd.as_fd()).map_err(|e| BeneathError::from_errno(rel, e))?;
        let mut names = Vec::new();
        while let Some(e) = dir.read() {
            let e = e.map_err(|e| BeneathError::from_errno(rel, e))?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(OsString::from_vec(n.to_vec()));
            }
        }
        names.sort();
        Ok(names)
    }

    /// Creates `rel` and its missing parents (`mode`), each a real
    /// directory beneath the root.
    pub fn mkdir_all(&self, rel: &Path, mode: u32) -> Result<(), BeneathError> {
        if !is_plain(rel) {
            return Err(BeneathError::NotPlain {
                path: rel.to_path_buf(),
            });
        }
        let mut cur = PathBuf::new();
        for name in rel.iter() {
            self.mkdir(&cur, name, mode)?;
            cur.push(name);
        }
        // Proves the whole path is directories (no planted link).
        self.open_rel(&cur, OFlags::PATH | OFlags::DIRECTORY)?;
        Ok(())
    }

    /// Creates directory `name` in directory `parent` unless an entry of
    /// that name exists.
    pub fn mkdir(
        &self,
        parent: &Path,
        name: impl AsRef<std::ffi::OsStr>,
        mode: u32,
    ) -> Result<(), BeneathError> {
        let name = name.as_ref();
        let dir = self.open_rel(parent, OFlags::RDONLY | OFlags::DIRECTORY)?;
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
            Err(e) => Err(BeneathError::from_errno(&parent.join(name), e)),
        }
    }

    /// `p` (a path a Git file names) as a plain path relative to the root:
    /// absolute paths must lie lexically beneath the root; relative ones
    /// are taken from `base` (a plain path already checked to be real
    /// directories), where leading `..` components climb out of `base` and
    /// no other `..` or `.` is accepted.
    pub fn relative_of(&self, p: &Path, base: &Path) -> Option<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = p.as_os_str().as_bytes();
        let rel = if p.is_absolute() {
            let root = self.path.as_os_str().as_bytes();
            let rest = bytes.strip_prefix(root)?.strip_prefix(b"/")?;
            PathBuf::from(std::ffi::OsStr::from_bytes(rest))
        } else {
            let mut base = base.to_path_buf();
            let mut rest = bytes;
            while let Some(r) = rest.strip_prefix(b"../") {
                rest = r;
                if !base.pop() {
                    return None;
                }
            }
            base.join(std::ffi::OsStr::from_bytes(rest))
        };
        is_plain(&rel).then_some(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_anywhere_are_refused_and_nothing_escapes() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(ws.join("real")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::write(ws.join("real/f"), "f").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
        std::os::unix::fs::symlink("real/f", ws.join("lf")).unwrap();
        let root = Root::open(&ws).unwrap();
        assert_eq!(root.kind(Path::new("real/f")).unwrap(), Some(Kind::File));
        assert_eq!(root.kind(Path::new("real")).unwrap(), Some(Kind::Dir));
        assert_eq!(root.kind(Path::new("lf")).unwrap(), Some(Kind::Symlink));
        assert_eq!(root.kind(Path::new("nope/x")).unwrap(), None);
        assert!(matches!(
            root.kind(Path::new("out/secret")),
            Err(BeneathError::Symlink { .. })
        ));
        assert!(matches!(
            root.kind(Path::new("../outside/secret")),
            Err(BeneathError::NotPlain { .. })
        ));
        assert!(root.read(Path::new("out/secret"), 10).is_err());
        assert!(root.read(Path::new("lf"), 10).is_err());
        assert!(root.list(Path::new("out")).is_err());
        assert!(root.mkdir(Path::new("out"), "hooks", 0o755).is_err());
        assert!(!outside.join("hooks").exists());
        assert_eq!(root.read(Path::new("real/f"), 10).unwrap(), b"f");
        assert!(matches!(
            root.read(Path::new("real/f"), 0),
            Err(BeneathError::TooLarge { .. })
        ));
        assert_eq!(
            root.list(Path::new("real")).unwrap(),
            vec![OsString::from("f")]
        );
    }

    #[test]
    fn relative_of_accepts_only_plain_paths_beneath() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let root = Root::open(&ws).unwrap();
        let b = Path::new(".git/worktrees/x");
        assert_eq!(
            root.relative_of(&ws.join("wt/.git"), b),
            Some(PathBuf::from("wt/.git"))
        );
        assert_eq!(
            root.relative_of(Path::new("../../../wt/.git"), b),
            Some(PathBuf::from("wt/.git"))
        );
        for bad in [
            ws.join("../etc/passwd"),
            ws.join("a/../../etc"),
            PathBuf::from("/etc/passwd"),
            PathBuf::from("../../../../etc/passwd"),
            PathBuf::from("../../../a/../b"),
            PathBuf::from("./a"),
            ws.clone(),
        ] {
            assert_eq!(root.relative_of(&bad, b), None, "{}", bad.display());
        }
    }
}
