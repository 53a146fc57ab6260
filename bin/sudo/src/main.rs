//! `lazaret-sudo`: root inside the sandbox for a profile's `user`,
//! without a set-user-ID program (gVisor runs none unless runsc has
//! `--allow-suid`, from August 2025).
//!
//! - `lazaret-sudo --serve`: started as root by the sandbox's init when
//!   the profile has a `user` (and restarted a second after it ends). It
//!   listens on the abstract socket `@lazaret-sudo` and runs each request
//!   as root: the caller's argv, environment and directory, with the
//!   caller's standard input, output and error (passed with `SCM_RIGHTS`),
//!   in a session of its own; signals the caller forwards reach the
//!   command's process group; the exit status goes back.
//! - `lazaret-sudo --run [--] COMMAND...`: the client, which Lazaret's
//!   `sudo` script (bin/coordinator/src/sudo.sh, at `/usr/local/bin/sudo`)
//!   execs once it has parsed sudo's options.
//!
//! Any process inside may ask, as with `NOPASSWD: ALL` for everyone: every
//! process inside is the same agent's, root inside has no more than a root
//! session has (the sandbox's capability bound), and the sandbox, not root
//! inside, is the boundary. It holds nothing of the host's and never
//! talks to the host; hence no landlock or seccomp of its own.
//!
//! Exit codes of `--run`: the command's status (128 + N when signal N
//! ended it); 1 when the service does not answer; 126/127 when the
//! command cannot be run or is not found. `--serve` exits 1 when it cannot
//! listen; both exit 2 on bad arguments.

mod client;
mod confinement;
mod serve;
mod wire;

use std::os::unix::ffi::OsStrExt;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        confinement::sudo().print_and_exit();
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let code = match args.first().map(|a| a.as_bytes()) {
        Some(b"--serve") if args.len() == 1 => match serve::serve() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("lazaret-sudo: {e}");
                1
            }
        },
        Some(b"--run") => {
            let mut rest = &args[1..];
            if rest.first().is_some_and(|a| a.as_bytes() == b"--") {
                rest = &rest[1..];
            }
            if rest.is_empty() {
                eprintln!("lazaret-sudo: --run needs a command");
                2
            } else {
                client::run(rest)
            }
        }
        _ => {
            eprintln!("usage: lazaret-sudo --serve | lazaret-sudo --run [--] COMMAND [ARG...]");
            2
        }
    };
    std::process::exit(code);
}
