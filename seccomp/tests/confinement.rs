//! Each confined binary's real confinement ([`lazaret_seccomp::binaries`],
//! the same data and compiled policy the binary applies), applied in a
//! forked child that then tries what it must not do:
//!
//! - seccomp: a system call outside the allow-list kills it (SIGSYS);
//! - landlock: a file outside its places is refused (EACCES), one inside
//!   is not;
//! - capabilities: its effective, permitted, bounding, inheritable and
//!   ambient sets hold only what it keeps (so `CAP_SYS_ADMIN`, or the
//!   first of `CAP_NET_ADMIN`, `CAP_SETUID` it does not keep, is gone),
//!   read from its own status through a handle opened before confining.
//!
//! Each required place is bound to a fresh temporary directory. Run as an
//! ordinary user, each child first enters a new user namespace (so it
//! holds capabilities to drop). Without landlock it prints `skipping:`
//! (a failure under `LAZARET_TESTS_MUST_RUN=1`).
//!
//! Adding a binary: add its name to [`CONFINED`].

use lazaret_seccomp::binaries;
use lazaret_seccomp::ruleset::Place;
use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The binaries that confine themselves.
const CONFINED: &[&str] = &[
    "lazaret-netpolicy",
    "lazaret-netpolicy-watch",
    "lazaret-dns-filter",
    "lazaret-mount-router",
    "lazaret-coordinator",
    "lazaret-mailbox",
    "lazaret-supervisor-scan",
];

/// Candidates for "a forbidden system call": the first one the binary's
/// allow-list lacks is tried.
const FORBIDDEN: &[(&str, libc::c_long)] = &[
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("ptrace", libc::SYS_ptrace),
    ("mount", libc::SYS_mount),
];

const SKIP: i32 = 20;

fn main() {
    let mut failed = Vec::new();
    let mut skipped = Vec::new();
    for b in CONFINED {
        for check in [Check::Seccomp, Check::Landlock, Check::Caps] {
            match run_case(b, check) {
                Ok(()) => println!("ok: {b} {check:?}"),
                Err(Outcome::Skip(why)) => skipped.push(format!("{b} {check:?}: {why}")),
                Err(Outcome::Fail(why)) => {
                    println!("FAILED: {b} {check:?}: {why}");
                    failed.push(format!("{b} {check:?}"));
                }
            }
        }
    }
    for s in &skipped {
        println!("skipping: {s}");
    }
    if !skipped.is_empty() && std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
        println!("LAZARET_TESTS_MUST_RUN=1 but some checks would skip");
        std::process::exit(1);
    }
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
}

#[derive(Debug, Clone, Copy)]
enum Check {
    Seccomp,
    Landlock,
    Caps,
}

enum Outcome {
    Skip(String),
    Fail(String),
}

struct Setup {
    _tmp: tempfile::TempDir,
    places: Vec<(&'static str, PathBuf)>,
    outside: PathBuf,
}

fn setup(binary: &str) -> Setup {
    let conf = binaries::get(binary).expect("described");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut places = Vec::new();
    for (i, r) in conf
        .landlock
        .as_ref()
        .map(|l| l.rules.clone())
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        if !r.required {
            continue;
        }
        let d = tmp.path().join(format!("place{i}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("f"), b"inside").unwrap();
        places.push((r.place, d));
    }
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), b"outside").unwrap();
    Setup {
        _tmp: tmp,
        places,
        outside,
    }
}

fn allowed_syscalls(binary: &str) -> BTreeSet<String> {
    let v: serde_json::Value =
        serde_json::from_str(lazaret_seccomp::policy_json(binary).expect("policy")).unwrap();
    v[binary]["filter"]
        .as_array()
        .expect("filter list")
        .iter()
        .filter_map(|r| r["syscall"].as_str().map(str::to_string))
        .collect()
}

fn run_case(binary: &'static str, check: Check) -> Result<(), Outcome> {
    let s = setup(binary);
    let allowed = allowed_syscalls(binary);
    let (name, nr) = *FORBIDDEN
        .iter()
        .find(|(n, _)| !allowed.contains(*n))
        .ok_or_else(|| Outcome::Fail("every candidate syscall is allowed".into()))?;
    // SAFETY: this test's main thread is its only thread (harness =
    // false), so the child may run any code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Outcome::Fail(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        let code = child(binary, check, &s, nr);
        // SAFETY: _exit only ends this process.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(Outcome::Fail("waitpid failed".into()));
    }
    let signaled = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    match (check, signaled, code) {
        (_, None, Some(SKIP)) => Err(Outcome::Skip(
            "the confinement cannot be applied here (see the child's message)".into(),
        )),
        (Check::Seccomp, Some(libc::SIGSYS), _) => Ok(()),
        (Check::Seccomp, sig, code) => Err(Outcome::Fail(format!(
            "{name}(2) did not kill the child (signal {sig:?}, exit {code:?})"
        ))),
        (_, None, Some(0)) => Ok(()),
        (_, sig, code) => Err(Outcome::Fail(format!(
            "child ended with signal {sig:?}, exit {code:?}"
        ))),
    }
}

fn open_path(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("O_PATH handle")
}

/// Runs in the child: confine, then try. The exit code is the verdict.
fn child(binary: &'static str, check: Check, s: &Setup, forbidden: libc::c_long) -> i32 {
    if !rustix::process::getuid().is_root() {
        // SAFETY: a single-threaded child; unshare takes flags only.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            eprintln!(
                "child: no user namespace: {}",
                std::io::Error::last_os_error()
            );
            return SKIP;
        }
    }
    let status = std::fs::File::open("/proc/thread-self/status").expect("own status");
    let handles: Vec<(&'static str, OwnedFd)> =
        s.places.iter().map(|(p, d)| (*p, open_path(d))).collect();
    let places: Vec<Place<'_>> = handles
        .iter()
        .map(|(p, fd)| Place {
            place: p,
            fd: fd.as_fd(),
        })
        .collect();
    let filters = lazaret_seccomp::filters(binary).expect("compiled filters");
    let conf = binaries::get(binary).expect("described");
    // The landlock check opens files, which a filter without `openat`
    // (the DNS filter's) would kill it for: it is checked under landlock
    // alone; the seccomp check applies both.
    let mut conf = conf;
    if matches!(check, Check::Landlock) {
        conf.seccomp = false;
    }
    if let Err(e) = conf.apply(&places, &filters) {
        eprintln!("child: cannot confine as {binary}: {e}");
        return match e {
            lazaret_seccomp::ConfineError::Landlock { .. } => SKIP,
            _ => 3,
        };
    }
    match check {
        Check::Seccomp => {
            // SAFETY: a system call the filter kills the process for; had
            // it not, unsharing/joining namespaces of a dying child is
            // harmless.
            let r = unsafe { libc::syscall(forbidden, 0, 0, 0, 0, 0) };
            eprintln!("child: forbidden syscall returned {r}");
            4
        }
        Check::Landlock => {
            // A binary with no places (the DNS filter) may open nothing.
            if let Some((_, place)) = s.places.first() {
                let inside = place.join("f");
                if let Err(e) = std::fs::read(&inside) {
                    eprintln!("child: {} refused: {e}", inside.display());
                    return 5;
                }
            }
            match std::fs::read(s.outside.join("f")) {
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => 0,
                other => {
                    eprintln!("child: a file outside every place: {other:?}");
                    6
                }
            }
        }
        Check::Caps => {
            // read, not pread: every allow-list has `read`
            // (lazaret-netpolicy-watch's has no `pread64`); the handle
            // was opened before confining and not read yet.
            let mut buf = vec![0u8; 8192];
            let n = std::io::Read::read(&mut &status, &mut buf).unwrap_or(0);
            let text = String::from_utf8_lossy(&buf[..n]);
            let get = |k: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                    .unwrap_or(u64::MAX)
            };
            let keep = match &conf.capabilities {
                lazaret_seccomp::Capabilities::Keep(k) => lazaret_seccomp::caps::set_of(k).bits(),
                lazaret_seccomp::Capabilities::Unchanged(_) => return 7,
            };
            // A capability it drops, by preference the one that matters
            // most (CAP_SYS_ADMIN, then CAP_NET_ADMIN, CAP_SETUID).
            let Some(dropped) = [21u32, 12, 7]
                .into_iter()
                .map(|b| 1u64 << b)
                .find(|b| keep & b == 0)
            else {
                return 10;
            };
            for k in ["CapEff:", "CapPrm:", "CapBnd:", "CapInh:", "CapAmb:"] {
                let v = get(k);
                if v & !keep != 0 || v & dropped != 0 {
                    eprintln!("child: {k} {v:016x} holds more than it keeps ({keep:016x})");
                    return 8;
                }
            }
            if get("CapEff:") != keep {
                eprintln!(
                    "child: CapEff {:016x} lacks what it keeps {keep:016x}",
                    get("CapEff:")
                );
                return 9;
            }
            0
        }
    }
}
