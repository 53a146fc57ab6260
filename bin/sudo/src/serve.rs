//! The service, root inside: one thread per caller.

use crate::wire;
use rustix::fd::{AsFd, OwnedFd};
use rustix::process::{Pid, Signal};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// The signals a caller may forward: what a terminal or a parent sends to
/// end or interrupt a command.
const FORWARDED: &[Signal] = &[Signal::INT, Signal::QUIT, Signal::TERM, Signal::HUP];

/// Why the service cannot listen.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot make a socket: {0}")]
    Socket(rustix::io::Errno),
    #[error("cannot name the socket: {0}")]
    Address(rustix::io::Errno),
    #[error("cannot listen on @lazaret-sudo: {0}")]
    Bind(rustix::io::Errno),
    #[error("cannot listen: {0}")]
    Listen(rustix::io::Errno),
}

pub fn serve() -> Result<(), ServeError> {
    let listener = wire::socket().map_err(ServeError::Socket)?;
    let addr = wire::address().map_err(ServeError::Address)?;
    rustix::net::bind(&listener, &addr).map_err(ServeError::Bind)?;
    rustix::net::listen(&listener, 64).map_err(ServeError::Listen)?;
    loop {
        let conn = match rustix::net::accept_with(&listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(c) => c,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => {
                // Out of descriptors or threads, most likely: let some go.
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let _ = std::thread::Builder::new()
            .name("caller".into())
            .spawn(move || serve_one(conn));
    }
}

/// Writes a line to the caller's standard error: what went wrong before
/// its command ran.
fn tell(stderr: &OwnedFd, msg: &str) {
    let _ = rustix::io::write(stderr, format!("sudo: {msg}\n").as_bytes());
}

fn serve_one(conn: OwnedFd) {
    let Ok((bytes, fds)) = wire::recv(conn.as_fd(), wire::MAX_REQUEST) else {
        return;
    };
    let Ok([stdin, stdout, stderr]) = <[OwnedFd; wire::STDIO_FDS]>::try_from(fds) else {
        return;
    };
    let req = match wire::decode(&bytes) {
        Ok(r) => r,
        Err(e) => {
            tell(&stderr, &e.to_string());
            let _ = wire::send(conn.as_fd(), &wire::status_bytes(1), &[]);
            return;
        }
    };
    let code = match spawn(&req, stdin, stdout, &stderr) {
        Ok(child) => watch(&conn, child),
        Err(code) => code,
    };
    let _ = wire::send(conn.as_fd(), &wire::status_bytes(code), &[]);
}

fn spawn(
    req: &wire::Request,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: &OwnedFd,
) -> Result<std::process::Child, i32> {
    let program = OsStr::from_bytes(&req.argv[0]);
    let mut cmd = Command::new(program);
    cmd.args(req.argv[1..].iter().map(|a| OsStr::from_bytes(a)));
    cmd.env_clear();
    for e in &req.env {
        if let Some(i) = e.iter().position(|&c| c == b'=') {
            cmd.env(OsStr::from_bytes(&e[..i]), OsStr::from_bytes(&e[i + 1..]));
        }
    }
    // The caller's directory, as sudo keeps it; `/` if it is gone.
    let cwd = OsStr::from_bytes(&req.cwd);
    cmd.current_dir(if std::path::Path::new(cwd).is_dir() {
        cwd
    } else {
        OsStr::new("/")
    });
    let err = stderr
        .try_clone()
        .map_err(|_| 1)
        .inspect_err(|_| tell(stderr, "cannot pass on standard error"))?;
    cmd.stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(err));
    // Its own closure, not `lazaret_helpers::child::setup`: this static
    // in-sandbox binary links no library but lazaret-seccomp, and that
    // crate would bring it the protocol crate, nix and the hashes.
    // SAFETY: between fork and exec the child only calls setsid, signal
    // and sigprocmask, which are async-signal-safe and touch no memory of
    // the parent's (the set is on the child's stack).
    unsafe {
        cmd.pre_exec(|| {
            // A session and process group of its own: the caller's signals
            // reach the whole command, and nothing else. libc's, not
            // rustix's: gVisor releases of 2022 return 0 for the new
            // session, which rustix asserts against.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The command starts as a sudo'd command would, whatever the
            // service inherited: the init starts it in the background,
            // where a shell ignores SIGINT and SIGQUIT, and an ignored
            // signal stays ignored across exec (^C would reach nothing).
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        tell(stderr, &format!("{}: {e}", program.to_string_lossy()));
        match e.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    })
}

/// Forwards the caller's signals to the command's process group until it
/// ends, and gives its status. A caller that goes away hangs the command
/// up, as a closed terminal would.
fn watch(conn: &OwnedFd, mut child: std::process::Child) -> i32 {
    let pid = Pid::from_child(&child);
    // Set under the lock once the command has ended but before it is
    // reaped, so that no signal goes to a reused process group.
    let ended = Arc::new(Mutex::new(false));
    if let Ok(reader) = conn.try_clone() {
        let ended = ended.clone();
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || loop {
                let got = wire::recv(reader.as_fd(), 1);
                let sig = match &got {
                    Ok((b, _)) if b.len() == 1 => FORWARDED
                        .iter()
                        .copied()
                        .find(|s| s.as_raw() == i32::from(b[0])),
                    Ok(_) | Err(_) => Some(Signal::HUP),
                };
                let gone = !matches!(&got, Ok((b, _)) if !b.is_empty());
                let done = ended.lock().unwrap_or_else(|p| p.into_inner());
                if *done {
                    return;
                }
                if let Some(s) = sig {
                    let _ = rustix::process::kill_process_group(pid, s);
                }
                drop(done);
                if gone {
                    return;
                }
            });
    }
    // Waits for the end without reaping, so the pid stays the command's
    // while a forwarded signal may still be on its way.
    while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
        rustix::process::WaitId::Pid(pid),
        rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
    ) {}
    *ended.lock().unwrap_or_else(|p| p.into_inner()) = true;
    match child.wait() {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A caller over a socket pair: `argv` with a pipe for each standard
    /// descriptor; what came out and the status.
    fn call(argv: &[&str], cwd: &str, signal: Option<Signal>) -> (String, String, i32) {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let server = std::thread::spawn(move || serve_one(theirs));
        let (in_r, in_w) = rustix::pipe::pipe().unwrap();
        let (out_r, out_w) = rustix::pipe::pipe().unwrap();
        let (err_r, err_w) = rustix::pipe::pipe().unwrap();
        let req = wire::Request {
            argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: vec![b"PATH=/usr/bin:/bin".to_vec(), b"MARK=m-31".to_vec()],
            cwd: cwd.as_bytes().to_vec(),
        };
        wire::send(
            ours.as_fd(),
            &wire::encode(&req).unwrap(),
            &[in_r.as_fd(), out_w.as_fd(), err_w.as_fd()],
        )
        .unwrap();
        drop((in_r, out_w, err_w));
        rustix::io::write(&in_w, b"from-stdin").unwrap();
        drop(in_w);
        if let Some(s) = signal {
            std::thread::sleep(std::time::Duration::from_millis(300));
            wire::send(ours.as_fd(), &[s.as_raw() as u8], &[]).unwrap();
        }
        let (status, _) = wire::recv(ours.as_fd(), 4).unwrap();
        server.join().unwrap();
        let read = |fd: OwnedFd| {
            let mut s = String::new();
            std::fs::File::from(fd).read_to_string(&mut s).unwrap();
            s
        };
        (read(out_r), read(err_r), wire::status_of(&status).unwrap())
    }

    #[test]
    fn the_command_gets_the_callers_stdio_environment_directory_and_status() {
        let (out, err, code) = call(
            &[
                "sh",
                "-c",
                "cat; echo \" $MARK $(pwd)\"; echo to-err >&2; exit 3",
            ],
            "/tmp",
            None,
        );
        assert_eq!(out, "from-stdin m-31 /tmp\n");
        assert_eq!(err, "to-err\n");
        assert_eq!(code, 3);
        // A directory that is gone: `/`.
        let (out, _, _) = call(&["pwd"], "/no/such/dir", None);
        assert_eq!(out, "/\n");
    }

    #[test]
    fn a_missing_command_is_127_and_said_on_the_callers_stderr() {
        let (out, err, code) = call(&["no-such-command-7f3"], "/", None);
        assert_eq!((out.as_str(), code), ("", 127));
        assert!(err.starts_with("sudo: no-such-command-7f3: "), "{err}");
    }

    #[test]
    fn a_forwarded_signal_reaches_the_command() {
        // As in the sandbox, where the init starts the service in the
        // background: SIGINT ignored in the service, which the command
        // must not inherit. (No other test here uses SIGINT.)
        // SAFETY: sets this process's SIGINT disposition to ignore; no
        // handler runs, so nothing races with it.
        let before = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        let (_, _, code) = call(&["sleep", "30"], "/", Some(Signal::INT));
        // SAFETY: as above, putting back what was there.
        unsafe { libc::signal(libc::SIGINT, before) };
        assert_eq!(code, 128 + 2);
    }
}
