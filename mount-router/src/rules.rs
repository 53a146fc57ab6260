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
//! Leaves to others: deciding where a path goes (the router), and
//! confinement (landlock keeps even a bug here within the workspace).

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

/// Rules files larger than this are refused (treated as absent, with a
/// warning): a bound on what one file can make the router allocate.
pub const MAX_RULES_FILE: u64 = 16 << 20;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

struct Cached {
    stamp: Option<Stamp>,
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
            std::fs::File::from(fd)
                .take(MAX_RULES_FILE)
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
        self.baseline.after_change(rel, st.map(Stamp::key));
        self.invalidate();
    }

    /// Forget what was validated: the next decision re-checks every rules
    /// file it uses.
    pub fn invalidate(&self) {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = c.epoch;
        let now = Instant::now();
        let bl = &self.baseline;
        let mut globals = Both::default();
        for (i, src) in self.globals.iter().enumerate() {
            let slot = &mut c.globals[i];
            globals.push(refresh(self.host.as_fd(), src, slot, epoch, now, bl));
        }
        // Per-directory lists, root first; consulted deepest first.
        let mut stack = Both::default();
        stack.push(dir_list(self.host.as_fd(), &mut c, b"", epoch, now, bl));
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
            stack.push(dir_list(self.host.as_fd(), &mut c, prefix, epoch, now, bl));
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
}

impl Both {
    fn push(&mut self, l: Lists) {
        let same = match (&l.now, &l.host) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        self.differ |= !same;
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
    if !c.files.contains_key(dir) {
        c.files.insert(dir.to_vec(), None);
    }
    let slot = c.files.get_mut(dir).expect("inserted above");
    refresh(host, &Source::Workspace(rel), slot, epoch, now, bl)
}

/// Re-validates one cached rules file, reloading it when it changed.
fn refresh(
    host: BorrowedFd<'_>,
    src: &Source,
    slot: &mut Option<Cached>,
    epoch: u64,
    now: Instant,
    bl: &crate::baseline::Baseline,
) -> Lists {
    let lists = |c: &Cached| Lists {
        now: c.list.clone(),
        host: c.host_list.clone(),
    };
    if let Some(c) = slot {
        if c.epoch == epoch && now.duration_since(c.checked) < REVALIDATE {
            return lists(c);
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
                return lists(c);
            }
            return Lists::default();
        }
    };
    let stamp = fd.as_ref().and_then(|fd| stamp(fd.as_fd()));
    if let Some(c) = slot.as_mut() {
        if c.stamp == stamp {
            c.checked = now;
            c.epoch = epoch;
            return lists(c);
        }
    }
    let list = match (fd, stamp) {
        (Some(fd), Some(st)) if st.size <= MAX_RULES_FILE => {
            let mut buf = Vec::with_capacity(st.size as usize);
            let mut f = std::fs::File::from(fd);
            match f.read_to_end(&mut buf) {
                Ok(_) => Some(Arc::new(parse_list(&buf, src))),
                Err(e) => {
                    eprintln!("lazaret-mount-router: warning: cannot read {src:?}: {e}; its rules are not applied");
                    None
                }
            }
        }
        (Some(_), Some(st)) => {
            eprintln!(
                "lazaret-mount-router: warning: {src:?} is {} bytes, over the {MAX_RULES_FILE}-byte limit; its rules are not applied",
                st.size
            );
            None
        }
        _ => None,
    };
    // Who wrote this version: the sandbox (its stamp is the one the
    // router recorded after the sandbox's last change), or the host.
    let host_list = match src {
        Source::Workspace(rel) => match bl.get(rel) {
            Some(rec) if rec.sandbox == stamp.map(Stamp::key) => match slot {
                Some(c) if c.host_list.is_some() || c.list.is_none() => c.host_list.clone(),
                _ => rec.host.map(|b| Arc::new(parse_list(&b, src))),
            },
            Some(_) => {
                bl.host_changed(rel);
                list.clone()
            }
            None => list.clone(),
        },
        Source::Absolute(_) => list.clone(),
    };
    let l = Lists {
        now: list.clone(),
        host: host_list.clone(),
    };
    *slot = Some(Cached {
        stamp,
        list,
        host_list,
        checked: now,
        epoch,
    });
    l
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

impl Stamp {
    fn key(self) -> (u64, u64, u64, (i64, i64), (i64, i64)) {
        (self.dev, self.ino, self.size, self.mtime, self.ctime)
    }
}

fn stamp(fd: BorrowedFd<'_>) -> Option<Stamp> {
    let st = rustix::fs::fstat(fd).ok()?;
    Some(Stamp {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
    })
}
