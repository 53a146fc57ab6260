//! A real pseudo-terminal for tests: the test holds the master and
//! types, `lazaret` gets the slave as its controlling terminal.

use crate::{text, Workspace};
use nix::pty::{openpty, Winsize};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A terminal's status request, which the test's terminal answers.
const DSR: &[u8] = b"\x1b[5n";

pub struct Pty {
    pub master: std::fs::File,
    pub slave: OwnedFd,
    pub seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let ws = Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let p = openpty(Some(&ws), None).unwrap();
        let master = std::fs::File::from(p.master);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut r = master.try_clone().unwrap();
        let mut answer = master.try_clone().unwrap();
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The end of the last read: a request may span two.
            let mut tail = Vec::new();
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                // Like a terminal, answer each status request (DSR 5),
                // and before the output after it is seen: the Host
                // Escalation prompt takes keys once the terminal answered
                // the one it sends before its question.
                tail.extend_from_slice(&buf[..n]);
                let asked = tail.windows(DSR.len()).filter(|w| *w == DSR).count();
                for _ in 0..asked {
                    let _ = answer.write_all(b"\x1b[0n");
                }
                tail.drain(..tail.len().saturating_sub(DSR.len() - 1));
                s.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            master,
            slave: p.slave,
            seen,
        }
    }

    /// Starts `lazaret ARGS` with the PTY as its controlling terminal.
    pub fn spawn(&self, ws: &Workspace, args: &[&str]) -> Session {
        self.spawn_term(ws, args, "xterm")
    }

    /// [`Pty::spawn`] with the host terminal's type `term`.
    pub fn spawn_term(&self, ws: &Workspace, args: &[&str], term: &str) -> Session {
        let mut cmd = ws.lazaret(args);
        cmd.env("TERM", term)
            .stdin(Stdio::from(self.slave.try_clone().unwrap()))
            .stdout(Stdio::from(self.slave.try_clone().unwrap()))
            .stderr(Stdio::from(self.slave.try_clone().unwrap()));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Session(cmd.spawn().unwrap())
    }

    pub fn send(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).unwrap();
    }

    /// Waits until `needle` appears in the output after `from`; returns
    /// the position after it.
    pub fn expect(&self, from: usize, needle: &str, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let seen = self.seen.lock().unwrap();
                let hay = text(&seen[from.min(seen.len())..]);
                if let Some(i) = hay.find(needle) {
                    return from + i + needle.len();
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{needle:?} did not appear; output so far: {:?}",
                    text(&self.seen.lock().unwrap())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn modes(&self) -> nix::sys::termios::Termios {
        nix::sys::termios::tcgetattr(&self.slave).unwrap()
    }
}

pub fn wait(child: &mut Child, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lazaret did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `lazaret` under test, killed if the test ends without waiting for it
/// (a failed assertion must not leave a session, and its Domain, behind).
pub struct Session(pub Child);

impl std::ops::Deref for Session {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
