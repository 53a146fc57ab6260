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
//! Session binding (FR-10) has a limit gVisor does not let us lift: every
//! process inside runs as root and can read every other process's
//! environment and descriptors, so a Session Anchor proves only that a
//! request came from inside this Domain, not from which session's
//! process. A request is routed to the session it names and nowhere
//! else: when that session has no terminal, or has ended, nobody is asked
//! (it is denied, with a result). The prompt shows the process that asked
//! as the request claims it, never "this terminal".
//!
//! Bounds ([`esc::bounds`]): pending requests per Domain and per session,
//! the replay set (pruned by the age window), early cancellations, the
//! entries taken per pass, the results kept, and `escalations.log`
//! (rotated). Over a bound, a request is refused with a result by the
//! mailbox reader itself; no thread is started for it, so the
//! coordinator's threads stay within `3 * MAX_PENDING` for escalations.
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
use lazaret_protocol::escalation::{self as esc, bounds, Body, Kind, Outcome, ResultRecord};
use lazaret_protocol::frame::write_frame;
use lazaret_protocol::session::{EscalationPrompt, ServerMsg};
use rustix::fs::{Mode, OFlags};
use std::collections::{HashMap, HashSet, VecDeque};
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
    /// The replay set: Escalation Request ID -> the request's creation
    /// time, kept while that time is within the age window.
    seen: Mutex<HashMap<[u8; 16], u64>>,
    cancels: Mutex<HashMap<[u8; 16], Arc<AtomicBool>>>,
    /// Cancellations read before their request (both can arrive in one
    /// poll, in any order), with their creation time.
    early_cancels: Mutex<HashMap<[u8; 16], u64>>,
    pending: Mutex<Pending>,
    /// Published results, oldest first, with their publication time.
    results_kept: Mutex<VecDeque<(String, u64)>>,
    /// One writer of `escalations.log` at a time (rotation included).
    log_lock: Mutex<()>,
    /// Entries refused once that could not be removed (a non-empty
    /// directory): skipped, so they are not refused (and logged) again at
    /// every pass. At most [`MAX_STUCK`].
    stuck: Mutex<HashSet<OsString>>,
}

/// Unremovable mailbox entries remembered (names are at most 255 bytes).
pub const MAX_STUCK: usize = 1_024;

/// Why a request was refused before anyone was asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("{0} Escalation Requests are pending in this Domain, its bound: try again once one has ended")]
    DomainBusy(usize),
    #[error("{0} Escalation Requests of this Client Session are pending, its bound: try again once one has ended")]
    SessionBusy(usize),
    #[error("{0} Escalation Request IDs are remembered within the age window, its bound: try again later")]
    ReplaySetFull(usize),
    #[error("the coordinator cannot start a thread for it: {0}")]
    NoThread(String),
}

/// The one reason a request naming a session that is not registered gets:
/// that session ended, or never was one of this generation's.
pub const NO_SESSION: &str = "no such Client Session: it has ended or was never one of this Domain, and another session's terminal is never asked";

/// The reason a request gets when its session has no terminal.
pub const NO_TERMINAL: &str = "no auto-approval rule matches, and the requesting Client Session has no terminal to ask the developer at (another session's terminal is never asked)";

/// Accepted requests not yet resolved, in total and by the Session ID
/// they name.
#[derive(Default, Debug)]
pub struct Pending {
    total: usize,
    by_session: HashMap<String, usize>,
}

impl Pending {
    /// Takes a slot for one more request of `session`, within
    /// [`bounds::MAX_PENDING`] and [`bounds::MAX_PENDING_PER_SESSION`].
    pub fn admit(&mut self, session: &str) -> Result<(), Refusal> {
        let mine = self.by_session.get(session).copied().unwrap_or(0);
        if self.total >= bounds::MAX_PENDING {
            return Err(Refusal::DomainBusy(self.total));
        }
        if mine >= bounds::MAX_PENDING_PER_SESSION {
            return Err(Refusal::SessionBusy(mine));
        }
        self.total += 1;
        *self.by_session.entry(session.to_string()).or_default() += 1;
        Ok(())
    }

    pub fn release(&mut self, session: &str) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.by_session.get_mut(session) {
            *n -= 1;
            if *n == 0 {
                self.by_session.remove(session);
            }
        }
    }
}

/// A pending slot, released when the request's thread ends (or was never
/// started).
struct Slot {
    esc: Arc<Escalations>,
    session: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.esc.pending).release(&self.session);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops from a by-creation-time map what the age window already refuses:
/// a record created at `t` is accepted only while `now <= t + MAX_AGE_MS`.
pub fn prune_by_age(map: &mut HashMap<[u8; 16], u64>, now: u64) {
    map.retain(|_, created| now <= created.saturating_add(esc::MAX_AGE_MS));
}

/// Remembers `id` in a bounded by-creation-time set: `Ok(true)` when it is
/// new, `Ok(false)` when it was there, `Err(len)` when the set is full of
/// IDs still within the age window.
pub fn remember(
    map: &mut HashMap<[u8; 16], u64>,
    id: [u8; 16],
    created: u64,
    now: u64,
    bound: usize,
) -> Result<bool, usize> {
    if map.contains_key(&id) {
        return Ok(false);
    }
    if map.len() >= bound {
        prune_by_age(map, now);
        if map.len() >= bound {
            return Err(map.len());
        }
    }
    map.insert(id, created);
    Ok(true)
}

/// Rotates `path` when it has reached `max` bytes: `path.{keep-1}` becomes
/// `path.{keep}` (the oldest is dropped), ..., `path` becomes `path.1`.
pub fn rotate_if_full(path: &Path, max: u64, keep: usize) {
    if std::fs::metadata(path).map_or(true, |m| m.len() < max) {
        return;
    }
    let nth = |i: usize| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{i}"));
        PathBuf::from(p)
    };
    for i in (1..keep).rev() {
        let _ = std::fs::rename(nth(i), nth(i + 1));
    }
    if keep == 0 {
        let _ = std::fs::remove_file(path);
    } else {
        let _ = std::fs::rename(path, nth(1));
    }
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
            seen: Mutex::new(HashMap::new()),
            cancels: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashMap::new()),
            pending: Mutex::new(Pending::default()),
            results_kept: Mutex::new(VecDeque::new()),
            log_lock: Mutex::new(()),
            stuck: Mutex::new(HashSet::new()),
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
            let mut housekeeping = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                for name in self.entries() {
                    self.take(&dir, &name);
                }
                if housekeeping.elapsed() >= Duration::from_secs(1) {
                    housekeeping = Instant::now();
                    self.housekeeping(now_ms());
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        });
    }

    /// Entry names as the sandbox made them (any bytes), at most
    /// [`bounds::MAX_ENTRIES_PER_POLL`] per pass.
    fn entries(&self) -> Vec<OsString> {
        let Ok(rd) = std::fs::read_dir(&self.requests) else {
            return Vec::new();
        };
        let stuck = lock(&self.stuck);
        rd.flatten()
            .map(|e| e.file_name())
            .filter(|n| !n.as_bytes().starts_with(b".") && !stuck.contains(n))
            .take(bounds::MAX_ENTRIES_PER_POLL)
            .collect()
    }

    /// Forgets what the age window refuses anyway, and old results.
    fn housekeeping(&self, now: u64) {
        prune_by_age(&mut lock(&self.seen), now);
        prune_by_age(&mut lock(&self.early_cancels), now);
        self.prune_results(now);
    }

    /// Refuses an accepted-looking request before anyone is asked: logged,
    /// and its client gets `outcome` as its result.
    fn refuse_with_result(&self, name: &OsStr, body: &Body, outcome: Outcome) {
        let why = match &outcome {
            Outcome::Refused { reason } | Outcome::Denied { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        self.refuse(name, &why);
        self.publish(ResultRecord {
            request_id: body.request_id,
            outcome,
        });
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
        if rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).is_err()
            && rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::REMOVEDIR).is_err()
        {
            let mut stuck = lock(&self.stuck);
            if stuck.len() < MAX_STUCK {
                stuck.insert(name.to_owned());
            }
        }
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
                drop(sessions);
                return self.no_session(name, body);
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
        let now = now_ms();
        match &body.kind {
            Kind::Cancel => match self.cancels.lock().unwrap().get(&body.request_id) {
                Some(flag) => flag.store(true, Ordering::Relaxed),
                None => {
                    let mut early = lock(&self.early_cancels);
                    let (id, created) = (body.request_id, body.created_unix_ms);
                    if remember(&mut early, id, created, now, bounds::MAX_EARLY_CANCELS).is_err() {
                        drop(early);
                        self.refuse(
                            name,
                            "a cancellation of no pending request, over the bound of those kept",
                        );
                    }
                }
            },
            Kind::Request(_) => {
                let remembered = remember(
                    &mut lock(&self.seen),
                    body.request_id,
                    body.created_unix_ms,
                    now,
                    bounds::MAX_SEEN,
                );
                match remembered {
                    Ok(true) => {}
                    Ok(false) => return self.refuse(name, "a replayed Escalation Request ID"),
                    Err(n) => return self.refuse_bounded(name, body, Refusal::ReplaySetFull(n)),
                }
                if let Err(r) = lock(&self.pending).admit(&body.session_id) {
                    return self.refuse_bounded(name, body, r);
                }
                let slot = Slot {
                    esc: self.clone(),
                    session: body.session_id.clone(),
                };
                let cancelled = lock(&self.early_cancels).remove(&body.request_id).is_some();
                let cancel = Arc::new(AtomicBool::new(cancelled));
                self.cancels
                    .lock()
                    .unwrap()
                    .insert(body.request_id, cancel.clone());
                let me = self.clone();
                let owned = body.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("escalation".into())
                        .spawn(move || {
                            let _slot = slot;
                            me.resolve(owned, terminal, gone, cancel)
                        });
                if let Err(e) = spawned {
                    // The closure, and with it the slot, is dropped.
                    lock(&self.cancels).remove(&body.request_id);
                    self.refuse_bounded(name, body, Refusal::NoThread(e.to_string()));
                }
            }
        }
    }

    fn refuse_bounded(&self, name: &OsStr, body: &Body, r: Refusal) {
        self.refuse_with_result(
            name,
            body,
            Outcome::Refused {
                reason: r.to_string(),
            },
        );
    }

    /// A request naming no registered session (it ended, or never was):
    /// nobody is asked, and no other session's terminal either. Its ID
    /// enters the replay set first, so one ID gets at most one result.
    fn no_session(&self, name: &OsStr, body: &Body) {
        if !matches!(body.kind, Kind::Request(_)) {
            return self.refuse(name, NO_SESSION);
        }
        let now = now_ms();
        let (id, created) = (body.request_id, body.created_unix_ms);
        match remember(&mut lock(&self.seen), id, created, now, bounds::MAX_SEEN) {
            Ok(true) => self.refuse_with_result(
                name,
                body,
                Outcome::Denied {
                    reason: NO_SESSION.into(),
                },
            ),
            Ok(false) => self.refuse(name, "a replayed Escalation Request ID"),
            Err(n) => self.refuse_bounded(name, body, Refusal::ReplaySetFull(n)),
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
                requester: req.requester.clone(),
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
                    reason: NO_TERMINAL.into(),
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
            Outcome::Refused { reason } => format!("refused: {reason}"),
        };
        self.record(&serde_json::json!({
            "event": "decision",
            "request_id": id,
            "session_id": body.session_id,
            "argv": req.argv,
            "justification": req.justification,
            "requester_pid": req.requester.pid,
            "requester_cmdline": req.requester.cmdline,
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
            return;
        }
        let now = now_ms();
        lock(&self.results_kept).push_back((id, now));
        self.prune_results(now);
    }

    /// Removes the oldest results beyond [`bounds::MAX_RESULTS`] and those
    /// older than [`bounds::RESULT_KEEP_MS`] (their clients read them
    /// within milliseconds).
    fn prune_results(&self, now: u64) {
        let mut kept = lock(&self.results_kept);
        while let Some((id, at)) = kept.front() {
            let old = now.saturating_sub(*at) > bounds::RESULT_KEEP_MS;
            if kept.len() <= bounds::MAX_RESULTS && !old {
                break;
            }
            let _ = std::fs::remove_file(self.results.join(id));
            kept.pop_front();
        }
    }

    /// Appends one JSON line to the Domain's escalation record, rotating
    /// it at [`bounds::LOG_MAX_BYTES`] (keeping [`bounds::LOG_ROTATIONS`]).
    fn record(&self, v: &serde_json::Value) {
        let mut v = v.clone();
        v["time_unix_ms"] = now_ms().into();
        v["sandbox_id"] = self.sandbox_id.clone().into();
        let _one = lock(&self.log_lock);
        rotate_if_full(&self.log_path, bounds::LOG_MAX_BYTES, bounds::LOG_ROTATIONS);
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
        let (d, e, dir, _) = mailbox_with_key();
        (d, e, dir)
    }

    fn mailbox_with_key() -> (
        tempfile::TempDir,
        Arc<Escalations>,
        OwnedFd,
        ed25519_compact::SecretKey,
    ) {
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
        (d, e, dir, kp.sk)
    }

    /// Puts a signed request for `session` (anchor `anchor`) in the
    /// mailbox under `name`; returns its ID.
    fn put(
        d: &tempfile::TempDir,
        sk: &ed25519_compact::SecretKey,
        session: &str,
        anchor: &[u8; 32],
        name: &str,
    ) -> [u8; 16] {
        let mut id = [0u8; 16];
        getrandom::getrandom(&mut id).unwrap();
        let body = Body {
            version: esc::VERSION,
            sandbox_id: "s".into(),
            session_id: session.into(),
            request_id: id,
            created_unix_ms: now_ms(),
            kind: Kind::Request(esc::Request {
                argv: v(&["/bin/true"]),
                justification: String::new(),
                cwd: "/workspace".into(),
                timeout_secs: 0,
                requester: esc::Requester::default(),
            }),
        };
        std::fs::write(
            d.path().join("mailbox/requests").join(name),
            esc::seal(&body, sk, anchor),
        )
        .unwrap();
        id
    }

    fn result_of(d: &tempfile::TempDir, id: [u8; 16]) -> Option<Outcome> {
        let p = d.path().join("mailbox/results").join(hex::encode(id));
        let bytes = std::fs::read(p).ok()?;
        Some(
            postcard::from_bytes::<ResultRecord>(&bytes)
                .unwrap()
                .outcome,
        )
    }

    fn register(e: &Escalations, session: &str, anchor: [u8; 32]) {
        e.sessions.lock().unwrap().insert(
            session.into(),
            SessionEntry {
                anchor,
                terminal: None,
                gone: Arc::new(AtomicBool::new(false)),
            },
        );
    }

    #[test]
    fn pending_requests_are_bounded_per_domain_and_per_session() {
        let mut p = Pending::default();
        for _ in 0..bounds::MAX_PENDING_PER_SESSION {
            p.admit("a").unwrap();
        }
        assert_eq!(
            p.admit("a"),
            Err(Refusal::SessionBusy(bounds::MAX_PENDING_PER_SESSION))
        );
        let mut i = 0;
        while p.total < bounds::MAX_PENDING {
            p.admit(&format!("s{}", i / bounds::MAX_PENDING_PER_SESSION))
                .unwrap();
            i += 1;
        }
        assert_eq!(
            p.admit("fresh"),
            Err(Refusal::DomainBusy(bounds::MAX_PENDING))
        );
        p.release("a");
        p.admit("fresh").unwrap();
        for _ in 0..bounds::MAX_PENDING_PER_SESSION {
            p.release("a");
        }
        assert!(!p.by_session.contains_key("a"));
    }

    #[test]
    fn the_replay_set_is_pruned_by_the_age_window_and_bounded() {
        let mut m = HashMap::new();
        let t0 = 1_000_000;
        assert_eq!(remember(&mut m, [1; 16], t0, t0, 2), Ok(true));
        assert_eq!(remember(&mut m, [1; 16], t0, t0, 2), Ok(false));
        assert_eq!(remember(&mut m, [2; 16], t0 + 10, t0, 2), Ok(true));
        // Full of IDs the age window still accepts: refused.
        assert_eq!(
            remember(&mut m, [3; 16], t0, t0 + esc::MAX_AGE_MS, 2),
            Err(2)
        );
        // Once [1] is out of the window it is forgotten, and the new ID fits;
        // a replay of [1] would now be refused as expired anyway.
        let later = t0 + esc::MAX_AGE_MS + 1;
        assert_eq!(remember(&mut m, [3; 16], later, later, 2), Ok(true));
        assert!(!m.contains_key(&[1; 16]) && m.contains_key(&[2; 16]));
        // A request dated in the future is kept until its own window ends.
        prune_by_age(&mut m, t0 + 10 + esc::MAX_AGE_MS);
        assert!(m.contains_key(&[2; 16]));
        prune_by_age(&mut m, t0 + 11 + esc::MAX_AGE_MS);
        assert!(!m.contains_key(&[2; 16]));
    }

    #[test]
    fn the_log_rotates_at_its_size_bound_and_keeps_n_rotations() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("escalations.log");
        for round in 0..10 {
            std::fs::write(&log, vec![b'0' + round as u8; 100]).unwrap();
            rotate_if_full(&log, 100, 3);
        }
        assert!(!log.exists());
        let names: Vec<_> = esc::log_files(d.path())
            .iter()
            .filter(|p| p.exists())
            .map(|p| {
                (
                    p.file_name().unwrap().to_owned(),
                    std::fs::read(p).unwrap()[0],
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("escalations.log.3".into(), b'7'),
                ("escalations.log.2".into(), b'8'),
                ("escalations.log.1".into(), b'9'),
            ]
        );
        std::fs::write(&log, b"small").unwrap();
        rotate_if_full(&log, 100, 3);
        assert!(log.exists());
    }

    #[test]
    fn the_record_is_bounded_on_disk() {
        let (d, e, _dir) = mailbox();
        let big = "x".repeat(4096);
        for _ in 0..(bounds::LOG_MAX_BYTES as usize / 4096) * (bounds::LOG_ROTATIONS + 3) {
            e.record(&serde_json::json!({ "event": "refused", "entry": big }));
        }
        let total: u64 = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|f| f.file_name().to_string_lossy().starts_with("log"))
            .map(|f| f.metadata().unwrap().len())
            .sum();
        assert!(
            total <= (bounds::LOG_MAX_BYTES + 8192) * (bounds::LOG_ROTATIONS as u64 + 1),
            "{total}"
        );
        assert!(d
            .path()
            .join(format!("log.{}", bounds::LOG_ROTATIONS))
            .exists());
    }

    #[test]
    fn over_the_pending_bound_a_request_is_refused_with_a_result_and_no_thread() {
        let (d, e, dir, sk) = mailbox_with_key();
        let anchor = [9u8; 32];
        register(&e, "sess", anchor);
        {
            let mut p = lock(&e.pending);
            for i in 0..bounds::MAX_PENDING {
                p.admit(&format!("other{}", i / bounds::MAX_PENDING_PER_SESSION))
                    .unwrap();
            }
        }
        let id = put(&d, &sk, "sess", &anchor, "r1");
        e.take(&dir, OsStr::new("r1"));
        assert!(
            matches!(result_of(&d, id), Some(Outcome::Refused { ref reason }) if reason.contains("pending in this Domain")),
            "{:?}",
            result_of(&d, id)
        );
        assert!(lock(&e.cancels).is_empty(), "no request was started");
        assert_eq!(lock(&e.pending).total, bounds::MAX_PENDING);
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        assert!(
            log.contains("\"entry\":\"r1\"") && log.contains("pending"),
            "{log}"
        );
    }

    #[test]
    fn a_request_of_an_ended_session_is_denied_with_a_result_once() {
        let (d, e, dir, sk) = mailbox_with_key();
        let anchor = [9u8; 32];
        let id = put(&d, &sk, "ended", &anchor, "r1");
        let r = std::fs::read(d.path().join("mailbox/requests/r1")).unwrap();
        e.take(&dir, OsStr::new("r1"));
        assert_eq!(
            result_of(&d, id),
            Some(Outcome::Denied {
                reason: NO_SESSION.into()
            })
        );
        // The same ID again is a replay: no second result is written.
        std::fs::remove_file(d.path().join("mailbox/results").join(hex::encode(id))).unwrap();
        std::fs::write(d.path().join("mailbox/requests/r2"), r).unwrap();
        e.take(&dir, OsStr::new("r2"));
        assert_eq!(result_of(&d, id), None);
    }

    #[test]
    fn a_request_of_a_session_without_a_terminal_is_denied_not_prompted() {
        let (d, e, dir, sk) = mailbox_with_key();
        let anchor = [9u8; 32];
        register(&e, "notty", anchor);
        let id = put(&d, &sk, "notty", &anchor, "r1");
        e.take(&dir, OsStr::new("r1"));
        assert!(eventually(|| result_of(&d, id).is_some()));
        assert_eq!(
            result_of(&d, id),
            Some(Outcome::Denied {
                reason: NO_TERMINAL.into()
            })
        );
        assert!(eventually(|| lock(&e.pending).total == 0));
    }

    #[test]
    fn results_beyond_the_bound_are_removed_oldest_first() {
        let (d, e, _dir) = mailbox();
        for i in 0..bounds::MAX_RESULTS + 10 {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_be_bytes());
            e.publish(ResultRecord {
                request_id: id,
                outcome: Outcome::Cancelled,
            });
        }
        let n = std::fs::read_dir(d.path().join("mailbox/results"))
            .unwrap()
            .count();
        assert_eq!(n, bounds::MAX_RESULTS);
        let mut first = [0u8; 16];
        first[..8].copy_from_slice(&0u64.to_be_bytes());
        assert!(!d
            .path()
            .join("mailbox/results")
            .join(hex::encode(first))
            .exists());
        e.prune_results(now_ms() + bounds::RESULT_KEEP_MS + 1);
        assert_eq!(
            std::fs::read_dir(d.path().join("mailbox/results"))
                .unwrap()
                .count(),
            0
        );
    }

    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        for _ in 0..500 {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
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
    fn directories_are_removed_or_refused_once() {
        let (d, e, dir) = mailbox();
        let r = d.path().join("mailbox/requests");
        std::fs::create_dir(r.join("empty")).unwrap();
        std::fs::create_dir_all(r.join("full/x")).unwrap();
        for _ in 0..3 {
            for n in e.entries() {
                e.take(&dir, &n);
            }
        }
        assert!(!r.join("empty").exists());
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        assert_eq!(
            log.lines().filter(|l| l.contains("\"full\"")).count(),
            1,
            "{log}"
        );
        assert_eq!(
            log.lines().filter(|l| l.contains("\"empty\"")).count(),
            1,
            "{log}"
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
