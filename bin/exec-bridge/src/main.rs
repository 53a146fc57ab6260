//! `lazaret-exec-bridge`: the PTY exec bridge. It holds nothing but its
//! standard streams (a PTY slave or pipes given by the coordinator) and a
//! pidfd of the Domain's sandbox holder on fd 3. It joins the holder's user,
//! mount, network and PID namespaces through that pidfd (so it can never
//! join a recycled PID's namespaces), then runs a non-detached `runsc exec`
//! attached to its streams and exits with its status.
//!
//! Usage: `lazaret-exec-bridge [--tty] -- RUNSC-ARGV...`, or
//! `lazaret-exec-bridge --print-confinement`.
//!
//! It cannot confine itself: `runsc exec` is its child and would inherit
//! landlock and seccomp (see `--print-confinement` for the reason). What it
//! can drop, it drops first: every inherited descriptor but 0, 1, 2, the
//! pidfd and the session's process memfd (fd 4), so `runsc exec` (which gets root's capabilities in the Domain's
//! user namespace) inherits nothing else of the coordinator's.
//!
//! Exit codes: the command's status; 125 when the bridge itself fails.

mod confinement;

// The supervisor's layout: the holder's pidfd, and the session's process
// specification, which runsc exec reads itself as `/proc/self/fd/4`.
use lazaret_protocol::fdno::exec_bridge::{HOLDER_PIDFD, PROCESS as PROCESS_FD};
use nix::sched::CloneFlags;
use nix::sys::signal::{self, SigSet, Signal};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        confinement::exec_bridge().print_and_exit();
    }
    // Nothing owns a descriptor yet but std's 0-2: no drop closes these
    // again. Before joining the holder's namespaces, where runsc exec gets
    // root's capabilities.
    lazaret_seccomp::process::close_inherited_fds(&[HOLDER_PIDFD, PROCESS_FD])
        .unwrap_or_else(|e| fail(&e.to_string()));
    // runsc exec inherits it.
    lazaret_helpers::limits::raise_nofile();
    let (tty, argv) = parse_args();
    join_holder();
    if tty {
        take_terminal();
    }
    let forwarded = SigSet::from_iter([
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGCHLD,
    ]);
    forwarded
        .thread_block()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::UNBLOCK_ALL_DIE_WITH_PARENT,
    );
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| fail(&format!("cannot start {}: {e}", argv[0])));
    let child_pid = nix::unistd::Pid::from_raw(child.id() as i32);
    loop {
        match forwarded.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Ok(Some(status)) = child.try_wait() {
                    let code = status
                        .code()
                        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                    std::process::exit(code);
                }
            }
            Ok(sig) => {
                let _ = signal::kill(child_pid, sig);
            }
            Err(e) => fail(&e.to_string()),
        }
    }
}

/// `--tty` or not, and runsc's argv (after `--`).
fn parse_args() -> (bool, Vec<String>) {
    let mut args = std::env::args().skip(1);
    let mut tty = false;
    let mut argv = Vec::new();
    for a in args.by_ref() {
        match a.as_str() {
            "--tty" => tty = true,
            "--" => break,
            other => fail(&format!("unknown argument {other:?}")),
        }
    }
    argv.extend(args);
    if argv.is_empty() {
        fail("usage: lazaret-exec-bridge [--tty] -- RUNSC-ARGV...");
    }
    (tty, argv)
}

/// Joins the holder's user, mount, network and PID namespaces through its
/// pidfd (fd 3), which is closed then.
fn join_holder() {
    let pidfd = lazaret_helpers::fds::inherited(HOLDER_PIDFD)
        .unwrap_or_else(|e| fail(&format!("no holder pidfd on fd {HOLDER_PIDFD}: {e}")));
    nix::sched::setns(
        &pidfd,
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWPID,
    )
    .unwrap_or_else(|e| match e {
        // The holder exited between the coordinator's check and ours.
        nix::errno::Errno::ESRCH => fail(
            "the Domain's sandbox stopped while this session was starting: run the command again",
        ),
        e => fail(&format!("cannot join the Domain's namespaces: {e}")),
    });
    drop(pidfd);
}

/// Makes the PTY slave (fd 0) our controlling terminal, so that runsc
/// exec is in its foreground process group and sees SIGWINCH.
fn take_terminal() {
    nix::unistd::setsid().unwrap_or_else(|e| fail(&format!("setsid: {e}")));
    // SAFETY: TIOCSCTTY on fd 0 with argument 0; fd 0 is the PTY slave.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
        fail(&format!(
            "cannot take the session terminal: {}",
            std::io::Error::last_os_error()
        ));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("lazaret-exec-bridge: error: {msg}");
    std::process::exit(125)
}
