//! The FUSE file system: one view of the workspace, two stores behind it.
//!
//! Enforces, for every operation: a path the effective Git ignore rules
//! match lives in the Ignored Workspace State directory (the *state*
//! store); every other path, and `.git` always, lives in the host
//! workspace (the *host* store). Host content at an ignored path is never
//! shown, read or changed; state content at a non-ignored path is never
//! shown either, and stays where it is (no copy-back, ever).
//!
//! Routing, per name, at the moment of the operation:
//! - beneath a directory that lives in the state store, everything is in
//!   the state store (Git never looks inside an ignored directory);
//! - otherwise the rules decide, for the kind of the entry (a
//!   directory-only rule like `build/` routes a directory `build` to state
//!   but a file `build` to the host). When a name exists as a directory in
//!   one store and as a non-directory in the other, and each is routed to
//!   its own store, the non-directory is shown.
//!
//! Refusals, with the errno each gives:
//! - `rename` between the two stores (either way), or onto a name whose
//!   visible entry is in the other store: `EXDEV`, so `mv` and friends fall
//!   back to copy and delete, which routes every copied file by itself;
//! - `link` across the stores: `EXDEV`;
//! - `mknod` of a character or block device: `EPERM` (FIFOs and sockets
//!   are created in their store);
//! - `rmdir` of a host directory whose state counterpart holds anything
//!   (even entries hidden by the current rules), or whose host directory
//!   holds hidden ignored host files: `ENOTEMPTY`; hidden content is never
//!   deleted;
//! - `RENAME_EXCHANGE` of a host directory that has state content beneath
//!   it: `EXDEV`.
//!
//! A host directory renamed within the host store takes its state
//! counterpart (the ignored files beneath it) along, state first; if that
//! cannot be done without replacing something, the rename is refused with
//! `EXDEV`.
//!
//! Open files and directory listings stay bound to the file or snapshot
//! they were opened on when the rules change. Names the kernel has cached
//! keep their store for up to the entry TTL (`--cache-ms`); every new
//! name, and every creation, is routed with the rules as they are then.
//!
//! Names are bytes: non-UTF-8 names are stored, matched and listed as
//! they are. Extended attributes are not supported (`EOPNOTSUPP`).
//!
//! Inode numbers are the backing files' own where they do not clash, so
//! `st_ino` matches the host's and Git's index stays valid on both sides.
//! Absent names are cached by the kernel for the TTL like present ones.
//!
//! Leaves to others: the decision itself (`rules`), safe path resolution
//! (`sys`), and confinement (`confine`).

use crate::nodes::Table;
use crate::rules::Rules;
use crate::sentry::{self, Access};
use crate::sys::{join, open_beneath, open_dir, split, stamp, Stamp};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use lazaret_protocol::changes::Op;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RawDir, Stat};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod checked;
mod shadow;

/// Which backing tree a path lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    /// The host workspace directory.
    Host,
    /// The Domain's Ignored Workspace State directory.
    State,
}

type Res<T> = Result<T, rustix::io::Errno>;

/// The reply to an operation that answers nothing but success or why
/// not (unlink, rmdir, rename, fsync, fallocate).
fn empty_reply(r: Result<(), Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn fe(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

enum Handle {
    File {
        file: Arc<File>,
        /// The rules file it was opened as (host store), if any.
        rules: Option<Vec<u8>>,
        /// The backing file, when opened for writing (see `writers`).
        writer: Option<(u64, u64)>,
        /// The host path it writes, for the changes journal.
        host_path: Option<Vec<u8>>,
    },
    Dir(Arc<Vec<Entry>>),
}

struct Entry {
    ino: u64,
    kind: FileType,
    name: Vec<u8>,
    /// The entry's store and attributes (`None` for `.` and `..`).
    st: Option<(Store, Stat)>,
}

/// The changes one `setattr` asks for.
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
}

/// The router's configuration.
pub struct Options {
    /// How long the kernel may cache names and attributes.
    pub ttl: Duration,
    /// The most files open through the router at once (each holds one
    /// descriptor). An `open` or `create` beyond it fails with `EMFILE`,
    /// for that operation only. Directory handles hold no descriptor.
    pub max_open: usize,
    /// Whether Git-ignored paths go to the state store (Ignored Workspace
    /// State). Without it the router only enforces Git Sentry.
    pub isolate_ignored: bool,
    /// Workspace-relative paths that are read-only inside, with all
    /// beneath them (hook managers' files, `protected_paths`).
    pub protected: Vec<Vec<u8>>,
    /// The byte bound of the state store (see [`crate::quota`]).
    pub state_max_bytes: Option<u64>,
    /// Where every change to the host store is recorded first.
    pub journal: crate::journal::Journal,
    /// The sandbox's user (`--inside-owner UID:GID`, the profile's
    /// `user`): entries the router's own uid and gid own (the developer's,
    /// on the host) are reported as this user's, so that it may write
    /// them, and an entry it creates or is given stays the router's own,
    /// so that on the host it belongs to the developer, never to a
    /// subordinate uid. Read-only names stay read-only for it: Git Sentry
    /// refuses the change whatever the caller.
    pub inside_owner: Option<(u32, u32)>,
}

/// The most entries a directory rename looks at for protected entries
/// beneath it; a larger tree is refused with `EXDEV` (`mv` then copies).
const MAX_MOVE_SCAN: usize = 100_000;

/// The host workspace as Git Sentry's policy sees it.
struct HostView<'a>(&'a Router);

impl sentry::Host for HostView<'_> {
    fn exists(&self, path: &[u8]) -> bool {
        matches!(self.0.stat_in(Store::Host, path), Ok(Some(_)))
    }

    fn is_git_dir(&self, path: &[u8]) -> bool {
        sentry::is_git_dir_by(
            |p| match self.0.stat_in(Store::Host, p) {
                Ok(Some(st)) => Some(is_dir(&st)),
                _ => None,
            },
            path,
        )
    }
}

/// The default bound on open files ([`Options::max_open`]).
pub const DEFAULT_MAX_OPEN: usize = 4096;

/// Descriptors the router keeps for itself beyond the open files: the
/// roots, `/dev/fuse` per worker, and the few each operation opens while
/// it walks a path.
pub const RESERVED_FDS: usize = 64;

/// The FUSE file system.
pub struct Router {
    host: OwnedFd,
    state: OwnedFd,
    rules: Rules,
    table: Mutex<Table>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Files open for writing through the router: (device, inode) ->
    /// handles.
    writers: Mutex<HashMap<(u64, u64), usize>>,
    /// Open file handles (each holds a descriptor), against `max_open`.
    open_files: AtomicUsize,
    max_open: usize,
    isolate_ignored: bool,
    protected: Vec<Vec<u8>>,
    /// Whether the `max_open` bound was reported already.
    bound_logged: AtomicBool,
    /// The state store's size against its bound.
    quota: crate::quota::Quota,
    journal: crate::journal::Journal,
    /// For each Git directory's index the router gave the host: the host
    /// index's stamp right after it was written. While the host's index
    /// still has it, the sandbox reads its own copy (see [`Access::Mirrored`]).
    mirror: Mutex<HashMap<Vec<u8>, Stamp>>,
    /// Why an index or `packed-refs` was not given to the host, said once
    /// each (bounded).
    refusals_logged: Mutex<std::collections::HashSet<String>>,
    next_fh: AtomicU64,
    ttl: Duration,
    /// Whether the kernel invalidates cached pages on a size or mtime
    /// change it sees (`FUSE_AUTO_INVAL_DATA`, negotiated at `init`).
    keep_cache: bool,
    uid: u32,
    gid: u32,
    inside_owner: Option<(u32, u32)>,
}

/// The router's poison-tolerant lock (the one of `lazaret_helpers::sync`,
/// kept here so the confined router does not link the helpers library
/// for three lines).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn kind_of(st: &Stat) -> FileType {
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Directory => FileType::Directory,
        rustix::fs::FileType::Symlink => FileType::Symlink,
        rustix::fs::FileType::Fifo => FileType::NamedPipe,
        rustix::fs::FileType::Socket => FileType::Socket,
        rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
        rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Whether `path` is `prefix` or lies beneath it.
fn beneath_or_at(path: &[u8], prefix: &[u8]) -> bool {
    path == prefix
        || (path.len() > prefix.len() && path.starts_with(prefix) && path[prefix.len()] == b'/')
}

fn is_symlink(st: &Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
}

/// `base/rel`, or `base` for an empty `rel`.
fn join_rel(base: &[u8], rel: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        base.to_vec()
    } else {
        join(base, rel)
    }
}

fn is_dir(st: &Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec as u32)
    }
}

fn attr(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec as i64),
        mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
        crtime: UNIX_EPOCH,
        kind: kind_of(st),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// An all-zero `stat`, for negative entries.
fn zero_stat() -> Stat {
    // SAFETY: `Stat` is a plain C struct of integers, for which all-zero
    // bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// A name that changes the rules when it changes.
fn is_rules_path(path: &[u8]) -> bool {
    let (_, name) = split(path);
    name == b".gitignore" || path == b".git/info/exclude"
}

fn absent(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR || e == rustix::io::Errno::LOOP
}

impl Router {
    /// A router over the host workspace `host` and the state directory
    /// `state` (both directory descriptors), deciding with `rules`.
    pub fn new(host: OwnedFd, state: OwnedFd, rules: Rules, opts: Options) -> Router {
        let quota = crate::quota::Quota::new(opts.state_max_bytes, state.as_fd());
        Router {
            host,
            state,
            rules,
            table: Mutex::new(Table::new()),
            handles: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            open_files: AtomicUsize::new(0),
            max_open: opts.max_open,
            isolate_ignored: opts.isolate_ignored,
            protected: opts.protected,
            bound_logged: AtomicBool::new(false),
            quota,
            journal: opts.journal,
            mirror: Mutex::new(HashMap::new()),
            refusals_logged: Mutex::new(std::collections::HashSet::new()),
            next_fh: AtomicU64::new(1),
            ttl: opts.ttl,
            keep_cache: false,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            inside_owner: opts.inside_owner,
        }
    }

    /// The attributes the sandbox sees: the router's own ownership shown
    /// as the inside owner's (see [`Options::inside_owner`]).
    fn attr(&self, ino: u64, st: &Stat) -> FileAttr {
        let mut a = attr(ino, st);
        if let Some((u, g)) = self.inside_owner {
            if a.uid == self.uid {
                a.uid = u;
            }
            if a.gid == self.gid {
                a.gid = g;
            }
        }
        a
    }

    /// A uid the sandbox gives (a caller's, a `chown`'s) as the host
    /// sees it: the inside owner's is the router's own.
    fn host_uid(&self, uid: u32) -> u32 {
        match self.inside_owner {
            Some((u, _)) if u == uid => self.uid,
            _ => uid,
        }
    }

    /// As [`Self::host_uid`], for a gid.
    fn host_gid(&self, gid: u32) -> u32 {
        match self.inside_owner {
            Some((_, g)) if g == gid => self.gid,
            _ => gid,
        }
    }

    fn root(&self, s: Store) -> BorrowedFd<'_> {
        match s {
            Store::Host => self.host.as_fd(),
            Store::State => self.state.as_fd(),
        }
    }

    /// Records, before it is made, a change to the host store in the
    /// changes journal (see [`crate::journal`]); `Err` fails the change.
    fn journal(&self, s: Store, op: Op, path: &[u8], to: Option<&[u8]>) -> Result<(), Errno> {
        if s == Store::Host {
            self.journal.note(op, path, to)
        } else {
            Ok(())
        }
    }

    /// The host path the handle `fh` writes, if it writes the host store.
    fn written_path(&self, fh: FileHandle) -> Option<Vec<u8>> {
        match lock(&self.handles).get(&fh.0) {
            Some(Handle::File { host_path, .. }) => host_path.clone(),
            _ => None,
        }
    }

    fn node(&self, ino: INodeNo) -> Result<(Store, Vec<u8>), Errno> {
        lock(&self.table).get(ino.0).ok_or(Errno::ENOENT)
    }

    /// Where a new or looked-up `path` of the given kind lives.
    pub fn route(&self, parent: Store, path: &[u8], dir: bool) -> Store {
        if parent == Store::State {
            return Store::State;
        }
        match self.access(path) {
            Access::Free => {}
            Access::Live | Access::ReadOnly => return Store::Host,
            Access::Private | Access::HostOrPrivate | Access::Shadowed | Access::Mirrored => {
                return Store::State
            }
        }
        if self.isolate_ignored && self.rules.is_ignored(path, dir) {
            Store::State
        } else {
            Store::Host
        }
    }

    /// Whether `path` is ignored as a (file, directory); never with
    /// Ignored Workspace State off.
    fn ignored_both(&self, path: &[u8]) -> (bool, bool) {
        if self.isolate_ignored {
            self.rules.is_ignored_both(path)
        } else {
            (false, false)
        }
    }

    /// `ESTALE` when the file `st`, found by node `id`'s path, is not the
    /// node's backing file: the kernel then looks the name up afresh.
    fn same_file(&self, id: u64, st: &Stat) -> Result<(), Errno> {
        match lock(&self.table).backing(id) {
            Some((dev, ino)) if (dev, ino) != (st.st_dev, st.st_ino) => Err(Errno::ESTALE),
            _ => Ok(()),
        }
    }

    /// Git Sentry's verdict on `path` (see [`sentry`]).
    fn access(&self, path: &[u8]) -> Access {
        if self.protected.iter().any(|p| beneath_or_at(path, p)) {
            return Access::ReadOnly;
        }
        // Most paths name no `.git`: decided without a look at the host.
        if !path.split(|&b| b == b'/').any(|c| c == b".git") {
            return Access::Free;
        }
        sentry::access(&HostView(self), path)
    }

    /// Refuses (`EPERM`) a change to the entry (`s`, `path`) that Git
    /// Sentry protects.
    fn may_change(&self, s: Store, path: &[u8]) -> Result<(), Errno> {
        if s == Store::Host && !self.access(path).host_writable() {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// Refuses a new entry at `path` in `s` that Git Sentry protects: a
    /// protected name on the host (`EPERM`), or a private one whose host
    /// entry exists (`EEXIST`: it stays the host's, read-only).
    fn may_create(&self, s: Store, path: &[u8]) -> Result<(), Errno> {
        if self.rename_only(path) {
            return Err(Errno::EPERM);
        }
        match self.access(path) {
            Access::Free | Access::Live | Access::Private | Access::Shadowed => Ok(()),
            Access::ReadOnly | Access::Mirrored => Err(Errno::EPERM),
            Access::HostOrPrivate => {
                if s == Store::State && self.stat_in(Store::Host, path).map_err(fe)?.is_some() {
                    return Err(Errno::EEXIST);
                }
                Ok(())
            }
        }
    }

    /// Whether `path` changes only by Git's lock-and-rename, which the
    /// router checks: a Git directory's index and `packed-refs`. Creating
    /// them, writing them in place, or renaming them away is refused
    /// (`EPERM`); Git never does any of it.
    fn rename_only(&self, path: &[u8]) -> bool {
        match self.access(path) {
            Access::Mirrored => true,
            Access::Live => sentry::is_packed_refs(&HostView(self), path),
            _ => false,
        }
    }

    /// Which copy of the mirrored index `path` the sandbox sees, given the
    /// host's and the state store's entries: its own while the host's
    /// index is still the one the router wrote from it, else the host's.
    fn mirrored_pick(
        &self,
        path: &[u8],
        host: Option<Stat>,
        state: Option<Stat>,
    ) -> (Option<(Store, Stat)>, bool) {
        let current = host
            .as_ref()
            .is_some_and(|h| lock(&self.mirror).get(path) == Some(&stamp(h)));
        match (state, current) {
            (Some(st), true) => (Some((Store::State, st)), false),
            // The host's index changed (host Git wrote it) or was never
            // the router's: the sandbox's copy is stale.
            (stale, _) => (host.map(|h| (Store::Host, h)), stale.is_some()),
        }
    }

    /// [`Self::mirrored_pick`] for a lookup: a stale private copy is
    /// removed, so the sandbox's Git reads the host's index afresh.
    fn resolve_mirrored(&self, path: &[u8]) -> Res<Option<(Store, Stat)>> {
        let host = self.stat_in(Store::Host, path)?;
        let state = self.stat_in(Store::State, path)?;
        let (pick, stale) = self.mirrored_pick(path, host, state);
        if stale {
            if let Some(st) = state {
                let (pp, name) = split(path);
                if let Ok(d) = open_dir(self.root(Store::State), pp) {
                    if rustix::fs::unlinkat(&d, OsStr::from_bytes(name), AtFlags::empty()).is_ok() {
                        self.quota.removed(&st);
                        lock(&self.table).removed(Store::State, path, &st);
                    }
                }
            }
            lock(&self.mirror).remove(path);
        }
        Ok(pick)
    }

    /// Says once per distinct reason why an index or `packed-refs` the
    /// sandbox wrote was not given to the host.
    fn log_refusal(&self, path: &[u8], why: &str) {
        let line = format!(
            "lazaret-mount-router: {}: not given to the host: {why}",
            lazaret_protocol::display::escape(path)
        );
        let mut seen = lock(&self.refusals_logged);
        if seen.len() < 256 && seen.insert(line.clone()) {
            lazaret_protocol::log_line!("{line}");
        }
    }

    /// Refuses to move the host directory `path` when it holds hidden
    /// ignored host content (`EXDEV`), or (`EPERM`) when it holds
    /// an entry Git Sentry protects (a `.git` of a nested repository or
    /// checkout, or protected files of a Git directory): moving it would
    /// carry that entry where the policy no longer protects it.
    ///
    /// Moving a directory to `to` in a Git directory is refused the same
    /// way when anything beneath it would land on a protected name there,
    /// or is a symlink (Git makes none in its directories, and one would
    /// let host Git read through it).
    fn may_move_dir(&self, from: &[u8], to: &[u8]) -> Result<(), Errno> {
        if self.protected.iter().any(|p| beneath_or_at(p, from)) {
            return Err(Errno::EPERM);
        }
        let from_git = self.access(from) != Access::Free;
        let to_git = self.access(to) != Access::Free;
        let mut stack = vec![Vec::new()];
        let mut seen = 0usize;
        while let Some(rel) = stack.pop() {
            let entries = match self.read_dir(Store::Host, &join_rel(from, &rel)) {
                Ok(v) => v,
                Err(e) if absent(e) => continue,
                Err(e) => return Err(fe(e)),
            };
            for (name, st) in entries {
                seen += 1;
                if seen > MAX_MOVE_SCAN {
                    // Too large to check: `mv` copies instead.
                    return Err(Errno::EXDEV);
                }
                let child = join(&rel, &name);
                // Hidden host content (ignored here) could be revealed
                // where the rules do not ignore it: `mv` copies instead,
                // and the copy sees only what is visible.
                let (f, d) = self.ignored_both(&join_rel(from, &child));
                if (is_dir(&st) && d) || (!is_dir(&st) && f) {
                    return Err(Errno::EXDEV);
                }
                let refused = name == b".git"
                    || (from_git && !self.access(&join_rel(from, &child)).host_writable())
                    || (to_git
                        && (is_symlink(&st)
                            || !self.access(&join_rel(to, &child)).host_writable()));
                if refused {
                    return Err(Errno::EPERM);
                }
                if is_dir(&st) {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    fn stat_in(&self, s: Store, path: &[u8]) -> Res<Option<Stat>> {
        match open_beneath(self.root(s), path, OFlags::PATH | OFlags::NOFOLLOW) {
            Ok(fd) => rustix::fs::fstat(&fd).map(Some),
            Err(e) if absent(e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Picks the visible entry when a name may exist in both stores.
    fn choose(
        &self,
        path: &[u8],
        host: Option<(bool, Stat)>,
        state: Option<(bool, Stat)>,
    ) -> Option<(Store, Stat)> {
        let (f, d) = self.ignored_both(path);
        let routed = |dir: bool| {
            if (dir && d) || (!dir && f) {
                Store::State
            } else {
                Store::Host
            }
        };
        let h = host.filter(|(d, _)| routed(*d) == Store::Host);
        let s = state.filter(|(d, _)| routed(*d) == Store::State);
        match (h, s) {
            (Some((hd, hs)), Some((_, ss))) => {
                // Both routed to their own store: they differ in kind;
                // the non-directory is shown.
                if hd {
                    Some((Store::State, ss))
                } else {
                    Some((Store::Host, hs))
                }
            }
            (Some((_, hs)), None) => Some((Store::Host, hs)),
            (None, Some((_, ss))) => Some((Store::State, ss)),
            (None, None) => None,
        }
    }

    /// The visible entry `name` of the directory (`pstore`, `ppath`).
    fn resolve(&self, pstore: Store, path: &[u8]) -> Res<Option<(Store, Stat)>> {
        if pstore == Store::State {
            return Ok(self.stat_in(Store::State, path)?.map(|s| (Store::State, s)));
        }
        match self.access(path) {
            Access::Free => {}
            Access::Live | Access::ReadOnly => {
                return Ok(self.stat_in(Store::Host, path)?.map(|s| (Store::Host, s)))
            }
            Access::Private => {
                if let Some(st) = self.stat_in(Store::State, path)? {
                    return Ok(Some((Store::State, st)));
                }
                // A host directory hidden here (`.git/hooks`) shows as an
                // empty private one, so Git's layout stays as expected.
                return match self.stat_in(Store::Host, path)? {
                    Some(h) if is_dir(&h) => {
                        self.dir_fd(Store::State, path, true)?;
                        Ok(self.stat_in(Store::State, path)?.map(|s| (Store::State, s)))
                    }
                    _ => Ok(None),
                };
            }
            Access::HostOrPrivate => {
                return Ok(match self.stat_in(Store::Host, path)? {
                    Some(st) => Some((Store::Host, st)),
                    None => self.stat_in(Store::State, path)?.map(|s| (Store::State, s)),
                })
            }
            Access::Shadowed => {
                return Ok(match self.stat_in(Store::State, path)? {
                    Some(st) => Some((Store::State, st)),
                    None => self.stat_in(Store::Host, path)?.map(|s| (Store::Host, s)),
                })
            }
            Access::Mirrored => return self.resolve_mirrored(path),
        }
        let store = |ignored: bool| if ignored { Store::State } else { Store::Host };
        let (f, d) = self.ignored_both(path);
        let (rf, rd) = (store(f), store(d));
        if rf == rd {
            return Ok(self.stat_in(rf, path)?.map(|s| (rf, s)));
        }
        let h = self.stat_in(Store::Host, path)?.map(|s| (is_dir(&s), s));
        let s = self.stat_in(Store::State, path)?.map(|s| (is_dir(&s), s));
        Ok(self.choose(path, h, s))
    }

    /// The directory `path` in `s`, creating missing state directories
    /// (never following a symlink) when `create` is set.
    fn dir_fd(&self, s: Store, path: &[u8], create: bool) -> Res<OwnedFd> {
        match open_dir(self.root(s), path) {
            Err(rustix::io::Errno::NOENT) if create && s == Store::State => {}
            r => return r,
        }
        let mut cur = open_dir(self.root(s), b"")?;
        for comp in path.split(|&b| b == b'/') {
            match rustix::fs::mkdirat(&cur, OsStr::from_bytes(comp), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
            cur = open_dir(cur.as_fd(), comp)?;
        }
        Ok(cur)
    }

    /// Gives a new entry the caller's ownership (its group the directory's
    /// where the directory is set-group-ID).
    fn own(&self, req: &Request, dir: BorrowedFd<'_>, name: &[u8]) {
        let pdir_setgid = rustix::fs::fstat(dir)
            .map(|s| s.st_mode & 0o2000 != 0)
            .unwrap_or(false);
        let (ru, rg) = (self.host_uid(req.uid()), self.host_gid(req.gid()));
        let uid = (ru != self.uid).then(|| rustix::fs::Uid::from_raw(ru));
        let gid = (rg != self.gid && !pdir_setgid).then(|| rustix::fs::Gid::from_raw(rg));
        if uid.is_some() || gid.is_some() {
            let _ = rustix::fs::chownat(
                dir,
                OsStr::from_bytes(name),
                uid,
                gid,
                AtFlags::SYMLINK_NOFOLLOW,
            );
        }
    }

    /// The new entry `name` in `dir` (`path` in `s`) made the caller's
    /// ([`Self::own`]), and its status.
    fn own_new(
        &self,
        req: &Request,
        s: Store,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
    ) -> Result<Stat, Errno> {
        self.own(req, dir.as_fd(), name);
        self.stat_in(s, path).map_err(fe)?.ok_or(Errno::ENOENT)
    }

    fn entry_reply(&self, s: Store, path: &[u8], st: &Stat, reply: ReplyEntry) {
        let ino = lock(&self.table).intern(s, path, st);
        reply.entry(&self.ttl_for(path), &self.attr(ino, st), Generation(0));
    }

    /// The reply to mknod, mkdir, symlink and link: the new entry, or why
    /// there is none.
    fn new_entry_reply(&self, r: Result<(Store, Vec<u8>, Stat), Errno>, reply: ReplyEntry) {
        match r {
            Ok((s, path, st)) => self.entry_reply(s, &path, &st, reply),
            Err(e) => reply.error(e),
        }
    }

    /// The existing entry `name` in `parent`: its store, its parent's
    /// path, its own and its status (`ENOENT` when there is none).
    fn existing_entry(
        &self,
        parent: INodeNo,
        name: &[u8],
    ) -> Result<(Store, Vec<u8>, Vec<u8>, Stat), Errno> {
        let (ps, ppath) = self.node(parent)?;
        let path = join(&ppath, name);
        let (s, st) = self.resolve(ps, &path).map_err(fe)?.ok_or(Errno::ENOENT)?;
        Ok((s, ppath, path, st))
    }

    /// Removes the entry `name` of the directory `ppath` (`path` in `s`,
    /// status `st`; `flags` as for `unlinkat`): journalled first, then
    /// unlinked, then forgotten by the quota and the node table.
    fn remove_entry(
        &self,
        s: Store,
        ppath: &[u8],
        name: &OsStr,
        path: &[u8],
        st: &Stat,
        flags: AtFlags,
    ) -> Result<(), Errno> {
        let d = open_dir(self.root(s), ppath).map_err(fe)?;
        self.journal(s, Op::Remove, path, None)?;
        rustix::fs::unlinkat(&d, name, flags).map_err(fe)?;
        if s == Store::State {
            self.quota.removed(st);
        }
        lock(&self.table).removed(s, path, st);
        Ok(())
    }

    /// Where a new entry `name` in `parent` goes: its store, its parent's
    /// path and its own, once the sandbox may create it there.
    fn new_entry(
        &self,
        parent: INodeNo,
        name: &[u8],
        dir: bool,
    ) -> Result<(Store, Vec<u8>, Vec<u8>), Errno> {
        let (ps, ppath) = self.node(parent)?;
        let path = join(&ppath, name);
        let s = self.route(ps, &path, dir);
        if ps == Store::Host {
            self.may_create(s, &path)?;
        }
        Ok((s, ppath, path))
    }

    /// How long the kernel may cache the name or attributes of `path`:
    /// not at all in Git directories, where host Git replaces files (the
    /// index, refs) by rename and a stale entry would mix two files.
    /// How a file opened at `path` is served: its cached pages kept
    /// across opens (`FOPEN_KEEP_CACHE`; without it every open drops
    /// them, and a tree read twice is read through the router twice)
    /// where the kernel drops them itself when it sees the file change, so
    /// a host-side edit is read within the TTL as names and attributes
    /// are. Never under a `.git` (TTL zero: Git Sentry serves some of its
    /// names from a private copy, see [`Access::Mirrored`]).
    fn open_flags(&self, path: &[u8]) -> FopenFlags {
        if self.keep_cache && !self.ttl_for(path).is_zero() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    fn ttl_for(&self, path: &[u8]) -> Duration {
        if path.split(|&b| b == b'/').any(|c| c == b".git") {
            Duration::ZERO
        } else {
            self.ttl
        }
    }

    /// Reserves a place for one more open file, or fails with `EMFILE`
    /// (reported once on stderr) when `max_open` are open.
    fn reserve_file(&self) -> Result<(), Errno> {
        let prev = self.open_files.fetch_add(1, Ordering::AcqRel);
        if prev < self.max_open {
            return Ok(());
        }
        self.open_files.fetch_sub(1, Ordering::AcqRel);
        if !self.bound_logged.swap(true, Ordering::AcqRel) {
            lazaret_protocol::log_line!(
                "lazaret-mount-router: {} files are open through the router, its bound: \
                 further opens fail with EMFILE until some are closed (reported once)",
                self.max_open
            );
        }
        Err(Errno::EMFILE)
    }

    /// Counts one more handle writing to the file `st`.
    fn add_writer(&self, st: &Stat) -> (u64, u64) {
        let k = (st.st_dev, st.st_ino);
        *lock(&self.writers).entry(k).or_insert(0) += 1;
        k
    }

    fn drop_writer(&self, k: (u64, u64)) {
        let mut w = lock(&self.writers);
        if let Some(n) = w.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                w.remove(&k);
            }
        }
    }

    /// Whether a handle is open for writing to the file `st`.
    fn has_writer(&self, st: &Stat) -> bool {
        lock(&self.writers).contains_key(&(st.st_dev, st.st_ino))
    }

    /// Gives back a place taken by [`Self::reserve_file`].
    fn unreserve_file(&self) {
        self.open_files.fetch_sub(1, Ordering::AcqRel);
    }

    /// Runs `f`, which opens one file, within a place reserved for it.
    fn with_file_slot<T>(&self, f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
        self.reserve_file()?;
        let r = f();
        if r.is_err() {
            self.unreserve_file();
        }
        r
    }

    fn new_fh(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, h);
        fh
    }

    fn file(&self, fh: FileHandle) -> Result<(Arc<File>, Option<Vec<u8>>), Errno> {
        match lock(&self.handles).get(&fh.0) {
            Some(Handle::File { file, rules, .. }) => Ok((file.clone(), rules.clone())),
            _ => Err(Errno::EBADF),
        }
    }

    /// The entries of the directory `path` in `s` with their attributes
    /// (`statat` of one component, never following a symlink).
    fn read_dir(&self, s: Store, path: &[u8]) -> Res<Vec<(Vec<u8>, Stat)>> {
        let fd = open_beneath(
            self.root(s),
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        )?;
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 32 * 1024];
        let mut rd = RawDir::new(&fd, &mut buf);
        let mut out = Vec::new();
        while let Some(e) = rd.next() {
            let e = e?;
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            // Gone since it was listed: not an entry any more.
            if let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                out.push((name.to_bytes().to_vec(), st));
            }
        }
        Ok(out)
    }

    /// The visible entries of the directory (`s`, `path`).
    /// The listing behind a directory handle. A read from offset 0 is a
    /// rewind (`rewinddir`, or gVisor's gofer reusing its descriptor):
    /// the listing is taken afresh, so entries created since the handle
    /// was opened, in either store, are seen.
    fn dir_entries(
        &self,
        fh: FileHandle,
        ino: INodeNo,
        offset: u64,
    ) -> Result<Arc<Vec<Entry>>, Errno> {
        if offset == 0 {
            let (s, path) = self.node(ino)?;
            let fresh = Arc::new(self.list(s, &path, ino.0).map_err(fe)?);
            match lock(&self.handles).get_mut(&fh.0) {
                Some(Handle::Dir(e)) => *e = fresh.clone(),
                _ => return Err(Errno::EBADF),
            }
            return Ok(fresh);
        }
        match lock(&self.handles).get(&fh.0) {
            Some(Handle::Dir(e)) => Ok(e.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    fn list(&self, s: Store, path: &[u8], self_ino: u64) -> Res<Vec<Entry>> {
        type Both = (Option<Stat>, Option<Stat>);
        let mut names: BTreeMap<Vec<u8>, Both> = BTreeMap::new();
        match s {
            Store::State => {
                for (n, st) in self.read_dir(Store::State, path)? {
                    names.entry(n).or_default().1 = Some(st);
                }
            }
            Store::Host => {
                for (n, st) in self.read_dir(Store::Host, path)? {
                    names.entry(n).or_default().0 = Some(st);
                }
                match self.read_dir(Store::State, path) {
                    Ok(v) => {
                        for (n, st) in v {
                            names.entry(n).or_default().1 = Some(st);
                        }
                    }
                    Err(e) if absent(e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let dot = |name: &[u8]| Entry {
            ino: self_ino,
            kind: FileType::Directory,
            name: name.to_vec(),
            st: None,
        };
        let mut picked = Vec::with_capacity(names.len());
        for (name, (h, st)) in names {
            let pick = if s == Store::State {
                st.map(|st| (Store::State, st))
            } else {
                let child = join(path, &name);
                match self.access(&child) {
                    Access::Free => self.choose(
                        &child,
                        h.map(|x| (is_dir(&x), x)),
                        st.map(|x| (is_dir(&x), x)),
                    ),
                    Access::Live | Access::ReadOnly => h.map(|x| (Store::Host, x)),
                    Access::Private => st.map(|x| (Store::State, x)),
                    Access::HostOrPrivate => h
                        .map(|x| (Store::Host, x))
                        .or(st.map(|x| (Store::State, x))),
                    Access::Shadowed => st
                        .map(|x| (Store::State, x))
                        .or(h.map(|x| (Store::Host, x))),
                    Access::Mirrored => self.mirrored_pick(&child, h, st).0,
                }
            };
            if let Some(p) = pick {
                picked.push((name, p));
            }
        }
        let t = lock(&self.table);
        let mut out = vec![dot(b"."), dot(b"..")];
        for (name, (store, st)) in picked {
            out.push(Entry {
                ino: t.ino_for(store, &st),
                kind: kind_of(&st),
                name,
                st: Some((store, st)),
            });
        }
        Ok(out)
    }

    fn do_setattr(
        &self,
        ino: INodeNo,
        a: SetAttr,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        } = a;
        let uid = uid.map(|u| self.host_uid(u));
        let gid = gid.map(|g| self.host_gid(g));
        let (mut s, path) = self.node(ino)?;
        if s == Store::Host && self.copies_up(&path) {
            // A handle is the copy made when it was opened for writing.
            self.copy_up(&path)?;
            s = Store::State;
        }
        self.may_change(s, &path)?;
        if self.rename_only(&path) {
            return Err(Errno::EPERM);
        }
        if s == Store::Host && size.is_some() && is_rules_path(&path) {
            self.rules.before_sandbox_change(&path);
        }
        let file = match fh {
            Some(fh) => self.file(fh).ok().map(|(f, _)| f),
            None => None,
        };
        let (ppath, name) = split(&path);
        let pfd = if path.is_empty() {
            None
        } else {
            Some(open_dir(self.root(s), ppath).map_err(fe)?)
        };
        let at = AttrTarget {
            file: file.as_deref(),
            dir: match &pfd {
                Some(fd) => fd.as_fd(),
                None => self.root(s),
            },
            name: if path.is_empty() { &b"."[..] } else { name },
        };
        if mode.is_some() || uid.is_some() || gid.is_some() {
            self.journal(s, Op::Attr, &path, None)?;
        }
        if size.is_some() {
            self.journal(s, Op::Write, &path, None)?;
        }
        if let Some(m) = mode {
            at.chmod(m)?;
        }
        if uid.is_some() || gid.is_some() {
            at.chown(uid, gid)?;
        }
        if let Some(sz) = size {
            self.truncate(s, &path, at.file, sz)?;
        }
        if atime.is_some() || mtime.is_some() {
            at.set_times(atime, mtime)?;
        }
        let st = match &file {
            Some(f) => rustix::fs::fstat(f.as_fd()).map_err(fe)?,
            None => self.stat_in(s, &path).map_err(fe)?.ok_or(Errno::ENOENT)?,
        };
        Ok(self.attr(ino.0, &st))
    }

    /// setattr's size: truncates (or extends) `path` in store `s`, through
    /// the open `file` if there is one, within the state store's quota.
    fn truncate(&self, s: Store, path: &[u8], file: Option<&File>, sz: u64) -> Result<(), Errno> {
        let opened = match &file {
            Some(_) => None,
            None => Some(
                open_beneath(
                    self.root(s),
                    path,
                    OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
                )
                .map_err(fe)?,
            ),
        };
        let fd = match (&file, &opened) {
            (Some(f), _) => f.as_fd(),
            (None, Some(o)) => o.as_fd(),
            (None, None) => return Err(Errno::EBADF),
        };
        let counted = s == Store::State;
        let before = if counted {
            self.quota.admit(self.root(s), fd, sz)?
        } else {
            0
        };
        let done = rustix::fs::ftruncate(fd, sz);
        if counted {
            self.quota.settle(fd, before);
        }
        done.map_err(fe)?;
        if s == Store::Host && is_rules_path(path) {
            self.rules.after_sandbox_change(path);
        }
        Ok(())
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &[u8],
        newparent: INodeNo,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (ps, ppath) = self.node(parent)?;
        let (nps, nppath) = self.node(newparent)?;
        let from = join(&ppath, name);
        let to = join(&nppath, newname);
        if self.rename_only(&from) {
            return Err(Errno::EPERM);
        }
        if self.access(&to) == Access::Mirrored {
            return self.rename_into_index(ps, &from, &to, flags);
        }
        let (s, st) = self.resolve(ps, &from).map_err(fe)?.ok_or(Errno::ENOENT)?;
        let dir = is_dir(&st);
        self.may_change(s, &from)?;
        let dst = self.route(nps, &to, dir);
        if s != dst {
            return Err(Errno::EXDEV);
        }
        self.may_rename(s, &st, nps, &from, &to)?;
        for p in [&from, &to] {
            if s == Store::Host && is_rules_path(p) {
                self.rules.before_sandbox_change(p);
            }
        }
        let target = self.rename_target(s, nps, &to)?;
        let r = Rename {
            ppath: &ppath,
            name,
            nppath: &nppath,
            newname,
            from: &from,
            to: &to,
            rflags: rustix::fs::RenameFlags::from_bits_retain(flags.bits()),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        self.journal(s, Op::Rename, &from, Some(&to))?;
        if r.exchange {
            self.journal(s, Op::Rename, &to, Some(&from))?;
        }
        let src_dir = open_dir(self.root(s), &ppath).map_err(fe)?;
        let dst_dir = self.dir_fd(s, &nppath, true).map_err(fe)?;
        // A host directory carries its state counterpart along.
        let moved_state = if s == Store::Host && dir {
            self.rename_with_state(&r, &src_dir, &dst_dir)?
        } else {
            false
        };
        if !moved_state {
            rustix::fs::renameat_with(
                &src_dir,
                OsStr::from_bytes(name),
                &dst_dir,
                OsStr::from_bytes(newname),
                r.rflags,
            )
            .map_err(fe)?;
        }
        self.record_rename(s, &r, &target, &st, moved_state);
        for p in [&from, &to] {
            if s == Store::Host && is_rules_path(p) {
                self.rules.after_sandbox_change(p);
            }
        }
        if dir {
            self.rules.invalidate();
        }
        Ok(())
    }

    /// Whether Git Sentry lets `from` (in store `s`, the same as the
    /// destination's, `st` its status) be renamed to `to` (whose parent
    /// is in `nps`).
    fn may_rename(
        &self,
        s: Store,
        st: &Stat,
        nps: Store,
        from: &[u8],
        to: &[u8],
    ) -> Result<(), Errno> {
        let dir = is_dir(st);
        // The destination's store: the source's (checked by the caller).
        let dst = s;
        if nps == Store::Host && self.rename_only(to) {
            // `packed-refs`: only a file whose replace refs the host's
            // already has.
            self.may_change(dst, to)?;
            self.check_packed_refs(s, from, to)?;
        } else if nps == Store::Host {
            self.may_create(dst, to)?;
            self.may_change(dst, to)?;
        }
        if s == Store::Host && dir {
            self.may_move_dir(from, to)?;
        }
        if s == Store::Host && is_symlink(st) && self.access(to) != Access::Free {
            return Err(Errno::EPERM);
        }
        if s == Store::Host && is_rules_path(to) && !dir {
            // The rules file must change only through its own name: not
            // through another link, nor a descriptor opened under
            // another name.
            if st.st_nlink > 1 || self.has_writer(st) {
                return Err(Errno::EPERM);
            }
        }
        Ok(())
    }

    /// The entry a rename into store `s` replaces, if any, as the sandbox
    /// sees it.
    fn rename_target(
        &self,
        s: Store,
        nps: Store,
        to: &[u8],
    ) -> Result<Option<(Store, Stat)>, Errno> {
        // Replacing a visible entry of the other store would leave two
        // entries under one name: refuse like a cross-store rename.
        let target = if s == Store::State && self.access(to) == Access::Shadowed {
            // A private copy replaces the host's only in the sandbox's view.
            self.stat_in(Store::State, to)
                .map_err(fe)?
                .map(|st| (Store::State, st))
        } else {
            self.resolve(nps, to).map_err(fe)?
        };
        if let Some((vs, _)) = &target {
            if *vs != s {
                return Err(Errno::EXDEV);
            }
        }
        Ok(target)
    }

    /// Renames a host directory together with its state counterpart, if
    /// it has one (then `true`); a counterpart that cannot move with it
    /// fails the rename with `EXDEV`.
    fn rename_with_state(
        &self,
        r: &Rename,
        src_dir: &OwnedFd,
        dst_dir: &OwnedFd,
    ) -> Result<bool, Errno> {
        let counterpart = self.stat_in(Store::State, r.from).map_err(fe)?;
        let dst_counterpart = self.stat_in(Store::State, r.to).map_err(fe)?;
        if r.exchange && (counterpart.is_some() || dst_counterpart.is_some()) {
            return Err(Errno::EXDEV);
        }
        let Some(c) = counterpart else {
            return Ok(false);
        };
        if !is_dir(&c) {
            return Err(Errno::EXDEV);
        }
        if let Some(d) = dst_counterpart {
            // Only an empty scaffolding directory may be replaced.
            if !is_dir(&d) {
                return Err(Errno::EXDEV);
            }
            let (tp, tn) = split(r.to);
            let tfd = open_dir(self.root(Store::State), tp).map_err(fe)?;
            rustix::fs::unlinkat(&tfd, OsStr::from_bytes(tn), AtFlags::REMOVEDIR)
                .map_err(|_| Errno::EXDEV)?;
        }
        let sfrom = open_dir(self.root(Store::State), r.ppath).map_err(fe)?;
        let sto = self.dir_fd(Store::State, r.nppath, true).map_err(fe)?;
        rustix::fs::renameat_with(
            &sfrom,
            OsStr::from_bytes(r.name),
            &sto,
            OsStr::from_bytes(r.newname),
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|_| Errno::EXDEV)?;
        if let Err(e) = rustix::fs::renameat_with(
            src_dir,
            OsStr::from_bytes(r.name),
            dst_dir,
            OsStr::from_bytes(r.newname),
            r.rflags,
        ) {
            // Put the state counterpart back; the rename did not happen.
            let _ = rustix::fs::renameat_with(
                &sto,
                OsStr::from_bytes(r.newname),
                &sfrom,
                OsStr::from_bytes(r.name),
                rustix::fs::RenameFlags::NOREPLACE,
            );
            return Err(fe(e));
        }
        Ok(true)
    }

    /// The node table after a rename of `st` in store `s` that replaced
    /// `target` (if any).
    fn record_rename(
        &self,
        s: Store,
        r: &Rename,
        target: &Option<(Store, Stat)>,
        st: &Stat,
        moved_state: bool,
    ) {
        let (from, to) = (r.from, r.to);
        let mut t = lock(&self.table);
        if r.exchange {
            let tmp = b"\0exchange".to_vec();
            t.moved(s, from, &tmp);
            t.moved(s, to, from);
            t.moved(s, &tmp, to);
        } else {
            // The entry replaced goes, unless it was the same file:
            // then rename does nothing.
            let same = |tst: &Stat| (tst.st_dev, tst.st_ino) == (st.st_dev, st.st_ino);
            match target {
                Some((_, tst)) if same(tst) => {}
                Some((ts, tst)) => {
                    t.removed(*ts, to, tst);
                    t.moved(s, from, to);
                }
                None => t.moved(s, from, to),
            }
            if moved_state {
                t.moved(Store::State, from, to);
            }
        }
    }
}

/// What setattr changes, other than the size: the open `file` if there is
/// one, else `name` (`.` for the root) in directory `dir`, not following
/// a symlink.
struct AttrTarget<'a> {
    file: Option<&'a File>,
    dir: BorrowedFd<'a>,
    name: &'a [u8],
}

impl AttrTarget<'_> {
    fn chmod(&self, m: u32) -> Result<(), Errno> {
        match self.file {
            Some(f) => rustix::fs::fchmod(f.as_fd(), Mode::from_raw_mode(m & 0o7777)),
            None => crate::sys::chmod_nofollow(self.dir, self.name, m & 0o7777),
        }
        .map_err(fe)
    }

    fn chown(&self, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        let u = uid.map(rustix::fs::Uid::from_raw);
        let g = gid.map(rustix::fs::Gid::from_raw);
        match self.file {
            Some(f) => rustix::fs::fchown(f.as_fd(), u, g),
            None => rustix::fs::chownat(
                self.dir,
                OsStr::from_bytes(self.name),
                u,
                g,
                AtFlags::SYMLINK_NOFOLLOW,
            ),
        }
        .map_err(fe)
    }

    fn set_times(&self, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> Result<(), Errno> {
        let times = rustix::fs::Timestamps {
            last_access: timespec_of(atime),
            last_modification: timespec_of(mtime),
        };
        match self.file {
            Some(f) => rustix::fs::futimens(f.as_fd(), &times),
            None => rustix::fs::utimensat(
                self.dir,
                OsStr::from_bytes(self.name),
                &times,
                AtFlags::SYMLINK_NOFOLLOW,
            ),
        }
        .map_err(fe)
    }
}

/// A setattr time as `utimensat` takes it: none leaves it as it is.
fn timespec_of(t: Option<TimeOrNow>) -> rustix::fs::Timespec {
    match t {
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    (-(d.as_secs() as i64), 0)
                }
            };
            rustix::fs::Timespec {
                tv_sec: sec,
                tv_nsec: nsec as _,
            }
        }
    }
}

/// One rename's names: from `name` in `ppath` (`from`) to `newname` in
/// `nppath` (`to`).
struct Rename<'a> {
    ppath: &'a [u8],
    name: &'a [u8],
    nppath: &'a [u8],
    newname: &'a [u8],
    from: &'a [u8],
    to: &'a [u8],
    rflags: rustix::fs::RenameFlags,
    exchange: bool,
}

impl Filesystem for Router {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        // Attributes come with listings (no lookup per entry), and lookups
        // in one directory may run in parallel. Both are optional.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // A file's cached pages may outlive its handles only if the kernel
        // drops them when it sees the file's size or mtime change at an
        // attribute refresh: see `open_flags`.
        self.keep_cache = config
            .add_capabilities(fuser::InitFlags::FUSE_AUTO_INVAL_DATA)
            .is_ok();
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let (ps, ppath) = match self.node(parent) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let path = join(&ppath, name.as_bytes());
        let ttl = self.ttl_for(&path);
        match self.resolve(ps, &path) {
            Ok(Some((s, st))) => self.entry_reply(s, &path, &st, reply),
            // A negative entry: the kernel caches the absence for the TTL
            // like any other name (Git probes many absent `.gitignore`s).
            Ok(None) if !ttl.is_zero() => {
                let mut a = attr(0, &zero_stat());
                a.ino = INodeNo(0);
                reply.entry(&ttl, &a, Generation(0));
            }
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.table).forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = (|| {
            let (s, path) = self.node(ino)?;
            if let Some(fh) = fh {
                if let Ok((f, _)) = self.file(fh) {
                    return Ok((rustix::fs::fstat(f.as_fd()).map_err(fe)?, path));
                }
            }
            let st = self.stat_in(s, &path).map_err(fe)?.ok_or(Errno::ENOENT)?;
            self.same_file(ino.0, &st)?;
            Ok((st, path))
        })();
        match r {
            Ok((st, path)) => reply.attr(&self.ttl_for(&path), &self.attr(ino.0, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self.do_setattr(ino, a, fh) {
            Ok(a) => {
                let ttl = self
                    .node(ino)
                    .map(|(_, p)| self.ttl_for(&p))
                    .unwrap_or(Duration::ZERO);
                reply.attr(&ttl, &a)
            }
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = (|| {
            let (s, path) = self.node(ino)?;
            let (pp, name) = split(&path);
            let d = open_dir(self.root(s), pp).map_err(fe)?;
            rustix::fs::readlinkat(&d, OsStr::from_bytes(name), Vec::new()).map_err(fe)
        })();
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let ft = rustix::fs::FileType::from_raw_mode(mode);
            match ft {
                rustix::fs::FileType::RegularFile
                | rustix::fs::FileType::Fifo
                | rustix::fs::FileType::Socket => {}
                // Device nodes are never created, in either store.
                _ => return Err(Errno::EPERM),
            }
            let (s, ppath, path) = self.new_entry(parent, name.as_bytes(), false)?;
            let d = self.dir_fd(s, &ppath, true).map_err(fe)?;
            self.journal(s, Op::Create, &path, None)?;
            rustix::fs::mknodat(&d, name, ft, Mode::from_raw_mode(mode & 0o7777), 0).map_err(fe)?;
            let st = self.own_new(req, s, &d, name.as_bytes(), &path)?;
            if s == Store::State {
                self.quota.added(&st);
            }
            Ok((s, path, st))
        })();
        self.new_entry_reply(r, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let (s, ppath, path) = self.new_entry(parent, name.as_bytes(), true)?;
            let d = self.dir_fd(s, &ppath, true).map_err(fe)?;
            if s == Store::State {
                self.quota.admit_entry(self.root(s))?;
            }
            self.journal(s, Op::Mkdir, &path, None)?;
            rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(mode & 0o7777)).map_err(fe)?;
            let st = self.own_new(req, s, &d, name.as_bytes(), &path)?;
            Ok((s, path, st))
        })();
        self.new_entry_reply(r, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let (s, ppath, path, st) = self.existing_entry(parent, name.as_bytes())?;
            self.may_change(s, &path)?;
            let rules = s == Store::Host && is_rules_path(&path);
            if rules {
                self.rules.before_sandbox_change(&path);
            }
            self.remove_entry(s, &ppath, name, &path, &st, AtFlags::empty())?;
            if rules {
                self.rules.after_sandbox_change(&path);
            }
            Ok(())
        })();
        empty_reply(r, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let (s, ppath, path, st) = self.existing_entry(parent, name.as_bytes())?;
            if !is_dir(&st) {
                return Err(Errno::ENOTDIR);
            }
            self.may_change(s, &path)?;
            if s == Store::Host {
                // The state counterpart goes first, and only when empty:
                // hidden state content is never deleted.
                match self.read_dir(Store::State, &path) {
                    Ok(v) if !v.is_empty() => return Err(Errno::ENOTEMPTY),
                    Ok(_) => {
                        let d = open_dir(self.root(Store::State), &ppath).map_err(fe)?;
                        match rustix::fs::unlinkat(&d, name, AtFlags::REMOVEDIR) {
                            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                            Err(e) => return Err(fe(e)),
                        }
                    }
                    Err(e) if absent(e) => {}
                    Err(e) => return Err(fe(e)),
                }
            }
            self.remove_entry(s, &ppath, name, &path, &st, AtFlags::REMOVEDIR)?;
            self.rules.invalidate();
            Ok(())
        })();
        empty_reply(r, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let (s, ppath, path) = self.new_entry(parent, link_name.as_bytes(), false)?;
            // Git makes no symlinks in its directories; host Git would
            // read through one.
            if s == Store::Host && self.access(&path) != Access::Free {
                return Err(Errno::EPERM);
            }
            let d = self.dir_fd(s, &ppath, true).map_err(fe)?;
            self.journal(s, Op::Symlink, &path, None)?;
            rustix::fs::symlinkat(target, &d, link_name).map_err(fe)?;
            let st = self.own_new(req, s, &d, link_name.as_bytes(), &path)?;
            Ok((s, path, st))
        })();
        self.new_entry_reply(r, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.do_rename(
            parent,
            name.as_bytes(),
            newparent,
            newname.as_bytes(),
            flags,
        );
        empty_reply(r, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let (s, path) = self.node(ino)?;
            let (nps, nppath) = self.node(newparent)?;
            let to = join(&nppath, newname.as_bytes());
            self.may_change(s, &path)?;
            if self.rename_only(&path) || self.rename_only(&to) {
                return Err(Errno::EPERM);
            }
            if self.route(nps, &to, false) != s {
                return Err(Errno::EXDEV);
            }
            // A rules file changes only through its own name.
            if s == Store::Host && (is_rules_path(&path) || is_rules_path(&to)) {
                return Err(Errno::EPERM);
            }
            if s == Store::Host && self.access(&to) != Access::Free {
                let src = self.stat_in(s, &path).map_err(fe)?.ok_or(Errno::ENOENT)?;
                if is_symlink(&src) {
                    return Err(Errno::EPERM);
                }
            }
            if nps == Store::Host {
                self.may_create(s, &to)?;
            }
            let (pp, name) = split(&path);
            let sd = open_dir(self.root(s), pp).map_err(fe)?;
            let dd = self.dir_fd(s, &nppath, true).map_err(fe)?;
            self.journal(s, Op::Link, &path, Some(&to))?;
            rustix::fs::linkat(&sd, OsStr::from_bytes(name), &dd, newname, AtFlags::empty())
                .map_err(fe)?;
            let st = self.stat_in(s, &to).map_err(fe)?.ok_or(Errno::ENOENT)?;
            Ok((s, to, st))
        })();
        self.new_entry_reply(r, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.with_file_slot(|| {
            let (mut s, path) = self.node(ino)?;
            let of = OFlags::from_bits_retain(flags.0 as u32)
                & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY);
            let mut copied_up = false;
            if of.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC | OFlags::APPEND) {
                if s == Store::Host && self.copies_up(&path) {
                    self.copy_up(&path)?;
                    (s, copied_up) = (Store::State, true);
                }
                self.may_change(s, &path)?;
                if self.rename_only(&path) {
                    return Err(Errno::EPERM);
                }
            }
            let writes =
                of.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC | OFlags::APPEND);
            // Only a handle that writes can change a rules file.
            let rules = (writes && s == Store::Host && is_rules_path(&path)).then(|| path.clone());
            if let Some(r) = &rules {
                self.rules.before_sandbox_change(r);
            }
            if writes && of.contains(OFlags::TRUNC) {
                self.journal(s, Op::Write, &path, None)?;
            }
            let fd = open_beneath(self.root(s), &path, of | OFlags::NOFOLLOW).map_err(fe)?;
            // The name may now be another file (replaced on the host by a
            // rename): never serve it under this node. (A copy-up serves
            // the private copy under the host's node until the next
            // lookup, which finds the copy.)
            if !copied_up {
                self.same_file(ino.0, &rustix::fs::fstat(&fd).map_err(fe)?)?;
            }
            if let (Some(r), true) = (&rules, of.contains(OFlags::TRUNC)) {
                self.rules.after_sandbox_change(r);
            }
            let writer = if writes {
                let st = rustix::fs::fstat(&fd).map_err(fe)?;
                Some(self.add_writer(&st))
            } else {
                None
            };
            let fh = self.new_fh(Handle::File {
                file: Arc::new(File::from(fd)),
                rules,
                writer,
                host_path: (writes && s == Store::Host).then(|| path.clone()),
            });
            if s == Store::State {
                self.quota.opened(fh);
            }
            Ok((fh, self.open_flags(&path)))
        });
        match r {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let r = (|| {
            let (f, _) = self.file(fh)?;
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Errno::from(e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        })();
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            let (f, rules) = self.file(fh)?;
            if let Some(p) = self.written_path(fh) {
                self.journal.note(Op::Write, &p, None)?;
            }
            if self.quota.counts(fh.0) {
                let end = offset.saturating_add(data.len() as u64);
                let before = self.quota.admit(self.state.as_fd(), f.as_fd(), end)?;
                let done = f.write_all_at(data, offset);
                self.quota.settle(f.as_fd(), before);
                done.map_err(Errno::from)?;
            } else {
                f.write_all_at(data, offset).map_err(Errno::from)?;
            }
            if let Some(r) = rules {
                self.rules.after_sandbox_change(&r);
            }
            Ok(data.len() as u32)
        })();
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do on close (no locks are served, writes are not
        // buffered): ENOSYS makes the kernel stop sending FLUSH at all, one
        // round trip less for every close inside.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = lock(&self.handles).remove(&fh.0);
        self.quota.closed(fh.0);
        if let Some(Handle::File { rules, writer, .. }) = h {
            self.unreserve_file();
            if let Some(w) = writer {
                self.drop_writer(w);
            }
            // Nothing to record: every change was recorded as it was made.
            // (gVisor may release a handle long after, when the host may
            // have changed the file itself.)
            if rules.is_some() {
                self.rules.invalidate();
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.file(fh).and_then(|(f, _)| {
            if datasync {
                rustix::fs::fdatasync(f.as_fd())
            } else {
                rustix::fs::fsync(f.as_fd())
            }
            .map_err(fe)
        });
        empty_reply(r, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let (s, path) = self.node(ino)?;
            let entries = self.list(s, &path, ino.0).map_err(fe)?;
            Ok(self.new_fh(Handle::Dir(Arc::new(entries))))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.dir_entries(fh, _ino, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(e.ino),
                (i + 1) as u64,
                e.kind,
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        let entries = match self.dir_entries(fh, ino, offset) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        let (_, dir) = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let off = (i + 1) as u64;
            let full = match &e.st {
                // `.` and `..`: the kernel takes no reference on them.
                None => {
                    let a = FileAttr {
                        ino: INodeNo(e.ino),
                        size: 0,
                        blocks: 0,
                        atime: UNIX_EPOCH,
                        mtime: UNIX_EPOCH,
                        ctime: UNIX_EPOCH,
                        crtime: UNIX_EPOCH,
                        kind: FileType::Directory,
                        perm: 0o755,
                        nlink: 2,
                        uid: 0,
                        gid: 0,
                        rdev: 0,
                        blksize: 4096,
                        flags: 0,
                    };
                    reply.add(
                        INodeNo(e.ino),
                        off,
                        OsStr::from_bytes(&e.name),
                        &Duration::ZERO,
                        &a,
                        Generation(0),
                    )
                }
                // Every other entry counts as a lookup: take the reference
                // first, give it back if the entry did not fit.
                Some((store, st)) => {
                    let child = join(&dir, &e.name);
                    let ino = lock(&self.table).intern(*store, &child, st);
                    let full = reply.add(
                        INodeNo(ino),
                        off,
                        OsStr::from_bytes(&e.name),
                        &self.ttl_for(&child),
                        &self.attr(ino, st),
                        Generation(0),
                    );
                    if full {
                        self.forget(req, INodeNo(ino), 1);
                    }
                    full
                }
            };
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.handles).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match rustix::fs::fstatfs(&self.host) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                255,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.with_file_slot(|| {
            let (s, ppath, path) = self.new_entry(parent, name.as_bytes(), false)?;
            let d = self.dir_fd(s, &ppath, true).map_err(fe)?;
            let rules = (s == Store::Host && is_rules_path(&path)).then(|| path.clone());
            if let Some(r) = &rules {
                self.rules.before_sandbox_change(r);
            }
            let of = OFlags::from_bits_retain(flags as u32) & !OFlags::NOCTTY
                | OFlags::CREATE
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC;
            if s == Store::State {
                self.quota.admit_entry(self.root(s))?;
            }
            self.journal(s, Op::Create, &path, None)?;
            let fd =
                rustix::fs::openat(&d, name, of, Mode::from_raw_mode(mode & 0o7777)).map_err(fe)?;
            self.own(req, d.as_fd(), name.as_bytes());
            let st = rustix::fs::fstat(&fd).map_err(fe)?;
            if let Some(r) = &rules {
                self.rules.after_sandbox_change(r);
            }
            let writer = Some(self.add_writer(&st));
            let fh = self.new_fh(Handle::File {
                file: Arc::new(File::from(fd)),
                rules,
                writer,
                host_path: (s == Store::Host).then(|| path.clone()),
            });
            if s == Store::State {
                self.quota.added(&st);
                self.quota.opened(fh);
            }
            let ino = lock(&self.table).intern(s, &path, &st);
            Ok((ino, st, fh, self.ttl_for(&path)))
        });
        match r {
            Ok((ino, st, fh, ttl)) => reply.created(
                &ttl,
                &self.attr(ino, &st),
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.file(fh).and_then(|(f, _)| {
            if let Some(p) = self.written_path(fh) {
                self.journal.note(Op::Write, &p, None)?;
            }
            let counted = self.quota.counts(fh.0);
            let before = if counted {
                let end = offset.saturating_add(length);
                self.quota.admit(self.state.as_fd(), f.as_fd(), end)?
            } else {
                0
            };
            let done = rustix::fs::fallocate(
                f.as_fd(),
                rustix::fs::FallocateFlags::from_bits_retain(mode as u32),
                offset,
                length,
            );
            if counted {
                self.quota.settle(f.as_fd(), before);
            }
            done.map_err(fe)
        });
        empty_reply(r, reply);
    }
}
