//! Host paths Lazaret hands to the sandbox or keeps its state in, checked
//! the one way that cannot be raced.
//!
//! - [`open_volume`]: a volume's host path is resolved once, from `/`, with
//!   `openat2(RESOLVE_NO_SYMLINKS)`: a symlink in any component (one the
//!   sandbox made through another writable volume included) is refused,
//!   and what is mounted is the object that descriptor holds, never the
//!   path again.
//! - [`check_private_dir`]: the Storage Root and Domain Roots must be
//!   directories owned by the user and writable by nobody else.
//!
//! Left to others: which volumes a profile may declare (the config's
//! validation), and mounting the descriptor (the supervisor's holder).

use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HostPathError {
    #[error("volume host path {path}: {link} is a symbolic link; Lazaret resolves volume paths without following links: point the volume at the real path ({target})")]
    Symlink {
        path: String,
        link: String,
        target: String,
    },
    #[error("volume host path {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{what} {path} is owned by uid {owner}, not by you (uid {uid}): use another path, or `chown {uid} {path}` as its owner")]
    NotOwned {
        what: &'static str,
        path: String,
        owner: u32,
        uid: u32,
    },
    #[error("{what} {path} is group- or world-writable (mode {mode:04o}): `chmod go-w {path}` (Lazaret makes it 0700)")]
    Writable {
        what: &'static str,
        path: String,
        mode: u32,
    },
    #[error("{what} {path} is not a directory")]
    NotDir { what: &'static str, path: String },
    #[error("{what} {path}: {source}")]
    Stat {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
}

fn shown(p: &Path) -> String {
    lazaret_protocol::display::escape_os(p)
}

/// The first component of `path` that is a symbolic link, and its target.
pub fn first_symlink(path: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut at = PathBuf::new();
    for c in path.components() {
        at.push(c);
        if let Ok(md) = std::fs::symlink_metadata(&at) {
            if md.file_type().is_symlink() {
                let target = std::fs::read_link(&at).unwrap_or_default();
                return Some((at, target));
            }
        }
    }
    None
}

/// Opens the absolute `path` with `flags` (and `O_CLOEXEC`), resolved once
/// from `/` with no symbolic link in any component: `ELOOP` when there is
/// one ([`first_symlink`] names it).
pub fn open_no_symlinks(path: &Path, flags: OFlags) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Opens a volume's absolute host path as an `O_PATH` descriptor, resolved
/// once with no symbolic link in any component.
pub fn open_volume(path: &Path) -> Result<OwnedFd, HostPathError> {
    match open_no_symlinks(path, OFlags::PATH) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::LOOP) => {
            let (link, target) = first_symlink(path).unwrap_or_else(|| (path.into(), "?".into()));
            Err(HostPathError::Symlink {
                path: shown(path),
                link: shown(&link),
                target: shown(&target),
            })
        }
        Err(e) => Err(HostPathError::Open {
            path: shown(path),
            source: e.into(),
        }),
    }
}

/// Refuses an existing directory Lazaret keeps private state in (`what`:
/// "Storage Root", "Domain Root") unless it is a directory owned by `uid`
/// and not group- or world-writable. The path itself may be a symlink the
/// user made (a Storage Root on another disk); what it names is checked.
pub fn check_private_dir(what: &'static str, path: &Path, uid: u32) -> Result<(), HostPathError> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|source| HostPathError::Stat {
        what,
        path: shown(path),
        source,
    })?;
    if !md.is_dir() {
        return Err(HostPathError::NotDir {
            what,
            path: shown(path),
        });
    }
    if md.uid() != uid {
        return Err(HostPathError::NotOwned {
            what,
            path: shown(path),
            owner: md.uid(),
            uid,
        });
    }
    if md.mode() & 0o022 != 0 {
        return Err(HostPathError::Writable {
            what,
            path: shown(path),
            mode: md.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn volumes_with_a_symlink_in_any_component_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real/data");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("last")).unwrap();
        assert!(open_volume(&real).is_ok());
        for p in [d.path().join("link/data"), d.path().join("last")] {
            let e = open_volume(&p).unwrap_err().to_string();
            assert!(e.contains("is a symbolic link"), "{e}");
            assert!(e.contains(&p.display().to_string()), "{e}");
        }
        let e = open_volume(&d.path().join("link/data"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{}/link is a symbolic link", d.path().display())),
            "{e}"
        );
        assert!(matches!(
            open_volume(&d.path().join("missing")),
            Err(HostPathError::Open { .. })
        ));
    }

    #[test]
    fn private_dirs_must_be_ours_and_not_writable_by_others() {
        let d = tempfile::tempdir().unwrap();
        let me = rustix::process::getuid().as_raw();
        let p = d.path().join("root");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private_dir("Storage Root", &p, me).unwrap();
        for mode in [0o770, 0o702, 0o777] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = check_private_dir("Storage Root", &p, me)
                .unwrap_err()
                .to_string();
            assert!(e.contains("chmod go-w"), "{e}");
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_private_dir("Storage Root", &p, me).unwrap();
        let e = check_private_dir("Domain Root", &p, me + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not by you"), "{e}");
    }
}
