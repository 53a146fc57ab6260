//! The Domain lifecycle as the coordinator records it: the phase of a
//! generation (the Domain Store's [`Phase`]), and one [`Event`] per
//! recorded step, which the coordinator writes to `coordinator.log` as
//! `lifecycle: <event>` at the moment it makes the step.
//!
//! [`Recorded`] is the set of recorded transitions the lifecycle model
//! allows (`lib/protocol/tests/lifecycle_model.rs` checks the model, built on
//! it, exhaustively with `stateright`). Replaying a real Domain's
//! `coordinator.log` through it ([`replay`]) checks that every step the
//! coordinator took is one of those transitions.
//!
//! What it enforces, per step: one owner per Domain at a time (a
//! coordinator records only while it holds the Domain lock; a new owner
//! after a crash recovers an unfinished generation before anything else);
//! generations advance `Starting -> Running -> Stopping -> Stopped` (or
//! `Starting -> Stopping` when start-up fails), one at a time, numbered
//! upwards; sessions join only a running generation; an Escalation
//! Request gets at most one result, a host command only before it, and
//! only an accepted request runs one.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The phase of a Domain generation, as the Domain Store records it.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Resources may be in creation; recovery must assume any of them exist.
    Starting,
    Running,
    /// Teardown began; recovery finishes it.
    Stopping,
    /// Nothing transient exists.
    Stopped,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::Starting,
        Phase::Running,
        Phase::Stopping,
        Phase::Stopped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Starting => "Starting",
            Phase::Running => "Running",
            Phase::Stopping => "Stopping",
            Phase::Stopped => "Stopped",
        }
    }

    fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Whether a generation may go from `self` to `to` in one recorded
    /// step of its own coordinator (recovery is [`Event::Recovered`]).
    pub fn may_become(self, to: Phase) -> bool {
        matches!(
            (self, to),
            (Phase::Starting, Phase::Running)
                | (Phase::Starting, Phase::Stopping)
                | (Phase::Running, Phase::Stopping)
                | (Phase::Stopping, Phase::Stopped)
        )
    }
}

/// How an Escalation Request ended, in the record (the outcome's kind,
/// without its details).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResultKind {
    Completed,
    Denied,
    TimedOut,
    Cancelled,
    Failed,
    Refused,
}

impl ResultKind {
    const ALL: [ResultKind; 6] = [
        ResultKind::Completed,
        ResultKind::Denied,
        ResultKind::TimedOut,
        ResultKind::Cancelled,
        ResultKind::Failed,
        ResultKind::Refused,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ResultKind::Completed => "completed",
            ResultKind::Denied => "denied",
            ResultKind::TimedOut => "timed-out",
            ResultKind::Cancelled => "cancelled",
            ResultKind::Failed => "failed",
            ResultKind::Refused => "refused",
        }
    }

    fn parse(s: &str) -> Option<ResultKind> {
        ResultKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl From<&crate::escalation::Outcome> for ResultKind {
    fn from(o: &crate::escalation::Outcome) -> Self {
        use crate::escalation::Outcome;
        match o {
            Outcome::Completed { .. } => ResultKind::Completed,
            Outcome::Denied { .. } => ResultKind::Denied,
            Outcome::TimedOut => ResultKind::TimedOut,
            Outcome::Cancelled => ResultKind::Cancelled,
            Outcome::Failed { .. } => ResultKind::Failed,
            Outcome::Refused { .. } => ResultKind::Refused,
        }
    }
}

/// One recorded step of the Domain lifecycle. Session and request IDs are
/// the hex forms the coordinator uses everywhere else.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// The coordinator holds the Domain lock: it owns the Domain.
    Owner,
    /// Recovery found `generation` left in `from` (not `Stopped`), killed
    /// what it recorded, removed the run directory and recorded it
    /// `Stopped`.
    Recovered { generation: u64, from: Phase },
    /// A new generation record, `Starting`, durable before anything of it
    /// exists.
    Begin { generation: u64 },
    /// The current generation's phase changed.
    Phase {
        generation: u64,
        from: Phase,
        to: Phase,
    },
    /// A Client Session was registered (its process is about to start).
    Joined { session: String },
    /// A Client Session ended and was unregistered.
    Left { session: String },
    /// An Escalation Request was accepted: one result is owed.
    Accepted { request: String, session: String },
    /// The requesting session's CLI was told to run the host command.
    HostCommand { request: String },
    /// The requesting session's CLI was told to kill the host command.
    CancelSent { request: String },
    /// The result of an accepted request was published.
    Result { request: String, kind: ResultKind },
    /// A request was refused before acceptance, with a result.
    Refused { request: String, kind: ResultKind },
    /// The coordinator gives up the Domain (it exits).
    Released,
    /// Not a step: the first line of a rotated `coordinator.log`, the
    /// record as the lines before it (in the rotations, or dropped with
    /// the oldest) left it, so that a replay can start there.
    Checkpoint(Checkpoint),
}

/// What the coordinator writes before an [`Event`] in its log line.
pub const LOG_PREFIX: &str = "lifecycle: ";

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Owner => write!(f, "owner"),
            Event::Recovered { generation, from } => {
                write!(
                    f,
                    "generation {generation} {} -> Stopped (recovered)",
                    from.name()
                )
            }
            Event::Begin { generation } => write!(f, "generation {generation} begins Starting"),
            Event::Phase {
                generation,
                from,
                to,
            } => write!(
                f,
                "generation {generation} {} -> {}",
                from.name(),
                to.name()
            ),
            Event::Joined { session } => write!(f, "session {session} joined"),
            Event::Left { session } => write!(f, "session {session} left"),
            Event::Accepted { request, session } => {
                write!(f, "escalation {request} accepted for session {session}")
            }
            Event::HostCommand { request } => write!(f, "escalation {request} host command"),
            Event::CancelSent { request } => write!(f, "escalation {request} cancel sent"),
            Event::Result { request, kind } => {
                write!(f, "escalation {request} result {}", kind.name())
            }
            Event::Refused { request, kind } => {
                write!(f, "escalation {request} refused {}", kind.name())
            }
            Event::Released => write!(f, "released"),
            Event::Checkpoint(c) => write!(f, "{c}"),
        }
    }
}

/// An ID as the log carries it: hex, bounded.
fn id(s: &str) -> Option<String> {
    (!s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| s.to_string())
}

impl Event {
    /// The event of `text` (what follows [`LOG_PREFIX`]), as
    /// [`Display`](fmt::Display) writes it.
    pub fn parse(text: &str) -> Option<Event> {
        let w: Vec<&str> = text.split(' ').collect();
        let gen = |s: &str| s.parse::<u64>().ok();
        Some(match w.as_slice() {
            ["owner"] => Event::Owner,
            ["released"] => Event::Released,
            ["generation", n, from, "->", "Stopped", "(recovered)"] => Event::Recovered {
                generation: gen(n)?,
                from: Phase::parse(from)?,
            },
            ["generation", n, "begins", "Starting"] => Event::Begin {
                generation: gen(n)?,
            },
            ["generation", n, from, "->", to] => Event::Phase {
                generation: gen(n)?,
                from: Phase::parse(from)?,
                to: Phase::parse(to)?,
            },
            ["session", s, "joined"] => Event::Joined { session: id(s)? },
            ["session", s, "left"] => Event::Left { session: id(s)? },
            ["escalation", r, "accepted", "for", "session", s] => Event::Accepted {
                request: id(r)?,
                session: id(s)?,
            },
            ["escalation", r, "host", "command"] => Event::HostCommand { request: id(r)? },
            ["escalation", r, "cancel", "sent"] => Event::CancelSent { request: id(r)? },
            ["escalation", r, "result", k] => Event::Result {
                request: id(r)?,
                kind: ResultKind::parse(k)?,
            },
            ["escalation", r, "refused", k] => Event::Refused {
                request: id(r)?,
                kind: ResultKind::parse(k)?,
            },
            ["checkpoint", rest @ ..] => Event::Checkpoint(Checkpoint::parse(rest)?),
            _ => return None,
        })
    }
}

/// The record a rotated `coordinator.log` continues from (see
/// [`crate::logs`]): what [`Recorded`] holds that a later step can act
/// on. Requests that have their result, and those of coordinators that no
/// longer own the Domain, are left out: no later step may touch them (a
/// step for one is refused as "never accepted", as it would be with the
/// whole record), and so the line stays bounded by the pending requests
/// and the sessions. Written as
/// `checkpoint owner PID|none generation N PHASE|none recover yes|no
/// sessions K ID... pending M REQUEST@SESSION[+host][+cancel]...`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Checkpoint {
    pub owner: Option<u32>,
    pub generation: Option<(u64, Phase)>,
    pub must_recover: bool,
    /// Sorted.
    pub sessions: Vec<String>,
    /// Accepted requests of the owner with no result yet, sorted by ID.
    pub pending: Vec<PendingRequest>,
}

/// An accepted request with no result yet, in a [`Checkpoint`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PendingRequest {
    pub request: String,
    pub session: String,
    pub host_command: bool,
    pub cancel_sent: bool,
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.owner {
            Some(p) => write!(f, "checkpoint owner {p}")?,
            None => write!(f, "checkpoint owner none")?,
        }
        match self.generation {
            Some((n, p)) => write!(f, " generation {n} {}", p.name())?,
            None => write!(f, " generation none")?,
        }
        let yes = if self.must_recover { "yes" } else { "no" };
        write!(f, " recover {yes} sessions {}", self.sessions.len())?;
        for s in &self.sessions {
            write!(f, " {s}")?;
        }
        write!(f, " pending {}", self.pending.len())?;
        for r in &self.pending {
            write!(f, " {}@{}", r.request, r.session)?;
            if r.host_command {
                write!(f, "+host")?;
            }
            if r.cancel_sent {
                write!(f, "+cancel")?;
            }
        }
        Ok(())
    }
}

impl Checkpoint {
    /// The words after `checkpoint`, as [`Display`](fmt::Display) writes
    /// them.
    fn parse(w: &[&str]) -> Option<Checkpoint> {
        let mut c = Checkpoint::default();
        let mut w = w.iter().copied();
        let mut next = || w.next();
        (next()? == "owner").then_some(())?;
        c.owner = match next()? {
            "none" => None,
            p => Some(p.parse().ok()?),
        };
        (next()? == "generation").then_some(())?;
        c.generation = match next()? {
            "none" => None,
            n => Some((n.parse().ok()?, Phase::parse(next()?)?)),
        };
        (next()? == "recover").then_some(())?;
        c.must_recover = match next()? {
            "yes" => true,
            "no" => false,
            _ => return None,
        };
        (next()? == "sessions").then_some(())?;
        let k: usize = next()?.parse().ok()?;
        for _ in 0..k {
            c.sessions.push(id(next()?)?);
        }
        (next()? == "pending").then_some(())?;
        let m: usize = next()?.parse().ok()?;
        for _ in 0..m {
            c.pending.push(PendingRequest::parse(next()?)?);
        }
        next().is_none().then_some(c)
    }
}

impl PendingRequest {
    fn parse(w: &str) -> Option<PendingRequest> {
        let (request, rest) = w.split_once('@')?;
        let mut flags = rest.split('+');
        let session = id(flags.next()?)?;
        let mut r = PendingRequest {
            request: id(request)?,
            session,
            ..Default::default()
        };
        for f in flags {
            match f {
                "host" if !r.host_command => r.host_command = true,
                "cancel" if r.host_command && !r.cancel_sent => r.cancel_sent = true,
                _ => return None,
            }
        }
        Some(r)
    }
}

/// One line of `coordinator.log` (`<time> lazaret-coordinator[<pid>]:
/// lifecycle: <event>`): the coordinator's PID and the event, or `None`
/// for every other line.
pub fn parse_log_line(line: &str) -> Option<(u32, Event)> {
    let (_, rest) = line.split_once(" lazaret-coordinator[")?;
    let (pid, rest) = rest.split_once("]: ")?;
    let text = rest.strip_prefix(LOG_PREFIX)?;
    Some((pid.parse().ok()?, Event::parse(text.trim_end())?))
}

/// The recorded lifecycle steps of a `coordinator.log`, in order (of
/// its files, oldest first, concatenated: see [`crate::logs::files`]).
pub fn trace_of_log(log: &str) -> Vec<(u32, Event)> {
    log.lines().filter_map(parse_log_line).collect()
}

/// The checkpoint a rotated `coordinator.log` begins with: the record the
/// file `log` (which begins with its own checkpoint, or at the Domain's
/// first step) leads to. A step the lifecycle does not allow is passed
/// over here; the full replay of the files still names it.
pub fn checkpoint_of_log(log: &str) -> Checkpoint {
    let mut r = Recorded::default();
    for (by, e) in trace_of_log(log) {
        let _ = r.apply(by, &e);
    }
    r.checkpoint()
}

/// An Escalation Request as the record knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestRecord {
    /// The session it was accepted for; `None` when refused.
    pub session: Option<String>,
    pub accepted: bool,
    pub host_command: bool,
    pub cancel_sent: bool,
    /// Results published for it: never more than one.
    pub results: u8,
    /// The kind of the (first) result.
    pub kind: Option<ResultKind>,
    /// Its generation (the coordinator that accepted it).
    pub owner: u32,
}

/// A recorded step the lifecycle does not allow.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Violation {
    /// The step's position in the trace.
    pub at: usize,
    pub by: u32,
    pub event: Event,
    pub why: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {} (coordinator {}: {}): {}",
            self.at, self.by, self.event, self.why
        )
    }
}

/// The Domain as its record tells it: the Domain Store's generation
/// record, the owner, the registered sessions and the Escalation
/// Requests, advanced by [`Recorded::apply`] one recorded step at a time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Recorded {
    /// The coordinator (by PID) that holds the Domain lock.
    pub owner: Option<u32>,
    /// The Domain Store's current generation: number and phase.
    pub generation: Option<(u64, Phase)>,
    /// The owner found the generation unfinished (its coordinator crashed
    /// or gave up before its teardown): it must recover it before
    /// anything else.
    pub must_recover: bool,
    /// Registered Client Sessions of the current owner.
    pub sessions: BTreeMap<String, ()>,
    pub requests: BTreeMap<String, RequestRecord>,
}

impl Recorded {
    /// The current generation's phase, if any was ever recorded.
    pub fn phase(&self) -> Option<Phase> {
        self.generation.map(|(_, p)| p)
    }

    /// What a rotated log continues from (see [`Checkpoint`]).
    pub fn checkpoint(&self) -> Checkpoint {
        let pending = self
            .requests
            .iter()
            .filter(|(_, r)| r.accepted && r.results == 0 && Some(r.owner) == self.owner)
            .map(|(id, r)| PendingRequest {
                request: id.clone(),
                session: r.session.clone().unwrap_or_default(),
                host_command: r.host_command,
                cancel_sent: r.cancel_sent,
            })
            .collect();
        Checkpoint {
            owner: self.owner,
            generation: self.generation,
            must_recover: self.must_recover,
            sessions: self.sessions.keys().cloned().collect(),
            pending,
        }
    }

    /// The record a replay starting at `c` begins with.
    fn from_checkpoint(c: &Checkpoint) -> Recorded {
        Recorded {
            owner: c.owner,
            generation: c.generation,
            must_recover: c.must_recover,
            sessions: c.sessions.iter().map(|s| (s.clone(), ())).collect(),
            requests: c
                .pending
                .iter()
                .map(|r| {
                    let rec = RequestRecord {
                        session: Some(r.session.clone()),
                        accepted: true,
                        host_command: r.host_command,
                        cancel_sent: r.cancel_sent,
                        owner: c.owner.unwrap_or_default(),
                        ..Default::default()
                    };
                    (r.request.clone(), rec)
                })
                .collect(),
        }
    }

    /// A checkpoint: where the replay starts (nothing recorded before it),
    /// or a restatement of the record that must agree with it.
    fn at_checkpoint(&mut self, c: &Checkpoint) -> Result<(), &'static str> {
        if *self == Recorded::default() {
            *self = Recorded::from_checkpoint(c);
            return Ok(());
        }
        if self.checkpoint() != *c {
            return Err("a checkpoint that does not match the record before it");
        }
        Ok(())
    }

    /// Applies the step `event` of coordinator `by`, or says why the
    /// lifecycle does not allow it (the record is then unchanged: every
    /// step checks before it changes anything, so a long trace replays
    /// without a copy of the record per step).
    pub fn apply(&mut self, by: u32, event: &Event) -> Result<(), &'static str> {
        match event {
            Event::Owner => self.take_over(by),
            Event::Checkpoint(c) => self.at_checkpoint(c),
            _ => self.step(by, event),
        }
    }

    fn step(&mut self, by: u32, event: &Event) -> Result<(), &'static str> {
        if self.owner != Some(by) {
            return Err("recorded by a coordinator that does not own the Domain");
        }
        if self.must_recover && !matches!(event, Event::Recovered { .. }) {
            return Err("a new owner acted before recovering the unfinished generation");
        }
        match event {
            Event::Owner | Event::Checkpoint(_) => {
                return Err("not a step of the owner");
            }
            Event::Recovered { generation, from } => self.recover(*generation, *from)?,
            Event::Begin { generation } => self.begin(*generation)?,
            Event::Phase {
                generation,
                from,
                to,
            } => self.change_phase(*generation, *from, *to)?,
            Event::Joined { session } => self.join(session)?,
            Event::Left { session } => {
                if self.sessions.remove(session).is_none() {
                    return Err("a session that had not joined left");
                }
            }
            Event::Accepted { request, session } => self.accept(by, request, session)?,
            Event::Refused { request, kind } => self.refuse(by, request, *kind)?,
            Event::HostCommand { request } => {
                let r = self.pending(request, by)?;
                if r.host_command {
                    return Err("a host command was started twice for one request");
                }
                r.host_command = true;
            }
            Event::CancelSent { request } => {
                let r = self.pending(request, by)?;
                if !r.host_command {
                    return Err("a cancellation was sent for a host command never started");
                }
                r.cancel_sent = true;
            }
            Event::Result { request, kind } => {
                let r = self.pending(request, by)?;
                r.results += 1;
                r.kind = Some(*kind);
            }
            // A coordinator that gives up on an error path before its
            // teardown leaves the generation unfinished, as a crash does:
            // the next owner recovers it.
            Event::Released => {
                self.owner = None;
                self.sessions.clear();
            }
        }
        Ok(())
    }

    fn recover(&mut self, generation: u64, from: Phase) -> Result<(), &'static str> {
        match self.generation {
            Some((n, p)) if n == generation && p == from && p != Phase::Stopped => {
                self.generation = Some((n, Phase::Stopped));
                self.must_recover = false;
                Ok(())
            }
            _ => Err("recovered a generation that is not the unfinished one"),
        }
    }

    fn begin(&mut self, generation: u64) -> Result<(), &'static str> {
        let expected = match self.generation {
            None => 1,
            Some((n, Phase::Stopped)) => n + 1,
            Some(_) => return Err("a generation began before the last one stopped"),
        };
        if generation != expected {
            return Err("generations are numbered one after the other");
        }
        self.generation = Some((expected, Phase::Starting));
        Ok(())
    }

    fn change_phase(
        &mut self,
        generation: u64,
        from: Phase,
        to: Phase,
    ) -> Result<(), &'static str> {
        match self.generation {
            Some((n, p)) if n == generation && p == from && from.may_become(to) => {
                self.generation = Some((n, to));
                Ok(())
            }
            _ => Err("not a phase transition of the current generation"),
        }
    }

    fn join(&mut self, session: &str) -> Result<(), &'static str> {
        if self.phase() != Some(Phase::Running) {
            return Err("a session joined a generation that is not running");
        }
        if self.sessions.contains_key(session) {
            return Err("a session joined twice");
        }
        self.sessions.insert(session.to_string(), ());
        Ok(())
    }

    fn accept(&mut self, by: u32, request: &str, session: &str) -> Result<(), &'static str> {
        // The session may have ended since the coordinator looked
        // it up: the request is then resolved as cancelled.
        if !matches!(self.phase(), Some(Phase::Running | Phase::Stopping)) {
            return Err("a request was accepted outside a running generation");
        }
        if self.requests.contains_key(request) {
            return Err("a request ID was accepted twice (replay)");
        }
        self.requests.insert(
            request.to_string(),
            RequestRecord {
                session: Some(session.to_string()),
                accepted: true,
                owner: by,
                ..Default::default()
            },
        );
        Ok(())
    }

    fn refuse(&mut self, by: u32, request: &str, kind: ResultKind) -> Result<(), &'static str> {
        if self.requests.contains_key(request) {
            return Err("a second result for one Escalation Request ID");
        }
        self.requests.insert(
            request.to_string(),
            RequestRecord {
                results: 1,
                kind: Some(kind),
                owner: by,
                ..Default::default()
            },
        );
        Ok(())
    }

    /// A new owner. One that never released is gone (it crashed: the
    /// Domain lock is the kernel's and outlives no process): its sessions
    /// are disconnected. An unfinished generation must be recovered.
    fn take_over(&mut self, by: u32) -> Result<(), &'static str> {
        if self.owner == Some(by) {
            return Err("the owner took the Domain lock twice");
        }
        if self.owner.is_some() {
            self.sessions.clear();
        }
        self.owner = Some(by);
        self.must_recover = matches!(
            self.phase(),
            Some(Phase::Starting | Phase::Running | Phase::Stopping)
        );
        Ok(())
    }

    /// An accepted request of this owner with no result yet.
    fn pending(&mut self, request: &str, by: u32) -> Result<&mut RequestRecord, &'static str> {
        match self.requests.get_mut(request) {
            Some(r) if r.accepted && r.owner == by && r.results == 0 => Ok(r),
            Some(r) if r.results > 0 => Err("a step of a request after its result"),
            _ => Err("a step of a request this owner never accepted"),
        }
    }
}

/// Replays a recorded trace from the empty Domain; the record it leads
/// to, or the first step the lifecycle does not allow.
pub fn replay(trace: &[(u32, Event)]) -> Result<Recorded, Violation> {
    let mut r = Recorded::default();
    for (at, (by, e)) in trace.iter().enumerate() {
        r.apply(*by, e).map_err(|why| Violation {
            at,
            by: *by,
            event: e.clone(),
            why,
        })?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_event() -> Vec<Event> {
        let (r, s) = ("00ff".to_string(), "ab12".to_string());
        let mut v = vec![
            Event::Owner,
            Event::Released,
            Event::Begin { generation: 7 },
            Event::Joined { session: s.clone() },
            Event::Left { session: s.clone() },
            Event::Accepted {
                request: r.clone(),
                session: s.clone(),
            },
            Event::HostCommand { request: r.clone() },
            Event::CancelSent { request: r.clone() },
            Event::Checkpoint(Checkpoint::default()),
            Event::Checkpoint(Checkpoint {
                owner: Some(42),
                generation: Some((3, Phase::Running)),
                must_recover: true,
                sessions: vec![s.clone(), "cd34".into()],
                pending: vec![
                    PendingRequest {
                        request: r.clone(),
                        session: s.clone(),
                        host_command: false,
                        cancel_sent: false,
                    },
                    PendingRequest {
                        request: "0a".into(),
                        session: s.clone(),
                        host_command: true,
                        cancel_sent: true,
                    },
                ],
            }),
        ];
        for p in Phase::ALL {
            v.push(Event::Recovered {
                generation: 3,
                from: p,
            });
            for q in Phase::ALL {
                v.push(Event::Phase {
                    generation: 12,
                    from: p,
                    to: q,
                });
            }
        }
        for k in ResultKind::ALL {
            v.push(Event::Result {
                request: r.clone(),
                kind: k,
            });
            v.push(Event::Refused {
                request: r.clone(),
                kind: k,
            });
        }
        v
    }

    #[test]
    fn every_event_reads_back_as_written() {
        for e in every_event() {
            assert_eq!(Event::parse(&e.to_string()), Some(e.clone()), "{e}");
        }
        let line = format!(
            "2026-12-01T10:18:39.123Z lazaret-coordinator[4242]: {LOG_PREFIX}{}",
            Event::Begin { generation: 2 }
        );
        assert_eq!(
            parse_log_line(&line),
            Some((4242, Event::Begin { generation: 2 }))
        );
        for other in [
            "2026-12-01T10:18:39.123Z lazaret-coordinator[1]: asked to stop",
            "2026-12-01T10:18:39.123Z lazaret-coordinator[1]: lifecycle: generation x Starting -> Running",
            "2026-12-01T10:18:39.123Z lazaret-coordinator[1]: lifecycle: session ../x joined",
            "lifecycle: owner",
        ] {
            assert_eq!(parse_log_line(other), None, "{other}");
        }
    }

    type Trace = Vec<(u32, Event)>;

    fn run(trace: &[(u32, Event)]) -> Result<Recorded, Violation> {
        replay(trace)
    }

    fn phase(generation: u64, from: Phase, to: Phase) -> Event {
        Event::Phase {
            generation,
            from,
            to,
        }
    }

    /// Start, one session with an escalation, stop; a crash, recovery and
    /// a second generation.
    fn good() -> Vec<(u32, Event)> {
        use Phase::*;
        let (s, r) = ("aa".to_string(), "01".to_string());
        vec![
            (10, Event::Owner),
            (10, Event::Begin { generation: 1 }),
            (10, phase(1, Starting, Running)),
            (10, Event::Joined { session: s.clone() }),
            (
                10,
                Event::Accepted {
                    request: r.clone(),
                    session: s.clone(),
                },
            ),
            (10, Event::HostCommand { request: r.clone() }),
            (
                10,
                Event::Result {
                    request: r,
                    kind: ResultKind::Completed,
                },
            ),
            (10, Event::Left { session: s.clone() }),
            (10, phase(1, Running, Stopping)),
            (10, phase(1, Stopping, Stopped)),
            (10, Event::Released),
            (11, Event::Owner),
            (11, Event::Begin { generation: 2 }),
            (11, phase(2, Starting, Running)),
            (11, Event::Joined { session: s }),
            // Coordinator 11 crashes; 12 takes over.
            (12, Event::Owner),
            (
                12,
                Event::Recovered {
                    generation: 2,
                    from: Running,
                },
            ),
            (12, Event::Begin { generation: 3 }),
        ]
    }

    #[test]
    fn a_lifecycle_with_a_crash_replays() {
        let r = run(&good()).unwrap();
        assert_eq!(r.generation, Some((3, Phase::Starting)));
        assert_eq!(r.owner, Some(12));
        assert!(r.sessions.is_empty(), "the crashed owner's sessions ended");
    }

    #[test]
    fn steps_the_lifecycle_does_not_allow_are_named() {
        use Phase::*;
        let bad = |edit: &dyn Fn(&mut Trace), why: &str| {
            let mut t = good();
            edit(&mut t);
            let v = run(&t).expect_err(why);
            assert_eq!(v.why, why, "{v}");
        };
        bad(
            &|t| {
                t.insert(
                    3,
                    (
                        99,
                        Event::Joined {
                            session: "bb".into(),
                        },
                    ),
                )
            },
            "recorded by a coordinator that does not own the Domain",
        );
        bad(
            &|t| {
                t.remove(16);
            },
            "a new owner acted before recovering the unfinished generation",
        );
        bad(
            &|t| t[2] = (10, phase(1, Starting, Stopped)),
            "not a phase transition of the current generation",
        );
        bad(
            &|t| {
                t.insert(
                    7,
                    (
                        10,
                        Event::Result {
                            request: "01".into(),
                            kind: ResultKind::Cancelled,
                        },
                    ),
                )
            },
            "a step of a request after its result",
        );
        bad(
            &|t| {
                t.insert(
                    7,
                    (
                        10,
                        Event::Refused {
                            request: "01".into(),
                            kind: ResultKind::Denied,
                        },
                    ),
                )
            },
            "a second result for one Escalation Request ID",
        );
        bad(
            &|t| t[12] = (11, Event::Begin { generation: 3 }),
            "generations are numbered one after the other",
        );
        bad(
            &|t| {
                t.insert(
                    2,
                    (
                        10,
                        Event::Joined {
                            session: "cc".into(),
                        },
                    ),
                )
            },
            "a session joined a generation that is not running",
        );
        bad(
            &|t| t.insert(9, (10, Event::Released)),
            "recorded by a coordinator that does not own the Domain",
        );
        bad(
            &|t| {
                t.insert(
                    5,
                    (
                        10,
                        Event::CancelSent {
                            request: "01".into(),
                        },
                    ),
                )
            },
            "a cancellation was sent for a host command never started",
        );
    }

    /// The log lines of `trace`, as the coordinator writes them.
    fn lines(trace: &[(u32, Event)]) -> Vec<String> {
        trace
            .iter()
            .map(|(pid, e)| {
                format!("2026-12-01T10:18:39.123Z lazaret-coordinator[{pid}]: {LOG_PREFIX}{e}")
            })
            .collect()
    }

    /// A log rotated after `k` of its lines: the rotated file, and the
    /// new one beginning with the checkpoint of the rotated one.
    fn rotated_at(all: &[String], k: usize) -> (String, String) {
        let old: String = all[..k].iter().map(|l| format!("{l}\n")).collect();
        let c = checkpoint_of_log(&old);
        let mut new = format!(
            "2026-12-01T10:18:40Z lazaret-coordinator[7]: {LOG_PREFIX}{}\n",
            Event::Checkpoint(c)
        );
        for l in &all[k..] {
            new.push_str(l);
            new.push('\n');
        }
        (old, new)
    }

    #[test]
    fn a_replay_continues_from_a_checkpoint_wherever_the_log_was_rotated() {
        let good = good();
        let all = lines(&good);
        let whole = run(&good).unwrap();
        for k in 0..=all.len() {
            let (old, new) = rotated_at(&all, k);
            // From the new file alone (the old one dropped) ...
            let from_new = replay(&trace_of_log(&new)).unwrap_or_else(|v| panic!("at {k}: {v}"));
            assert_eq!(from_new.checkpoint(), whole.checkpoint(), "at {k}");
            // ... and across both files, the checkpoint agreeing.
            let both =
                replay(&trace_of_log(&(old + &new))).unwrap_or_else(|v| panic!("at {k}: {v}"));
            assert_eq!(both, whole, "at {k}");
        }
    }

    #[test]
    fn after_a_checkpoint_the_lifecycle_is_still_checked() {
        use Phase::*;
        let good = good();
        let all = lines(&good);
        // Rotated after the request's result: a second one is refused.
        let mut t = good[..7].to_vec();
        t.push((
            10,
            Event::Result {
                request: "01".into(),
                kind: ResultKind::Denied,
            },
        ));
        let (_, new) = rotated_at(&lines(&t), 7);
        let v = replay(&trace_of_log(&new)).unwrap_err();
        assert_eq!(v.why, "a step of a request this owner never accepted");
        // Rotated while the request is pending: its steps go on.
        let (_, new) = rotated_at(&all, 5);
        let r = replay(&trace_of_log(&new)).unwrap();
        assert_eq!(r.generation, Some((3, Starting)));
        // A checkpoint that disagrees with the record before it.
        let (old, new) = rotated_at(&all, 9);
        let forged = new.replacen("recover no", "recover yes", 1);
        let v = replay(&trace_of_log(&(old + &forged))).unwrap_err();
        assert_eq!(
            v.why,
            "a checkpoint that does not match the record before it"
        );
        // The owner must still recover after a crash across a rotation.
        let mut t = good.clone();
        t.remove(16);
        let all = lines(&t);
        let (_, new) = rotated_at(&all, 16);
        let v = replay(&trace_of_log(&new)).unwrap_err();
        assert_eq!(
            v.why,
            "a new owner acted before recovering the unfinished generation"
        );
    }

    #[test]
    fn a_checkpoint_holds_only_what_later_steps_can_touch() {
        let good = good();
        // After the first generation's result and release: nothing pending.
        let r = run(&good[..11]).unwrap();
        let c = r.checkpoint();
        assert_eq!(c.owner, None);
        assert!(c.pending.is_empty() && c.sessions.is_empty(), "{c}");
        // While the request is pending: it and its session.
        let c = run(&good[..6]).unwrap().checkpoint();
        assert_eq!(c.to_string(), "checkpoint owner 10 generation 1 Running recover no sessions 1 aa pending 1 01@aa+host");
        for bad in [
            "checkpoint owner 1 generation 1 Running recover maybe sessions 0 pending 0",
            "checkpoint owner 1 generation 1 Running recover no sessions 2 aa pending 0",
            "checkpoint owner 1 generation 1 Running recover no sessions 0 pending 1 01@aa+cancel",
            "checkpoint owner 1 generation 1 Running recover no sessions 0 pending 0 extra",
            "checkpoint owner x generation none recover no sessions 0 pending 0",
        ] {
            assert_eq!(Event::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_step_the_lifecycle_refuses_leaves_the_record_unchanged() {
        let good = good();
        for k in 0..good.len() {
            let before = run(&good[..k]).unwrap();
            for e in every_event() {
                for by in [10, 11, 12, 99] {
                    let mut r = before.clone();
                    if r.apply(by, &e).is_err() {
                        assert_eq!(r, before, "{e} by {by} after {k} steps");
                    }
                }
            }
        }
    }
}
