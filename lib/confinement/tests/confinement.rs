//! Each confined binary's real confinement ([`lazaret_seccomp::suite`]:
//! the same data and policy the binary applies, the policy compiled here
//! from the same reviewed file its crate's `build.rs` compiles), applied
//! in a forked child that then tries what it must not do:
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
//! All of it runs at every Landlock ABI from 1 to the kernel's, capped
//! with `LAZARET_TEST_LANDLOCK_ABI` in the child: at each, the features
//! the ABI lacks are shown not enforced (truncating a file outside every
//! place works below ABI 3, TCP below 4, signalling the parent below 6,
//! a rename across directories fails with EXDEV at 1) and those it has
//! enforced, as `--print-confinement` reports; at cap 0 every binary
//! refuses to confine.
//!
//! Adding a binary: add its name to [`CONFINED`].

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_seccomp::abi::{Feature, Kernel, TEST_CAP_ENV};
use lazaret_seccomp::ruleset::Place;
use lazaret_seccomp::suite as binaries;
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
    let kernel = Kernel::detect().abi();
    if kernel < 1 {
        skipped.push(format!(
            "no Landlock on this kernel ({:?})",
            Kernel::detect()
        ));
    }
    for cap in (0..=kernel).rev() {
        for b in CONFINED {
            let checks: &[Check] = if cap == 0 {
                &[Check::Refused]
            } else {
                &[Check::Seccomp, Check::Landlock, Check::Caps]
            };
            for &check in checks {
                match run_case(b, check, cap) {
                    Ok(()) => println!("ok: ABI {cap}: {b} {check:?}"),
                    Err(Outcome::Skip(why)) => {
                        skipped.push(format!("ABI {cap}: {b} {check:?}: {why}"))
                    }
                    Err(Outcome::Fail(why)) => {
                        println!("FAILED: ABI {cap}: {b} {check:?}: {why}");
                        failed.push(format!("ABI {cap}: {b} {check:?}"));
                    }
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
    /// At cap 0: confining must fail (no Landlock: refuse, never run
    /// unconfined).
    Refused,
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
        std::fs::create_dir(d.join("a")).unwrap();
        std::fs::create_dir(d.join("b")).unwrap();
        std::fs::write(d.join("a/x"), b"moved").unwrap();
        places.push((r.place, d));
    }
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), b"outside").unwrap();
    std::fs::write(outside.join("t"), b"truncated below ABI 3").unwrap();
    Setup {
        _tmp: tmp,
        places,
        outside,
    }
}

fn policy(binary: &str) -> lazaret_seccomp::PolicySource {
    binaries::get(binary)
        .and_then(|c| c.seccomp)
        .expect("a seccomp policy")
}

/// `binary`'s filters in installation order (the allow-list last), as its
/// crate's `build.rs` compiles them (`lib/confinement/compile.rs`).
fn compile(binary: &'static str) -> Vec<(&'static str, lazaret_seccomp::BpfProgram)> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => seccompiler::TargetArch::x86_64,
        "aarch64" => seccompiler::TargetArch::aarch64,
        other => panic!("no seccomp target for {other}"),
    };
    let map = seccompiler::compile_from_json(policy(binary).json.as_bytes(), arch)
        .expect("the policy compiles");
    let mut names: Vec<String> = map.keys().cloned().collect();
    names.sort_by_key(|n| (n == binary, n.clone()));
    names
        .into_iter()
        .map(|n| {
            let prog = map[&n].clone();
            let name: &'static str = if n == binary {
                binary
            } else {
                Box::leak(n.into_boxed_str())
            };
            (name, prog)
        })
        .collect()
}

fn allowed_syscalls(binary: &str) -> BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(policy(binary).json).unwrap();
    v[binary]["filter"]
        .as_array()
        .expect("filter list")
        .iter()
        .filter_map(|r| r["syscall"].as_str().map(str::to_string))
        .collect()
}

fn run_case(binary: &'static str, check: Check, cap: i32) -> Result<(), Outcome> {
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
        // SAFETY (of set_var): the child is single-threaded.
        std::env::set_var(TEST_CAP_ENV, cap.to_string());
        let code = child(binary, check, &s, nr, cap);
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
fn child(binary: &'static str, check: Check, s: &Setup, forbidden: libc::c_long, cap: i32) -> i32 {
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
    let filters = compile(binary);
    let conf = binaries::get(binary).expect("described");
    // The landlock check opens files, which a filter without `openat`
    // (the DNS filter's) would kill it for: it is checked under landlock
    // alone; the seccomp check applies both.
    let mut conf = conf;
    if matches!(check, Check::Landlock | Check::Refused) {
        conf.seccomp = None;
    }
    let applied = conf.apply(&places, &filters);
    if let Check::Refused = check {
        return match applied {
            Err(lazaret_seccomp::ConfineError::NoLandlock(why)) => {
                if why.contains(TEST_CAP_ENV) {
                    0
                } else {
                    eprintln!("child: refused for another reason: {why}");
                    12
                }
            }
            other => {
                eprintln!("child: at ABI 0 it did not refuse: {other:?}");
                11
            }
        };
    }
    if let Err(e) = applied {
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
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => {}
                other => {
                    eprintln!("child: a file outside every place: {other:?}");
                    return 6;
                }
            }
            let l = conf.landlock.as_ref().expect("landlock");
            by_abi(l, s, cap)
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
        Check::Refused => unreachable!("returned above"),
    }
}

/// In the child, confined at `cap`: each feature the layer uses is
/// enforced exactly when the ABI has it. The exit code is the verdict.
fn by_abi(l: &lazaret_seccomp::ruleset::Landlock, s: &Setup, cap: i32) -> i32 {
    let errno = |r: std::io::Result<()>| r.err().and_then(|e| e.raw_os_error());
    let features = l.features();
    for f in features {
        let has = cap >= f.abi();
        let (got, want_on, want_off): (Option<i32>, Option<i32>, Option<i32>) = match f {
            Feature::Truncate => (
                errno(truncate(&s.outside.join("t"))),
                Some(libc::EACCES),
                None,
            ),
            Feature::Refer => {
                // The first place's rule grants refer (checked by
                // `features`... of any rule): use the place that does.
                let Some((_, d)) = s.places.iter().find(|(p, _)| {
                    l.rules
                        .iter()
                        .any(|r| r.place == *p && r.access.contains(landlock::AccessFs::Refer))
                }) else {
                    continue;
                };
                (
                    errno(std::fs::rename(d.join("a/x"), d.join("b/x"))),
                    None,
                    Some(libc::EXDEV),
                )
            }
            Feature::Tcp => {
                let connect = l.net.contains(landlock::AccessNet::ConnectTcp);
                let r = tcp(connect);
                if !has && r == Some(libc::EACCES) {
                    eprintln!("child: TCP denied below ABI 4");
                    return 13;
                }
                if has && r != Some(libc::EACCES) {
                    eprintln!(
                        "child: TCP {} at ABI {cap}: {r:?}",
                        if connect { "connect" } else { "bind" }
                    );
                    return 13;
                }
                continue;
            }
            Feature::IoctlDev => continue, // no device among the places here
            Feature::Scopes => (
                // SAFETY: signal 0 only checks permission.
                errno(if unsafe { libc::kill(libc::getppid(), 0) } == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }),
                Some(libc::EPERM),
                None,
            ),
        };
        let want = if has { want_on } else { want_off };
        if got != want {
            eprintln!(
                "child: {} at ABI {cap} (needs {}): errno {got:?}, expected {want:?}",
                f.name(),
                f.abi()
            );
            return 14;
        }
    }
    0
}

/// truncate(2) by path, to 0 (not open + ftruncate: opening for writing
/// is landlock's write_file, of every ABI).
fn truncate(p: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::truncate(c.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The errno of a TCP connect to (or bind on) 127.0.0.1, if any.
fn tcp(connect: bool) -> Option<i32> {
    use rustix::net::{bind, connect as conn, socket, AddressFamily, SocketAddrV4, SocketType};
    let sock = socket(AddressFamily::INET, SocketType::STREAM, None).ok()?;
    let r = if connect {
        conn(&sock, &SocketAddrV4::new([127, 0, 0, 1].into(), 9))
    } else {
        bind(&sock, &SocketAddrV4::new([127, 0, 0, 1].into(), 0))
    };
    r.err().map(|e| e.raw_os_error())
}
