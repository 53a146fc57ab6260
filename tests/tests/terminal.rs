//! `lazaret run` under a real pseudo-terminal.

use lazaret_tests::{require_env, text, Workspace};
use nix::pty::{openpty, Winsize};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Pty {
    master: std::fs::File,
    slave: OwnedFd,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn new() -> Self {
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
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
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
    fn spawn(&self, ws: &Workspace, args: &[&str]) -> Child {
        let mut cmd = ws.lazaret(args);
        cmd.env("TERM", "xterm")
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
        cmd.spawn().unwrap()
    }

    fn send(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).unwrap();
    }

    /// Waits until `needle` appears in the output after `from`; returns
    /// the position after it.
    fn expect(&self, from: usize, needle: &str, timeout: Duration) -> usize {
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

    fn modes(&self) -> nix::sys::termios::Termios {
        nix::sys::termios::tcgetattr(&self.slave).unwrap()
    }
}

fn same_modes(a: &nix::sys::termios::Termios, b: &nix::sys::termios::Termios) -> bool {
    a.input_flags == b.input_flags
        && a.output_flags == b.output_flags
        && a.control_flags == b.control_flags
        && a.local_flags == b.local_flags
        && a.control_chars == b.control_chars
}

fn wait(child: &mut Child, timeout: Duration) -> Option<i32> {
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

#[test]
fn interactive_shell_prompt_resize_interrupt_and_restore() {
    let env = require_env!();
    let ws = env.workspace("pty");
    let mut pty = Pty::new();
    let before = pty.modes();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(10);
    let mut at = pty.expect(0, "/workspace#", long);

    pty.send("stty size; echo term=$TERM\r");
    at = pty.expect(at, "24 80", short);
    at = pty.expect(at, "term=xterm", short);
    assert!(
        !same_modes(&before, &pty.modes()),
        "the host terminal was not put in raw mode"
    );

    // A resize of the host terminal reaches the sandbox's PTY.
    rustix::termios::tcsetwinsize(
        &pty.master,
        rustix::termios::Winsize {
            ws_row: 40,
            ws_col: 132,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    pty.send("stty size\r");
    at = pty.expect(at, "40 132", short);

    // Ctrl-C reaches the foreground process group inside.
    pty.send("sleep 30; echo slept-$((40+2))\r");
    std::thread::sleep(Duration::from_millis(700));
    let sent = Instant::now();
    pty.send("\x03");
    pty.send("echo rc=$?\r");
    at = pty.expect(at, "rc=130", short);
    assert!(sent.elapsed() < Duration::from_secs(10));
    assert!(!text(&pty.seen.lock().unwrap()).contains("slept-42"));

    // Ctrl-\ quits and Ctrl-Z stops the foreground job inside.
    pty.send("sleep 32\r");
    std::thread::sleep(Duration::from_millis(700));
    pty.send("\x1c");
    pty.send("echo q=$?\r");
    at = pty.expect(at, "q=131", short);
    pty.send("sleep 33\r");
    std::thread::sleep(Duration::from_millis(700));
    pty.send("\x1a");
    at = pty.expect(at, "Stopped", short);
    pty.send("jobs -s | wc -l | sed s/^/stopped=/\r");
    at = pty.expect(at, "stopped=1", short);
    pty.send("kill -9 %1; wait; echo z=$((1+1))\r");
    at = pty.expect(at, "z=2", short);

    pty.send("exit 5\r");
    let _ = at;
    assert_eq!(wait(&mut child, short), Some(5));
    assert!(
        same_modes(&before, &pty.modes()),
        "terminal modes differ after exit"
    );
}

#[test]
fn terminal_is_untouched_when_start_up_fails() {
    let env = require_env!();
    let ws = env.workspace("pty-fail");
    ws.write_config("[profiles.default]\nimage = 5\n");
    let pty = Pty::new();
    let before = pty.modes();
    let mut child = pty.spawn(&ws, &["run"]);
    assert_eq!(wait(&mut child, Duration::from_secs(30)), Some(125));
    pty.expect(0, "error", Duration::from_secs(5));
    assert!(same_modes(&before, &pty.modes()));
}
