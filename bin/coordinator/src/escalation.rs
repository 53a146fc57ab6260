//! Host Escalation (spec 3.6): routing verified Escalation Mailbox records
//! to the requesting Client Session, auto-approval rules, the replay set,
//! the pending bounds, results and the escalation record.
//!
//! The coordinator never touches the bytes the sandbox writes into the
//! mailbox: `lazaret-mailbox`, a confined helper it starts with the
//! request directory, reads, bounds, verifies (signature before parsing,
//! generation, age, Session Anchor MAC) and decodes every entry, and
//! hands this module typed records ([`FromReader`]) over a socketpair.
//! The coordinator tells it which sessions exist ([`ToReader`]). Each
//! record carries the entry's signature and MAC ([`esc::Envelope`]), which
//! the coordinator checks again over its own encoding of the typed body,
//! so a reader that verified wrongly cannot make it act on a request
//! nobody signed; it never sees the sandbox's bytes. When the
//! reader ends, the coordinator says so in its log, in the record and to
//! every session's client, and no request is read any more.
//!
//! Session binding (FR-10) has a limit gVisor does not let us lift: every
//! process inside runs as root and can read every other process's
//! environment and descriptors, so a Session Anchor proves only that a
//! request came from inside this Domain, not from which session's
//! process. A request is routed to the session it names and nowhere
//! else: when that session has ended, nobody is asked (it is denied, with
//! a result); when it has no terminal, only an auto-approval rule can
//! approve it. The prompt shows the process that asked as the request
//! claims it, never "this terminal".
//!
//! Bounds ([`esc::bounds`]): pending requests per Domain and per session,
//! the replay set (pruned by the age window), early cancellations, the
//! results kept, and `escalations.log` (rotated); the entries taken per
//! pass are the reader's. Over a bound, a request is refused with a
//! result at once; no thread is started for it, so the coordinator's
//! threads stay within `3 * MAX_PENDING` for escalations.
//!
//! A host command runs only after the developer approved it at the
//! requesting session's terminal, or when an auto-approval rule matches its
//! complete vector (SR-7, SR-8); a rule with trailing arguments never
//! approves one the sandbox added an option to that the rule does not list
//! ([`judge`]): such a request goes to the prompt. It is not run here: the coordinator tells
//! the requesting session's `lazaret` CLI to run the exact vector
//! ([`ServerMsg::RunHostCommand`]) with the request's directory inside,
//! which runs it by execve, without a shell, in the corresponding host
//! directory beneath the workspace, with its own environment and
//! variables the profile names (never the sandbox's), in its own
//! process group, and answers with the outcome. Cancellation, timeout and
//! the session's end send [`ServerMsg::CancelHostCommand`]; the CLI's own
//! end kills its commands too.

use crate::gate::Gate;
use crate::lifecycle::{log, record};
use lazaret_helpers::{fds, memfd};
use lazaret_protocol::escalation::{
    self as esc, bounds, Body, Kind, LogEvent, LogRecord, Outcome, ResultRecord,
};
use lazaret_protocol::fdno;
use lazaret_protocol::frame::{read_frame, write_frame, FrameError};
use lazaret_protocol::lifecycle::{Event, ResultKind};
use lazaret_protocol::mailbox::{self, FromReader, ReaderInput, ToReader};
use lazaret_protocol::plan::AutoApproveRule;
use lazaret_protocol::session::{ClientMsg, EscalationPrompt, HostCommand, ServerMsg};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client's answer about one request: the developer's decision (the
/// vector to run, or `None` to deny), or how the host command it ran ended.
#[derive(Debug)]
pub enum Reply {
    Decision(Option<Vec<String>>),
    Outcome(Outcome),
}

/// Who decided a request, what ran (as approved), and its outcome.
type Decision = (String, Option<Vec<String>>, Outcome);

/// Requests waiting for their session's client, by request ID.
pub type Replies = Arc<Mutex<HashMap<String, mpsc::Sender<Reply>>>>;

/// Hands a client's [`ClientMsg::Decision`] or
/// [`ClientMsg::HostCommandOutcome`] to the request waiting for it.
pub fn deliver(replies: &Replies, msg: ClientMsg) {
    let (id, reply) = match msg {
        ClientMsg::Decision { request_id, argv } => (request_id, Reply::Decision(argv)),
        ClientMsg::HostCommandOutcome {
            request_id,
            outcome,
        } => (request_id, Reply::Outcome(outcome)),
        _ => return,
    };
    if let Some(tx) = lock(replies).get(&id) {
        let _ = tx.send(reply);
    }
}

/// A registered Client Session, as the escalation side sees it.
pub struct SessionEntry {
    pub anchor: [u8; 32],
    /// The session's client: it runs the host commands approved for it.
    pub client: Client,
    /// `Some` when the session has a terminal to prompt on.
    pub terminal: Option<Terminal>,
    /// Set when the session ends: its requests end and their commands stop.
    pub gone: Arc<AtomicBool>,
}

#[derive(Clone)]
pub struct Client {
    /// The session's terminal end: a detached session has none attached
    /// (see [`crate::attach`]).
    pub writer: crate::attach::Writer,
    pub replies: Replies,
}

#[derive(Clone)]
pub struct Terminal {
    pub gate: Arc<Gate>,
    /// One prompt at a time per session.
    pub prompt_lock: Arc<Mutex<()>>,
}

/// The running `lazaret-mailbox` and the coordinator's end of its channel.
struct ReaderProc {
    child: Child,
    to_reader: UnixStream,
}

/// What signs this generation's Escalation Results: the coordinator's
/// protocol key from the Trust Anchor, and the generation it names.
pub struct ResultSigner {
    pub generation: lazaret_protocol::trust::GenerationId,
    pub key: ed25519_compact::SecretKey,
}

/// The generation's keys the mailbox uses: the sandbox request-signing
/// public key (requests), and the result signer.
pub struct MailboxKeys {
    pub requests: ed25519_compact::PublicKey,
    pub results: ResultSigner,
}

pub struct Escalations {
    /// This generation's sandbox request-signing public key.
    pub key: ed25519_compact::PublicKey,
    signer: ResultSigner,
    pub sandbox_id: String,
    pub profile: String,
    pub workspace: PathBuf,
    pub requests: PathBuf,
    pub results: PathBuf,
    pub log_path: PathBuf,
    pub rules: Vec<AutoApproveRule>,
    pub sessions: Mutex<HashMap<String, SessionEntry>>,
    /// The replay set: Escalation Request ID -> the request's creation
    /// time, kept while that time is within the age window.
    seen: Mutex<HashMap<[u8; 16], u64>>,
    cancels: Mutex<HashMap<[u8; 16], Arc<AtomicBool>>>,
    /// Cancellations read before their request (both can arrive in one
    /// pass, in any order), with their creation time.
    early_cancels: Mutex<HashMap<[u8; 16], u64>>,
    pending: Mutex<Pending>,
    /// Published results, oldest first, with their publication time.
    results_kept: Mutex<VecDeque<(String, u64)>>,
    /// One writer of `escalations.log` at a time (rotation included).
    log_lock: Mutex<()>,
    reader: Mutex<Option<ReaderProc>>,
    /// Set when the Domain stops: the reader's end is expected then.
    stopping: AtomicBool,
    /// Why the reader ended while the Domain ran: told to every session
    /// that joins afterwards too. Written under the `sessions` lock, so a
    /// joining session is either told by the loss or at its registration.
    lost: Mutex<Option<String>>,
}

/// Unremovable mailbox entries the reader remembers (names are at most
/// 255 bytes).
pub const MAX_STUCK: usize = 1_024;

/// How long a host command may outlive its timeout in its client before
/// the request is ended without it (the client kills it at the timeout).
const CLIENT_GRACE: Duration = Duration::from_secs(5);

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

#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    #[error("cannot open the request directory {path}: {source}")]
    Requests {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    #[error("cannot hand the reader its input: {0}")]
    Input(#[from] ReaderInputError),
    #[error("cannot start {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What of the reader's input could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReaderInputError {
    #[error("{0}")]
    Encode(postcard::Error),
    #[error("{0}")]
    Memfd(lazaret_helpers::memfd::MemfdError),
    /// Its channel, or this end's copy of it.
    #[error("{0}")]
    Channel(std::io::Error),
}

/// The one reason a request naming a session that is not registered gets:
/// that session ended, or never was one of this generation's.
pub const NO_SESSION: &str = "no such Client Session: it has ended or was never one of this Domain, and another session's terminal is never asked";

/// The reason a request of a detached session gets when no terminal
/// attached before its timeout.
pub const NOT_ATTACHED: &str = "the requesting Client Session runs detached and no terminal attached to it (`lazaret attach`) before the request's timeout; another session's terminal is never asked";

/// Why a prompt was never answered.
#[derive(Debug)]
pub enum Unasked {
    /// The request ended (cancelled, timed out on the prompt, session gone).
    Ended,
    /// The session stayed detached until the timeout.
    Detached,
}

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

pub(crate) use lazaret_helpers::sync::lock;

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
    lazaret_helpers::logfile::rotate(path, keep);
}

/// Whether `arg`, added by the sandbox after a rule's vector, reads as an
/// option to the program: it starts with `-` (`--upload-pack=...`, `--`,
/// `-`), `+` (`cargo +toolchain`, `set +o`) or `@` (a response file of
/// options, as `gcc @file` reads), or it holds `=` (make's `NAME=VALUE`,
/// `env`'s assignments). Wider than any one program's reading, on purpose:
/// a false hit only sends the request to the prompt.
pub fn reads_as_option(arg: &str) -> bool {
    arg.starts_with(['-', '+', '@']) || arg.contains('=')
}

/// What a rule says about a requested vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approves,
    NoMatch,
    /// The vector starts with the rule's, but the sandbox added an option
    /// the rule does not list: not auto-approved (it goes to the prompt).
    AddsOption(String),
}

/// Whether a rule approves `argv`: the complete vector, unless the rule
/// explicitly grants trailing arguments (SR-8), and then never a trailing
/// option it does not list in `trailing_options`.
pub fn judge(rule: &AutoApproveRule, argv: &[String]) -> Verdict {
    let prefix = &rule.argv;
    if prefix.is_empty() {
        return Verdict::NoMatch;
    }
    if !rule.trailing_args {
        return if argv == prefix.as_slice() {
            Verdict::Approves
        } else {
            Verdict::NoMatch
        };
    }
    if argv.len() < prefix.len() || argv[..prefix.len()] != *prefix {
        return Verdict::NoMatch;
    }
    match argv[prefix.len()..]
        .iter()
        .find(|a| reads_as_option(a) && !rule.trailing_options.contains(a))
    {
        Some(a) => Verdict::AddsOption(a.clone()),
        None => Verdict::Approves,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What a session's terminal is told when nothing reads its Host
/// Escalation requests any more.
fn lost_line(reason: &str) -> String {
    format!("\r\nlazaret: {reason}\r\n")
}

/// Keeps a client's answer within what a result may hold.
fn bounded(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Completed {
            status,
            mut stdout,
            mut stderr,
            truncated,
        } => {
            let cut = stdout.len() > esc::MAX_OUTPUT || stderr.len() > esc::MAX_OUTPUT;
            stdout.truncate(esc::MAX_OUTPUT);
            stderr.truncate(esc::MAX_OUTPUT);
            Outcome::Completed {
                status,
                stdout,
                stderr,
                truncated: truncated || cut,
            }
        }
        other => other,
    }
}

impl Escalations {
    pub fn new(
        keys: MailboxKeys,
        sandbox_id: String,
        profile: String,
        workspace: PathBuf,
        control: &Path,
        log_path: PathBuf,
        rules: Vec<AutoApproveRule>,
    ) -> Self {
        Self {
            key: keys.requests,
            signer: keys.results,
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
            reader: Mutex::new(None),
            stopping: AtomicBool::new(false),
            lost: Mutex::new(None),
        }
    }

    /// Starts `lazaret-mailbox` (from `libexec`) over the request
    /// directory. Call before the coordinator confines itself: this is its
    /// only exec for escalations. The records are taken once
    /// [`Escalations::take_from_reader`] is called with what this returns
    /// (after confinement: no thread may exist before it).
    pub fn start_reader(self: &Arc<Self>, libexec: &Path) -> Result<UnixStream, ReaderError> {
        use rustix::fs::{Mode, OFlags};
        let dir = rustix::fs::open(
            &self.requests,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|source| ReaderError::Requests {
            path: self.requests.clone(),
            source,
        })?;
        let input = ReaderInput {
            version: mailbox::INPUT_VERSION,
            public_key: *self.key,
            sandbox_id: self.sandbox_id.clone(),
            max_entries_per_pass: bounds::MAX_ENTRIES_PER_POLL as u32,
            max_stuck: MAX_STUCK as u32,
        };
        let bytes = postcard::to_stdvec(&input).map_err(ReaderInputError::Encode)?;
        let digest = hex::encode(Sha256::digest(&bytes));
        let input_fd =
            memfd::sealed("lazaret-mailbox-input", &bytes).map_err(ReaderInputError::Memfd)?;
        let (ours, theirs) = UnixStream::pair().map_err(ReaderInputError::Channel)?;
        let path = libexec.join("lazaret-mailbox");
        let mut cmd = Command::new(&path);
        cmd.arg("--input-digest")
            .arg(&digest)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // Test-only: the Landlock cap the CLI passed (it only lowers).
        if let Some(v) = std::env::var_os(lazaret_seccomp::abi::TEST_CAP_ENV) {
            cmd.env(lazaret_seccomp::abi::TEST_CAP_ENV, v);
        }
        fds::pass_fds(
            &mut cmd,
            vec![
                (input_fd, fdno::mailbox::INPUT),
                (dir, fdno::mailbox::REQUESTS),
                (theirs.into(), fdno::mailbox::CHANNEL),
            ],
        );
        // The reader must not outlive the coordinator that routes its
        // records.
        lazaret_helpers::child::set_signals(
            &mut cmd,
            lazaret_helpers::child::ChildSignals::DIE_WITH_PARENT,
        );
        let child = cmd
            .spawn()
            .map_err(|source| ReaderError::Spawn { path, source })?;
        drop(cmd);
        let from_reader = ours.try_clone().map_err(ReaderInputError::Channel)?;
        // A reader that stops reading must not hold up session start-up.
        let _ = ours.set_write_timeout(Some(Duration::from_secs(2)));
        *lock(&self.reader) = Some(ReaderProc {
            child,
            to_reader: ours,
        });
        // Sessions registered before the reader started.
        let known: Vec<_> = lock(&self.sessions)
            .iter()
            .map(|(k, v)| (k.clone(), v.anchor))
            .collect();
        for (session_id, anchor) in known {
            self.tell_reader(&ToReader::SessionAdded { session_id, anchor });
        }
        Ok(from_reader)
    }

    /// Starts the thread that takes the reader's records.
    pub fn take_from_reader(self: &Arc<Self>, from_reader: UnixStream) {
        let me = self.clone();
        std::thread::spawn(move || me.take_records(from_reader));
    }

    /// Takes the reader's records until it ends.
    fn take_records(self: Arc<Self>, mut from_reader: UnixStream) {
        let why = loop {
            match read_frame::<_, FromReader>(&mut from_reader) {
                Ok(rec) => self.handle(rec),
                Err(FrameError::Closed) => break "it exited".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        self.reader_lost(&why);
    }

    /// The reader ended while the Domain runs: nothing reads the mailbox
    /// any more. Said in the log, in the record and to every client, so
    /// nobody waits for an answer in silence.
    fn reader_lost(&self, why: &str) {
        let status = lock(&self.reader)
            .as_mut()
            .and_then(|r| r.child.try_wait().ok().flatten())
            .map(|s| s.to_string())
            .unwrap_or_else(|| "still running".into());
        let reason = format!(
            "the Escalation Mailbox reader ended ({why}; {status}): Host Escalation requests are no longer read in this Domain; end its sessions and run again"
        );
        log(&reason);
        self.record(LogEvent::ReaderExited {
            reason: reason.clone(),
        });
        let clients: Vec<Client> = {
            let sessions = lock(&self.sessions);
            *lock(&self.lost) = Some(reason.clone());
            sessions.values().map(|s| s.client.clone()).collect()
        };
        let line = ServerMsg::Stderr(lost_line(&reason).into_bytes());
        for c in clients {
            let _ = write_frame(&mut *lock(&c.writer), &line);
        }
    }

    fn tell_reader(&self, m: &ToReader) {
        let mut r = lock(&self.reader);
        let Some(r) = r.as_mut() else { return };
        if let Err(e) = write_frame(&mut r.to_reader, m) {
            log(format!("cannot tell the Escalation Mailbox reader: {e}"));
        }
    }

    /// Registers a Client Session: in the routing table first, then with
    /// the reader, before any process of the session exists. When the
    /// reader already ended, returns the line the session must be shown
    /// (after its first record, which must stay `Accepted`).
    pub fn register(&self, session_id: &str, entry: SessionEntry) -> Option<String> {
        let anchor = entry.anchor;
        let lost = {
            let mut sessions = lock(&self.sessions);
            sessions.insert(session_id.to_string(), entry);
            lock(&self.lost).clone()
        };
        if let Some(reason) = lost {
            // Nobody to tell the session to: the reader is gone.
            return Some(lost_line(&reason));
        }
        self.tell_reader(&ToReader::SessionAdded {
            session_id: session_id.to_string(),
            anchor,
        });
        None
    }

    /// The session ended: its requests end and their commands stop.
    pub fn unregister(&self, session_id: &str) {
        if let Some(e) = lock(&self.sessions).remove(session_id) {
            e.gone.store(true, Ordering::SeqCst);
        }
        self.tell_reader(&ToReader::SessionRemoved {
            session_id: session_id.to_string(),
        });
    }

    /// Ends the reader (the Domain stops): its channel closes, it exits.
    pub fn stop_reader(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let Some(mut r) = lock(&self.reader).take() else {
            return;
        };
        let _ = r.to_reader.shutdown(std::net::Shutdown::Both);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = r.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = r.child.kill();
        let _ = r.child.wait();
    }

    /// Housekeeping until `stop` is set.
    pub fn watch(self: Arc<Self>, stop: Arc<AtomicBool>) {
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                self.housekeeping(now_ms());
                crate::logs::flush(false);
            }
        });
    }

    /// Forgets what the age window refuses anyway, and old results.
    fn housekeeping(&self, now: u64) {
        prune_by_age(&mut lock(&self.seen), now);
        prune_by_age(&mut lock(&self.early_cancels), now);
        self.prune_results(now);
    }

    /// Refuses an accepted-looking request before anyone is asked: logged,
    /// and its client gets `outcome` as its result.
    fn refuse_with_result(&self, entry: &str, body: &Body, outcome: Outcome) {
        let why = match &outcome {
            Outcome::Refused { reason } | Outcome::Denied { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        self.refuse(entry, &why);
        record(Event::Refused {
            request: body.request_hex(),
            kind: ResultKind::from(&outcome),
        });
        self.publish(
            &body.session_id,
            ResultRecord {
                request_id: body.request_id,
                outcome,
            },
        );
    }

    /// Logs a refused entry. `entry` is the sandbox's name in the escaped
    /// form the reader gave it (lossless, see `lazaret_protocol::display`).
    fn refuse(&self, entry: &str, why: &str) {
        // The sandbox makes as many as it likes: coalesced in the log,
        // each one in the (rotated) record.
        let kind = crate::logs::REFUSED_ENTRY;
        crate::logs::coalesced(kind, format_args!("{kind} {entry}: {why}"));
        self.record(LogEvent::Refused {
            entry: entry.to_string(),
            reason: why.to_string(),
        });
    }

    /// Acts on one record of the reader.
    pub fn handle(self: &Arc<Self>, rec: FromReader) {
        lazaret_helpers::timeline::mark("coordinator", "escalation-record-in");
        match rec {
            FromReader::Refused { entry, reason } => self.refuse(&entry, &reason),
            FromReader::NoSession {
                entry,
                body,
                envelope,
            } => {
                if self.recheck(&entry, &body, &envelope, None) {
                    self.no_session(&entry, &body)
                }
            }
            FromReader::Verified {
                entry,
                body,
                envelope,
            } => self.accept(&entry, body, &envelope),
        }
    }

    /// Checks the reader's work again on the typed record: signature (and
    /// MAC, given the session's anchor) over the body's encoding, and the
    /// generation. A failure means the reader is not to be trusted.
    fn recheck(
        &self,
        entry: &str,
        body: &Body,
        envelope: &esc::Envelope,
        anchor: Option<&[u8; 32]>,
    ) -> bool {
        let why = match envelope.check(body, &self.key, anchor) {
            Err(e) => e.to_string(),
            Ok(()) if body.sandbox_id != self.sandbox_id => "another generation's".into(),
            Ok(()) => return true,
        };
        self.refuse(
            entry,
            &format!("the mailbox reader passed a record that does not verify ({why})"),
        );
        false
    }

    /// A verified entry of a session the reader knew.
    fn accept(self: &Arc<Self>, entry: &str, body: Body, envelope: &esc::Envelope) {
        let session = {
            let sessions = lock(&self.sessions);
            sessions.get(&body.session_id).map(|s| {
                (
                    s.anchor,
                    s.gone.clone(),
                    s.client.clone(),
                    s.terminal.clone(),
                )
            })
        };
        // Ended since the reader verified it.
        let Some((anchor, gone, client, terminal)) = session else {
            if self.recheck(entry, &body, envelope, None) {
                self.no_session(entry, &body);
            }
            return;
        };
        if !self.recheck(entry, &body, envelope, Some(&anchor)) {
            return;
        }
        let now = now_ms();
        match &body.kind {
            Kind::Cancel => self.accept_cancel(entry, &body, now),
            Kind::Request(_) => self.accept_request(entry, body, now, (client, terminal, gone)),
        }
    }

    /// A cancellation: of a pending request, or remembered (within a
    /// bound) for a request not yet read.
    fn accept_cancel(&self, entry: &str, body: &Body, now: u64) {
        match lock(&self.cancels).get(&body.request_id) {
            Some(flag) => flag.store(true, Ordering::Relaxed),
            None => {
                let mut early = lock(&self.early_cancels);
                let (id, created) = (body.request_id, body.created_unix_ms);
                if remember(&mut early, id, created, now, bounds::MAX_EARLY_CANCELS).is_err() {
                    drop(early);
                    self.refuse(
                        entry,
                        "a cancellation of no pending request, over the bound of those kept",
                    );
                }
            }
        }
    }

    /// A new Escalation Request: remembered against replay, admitted
    /// within the bounds of pending ones, and resolved on its own thread.
    fn accept_request(
        self: &Arc<Self>,
        entry: &str,
        body: Body,
        now: u64,
        (client, terminal, gone): (Client, Option<Terminal>, Arc<AtomicBool>),
    ) {
        let remembered = remember(
            &mut lock(&self.seen),
            body.request_id,
            body.created_unix_ms,
            now,
            bounds::MAX_SEEN,
        );
        match remembered {
            Ok(true) => {}
            Ok(false) => return self.refuse(entry, "a replayed Escalation Request ID"),
            Err(n) => return self.refuse_bounded(entry, &body, Refusal::ReplaySetFull(n)),
        }
        if let Err(r) = lock(&self.pending).admit(&body.session_id) {
            return self.refuse_bounded(entry, &body, r);
        }
        let slot = Slot {
            esc: self.clone(),
            session: body.session_id.clone(),
        };
        let cancelled = lock(&self.early_cancels).remove(&body.request_id).is_some();
        let cancel = Arc::new(AtomicBool::new(cancelled));
        lock(&self.cancels).insert(body.request_id, cancel.clone());
        let me = self.clone();
        let id = body.request_id;
        let session_id = body.session_id.clone();
        // Before its thread exists, so that every later step of
        // the request is recorded after it.
        record(Event::Accepted {
            request: body.request_hex(),
            session: body.session_id.clone(),
        });
        let spawned = std::thread::Builder::new()
            .name("escalation".into())
            .spawn(move || {
                let _slot = slot;
                me.resolve(body, client, terminal, gone, cancel)
            });
        if let Err(e) = spawned {
            // The closure, and with it the slot, is dropped.
            lock(&self.cancels).remove(&id);
            let r = Refusal::NoThread(e.to_string());
            self.refuse(entry, &r.to_string());
            record(Event::Result {
                request: hex::encode(id),
                kind: ResultKind::Refused,
            });
            self.publish(
                &session_id,
                ResultRecord {
                    request_id: id,
                    outcome: Outcome::Refused {
                        reason: r.to_string(),
                    },
                },
            );
        }
    }

    fn refuse_bounded(&self, entry: &str, body: &Body, r: Refusal) {
        self.refuse_with_result(
            entry,
            body,
            Outcome::Refused {
                reason: r.to_string(),
            },
        );
    }

    /// A request naming no registered session (it ended, or never was):
    /// nobody is asked, and no other session's terminal either. Its ID
    /// enters the replay set first, so one ID gets at most one result.
    fn no_session(&self, entry: &str, body: &Body) {
        if !matches!(body.kind, Kind::Request(_)) {
            return self.refuse(entry, NO_SESSION);
        }
        let now = now_ms();
        let (id, created) = (body.request_id, body.created_unix_ms);
        match remember(&mut lock(&self.seen), id, created, now, bounds::MAX_SEEN) {
            Ok(true) => self.refuse_with_result(
                entry,
                body,
                Outcome::Denied {
                    reason: NO_SESSION.into(),
                },
            ),
            Ok(false) => self.refuse(entry, "a replayed Escalation Request ID"),
            Err(n) => self.refuse_bounded(entry, body, Refusal::ReplaySetFull(n)),
        }
    }

    /// Asks the developer at the session's terminal: `Ok(Some(argv))`
    /// approved (maybe edited), `Ok(None)` denied, `Err(outcome)` when the
    /// request ended without a decision.
    fn ask(
        &self,
        body: &Body,
        req: &esc::Request,
        client: &Client,
        t: &Terminal,
        stop: &dyn Fn() -> bool,
        timeout: Option<Instant>,
    ) -> Result<Option<Vec<String>>, Unasked> {
        let id = body.request_hex();
        let _one = lock(&t.prompt_lock);
        // A detached session's request waits for `lazaret attach`: the
        // prompt appears on the terminal that attaches, never elsewhere.
        while !lock(&client.writer).is_attached() {
            if stop() {
                return Err(Unasked::Ended);
            }
            if timeout.is_some_and(|d| Instant::now() > d) {
                return Err(Unasked::Detached);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let (tx, rx) = mpsc::channel();
        lock(&client.replies).insert(id.clone(), tx);
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
        let _ = write_frame(&mut *lock(&client.writer), &prompt);
        let decision = loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Reply::Decision(d)) => break Ok(d),
                Ok(Reply::Outcome(_)) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break Err(Unasked::Ended),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if stop() || timeout.is_some_and(|d| Instant::now() > d) {
                        let _ = write_frame(
                            &mut *lock(&client.writer),
                            &ServerMsg::PromptWithdrawn {
                                request_id: id.clone(),
                            },
                        );
                        break Err(Unasked::Ended);
                    }
                }
            }
        };
        lock(&client.replies).remove(&id);
        t.gate.open();
        decision
    }

    /// Has the requesting session's client run `argv` (from the request's
    /// directory `cwd`, which the client maps to the host's), and waits
    /// for the outcome; cancellation, the session's end and the timeout
    /// stop it.
    fn run_in_client(
        &self,
        id: &str,
        (argv, cwd): (Vec<String>, &str),
        decided_by: &str,
        client: &Client,
        stop: &dyn Fn() -> bool,
        timeout: Option<Instant>,
    ) -> Outcome {
        let (tx, rx) = mpsc::channel();
        lock(&client.replies).insert(id.to_string(), tx);
        let run = ServerMsg::RunHostCommand(HostCommand {
            request_id: id.to_string(),
            argv,
            cwd: cwd.to_string(),
            decided_by: decided_by.to_string(),
            timeout_ms: timeout
                .map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u64),
        });
        let cancel = |outcome: Outcome| {
            let told = write_frame(
                &mut *lock(&client.writer),
                &ServerMsg::CancelHostCommand {
                    request_id: id.to_string(),
                },
            );
            // The client answers once the group is killed; the request
            // ends either way. A client that is gone has killed its
            // commands as it ended.
            if told.is_ok() {
                record(Event::CancelSent {
                    request: id.to_string(),
                });
                let _ = rx.recv_timeout(CLIENT_GRACE);
            }
            outcome
        };
        // Its own statement: the writer's guard must not live through the
        // wait below (the session's output and the cancellation need it).
        let sent = write_frame(&mut *lock(&client.writer), &run);
        lazaret_helpers::timeline::mark("coordinator", "escalation-run-sent");
        if sent.is_ok() {
            record(Event::HostCommand {
                request: id.to_string(),
            });
        }
        let outcome = if let Err(e) = sent {
            if stop() {
                Outcome::Cancelled
            } else {
                Outcome::Failed {
                    reason: format!(
                        "the requesting session's lazaret CLI cannot be told to run it: {e}"
                    ),
                }
            }
        } else {
            loop {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(Reply::Outcome(o)) => {
                        lazaret_helpers::timeline::mark("coordinator", "escalation-outcome-in");
                        break bounded(o);
                    }
                    Ok(Reply::Decision(_)) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break Outcome::Cancelled,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if stop() {
                            break cancel(Outcome::Cancelled);
                        }
                        if timeout.is_some_and(|d| Instant::now() > d + CLIENT_GRACE) {
                            break cancel(Outcome::TimedOut);
                        }
                    }
                }
            }
        };
        lock(&client.replies).remove(id);
        outcome
    }

    /// The index of the first rule that approves `argv`. A rule whose
    /// vector it extends with an option the rule does not list approves
    /// nothing: the coordinator's log says which option, and the request
    /// goes on as one no rule matches (to the prompt).
    fn matching_rule(&self, id: &str, argv: &[String]) -> Option<usize> {
        let mut approving = None;
        for (i, rule) in self.rules.iter().enumerate() {
            match judge(rule, argv) {
                Verdict::Approves => {
                    approving = Some(i);
                    break;
                }
                Verdict::AddsOption(arg) => log(format!(
                    "escalation {id}: auto-approval rule {} does not apply: the sandbox added `{}`, an option the rule does not list in trailing_options",
                    i + 1,
                    lazaret_protocol::display::escape(arg.as_bytes())
                )),
                Verdict::NoMatch => {}
            }
        }
        approving
    }

    /// Takes one accepted request to its Escalation Result.
    fn resolve(
        &self,
        body: Body,
        client: Client,
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
        let rule = self.matching_rule(&id, &req.argv);
        let (decided_by, argv, outcome) = if let Some(i) = rule {
            let by = format!("auto-approval rule {}", i + 1);
            let o = self.run_in_client(
                &id,
                (req.argv.clone(), &req.cwd),
                &by,
                &client,
                &stop,
                timeout,
            );
            (by, Some(req.argv.clone()), o)
        } else if let Some(t) = terminal {
            self.ask_developer(&body, req, &id, &t, (&client, &stop, timeout))
        } else {
            (
                "no rule".to_string(),
                None,
                Outcome::Denied {
                    reason: NO_TERMINAL.into(),
                },
            )
        };
        self.conclude(&body, req, id, (decided_by, argv, outcome));
    }

    /// Asks the developer on the session's terminal, and runs what they
    /// approve (as they may have edited it) in the session's client.
    fn ask_developer(
        &self,
        body: &Body,
        req: &esc::Request,
        id: &str,
        t: &Terminal,
        (client, stop, timeout): (&Client, &dyn Fn() -> bool, Option<Instant>),
    ) -> Decision {
        match self.ask(body, req, client, t, stop, timeout) {
            Ok(Some(argv)) => {
                let by = "the developer".to_string();
                let o =
                    self.run_in_client(id, (argv.clone(), &req.cwd), &by, client, stop, timeout);
                (by, Some(argv), o)
            }
            Ok(None) => (
                "the developer".to_string(),
                None,
                Outcome::Denied {
                    reason: "the developer denied it".into(),
                },
            ),
            Err(Unasked::Detached) => (
                "nobody".into(),
                None,
                Outcome::Denied {
                    reason: NOT_ATTACHED.into(),
                },
            ),
            Err(Unasked::Ended) if stop() => ("nobody".into(), None, Outcome::Cancelled),
            Err(Unasked::Ended) => ("nobody".into(), None, Outcome::TimedOut),
        }
    }

    /// Ends a resolved request: no longer cancellable, its result recorded
    /// (lifecycle and `escalations.log`) and published to its session.
    fn conclude(
        &self,
        body: &Body,
        req: &esc::Request,
        id: String,
        (decided_by, argv, outcome): Decision,
    ) {
        lock(&self.cancels).remove(&body.request_id);
        record(Event::Result {
            request: id.clone(),
            kind: ResultKind::from(&outcome),
        });
        self.record(LogEvent::Decision {
            request_id: id,
            session_id: body.session_id.clone(),
            argv: req.argv.clone(),
            justification: req.justification.clone(),
            requester_pid: req.requester.pid,
            requester_cmdline: req.requester.cmdline.clone(),
            ran_argv: argv,
            decided_by,
            result: outcome.summary(),
        });
        self.publish(
            &body.session_id,
            ResultRecord {
                request_id: body.request_id,
                outcome,
            },
        );
    }

    /// Writes the result, signed by the coordinator's protocol key and
    /// bound to this generation, sandbox and session, by atomic rename
    /// into the read-only result path.
    fn publish(&self, session_id: &str, r: ResultRecord) {
        let id = hex::encode(r.request_id);
        let tmp = self.results.join(format!(".{id}.tmp"));
        let bytes = lazaret_protocol::trust::result::seal(
            &lazaret_protocol::trust::result::SignedBody {
                generation: self.signer.generation.clone(),
                sandbox_id: self.sandbox_id.clone(),
                session_id: session_id.to_string(),
                record: r,
            },
            &self.signer.key,
        );
        // Readable by the profile's user inside where the directory is
        // (whatever this process's umask); signed, so no reader trusts
        // more than the signature.
        let written = std::fs::write(&tmp, bytes)
            .and_then(|_| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
            })
            .and_then(|_| std::fs::rename(&tmp, self.results.join(&id)));
        if let Err(e) = written {
            let kind = crate::logs::UNPUBLISHED_RESULT;
            crate::logs::coalesced(kind, format_args!("{kind} ({id}): {e}"));
            return;
        }
        lazaret_helpers::timeline::mark("coordinator", "escalation-result-out");
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
    fn record(&self, event: LogEvent) {
        let rec = LogRecord {
            time_unix_ms: now_ms(),
            sandbox_id: self.sandbox_id.clone(),
            event,
        };
        let Ok(line) = serde_json::to_string(&rec) else {
            return;
        };
        let _one = lock(&self.log_lock);
        rotate_if_full(&self.log_path, bounds::LOG_MAX_BYTES, bounds::LOG_ROTATIONS);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANCHOR: [u8; 32] = [9; 32];

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    fn rule(argv: &[&str], trailing_args: bool, options: &[&str]) -> AutoApproveRule {
        AutoApproveRule {
            argv: v(argv),
            trailing_args,
            trailing_options: v(options),
        }
    }

    type Sk = ed25519_compact::SecretKey;

    fn mailbox(rules: Vec<AutoApproveRule>) -> (tempfile::TempDir, Arc<Escalations>, Sk) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("mailbox/requests")).unwrap();
        std::fs::create_dir_all(d.path().join("mailbox/results")).unwrap();
        let kp = ed25519_compact::KeyPair::generate();
        let e = Arc::new(Escalations::new(
            MailboxKeys {
                requests: kp.pk,
                results: ResultSigner {
                    generation: test_generation(),
                    key: ed25519_compact::KeyPair::generate().sk,
                },
            },
            "s".into(),
            "default".into(),
            d.path().into(),
            d.path(),
            d.path().join("log"),
            rules,
        ));
        (d, e, kp.sk)
    }

    /// A request as the reader hands it over, verified.
    fn request(session: &str, argv: &[&str]) -> Body {
        let mut id = [0u8; 16];
        getrandom::getrandom(&mut id).unwrap();
        Body {
            version: esc::VERSION,
            sandbox_id: "s".into(),
            session_id: session.into(),
            request_id: id,
            created_unix_ms: now_ms(),
            kind: Kind::Request(esc::Request {
                argv: v(argv),
                justification: String::new(),
                cwd: "/workspace".into(),
                timeout_secs: 0,
                requester: esc::Requester::default(),
            }),
        }
    }

    fn test_generation() -> lazaret_protocol::trust::GenerationId {
        lazaret_protocol::trust::GenerationId {
            domain_id: "d".into(),
            number: 1,
            nonce: [0; 16],
        }
    }

    /// The outcome of a result file, past its signature (which the
    /// protocol crate's tests check).
    fn result_of(d: &tempfile::TempDir, id: [u8; 16]) -> Option<Outcome> {
        let p = d.path().join("mailbox/results").join(hex::encode(id));
        let bytes = std::fs::read(p).ok()?;
        let body: lazaret_protocol::trust::result::SignedBody =
            postcard::from_bytes(&bytes[64..]).unwrap();
        assert_eq!(body.generation, test_generation());
        Some(body.record.outcome)
    }

    /// Registers a session without a terminal; returns the client's end of
    /// its connection and its replies.
    fn register(e: &Escalations, session: &str) -> (UnixStream, Replies) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let replies = Replies::default();
        e.register(
            session,
            SessionEntry {
                anchor: ANCHOR,
                client: Client {
                    writer: Arc::new(Mutex::new(crate::attach::Sink::attached(ours))),
                    replies: replies.clone(),
                },
                terminal: None,
                gone: Arc::new(AtomicBool::new(false)),
            },
        );
        (theirs, replies)
    }

    /// The signature and MAC `lazaret-escalate` would have made.
    fn envelope(sk: &Sk, body: &Body) -> esc::Envelope {
        let rec = esc::seal(body, sk, &ANCHOR);
        esc::Envelope {
            signature: rec[..64].to_vec(),
            mac: rec[64..96].try_into().unwrap(),
        }
    }

    fn verified(sk: &Sk, body: &Body, entry: &str) -> FromReader {
        FromReader::Verified {
            entry: entry.into(),
            body: body.clone(),
            envelope: envelope(sk, body),
        }
    }

    #[test]
    fn sessions_joining_after_the_reader_ended_are_told_too() {
        let (_d, e, _sk) = mailbox(vec![]);
        let (mut before, _) = register(&e, "before");
        e.reader_lost("it exited");
        // Told at once, on its connection.
        before
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        match read_frame::<_, ServerMsg>(&mut before).unwrap() {
            ServerMsg::Stderr(line) => assert!(
                String::from_utf8_lossy(&line).contains("Escalation Mailbox reader ended"),
                "{}",
                String::from_utf8_lossy(&line)
            ),
            other => panic!("{other:?}"),
        }
        // A session joining later: nothing written before its first record
        // (Accepted, the caller's), the line to show after it returned.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let notice = e.register(
            "after",
            SessionEntry {
                anchor: ANCHOR,
                client: Client {
                    writer: Arc::new(Mutex::new(crate::attach::Sink::attached(ours))),
                    replies: Replies::default(),
                },
                terminal: None,
                gone: Arc::new(AtomicBool::new(false)),
            },
        );
        assert!(
            notice
                .as_deref()
                .is_some_and(|n| n.contains("Escalation Mailbox reader ended")),
            "{notice:?}"
        );
        theirs.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        assert!(std::io::Read::read(&mut theirs, &mut b).is_err());
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
        let (d, e, _sk) = mailbox(vec![]);
        let big = "x".repeat(4096);
        for _ in 0..(bounds::LOG_MAX_BYTES as usize / 4096) * (bounds::LOG_ROTATIONS + 3) {
            e.record(LogEvent::Refused {
                entry: big.clone(),
                reason: String::new(),
            });
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
    fn the_record_is_one_typed_json_line_per_event_with_its_field_names() {
        let (d, e, _sk) = mailbox(vec![]);
        e.refuse("\\x1b]0;pwned\\x07\\xff.req", "signature");
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        assert_eq!(log.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
        assert_eq!(v["event"], "refused");
        assert_eq!(v["entry"], "\\x1b]0;pwned\\x07\\xff.req");
        assert_eq!(v["sandbox_id"], "s");
        assert!(v["time_unix_ms"].as_u64().is_some());
        assert!(!log.contains('\u{1b}'), "{log}");
        let back: LogRecord = serde_json::from_str(log.trim()).unwrap();
        assert!(matches!(back.event, LogEvent::Refused { .. }));
    }

    #[test]
    fn over_the_pending_bound_a_request_is_refused_with_a_result_and_no_thread() {
        let (d, e, sk) = mailbox(vec![]);
        let _client = register(&e, "sess");
        {
            let mut p = lock(&e.pending);
            for i in 0..bounds::MAX_PENDING {
                p.admit(&format!("other{}", i / bounds::MAX_PENDING_PER_SESSION))
                    .unwrap();
            }
        }
        let body = request("sess", &["/bin/true"]);
        e.handle(verified(&sk, &body, "r1"));
        assert!(
            matches!(result_of(&d, body.request_id), Some(Outcome::Refused { ref reason }) if reason.contains("pending in this Domain")),
            "{:?}",
            result_of(&d, body.request_id)
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
        let (d, e, sk) = mailbox(vec![]);
        let body = request("ended", &["/bin/true"]);
        let nosession = |entry: &str| FromReader::NoSession {
            entry: entry.into(),
            body: body.clone(),
            envelope: envelope(&sk, &body),
        };
        e.handle(nosession("r1"));
        assert_eq!(
            result_of(&d, body.request_id),
            Some(Outcome::Denied {
                reason: NO_SESSION.into()
            })
        );
        // The same ID again is a replay: no second result is written.
        std::fs::remove_file(
            d.path()
                .join("mailbox/results")
                .join(hex::encode(body.request_id)),
        )
        .unwrap();
        e.handle(nosession("r2"));
        assert_eq!(result_of(&d, body.request_id), None);
        // A verified record of a session that ended meanwhile is the same.
        let late = request("ended", &["/bin/true"]);
        e.handle(verified(&sk, &late, "r3"));
        assert_eq!(
            result_of(&d, late.request_id),
            Some(Outcome::Denied {
                reason: NO_SESSION.into()
            })
        );
    }

    #[test]
    fn a_request_of_a_session_without_a_terminal_is_denied_not_prompted() {
        let (d, e, sk) = mailbox(vec![]);
        let _client = register(&e, "notty");
        let body = request("notty", &["/bin/true"]);
        e.handle(verified(&sk, &body, "r1"));
        assert!(eventually(|| result_of(&d, body.request_id).is_some()));
        assert_eq!(
            result_of(&d, body.request_id),
            Some(Outcome::Denied {
                reason: NO_TERMINAL.into()
            })
        );
        assert!(eventually(|| lock(&e.pending).total == 0));
    }

    #[test]
    fn an_auto_approved_command_runs_in_the_requesting_sessions_client() {
        let (d, e, sk) = mailbox(vec![rule(&["/bin/echo", "hi"], false, &[])]);
        let (mut client, replies) = register(&e, "notty");
        let body = request("notty", &["/bin/echo", "hi"]);
        e.handle(verified(&sk, &body, "r1"));
        let Ok(ServerMsg::RunHostCommand(c)) = read_frame::<_, ServerMsg>(&mut client) else {
            panic!("the client was not told to run it");
        };
        assert_eq!(c.argv, v(&["/bin/echo", "hi"]));
        assert_eq!(c.decided_by, "auto-approval rule 1");
        assert_eq!(c.request_id, body.request_hex());
        // Output beyond the bound is cut, whatever the client sends.
        deliver(
            &replies,
            ClientMsg::HostCommandOutcome {
                request_id: c.request_id,
                outcome: Outcome::Completed {
                    status: 0,
                    stdout: vec![b'x'; esc::MAX_OUTPUT + 1],
                    stderr: vec![],
                    truncated: false,
                },
            },
        );
        assert!(eventually(|| result_of(&d, body.request_id).is_some()));
        assert!(matches!(
            result_of(&d, body.request_id),
            Some(Outcome::Completed { status: 0, ref stdout, truncated: true, .. }) if stdout.len() == esc::MAX_OUTPUT
        ));
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        assert!(
            log.contains("\"decided_by\":\"auto-approval rule 1\"")
                && log.contains("\"result\":\"completed, status 0\""),
            "{log}"
        );
    }

    #[test]
    fn a_cancelled_request_tells_the_client_to_kill_its_command() {
        let (d, e, sk) = mailbox(vec![rule(&["/bin/sleep", "60"], false, &[])]);
        let (mut client, replies) = register(&e, "notty");
        let body = request("notty", &["/bin/sleep", "60"]);
        e.handle(verified(&sk, &body, "r1"));
        let Ok(ServerMsg::RunHostCommand(c)) = read_frame::<_, ServerMsg>(&mut client) else {
            panic!("the client was not told to run it");
        };
        let mut cancel = body.clone();
        cancel.kind = Kind::Cancel;
        e.handle(verified(&sk, &cancel, "c1"));
        let Ok(ServerMsg::CancelHostCommand { request_id }) =
            read_frame::<_, ServerMsg>(&mut client)
        else {
            panic!("the client was not told to cancel it");
        };
        assert_eq!(request_id, c.request_id);
        deliver(
            &replies,
            ClientMsg::HostCommandOutcome {
                request_id,
                outcome: Outcome::Cancelled,
            },
        );
        assert!(eventually(|| result_of(&d, body.request_id).is_some()));
        assert_eq!(result_of(&d, body.request_id), Some(Outcome::Cancelled));
    }

    #[test]
    fn a_record_the_reader_could_not_have_verified_is_refused_and_runs_nothing() {
        let (d, e, sk) = mailbox(vec![rule(&["/bin/echo", "hi"], false, &[])]);
        let (mut client, _replies) = register(&e, "notty");
        client
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let body = request("notty", &["/bin/echo", "hi"]);
        // Signed, but for another body; another key; another anchor.
        let mut forged = body.clone();
        forged.kind = Kind::Request(esc::Request {
            argv: v(&["/bin/echo", "hi"]),
            justification: "not what was signed".into(),
            cwd: "/".into(),
            timeout_secs: 0,
            requester: Default::default(),
        });
        let other_key = ed25519_compact::KeyPair::generate().sk;
        let mut wrong_mac = envelope(&sk, &body);
        wrong_mac.mac = [0; 32];
        for (i, env) in [
            envelope(&sk, &body),
            envelope(&other_key, &forged),
            wrong_mac,
        ]
        .into_iter()
        .enumerate()
        {
            let b = if i == 0 { forged.clone() } else { body.clone() };
            e.handle(FromReader::Verified {
                entry: format!("f{i}"),
                body: b,
                envelope: env,
            });
        }
        assert!(lock(&e.cancels).is_empty(), "a forged record was accepted");
        assert_eq!(lock(&e.pending).total, 0);
        assert!(
            read_frame::<_, ServerMsg>(&mut client).is_err(),
            "a forged record ran"
        );
        assert_eq!(result_of(&d, body.request_id), None);
        let log = std::fs::read_to_string(d.path().join("log")).unwrap();
        assert_eq!(
            log.lines()
                .filter(|l| l.contains("does not verify"))
                .count(),
            3,
            "{log}"
        );
        // The genuine record still runs: nothing of it was remembered.
        e.handle(verified(&sk, &body, "ok"));
        assert!(matches!(
            read_frame::<_, ServerMsg>(&mut client),
            Ok(ServerMsg::RunHostCommand(_))
        ));
    }

    #[test]
    fn results_beyond_the_bound_are_removed_oldest_first() {
        let (d, e, _sk) = mailbox(vec![]);
        for i in 0..bounds::MAX_RESULTS + 10 {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_be_bytes());
            e.publish(
                "sess",
                ResultRecord {
                    request_id: id,
                    outcome: Outcome::Cancelled,
                },
            );
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
    fn rules_match_the_complete_vector_unless_trailing_is_granted() {
        let exact = rule(&["git", "fetch"], false, &[]);
        let trailing = rule(&["git", "fetch"], true, &[]);
        assert_eq!(judge(&exact, &v(&["git", "fetch"])), Verdict::Approves);
        for other in [&["git", "fetch", "origin"][..], &["git", "fetcH"], &["git"]] {
            assert_eq!(judge(&exact, &v(other)), Verdict::NoMatch, "{other:?}");
        }
        assert_eq!(
            judge(&trailing, &v(&["git", "fetch", "origin", "main"])),
            Verdict::Approves
        );
        assert_eq!(judge(&trailing, &v(&["git", "push"])), Verdict::NoMatch);
        assert_eq!(
            judge(&rule(&[], true, &[]), &v(&["anything"])),
            Verdict::NoMatch
        );
    }

    #[test]
    fn trailing_arguments_never_add_an_option_the_rule_does_not_list() {
        let fetch = rule(&["git", "fetch"], true, &["--prune", "--depth=1"]);
        for added in [
            "--upload-pack=touch /tmp/x",
            "--upload-pack",
            "-u",
            "--",
            "-",
            "--all",
            "--depth=2",
            "+refs/heads/*:refs/x/*",
            "@opts",
        ] {
            assert_eq!(
                judge(&fetch, &v(&["git", "fetch", "origin", added])),
                Verdict::AddsOption(added.into()),
                "{added}"
            );
        }
        assert_eq!(
            judge(
                &fetch,
                &v(&["git", "fetch", "--prune", "--depth=1", "origin"])
            ),
            Verdict::Approves
        );
        // make reads NAME=VALUE as a variable (SHELL=..., MAKEFLAGS=...).
        let make = rule(&["make"], true, &[]);
        assert_eq!(
            judge(&make, &v(&["make", "test", "SHELL=/tmp/x"])),
            Verdict::AddsOption("SHELL=/tmp/x".into())
        );
        assert_eq!(
            judge(&make, &v(&["make", "test", "lint"])),
            Verdict::Approves
        );
        // The rule's own vector may hold options: only added ones count.
        let own = rule(&["git", "-C", "sub", "fetch"], true, &[]);
        assert_eq!(
            judge(&own, &v(&["git", "-C", "sub", "fetch", "origin"])),
            Verdict::Approves
        );
    }
}
