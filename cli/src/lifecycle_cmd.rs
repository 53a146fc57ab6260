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
/// such as runsc may repeat what the sandbox chose. With `follow`, keeps
/// printing until the Domain is no longer running.
pub fn logs(which: &Which, follow: bool, helpers: bool) -> Result<i32, CliError> {
    let d = state_cmd::resolve(which)?;
    let name = if helpers {
        "helpers.log"
    } else {
        "coordinator.log"
    };
    let path = d.layout.root.join(name);
    let mut out = std::io::stdout().lock();
    let mut pos = 0u64;
    let mut partial = Vec::new();
    loop {
        // Looked at before reading, so that what a stopping Domain wrote
        // last is read once more.
        let running = follow && is_running(&d.layout.lock());
        match std::fs::File::open(&path) {
            Ok(mut f) => {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if len < pos {
                    // Begun anew (past 1 MiB): from its start.
                    pos = 0;
                    partial.clear();
                }
                let _ = f.seek(std::io::SeekFrom::Start(pos));
                let mut buf = Vec::new();
                let _ = f.take(1 << 20).read_to_end(&mut buf);
                pos += buf.len() as u64;
                partial.extend_from_slice(&buf);
                while let Some(i) = partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=i).collect();
                    let _ = writeln!(out, "{}", display::escape(&line[..line.len() - 1]));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !follow => {
                eprintln!("lazaret: Domain {} has no {name} yet", d.id);
                return Ok(0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CliError::Session(format!(
                    "cannot read {}: {e}",
                    display::escape_os(path.as_os_str())
                )))
            }
        }
        let _ = out.flush();
        if !running {
            if !partial.is_empty() {
                let _ = writeln!(out, "{}", display::escape(&partial));
            }
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_human() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(185), "3m05s");
        assert_eq!(human_duration(3720), "1h02m");
    }
}
