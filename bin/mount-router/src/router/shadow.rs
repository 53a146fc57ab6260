//! Copy-up of shadowed `info/` files: the first in-place write from
//! inside to a Git directory's `info/exclude` or `info/sparse-checkout`
//! copies the host's content into the sandbox-private copy and writes
//! that, as an append (`echo >> .git/info/exclude`, which people and
//! agents do) expects. The host's file is never opened for writing. The
//! other shadowed files (`config`, `shallow`) are rewritten by Git with
//! lock-and-rename only, and an in-place write to the host's stays
//! refused.

use super::{fe, lock, Router, Store};
use crate::sys::{open_beneath, split};
use fuser::Errno;
use rustix::fd::AsFd;
use rustix::fs::{Mode, OFlags};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;

/// The largest host file copied up.
const MAX_COPY: u64 = 16 << 20;

impl Router {
    /// Whether an in-place write to `path` copies it up (see the module
    /// documentation).
    pub(super) fn copies_up(&self, path: &[u8]) -> bool {
        let info = |n: &str| path.ends_with(format!("/info/{n}").as_bytes());
        self.access(path) == crate::sentry::Access::Shadowed
            && crate::sentry::SHADOWED_INFO.iter().any(|n| info(n))
    }

    /// Makes the sandbox-private copy of the shadowed host file `path`
    /// (unless there is one), holding the host's content and mode.
    pub(super) fn copy_up(&self, path: &[u8]) -> Result<(), Errno> {
        if self.stat_in(Store::State, path).map_err(fe)?.is_some() {
            return Ok(());
        }
        let src = open_beneath(
            self.root(Store::Host),
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        )
        .map_err(fe)?;
        let st = rustix::fs::fstat(&src).map_err(fe)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Errno::EPERM);
        }
        let mut content = Vec::new();
        std::fs::File::from(src)
            .take(MAX_COPY + 1)
            .read_to_end(&mut content)
            .map_err(|_| Errno::EIO)?;
        if content.len() as u64 > MAX_COPY {
            return Err(Errno::EFBIG);
        }
        let (dir, name) = split(path);
        let d = self.dir_fd(Store::State, dir, true).map_err(fe)?;
        self.quota.admit_entry(self.root(Store::State))?;
        let fd = rustix::fs::openat(
            &d,
            OsStr::from_bytes(name),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(st.st_mode & 0o777),
        )
        .map_err(fe)?;
        self.quota.added(&rustix::fs::fstat(&fd).map_err(fe)?);
        let written = self
            .quota
            .admit(self.root(Store::State), fd.as_fd(), content.len() as u64)
            .and_then(|before| {
                let mut f = std::fs::File::from(fd);
                let r = f.write_all(&content).map_err(|_| Errno::EIO);
                self.quota.settle(f.as_fd(), before);
                r.map(|()| f)
            });
        let f = match written {
            Ok(f) => f,
            Err(e) => {
                let _ =
                    rustix::fs::unlinkat(&d, OsStr::from_bytes(name), rustix::fs::AtFlags::empty());
                return Err(e);
            }
        };
        let new = rustix::fs::fstat(f.as_fd()).map_err(fe)?;
        lock(&self.table).intern(Store::State, path, &new);
        Ok(())
    }
}
