//! `lazaret-mount-router`: the FUSE file system behind Ignored Workspace
//! State.
//!
//! It presents the whole workspace at a mount point and routes each path:
//! paths matched by the repository's effective Git ignore rules live in the
//! Domain's Ignored Workspace State directory, every other path (and
//! `.git`, always) in the host workspace. The rules are Git's own:
//! `.gitignore` at every level, `$GIT_DIR/info/exclude`,
//! `core.excludesFile`, negations, directory-only rules,
//! `core.ignoreCase` (see [`rules`] and [`gitcfg`]); a change to any of them
//! applies to later operations without a restart.
//!
//! # Interface
//!
//! ```text
//! lazaret-mount-router --workspace DIR --state DIR --mountpoint DIR
//!                      [--ready-fd N] [--excludes-file PATH | --no-excludes-file]
//!                      [--cache-ms MS] [--threads N] [--max-open N]
//!                      [--state-max-bytes BYTES]
//!                      [--allow-other] [--die-with-parent]
//! lazaret-mount-router --print-confinement [--workspace DIR --state DIR ...]
//! ```
//!
//! - `--workspace`: the host workspace (the repository's working tree).
//! - `--state`: the Domain's Ignored Workspace State directory; it must
//!   exist, and neither directory may lie beneath the other.
//! - `--mountpoint`: an existing directory; it may be the workspace itself
//!   (the router then covers it), but not a directory beneath either store.
//! - `--ready-fd N`: an inherited descriptor (a pipe's write end). Once the
//!   mount is live and the router is confined, it writes exactly `ready\n`
//!   (`lazaret_protocol::readiness::READY_LINE`) and closes it. If start-up fails, the descriptor is closed without a
//!   byte written, so end of file without `ready\n` means failure (the
//!   reason is on stderr and in the exit status).
//! - `--excludes-file`/`--no-excludes-file`: override `core.excludesFile`.
//!   Otherwise it is resolved as Git does, from `HOME`, `XDG_CONFIG_HOME`
//!   and `GIT_CONFIG_{SYSTEM,GLOBAL,NOSYSTEM}` in the environment.
//! - `--cache-ms`: how long the kernel may cache names and attributes
//!   (default 1000). A name cached when its route changes keeps its old
//!   route for at most this long; new names are always routed afresh.
//! - `--state-max-bytes`: the most the state directory may hold; an
//!   operation that would grow it further fails with `ENOSPC` (see
//!   [`quota`]). Unbounded when not given.
//! - `--threads`: FUSE worker threads (default 2).
//! - `--max-open`: the most files open through the router at once
//!   (default 4096). See "Descriptors" below.
//! - `--allow-other`: let other uids use the mount (kernel permission
//!   checks still apply). Not needed when only runsc's gofer, running as
//!   the router's own uid, touches the mount, as with runsc 20221219.
//! - `--die-with-parent`: exit (SIGKILL) when the parent dies.
//!
//! The router runs in the foreground until the file system is unmounted
//! (exit 0) or it is killed. It cannot unmount by itself once confined
//! (landlock forbids it): the owner unmounts (`umount MNT`), or the mount
//! goes with its mount namespace. If the router dies, the mount stays but
//! every access fails with `ENOTCONN` (Transport endpoint is not
//! connected): never host content in place of ignored content.
//!
//! Exit status: 0 unmounted; 2 bad arguments or directories; 3 start-up
//! failed (mount or confinement); 4 the FUSE session failed.
//!
//! # Descriptors
//!
//! The router holds one descriptor per file open through it, and none per
//! directory handle or per node the kernel caches (nodes are paths,
//! resolved again for each operation). At start it raises its soft
//! `RLIMIT_NOFILE` to the hard limit, and it never holds more than
//! `min(--max-open, soft limit - 64)` open files plus a fixed reserve
//! (the two roots, `/dev/fuse` per worker, a few per operation in
//! flight). An `open` or `create` beyond the bound fails with `EMFILE`
//! for that operation only; the mount stays usable, and the router
//! reports it once on stderr. gVisor keeps files open for the names it
//! caches; `lazaret` bounds that cache with runsc's `--dcache`, so the
//! router's open files follow what the sandbox really uses, not the
//! size of the tree.
//!
//! # Where it runs
//!
//! As root of the Domain's user namespace, in the holder's mount (and PID)
//! namespace, started before `runsc`, so that it dies with the holder and
//! its mount goes with the mount namespace. The bundle then bind-mounts the
//! mount point at `/workspace`; the Git Sentry mounts beneath
//! `/workspace/.git` keep taking their sources from the host workspace
//! directly. It mounts with `mount(2)` itself (never a setuid helper), so
//! it needs `CAP_SYS_ADMIN` over that mount namespace, which root of the
//! owning user namespace has.
//!
//! # Semantics
//!
//! See [`router`] for routing and every refused operation with its errno
//! (cross-store `rename` and `link` give `EXDEV`, device nodes `EPERM`),
//! and [`rules`] for how the rules are evaluated and refreshed. Nested
//! repositories are plain directories of the workspace: their
//! `.gitignore` files apply beneath them (as for Git run inside them) along
//! with the outer rules; their `.git` stays on the host like any `.git`
//! not beneath an ignored directory. A linked worktree (`.git` a `gitdir:`
//! file) uses its common directory's `info/exclude` and `config`.
//!
//! # Confinement
//!
//! Applied after the mount, before the readiness byte (see [`confine`]):
//! capabilities reduced to file ownership and permission overrides,
//! `no_new_privs`, landlock (read-write only beneath the two stores, read
//! only the rules files outside them, `/dev/fuse`; no TCP), and a seccomp
//! allow-list declared as data in `bin/mount-router/src/lazaret-mount-router.json`
//! (the `lazaret-seccomp` crate, compiled at build time).
//! `--print-confinement` prints all of it.

pub mod baseline;
pub mod confine;
pub mod confinement;
pub mod gitcfg;
pub mod index;
pub mod journal;
pub mod linked;
pub mod nodes;
pub mod quota;
pub mod router;
pub mod rules;
pub mod sentry;
pub mod shield;
pub mod sys;

use argh::FromArgs;
use rustix::fd::{AsFd, FromRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `UID:GID`, for `--inside-owner`.
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--inside-owner {s}: expected UID:GID (numbers)");
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    Ok((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?))
}

#[derive(Debug, FromArgs)]
/// FUSE router: Git-ignored workspace paths go to Ignored Workspace State.
pub struct Args {
    /// the host workspace directory
    #[argh(option)]
    pub workspace: Option<PathBuf>,
    /// the Domain's Ignored Workspace State directory
    #[argh(option)]
    pub state: Option<PathBuf>,
    /// where to mount the routed view
    #[argh(option)]
    pub mountpoint: Option<PathBuf>,
    /// inherited descriptor to write `ready\n` to once the mount is live
    #[argh(option)]
    pub ready_fd: Option<i32>,
    /// use this file as `core.excludesFile`
    #[argh(option)]
    pub excludes_file: Option<PathBuf>,
    /// apply no `core.excludesFile`
    #[argh(switch)]
    pub no_excludes_file: bool,
    /// kernel cache lifetime of names and attributes, in milliseconds
    /// (default 1000)
    #[argh(option, default = "1000")]
    pub cache_ms: u64,
    /// where the host's own ignore rules are remembered across the
    /// sandbox's edits of them (a private directory of the Domain Root);
    /// without it they are remembered only while the router runs
    #[argh(option)]
    pub rules_baseline: Option<PathBuf>,
    /// a workspace-relative path to keep read-only inside, with all
    /// beneath it (repeatable)
    #[argh(option)]
    pub protect: Vec<PathBuf>,
    /// enforce Git Sentry only: no path is routed to the state directory
    /// by the ignore rules (Ignored Workspace State off)
    #[argh(switch)]
    pub sentry_only: bool,
    /// UID:GID of the sandbox's user (the profile's `user`): the
    /// developer's entries are reported as its own, and what it creates
    /// stays the developer's on the host
    #[argh(option, from_str_fn(parse_owner))]
    pub inside_owner: Option<(u32, u32)>,
    /// present only this host Git directory (a linked worktree's common
    /// directory or a submodule's Git directory) as the `.git` of
    /// --workspace, which must hold only an empty `.git` directory;
    /// implies --sentry-only
    #[argh(option)]
    pub git_dir: Option<PathBuf>,
    /// the most files open through the router at once; further opens
    /// fail with EMFILE (also bounded by RLIMIT_NOFILE, raised to the
    /// hard limit at start, less a reserve of 64)
    #[argh(option, default = "router::DEFAULT_MAX_OPEN")]
    pub max_open: usize,
    /// FUSE worker threads, 1 to 64 (default 2)
    #[argh(option, default = "2")]
    pub threads: u16,
    /// the most bytes the state directory may hold; growth past it fails
    /// with ENOSPC (see the `quota` module); unbounded when not given
    #[argh(option)]
    pub state_max_bytes: Option<u64>,
    /// let processes of other uids use the mount (subject to the kernel's
    /// permission checks); by default only the mounting uid may
    #[argh(switch)]
    pub allow_other: bool,
    /// exit when the parent process dies
    #[argh(switch)]
    pub die_with_parent: bool,
    /// print the confinement (landlock, seccomp, capabilities) and exit
    #[argh(switch)]
    pub print_confinement: bool,
}

impl Args {
    /// Parses `argv` (without the program name). `Err` carries what to
    /// print and the exit status: 0 for `--help` (on stdout), 2 for bad
    /// arguments (on stderr).
    pub fn parse_from(argv: &[&str]) -> Result<Args, (String, i32)> {
        let a = Args::from_args(&["lazaret-mount-router"], argv).map_err(|e| {
            (
                e.output,
                match e.status {
                    Ok(()) => 0,
                    Err(()) => 2,
                },
            )
        })?;
        if a.excludes_file.is_some() && a.no_excludes_file {
            return Err((
                "--excludes-file and --no-excludes-file exclude each other".into(),
                2,
            ));
        }
        if !(1..=64).contains(&a.threads) {
            return Err((format!("--threads {}: give 1 to 64", a.threads), 2));
        }
        Ok(a)
    }
}

/// Everything that stops the router, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} is required (see --help)")]
    Missing(&'static str),
    #[error("cannot open {what} {path}: {source}; create it, or pass an existing directory")]
    Open {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{inner} lies beneath {outer}: the state directory and the workspace must be disjoint, and the mount point must not be beneath the state directory or strictly beneath the workspace")]
    Overlap { inner: PathBuf, outer: PathBuf },
    #[error("--protect {0}: give a path relative to the workspace, without `.`, `..` or empty components")]
    Protect(PathBuf),
    #[error("--ready-fd {0} is not an open descriptor: pass the write end of a pipe the router inherits")]
    ReadyFd(i32),
    #[error(transparent)]
    Git(#[from] gitcfg::GitCfgError),
    #[error("cannot mount the router at {path}: {source}; check that /dev/fuse is read-write for you (chmod 0666 /dev/fuse) and that you are root of a user namespace owning this mount namespace")]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Confine(#[from] confine::ConfineError),
    #[error(transparent)]
    Shield(#[from] shield::ShieldError),
    #[error(transparent)]
    GitDir(#[from] linked::GitDirError),
    #[error("the FUSE session failed: {0}")]
    Session(std::io::Error),
}

impl Error {
    /// The documented exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Missing(_)
            | Error::Open { .. }
            | Error::Overlap { .. }
            | Error::ReadyFd(_)
            | Error::Protect(_)
            | Error::Git(_) => 2,
            Error::Mount { .. } | Error::Confine(_) | Error::Shield(_) | Error::GitDir(_) => 3,
            Error::Session(_) => 4,
        }
    }
}

fn open_root(what: &'static str, p: &Path) -> Result<(OwnedFd, PathBuf), Error> {
    let err = |source| Error::Open {
        what,
        path: p.to_path_buf(),
        source,
    };
    let canon = p.canonicalize().map_err(err)?;
    let fd = rustix::fs::open(
        &canon,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(e.into()))?;
    Ok((fd, canon))
}

fn beneath(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

/// Resolved start-up inputs, shared by `run` and `--print-confinement`.
pub struct Plan {
    pub workspace: PathBuf,
    pub state: PathBuf,
    pub mountpoint: PathBuf,
    pub git: gitcfg::GitSetup,
    /// `--rules-baseline`, canonical.
    pub baseline: Option<PathBuf>,
}

/// `--mountpoint`, canonical. Resolved before the FUSE mount: once
/// mounted, a look at it waits for the router itself to answer.
fn mountpoint(args: &Args) -> Result<PathBuf, Error> {
    let mp = args
        .mountpoint
        .as_ref()
        .ok_or(Error::Missing("--mountpoint"))?;
    mp.canonicalize().map_err(|source| Error::Open {
        what: "mount point",
        path: mp.clone(),
        source,
    })
}

fn plan(args: &Args, mp: PathBuf) -> Result<(Plan, OwnedFd, OwnedFd), Error> {
    let ws = args
        .workspace
        .as_ref()
        .ok_or(Error::Missing("--workspace"))?;
    let st = args.state.as_ref().ok_or(Error::Missing("--state"))?;
    let (host_fd, ws) = open_root("workspace", ws)?;
    let (state_fd, st) = open_root("state directory", st)?;
    let mut pairs = vec![(&st, &ws), (&ws, &st), (&mp, &st)];
    let git_dir = args
        .git_dir
        .as_ref()
        .map(|g| g.canonicalize().unwrap_or_else(|_| g.clone()));
    if let Some(g) = &git_dir {
        pairs.extend([(&st, g), (g, &st), (&mp, g), (g, &mp)]);
    }
    for (a, b) in pairs {
        if beneath(a, b) {
            return Err(Error::Overlap {
                inner: a.clone(),
                outer: b.clone(),
            });
        }
    }
    if mp != ws && beneath(&mp, &ws) {
        return Err(Error::Overlap {
            inner: mp,
            outer: ws,
        });
    }
    let choice = if args.no_excludes_file {
        gitcfg::ExcludesChoice::Off
    } else if let Some(p) = &args.excludes_file {
        gitcfg::ExcludesChoice::Path(p.clone())
    } else {
        gitcfg::ExcludesChoice::FromConfig
    };
    let git = gitcfg::discover(&ws, &choice, &|k| std::env::var_os(k))?;
    Ok((
        Plan {
            workspace: ws,
            state: st,
            mountpoint: mp,
            git,
            baseline: match &args.rules_baseline {
                Some(b) => Some(b.canonicalize().map_err(|source| Error::Open {
                    what: "rules baseline directory",
                    path: b.clone(),
                    source,
                })?),
                None => None,
            },
        },
        host_fd,
        state_fd,
    ))
}

/// The paths kept read-only beyond Git directories: `--protect`, then
/// what host Git runs from the workspace (see [`gitcfg::GitSetup`]).
fn protected_paths(args: &Args, plan: &Plan) -> Result<Vec<(Vec<u8>, &'static str)>, Error> {
    use std::os::unix::ffi::OsStrExt;
    let mut out: Vec<(Vec<u8>, &'static str)> = Vec::new();
    for p in &args.protect {
        let b = p.as_os_str().as_bytes();
        let bad = b.is_empty()
            || b.starts_with(b"/")
            || b.split(|&c| c == b'/')
                .any(|c| matches!(c, b"" | b"." | b".."));
        if bad {
            return Err(Error::Protect(p.clone()));
        }
        out.push((b.to_vec(), "protected_paths"));
    }
    for (p, why) in &plan.git.hook_paths {
        if !out.iter().any(|(q, _)| q == p) {
            out.push((p.clone(), why));
        }
    }
    Ok(out)
}

/// Runs the router (see the crate documentation) until it is unmounted.
pub fn run(args: Args) -> Result<(), Error> {
    if args.print_confinement {
        return print_confinement(&args);
    }
    // The readiness descriptor, taken over first so that it is closed
    // (end of file for the parent) on every failure path.
    let ready = take_ready_fd(args.ready_fd)?;
    confine::sanitize(ready.as_ref().map(|f| f.as_fd()), args.die_with_parent)?;
    let nofile = confine::raise_nofile();

    // The FUSE mount goes into the holder's mount namespace, where the
    // sandbox's bind finds it; then the router moves into its own, where
    // what Git Sentry keeps is read-only to the kernel as well. With
    // `--git-dir`, that move comes first: the Git directory is bound into
    // the workspace there, before anything reads the workspace.
    let mount = |mp: &Path| mount_fuse(&args, mp);
    let mp = mountpoint(&args)?;
    let early = match &args.git_dir {
        Some(g) => {
            let ws = args
                .workspace
                .as_ref()
                .ok_or(Error::Missing("--workspace"))?;
            let fuse = mount(&mp)?;
            linked::bind(ws, g)?;
            Some(fuse)
        }
        None => None,
    };
    let (plan, host_fd, state_fd) = plan(&args, mp)?;
    let protected = protected_paths(&args, &plan)?;
    let fuse = match early {
        Some(f) => f,
        None => mount(&plan.mountpoint)?,
    };
    let host_fd = shield_workspace(&plan, host_fd, &protected)?;
    let rules_host = dup_root(&host_fd, "workspace", &plan.workspace)?;
    let confine_host = dup_root(&host_fd, "workspace", &plan.workspace)?;
    let confine_state = dup_root(&state_fd, "state directory", &plan.state)?;
    report_protected(&plan, &protected);
    let (baseline, journal) = open_records(&plan)?;
    let rules = rules::Rules::new(
        rules_host,
        plan.git.info_exclude.clone(),
        plan.git.excludes_file.clone().map(rules::Source::Absolute),
        plan.git.ignore_case,
        baseline,
    );
    let options = router_options(&args, nofile, &protected, journal);
    let fs = router::Router::new(host_fd, state_fd, rules, options);
    let filters = confine::seccomp_filters()?;
    let session = fuse_session(&args, fs, fuse, &plan.mountpoint)?;
    confine::apply(&plan, confine_host.as_fd(), confine_state.as_fd(), filters)?;
    drop((confine_host, confine_state));
    if let Some(mut r) = ready {
        // A parent that stopped listening is not our failure: the mount is
        // up either way, and it learns of it from the mount table.
        let _ = r.write_all(lazaret_protocol::readiness::READY_LINE);
    }
    session.run().map_err(Error::Session)
}

/// `--print-confinement`: the confinement, and the read-only binds the
/// router would make (for the given directories, or in general).
fn print_confinement(args: &Args) -> Result<(), Error> {
    let p = if args.workspace.is_some() {
        Some(plan(args, mountpoint(args)?)?)
    } else {
        None
    };
    print!("{}", confine::describe(p.as_ref().map(|p| &p.0)));
    println!(
        "\n[read-only binds] (in the router's own mount namespace, made before confinement; at most {})",
        shield::MAX_SHIELDS
    );
    match &p {
        Some((plan, host, _)) => {
            let protected: Vec<Vec<u8>> = protected_paths(args, plan)?
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            for c in shield::candidates(host.as_fd(), &protected) {
                println!("  {}", lazaret_protocol::display::escape(&c));
            }
        }
        None => println!(
            "  what Git Sentry never lets the sandbox write that exists at start: each Git\n  \
             directory's configuration, commondir, gitdir, hooks, remotes, branches, info/\n  \
             files but exclude, alternates; a .git file; the protected paths"
        ),
    }
    Ok(())
}

/// Takes over `--ready-fd N`, which must be an open inherited descriptor
/// above stderr.
fn take_ready_fd(fd: Option<i32>) -> Result<Option<std::fs::File>, Error> {
    let Some(n) = fd else {
        return Ok(None);
    };
    if n < 3
        || rustix::io::fcntl_getfd(
            // SAFETY: only borrowed for the validity check below.
            unsafe { rustix::fd::BorrowedFd::borrow_raw(n) },
        )
        .is_err()
    {
        return Err(Error::ReadyFd(n));
    }
    // SAFETY: `n` is an open descriptor (checked above) that this
    // process inherited for exactly this use; nothing else owns it.
    Ok(Some(std::fs::File::from(unsafe {
        OwnedFd::from_raw_fd(n)
    })))
}

/// Binds what Git Sentry keeps read-only in the router's own mount
/// namespace; the workspace reopened there, which must be the same
/// directory as `host_fd`.
fn shield_workspace(
    plan: &Plan,
    host_fd: OwnedFd,
    protected: &[(Vec<u8>, &'static str)],
) -> Result<OwnedFd, Error> {
    let shields: Vec<Vec<u8>> = protected.iter().map(|(p, _)| p.clone()).collect();
    let shielded = shield::apply(
        &plan.workspace,
        &shield::candidates(host_fd.as_fd(), &shields),
    )?;
    // The same directory, reached again by its path in this namespace.
    let same = |a: &OwnedFd, b: &OwnedFd| {
        matches!((rustix::fs::fstat(a), rustix::fs::fstat(b)),
            (Ok(x), Ok(y)) if (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino))
    };
    if !same(&host_fd, &shielded.host) {
        return Err(Error::Open {
            what: "workspace",
            path: plan.workspace.clone(),
            source: std::io::Error::other("it was replaced while the router started"),
        });
    }
    drop(host_fd);
    for s in &shielded.skipped {
        lazaret_protocol::log_line!(
            "lazaret-mount-router: not bound read-only (the name policy still applies): {s}"
        );
    }
    Ok(shielded.host)
}

/// Mounts the router's FUSE file system at `mp`: the `/dev/fuse`
/// descriptor its session serves.
fn mount_fuse(args: &Args, mp: &Path) -> Result<OwnedFd, Error> {
    sys::fuse_mount(mp, "lazaret-router", args.allow_other).map_err(|source| Error::Mount {
        path: mp.to_path_buf(),
        source,
    })
}

/// The rules baseline and the changes journal beside it (in memory and
/// none without `--rules-baseline`). The journal is opened before the
/// router confines itself (landlock keeps that directory writable).
fn open_records(plan: &Plan) -> Result<(baseline::Baseline, journal::Journal), Error> {
    let baseline = match &plan.baseline {
        Some(dir) => {
            let err = |source| open_error("rules baseline directory", dir, source);
            baseline::Baseline::load(open_record_dir(dir, err)?).map_err(err)?
        }
        None => baseline::Baseline::in_memory(),
    };
    let journal = match &plan.baseline {
        Some(dir) => {
            let err = |source| open_error("changes journal directory", dir, source);
            journal::Journal::open(open_record_dir(dir, err)?.as_fd()).map_err(err)?
        }
        None => journal::Journal::none(),
    };
    Ok((baseline, journal))
}

/// Another descriptor of the root `fd` (`what` at `path`), above stderr.
fn dup_root(fd: &OwnedFd, what: &'static str, path: &Path) -> Result<OwnedFd, Error> {
    rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| Error::Open {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    })
}

fn open_error(what: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Open {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Opens the rules baseline directory `dir` (also the journal's).
fn open_record_dir(dir: &Path, err: impl Fn(std::io::Error) -> Error) -> Result<OwnedFd, Error> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| err(e.into()))
}

/// Says what Git Sentry keeps read-only, in the log and (with a rules
/// baseline) in `protected` beside it.
fn report_protected(plan: &Plan, protected: &[(Vec<u8>, &'static str)]) {
    if !protected.is_empty() {
        let list: Vec<String> = protected
            .iter()
            .map(|(p, why)| format!("{} ({why})", String::from_utf8_lossy(p)))
            .collect();
        lazaret_protocol::log_line!(
            "lazaret-mount-router: Git Sentry keeps read-only: {}",
            list.join(", ")
        );
    }
    if let Some(dir) = &plan.baseline {
        // For `lazaret run` to name them (one line each: path TAB why).
        let mut text = Vec::new();
        for (p, why) in protected {
            text.extend_from_slice(p);
            text.push(b'\t');
            text.extend_from_slice(why.as_bytes());
            text.push(b'\n');
        }
        let tmp = dir.join("protected.tmp");
        let done =
            std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, dir.join("protected")));
        if let Err(e) = done {
            lazaret_protocol::log_line!(
                "lazaret-mount-router: cannot record the protected paths: {e}"
            );
        }
    }
}

fn router_options(
    args: &Args,
    nofile: u64,
    protected: &[(Vec<u8>, &'static str)],
    journal: journal::Journal,
) -> router::Options {
    router::Options {
        ttl: Duration::from_millis(args.cache_ms),
        max_open: args.max_open.min(
            usize::try_from(nofile)
                .unwrap_or(usize::MAX)
                .saturating_sub(router::RESERVED_FDS),
        ),
        isolate_ignored: !args.sentry_only && args.git_dir.is_none(),
        protected: protected.iter().map(|(p, _)| p.clone()).collect(),
        state_max_bytes: args.state_max_bytes,
        journal,
        inside_owner: args.inside_owner,
    }
}

/// The FUSE session over the mounted `fuse` descriptor.
fn fuse_session(
    args: &Args,
    fs: router::Router,
    fuse: OwnedFd,
    mountpoint: &Path,
) -> Result<fuser::Session<router::Router>, Error> {
    let mut config = fuser::Config::default();
    config.n_threads = Some(usize::from(args.threads));
    config.clone_fd = args.threads > 1;
    let acl = if args.allow_other {
        fuser::SessionACL::All
    } else {
        fuser::SessionACL::Owner
    };
    fuser::Session::from_fd(fs, fuse, acl, config).map_err(|source| Error::Mount {
        path: mountpoint.to_path_buf(),
        source,
    })
}

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
