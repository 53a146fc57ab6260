//! What the binaries' children start with, set between fork and exec: the
//! one `pre_exec` of the code that links this crate, and its SAFETY
//! argument. [`setup`] does every step a child of ours may take, in one
//! order; [`set_signals`] (the coordinator, the supervisor, its holder, the
//! exec bridge, the image preparation's skopeo) and
//! [`crate::fds::pass_fds`] are its common cases, and the CLI names the
//! rest (the detached coordinator, host commands in their directory).
//!
//! Not here: `lazaret-sudo`'s child set-up (`bin/sudo/src/serve.rs`). That
//! static in-sandbox binary links no library but `lazaret-seccomp`, and this
//! crate would bring it the protocol crate, nix, postcard and the hashes.

use nix::sys::signal::{SigSet, Signal};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The signal state of a child of [`Command`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ChildSignals {
    /// Start with no signal blocked (the parent blocks those it takes
    /// through a signalfd or waits for; the child must not inherit that).
    pub unblock_all: bool,
    /// `SIGKILL` when the thread that started it exits
    /// (`PR_SET_PDEATHSIG`): the child must not outlive its parent.
    pub die_with_parent: bool,
}

impl ChildSignals {
    /// Dies with the thread that started it; the signal mask inherited.
    pub const DIE_WITH_PARENT: Self = Self {
        unblock_all: false,
        die_with_parent: true,
    };
    /// No signal blocked; may outlive its parent.
    pub const UNBLOCK_ALL: Self = Self {
        unblock_all: true,
        die_with_parent: false,
    };
    /// No signal blocked, and dies with the thread that started it.
    pub const UNBLOCK_ALL_DIE_WITH_PARENT: Self = Self {
        unblock_all: true,
        die_with_parent: true,
    };
}

/// What a child does between fork and exec, in the order of the fields.
#[derive(Debug, Default)]
pub struct Setup {
    /// Each `(fd, target)` open at `target`, without close-on-exec.
    /// Targets must be 3 or above and distinct. The fds are moved into the
    /// closure and closed in the parent when the command drops.
    pub fds: Vec<(OwnedFd, RawFd)>,
    /// Fork once more and let the intermediate exit at once: the program
    /// is then nobody's child, never a zombie of this process (the
    /// spawned `Child` is the intermediate: wait for it).
    pub detach: bool,
    /// A session and process group of its own (`setsid`): the terminal's
    /// signals and hangups miss it.
    pub new_session: bool,
    pub signals: ChildSignals,
    /// Enter this directory (`fchdir`): one resolved before, not a path
    /// that may have changed since. The caller keeps it open until the
    /// spawn.
    pub dir: Option<RawFd>,
}

/// Sets up `cmd`'s child as `s` says, in the child between fork and exec.
pub fn setup(cmd: &mut Command, s: Setup) {
    let Setup {
        fds,
        detach,
        new_session,
        signals,
        dir,
    } = s;
    // Where each source is moved first, allocated here: the child must
    // not allocate (the parent may be multi-threaded, and another thread
    // may have held the allocator's lock at the fork).
    let mut moved: Vec<RawFd> = vec![-1; fds.len()];
    // SAFETY: the closure runs between fork and exec, allocates nothing
    // and makes only async-signal-safe calls: fcntl, dup2 and close on
    // the fds it owns, fork and _exit, setsid, sigprocmask, prctl, and
    // fchdir on a descriptor the caller keeps open until the spawn.
    unsafe {
        cmd.pre_exec(move || {
            // First move every source above all targets, so that no dup2
            // can clobber a source that is itself some other target.
            let high = fds.iter().map(|(_, t)| *t).max().unwrap_or(2) + 1;
            for ((fd, _), m) in fds.iter().zip(moved.iter_mut()) {
                let n = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, high);
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                *m = n;
            }
            for ((_, target), &n) in fds.iter().zip(moved.iter()) {
                if libc::dup2(n, *target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(n);
            }
            if detach {
                match libc::fork() {
                    -1 => return Err(std::io::Error::last_os_error()),
                    0 => {}
                    _ => libc::_exit(0),
                }
            }
            if new_session {
                rustix::process::setsid().map_err(std::io::Error::from)?;
            }
            if signals.unblock_all {
                SigSet::all()
                    .thread_unblock()
                    .map_err(std::io::Error::from)?;
            }
            if signals.die_with_parent {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            }
            if let Some(fd) = dir {
                if libc::fchdir(fd) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The command of the Lazaret binary `name` in `libexec` that serves one
/// Domain (the CLI's coordinator, the coordinator's supervisor): `--domain
/// ID`, which only names the process for `ps` and tests, then
/// `digest_flag` with the SHA-256 of its sealed input; no standard input,
/// its output and errors to `log`.
pub fn domain_command(
    libexec: &Path,
    name: &str,
    domain_id: &str,
    digest_flag: &str,
    digest: &str,
    log: OwnedFd,
) -> std::io::Result<Command> {
    let mut cmd = Command::new(libexec.join(name));
    cmd.arg("--domain")
        .arg(domain_id)
        .arg(digest_flag)
        .arg(digest)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    Ok(cmd)
}

/// Sets up `cmd`'s child's signals as `s` says ([`setup`]).
pub fn set_signals(cmd: &mut Command, s: ChildSignals) {
    setup(
        cmd,
        Setup {
            signals: s,
            ..Setup::default()
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::process::Stdio;

    fn file_with(text: &str) -> OwnedFd {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f.rewind().unwrap();
        f.into()
    }

    fn output(mut cmd: Command) -> String {
        let out = cmd.stdout(Stdio::piped()).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_domain_command_names_its_domain_and_its_input_digest() {
        let cmd = domain_command(
            Path::new("/usr/libexec/lazaret"),
            "lazaret-supervisor",
            "0123abcd",
            "--plan-digest",
            "ab12",
            file_with(""),
        )
        .unwrap();
        assert_eq!(cmd.get_program(), "/usr/libexec/lazaret/lazaret-supervisor");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["--domain", "0123abcd", "--plan-digest", "ab12"]);
    }

    #[test]
    fn passes_descriptors_at_their_targets() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "cat <&3; cat <&4"]);
        setup(
            &mut cmd,
            Setup {
                fds: vec![(file_with("four\n"), 4), (file_with("three\n"), 3)],
                ..Setup::default()
            },
        );
        assert_eq!(output(cmd), "three\nfour\n");
    }

    #[test]
    fn enters_the_directory_given_by_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let mut cmd = Command::new("/bin/pwd");
        cmd.arg("-P");
        setup(
            &mut cmd,
            Setup {
                signals: ChildSignals::DIE_WITH_PARENT,
                dir: Some(fd.as_raw_fd()),
                ..Setup::default()
            },
        );
        let want = dir.path().canonicalize().unwrap();
        assert_eq!(output(cmd).trim_end(), want.to_str().unwrap());
    }

    #[test]
    fn detached_child_leads_a_session_of_its_own() {
        // The program's session is its own process ID (field 6 of stat,
        // after the command name's closing parenthesis: the fourth).
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo $$; cut -d')' -f2 /proc/$$/stat"]);
        setup(
            &mut cmd,
            Setup {
                detach: true,
                new_session: true,
                ..Setup::default()
            },
        );
        let out = output(cmd);
        let mut lines = out.lines();
        let pid = lines.next().unwrap();
        let stat: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(stat[3], pid, "{out}");
    }
}
