//! The Domain's logs in its Domain Root, and their bounds.
//!
//! Every log that events the sandbox can trigger write while a Domain
//! runs is bounded for the Domain's whole life, not only at start: it is
//! rotated when the next write would take it past [`MAX_BYTES`], into
//! `NAME.1` (newest) .. `NAME.ROTATIONS` (oldest; the one before is
//! dropped), so a log and its rotations never hold more than
//! `(ROTATIONS + 1) * MAX_BYTES`. Readers (`lazaret logs`, `lazaret
//! escalations`, the end-to-end tests' lifecycle replay) read
//! [`files`], oldest first.
//!
//! - `coordinator.log`: the coordinator's timestamped events; repeated
//!   events the sandbox triggers (refused mailbox entries) are coalesced
//!   into one line per kind and interval with a count; a rotated file
//!   begins with a `lifecycle: checkpoint` line (see
//!   [`crate::lifecycle::Checkpoint`]).
//! - `helpers.log`: what the supervisor and every helper under it write,
//!   copied there by the coordinator from a pipe; consecutive repeated
//!   lines are coalesced.
//! - `escalations.log`: see [`crate::escalation::bounds`].
//!
//! Every `coordinator.log` line begins with its time, always
//! [`TIME_FORMAT`] (UTC, milliseconds: every line the same width), then
//! `lazaret-coordinator[PID]: `. What a Client Session ran and why it
//! ended are [`SessionLog`] lines: the argument vector and the start
//! directory escaped and quoted (`display::quoted`, so a line is one line
//! whatever the bytes), never the session's environment.

use crate::display;
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// The time at the start of every `coordinator.log` line, for `jiff`'s
/// `strftime` of a UTC timestamp: `2026-12-02T16:31:05.120Z`.
pub const TIME_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// What a Client Session ran, or why it ended, as `coordinator.log`
/// says it (`session ID ran ...`, `session ID ended: ...`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SessionLog {
    /// The command a session runs in the sandbox (`None`: a login shell),
    /// where it starts, and whether on a terminal.
    Ran {
        session: String,
        argv: Option<Vec<String>>,
        workdir: String,
        terminal: bool,
    },
    /// How it ended.
    Ended {
        session: String,
        #[serde(flatten)]
        end: SessionEnd,
    },
}

/// Why a Client Session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum SessionEnd {
    /// The command ended with `status` (128+N when signal N ended it).
    Exited { status: i32 },
    /// The client (`lazaret run`) went away first: the session was hung
    /// up (SIGHUP), and then ended with `status`.
    HungUp { status: i32 },
    /// `lazaret stop` (or the coordinator's SIGTERM) ended it.
    DomainStopped { status: i32 },
    /// The sandbox ended under it.
    SandboxStopped,
    /// runsc did not run the command: 127 not found, 126 not runnable,
    /// 125 runsc's own failure.
    NotRun { status: i32 },
    /// Its status is unknown (runsc could not write its PID file, or the
    /// exec bridge was killed).
    Unknown,
}

/// `SIGKILL` for 9; the name of the common signals a status 128+N stands for.
pub fn signal_name(n: i32) -> Option<&'static str> {
    Some(match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return None,
    })
}

/// `status 0`; `status 137 (signal 9, SIGKILL)`.
fn status_text(status: i32) -> String {
    match signal_name(status - 128) {
        Some(name) if status > 128 => format!("status {status} (signal {}, {name})", status - 128),
        _ => format!("status {status}"),
    }
}

const SESSION: &str = "session ";

impl fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SessionEnd::Exited { status } => write!(f, "{}", status_text(status)),
            SessionEnd::HungUp { status } => {
                write!(f, "the client hung up, {}", status_text(status))
            }
            SessionEnd::DomainStopped { status } => {
                write!(f, "the Domain was stopped, {}", status_text(status))
            }
            SessionEnd::SandboxStopped => write!(f, "the sandbox stopped while the command ran"),
            SessionEnd::NotRun { status } => {
                write!(f, "the command did not run, {}", status_text(status))
            }
            SessionEnd::Unknown => write!(f, "status unknown"),
        }
    }
}

impl fmt::Display for SessionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionLog::Ran {
                session,
                argv,
                workdir,
                terminal,
            } => {
                write!(f, "{SESSION}{session} ran ")?;
                match argv {
                    Some(a) => write!(f, "{}", display::argv_in(a, display::Charset::Ascii))?,
                    None => write!(f, "a login shell")?,
                }
                let on = if *terminal { "with" } else { "without" };
                write!(
                    f,
                    " in {} {on} a terminal",
                    display::quoted_in(workdir, display::Charset::Ascii)
                )
            }
            SessionLog::Ended { session, end } => write!(f, "{SESSION}{session} ended: {end}"),
        }
    }
}

/// The quoted arguments at the start of `s` (as [`display::argv`] writes
/// them) and what follows them.
fn quoted_words(mut s: &str) -> Option<(Vec<String>, &str)> {
    let mut words = Vec::new();
    while let Some(rest) = s.strip_prefix('"') {
        let mut end = None;
        let mut escaped = false;
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end?;
        let bytes = display::unescape(&rest[..end])?;
        words.push(String::from_utf8(bytes).ok()?);
        s = &rest[end + 1..];
        match s.strip_prefix(' ') {
            Some(r) if r.starts_with('"') => s = r,
            _ => break,
        }
    }
    Some((words, s))
}

fn status_of(s: &str) -> Option<i32> {
    let n = s.strip_prefix("status ")?;
    n.split(' ').next()?.parse().ok()
}

impl SessionEnd {
    fn parse(s: &str) -> Option<SessionEnd> {
        Some(if let Some(r) = s.strip_prefix("the client hung up, ") {
            SessionEnd::HungUp {
                status: status_of(r)?,
            }
        } else if let Some(r) = s.strip_prefix("the Domain was stopped, ") {
            SessionEnd::DomainStopped {
                status: status_of(r)?,
            }
        } else if let Some(r) = s.strip_prefix("the command did not run, ") {
            SessionEnd::NotRun {
                status: status_of(r)?,
            }
        } else if s == "the sandbox stopped while the command ran" {
            SessionEnd::SandboxStopped
        } else if s == "status unknown" {
            SessionEnd::Unknown
        } else {
            SessionEnd::Exited {
                status: status_of(s)?,
            }
        })
    }
}

impl SessionLog {
    /// The record of a `coordinator.log` message (what follows
    /// `lazaret-coordinator[PID]: `), as [`Display`](fmt::Display) writes
    /// it.
    pub fn parse(text: &str) -> Option<SessionLog> {
        let rest = text.strip_prefix(SESSION)?;
        let (session, rest) = rest.split_once(' ')?;
        let hex = session.len() == 32 && session.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return None;
        }
        let session = session.to_string();
        if let Some(end) = rest.strip_prefix("ended: ") {
            return Some(SessionLog::Ended {
                session,
                end: SessionEnd::parse(end)?,
            });
        }
        let rest = rest.strip_prefix("ran ")?;
        let (argv, rest) = match rest.strip_prefix("a login shell") {
            Some(r) => (None, r),
            None => {
                let (a, r) = quoted_words(rest)?;
                (Some(a), r)
            }
        };
        let (workdir, rest) = quoted_words(rest.strip_prefix(" in ")?)?;
        let [workdir] = <[String; 1]>::try_from(workdir).ok()?;
        let terminal = match rest {
            " with a terminal" => true,
            " without a terminal" => false,
            _ => return None,
        };
        Some(SessionLog::Ran {
            session,
            argv,
            workdir,
            terminal,
        })
    }
}

/// One `coordinator.log` line: its time (milliseconds since the epoch, as
/// written with [`TIME_FORMAT`] or any RFC 3339 precision before it), the
/// coordinator's PID and the message. `None` for a line of another form
/// (what else went to the coordinator's stderr, a panic).
pub fn split_line(line: &str) -> Option<(&str, u32, &str)> {
    let (time, rest) = line.split_once(" lazaret-coordinator[")?;
    let (pid, msg) = rest.split_once("]: ")?;
    Some((time, pid.parse().ok()?, msg))
}

/// The coordinator's timestamped events (`lazaret logs`).
pub const COORDINATOR_LOG: &str = "coordinator.log";
/// What the Domain's helpers say (`lazaret logs --helpers`).
pub const HELPERS_LOG: &str = "helpers.log";

/// A log file is rotated before a write would take it past this size ...
pub const MAX_BYTES: u64 = 1 << 20;
/// ... into `NAME.1` (newest) to `NAME.ROTATIONS`.
pub const ROTATIONS: usize = 4;

/// `name` under `root` and its `rotations` rotations, oldest first:
/// `NAME.rotations` down to `NAME.1`, then `NAME` itself.
pub fn files_of(root: &Path, name: &str, rotations: usize) -> Vec<PathBuf> {
    let mut v: Vec<_> = (1..=rotations)
        .rev()
        .map(|i| rotation(&root.join(name), i))
        .collect();
    v.push(root.join(name));
    v
}

/// The files of the Domain log `name` (one of this module's) under
/// `root`, oldest first.
pub fn files(root: &Path, name: &str) -> Vec<PathBuf> {
    files_of(root, name, ROTATIONS)
}

/// The `i`-th rotation of `path` (`PATH.i`).
pub fn rotation(path: &Path, i: usize) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{i}"));
    PathBuf::from(p)
}

/// The bytes of every file of the Domain log `name` under `root`, oldest
/// first (files that do not exist are skipped).
pub fn read_all(root: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let mut all = Vec::new();
    for p in files(root, name) {
        match std::fs::read(&p) {
            Ok(b) => all.extend_from_slice(&b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_lines_read_back_as_written() {
        let sid = "0123456789abcdef0123456789abcdef".to_string();
        let cases = [
            SessionLog::Ran {
                session: sid.clone(),
                argv: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    "echo \"a b\" \\ \n\x1b[2J é".into(),
                    String::new(),
                ]),
                workdir: "/workspace/a \" in b".into(),
                terminal: false,
            },
            SessionLog::Ran {
                session: sid.clone(),
                argv: None,
                workdir: "/workspace".into(),
                terminal: true,
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::Exited { status: 0 },
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::HungUp { status: 129 },
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::DomainStopped { status: 137 },
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::NotRun { status: 127 },
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::SandboxStopped,
            },
            SessionLog::Ended {
                session: sid.clone(),
                end: SessionEnd::Unknown,
            },
        ];
        for c in cases {
            let text = c.to_string();
            // One line of printable ASCII, whatever the arguments hold.
            assert!(text.bytes().all(|b| (0x20..0x7f).contains(&b)), "{text}");
            assert_eq!(SessionLog::parse(&text), Some(c), "{text}");
        }
        let ended = SessionLog::Ended {
            session: sid.clone(),
            end: SessionEnd::DomainStopped { status: 137 },
        };
        assert_eq!(
            ended.to_string(),
            format!("session {sid} ended: the Domain was stopped, status 137 (signal 9, SIGKILL)")
        );
        assert_eq!(SessionLog::parse("session 01234567: refused"), None);
        assert_eq!(SessionLog::parse(&format!("session {sid} joined")), None);
    }

    #[test]
    fn a_line_splits_into_time_pid_and_message() {
        assert_eq!(
            split_line("2026-12-02T16:31:05.12Z lazaret-coordinator[42]: owner: x"),
            Some(("2026-12-02T16:31:05.12Z", 42, "owner: x"))
        );
        assert_eq!(split_line("thread 'main' panicked"), None);
    }

    #[test]
    fn files_are_listed_oldest_first() {
        let f = files(Path::new("/r"), COORDINATOR_LOG);
        assert_eq!(f.len(), ROTATIONS + 1);
        assert_eq!(f[0], Path::new("/r/coordinator.log.4"));
        assert_eq!(f[3], Path::new("/r/coordinator.log.1"));
        assert_eq!(f[4], Path::new("/r/coordinator.log"));
    }

    #[test]
    fn read_all_concatenates_what_exists() {
        let d = std::env::temp_dir().join(format!("lazaret-logs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("helpers.log.2"), "a\n").unwrap();
        std::fs::write(d.join("helpers.log"), "c\n").unwrap();
        assert_eq!(read_all(&d, HELPERS_LOG).unwrap(), b"a\nc\n");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
