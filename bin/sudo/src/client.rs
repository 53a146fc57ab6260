//! The caller's side: its command, environment, directory and standard
//! descriptors to the service; its signals after them; the status back.

use crate::wire;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

pub fn run(argv: &[OsString]) -> i32 {
    match run_inner(argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sudo: {e}");
            1
        }
    }
}

/// The caller's descriptor `n`, or `/dev/null` where it has none open
/// (a closed standard input).
fn stdio(n: i32) -> Result<Stdio, String> {
    // SAFETY: only borrowed for the fcntl probe; `n` is 0, 1 or 2.
    let fd = unsafe { BorrowedFd::borrow_raw(n) };
    if rustix::io::fcntl_getfd(fd).is_ok() {
        return Ok(Stdio::Ours(n));
    }
    std::fs::OpenOptions::new()
        .read(n == 0)
        .write(n != 0)
        .open("/dev/null")
        .map(|f| Stdio::Null(OwnedFd::from(f)))
        .map_err(|e| format!("cannot open /dev/null: {e}"))
}

enum Stdio {
    Ours(i32),
    Null(OwnedFd),
}

impl Stdio {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            // SAFETY: 0, 1 or 2, checked open by `stdio`, and open for as
            // long as this process runs.
            Stdio::Ours(n) => unsafe { BorrowedFd::borrow_raw(*n) },
            Stdio::Null(f) => f.as_fd(),
        }
    }
}

fn run_inner(argv: &[OsString]) -> Result<i32, String> {
    let request = wire::Request {
        argv: argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: std::env::vars_os()
            .map(|(k, v)| {
                let mut e = k.as_bytes().to_vec();
                e.push(b'=');
                e.extend_from_slice(v.as_bytes());
                e
            })
            .collect(),
        cwd: std::env::current_dir()
            .map(|d| d.as_os_str().as_bytes().to_vec())
            .unwrap_or_else(|_| b"/".to_vec()),
    };
    let bytes = wire::encode(&request)?;
    let sock = wire::socket().map_err(|e| format!("cannot make a socket: {e}"))?;
    let addr = wire::address().map_err(|e| format!("cannot name the socket: {e}"))?;
    rustix::net::connect(&sock, &addr).map_err(|e| {
        format!("Lazaret's sudo service does not answer ({e}); it starts with the sandbox when the profile has a `user`")
    })?;
    let fds = [stdio(0)?, stdio(1)?, stdio(2)?];
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(Stdio::fd).collect();
    wire::send(sock.as_fd(), &bytes, &borrowed)
        .map_err(|e| format!("cannot ask Lazaret's sudo service: {e}"))?;
    drop(fds);
    forward_signals(&sock);
    match wire::recv(sock.as_fd(), 4) {
        Ok((b, _)) => wire::status_of(&b)
            .map(|c| c & 0xff)
            .ok_or_else(|| "Lazaret's sudo service ended without a status".into()),
        Err(e) => Err(format!("Lazaret's sudo service: {e}")),
    }
}

/// SIGINT, SIGQUIT, SIGTERM and SIGHUP sent to this process go on to the
/// command: the terminal's ^C reaches this process, the command has a
/// session of its own.
fn forward_signals(sock: &OwnedFd) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let Ok(writer) = sock.try_clone() else {
        return;
    };
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGQUIT, SIGTERM, SIGHUP])
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for s in signals.forever() {
                let _ = wire::send(writer.as_fd(), &[s as u8], &[]);
            }
        });
}
