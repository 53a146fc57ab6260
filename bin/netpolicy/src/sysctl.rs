//! IPv6 sysctls of one network namespace, through a directory handle on
//! `/proc/sys/net/ipv6/conf` opened while the thread was in that namespace
//! (procfs shows the sysctls of the opener's namespace).

use rustix::fs::{Mode, OFlags};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub const CONF_DIR: &str = "/proc/sys/net/ipv6/conf";

#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error("cannot open {CONF_DIR}: {0}; /proc must be mounted in the helper's mount namespace (and not hidden by the /proc/sys/net tmpfs: run the helper before that mount)")]
    Open(std::io::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("refusing interface name {0:?}")]
    BadName(String),
}

/// `/proc/sys/net/ipv6/conf` of one namespace.
pub struct Ipv6Conf {
    dir: OwnedFd,
}

fn check_name(n: &str) -> Result<(), SysctlError> {
    if n.is_empty() || n.len() > 15 || n.contains('/') || n == "." || n == ".." {
        return Err(SysctlError::BadName(n.to_string()));
    }
    Ok(())
}

impl Ipv6Conf {
    /// Opens the directory in the calling thread's current namespace.
    pub fn open() -> Result<Ipv6Conf, SysctlError> {
        let dir = rustix::fs::open(
            CONF_DIR,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| SysctlError::Open(e.into()))?;
        Ok(Ipv6Conf { dir })
    }

    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    fn path(iface: &str, key: &str) -> String {
        format!("{iface}/{key}")
    }

    /// `iface/key` opened with `flags` beneath the directory, once the
    /// interface's name is checked; and what an I/O error on it reads as.
    fn open_key(
        &self,
        iface: &str,
        key: &str,
        flags: OFlags,
    ) -> Result<(std::fs::File, impl Fn(std::io::Error) -> SysctlError), SysctlError> {
        check_name(iface)?;
        let p = Self::path(iface, key);
        let fd = rustix::fs::openat(&self.dir, &p, flags | OFlags::CLOEXEC, Mode::empty());
        let io = move |source: std::io::Error| SysctlError::Io {
            path: format!("{CONF_DIR}/{p}"),
            source,
        };
        let fd = fd.map_err(|e| io(e.into()))?;
        Ok((std::fs::File::from(fd), io))
    }

    pub fn read(&self, iface: &str, key: &str) -> Result<String, SysctlError> {
        let (f, io) = self.open_key(iface, key, OFlags::RDONLY)?;
        let mut s = String::new();
        f.take(64).read_to_string(&mut s).map_err(io)?;
        Ok(s.trim().to_string())
    }

    pub fn write(&self, iface: &str, key: &str, value: &str) -> Result<(), SysctlError> {
        let (mut f, io) = self.open_key(iface, key, OFlags::WRONLY)?;
        f.write_all(format!("{value}\n").as_bytes()).map_err(io)
    }

    /// Sets `disable_ipv6=1` for `all` (which the kernel applies to every
    /// existing interface) and `default` (for interfaces created later,
    /// such as slirp's tap0).
    pub fn disable_ipv6(&self) -> Result<(), SysctlError> {
        self.write("all", "disable_ipv6", "1")?;
        self.write("default", "disable_ipv6", "1")
    }
}
