//! The router's raw system calls, in one place.
//!
//! Enforces: every path the router touches is resolved with `openat2`
//! beneath one of its two root directory descriptors, with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, and the
//! final component is never followed when it is a symlink (`O_NOFOLLOW` or
//! `AT_SYMLINK_NOFOLLOW`). A symlink planted by the sandbox in either tree
//! therefore cannot make the router act outside it: symlinks are only ever
//! read (`readlink`) and handed back, and the kernel resolves them in the
//! sandbox's own view.
//!
//! Leaves to others: which tree a path belongs in (the router), and
//! whole-process limits (landlock and seccomp in `confine`).

use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::CString;

/// The longest path handed to the kernel in one call (below `PATH_MAX`).
const MAX_PIECE: usize = 2048;

/// A file's identity and version: device, inode, size, mtime and ctime
/// (seconds, nanoseconds). Another stamp for the same path says the file
/// was replaced or changed. Kept in the rules baseline (postcard: the
/// fields in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

/// The stamp of the file whose status is `st`.
pub fn stamp(st: &rustix::fs::Stat) -> Stamp {
    Stamp {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
    }
}

/// `openat2` beneath `dir`, never following a symlink or a magic link in
/// any component. An empty `rel` opens `dir` itself (as `.`).
pub fn open_beneath(dir: BorrowedFd<'_>, rel: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    open_beneath_mode(dir, rel, flags, Mode::empty())
}

/// [`open_beneath`] with a creation mode.
pub fn open_beneath_mode(
    dir: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    // A legal path may be longer than the kernel takes in one call
    // (PATH_MAX) once it is relative to the workspace root rather than to
    // the caller's directory: walk it in pieces, each beneath the last.
    if rel.len() >= MAX_PIECE {
        let cut = rel[..MAX_PIECE]
            .iter()
            .rposition(|&b| b == b'/')
            .filter(|&i| i > 0)
            .ok_or(Errno::NAMETOOLONG)?;
        let head = open_beneath_mode(
            dir,
            &rel[..cut],
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        return open_beneath_mode(head.as_fd(), &rel[cut + 1..], flags, mode);
    }
    let path = cpath(rel)?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, path.as_c_str(), flags | OFlags::CLOEXEC, mode, resolve) {
            // The kernel could not rule out a race with a rename: retry.
            Err(Errno::AGAIN) if tries < 8 => tries += 1,
            r => return r,
        }
    }
}

/// An `O_PATH` descriptor of the directory `rel` beneath `dir`.
pub fn open_dir(dir: BorrowedFd<'_>, rel: &[u8]) -> Result<OwnedFd, Errno> {
    open_beneath(
        dir,
        rel,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    )
}

/// A path for the kernel: no NUL inside; empty means `.`.
pub fn cpath(rel: &[u8]) -> Result<CString, Errno> {
    if rel.is_empty() {
        return Ok(CString::from(c"."));
    }
    CString::new(rel).map_err(|_| Errno::INVAL)
}

/// `fchmodat2(dir, name, mode, AT_SYMLINK_NOFOLLOW)`: changes the mode of
/// `name` without following it when it is a symlink (the kernel answers
/// `EOPNOTSUPP` for symlinks). Kernels before 6.6 lack `fchmodat2`; there
/// the file is opened without following and changed with `fchmod`.
pub fn chmod_nofollow(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> Result<(), Errno> {
    let c = cpath(name)?;
    // SAFETY: fchmodat2 reads only the NUL-terminated `c`, which outlives
    // the call, and takes the directory descriptor and integers by value.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fchmodat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            mode as libc::c_uint,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = Errno::from_raw_os_error(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    if e != Errno::NOSYS {
        return Err(e);
    }
    let fd = open_beneath(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
    )?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
}

/// Splits `a/b/c` into (`a/b`, `c`) and `c` into (``, `c`).
pub fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

/// `parent/name`, or `name` under the root.
pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    if !parent.is_empty() {
        p.extend_from_slice(parent);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Mounts a FUSE file system at `mountpoint` and returns its `/dev/fuse`
/// descriptor: `nodev`, `nosuid`, `default_permissions` (the kernel checks
/// modes against the caller), access for the mounting uid only. Needs
/// `CAP_SYS_ADMIN` over the mount namespace (root, or root of the user
/// namespace that owns it); no setuid helper is ever run.
///
/// With `allow_other`, processes of other uids may use the mount too (for
/// a user-namespace mount: processes in that namespace and those nested in
/// it), still subject to the kernel's permission checks.
pub fn fuse_mount(
    mountpoint: &std::path::Path,
    fsname: &str,
    allow_other: bool,
) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let fuse = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
    let root_mode = std::fs::metadata(mountpoint)?.permissions().mode() & libc::S_IFMT;
    let data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions{}",
        fuse.as_raw_fd(),
        root_mode,
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
        if allow_other { ",allow_other" } else { "" },
    );
    let data = CString::new(data).map_err(|_| std::io::Error::from(Errno::INVAL))?;
    rustix::mount::mount(
        fsname,
        mountpoint,
        "fuse.lazaret",
        rustix::mount::MountFlags::NODEV | rustix::mount::MountFlags::NOSUID,
        data.as_c_str(),
    )?;
    Ok(fuse)
}
