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
    /// Client Sessions now served.
    session_count: Option<u32>,
    /// One per session (and per detached one that ended, until `lazaret
    /// attach` collects its status).
    sessions: Vec<SessionRow>,
    /// Seconds since this generation became ready.
    uptime_s: Option<u64>,
    memory_bytes: Option<u64>,
    /// The published ports (`-p`, the profile's `ports`), as the Domain
    /// set them when it started.
    ports: Option<Vec<PsPort>>,
}

#[derive(Serialize)]
struct PsPort {
    host_addr: String,
    host_port: u16,
    sandbox_port: u16,
}

/// `127.0.0.1:8080->3000,...`, or `-`.
fn ports_column(ports: &Option<Vec<PsPort>>) -> String {
    match ports {
        Some(p) if !p.is_empty() => p
            .iter()
            .map(|p| format!("{}:{}->{}", p.host_addr, p.host_port, p.sandbox_port))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".into(),
    }
}

#[derive(Serialize)]
struct SessionRow {
    id: String,
    /// The command, escaped for a terminal (`null`: a login shell).
    command: Option<String>,
    attached: bool,
    /// Keeps running without a terminal (`run -d`, `detach_on_hangup`).
    detachable: bool,
    since_unix_ms: u64,
    /// "running", "exited N" or "failed" (ended while detached).
    state: String,
}

impl SessionRow {
    fn of(s: &lazaret_protocol::session::SessionInfo) -> Self {
        Self {
            id: s.id.clone(),
            command: s.argv.as_deref().map(display::argv),
            attached: s.attached,
            detachable: s.detachable,
            since_unix_ms: s.since_unix_ms,
            state: match (s.exit_status, s.failed) {
                (_, true) => "failed".into(),
                (Some(n), _) => format!("exited {n}"),
                (None, _) => "running".into(),
            },
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
    for d in state_cmd::all_domains_despite_config(config)? {
        if !is_running(&d.layout.lock()) {
            continue;
        }
        let status = match ask(&d.layout.root, Control::Status) {
            Some(ServerMsg::Status(s)) => Some(s),
            _ => None,
        };
        rows.push(PsRow::of(&d, status));
    }
    if json {
        crate::json::print(&rows)?;
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no Domain is running");
        return Ok(0);
    }
    print_ps(rows);
    Ok(0)
}

impl PsRow {
    /// A running Domain's row: what its coordinator answered (`status`),
    /// or only its name and place when it did not.
    fn of(d: &state_cmd::Domain, status: Option<DomainStatus>) -> PsRow {
        let meta = d.meta.as_ref();
        PsRow {
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
            session_count: status.as_ref().map(|s| s.sessions),
            sessions: status
                .as_ref()
                .map(|s| s.session_list.iter().map(SessionRow::of).collect())
                .unwrap_or_default(),
            uptime_s: status.as_ref().map(|s| now().saturating_sub(s.started)),
            memory_bytes: status
                .as_ref()
                .and_then(|s: &DomainStatus| s.holder_pid)
                .and_then(memory_of),
            ports: status.as_ref().map(|s| {
                s.ports
                    .iter()
                    .map(|p| PsPort {
                        host_addr: p.host_addr.to_string(),
                        host_port: p.host_port,
                        sandbox_port: p.sandbox_port,
                    })
                    .collect()
            }),
        }
    }
}

/// `lazaret ps`'s table: a line per Domain, then one per session of it.
fn print_ps(rows: Vec<PsRow>) {
    let ports: Vec<String> = rows.iter().map(|r| ports_column(&r.ports)).collect();
    let width = ports.iter().map(String::len).max().unwrap_or(0).max(5);
    println!(
        "{:<12}  {:<12}  {:>8}  {:>7}  {:>10}  {:<9}  {:<width$}  WORKSPACE",
        "DOMAIN", "PROFILE", "SESSIONS", "UPTIME", "MEMORY", "STATE", "PORTS"
    );
    let o = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for (r, ports) in rows.into_iter().zip(ports) {
        println!(
            "{:<12}  {:<12}  {:>8}  {:>7}  {:>10}  {:<9}  {:<width$}  {}",
            &r.domain_id[..12],
            display::bounded(o(r.profile), 12),
            o(r.session_count.map(|n| n.to_string())),
            o(r.uptime_s.map(human_duration)),
            o(r.memory_bytes.map(crate::state_cmd::human_bytes)),
            if r.state == "running" {
                "running"
            } else {
                "changing"
            },
            ports,
            display::message(&o(r.workspace)),
        );
        for s in &r.sessions {
            let attached = match (s.attached, s.state.as_str()) {
                (true, _) => "attached",
                (false, "running") => "detached",
                _ => "ended",
            };
            let since = now_ms().saturating_sub(s.since_unix_ms) / 1000;
            println!(
                "  session {}  {:<8}  {:<9}  {:>7}  {}",
                &s.id[..s.id.len().min(12)],
                attached,
                display::bounded(s.state.clone(), 9),
                human_duration(since),
                s.command.as_deref().unwrap_or("(login shell)"),
            );
        }
    }
}

/// `lazaret stop [--all | Domain]`: asks each running Domain to end its
/// sessions and tear down, and waits until it is down.
pub fn stop(which: &Which, all: bool) -> Result<i32, CliError> {
    let domains = if all {
        state_cmd::all_domains_despite_config(which.config())?
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

/// `lazaret logs [-f] [--helpers] [--json]`: the Domain's timestamped
/// coordinator events (or what its helpers said), escaped for the
/// terminal: helpers such as runsc may repeat what the sandbox chose.
/// Oldest first across the log's rotations (`NAME.4` .. `NAME.1`, then
/// `NAME`); with `follow`, keeps printing the current file, and the rest
/// of one rotated away meanwhile, until the Domain is no longer running.
/// Every time is shown as `lazaret_protocol::logs::TIME_FORMAT` (lines
/// of older versions too); `json` gives one array of [`LogRecord`]s, or
/// with `follow` one record per line.
pub fn logs(which: &Which, follow: bool, helpers: bool, json: bool) -> Result<i32, CliError> {
    use lazaret_protocol::logs;
    let d = state_cmd::resolve(which)?;
    let name = if helpers {
        logs::HELPERS_LOG
    } else {
        logs::COORDINATOR_LOG
    };
    let root = &d.layout.root;
    let mut out = std::io::stdout().lock();
    let mut printer = Printer::new(match (json, follow) {
        (false, _) => Format::Text,
        (true, false) => Format::JsonArray,
        (true, true) => Format::JsonLines,
    });
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
                printer.end(&mut out);
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

/// How `lazaret logs` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Each line escaped, its time as `TIME_FORMAT`.
    Text,
    /// One JSON array of every record, at the end.
    JsonArray,
    /// One JSON record per line, as each line comes (`--follow`).
    JsonLines,
}

/// One log line in `lazaret logs --json`.
#[derive(Serialize, Debug, PartialEq)]
struct LogRecord {
    /// When the coordinator wrote it; `null` for a line without a time
    /// (the helpers' lines, what else reached the coordinator's stderr).
    time_unix_ms: Option<i64>,
    /// The coordinator's PID.
    pid: Option<u32>,
    /// The text after the time and PID, in its escaped form
    /// (`display::escape`: exact bytes back with `display::unescape`).
    message: String,
    /// What a Client Session ran, or why it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<lazaret_protocol::logs::SessionLog>,
}

/// The record of one line (without its newline).
fn record_of(line: &[u8]) -> LogRecord {
    use lazaret_protocol::logs::{split_line, SessionLog};
    let parsed = std::str::from_utf8(line).ok().and_then(|l| {
        let (time, pid, msg) = split_line(l)?;
        let t: jiff::Timestamp = time.parse().ok()?;
        Some((t.as_millisecond(), pid, msg))
    });
    match parsed {
        Some((ms, pid, msg)) => LogRecord {
            time_unix_ms: Some(ms),
            pid: Some(pid),
            message: display::escape(msg),
            event: SessionLog::parse(msg),
        },
        None => LogRecord {
            time_unix_ms: None,
            pid: None,
            message: display::escape(line),
            event: None,
        },
    }
}

/// A line for the terminal: escaped, and a coordinator line's time in
/// the one width (`TIME_FORMAT`), whatever precision wrote it. A session
/// event is shown as it is written again from what was read (printable
/// ASCII, its arguments escaped once, not twice).
fn text_of(line: &[u8]) -> String {
    use lazaret_protocol::logs::{split_line, SessionLog, TIME_FORMAT};
    let parsed = std::str::from_utf8(line).ok().and_then(|l| {
        let (time, pid, msg) = split_line(l)?;
        Some((time.parse::<jiff::Timestamp>().ok()?, pid, msg))
    });
    match parsed {
        Some((t, pid, msg)) => {
            let msg = match SessionLog::parse(msg) {
                Some(e) => e.to_string(),
                None => display::escape(msg),
            };
            format!(
                "{} lazaret-coordinator[{pid}]: {msg}",
                t.strftime(TIME_FORMAT)
            )
        }
        None => display::escape(line),
    }
}

/// Prints a log's bytes line by line, escaped; an unfinished line waits
/// for its end (or for [`Printer::end`]).
struct Printer {
    partial: Vec<u8>,
    format: Format,
    /// The records of a [`Format::JsonArray`], printed at the end.
    records: Vec<LogRecord>,
}

impl Printer {
    fn new(format: Format) -> Printer {
        Printer {
            partial: Vec::new(),
            format,
            records: Vec::new(),
        }
    }

    fn line(&mut self, line: &[u8], out: &mut impl Write) {
        match self.format {
            Format::Text => {
                let _ = writeln!(out, "{}", text_of(line));
            }
            Format::JsonArray => self.records.push(record_of(line)),
            Format::JsonLines => {
                // Invariant: a `LogRecord` is derived `Serialize` with string
                // keys only, which cannot fail to encode into a `String`.
                #[allow(clippy::expect_used)]
                let text = serde_json::to_string(&record_of(line)).expect("json");
                let _ = writeln!(out, "{}", display::ascii_json(&text));
            }
        }
    }

    fn bytes(&mut self, buf: &[u8], out: &mut impl Write) {
        self.partial.extend_from_slice(buf);
        while let Some(i) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            self.line(&line[..line.len() - 1], out);
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
            let line = std::mem::take(&mut self.partial);
            self.line(&line, out);
        }
        if self.format == Format::JsonArray {
            // Invariant: as in `line`, `LogRecord`s cannot fail to encode.
            #[allow(clippy::expect_used)]
            let text = serde_json::to_string_pretty(&self.records).expect("json");
            let _ = writeln!(out, "{}", display::ascii_json(&text));
            self.records.clear();
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
        let (mut tail, mut printer, mut out) =
            (Tail::default(), Printer::new(Format::Text), Vec::new());
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
    fn coordinator_times_are_shown_in_one_width() {
        let l = b"2026-12-02T16:31:05.12Z lazaret-coordinator[7]: owner";
        assert_eq!(
            text_of(l),
            "2026-12-02T16:31:05.120Z lazaret-coordinator[7]: owner"
        );
        let l = b"2026-12-02T16:31:05Z lazaret-coordinator[7]: x\x1b";
        assert_eq!(
            text_of(l),
            "2026-12-02T16:31:05.000Z lazaret-coordinator[7]: x\\x1b"
        );
        let l = "2026-12-02T16:31:05.120Z lazaret-coordinator[7]: session 0123456789abcdef0123456789abcdef ran \"a\\x1b\" in \"/workspace\" with a terminal";
        assert_eq!(text_of(l.as_bytes()), l);
        // Not a coordinator line: only escaped.
        assert_eq!(text_of(b"runsc: \x1b[2J"), "runsc: \\x1b[2J");
    }

    #[test]
    fn json_records_carry_the_time_pid_message_and_session_event() {
        use lazaret_protocol::logs::{SessionEnd, SessionLog};
        let sid = "0123456789abcdef0123456789abcdef";
        let line = format!(
            "2026-12-02T16:31:05.120Z lazaret-coordinator[7]: session {sid} ended: status 3"
        );
        let r = record_of(line.as_bytes());
        assert_eq!(r.time_unix_ms, Some(1_796_229_065_120));
        assert_eq!(r.pid, Some(7));
        assert_eq!(
            r.event,
            Some(SessionLog::Ended {
                session: sid.into(),
                end: SessionEnd::Exited { status: 3 }
            })
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["event"]["kind"], "ended");
        assert_eq!(v["event"]["why"], "exited");
        assert_eq!(v["event"]["status"], 3);
        let r = record_of(b"\xffpanic \x1b");
        assert_eq!((r.time_unix_ms, r.pid), (None, None));
        assert_eq!(r.message, "\\xffpanic \\x1b");
        // The array comes at the end, one document.
        let mut p = Printer::new(Format::JsonArray);
        let mut out = Vec::new();
        p.bytes(
            format!("{line}\nhelper line\nunfinished").as_bytes(),
            &mut out,
        );
        assert!(out.is_empty());
        p.end(&mut out);
        let all: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(all.as_array().unwrap().len(), 3);
        assert_eq!(all[2]["message"], "unfinished");
        // Following: one record per line, as it comes.
        let mut p = Printer::new(Format::JsonLines);
        let mut out = Vec::new();
        p.bytes(b"a\nb\n", &mut out);
        let lines: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["message"], "b");
    }

    #[test]
    fn durations_are_human() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(185), "3m05s");
        assert_eq!(human_duration(3720), "1h02m");
    }
}
