//! `lazaret image commit`: a new prepared image made of a Domain's image
//! and the current generation of its State Anchors, named `local:NAME`
//! and usable by any Agent Profile, so that what an agent needs is
//! installed once.
//!
//! The result is what the Domain's sandbox saw at its persistent paths:
//! the image's tree, then each State Anchor's upper layer applied the way
//! overlayfs shows it (a whiteout removes the entry below, an opaque
//! directory hides everything below it), parents before children, and a
//! nested anchor over the image's own tree at its path (as the sandbox
//! mounts it). What was written elsewhere in the sandbox was never
//! persistent and is not in it.
//!
//! The upper layers are the sandbox's writing, so they are read as
//! hostile, the same way the layer unpacker reads an image (`unpack.rs`):
//!
//! | content of an upper layer | outcome |
//! | --- | --- |
//! | symlinks | kept as they are (copied, never followed) |
//! | a path through a symlink | never: every directory is opened beneath its root with `RESOLVE_NO_SYMLINKS` |
//! | setuid and setgid bits on non-directories | cleared (neutralised), listed |
//! | character and block devices (but whiteouts), sockets | skipped, listed |
//! | extended attributes | not copied |
//! | hard links | copied as separate files |
//! | sparse files (holes, all-zero blocks) | copied with their holes: only the data is written |
//! | more than [`Limits`] of bytes written or entries | refused; nothing is published |
//!
//! The image's own files are hard-linked, not copied (both trees are
//! read-only once published; every change replaces an entry, never writes
//! through a link). Everything runs as ID 0 of a user namespace mapped to
//! the developer's subordinate IDs, so owners are kept as the sandbox saw
//! them, into a staging directory published only when complete.

use crate::progress::Progress;
use crate::store::Store;
use crate::unpack::{dot, Limits, NO_SYMLINKS};
use crate::{ImageError, PreparedImage};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timestamps};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The preparer of committed images, recorded in the Storage Catalog.
pub const COMMIT_PREPARER: &str = "lazaret-image/commit/1";
/// The reference form of committed images.
pub const LOCAL_PREFIX: &str = "local:";
/// The source stamp of a committed image: a name always means the last
/// commit made under it.
const STAMP: &str = "commit";
/// The most entries of the listed kinds named in the report.
const MAX_LISTED: usize = 20;

/// One State Anchor to apply: its sandbox path and its upper layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorLayer {
    pub path: String,
    pub upper: PathBuf,
}

/// What a commit did, for the developer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// Entries taken from the upper layers.
    pub entries: u64,
    /// Bytes of file content written from the upper layers (holes and
    /// all-zero blocks are left unwritten).
    pub bytes: u64,
    /// Files whose setuid/setgid bits were cleared (the first few).
    pub stripped: Vec<String>,
    /// Devices and sockets skipped (the first few).
    pub skipped: Vec<String>,
}

/// Why the new tree could not be built. The build runs in a child in the
/// user namespace, which hands the message back to be reported as
/// [`ImageError::BadImage`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    /// A call on `path` (as the messages show it) failed.
    #[error("cannot {what} {path}: {source}")]
    Fs {
        what: &'static str,
        path: String,
        source: Errno,
    },
    #[error("{path}: {source}")]
    LookAt { path: String, source: Errno },
    #[error("cannot remove {name:?}: {source}")]
    Remove {
        name: OsString,
        source: std::io::Error,
    },
    #[error("cannot set the {what} of {name:?}: {source}")]
    Meta {
        what: &'static str,
        name: OsString,
        source: Errno,
    },
    #[error("cannot copy {path}: {source}")]
    Copy {
        path: String,
        source: crate::sparse::CopyError<OverBudget>,
    },
    #[error("{path} vanished")]
    Vanished { path: String },
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
    /// `what` (the staging directory, the base) is `/` or ends in `..`.
    #[error("{what} has no parent")]
    NoParent { what: &'static str },
    #[error("{what} has no name")]
    NoName { what: &'static str },
    #[error("the base and the new tree must both be named rootfs")]
    NotRootfs,
    #[error("{path:?} is not a normal absolute path")]
    NotNormal { path: String },
    /// Linking the image's own tree under the State Anchor `anchor` failed.
    #[error("{anchor}: {source}")]
    Nested {
        anchor: String,
        source: Box<BuildError>,
    },
}

impl BuildError {
    fn fs(what: &'static str, path: impl std::fmt::Display) -> impl FnOnce(Errno) -> Self {
        let path = path.to_string();
        move |source| BuildError::Fs { what, path, source }
    }
}

/// More written than [`Limits`] allow.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OverBudget {
    #[error("more than {max} entries: refused, nothing was published")]
    Entries { max: u64 },
    #[error("more than {max} bytes: refused, nothing was published")]
    Bytes { max: u64 },
}

/// Checks a committed image's name: 1 to 64 of `a-z 0-9 . _ -`, starting
/// with a letter or digit.
pub fn check_name(name: &str) -> Result<(), ImageError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(ImageError::BadReference {
            reference: format!("{LOCAL_PREFIX}{name}"),
            detail: "a committed image's name is 1 to 64 of a-z, 0-9, `.`, `_` and `-`, starting with a letter or digit".into(),
        })
    }
}

impl Store {
    /// The image last committed as `local:NAME`.
    pub fn committed(&self, name: &str) -> Result<PreparedImage, ImageError> {
        check_name(name)?;
        let reference = format!("{LOCAL_PREFIX}{name}");
        let found = if self.storage_root().join(crate::CATALOG_FILE).exists() {
            self.catalog().lookup_source(&reference, STAMP)?
        } else {
            None
        };
        found
            .and_then(|rec| self.ready(&rec.id, &reference))
            .ok_or(ImageError::NotCommitted { reference })
    }

    /// Makes `local:NAME` from the published image `base` and `layers`
    /// (see the module documentation); the name then means the new image,
    /// and an image committed before under it stays until `image rm` or
    /// `image gc`.
    pub fn commit(
        &self,
        base: &str,
        layers: &[AnchorLayer],
        name: &str,
        limits: Limits,
        progress: &mut dyn Progress,
    ) -> Result<(PreparedImage, CommitReport), ImageError> {
        check_name(name)?;
        let reference = format!("{LOCAL_PREFIX}{name}");
        let base_img = self.ready(base, base).ok_or_else(|| ImageError::BadImage {
            detail: format!(
                "the Domain's image {base} is no longer prepared (removed by `lazaret image rm` or `gc`): start the Domain once to prepare it again, then commit"
            ),
        })?;
        let mut layers = layers.to_vec();
        layers.sort_by(|a, b| a.path.cmp(&b.path));
        for l in &layers {
            if relative(&l.path).is_none() {
                return Err(ImageError::BadImage {
                    detail: format!(
                        "State Anchor path {:?} is not a normal absolute path",
                        l.path
                    ),
                });
            }
        }
        self.ensure_lowers()?;
        let _lock = self.lock(&reference, &mut |l| progress.line(l))?;
        self.remove_leftovers_locked(&mut |l| progress.line(l))?;
        let staging = self.new_staging()?;
        let result = self.commit_in(&staging, &base_img, &layers, &reference, limits, progress);
        if result.is_err() {
            // Best effort: the next preparation removes what is left.
            let _ = self.remove_tree(&staging);
        }
        result
    }

    fn commit_in(
        &self,
        staging: &Path,
        base: &PreparedImage,
        layers: &[AnchorLayer],
        reference: &str,
        limits: Limits,
        progress: &mut dyn Progress,
    ) -> Result<(PreparedImage, CommitReport), ImageError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let anchors: Vec<&str> = layers.iter().map(|l| l.path.as_str()).collect();
        let recipe = format!(
            "preparer={COMMIT_PREPARER}\nreference={reference}\nbase={}\nanchors={}\ncommitted={nanos}\n",
            base.id,
            anchors.join(",")
        );
        let id = hex::encode(Sha256::digest(recipe.as_bytes()));
        progress.phase(
            &format!(
                "committing {} State Anchor(s) over {}",
                layers.len(),
                base.id
            ),
            None,
        );
        let rootfs = staging.join("rootfs");
        let report = run_mapped_commit(self, &base.rootfs, &rootfs, layers, limits)?;
        for s in &report.stripped {
            progress.line(&format!("cleared the setuid/setgid bits of {s}"));
        }
        for s in &report.skipped {
            progress.line(&format!("skipped {s}"));
        }
        self.publish(staging, &id, &recipe)?;
        let record = self.local_record(&id, reference, COMMIT_PREPARER);
        self.catalog().record_artifact(&record, Some(STAMP), || {
            self.ready(&id, reference).is_some()
        })?;
        let img = self
            .ready(&id, reference)
            .ok_or_else(|| ImageError::BadImage {
                detail: format!("{id} vanished right after it was published"),
            })?;
        Ok((img, report))
    }
}

/// `path` without its leading `/`, if it is absolute and normal (no `.`,
/// `..` or empty component); `Some("")` for `/`.
fn relative(path: &str) -> Option<PathBuf> {
    let rest = path.strip_prefix('/')?;
    if rest.is_empty() {
        return Some(PathBuf::new());
    }
    if rest
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return None;
    }
    Some(PathBuf::from(rest))
}

/// Runs [`build`] as ID 0 of a user namespace mapped like the sandbox's;
/// its report (or error) comes back over a pipe, one line per item.
fn run_mapped_commit(
    store: &Store,
    base: &Path,
    rootfs: &Path,
    layers: &[AnchorLayer],
    limits: Limits,
) -> Result<CommitReport, ImageError> {
    let (r, w) = crate::store::pipe("create a pipe for", rootfs)?;
    let w_raw = w.as_raw_fd();
    // The CLI is single-threaded here (no progress thread runs), so the
    // child may allocate (see `clone_mapped`).
    let pid = lazaret_helpers::userns::clone_mapped(
        store.id_map(),
        nix::sched::CloneFlags::empty(),
        || {
            // SAFETY: the write end, inherited by this child; owned here
            // only (the parent closes its copy after the clone).
            let mut out = unsafe { File::from_raw_fd(w_raw) };
            let mut report = CommitReport::default();
            match build(base, rootfs, layers, limits, &mut report) {
                Ok(()) => {
                    let mut text = format!("D {} {}\n", report.entries, report.bytes);
                    for s in &report.stripped {
                        text.push_str(&format!("S {s}\n"));
                    }
                    for s in &report.skipped {
                        text.push_str(&format!("K {s}\n"));
                    }
                    let _ = out.write_all(text.as_bytes());
                    0
                }
                Err(e) => {
                    let e = e.to_string();
                    let _ = out.write_all(format!("E {}\n", e.replace('\n', " ")).as_bytes());
                    1
                }
            }
        },
    )
    .map_err(|source| ImageError::Userns {
        what: "commit".into(),
        source,
    })?;
    drop(w);
    let mut report = CommitReport::default();
    let mut error = None;
    let mut done = false;
    for line in BufReader::new(File::from(r)).lines() {
        let Ok(line) = line else { break };
        let (kind, rest) = line.split_at(line.len().min(2));
        match kind {
            "D " => {
                let mut n = rest.split(' ').map(|x| x.parse::<u64>().unwrap_or(0));
                report.entries = n.next().unwrap_or(0);
                report.bytes = n.next().unwrap_or(0);
                done = true;
            }
            "S " => report.stripped.push(rest.to_string()),
            "K " => report.skipped.push(rest.to_string()),
            "E " => error = Some(rest.to_string()),
            _ => {}
        }
    }
    let status = nix::sys::wait::waitpid(pid, None);
    if let Some(detail) = error {
        return Err(ImageError::BadImage { detail });
    }
    match status {
        Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) if done => Ok(report),
        other => Err(ImageError::BadImage {
            detail: format!("the commit ended without a result ({other:?})"),
        }),
    }
}

/// Directory `rel` beneath `root`, never through a symlink.
fn open_dir(root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, BuildError> {
    rustix::fs::openat2(
        root,
        dot(rel),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        NO_SYMLINKS,
    )
    .map_err(BuildError::fs("open", rel.display()))
}

fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<Stat>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The names in directory `dir`, without `.` and `..`.
pub(crate) fn names(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// Removes `name` in `dir`, whatever it is, never following a symlink.
fn remove(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), BuildError> {
    let err = |e: std::io::Error| BuildError::Remove {
        name: name.to_os_string(),
        source: e,
    };
    match stat_at(dir, name).map_err(|e| err(e.into()))? {
        None => Ok(()),
        Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            // Through the descriptor's magic link: the directory itself;
            // remove_dir_all follows no symlink inside.
            let mut p = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
            p.push(name);
            std::fs::remove_dir_all(&p).map_err(err)
        }
        Some(_) => rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| err(e.into())),
    }
}

/// Owner, mode and times of `name` in `dir` from `st`.
fn set_meta(dir: BorrowedFd<'_>, name: &OsStr, st: &Stat, mode: u32) -> Result<(), BuildError> {
    let err = |what: &'static str, source: Errno| BuildError::Meta {
        what,
        name: name.to_os_string(),
        source,
    };
    rustix::fs::chownat(
        dir,
        name,
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| err("owner", e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
        rustix::fs::chmodat(dir, name, Mode::from_raw_mode(mode), AtFlags::empty())
            .map_err(|e| err("mode", e))?;
    }
    let ts = |sec: i64, nsec: i64| rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    };
    rustix::fs::utimensat(
        dir,
        name,
        &Timestamps {
            last_access: ts(st.st_atime, st.st_atime_nsec as i64),
            last_modification: ts(st.st_mtime, st.st_mtime_nsec as i64),
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| err("times", e))
}

struct Budget {
    limits: Limits,
    entries: u64,
    bytes: u64,
}

impl Budget {
    fn entry(&mut self) -> Result<(), OverBudget> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(OverBudget::Entries {
                max: self.limits.max_entries,
            });
        }
        Ok(())
    }

    fn bytes(&mut self, n: u64) -> Result<(), OverBudget> {
        self.bytes += n;
        if self.bytes > self.limits.max_unpacked {
            return Err(OverBudget::Bytes {
                max: self.limits.max_unpacked,
            });
        }
        Ok(())
    }
}

/// Recreates directory `rel` of `src` at `rel` of `dst` (which must not
/// exist; its parent must): directories anew with their owners, modes and
/// times, everything else hard-linked.
fn link_tree(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    rel: &Path,
    b: &mut Budget,
) -> Result<(), BuildError> {
    {
        let (parent, name) = split(rel);
        let sp = open_dir(src, parent)?;
        let dp = open_dir(dst, parent)?;
        let st = stat_at(sp.as_fd(), name)
            .map_err(BuildError::fs("look at", rel.display()))?
            .ok_or_else(|| BuildError::Vanished {
                path: rel.display().to_string(),
            })?;
        rustix::fs::mkdirat(&dp, name, Mode::from_raw_mode(0o700))
            .map_err(BuildError::fs("create", rel.display()))?;
        set_meta(dp.as_fd(), name, &st, st.st_mode & 0o7777)?;
    }
    let mut stack = vec![rel.to_path_buf()];
    while let Some(d) = stack.pop() {
        let sfd = open_dir(src, &d)?;
        let dfd = open_dir(dst, &d)?;
        for n in names(sfd.as_fd()).map_err(BuildError::fs("list", d.display()))? {
            b.entry()?;
            let st = stat_at(sfd.as_fd(), &n)
                .map_err(BuildError::fs("look at", d.join(&n).display()))?;
            let Some(st) = st else { continue };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                rustix::fs::mkdirat(&dfd, &n, Mode::from_raw_mode(0o700))
                    .map_err(BuildError::fs("create", d.join(&n).display()))?;
                set_meta(dfd.as_fd(), &n, &st, st.st_mode & 0o7777)?;
                stack.push(d.join(&n));
            } else {
                rustix::fs::linkat(&sfd, &n, &dfd, &n, AtFlags::empty())
                    .map_err(BuildError::fs("link", d.join(&n).display()))?;
            }
        }
    }
    Ok(())
}

fn split(rel: &Path) -> (&Path, &OsStr) {
    (
        rel.parent().unwrap_or(Path::new("")),
        rel.file_name().unwrap_or(OsStr::new(".")),
    )
}

fn xattr(fd: BorrowedFd<'_>, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 16];
    rustix::fs::fgetxattr(fd, name, &mut buf)
        .ok()
        .map(|n| buf[..n.min(buf.len())].to_vec())
}

fn listed(list: &mut Vec<String>, what: String) {
    if list.len() < MAX_LISTED {
        list.push(what);
    } else if list.len() == MAX_LISTED {
        list.push("(and more)".into());
    }
}

/// Applies the upper layer `upper` over directory `at` of `dst`, as
/// overlayfs shows it.
fn apply_upper(
    upper: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    at: &Path,
    anchor: &str,
    b: &mut Budget,
    report: &mut CommitReport,
) -> Result<(), BuildError> {
    let mut stack = vec![PathBuf::new()];
    while let Some(d) = stack.pop() {
        let ufd = open_dir(upper, &d)?;
        let dfd = open_dir(dst, &at.join(&d))?;
        let shown = |n: &OsStr| format!("{anchor}/{}", d.join(n).display()).replace("//", "/");
        let dirs = UpperDir {
            upper: ufd.as_fd(),
            dst: dfd.as_fd(),
            shown: &shown,
        };
        for n in names(ufd.as_fd()).map_err(BuildError::fs("list", shown(OsStr::new(""))))? {
            b.entry()?;
            let Some(st) =
                stat_at(ufd.as_fd(), &n).map_err(BuildError::fs("look at", shown(&n)))?
            else {
                continue;
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::CharacterDevice if st.st_rdev == 0 => remove(dfd.as_fd(), &n)?,
                FileType::Directory => {
                    dirs.directory(&n, &st)?;
                    stack.push(d.join(&n));
                }
                FileType::RegularFile => dirs.file(&n, &st, b, report)?,
                FileType::Symlink => {
                    remove(dfd.as_fd(), &n)?;
                    let target = rustix::fs::readlinkat(&ufd, &n, Vec::new())
                        .map_err(BuildError::fs("read the link", shown(&n)))?;
                    rustix::fs::symlinkat(target.as_c_str(), &dfd, &n)
                        .map_err(BuildError::fs("create the link", shown(&n)))?;
                    set_meta(dfd.as_fd(), &n, &st, 0)?;
                }
                FileType::Fifo => {
                    remove(dfd.as_fd(), &n)?;
                    rustix::fs::mknodat(&dfd, &n, FileType::Fifo, Mode::from_raw_mode(0o600), 0)
                        .map_err(BuildError::fs("create", shown(&n)))?;
                    set_meta(dfd.as_fd(), &n, &st, st.st_mode & 0o777)?;
                }
                _ => listed(
                    &mut report.skipped,
                    format!("the device or socket {}", shown(&n)),
                ),
            }
        }
    }
    Ok(())
}

/// One directory of the upper layer and its counterpart in the new tree;
/// `shown` names an entry of it in messages.
struct UpperDir<'a> {
    upper: BorrowedFd<'a>,
    dst: BorrowedFd<'a>,
    shown: &'a dyn Fn(&OsStr) -> String,
}

impl UpperDir<'_> {
    /// An upper directory `n`: replaces what is there unless it is a
    /// directory the upper one is not opaque over.
    fn directory(&self, n: &OsStr, st: &Stat) -> Result<(), BuildError> {
        let shown = self.shown;
        let sub = rustix::fs::openat(
            self.upper,
            n,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(BuildError::fs("open", shown(n)))?;
        let opaque = xattr(sub.as_fd(), "user.overlay.opaque").as_deref() == Some(b"y");
        let here = stat_at(self.dst, n).map_err(|source| BuildError::LookAt {
            path: shown(n),
            source,
        })?;
        let is_dir =
            here.is_some_and(|h| FileType::from_raw_mode(h.st_mode) == FileType::Directory);
        if here.is_some() && (opaque || !is_dir) {
            remove(self.dst, n)?;
        }
        if !is_dir || opaque {
            rustix::fs::mkdirat(self.dst, n, Mode::from_raw_mode(0o700))
                .map_err(BuildError::fs("create", shown(n)))?;
        }
        set_meta(self.dst, n, st, st.st_mode & 0o7777)
    }

    /// An upper regular file `n`: a whiteout removes what is there;
    /// otherwise it is copied, setuid and setgid cleared.
    fn file(
        &self,
        n: &OsStr,
        st: &Stat,
        b: &mut Budget,
        report: &mut CommitReport,
    ) -> Result<(), BuildError> {
        let shown = self.shown;
        let from = File::from(
            rustix::fs::openat(
                self.upper,
                n,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(BuildError::fs("open", shown(n)))?,
        );
        if xattr(from.as_fd(), "user.overlay.whiteout").is_some() {
            return remove(self.dst, n);
        }
        remove(self.dst, n)?;
        let to = File::from(
            rustix::fs::openat(
                self.dst,
                n,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(BuildError::fs("create", shown(n)))?,
        );
        // Holes stay holes; the bound is on what is written.
        crate::sparse::copy(&from, &to, st.st_size as u64, &mut |k| b.bytes(k)).map_err(
            |source| BuildError::Copy {
                path: shown(n),
                source,
            },
        )?;
        let mut mode = st.st_mode & 0o7777;
        if mode & 0o6000 != 0 {
            mode &= !0o6000;
            listed(&mut report.stripped, shown(n));
        }
        set_meta(self.dst, n, st, mode)
    }
}

/// The new tree at `rootfs` (which must not exist): `base` hard-linked,
/// then each of `layers` (sorted, parents first) over the image's own
/// tree at its path.
pub(crate) fn build(
    base: &Path,
    rootfs: &Path,
    layers: &[AnchorLayer],
    limits: Limits,
    report: &mut CommitReport,
) -> Result<(), BuildError> {
    let open = |p: &Path| {
        rustix::fs::open(
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(BuildError::fs("open", p.display()))
    };
    let staging = "the staging directory";
    let (parent, name) = (
        rootfs
            .parent()
            .ok_or(BuildError::NoParent { what: staging })?,
        rootfs
            .file_name()
            .ok_or(BuildError::NoName { what: staging })?,
    );
    // `dst` is the staging directory; the tree is `rootfs` in it, the
    // base's root `.` linked as that name.
    let src_parent = open(
        base.parent()
            .ok_or(BuildError::NoParent { what: "the base" })?,
    )?;
    let dst = open(parent)?;
    let mut b = Budget {
        limits,
        entries: 0,
        bytes: 0,
    };
    let base_name = base
        .file_name()
        .ok_or(BuildError::NoName { what: "the base" })?;
    if base_name != name {
        return Err(BuildError::NotRootfs);
    }
    link_tree(src_parent.as_fd(), dst.as_fd(), Path::new(name), &mut b)?;
    let base_fd = open(base)?;
    let root = Path::new(name);
    let mut applied: Vec<PathBuf> = Vec::new();
    for l in layers {
        let rel = relative(&l.path).ok_or_else(|| BuildError::NotNormal {
            path: l.path.clone(),
        })?;
        let at = root.join(&rel);
        if !rel.as_os_str().is_empty() {
            let (p, n) = split(&at);
            let pfd = ensure_dirs(dst.as_fd(), p)?;
            let here = stat_at(pfd.as_fd(), n).map_err(|source| BuildError::LookAt {
                path: l.path.clone(),
                source,
            })?;
            let is_dir =
                here.is_some_and(|h| FileType::from_raw_mode(h.st_mode) == FileType::Directory);
            if applied.iter().any(|a| rel.starts_with(a)) {
                // As the sandbox mounts a nested anchor: over the image's
                // own tree there, not over the parent anchor's.
                remove(pfd.as_fd(), n)?;
                if open_dir(base_fd.as_fd(), &rel).is_ok() {
                    link_tree(
                        src_parent.as_fd(),
                        dst.as_fd(),
                        &Path::new(base_name).join(&rel),
                        &mut b,
                    )
                    .map_err(|e| BuildError::Nested {
                        anchor: l.path.clone(),
                        source: Box::new(e),
                    })?;
                } else {
                    rustix::fs::mkdirat(&pfd, n, Mode::from_raw_mode(0o755))
                        .map_err(BuildError::fs("create", &l.path))?;
                }
            } else if !is_dir {
                remove(pfd.as_fd(), n)?;
                rustix::fs::mkdirat(&pfd, n, Mode::from_raw_mode(0o755))
                    .map_err(BuildError::fs("create", &l.path))?;
            }
        }
        let upper = open(&l.upper)?;
        apply_upper(upper.as_fd(), dst.as_fd(), &at, &l.path, &mut b, report)?;
        applied.push(rel);
    }
    report.entries = b.entries;
    report.bytes = b.bytes;
    Ok(())
}

/// Directory `rel` beneath `root`, created (0755) where missing; never
/// through a symlink.
fn ensure_dirs(root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd, BuildError> {
    let mut cur = PathBuf::new();
    for c in rel.components() {
        cur.push(c);
        let (p, n) = split(&cur);
        let pfd = open_dir(root, p)?;
        match rustix::fs::mkdirat(&pfd, n, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(BuildError::fs("create", cur.display())(e)),
        }
    }
    open_dir(root, rel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mk(root: &Path, rel: &str, body: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }

    fn read(root: &Path, rel: &str) -> Option<String> {
        std::fs::read_to_string(root.join(rel)).ok()
    }

    #[test]
    fn names_are_checked() {
        for good in ["claude-code", "a", "x.y_z-1"] {
            check_name(good).unwrap();
        }
        for bad in ["", "Claude", "-x", "a/b", "../x", &"a".repeat(65), "a b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uppers_apply_as_overlayfs_shows_them() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("base/rootfs");
        mk(&base, "usr/bin/tool", "old tool");
        mk(&base, "usr/share/doc/a", "a");
        mk(&base, "usr/share/doc/b", "b");
        mk(&base, "usr/local/keep", "image's own");
        mk(&base, "etc/hostname", "img");
        std::os::unix::fs::symlink("usr/bin", base.join("bin")).unwrap();
        let usr = t.path().join("usr-upper");
        mk(&usr, "bin/tool", "new tool");
        mk(&usr, "bin/agent", "#!/bin/sh\necho agent 1.0\n");
        std::fs::set_permissions(
            usr.join("bin/agent"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        mk(
            &usr,
            "local/from-usr-upper",
            "hidden by the /usr/local anchor",
        );
        std::os::unix::fs::symlink("/etc/shadow", usr.join("bin/evil-link")).unwrap();
        let local = t.path().join("local-upper");
        mk(&local, "bin/node", "node");
        let layers = vec![
            AnchorLayer {
                path: "/usr/local".into(),
                upper: local,
            },
            AnchorLayer {
                path: "/usr".into(),
                upper: usr,
            },
        ];
        let mut sorted = layers.clone();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));
        let out = t.path().join("new/rootfs");
        std::fs::create_dir(t.path().join("new")).unwrap();
        let mut report = CommitReport::default();
        // Without a user namespace, owners are the caller's own: the same
        // code as under the mapping, minus the ID translation.
        build(&base, &out, &sorted, Limits::default(), &mut report).unwrap();
        assert_eq!(read(&out, "usr/bin/tool").as_deref(), Some("new tool"));
        assert_eq!(
            read(&out, "usr/bin/agent").as_deref(),
            Some("#!/bin/sh\necho agent 1.0\n")
        );
        assert_eq!(
            std::fs::metadata(out.join("usr/bin/agent")).unwrap().mode() & 0o7777,
            0o755,
            "setuid cleared"
        );
        assert_eq!(report.stripped, vec!["/usr/bin/agent".to_string()]);
        assert_eq!(
            std::fs::read_link(out.join("usr/bin/evil-link")).unwrap(),
            Path::new("/etc/shadow")
        );
        assert_eq!(read(&out, "usr/share/doc/a").as_deref(), Some("a"));
        // The nested anchor lies over the image's tree, as mounted.
        assert_eq!(read(&out, "usr/local/keep").as_deref(), Some("image's own"));
        assert_eq!(read(&out, "usr/local/bin/node").as_deref(), Some("node"));
        assert!(!out.join("usr/local/from-usr-upper").exists());
        assert_eq!(
            std::fs::read_link(out.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        // The base is untouched, and shared where unchanged.
        assert_eq!(read(&base, "usr/bin/tool").as_deref(), Some("old tool"));
        assert_eq!(
            std::fs::metadata(base.join("usr/share/doc/a"))
                .unwrap()
                .ino(),
            std::fs::metadata(out.join("usr/share/doc/a"))
                .unwrap()
                .ino()
        );
    }

    #[test]
    fn whiteouts_and_opaque_directories_remove_what_lies_below() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("base/rootfs");
        mk(&base, "etc/gone", "x");
        mk(&base, "etc/opaque/old", "x");
        mk(&base, "etc/replaced/old", "x");
        let upper = t.path().join("etc-upper");
        std::fs::create_dir_all(upper.join("opaque")).unwrap();
        mk(&upper, "opaque/new", "n");
        mk(&upper, "replaced", "a file now");
        // An xattr whiteout (a character device needs privileges).
        mk(&upper, "gone", "");
        let wh = rustix::fs::setxattr(
            upper.join("gone"),
            "user.overlay.whiteout",
            b"y",
            rustix::fs::XattrFlags::empty(),
        );
        let op = rustix::fs::setxattr(
            upper.join("opaque"),
            "user.overlay.opaque",
            b"y",
            rustix::fs::XattrFlags::empty(),
        );
        // Every file system Lazaret stores on has user xattrs (overlayfs
        // needs them for `userxattr`).
        wh.unwrap();
        op.unwrap();
        let out = t.path().join("new/rootfs");
        std::fs::create_dir(t.path().join("new")).unwrap();
        let layers = [AnchorLayer {
            path: "/etc".into(),
            upper,
        }];
        build(
            &base,
            &out,
            &layers,
            Limits::default(),
            &mut CommitReport::default(),
        )
        .unwrap();
        assert!(!out.join("etc/gone").exists());
        assert!(!out.join("etc/opaque/old").exists());
        assert_eq!(read(&out, "etc/opaque/new").as_deref(), Some("n"));
        assert_eq!(read(&out, "etc/replaced").as_deref(), Some("a file now"));
        assert!(base.join("etc/gone").exists());
    }

    #[test]
    fn a_sparse_file_keeps_its_holes_and_is_bounded_by_its_data() {
        use std::os::unix::fs::FileExt;
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("base/rootfs");
        mk(&base, "usr/x", "x");
        let upper = t.path().join("u");
        std::fs::create_dir_all(&upper).unwrap();
        let f = std::fs::File::create(upper.join("sparse")).unwrap();
        f.write_all_at(b"first", 0).unwrap();
        f.write_all_at(b"last", (2 << 30) - 4).unwrap();
        std::fs::File::create(upper.join("hole"))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        let layer = || AnchorLayer {
            path: "/root".into(),
            upper: upper.clone(),
        };
        let out = t.path().join("new/rootfs");
        std::fs::create_dir(t.path().join("new")).unwrap();
        let mut report = CommitReport::default();
        // Far less than the apparent 4 GiB.
        let limits = Limits {
            max_unpacked: 1 << 20,
            max_entries: 1000,
        };
        build(&base, &out, &[layer()], limits, &mut report).unwrap();
        assert_eq!(report.bytes, 2 * 4096);
        for (name, len) in [("sparse", 2u64 << 30), ("hole", 2 << 30)] {
            let m = std::fs::metadata(out.join("root").join(name)).unwrap();
            assert_eq!(m.len(), len);
            assert!(m.blocks() * 512 <= 64 << 10, "{name}: {}", m.blocks());
        }
        let got = std::fs::File::open(out.join("root/sparse")).unwrap();
        let mut b = [0u8; 5];
        got.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"first");
        got.read_exact_at(&mut b[..4], (2 << 30) - 4).unwrap();
        assert_eq!(&b[..4], b"last");
        // What is written counts: 8 KiB of data does not fit 4 KiB.
        let out = t.path().join("again/rootfs");
        std::fs::create_dir(t.path().join("again")).unwrap();
        let limits = Limits {
            max_unpacked: 4096,
            max_entries: 1000,
        };
        let e = build(
            &base,
            &out,
            &[layer()],
            limits,
            &mut CommitReport::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 4096 bytes"), "{e}");
    }

    #[test]
    fn limits_refuse_a_too_large_layer() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("base/rootfs");
        mk(&base, "usr/x", "x");
        let upper = t.path().join("u");
        mk(&upper, "big", &"x".repeat(1000));
        let out = t.path().join("new/rootfs");
        std::fs::create_dir(t.path().join("new")).unwrap();
        let e = build(
            &base,
            &out,
            &[AnchorLayer {
                path: "/usr".into(),
                upper,
            }],
            Limits {
                max_unpacked: 100,
                max_entries: 1000,
            },
            &mut CommitReport::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 100 bytes"), "{e}");
    }
}
