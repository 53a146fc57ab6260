//! `lazaret ps`, `lazaret stop` and `lazaret logs`: what runs, stopping
//! it, and what it said.
//!
//! A running Domain is one whose lock a coordinator holds; it is asked
//! over its host-private socket (the peer-uid check of every session
//! applies) what it serves, and to stop. Nothing here finds a process by
//! its command line.
//!
//! Exit status: 0 on success; 125 when Lazaret itself failed; `stop`
//! gives 125 when a Domain did not stop within its bound.

use crate::error::CliError;
use crate::state_cmd::{self, Which};
use lazaret_protocol::display;
use lazaret_protocol::frame::{read_frame, write_frame};
use lazaret_protocol::session::{Control, DomainStatus, Hello, ServerMsg};
use serde::Serialize;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `stop`, and commands that need an inactive Domain, wait for a
/// Domain to finish stopping (its teardown waits up to 45 s for the
/// supervisor, and 10 s for runsc).
pub const STOP_WAIT: Duration = Duration::from_secs(90);

/// Asks the Domain's coordinator one control question; `None` when none
/// answers (not running, starting, or stopping).
pub fn ask(domain_root: &Path, c: Control) -> Option<ServerMsg> {
    let mut s = crate::run::connect(domain_root).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    let hello = Hello::control(c);
    // Not a SIGPIPE if the coordinator refused us and left: this command
    // runs with SIGPIPE's default action.
    write_frame(&mut lazaret_trust::tls::NoSigPipe(&s), &hello).ok()?;
    read_frame(&mut s).ok()
}

/// Whether a coordinator holds the Domain lock at `lock`.
pub fn is_running(lock: &Path) -> bool {
    let Ok(f) = std::fs::File::open(lock) else {
        return false;
    };
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
}

/// Waits until no coordinator holds `lock`, up to `bound`.
pub fn wait_stopped(lock: &Path, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while is_running(lock) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Bytes of memory the Domain's processes hold: the resident set of every
/// process in the sandbox holder's PID namespace (the Sentry's includes
/// the sandbox's memory file). `None` when it cannot be read.
fn memory_of(holder: i32) -> Option<u64> {
    let ns = std::fs::read_link(format!("/proc/{holder}/ns/pid")).ok()?;
    let mut total = 0u64;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .as_ref()
            != Some(&ns)
        {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if let Some(kb) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            total += kb * 1024;
        }
    }
    Some(total)
}

#[derive(Serialize)]
struct PsRow {
    domain_id: String,
    profile: Option<String>,
    workspace: Option<String>,
    /// "running", or "starting or stopping" when the coordinator holds the
    /// Domain but does not answer.
    state: String,
    generation: Option<u64>,
    sessions: Option<u32>,
    /// Seconds since this generation became ready.
    uptime_s: Option<u64>,
    memory_bytes: Option<u64>,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `1h02m`, `3m05s`, `42s`.
pub fn human_duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `lazaret ps [--json]`.
pub fn ps(config: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let mut rows = Vec::new();
    for d in state_cmd::all_domains(config)? {
        if !is_running(&d.layout.lock()) {
            continue;
        }
        let status = match ask(&d.layout.root, Control::Status) {
            Some(ServerMsg::Status(s)) => Some(s),
            _ => None,
        };
        let meta = d.meta.as_ref();
        rows.push(PsRow {
            domain_id: d.id.clone(),
            profile: meta.map(|m| m.profile.clone()),
            workspace: meta.map(|m| m.workspace.clone()),
            state: if status.is_some() {
                "running"
            } else {
                "starting or stopping"
            }
            .into(),
            generation: status.as_ref().map(|s| s.generation),
            sessions: status.as_ref().map(|s| s.sessions),
            uptime_s: status.as_ref().map(|s| now().saturating_sub(s.started)),
            memory_bytes: status
                .as_ref()
                .and_then(|s: &DomainStatus| s.holder_pid)
                .and_then(memory_of),
        });
    }
    if json {
        println!(
            "{}",
            display::ascii_json(&serde_json::to_string_pretty(&rows).expect("json"))
        );
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no Domain is running");
        return Ok(0);
    }
    println!(
        "{:<12}  {:<12}  {:>8}  {:>7}  {:>10}  {:<9}  WORKSPACE",
        "DOMAIN", "PROFILE", "SESSIONS", "UPTIME", "MEMORY", "STATE"
    );
    let o = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in rows {
        println!(
            "{:<12}  {:<12}  {:>8}  {:>7}  {:>10}  {:<9}  {}",
            &r.domain_id[..12],
            display::bounded(o(r.profile), 12),
            o(r.sessions.map(|n| n.to_string())),
            o(r.uptime_s.map(human_duration)),
            o(r.memory_bytes.map(crate::state_cmd::human_bytes)),
            if r.state == "running" {
                "running"
            } else {
                "changing"
            },
            display::message(&o(r.workspace)),
        );
    }
    Ok(0)
}

/// `lazaret stop [--all | Domain]`: asks each running Domain to end its
/// sessions and tear down, and waits until it is down.
pub fn stop(which: &Which, all: bool) -> Result<i32, CliError> {
    let domains = if all {
        state_cmd::all_domains(which.config())?
            .into_iter()
            .filter(|d| is_running(&d.layout.lock()))
            .collect()
    } else {
        vec![state_cmd::resolve(which)?]
    };
    let mut failed = false;
    for d in &domains {
        let lock = d.layout.lock();
        if !is_running(&lock) {
            println!("Domain {} is not running", d.id);
            continue;
        }
        match ask(&d.layout.root, Control::Stop) {
            Some(ServerMsg::Stopping) => {}
            Some(ServerMsg::Refused { reason }) => {
                eprintln!("lazaret: Domain {}: {}", d.id, display::message(&reason));
                failed = true;
                continue;
            }
            // Not answering: it is starting or already stopping; wait.
            _ => eprintln!("lazaret: Domain {} is starting or stopping: waiting", d.id),
        }
        if wait_stopped(&lock, STOP_WAIT) {
            println!("stopped Domain {}", d.id);
        } else {
            eprintln!(
                "lazaret: Domain {} did not stop within {} s: see `lazaret logs --domain {}`",
                d.id,
                STOP_WAIT.as_secs(),
                d.id
            );
            failed = true;
        }
    }
    if all && domains.is_empty() {
        println!("no Domain is running");
    }
    Ok(if failed {
        crate::error::LAZARET_FAILED
    } else {
        0
    })
}

/// `lazaret logs [-f] [--helpers]`: the Domain's timestamped coordinator
/// events (or what its helpers said), escaped for the terminal: helpers
/// such as runsc may repeat what the sandbox chose. Oldest first across
/// the log's rotations (`NAME.4` .. `NAME.1`, then `NAME`); with `follow`,
/// keeps printing the current file, and the rest of one rotated away
/// meanwhile, until the Domain is no longer running.
pub fn logs(which: &Which, follow: bool, helpers: bool) -> Result<i32, CliError> {
    use lazaret_protocol::logs;
    let d = state_cmd::resolve(which)?;
    let name = if helpers {
        logs::HELPERS_LOG
    } else {
        logs::COORDINATOR_LOG
    };
    let root = &d.layout.root;
    let mut out = std::io::stdout().lock();
    let mut printer = Printer::default();
    let mut files = logs::files(root, name);
    let current = files.pop().unwrap_or_else(|| root.join(name));
    let mut any = false;
    for p in &files {
        if let Ok(mut f) = std::fs::File::open(p) {
            any = true;
            printer.file(&mut f, &mut out);
        }
    }
    let mut tail = Tail::default();
    loop {
        // Looked at before reading, so that what a stopping Domain wrote
        // last is read once more.
        let running = follow && is_running(&d.layout.lock());
        match tail.read(&current, &mut printer, &mut out) {
            Ok(()) => any = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !follow && !any => {
                eprintln!("lazaret: Domain {} has no {name} yet", d.id);
                return Ok(0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CliError::Session(format!(
                    "cannot read {}: {e}",
                    display::escape_os(current.as_os_str())
                )))
            }
        }
        let _ = out.flush();
        if !running {
            printer.end(&mut out);
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Prints a log's bytes line by line, escaped; an unfinished line waits
/// for its end (or for [`Printer::end`]).
#[derive(Default)]
struct Printer {
    partial: Vec<u8>,
}

impl Printer {
    fn bytes(&mut self, buf: &[u8], out: &mut impl Write) {
        self.partial.extend_from_slice(buf);
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let _ = writeln!(out, "{}", display::escape(&line[..line.len() - 1]));
        }
    }

    /// All of `f` from where it stands; the bytes read.
    fn file(&mut self, f: &mut std::fs::File, out: &mut impl Write) -> u64 {
        let mut n = 0;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k) = f.read(&mut buf) {
            if k == 0 {
                break;
            }
            self.bytes(&buf[..k], out);
            n += k as u64;
        }
        n
    }

    fn end(&mut self, out: &mut impl Write) {
        if !self.partial.is_empty() {
            let _ = writeln!(out, "{}", display::escape(&self.partial));
            self.partial.clear();
        }
    }
}

/// Where a follower of a log's current file is: the file (by device and
/// inode) and how much of it was printed.
#[derive(Default)]
struct Tail {
    file: Option<std::fs::File>,
    id: Option<(u64, u64)>,
    pos: u64,
}

impl Tail {
    /// Prints what is new in `path`. When it is another file than last
    /// time (the log was rotated), the rest of the one followed is printed
    /// first, then the new one from its start.
    fn read(
        &mut self,
        path: &Path,
        printer: &mut Printer,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let mut f = std::fs::File::open(path)?;
        let m = f.metadata()?;
        let id = (m.dev(), m.ino());
        if self.id != Some(id) {
            if let Some(mut old) = self.file.take() {
                let _ = old.seek(std::io::SeekFrom::Start(self.pos));
                printer.file(&mut old, out);
            }
            self.pos = 0;
        } else if m.len() < self.pos {
            // Cut short: from its start.
            self.pos = 0;
        }
        let _ = f.seek(std::io::SeekFrom::Start(self.pos));
        self.pos += printer.file(&mut f, out);
        self.id = Some(id);
        self.file = Some(f);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_reads_the_rest_of_a_rotated_file_then_the_new_one() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("coordinator.log");
        std::fs::write(&log, "one\ntw").unwrap();
        let (mut tail, mut printer, mut out) = (Tail::default(), Printer::default(), Vec::new());
        tail.read(&log, &mut printer, &mut out).unwrap();
        assert_eq!(out, b"one\n");
        // Written, then rotated away, then a new file begun.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"o\nthree\n").unwrap();
        std::fs::rename(&log, d.path().join("coordinator.log.1")).unwrap();
        std::fs::write(&log, "checkpoint\nfour\n\x1b[2J\n").unwrap();
        tail.read(&log, &mut printer, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "one\ntwo\nthree\ncheckpoint\nfour\n\\x1b[2J\n"
        );
        // Nothing new: nothing printed.
        tail.read(&log, &mut printer, &mut out).unwrap();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 6);
    }

    #[test]
    fn durations_are_human() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(185), "3m05s");
        assert_eq!(human_duration(3720), "1h02m");
    }
}
