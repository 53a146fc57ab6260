//! The two Git files the router checks as they are put in place: a Git
//! directory's index (mirrored: the sandbox keeps its exact copy, the
//! host gets [`crate::index::sanitize`]'s) and `packed-refs` (refused when
//! it names a replace ref the host's does not).
//!
//! Both change only by Git's lock-and-rename (see `Router::rename_only`),
//! so a rename onto them is the one moment their content is decided.

use super::{fe, lock, Res, Router, Store};
use crate::sys::{open_beneath, open_dir, split, stamp, Stamp};
use fuser::{Errno, RenameFlags};
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;

/// Reads a whole file of the store, refusing one over `max` bytes.
fn read_bounded(root: BorrowedFd<'_>, path: &[u8], max: u64) -> Res<Option<Vec<u8>>> {
    let fd = match open_beneath(
        root,
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK,
    ) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(rustix::io::Errno::PERM);
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))?;
    if buf.len() as u64 > max {
        return Err(rustix::io::Errno::FBIG);
    }
    Ok(Some(buf))
}

impl Router {
    /// `rename(from, index)` by the sandbox's Git: the sandbox's new index
    /// (its lock file, in the state store) is sanitized and written to the
    /// host by the router (under the host's own `index.lock`, as Git
    /// locks), and then becomes the sandbox's private copy.
    pub(super) fn rename_into_index(
        &self,
        ps: Store,
        from: &[u8],
        to: &[u8],
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if !flags.is_empty() {
            return Err(Errno::EPERM);
        }
        let (s, st) = self.resolve(ps, from).map_err(fe)?.ok_or(Errno::ENOENT)?;
        // Git's lock file is private; nothing else becomes the index
        // (`read_bounded` takes regular files only).
        if s != Store::State || super::is_dir(&st) {
            return Err(Errno::EPERM);
        }
        let max = crate::index::MAX_BYTES;
        let sandbox = read_bounded(self.root(Store::State), from, max)
            .map_err(fe)?
            .ok_or(Errno::ENOENT)?;
        // Held from the host's read to the record: a lookup meanwhile
        // must not take the host's new index for a host-side change.
        let mut mirror = lock(&self.mirror);
        let host = read_bounded(self.root(Store::Host), to, max).ok().flatten();
        let (given, changes) = match crate::index::sanitize(&sandbox, host.as_deref()) {
            Ok(g) => g,
            Err(e) => {
                drop(mirror);
                self.log_refusal(to, &e.to_string());
                return Err(Errno::EPERM);
            }
        };
        if changes.flags_dropped > 0 {
            self.log_refusal(
                to,
                "assume-unchanged or skip-worktree flags set inside (the host's index gets the entries without them)",
            );
        }
        let (dir, name) = split(to);
        let hdir = open_dir(self.root(Store::Host), dir).map_err(fe)?;
        let old_host = self.stat_in(Store::Host, to).map_err(fe)?;
        self.journal
            .note(lazaret_protocol::changes::Op::Write, to, None)?;
        let stamp = write_locked(&hdir, name, &given)?;
        mirror.insert(to.to_vec(), stamp);
        // The sandbox's exact index becomes its private copy.
        let sdir = open_dir(self.root(Store::State), dir).map_err(fe)?;
        let (fdir, fname) = split(from);
        let sfrom = open_dir(self.root(Store::State), fdir).map_err(fe)?;
        let old = self.stat_in(Store::State, to).map_err(fe)?;
        if let Err(e) = rustix::fs::renameat_with(
            &sfrom,
            OsStr::from_bytes(fname),
            &sdir,
            OsStr::from_bytes(name),
            rustix::fs::RenameFlags::empty(),
        ) {
            // The host has the new index; the sandbox reads it from there.
            mirror.remove(to);
            return Err(fe(e));
        }
        drop(mirror);
        let mut t = lock(&self.table);
        if let Some(h) = old_host {
            t.removed(Store::Host, to, &h);
        }
        if let Some(old) = old {
            self.quota.removed(&old);
            t.removed(Store::State, to, &old);
        }
        t.moved(Store::State, from, to);
        Ok(())
    }

    /// Refuses (`EPERM`) to put `from` in place as the `packed-refs` file
    /// `to` when it names a replace ref (a line `OID refs/replace/...`)
    /// that the host's current `packed-refs` does not have.
    pub(super) fn check_packed_refs(&self, s: Store, from: &[u8], to: &[u8]) -> Result<(), Errno> {
        if s != Store::Host {
            return Err(Errno::EXDEV);
        }
        const MAX: u64 = 1 << 30;
        let new = read_bounded(self.root(Store::Host), from, MAX)
            .map_err(fe)?
            .ok_or(Errno::ENOENT)?;
        let wanted = crate::sentry::replace_refs(&new);
        if wanted.is_empty() {
            return Ok(());
        }
        let old = read_bounded(self.root(Store::Host), to, MAX)
            .ok()
            .flatten()
            .unwrap_or_default();
        let had = crate::sentry::replace_refs(&old);
        if wanted.is_subset(&had) {
            return Ok(());
        }
        self.log_refusal(
            to,
            "it names a replace ref (refs/replace/), which would change what host Git shows of a commit",
        );
        Err(Errno::EPERM)
    }
}

/// Writes `bytes` as `dir/name` the way Git does: into `name.lock`
/// (created exclusively, so a host Git holding the lock makes this fail
/// with `EBUSY`), then renamed onto `name`. Returns the new file's stamp.
fn write_locked(dir: &rustix::fd::OwnedFd, name: &[u8], bytes: &[u8]) -> Result<Stamp, Errno> {
    let mut lockname = name.to_vec();
    lockname.extend_from_slice(b".lock");
    let lockname = OsStr::from_bytes(&lockname);
    let mode = rustix::fs::statat(dir, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| st.st_mode & 0o666)
        .unwrap_or(0o644);
    let fd = match rustix::fs::openat(
        dir,
        lockname,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(mode),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => return Err(Errno::EBUSY),
        Err(e) => return Err(fe(e)),
    };
    let mut f = std::fs::File::from(fd);
    let written = f.write_all(bytes).and_then(|()| f.flush());
    let done = written
        .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))
        .and_then(|()| {
            rustix::fs::renameat_with(
                dir,
                lockname,
                dir,
                OsStr::from_bytes(name),
                rustix::fs::RenameFlags::empty(),
            )
        });
    if let Err(e) = done {
        let _ = rustix::fs::unlinkat(dir, lockname, AtFlags::empty());
        return Err(fe(e));
    }
    let st = rustix::fs::fstat(f.as_fd()).map_err(fe)?;
    Ok(stamp(&st))
}
