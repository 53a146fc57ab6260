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

/// Why the caller's request did not reach the service, or no status came
/// back.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    #[error("cannot make a socket: {0}")]
    Socket(rustix::io::Errno),
    #[error("cannot name the socket: {0}")]
    Address(rustix::io::Errno),
    #[error("Lazaret's sudo service does not answer ({0}); it starts with the sandbox when the profile has a `user`")]
    NoService(rustix::io::Errno),
    #[error("cannot open /dev/null: {0}")]
    DevNull(std::io::Error),
    #[error("cannot ask Lazaret's sudo service: {0}")]
    Ask(rustix::io::Errno),
    #[error("Lazaret's sudo service ended without a status")]
    NoStatus,
    /// The status could not be received.
    #[error("Lazaret's sudo service: {0}")]
    Status(rustix::io::Errno),
}

/// The caller's descriptor `n`, or `/dev/null` where it has none open
/// (a closed standard input).
fn stdio(n: i32) -> Result<Stdio, ClientError> {
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
        .map_err(ClientError::DevNull)
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

fn run_inner(argv: &[OsString]) -> Result<i32, ClientError> {
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
    let sock = wire::socket().map_err(ClientError::Socket)?;
    let addr = wire::address().map_err(ClientError::Address)?;
    rustix::net::connect(&sock, &addr).map_err(ClientError::NoService)?;
    let fds = [stdio(0)?, stdio(1)?, stdio(2)?];
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(Stdio::fd).collect();
    wire::send(sock.as_fd(), &bytes, &borrowed).map_err(ClientError::Ask)?;
    drop(fds);
    forward_signals(&sock);
    match wire::recv(sock.as_fd(), 4) {
        Ok((b, _)) => wire::status_of(&b)
            .map(|c| c & 0xff)
            .ok_or(ClientError::NoStatus),
        Err(e) => Err(ClientError::Status(e)),
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
