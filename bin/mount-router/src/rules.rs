//! The ignore decision: is a workspace-relative path matched by the
//! repository's effective Git ignore rules?
//!
//! Enforces: Git's precedence, as `git status` applies it. For a path
//! `a/b/c`, each leading directory (`a`, `a/b`) is tested first, as a
//! directory; if one is ignored, so is everything beneath it (Git never
//! looks inside an ignored directory, so a negation cannot re-include a
//! file whose parent is excluded). Each test consults, first match wins:
//! the `.gitignore` of the deepest directory first, up to the workspace
//! root's, then `$GIT_DIR/info/exclude`, then `core.excludesFile`. The
//! pattern language (globs, `**`, anchoring, directory-only rules, `!`
//! negations, escapes, trailing spaces, case folding under
//! `core.ignoreCase`) is `gix-ignore`'s implementation of Git's.
//!
//! A path with a `.git` component that is reached without an ignored
//! ancestor is never ignored: `.git` always stays on the host.
//!
//! Live changes: every rules file is re-validated (by device, inode, size,
//! mtime and ctime) when it was last checked more than
//! [`REVALIDATE`] ago, or at once after [`Rules::invalidate`], which the
//! router calls whenever a `.gitignore` or `info/exclude` changes through
//! the mount. So edits made through the router apply to the next
//! operation, and host-side edits within [`REVALIDATE`].
//!
//! `.gitignore` files are read from the host workspace only, through the
//! workspace directory descriptor, one component at a time, never through a
//! symlink (Git also refuses symlinked `.gitignore` files) and never beyond
//! the workspace. A `.gitignore` that is itself ignored is still read from
//! the host (what host Git applies); a sandbox copy of it in Ignored
//! Workspace State does not change the routing.
//!
//! Bounded memory: a rules file over [`MAX_RULES_FILE`] bytes or
//! [`MAX_RULES_PER_FILE`] lines, or one that would take the rules kept in
//! memory over [`MAX_RULES_TOTAL_BYTES`] or [`MAX_RULES_TOTAL`] lines, is
//! not parsed: everything beneath its directory (for `info/exclude` and
//! `core.excludesFile`, beneath the workspace root, `.git` aside) is then
//! treated as ignored, the safe side (the sandbox sees less, never more),
//! and the router says why once per file on stderr. At most
//! [`MAX_CACHED_DIRS`] directories are remembered; beyond, those not used
//! within [`REVALIDATE`] are forgotten (and read again when next needed).
//!
//! Leaves to others: deciding where a path goes (the router), and
//! confinement (landlock keeps even a bug here within the workspace).

use crate::router::lock;
use crate::sys::Stamp;
use bstr::{BStr, ByteSlice};
use gix_glob::pattern::Case;
use gix_glob::search::pattern::List;
use gix_ignore::search::Ignore;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a rules file is trusted before it is stat'ed again.
pub const REVALIDATE: Duration = Duration::from_millis(100);

/// A rules file larger than this is not read: its directory is treated
/// as ignored (see the module documentation).
pub const MAX_RULES_FILE: u64 = 1 << 20;
/// A rules file of more lines than this is not parsed (same outcome).
pub const MAX_RULES_PER_FILE: usize = 20_000;
/// Bytes of rules files held parsed, over all cached files.
pub const MAX_RULES_TOTAL_BYTES: usize = 16 << 20;
/// Lines of rules files held parsed, over all cached files.
pub const MAX_RULES_TOTAL: usize = 200_000;
/// Directories whose rules (or their absence) are remembered.
pub const MAX_CACHED_DIRS: usize = 65_536;
/// Rules files whose bound is reported by name; beyond, one line says
/// that further ones are not.
const MAX_REPORTED: usize = 256;

/// Why a rules file was not applied, and its directory hidden instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBound {
    #[error("{0} bytes, over the {MAX_RULES_FILE}-byte bound per rules file")]
    FileBytes(u64),
    #[error("{0} lines, over the {MAX_RULES_PER_FILE}-line bound per rules file")]
    FileLines(usize),
    #[error("the rules held would exceed {MAX_RULES_TOTAL_BYTES} bytes or {MAX_RULES_TOTAL} lines in total")]
    Total,
}

/// Bytes and lines of parsed rules held by the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub bytes: usize,
    pub lines: usize,
}

impl Cost {
    pub fn of(bytes: &[u8]) -> Cost {
        Cost {
            bytes: bytes.len(),
            lines: bytes.iter().filter(|b| **b == b'\n').count() + 1,
        }
    }
}

/// The rules held in memory, against the total bounds.
#[derive(Debug, Default)]
pub struct Budget {
    held: Cost,
    reported: std::collections::HashSet<String>,
}

impl Budget {
    /// Whether a file of cost `c` may be parsed: its own bounds, then the
    /// total with what is held already.
    pub fn check(&self, c: Cost) -> Result<(), OverBound> {
        if c.bytes as u64 > MAX_RULES_FILE {
            return Err(OverBound::FileBytes(c.bytes as u64));
        }
        if c.lines > MAX_RULES_PER_FILE {
            return Err(OverBound::FileLines(c.lines));
        }
        let bytes = self.held.bytes + c.bytes;
        let lines = self.held.lines + c.lines;
        if bytes > MAX_RULES_TOTAL_BYTES || lines > MAX_RULES_TOTAL {
            return Err(OverBound::Total);
        }
        Ok(())
    }

    fn add(&mut self, c: Cost) {
        self.held.bytes += c.bytes;
        self.held.lines += c.lines;
    }

    fn sub(&mut self, c: Cost) {
        self.held.bytes = self.held.bytes.saturating_sub(c.bytes);
        self.held.lines = self.held.lines.saturating_sub(c.lines);
    }

    /// Says once per rules file why its directory is hidden.
    fn report(&mut self, src: &Source, why: &OverBound) {
        let name = match src {
            // Debug forms: quoted, control bytes escaped.
            Source::Workspace(rel) => format!("{:?}", rel.as_bstr()),
            Source::Absolute(p) => format!("{p:?}"),
        };
        if self.reported.len() > MAX_REPORTED || self.reported.contains(&name) {
            return;
        }
        if self.reported.len() == MAX_REPORTED {
            lazaret_protocol::log_line!(
                "lazaret-mount-router: further rules files over their bounds are not reported"
            );
            self.reported.insert(String::new());
            return;
        }
        lazaret_protocol::log_line!("lazaret-mount-router: {name}: {why}; its rules are not applied and everything beneath its directory is treated as ignored");
        self.reported.insert(name);
    }
}

const PARSE: Ignore = Ignore {
    support_precious: false,
};

/// Where a rules file is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A path relative to the workspace, opened beneath it without
    /// symlinks: a `.gitignore` (anchored at its directory) or the
    /// repository's `.git/info/exclude` (anchored at the root).
    Workspace(Vec<u8>),
    /// An absolute host path (`core.excludesFile`, or the `info/exclude` of
    /// a linked worktree's common directory); symlinks are followed, as Git
    /// does for these.
    Absolute(PathBuf),
}

struct Cached {
    stamp: Option<Stamp>,
    /// Why the file was not applied: its directory is hidden.
    over: Option<OverBound>,
    /// What its lists hold against the [`Budget`] (the host's list
    /// counts only when it is another than the current one).
    list_cost: Cost,
    host_cost: Cost,
    list: Option<Arc<List<Ignore>>>,
    /// The rules as the host last wrote them (see [`crate::baseline`]);
    /// the same as `list` unless the sandbox changed the file.
    host_list: Option<Arc<List<Ignore>>>,
    checked: Instant,
    epoch: u64,
}

/// The current rules of one file and the host's.
#[derive(Clone, Default)]
struct Lists {
    now: Option<Arc<List<Ignore>>>,
    host: Option<Arc<List<Ignore>>>,
    /// Over a bound: everything beneath the file's directory is ignored.
    over: bool,
}

/// The effective ignore rules of one workspace.
pub struct Rules {
    host: OwnedFd,
    case: Case,
    /// `info/exclude`, then `core.excludesFile` (lower precedence last).
    globals: Vec<Source>,
    cache: Mutex<Cache>,
    baseline: crate::baseline::Baseline,
}

struct Cache {
    epoch: u64,
    files: HashMap<Vec<u8>, Option<Cached>>,
    globals: Vec<Option<Cached>>,
    budget: Budget,
    /// When unused directories were last forgotten (at most once per
    /// [`REVALIDATE`]: it walks the whole cache).
    forgot: Option<Instant>,
}

impl Rules {
    /// `host` is a directory descriptor of the workspace. `info_exclude`
    /// and `excludes_file` are the repository's `info/exclude` and
    /// `core.excludesFile` (either may be absent).
    pub fn new(
        host: OwnedFd,
        info_exclude: Option<Source>,
        excludes_file: Option<Source>,
        ignore_case: bool,
        baseline: crate::baseline::Baseline,
    ) -> Rules {
        let globals: Vec<Source> = info_exclude.into_iter().chain(excludes_file).collect();
        let n = globals.len();
        Rules {
            host,
            case: if ignore_case {
                Case::Fold
            } else {
                Case::Sensitive
            },
            globals,
            cache: Mutex::new(Cache {
                epoch: 0,
                files: HashMap::new(),
                globals: (0..n).map(|_| None).collect(),
                budget: Budget::default(),
                forgot: None,
            }),
            baseline,
        }
    }

    /// Before the sandbox changes the rules file `rel` (workspace
    /// relative): the host's content is remembered once.
    pub fn before_sandbox_change(&self, rel: &[u8]) {
        let host = self.host.as_fd();
        self.baseline.before_change(rel, || {
            let fd = open_rules(host, &Source::Workspace(rel.to_vec())).ok()??;
            let mut buf = Vec::new();
            // One byte more than the bound, so a host file over it stays
            // over it (and its directory hidden) once the sandbox edits it.
            std::fs::File::from(fd)
                .take(MAX_RULES_FILE + 1)
                .read_to_end(&mut buf)
                .ok()?;
            Some(buf)
        });
    }

    /// After the sandbox changed the rules file `rel`.
    pub fn after_sandbox_change(&self, rel: &[u8]) {
        let st = open_rules(self.host.as_fd(), &Source::Workspace(rel.to_vec()))
            .ok()
            .flatten()
            .and_then(|fd| stamp(fd.as_fd()));
        self.baseline.after_change(rel, st);
        self.invalidate();
    }

    /// Forget what was validated: the next decision re-checks every rules
    /// file it uses.
    pub fn invalidate(&self) {
        let mut c = lock(&self.cache);
        c.epoch += 1;
    }

    /// Whether `path` (workspace-relative, `/`-separated, no leading `/`,
    /// no `.` or `..` components) is ignored. `is_dir` says whether it is
    /// (or would be created as) a directory.
    pub fn is_ignored(&self, path: &[u8], is_dir: bool) -> bool {
        let (file, dir) = self.is_ignored_both(path);
        if is_dir {
            dir
        } else {
            file
        }
    }

    /// [`Rules::is_ignored`] for both kinds at once: (as a non-directory,
    /// as a directory). The leading directories are walked once.
    pub fn is_ignored_both(&self, path: &[u8]) -> (bool, bool) {
        if path.is_empty() {
            return (false, false);
        }
        let mut guard = lock(&self.cache);
        let c = &mut *guard;
        let epoch = c.epoch;
        let now = Instant::now();
        let bl = &self.baseline;
        forget_unused(c, now);
        let mut globals = Both::default();
        for (i, src) in self.globals.iter().enumerate() {
            let slot = &mut c.globals[i];
            globals.push(refresh(
                self.host.as_fd(),
                src,
                slot,
                &mut c.budget,
                epoch,
                now,
                bl,
            ));
        }
        // Per-directory lists, root first; consulted deepest first.
        let mut stack = Both::default();
        stack.push(dir_list(self.host.as_fd(), c, b"", epoch, now, bl));
        // Over a bound, everything beneath is hidden (the root's `.git`
        // aside: it stays the host's, under Git Sentry).
        let mut hide = globals.over || stack.over;
        let mut start = 0;
        loop {
            let next = path[start..]
                .iter()
                .position(|&b| b == b'/')
                .map(|p| start + p);
            let prefix = match next {
                Some(p) => &path[..p],
                None => path,
            };
            if hide && !(start == 0 && prefix == b".git") {
                return (true, true);
            }
            if &prefix[start..] == b".git" {
                return (false, false);
            }
            if next.is_none() {
                return (
                    stack.matches(&globals, prefix, false, self.case),
                    stack.matches(&globals, prefix, true, self.case),
                );
            }
            if stack.matches(&globals, prefix, true, self.case) {
                return (true, true);
            }
            let l = dir_list(self.host.as_fd(), c, prefix, epoch, now, bl);
            hide = l.over;
            stack.push(l);
            start = prefix.len() + 1;
        }
    }
}

/// The lists in force, as they are now and as the host wrote them.
#[derive(Default)]
struct Both {
    now: Vec<Arc<List<Ignore>>>,
    host: Vec<Arc<List<Ignore>>>,
    /// Whether any file's host rules differ from its current ones.
    differ: bool,
    /// Whether the last file pushed is over a bound (for globals: any).
    over: bool,
}

impl Both {
    fn push(&mut self, l: Lists) {
        let same = match (&l.now, &l.host) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        self.differ |= !same;
        self.over |= l.over;
        self.now.extend(l.now);
        self.host.extend(l.host);
    }

    /// Ignored by the rules as they are, or as the host wrote them: the
    /// sandbox can add rules, never take one of the host's away.
    fn matches(&self, globals: &Both, path: &[u8], is_dir: bool, case: Case) -> bool {
        matches(&self.now, &globals.now, path, is_dir, case)
            || ((self.differ || globals.differ)
                && matches(&self.host, &globals.host, path, is_dir, case))
    }
}

fn matches(
    stack: &[Arc<List<Ignore>>],
    globals: &[Arc<List<Ignore>>],
    path: &[u8],
    is_dir: bool,
    case: Case,
) -> bool {
    let rel: &BStr = path.as_bstr();
    let basename_pos = rel.rfind_byte(b'/').map(|p| p + 1);
    for list in stack.iter().rev().chain(globals.iter()) {
        if let Some(m) = gix_ignore::search::pattern_matching_relative_path(
            list,
            rel,
            basename_pos,
            Some(is_dir),
            case,
        ) {
            return !m.pattern.is_negative();
        }
    }
    false
}

fn dir_list(
    host: BorrowedFd<'_>,
    c: &mut Cache,
    dir: &[u8],
    epoch: u64,
    now: Instant,
    bl: &crate::baseline::Baseline,
) -> Lists {
    let mut rel = dir.to_vec();
    if !rel.is_empty() {
        rel.push(b'/');
    }
    rel.extend_from_slice(b".gitignore");
    let slot = c.files.entry(dir.to_vec()).or_insert(None);
    refresh(
        host,
        &Source::Workspace(rel),
        slot,
        &mut c.budget,
        epoch,
        now,
        bl,
    )
}

/// Beyond [`MAX_CACHED_DIRS`] directories, or near the total bounds,
/// forgets the directories not used within [`REVALIDATE`] (and what their
/// rules held); they are read again when next needed.
fn forget_unused(c: &mut Cache, now: Instant) {
    let held = c.budget.held;
    let near = held.bytes > MAX_RULES_TOTAL_BYTES / 2 || held.lines > MAX_RULES_TOTAL / 2;
    if c.files.len() <= MAX_CACHED_DIRS && !near {
        return;
    }
    if c.forgot.is_some_and(|t| now.duration_since(t) < REVALIDATE) {
        return;
    }
    c.forgot = Some(now);
    let budget = &mut c.budget;
    c.files.retain(|_, slot| match slot {
        Some(k) if now.duration_since(k.checked) < REVALIDATE => true,
        Some(k) => {
            budget.sub(k.list_cost);
            budget.sub(k.host_cost);
            false
        }
        None => false,
    });
}

/// Re-validates one cached rules file, reloading it when it changed.
#[allow(clippy::too_many_arguments)]
fn refresh(
    host: BorrowedFd<'_>,
    src: &Source,
    slot: &mut Option<Cached>,
    budget: &mut Budget,
    epoch: u64,
    now: Instant,
    bl: &crate::baseline::Baseline,
) -> Lists {
    let (fd, stamp) = match revalidate(host, src, slot, epoch, now) {
        Revalidated::Current(l) => return l,
        Revalidated::Changed(fd, stamp) => (fd, stamp),
    };
    // What this slot held is released first: the file's new version is
    // judged against the rest.
    let prev_host = slot.take().and_then(|c| {
        budget.sub(c.list_cost);
        budget.sub(c.host_cost);
        let reusable = c.over.is_none() && (c.host_list.is_some() || c.list.is_none());
        reusable.then_some((c.host_list, c.host_cost))
    });
    let (list, mut list_cost, mut over) = read_list(fd, stamp, src, budget);
    budget.add(list_cost);
    let (host_list, mut host_cost, host_over) =
        host_version(src, stamp, prev_host, &list, budget, bl);
    if host_over.is_some() {
        over = host_over;
    }
    budget.add(host_cost);
    let (list, host_list) = match &over {
        Some(why) => {
            budget.report(src, why);
            budget.sub(list_cost);
            budget.sub(host_cost);
            list_cost = Cost::default();
            host_cost = Cost::default();
            (None, None)
        }
        None => (list, host_list),
    };
    let l = Lists {
        now: list.clone(),
        host: host_list.clone(),
        over: over.is_some(),
    };
    *slot = Some(Cached {
        stamp,
        over,
        list_cost,
        host_cost,
        list,
        host_list,
        checked: now,
        epoch,
    });
    l
}

impl Cached {
    fn lists(&self) -> Lists {
        Lists {
            now: self.list.clone(),
            host: self.host_list.clone(),
            over: self.over.is_some(),
        }
    }
}

/// A cached rules file, checked again.
enum Revalidated {
    /// Its cached lists still hold.
    Current(Lists),
    /// It changed (or was never read): opened anew (none if it does not
    /// exist), with its stamp.
    Changed(Option<OwnedFd>, Option<Stamp>),
}

fn revalidate(
    host: BorrowedFd<'_>,
    src: &Source,
    slot: &mut Option<Cached>,
    epoch: u64,
    now: Instant,
) -> Revalidated {
    if let Some(c) = slot {
        if c.epoch == epoch && now.duration_since(c.checked) < REVALIDATE {
            return Revalidated::Current(c.lists());
        }
    }
    let fd = match open_rules(host, src) {
        Ok(fd) => fd,
        // Present but unreadable (for example replaced by an editor, and
        // the new file is not the one landlock allows): keep the rules
        // last read rather than silently dropping them.
        Err(_) => {
            if let Some(c) = slot.as_mut() {
                c.checked = now;
                c.epoch = epoch;
                return Revalidated::Current(c.lists());
            }
            return Revalidated::Current(Lists::default());
        }
    };
    let stamp = fd.as_ref().and_then(|fd| stamp(fd.as_fd()));
    if let Some(c) = slot.as_mut() {
        if c.stamp == stamp {
            c.checked = now;
            c.epoch = epoch;
            return Revalidated::Current(c.lists());
        }
    }
    Revalidated::Changed(fd, stamp)
}

/// Reads and parses the rules file `fd` (of `src`), within the bounds:
/// its rules, their cost, and the bound it is over if it is.
fn read_list(
    fd: Option<OwnedFd>,
    stamp: Option<Stamp>,
    src: &Source,
    budget: &Budget,
) -> (Option<Arc<List<Ignore>>>, Cost, Option<OverBound>) {
    let mut over = None;
    let mut list_cost = Cost::default();
    let list = match (fd, stamp) {
        (Some(_), Some(st)) if st.size > MAX_RULES_FILE => {
            over = Some(OverBound::FileBytes(st.size));
            None
        }
        (Some(fd), Some(st)) => {
            let mut buf = Vec::with_capacity(st.size as usize);
            // Bounded even if the file grew since the stat.
            match std::fs::File::from(fd)
                .take(MAX_RULES_FILE + 1)
                .read_to_end(&mut buf)
            {
                Ok(_) => match budget.check(Cost::of(&buf)) {
                    Ok(()) => {
                        list_cost = Cost::of(&buf);
                        Some(Arc::new(parse_list(&buf, src)))
                    }
                    Err(why) => {
                        over = Some(why);
                        None
                    }
                },
                Err(e) => {
                    lazaret_protocol::log_line!("lazaret-mount-router: warning: cannot read {src:?}: {e}; its rules are not applied");
                    None
                }
            }
        }
        _ => None,
    };
    (list, list_cost, over)
}

/// The host's version of the rules `list` just read: who wrote this
/// version, the sandbox (its stamp is the one the router recorded after
/// the sandbox's last change), or the host. For the sandbox's, the
/// host's last (`prev_host`, or parsed from the baseline); its cost, and
/// the bound it is over if it is.
fn host_version(
    src: &Source,
    stamp: Option<Stamp>,
    prev_host: Option<(Option<Arc<List<Ignore>>>, Cost)>,
    list: &Option<Arc<List<Ignore>>>,
    budget: &Budget,
    bl: &crate::baseline::Baseline,
) -> (Option<Arc<List<Ignore>>>, Cost, Option<OverBound>) {
    let mut over = None;
    let mut host_cost = Cost::default();
    let host_list = match src {
        Source::Workspace(rel) => match bl.get(rel) {
            Some(rec) if rec.sandbox == stamp => match prev_host {
                Some((h, c)) => {
                    host_cost = c;
                    h
                }
                None => rec.host.and_then(|b| {
                    // The host's version counts against the bounds too.
                    let c = Cost::of(&b);
                    match budget.check(c) {
                        Ok(()) => {
                            host_cost = c;
                            Some(Arc::new(parse_list(&b, src)))
                        }
                        Err(why) => {
                            over = Some(why);
                            None
                        }
                    }
                }),
            },
            Some(_) => {
                bl.host_changed(rel);
                list.clone()
            }
            None => list.clone(),
        },
        Source::Absolute(_) => list.clone(),
    };
    (host_list, host_cost, over)
}

/// Parses a rules file. Workspace `.gitignore` files are anchored at
/// their directory; global files at the workspace root.
pub fn parse_list(bytes: &[u8], src: &Source) -> List<Ignore> {
    let empty = || List {
        patterns: Vec::new(),
        source: None,
        base: None,
    };
    match src {
        // A `.gitignore` is anchored at its directory.
        Source::Workspace(rel) if rel == b".gitignore" || rel.ends_with(b"/.gitignore") => {
            let p = Path::new(std::ffi::OsStr::from_bytes(rel));
            List::from_bytes(bytes, p.to_path_buf(), Some(Path::new("")), PARSE)
                .unwrap_or_else(|_| empty())
        }
        // `info/exclude` and `core.excludesFile` at the workspace root.
        Source::Workspace(rel) => {
            let p = Path::new(std::ffi::OsStr::from_bytes(rel));
            List::from_bytes(bytes, p.to_path_buf(), None, PARSE).unwrap_or_else(|_| empty())
        }
        Source::Absolute(p) => {
            List::from_bytes(bytes, p.clone(), None, PARSE).unwrap_or_else(|_| empty())
        }
    }
}

/// Opens a rules file: `Ok(None)` when there is none (absent, a symlink
/// in the workspace, not a regular file), `Err` when it exists but cannot
/// be read.
fn open_rules(host: BorrowedFd<'_>, src: &Source) -> Result<Option<OwnedFd>, rustix::io::Errno> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let r = match src {
        Source::Workspace(rel) => crate::sys::open_beneath(host, rel, flags | OFlags::NOFOLLOW),
        Source::Absolute(p) => rustix::fs::openat(rustix::fs::CWD, p, flags, Mode::empty()),
    };
    let fd = match r {
        Ok(fd) => fd,
        Err(e)
            if e == rustix::io::Errno::NOENT
                || e == rustix::io::Errno::NOTDIR
                || e == rustix::io::Errno::LOOP =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(fd))
}

fn stamp(fd: BorrowedFd<'_>) -> Option<Stamp> {
    rustix::fs::fstat(fd).ok().map(|st| crate::sys::stamp(&st))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_in(ws: &Path) -> Rules {
        let fd = rustix::fs::open(ws, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        Rules::new(
            fd,
            None,
            None,
            false,
            crate::baseline::Baseline::in_memory(),
        )
    }

    fn held(r: &Rules) -> Cost {
        r.cache.lock().unwrap().budget.held
    }

    #[test]
    fn a_rules_file_over_its_bounds_hides_its_directory() {
        let d = tempfile::tempdir().unwrap();
        for dir in ["bytes", "lines", "fine"] {
            std::fs::create_dir(d.path().join(dir)).unwrap();
        }
        // Rules that would ignore nothing here, but too large to read.
        let mut big = b"nomatch\n".repeat((MAX_RULES_FILE as usize) / 8);
        big.extend_from_slice(b"nomatch\n");
        std::fs::write(d.path().join("bytes/.gitignore"), &big).unwrap();
        std::fs::write(
            d.path().join("lines/.gitignore"),
            "\n".repeat(MAX_RULES_PER_FILE),
        )
        .unwrap();
        std::fs::write(d.path().join("fine/.gitignore"), "*.o\n").unwrap();
        let r = rules_in(d.path());
        for p in [
            "bytes/src.rs",
            "bytes/sub/x",
            "bytes/.gitignore",
            "lines/a",
            "lines/.git/config",
        ] {
            assert_eq!(r.is_ignored_both(p.as_bytes()), (true, true), "{p}");
        }
        // The directory itself, and its neighbours, keep their rules.
        assert!(!r.is_ignored(b"bytes", true));
        assert!(!r.is_ignored(b"fine/a.rs", false));
        assert!(r.is_ignored(b"fine/a.o", false));
        assert!(held(&r).bytes < 64, "{:?}", held(&r));
        // Back under the bound, the rules apply again.
        std::fs::write(d.path().join("bytes/.gitignore"), "*.tmp\n").unwrap();
        r.invalidate();
        assert!(!r.is_ignored(b"bytes/src.rs", false));
        assert!(r.is_ignored(b"bytes/a.tmp", false));
    }

    #[test]
    fn a_root_rules_file_over_its_bound_hides_all_but_the_git_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(".gitignore"),
            "\n".repeat(MAX_RULES_PER_FILE + 5),
        )
        .unwrap();
        let r = rules_in(d.path());
        assert!(r.is_ignored(b"README", false));
        assert!(r.is_ignored(b"src", true));
        assert!(!r.is_ignored(b".git", true));
        assert!(!r.is_ignored(b".git/config", false));
    }

    #[test]
    fn rules_held_stay_within_the_total_bounds() {
        let d = tempfile::tempdir().unwrap();
        // Each file just under the per-file bound, ignoring everything.
        let mut body = b"*\n".to_vec();
        body.extend_from_slice(&b"#\n".repeat(MAX_RULES_PER_FILE - 2));
        let n = MAX_RULES_TOTAL / MAX_RULES_PER_FILE + 5;
        for i in 0..n {
            let dir = d.path().join(format!("d{i}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(".gitignore"), &body).unwrap();
        }
        let r = rules_in(d.path());
        for i in 0..n {
            // Ignored by its rules, or hidden over the total: never shown.
            assert!(r.is_ignored(format!("d{i}/x").as_bytes(), false), "d{i}");
            let h = held(&r);
            assert!(
                h.lines <= MAX_RULES_TOTAL && h.bytes <= MAX_RULES_TOTAL_BYTES,
                "{h:?}"
            );
        }
    }

    #[test]
    fn the_budget_checks_each_file_then_the_total() {
        let mut b = Budget::default();
        let file = |lines: usize| Cost {
            bytes: lines * 2,
            lines,
        };
        assert_eq!(
            b.check(Cost {
                bytes: MAX_RULES_FILE as usize + 1,
                lines: 1
            }),
            Err(OverBound::FileBytes(MAX_RULES_FILE + 1))
        );
        assert_eq!(
            b.check(file(MAX_RULES_PER_FILE + 1)),
            Err(OverBound::FileLines(MAX_RULES_PER_FILE + 1))
        );
        for _ in 0..MAX_RULES_TOTAL / MAX_RULES_PER_FILE {
            b.check(file(MAX_RULES_PER_FILE)).unwrap();
            b.add(file(MAX_RULES_PER_FILE));
        }
        assert_eq!(b.check(file(1)), Err(OverBound::Total));
        b.sub(file(MAX_RULES_PER_FILE));
        b.check(file(MAX_RULES_PER_FILE)).unwrap();
        assert_eq!(Cost::of(b"a\nb\n"), Cost { bytes: 4, lines: 3 });
    }
}
