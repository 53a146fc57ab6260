//! File operations confined beneath a Domain Root (SR-14).
//!
//! Every path is resolved with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` from a descriptor of the Domain Root, so a symlink
//! planted anywhere on the way makes the operation fail instead of reaching
//! outside. Renames never replace an existing entry.

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    Other,
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

fn split(rel: &Path) -> (PathBuf, OsString) {
    let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = rel
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    (parent, name)
}

fn dot(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

impl Root {
    /// Opens the Domain Root itself, refusing a symlink there too.
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
            Mode::empty(),
        )?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The absolute path of `rel`, for tools that need one (after the
    /// caller has checked it with [`Root::kind`]).
    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    pub fn open_dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat2(
            &self.fd,
            dot(rel),
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )?)
    }

    /// What `rel` is, without following it; `None` when it does not exist.
    pub fn kind(&self, rel: &Path) -> io::Result<Option<Kind>> {
        let (parent, name) = split(rel);
        let dir = match self.open_dir(&parent) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let t = rustix::fs::FileType::from_raw_mode(st.st_mode);
                Ok(Some(match t {
                    rustix::fs::FileType::Directory => Kind::Dir,
                    rustix::fs::FileType::Symlink => Kind::Symlink,
                    _ => Kind::Other,
                }))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates `rel` and its missing parents (mode 0700), each a real
    /// directory beneath the root.
    pub fn mkdir_all(&self, rel: &Path) -> io::Result<()> {
        let mut cur = PathBuf::new();
        for comp in rel.components() {
            let std::path::Component::Normal(name) = comp else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a plain relative path", rel.display()),
                ));
            };
            let parent = self.open_dir(&cur)?;
            match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            cur.push(name);
            // Proves it is a directory we may resolve (not a planted link).
            self.open_dir(&cur)?;
        }
        Ok(())
    }

    /// Renames `dir/from` to `dir/to`, never replacing `to`.
    pub fn rename(&self, dir: &Path, from: &str, to: &str) -> io::Result<()> {
        let d = self.open_dir(dir)?;
        rustix::fs::renameat_with(&d, from, &d, to, RenameFlags::NOREPLACE)?;
        rustix::fs::fsync(&d)?;
        Ok(())
    }

    /// Names in directory `rel`, without `.` and `..`.
    pub fn list(&self, rel: &Path) -> io::Result<Vec<String>> {
        let d = self.open_dir(rel)?;
        let mut dir = rustix::fs::Dir::read_from(d.as_fd())?;
        let mut names = Vec::new();
        while let Some(e) = dir.read() {
            let e = e?;
            let n = OsString::from_vec(e.file_name().to_bytes().to_vec());
            let n = n.to_string_lossy().into_owned();
            if n != "." && n != ".." {
                names.push(n);
            }
        }
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlinks_on_the_way() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("a/link")).unwrap();
        let r = Root::open(d.path()).unwrap();
        assert!(r.open_dir(Path::new("a/link")).is_err());
        assert!(r.mkdir_all(Path::new("a/link/x")).is_err());
        assert!(!outside.path().join("x").exists());
        assert_eq!(r.kind(Path::new("a/link")).unwrap(), Some(Kind::Symlink));
        assert!(r.open_dir(Path::new("../")).is_err());
    }

    #[test]
    fn mkdir_rename_list() {
        let d = tempfile::tempdir().unwrap();
        let r = Root::open(d.path()).unwrap();
        r.mkdir_all(Path::new("x/y/z")).unwrap();
        r.mkdir_all(Path::new("x/y/w")).unwrap();
        assert_eq!(r.list(Path::new("x/y")).unwrap(), ["w", "z"]);
        // No replacement of an existing entry.
        assert!(r.rename(Path::new("x/y"), "z", "w").is_err());
        r.rename(Path::new("x/y"), "z", "v").unwrap();
        assert_eq!(r.kind(Path::new("x/y/v")).unwrap(), Some(Kind::Dir));
        assert_eq!(r.kind(Path::new("x/y/z")).unwrap(), None);
    }
}
