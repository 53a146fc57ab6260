//! Host Escalation (spec 3.6): the Escalation Mailbox reader, routing to
//! the requesting Client Session, auto-approval rules, and execution.
//!
//! The mailbox is not an authentication boundary. Each entry is opened
//! relative to the request directory's handle without following links,
//! must be a regular file no larger than [`esc::MAX_REQUEST`], is read
//! once, and its signature (this generation's key) is checked over the
//! bytes read before they are parsed. Then it must name this generation's
//! sandbox, a registered session whose Session Anchor verifies its MAC, a
//! fresh time, and an Escalation Request ID never seen before. Paths,
//! owners and PIDs are never evidence of who wrote a request.
//!
//! A host command runs only after the developer approved it at the
//! requesting session's terminal, or when an auto-approval rule matches its
//! complete vector (SR-7, SR-8); it runs by execve of the vector, without a
//! shell, in the host workspace, with a minimal environment, in its own
//! process group that is killed on cancellation, timeout, session loss, or
//! the coordinator's death.

use crate::gate::Gate;
use crate::lifecycle::log;
use ed25519_compact::PublicKey;
use lazaret_protocol::display;
use lazaret_protocol::escalation::{self as esc, Body, Kind, Outcome, ResultRecord};
use lazaret_protocol::frame::write_frame;
use lazaret_protocol::session::{EscalationPrompt, ServerMsg};
use rustix::fs::{Mode, OFlags};
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The environment of approved host commands: nothing of the
/// coordinator's own, so nothing of the developer's shell leaks in by
/// accident either.
pub const HOST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Decisions arriving from a session's client, by request ID: the vector
/// to run, or `None` to deny.
pub type Decisions = Arc<Mutex<HashMap<String, mpsc::Sender<Option<Vec<String>>>>>>;

/// A registered Client Session, as the mailbox sees it.
pub struct SessionEntry {
    pub anchor: [u8; 32],
    /// `Some` when the session has a terminal to prompt on.
    pub terminal: Option<Terminal>,
    /// Set when the session ends: its requests end and their commands stop.
    pub gone: Arc<AtomicBool>,
}

pub struct Terminal {
    pub writer: Arc<Mutex<UnixStream>>,
    pub gate: Arc<Gate>,
    /// One prompt at a time per session.
    pub prompt_lock: Arc<Mutex<()>>,
    /// Decisions arriving from the client, by request ID.
    pub decisions: Decisions,
}

pub struct Escalations {
    pub key: PublicKey,
    pub sandbox_id: String,
    pub profile: String,
    pub workspace: PathBuf,
    pub requests: PathBuf,
    pub results: PathBuf,
    pub log_path: PathBuf,
    pub rules: Vec<(Vec<String>, bool)>,
    pub sessions: Mutex<HashMap<String, SessionEntry>>,
    seen: Mutex<HashSet<[u8; 16]>>,
    cancels: Mutex<HashMap<[u8; 16], Arc<AtomicBool>>>,
    /// Cancellations read before their request (both can arrive in one
    /// poll, in any order).
    early_cancels: Mutex<HashSet<[u8; 16]>>,
}

/// Whether a rule approves `argv`: the complete vector, unless the rule
/// explicitly grants trailing arguments (SR-8).
pub fn rule_matches(rule: &[String], trailing: bool, argv: &[String]) -> bool {
    if rule.is_empty() {
        return false;
    }
    if trailing {
        argv.len() >= rule.len() && argv[..rule.len()] == *rule
    } else {
        argv == rule
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Escalations {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: PublicKey,
        sandbox_id: String,
        profile: String,
        workspace: PathBuf,
        control: &Path,
        log_path: PathBuf,
        rules: Vec<(Vec<String>, bool)>,
    ) -> Self {
        Self {
            key,
            sandbox_id,
            profile,
            workspace,
            requests: control.join("mailbox/requests"),
            results: control.join("mailbox/results"),
            log_path,
            rules,
            sessions: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashSet::new()),
            cancels: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashSet::new()),
        }
    }

    /// Polls the request directory until `stop` is set.
    pub fn watch(self: Arc<Self>, stop: Arc<AtomicBool>) {
        std::thread::spawn(move || {
            let dir = match rustix::fs::open(
                &self.requests,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            ) {
                Ok(d) => d,
                Err(e) => {
                    log(format!("Escalation Mailbox unavailable: {e}"));
                    return;
                }
            };
            while !stop.load(Ordering::Relaxed) {
                for name in self.entries() {
                    self.take(&dir, &name);
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        });
    }

    /// Entry names as the sandbox made them: any bytes.
    fn entries(&self) -> Vec<OsString> {
        let Ok(rd) = std::fs::read_dir(&self.requests) else {
            return Vec::new();
        };
        rd.flatten()
            .map(|e| e.file_name())
            .filter(|n| !n.as_bytes().starts_with(b"."))
            .collect()
    }

    /// Logs a refused entry. The name is the sandbox's: it is recorded in
    /// its escaped form (lossless, see `lazaret_protocol::display`).
    fn refuse(&self, name: &OsStr, why: &str) {
        let name = display::escape_os(name);
        log(format!("Escalation Mailbox: refused {name}: {why}"));
        self.record(&serde_json::json!({
            "event": "refused", "entry": name, "reason": why,
        }));
    }

    /// Reads one entry once, removes it, and acts on it.
    fn take(self: &Arc<Self>, dir: &OwnedFd, name: &OsStr) {
        let opened = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        );
        let _ = rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty());
        let fd = match opened {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => return self.refuse(name, "a symbolic link"),
            Err(e) => return self.refuse(name, &format!("cannot open: {e}")),
        };
        let st = match rustix::fs::fstat(&fd) {
            Ok(st) => st,
            Err(e) => return self.refuse(name, &e.to_string()),
        };
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return self.refuse(name, "not a regular file");
        }
        if st.st_size as usize > esc::MAX_REQUEST {
            return self.refuse(name, &format!("{} bytes, over the limit", st.st_size));
        }
        let mut bytes = Vec::with_capacity(st.st_size as usize);
        if std::fs::File::from(fd)
            .take(esc::MAX_REQUEST as u64 + 1)
            .read_to_end(&mut bytes)
            .is_err()
        {
            return self.refuse(name, "unreadable");
        }
        let verified = match esc::open(&bytes, &self.key) {
            Ok(v) => v,
            Err(e) => return self.refuse(name, &e.to_string()),
        };
        let body = &verified.body;
        if body.sandbox_id != self.sandbox_id {
            return self.refuse(name, "signed for another generation");
        }
        if now_ms().abs_diff(body.created_unix_ms) > esc::MAX_AGE_MS {
            return self.refuse(name, "expired");
        }
        let (gone, terminal) = {
            let sessions = self.sessions.lock().unwrap();
            let Some(s) = sessions.get(&body.session_id) else {
                return self.refuse(name, "no such Client Session");
            };
            if verified.check_session(&s.anchor).is_err() {
                return self.refuse(name, "the Session Anchor does not verify");
            }
            (
                s.gone.clone(),
                s.terminal.as_ref().map(|t| Terminal {
                    writer: t.writer.clone(),
                    gate: t.gate.clone(),
                    prompt_lock: t.prompt_lock.clone(),
                    decisions: t.decisions.clone(),
                }),
            )
        };
        match &body.kind {
            Kind::Cancel => match self.cancels.lock().unwrap().get(&body.request_id) {
                Some(flag) => flag.store(true, Ordering::Relaxed),
                None => {
                    self.early_cancels.lock().unwrap().insert(body.request_id);
                }
            },
            Kind::Request(_) => {
                if !self.seen.lock().unwrap().insert(body.request_id) {
                    return self.refuse(name, "a replayed Escalation Request ID");
                }
                let cancelled = self.early_cancels.lock().unwrap().remove(&body.request_id);
                let cancel = Arc::new(AtomicBool::new(cancelled));
                self.cancels
                    .lock()
                    .unwrap()
                    .insert(body.request_id, cancel.clone());
                let me = self.clone();
                let body = body.clone();
                std::thread::spawn(move || me.resolve(body, terminal, gone, cancel));
            }
        }
    }

    /// Takes one accepted request to its Escalation Result.
    fn resolve(
        &self,
        body: Body,
        terminal: Option<Terminal>,
        gone: Arc<AtomicBool>,
        cancel: Arc<AtomicBool>,
    ) {
        let Kind::Request(req) = &body.kind else {
            return;
        };
        let id = body.request_hex();
        let stop = || gone.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed);
        let timeout = (req.timeout_secs > 0)
            .then(|| Instant::now() + Duration::from_secs(req.timeout_secs as u64));
        let rule = self
            .rules
            .iter()
            .position(|(r, t)| rule_matches(r, *t, &req.argv));
        let (decided_by, argv, outcome) = if let Some(i) = rule {
            let o = execute(&req.argv, &self.workspace, timeout, &stop, &cancel);
            (
                format!("auto-approval rule {}", i + 1),
                Some(req.argv.clone()),
                o,
            )
        } else if let Some(t) = terminal {
            let _one = t.prompt_lock.lock().unwrap();
            let (tx, rx) = mpsc::channel();
            t.decisions.lock().unwrap().insert(id.clone(), tx);
            t.gate.close();
            let prompt = ServerMsg::Prompt(EscalationPrompt {
                request_id: id.clone(),
                profile: self.profile.clone(),
                session_id: body.session_id.clone(),
                cwd: req.cwd.clone(),
                host_dir: self.workspace.to_string_lossy().into_owned(),
                argv: req.argv.clone(),
                justification: req.justification.clone(),
            });
            let _ = write_frame(&mut *t.writer.lock().unwrap(), &prompt);
            let decision = loop {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(d) => break Some(d),
                    Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if stop() || timeout.is_some_and(|d| Instant::now() > d) {
                            let _ = write_frame(
                                &mut *t.writer.lock().unwrap(),
                                &ServerMsg::PromptWithdrawn {
                                    request_id: id.clone(),
                                },
                            );
                            break None;
                        }
                    }
                }
            };
            t.decisions.lock().unwrap().remove(&id);
            let result = match decision {
                Some(Some(argv)) => {
                    let o = execute(&argv, &self.workspace, timeout, &stop, &cancel);
                    ("the developer".to_string(), Some(argv), o)
                }
                Some(None) => (
                    "the developer".to_string(),
                    None,
                    Outcome::Denied {
                        reason: "the developer denied it".into(),
                    },
                ),
                None if cancel.load(Ordering::Relaxed) => {
                    ("nobody".into(), None, Outcome::Cancelled)
                }
                None if gone.load(Ordering::Relaxed) => ("nobody".into(), None, Outcome::Cancelled),
                None => ("nobody".into(), None, Outcome::TimedOut),
            };
            t.gate.open();
            result
        } else {
            (
                "no rule".to_string(),
                None,
                Outcome::Denied {
                    reason: "no auto-approval rule matches, and the requesting session has no terminal to ask the developer at".into(),
                },
            )
        };
        self.cancels.lock().unwrap().remove(&body.request_id);
        let status = match &outcome {
            Outcome::Completed { status, .. } => format!("completed, status {status}"),
            Outcome::Denied { .. } => "denied".into(),
            Outcome::TimedOut => "timed out".into(),
            Outcome::Cancelled => "cancelled".into(),
            Outcome::Failed { reason } => format!("failed: {reason}"),
        };
        self.record(&serde_json::json!({
            "event": "decision",
            "request_id": id,
            "session_id": body.session_id,
            "argv": req.argv,
            "justification": req.justification,
            "ran_argv": argv,
            "decided_by": decided_by,
            "result": status,
        }));
        self.publish(ResultRecord {
            request_id: body.request_id,
            outcome,
        });
    }

    /// Writes the result by atomic rename into the read-only result path.
    fn publish(&self, r: ResultRecord) {
        let id = hex::encode(r.request_id);
        let tmp = self.results.join(format!(".{id}.tmp"));
        let bytes = postcard::to_stdvec(&r).expect("postcard");
        if let Err(e) =
            std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, self.results.join(&id)))
        {
            log(format!("cannot publish the Escalation Result {id}: {e}"));
        }
    }

    /// Appends one JSON line to the Domain's escalation record.
    fn record(&self, v: &serde_json::Value) {
        let mut v = v.clone();
        v["time_unix_ms"] = now_ms().into();
        v["sandbox_id"] = self.sandbox_id.clone().into();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
        {
            let _ = writeln!(f, "{v}");
        }
    }
}

fn execute(
    argv: &[String],
    workspace: &Path,
    timeout: Option<Instant>,
    stop: &dyn Fn() -> bool,
    cancel: &AtomicBool,
) -> Outcome {
    let Some(program) = argv.first() else {
        return Outcome::Failed {
            reason: "empty command".into(),
        };
    };
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .current_dir(workspace)
        .env_clear()
        .env("PATH", HOST_PATH)
        .env("LANG", "C.UTF-8")
        .env("LAZARET_ESCALATION", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for k in ["HOME", "USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(k) {
            cmd.env(k, v);
        }
    }
    // SAFETY: prctl is async-signal-safe. The command dies with the thread
    // that waits for it, so it cannot outlive its request.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Failed {
                reason: format!("cannot run {} on the host: {e}", display::quoted(program)),
            }
        }
    };
    let capture = |r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut r = r;
            let _ = (&mut r).take(esc::MAX_OUTPUT as u64).read_to_end(&mut kept);
            // Drain the rest so the command never blocks on a full pipe.
            let dropped = std::io::copy(&mut r, &mut std::io::sink()).unwrap_or(0);
            (kept, dropped > 0)
        })
    };
    let out = capture(Box::new(child.stdout.take().expect("piped")));
    let err = capture(Box::new(child.stderr.take().expect("piped")));
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let kill = || {
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                kill();
                return Outcome::Failed {
                    reason: e.to_string(),
                };
            }
        }
        if stop() {
            kill();
            let _ = child.wait();
            return Outcome::Cancelled;
        }
        if timeout.is_some_and(|d| Instant::now() > d) {
            kill();
            let _ = child.wait();
            return Outcome::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The group may have left children behind: they end with the request.
    kill();
    let _ = cancel;
    let (stdout, t1) = out.join().unwrap_or_default();
    let (stderr, t2) = err.join().unwrap_or_default();
    use std::os::unix::process::ExitStatusExt;
    Outcome::Completed {
        status: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        stdout,
        stderr,
        truncated: t1 || t2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    fn mailbox() -> (tempfile::TempDir, Arc<Escalations>, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("mailbox/requests")).unwrap();
        std::fs::create_dir_all(d.path().join("mailbox/results")).unwrap();
        let kp = ed25519_compact::KeyPair::generate();
        let e = Arc::new(Escalations::new(
            kp.pk,
            "s".into(),
            "default".into(),
            d.path().into(),
            d.path(),
            d.path().join("log"),
            vec![],
        ));
        let dir = rustix::fs::open(
            &e.requests,
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        (d, e, dir)
    }

    #[test]
    fn links_fifos_and_oversized_entries_are_refused_and_removed() {
        let (d, e, dir) = mailbox();
        let r = d.path().join("mailbox/requests");
        std::fs::write(d.path().join("target"), "x").unwrap();
        std::os::unix::fs::symlink(d.path().join("target"), r.join("link.req")).unwrap();
        nix::unistd::mkfifo(
            &r.join("fifo.req"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(r.join("big.req"), vec![0u8; esc::MAX_REQUEST + 1]).unwrap();
        std::fs::write(r.join("junk.req"), vec![0u8; 200]).unwrap();
        let hostile = OsStr::from_bytes(b"\x1b]0;pwned\x07\xff.req");
        std::fs::write(r.join(hostile), vec![0u8; 200]).unwrap();
        for n in ["link.req", "fifo.req", "big.req", "junk.req"] {
            e.take(&dir, OsStr::new(n));
        }
        e.take(&dir, hostile);
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        for (n, why) in [
            ("link.req", "symbolic link"),
            ("fifo.req", "not a regular file"),
            ("big.req", "over the limit"),
            ("junk.req", "signature"),
        ] {
            assert!(
                log.lines().any(|l| l.contains(n) && l.contains(why)),
                "{n}: {log}"
            );
        }
        // Escaped in the record, and the record itself is plain JSON text.
        assert!(
            log.contains(r#""entry":"\\x1b]0;pwned\\x07\\xff.req""#),
            "{log}"
        );
        assert!(!log.contains('\u{1b}') && !log.contains("\\u001b"), "{log}");
        assert_eq!(std::fs::read_dir(&r).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(d.path().join("target")).unwrap(),
            "x"
        );
    }

    #[test]
    fn rules_match_the_complete_vector_unless_trailing_is_granted() {
        let r = v(&["git", "fetch"]);
        assert!(rule_matches(&r, false, &v(&["git", "fetch"])));
        assert!(!rule_matches(&r, false, &v(&["git", "fetch", "--all"])));
        assert!(!rule_matches(&r, false, &v(&["git", "fetcH"])));
        assert!(!rule_matches(&r, false, &v(&["git"])));
        assert!(rule_matches(&r, true, &v(&["git", "fetch", "--all"])));
        assert!(!rule_matches(&r, true, &v(&["git", "push"])));
        assert!(!rule_matches(&[], true, &v(&["anything"])));
    }

    #[test]
    fn execute_runs_the_vector_without_a_shell() {
        let d = tempfile::tempdir().unwrap();
        let o = execute(
            &v(&["/usr/bin/printf", "%s|", "a;b", "$(id)", "x\ny"]),
            d.path(),
            None,
            &|| false,
            &AtomicBool::new(false),
        );
        assert_eq!(
            o,
            Outcome::Completed {
                status: 0,
                stdout: b"a;b|$(id)|x\ny|".to_vec(),
                stderr: vec![],
                truncated: false
            }
        );
        let o = execute(
            &v(&["/bin/sh", "-c", "echo e >&2; exit 3"]),
            d.path(),
            None,
            &|| false,
            &AtomicBool::new(false),
        );
        assert!(matches!(o, Outcome::Completed { status: 3, ref stderr, .. } if stderr == b"e\n"));
        let t = Instant::now();
        let o = execute(
            &v(&["/bin/sleep", "30"]),
            d.path(),
            Some(Instant::now() + Duration::from_millis(200)),
            &|| false,
            &AtomicBool::new(false),
        );
        assert_eq!(o, Outcome::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(matches!(
            execute(
                &v(&["/nonexistent"]),
                d.path(),
                None,
                &|| false,
                &AtomicBool::new(false)
            ),
            Outcome::Failed { .. }
        ));
    }
}
