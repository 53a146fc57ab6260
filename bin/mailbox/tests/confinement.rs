//! The reader's real confinement, applied in a forked child (it cannot be
//! undone, so never in the test process): what it needs works (its watch,
//! taken before, included), and a path outside its landlock rule, exec,
//! socket creation, a new inotify instance and an executable mapping are
//! refused or kill it. Runs without a harness, one child per
//! case, so the fork happens in a single-threaded process.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_mailbox::confine;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use rustix::fs::{Mode, OFlags};
use std::os::fd::{AsFd, OwnedFd};

/// A case: its name, what must happen, and what the child does.
type Case = (&'static str, Expect, fn(&OwnedFd) -> bool);

enum Expect {
    /// The child exits 0: the action did what the case says.
    Passes,
    /// The kernel kills the child with SIGSYS (seccomp).
    KilledBySeccomp,
}

fn in_confined_child(
    name: &str,
    dir: &std::path::Path,
    expect: Expect,
    act: fn(&OwnedFd) -> bool,
) -> bool {
    let filters = confine::filters().expect("the policy compiles");
    let requests = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open the request directory");
    // SAFETY: this test binary has no harness and no other thread; the
    // child only confines itself, makes a few syscalls and exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = match confine::confine(requests.as_fd(), &filters) {
                Ok(()) => {
                    if act(&requests) {
                        0
                    } else {
                        1
                    }
                }
                Err(e) => {
                    eprintln!("{name}: confine: {e}");
                    2
                }
            };
            // SAFETY: _exit ends the child without running the parent's
            // atexit handlers or destructors twice.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let status = waitpid(child, None).expect("waitpid");
            let ok = matches!(
                (expect, status),
                (Expect::Passes, WaitStatus::Exited(_, 0))
                    | (
                        Expect::KilledBySeccomp,
                        WaitStatus::Signaled(_, Signal::SIGSYS, _)
                    )
            );
            println!("{} {name}: {status:?}", if ok { "ok  " } else { "FAIL" });
            ok
        }
    }
}

fn main() {
    let d = tempfile::tempdir().expect("tempdir");
    let req = d.path().join("requests");
    std::fs::create_dir(&req).unwrap();
    std::fs::write(req.join("entry"), b"inside").unwrap();
    std::fs::write(d.path().join("outside"), b"outside").unwrap();
    let outside = d.path().join("outside");
    // Leaked into the cases through a static: fn pointers capture nothing.
    OUTSIDE.set(outside).unwrap();
    // The watch is taken before confining, as the reader does; an entry
    // published since waits in its queue.
    let dir = rustix::fs::open(&req, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    let watch = lazaret_mailbox::watch::Watch::new(dir.as_fd()).expect("watch");
    std::fs::write(req.join(".published.tmp"), b"x").unwrap();
    std::fs::rename(req.join(".published.tmp"), req.join("published")).unwrap();
    if WATCH.set(watch).is_err() {
        unreachable!("set once");
    }

    let cases: [Case; 10] = [
        (
            "reads its watch's events (the first case: children share the queue)",
            Expect::Passes,
            |_| WATCH.get().unwrap().drain().due,
        ),
        (
            "reads and removes an entry beneath the request directory",
            Expect::Passes,
            |dir| {
                let Ok(fd) = rustix::fs::openat(
                    dir,
                    "entry",
                    OFlags::RDONLY | OFlags::NOFOLLOW,
                    Mode::empty(),
                ) else {
                    return false;
                };
                let mut buf = [0u8; 16];
                rustix::io::read(&fd, &mut buf).is_ok_and(|n| &buf[..n] == b"inside")
                    && rustix::fs::unlinkat(dir, "entry", rustix::fs::AtFlags::empty()).is_ok()
            },
        ),
        ("lists the request directory", Expect::Passes, |dir| {
            rustix::fs::Dir::read_from(dir).is_ok()
        }),
        (
            "cannot open a file outside the request directory",
            Expect::Passes,
            |_| {
                let p = OUTSIDE.get().unwrap();
                rustix::fs::openat(rustix::fs::CWD, p, OFlags::RDONLY, Mode::empty()).err()
                    == Some(rustix::io::Errno::ACCESS)
            },
        ),
        ("cannot open /etc/passwd", Expect::Passes, |_| {
            rustix::fs::openat(
                rustix::fs::CWD,
                "/etc/passwd",
                OFlags::RDONLY,
                Mode::empty(),
            )
            .err()
                == Some(rustix::io::Errno::ACCESS)
        }),
        (
            "cannot create a file in the request directory",
            Expect::Passes,
            |dir| {
                rustix::fs::openat(
                    dir,
                    "new",
                    OFlags::WRONLY | OFlags::CREATE,
                    Mode::from_raw_mode(0o600),
                )
                .err()
                    == Some(rustix::io::Errno::ACCESS)
            },
        ),
        ("exec kills it", Expect::KilledBySeccomp, |_| {
            let path = c"/bin/true";
            let argv = [path.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: valid NUL-terminated argv and envp arrays.
            unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            false
        }),
        (
            "creating a socket kills it",
            Expect::KilledBySeccomp,
            |_| {
                // SAFETY: socket takes no pointers.
                unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
                false
            },
        ),
        (
            "a new inotify instance kills it (watches are taken before)",
            Expect::KilledBySeccomp,
            |_| {
                let _ = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC);
                false
            },
        ),
        (
            "an executable mapping kills it",
            Expect::KilledBySeccomp,
            |_| {
                // SAFETY: an anonymous mapping the child never uses.
                unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ | libc::PROT_EXEC,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                false
            },
        ),
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, expect, act) in cases {
        if in_confined_child(name, &req, expect, act) {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

static OUTSIDE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
static WATCH: std::sync::OnceLock<lazaret_mailbox::watch::Watch> = std::sync::OnceLock::new();
