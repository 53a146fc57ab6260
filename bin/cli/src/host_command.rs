//! Approved host commands, run by the requesting session's `lazaret` CLI.
//!
//! The coordinator decides (the developer's answer at this terminal, or an
//! auto-approval rule it matched) and tells this CLI to run the exact
//! vector ([`ServerMsg::RunHostCommand`]). They run here, not in the
//! coordinator, because the coordinator is to be confined (landlock and
//! seccomp are inherited, and it must not exec); this process is the one
//! the developer started, with the developer's authority, and it already
//! owns the prompt.
//!
//! A command runs by execve of the vector, without a shell, in the host
//! directory that corresponds to the sandbox's and with the environment
//! [`crate::host_dir`] gives it, stdin from `/dev/null`, its
//! output captured up to [`esc::MAX_OUTPUT`] per stream, in its own
//! process group. The group is killed on cancellation
//! ([`ServerMsg::CancelHostCommand`]), at its timeout, and when this CLI
//! ends its session ([`Runner::end_all`]); `PR_SET_PDEATHSIG` ends the
//! command if the CLI dies.
//!
//! [`ServerMsg::RunHostCommand`]: lazaret_protocol::session::ServerMsg::RunHostCommand
//! [`ServerMsg::CancelHostCommand`]: lazaret_protocol::session::ServerMsg::CancelHostCommand

use crate::host_dir::Setting;
use lazaret_helpers::sync::lock;
use lazaret_protocol::display;
use lazaret_protocol::escalation::{self as esc, Outcome};
use lazaret_protocol::frame::write_frame;
use lazaret_protocol::session::{ClientMsg, HostCommand};
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a running command's cancellation and timeout are checked
/// (its exit ends the wait at once).
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// Commands one session runs at once (the coordinator allows fewer
/// pending requests per session; this holds against a confused one).
pub const MAX_RUNNING: usize = 64;

/// The host commands of one Client Session.
#[derive(Clone)]
pub struct Runner {
    writer: Arc<Mutex<UnixStream>>,
    setting: Arc<Setting>,
    /// Cancellation flags of the running commands, by request ID.
    running: Arc<Mutex<HashMap<String, Arc<AtomicBool>>>>,
}

impl Runner {
    pub fn new(writer: Arc<Mutex<UnixStream>>, setting: Setting) -> Self {
        Self {
            writer,
            setting: Arc::new(setting),
            running: Arc::default(),
        }
    }

    /// Starts `c` on a thread of its own; its outcome goes back to the
    /// coordinator as [`ClientMsg::HostCommandOutcome`].
    pub fn start(&self, c: HostCommand) {
        let cancel = Arc::new(AtomicBool::new(false));
        let admitted = {
            let mut running = lock(&self.running);
            if running.len() >= MAX_RUNNING || running.contains_key(&c.request_id) {
                false
            } else {
                running.insert(c.request_id.clone(), cancel.clone());
                true
            }
        };
        if !admitted {
            return self.answer(
                c.request_id,
                Outcome::Failed {
                    reason: format!(
                        "this session's lazaret already runs {MAX_RUNNING} host commands, or this one"
                    ),
                },
            );
        }
        let me = self.clone();
        let id = c.request_id.clone();
        let spawned = std::thread::Builder::new()
            .name("host-command".into())
            .spawn(move || {
                let deadline = c
                    .timeout_ms
                    .map(|ms| Instant::now() + Duration::from_millis(ms));
                let o = execute(&c.argv, &me.setting, &c.cwd, deadline, &cancel);
                lazaret_helpers::timeline::mark("cli", "host-command-ended");
                lock(&me.running).remove(&c.request_id);
                me.answer(c.request_id, o);
                lazaret_helpers::timeline::mark("cli", "host-command-answered");
            });
        if let Err(e) = spawned {
            // The closure never ran: answer for it.
            lock(&self.running).remove(&id);
            self.answer(
                id,
                Outcome::Failed {
                    reason: format!("lazaret cannot start a thread for it: {e}"),
                },
            );
        }
    }

    /// Kills the command's group, if it still runs; its thread answers.
    pub fn cancel(&self, request_id: &str) {
        if let Some(flag) = lock(&self.running).get(request_id) {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// The session ends: every command's group is killed, and this waits
    /// (briefly) for their threads to have done it.
    pub fn end_all(&self) {
        for flag in lock(&self.running).values() {
            flag.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !lock(&self.running).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn answer(&self, request_id: String, outcome: Outcome) {
        let _ = write_frame(
            &mut *lock(&self.writer),
            &ClientMsg::HostCommandOutcome {
                request_id,
                outcome,
            },
        );
    }
}

/// Runs `argv` to its outcome (see the module's documentation).
/// `cwd` is the request's directory inside the sandbox.
pub fn execute(
    argv: &[String],
    setting: &Setting,
    cwd: &str,
    timeout: Option<Instant>,
    cancel: &AtomicBool,
) -> Outcome {
    let Some(program) = argv.first() else {
        return Outcome::Failed {
            reason: "empty command".into(),
        };
    };
    let place = setting.place(cwd);
    let mut cmd = command(program, &argv[1..], setting, &place);
    let spawned = cmd.spawn();
    drop(place.fd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed {
                reason: format!("cannot run {} on the host: {e}", display::quoted(program)),
            }
        }
    };
    let out = capture(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = capture(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let status = match wait_exit(&mut child, timeout, cancel) {
        Ok(s) => s,
        Err(o) => return o,
    };
    let (stdout, t1) = out.join().unwrap_or_default();
    let (mut stderr, t2) = err.join().unwrap_or_default();
    if let Some(note) = place.note {
        let mut s = format!("lazaret: {note}\n").into_bytes();
        s.append(&mut stderr);
        stderr = s;
    }
    use std::os::unix::process::ExitStatusExt;
    Outcome::Completed {
        status: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        stdout,
        stderr,
        truncated: t1 || t2,
    }
}

/// The command for `program args`: the setting's environment, stdin from
/// `/dev/null`, output piped, in a process group of its own, started in
/// `place` and killed when the thread that waits for it dies.
fn command(
    program: &str,
    args: &[String],
    setting: &Setting,
    place: &crate::host_dir::Place,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(setting.environment(&|k| std::env::var_os(k)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let dir = place.fd.as_ref().map(|fd| fd.as_raw_fd());
    if dir.is_none() {
        cmd.current_dir(&place.shown);
    }
    // The command dies with the thread that waits for it, so it cannot
    // outlive its request or this CLI; it enters the directory that was
    // resolved beneath the workspace (`place` keeps it open until after
    // the spawn), not a path the sandbox could change since.
    lazaret_helpers::child::setup(
        &mut cmd,
        lazaret_helpers::child::Setup {
            signals: lazaret_helpers::child::ChildSignals::DIE_WITH_PARENT,
            dir,
            ..Default::default()
        },
    );
    cmd
}

/// Reads one output stream on a thread of its own: up to
/// [`esc::MAX_OUTPUT`] kept, and whether more was dropped.
fn capture(r: Option<Box<dyn Read + Send>>) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let Some(mut r) = r else {
            return (Vec::new(), false);
        };
        let mut kept = Vec::new();
        let _ = (&mut r).take(esc::MAX_OUTPUT as u64).read_to_end(&mut kept);
        // Drain the rest so the command never blocks on a full pipe.
        let dropped = std::io::copy(&mut r, &mut std::io::sink()).unwrap_or(0);
        (kept, dropped > 0)
    })
}

/// Waits for `child` to exit, killing its group when it is cancelled or
/// times out (the outcome then), and once it exited: the group may have
/// left children behind, and they end with the request.
fn wait_exit(
    child: &mut std::process::Child,
    timeout: Option<Instant>,
    cancel: &AtomicBool,
) -> Result<std::process::ExitStatus, Outcome> {
    // Its exit wakes the wait below at once (without a pidfd, the wait
    // polls at the pace of the cancellation checks).
    let pidfd = lazaret_helpers::pidfd::of_child(child).ok();
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let kill = || {
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                kill();
                return Err(Outcome::Failed {
                    reason: e.to_string(),
                });
            }
        }
        if cancel.load(Ordering::SeqCst) {
            kill();
            let _ = child.wait();
            return Err(Outcome::Cancelled);
        }
        if timeout.is_some_and(|d| Instant::now() > d) {
            kill();
            let _ = child.wait();
            return Err(Outcome::TimedOut);
        }
        match &pidfd {
            Some(fd) => {
                lazaret_helpers::pidfd::exited_within(fd, CHECK_EVERY);
            }
            None => std::thread::sleep(CHECK_EVERY),
        }
    };
    kill();
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::frame::read_frame;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    fn setting(ws: &std::path::Path) -> Setting {
        Setting {
            workspace: ws.canonicalize().unwrap(),
            pass_env: vec![],
            isolate_ignored: true,
            writable: vec![],
        }
    }

    #[test]
    fn execute_runs_the_vector_without_a_shell() {
        let d = tempfile::tempdir().unwrap();
        let s = setting(d.path());
        let no = AtomicBool::new(false);
        let o = execute(
            &v(&["/usr/bin/printf", "%s|", "a;b", "$(id)", "x\ny"]),
            &s,
            "/workspace",
            None,
            &no,
        );
        assert_eq!(
            o,
            Outcome::Completed {
                status: 0,
                stdout: b"a;b|$(id)|x\ny|".to_vec(),
                stderr: vec![],
                truncated: false
            }
        );
        let o = execute(
            &v(&["/bin/sh", "-c", "echo e >&2; exit 3"]),
            &s,
            "/workspace",
            None,
            &no,
        );
        assert!(matches!(o, Outcome::Completed { status: 3, ref stderr, .. } if stderr == b"e\n"));
        let o = execute(
            &v(&["/bin/sleep", "30"]),
            &s,
            "/workspace",
            Some(Instant::now() + Duration::from_millis(200)),
            &no,
        );
        assert_eq!(o, Outcome::TimedOut);
        assert!(matches!(
            execute(&v(&["/nonexistent"]), &s, "/workspace", None, &no),
            Outcome::Failed { .. }
        ));
        // Run in the workspace, with the minimal environment.
        let o = execute(
            &v(&[
                "/bin/sh",
                "-c",
                "pwd; echo $PATH; echo ${LAZARET_ESCALATION}",
            ]),
            &s,
            "/workspace",
            None,
            &no,
        );
        let path = s.path(std::env::var_os("PATH").as_deref()).0;
        let want = format!(
            "{}\n{}\n1\n",
            d.path().canonicalize().unwrap().display(),
            path.to_string_lossy()
        );
        assert!(
            matches!(o, Outcome::Completed { status: 0, ref stdout, .. } if *stdout == want.as_bytes()),
            "{o:?}"
        );
        // In the sandbox's directory when it is the host's too; at the
        // top with a note on stderr when a link leads out.
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", d.path().join("out")).unwrap();
        let pwd = |cwd: &str| match execute(&v(&["/bin/pwd"]), &s, cwd, None, &no) {
            Outcome::Completed {
                status: 0,
                stdout,
                stderr,
                ..
            } => (
                String::from_utf8(stdout).unwrap(),
                String::from_utf8(stderr).unwrap(),
            ),
            o => panic!("{o:?}"),
        };
        let top = d.path().canonicalize().unwrap();
        assert_eq!(
            pwd("/workspace/sub"),
            (format!("{}\n", top.join("sub").display()), String::new())
        );
        let (out, err) = pwd("/workspace/out");
        assert_eq!(out, format!("{}\n", top.display()));
        assert!(
            err.starts_with("lazaret: the sandbox's directory is not used: "),
            "{err}"
        );
    }

    #[test]
    fn cancel_and_end_all_kill_the_group_and_answer() {
        let d = tempfile::tempdir().unwrap();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let r = Runner::new(Arc::new(Mutex::new(ours)), setting(d.path()));
        let pidfile = d.path().join("grandchild");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        r.start(HostCommand {
            request_id: "a".into(),
            argv: v(&["/bin/sh", "-c", &script]),
            decided_by: "test".into(),
            timeout_ms: None,
            cwd: "/workspace".into(),
        });
        let mut pid = None;
        for _ in 0..500 {
            pid = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if pid.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = pid.expect("the command started");
        r.cancel("a");
        let m: ClientMsg = read_frame(&mut theirs).unwrap();
        assert_eq!(
            m,
            ClientMsg::HostCommandOutcome {
                request_id: "a".into(),
                outcome: Outcome::Cancelled
            }
        );
        // The background child of the group was killed too (a zombie until
        // reaped by init at most).
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z "))
        };
        let mut ok = false;
        for _ in 0..500 {
            if gone() {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(ok, "the command's group outlived its cancellation");
        r.start(HostCommand {
            request_id: "b".into(),
            argv: v(&["/bin/sleep", "60"]),
            decided_by: "test".into(),
            timeout_ms: None,
            cwd: "/workspace".into(),
        });
        r.end_all();
        let m: ClientMsg = read_frame(&mut theirs).unwrap();
        assert_eq!(
            m,
            ClientMsg::HostCommandOutcome {
                request_id: "b".into(),
                outcome: Outcome::Cancelled
            }
        );
        assert!(lock(&r.running).is_empty());
    }
}
