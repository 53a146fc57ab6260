//! The Domain lifecycle, checked exhaustively with `stateright`.
//!
//! The model is the coordinator's lifecycle as `bin/coordinator/src/lifecycle.rs`,
//! `bin/coordinator/src/session.rs`, `bin/coordinator/src/escalation.rs`,
//! `bin/cli/src/run.rs`, `bin/cli/src/leader.rs` and `bin/cli/src/host_command.rs` make
//! it, one action per step that another process could observe or that a
//! crash could interrupt:
//!
//! - CLIs: a CLI that finds no serving coordinator becomes the start-up
//!   leader (`startup.lock`), spawns a coordinator, waits for its
//!   readiness and joins; another joins the serving one; a session leaves
//!   (its CLI kills its host commands as it ends).
//! - Coordinators: wait for the Domain lock; recover (kill what the
//!   unfinished generation recorded, remove the run directory, record it
//!   `Stopped`); release stale image leases; record the new generation
//!   `Starting`; take its lease; create the run directory and start the
//!   supervisor, which starts the sandbox holder or fails; record
//!   `Running` (with both processes) and serve; when no session is left,
//!   the first session's grace ended, or `lazaret stop` asks, stop serving
//!   and tear down (`Stopping`, stop the sandbox, remove the run directory,
//!   release the lease, `Stopped`) and exit. A coordinator may crash at any
//!   of these points.
//! - Host Escalation: a session's process writes a request; the mailbox
//!   reader hands it to the coordinator, which accepts it (or denies it
//!   with a result when its session ended); the request is approved (the
//!   CLI runs the host command) or denied, cancelled by the sandbox or by
//!   its session's end; the command exits or is killed; one result is
//!   published.
//!
//! Every step the coordinator records goes through
//! [`lazaret_protocol::lifecycle::Recorded::apply`], the same function that
//! replays a real Domain's `coordinator.log` (`tools/tests/tests/model_traces.rs`
//! in `lazaret-tests`), and the model's Domain Store generation *is* the
//! record's, with the store's own `Phase` type.
//!
//! Bounds: 2 CLIs, each running one session at most; 3 coordinator
//! starts (so 3 generations); 1 crash of a coordinator, at any point;
//! 1 `lazaret stop`; 1 Escalation Request per session (2 in all).
//!
//! Assumption (what the code relies on and the model states, see
//! `Fault::NoPdeathsig`): a child the coordinator has not yet recorded in
//! the Domain Store dies with it (`PR_SET_PDEATHSIG`, set before exec, on
//! the supervisor and, by the supervisor, on the holder); a recorded one
//! may outlive a crash (FR-7: recovery does not assume it is gone).
//!
//! Run: `cargo test -p lazaret-protocol --test lifecycle_model`.

use lazaret_protocol::lifecycle::{Event, Phase, Recorded, ResultKind};
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::time::Instant;

const CLIS: usize = 2;
const COORDINATORS: usize = 2;
const CRASHES: u8 = 1;

/// A deliberately broken variant, to show that the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Recovery does not kill the stale sandbox holder.
    RecoverySkipsKill,
    /// A request whose host command completed is resolved again when it is
    /// cancelled afterwards.
    ResultTwice,
    /// A CLI that ends its session leaves its host commands running.
    LeaveKeepsCommands,
    /// A coordinator acts without waiting for the Domain lock.
    NoDomainLock,
    /// No `PR_SET_PDEATHSIG`: any child may outlive a crashed coordinator,
    /// even before the Domain Store records it.
    NoPdeathsig,
}

struct Lifecycle {
    fault: Option<Fault>,
    /// Coordinator starts (generations).
    coordinators: usize,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Cli {
    Idle,
    /// Holds `startup.lock`; started coordinator `k`, waits for it.
    Leading(u8),
    /// A Client Session of coordinator `k`.
    Connected(u8),
    Done,
}

/// A coordinator's position: the step it takes next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Step {
    WaitLock,
    Recover,
    ReleaseStale,
    Begin,
    Lease,
    Spawn,
    /// The supervisor runs; it starts the holder or fails.
    Starting,
    /// The holder runs; `Running` is recorded next.
    HolderUp,
    /// The supervisor failed; teardown next.
    Failed,
    Serving,
    /// Stopped serving (socket removed, reader stopped, sessions' exec
    /// bridges killed); `Stopping` is recorded next.
    Draining,
    /// `Stopping` recorded: stop the sandbox, remove the run directory and
    /// release the lease next.
    StopSandbox,
    /// Record `Stopped` and exit next.
    RecordStopped,
    Exited,
    Crashed,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Coordinator {
    step: Step,
    /// Its generation, once recorded.
    gen: u8,
    /// It reached `Serving` (readiness was reported).
    ready: bool,
}

impl Coordinator {
    fn alive(&self) -> bool {
        !matches!(self.step, Step::Exited | Step::Crashed)
    }

    /// Holds the Domain lock (past `WaitLock`, not gone).
    fn owns(&self) -> bool {
        self.alive() && self.step != Step::WaitLock
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Cmd {
    NotStarted,
    Running,
    Exited,
}

/// The Escalation Request of CLI `i`'s session.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Request {
    /// Written into the mailbox by a process of the session, in
    /// coordinator `coord`'s generation.
    written: bool,
    coord: u8,
    accepted: bool,
    /// Its resolving thread lives.
    resolving: bool,
    /// The CLI was told to run the host command.
    told: bool,
    cmd: Cmd,
    /// The command's outcome reached the resolving thread.
    outcome: bool,
    /// Cancelled by the sandbox, or its session ended (`stop()`).
    stop: bool,
    cancel_sent: bool,
    results: u8,
}

impl Request {
    const NONE: Request = Request {
        written: false,
        coord: 0,
        accepted: false,
        resolving: false,
        told: false,
        cmd: Cmd::NotStarted,
        outcome: false,
        stop: false,
        cancel_sent: false,
        results: 0,
    };
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    clis: [Cli; CLIS],
    coords: Vec<Coordinator>,
    /// Holds the Domain lock.
    owner: Option<u8>,
    /// Holds `startup.lock`.
    startup: Option<u8>,
    /// The Domain Store's generation record and the recorded steps.
    rec: Recorded,
    /// A recorded step `Recorded::apply` refused.
    refused: Option<&'static str>,
    /// Transient resources, by the generation that made them.
    supervisor: Option<u8>,
    holder: Option<u8>,
    run_dir: Option<u8>,
    /// Image leases, one bit per generation.
    leases: u8,
    reqs: [Request; CLIS],
    crashes: u8,
    /// `lazaret stop` was used (once).
    stopped_by_command: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Action {
    Lead(u8),
    LeaderSees(u8),
    Join(u8),
    Leave(u8),
    Lock(u8),
    Recover(u8),
    ReleaseStale(u8),
    Begin(u8),
    Lease(u8),
    Spawn(u8),
    HolderStarts(u8),
    StartFails(u8),
    Ready(u8),
    /// `lazaret stop`: the serve loop ends.
    StopCommand(u8),
    Quit(u8),
    RecordStopping(u8),
    StopSandbox(u8),
    RecordStopped(u8),
    /// Coordinator `k` crashes; the recorded children outlive it or not.
    Crash(u8, bool),
    Write(u8),
    Accept(u8),
    /// Accepted although its session ended since the lookup.
    AcceptLate(u8),
    DenyEndedSession(u8),
    Cancel(u8),
    Approve(u8),
    Deny(u8),
    Withdraw(u8),
    CommandExits(u8),
    Complete(u8),
    SendCancel(u8),
    KillOnCancel(u8),
    CancelDone(u8),
}

fn pid(k: u8) -> u32 {
    k as u32 + 1
}

fn session(i: u8) -> String {
    format!("a{i}")
}

fn request(i: u8) -> String {
    format!("b{i}")
}

impl State {
    fn record(&mut self, k: u8, e: Event) {
        if let Err(why) = self.rec.apply(pid(k), &e) {
            self.refused.get_or_insert(why);
        }
    }

    fn store_gen(&self) -> Option<(u8, Phase)> {
        self.rec.generation.map(|(n, p)| (n as u8, p))
    }

    /// Whether generation `g`'s processes are in the Domain Store (from
    /// `Running` until teardown records `Stopped`).
    fn recorded(&self, g: u8) -> bool {
        matches!(self.store_gen(), Some((n, Phase::Running | Phase::Stopping)) if n == g)
    }

    fn serving(&self) -> Option<u8> {
        (0..self.coords.len() as u8).find(|&k| self.coords[k as usize].step == Step::Serving)
    }

    /// CLI `i`'s session is connected to a live coordinator.
    fn live_session(&self, i: u8) -> Option<u8> {
        match self.clis[i as usize] {
            Cli::Connected(k) if self.coords[k as usize].alive() => Some(k),
            _ => None,
        }
    }

    fn sessions_of(&self, k: u8) -> usize {
        self.clis
            .iter()
            .filter(|c| **c == Cli::Connected(k))
            .count()
    }

    fn coordinator_gone(&mut self, k: u8) {
        if self.owner == Some(k) {
            self.owner = None;
        }
        for r in self.reqs.iter_mut() {
            if r.coord == k {
                r.resolving = false;
            }
        }
    }

    fn publish(&mut self, i: u8, kind: ResultKind) {
        let r = &mut self.reqs[i as usize];
        r.results += 1;
        r.resolving = false;
        let k = r.coord;
        self.record(
            k,
            Event::Result {
                request: request(i),
                kind,
            },
        );
    }
}

impl Model for Lifecycle {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            clis: [Cli::Idle; CLIS],
            coords: Vec::new(),
            owner: None,
            startup: None,
            rec: Recorded::default(),
            refused: None,
            supervisor: None,
            holder: None,
            run_dir: None,
            leases: 0,
            reqs: [Request::NONE; CLIS],
            crashes: 0,
            stopped_by_command: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for i in 0..CLIS as u8 {
            match s.clis[i as usize] {
                Cli::Idle => match s.serving() {
                    Some(_) => out.push(Action::Join(i)),
                    None if s.startup.is_none() && s.coords.len() < self.coordinators => {
                        out.push(Action::Lead(i))
                    }
                    None => {}
                },
                Cli::Leading(k) => {
                    let c = &s.coords[k as usize];
                    if c.ready || !c.alive() || matches!(c.step, Step::Failed | Step::StopSandbox) {
                        out.push(Action::LeaderSees(i));
                    }
                }
                Cli::Connected(_) => out.push(Action::Leave(i)),
                Cli::Done => {}
            }
        }
        for k in 0..s.coords.len() as u8 {
            let c = &s.coords[k as usize];
            let a = match c.step {
                Step::WaitLock if s.owner.is_none() || self.fault == Some(Fault::NoDomainLock) => {
                    Some(Action::Lock(k))
                }
                Step::WaitLock => None,
                Step::Recover => Some(Action::Recover(k)),
                Step::ReleaseStale => Some(Action::ReleaseStale(k)),
                Step::Begin => Some(Action::Begin(k)),
                Step::Lease => Some(Action::Lease(k)),
                Step::Spawn => Some(Action::Spawn(k)),
                Step::Starting => {
                    out.push(Action::StartFails(k));
                    Some(Action::HolderStarts(k))
                }
                Step::HolderUp => Some(Action::Ready(k)),
                Step::Serving => {
                    if !s.stopped_by_command {
                        out.push(Action::StopCommand(k));
                    }
                    // No session left (or none came within the first
                    // session's grace).
                    (s.sessions_of(k) == 0).then_some(Action::Quit(k))
                }
                Step::Failed | Step::Draining => Some(Action::RecordStopping(k)),
                Step::StopSandbox => Some(Action::StopSandbox(k)),
                Step::RecordStopped => Some(Action::RecordStopped(k)),
                Step::Exited | Step::Crashed => None,
            };
            out.extend(a);
            if c.owns() && s.crashes < CRASHES {
                out.push(Action::Crash(k, false));
                out.push(Action::Crash(k, true));
            }
        }
        for i in 0..CLIS as u8 {
            let r = &s.reqs[i as usize];
            let live = s.live_session(i);
            if !r.written {
                // A process of the session, in a running sandbox.
                if let Some(k) = live {
                    if s.holder == Some(s.coords[k as usize].gen) {
                        out.push(Action::Write(i));
                    }
                }
                continue;
            }
            let c = &s.coords[r.coord as usize];
            // The mailbox reader runs while the coordinator serves.
            if !r.accepted && r.results == 0 && c.step == Step::Serving {
                if live == Some(r.coord) {
                    out.push(Action::Accept(i));
                } else {
                    out.push(Action::AcceptLate(i));
                    out.push(Action::DenyEndedSession(i));
                }
            }
            if !r.stop && live == Some(r.coord) && c.step == Step::Serving {
                out.push(Action::Cancel(i));
            }
            if r.cmd == Cmd::Running {
                out.push(Action::CommandExits(i));
                if r.cancel_sent && live.is_some() {
                    out.push(Action::KillOnCancel(i));
                }
            }
            if !r.resolving {
                continue;
            }
            if !r.told {
                if live == Some(r.coord) {
                    out.push(Action::Approve(i));
                    out.push(Action::Deny(i));
                }
                if r.stop {
                    out.push(Action::Withdraw(i));
                }
            } else if r.cancel_sent {
                out.push(Action::CancelDone(i));
            } else {
                if r.outcome {
                    out.push(Action::Complete(i));
                }
                if r.stop {
                    out.push(Action::SendCancel(i));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Lead(i) => {
                let k = s.coords.len() as u8;
                s.coords.push(Coordinator {
                    step: Step::WaitLock,
                    gen: 0,
                    ready: false,
                });
                s.startup = Some(i);
                s.clis[i as usize] = Cli::Leading(k);
            }
            Action::LeaderSees(i) => {
                let Cli::Leading(k) = s.clis[i as usize] else {
                    unreachable!()
                };
                s.startup = None;
                // Ready: it joins (or leads again when the Domain stopped
                // meanwhile); otherwise the start failed.
                s.clis[i as usize] = if s.coords[k as usize].ready {
                    Cli::Idle
                } else {
                    Cli::Done
                };
            }
            Action::Join(i) => {
                let k = s.serving()?;
                s.clis[i as usize] = Cli::Connected(k);
                s.record(
                    k,
                    Event::Joined {
                        session: session(i),
                    },
                );
            }
            Action::Leave(i) => {
                let live = s.live_session(i);
                s.clis[i as usize] = Cli::Done;
                let r = &mut s.reqs[i as usize];
                if self.fault != Some(Fault::LeaveKeepsCommands) && r.cmd == Cmd::Running {
                    r.cmd = Cmd::Exited;
                }
                if let Some(k) = live {
                    // Unregistered: its requests end.
                    if r.coord == k {
                        r.stop = true;
                    }
                    s.record(
                        k,
                        Event::Left {
                            session: session(i),
                        },
                    );
                }
            }
            Action::Lock(k) => {
                s.owner = Some(k);
                s.coords[k as usize].step = Step::Recover;
                s.record(k, Event::Owner);
            }
            Action::Recover(k) => {
                if let Some((n, from)) = s.store_gen().filter(|(_, p)| *p != Phase::Stopped) {
                    // What the generation recorded, by (pid, start time).
                    if s.recorded(n) {
                        if s.holder == Some(n) && self.fault != Some(Fault::RecoverySkipsKill) {
                            s.holder = None;
                        }
                        if s.supervisor == Some(n) {
                            s.supervisor = None;
                        }
                    }
                    s.run_dir = None;
                    s.record(
                        k,
                        Event::Recovered {
                            generation: n as u64,
                            from,
                        },
                    );
                } else {
                    s.run_dir = None;
                }
                s.coords[k as usize].step = Step::ReleaseStale;
            }
            Action::ReleaseStale(k) => {
                s.leases = 0;
                s.coords[k as usize].step = Step::Begin;
            }
            Action::Begin(k) => {
                let n = s.store_gen().map(|(n, _)| n + 1).unwrap_or(1);
                s.coords[k as usize].gen = n;
                s.coords[k as usize].step = Step::Lease;
                s.record(
                    k,
                    Event::Begin {
                        generation: n as u64,
                    },
                );
            }
            Action::Lease(k) => {
                s.leases |= 1 << s.coords[k as usize].gen;
                s.coords[k as usize].step = Step::Spawn;
            }
            Action::Spawn(k) => {
                let g = s.coords[k as usize].gen;
                s.run_dir = Some(g);
                s.supervisor = Some(g);
                s.coords[k as usize].step = Step::Starting;
            }
            Action::HolderStarts(k) => {
                s.holder = Some(s.coords[k as usize].gen);
                s.coords[k as usize].step = Step::HolderUp;
            }
            Action::StartFails(k) => {
                // The supervisor reports the failure and exits.
                s.supervisor = None;
                s.coords[k as usize].step = Step::Failed;
            }
            Action::Ready(k) => {
                let g = s.coords[k as usize].gen;
                s.record(
                    k,
                    Event::Phase {
                        generation: g as u64,
                        from: Phase::Starting,
                        to: Phase::Running,
                    },
                );
                let c = &mut s.coords[k as usize];
                c.step = Step::Serving;
                c.ready = true;
            }
            Action::StopCommand(k) | Action::Quit(k) => {
                s.stopped_by_command |= matches!(action, Action::StopCommand(_));
                s.coords[k as usize].step = Step::Draining;
            }
            Action::RecordStopping(k) => {
                let c = s.coords[k as usize];
                let from = if c.step == Step::Failed {
                    Phase::Starting
                } else {
                    Phase::Running
                };
                s.record(
                    k,
                    Event::Phase {
                        generation: c.gen as u64,
                        from,
                        to: Phase::Stopping,
                    },
                );
                s.coords[k as usize].step = Step::StopSandbox;
            }
            Action::StopSandbox(k) => {
                let g = s.coords[k as usize].gen;
                // Through the supervisor, which stops the holder; the run
                // directory goes, then the lease.
                for p in [&mut s.holder, &mut s.supervisor, &mut s.run_dir] {
                    if *p == Some(g) {
                        *p = None;
                    }
                }
                s.leases &= !(1 << g);
                s.coords[k as usize].step = Step::RecordStopped;
            }
            Action::RecordStopped(k) => {
                let g = s.coords[k as usize].gen;
                s.record(
                    k,
                    Event::Phase {
                        generation: g as u64,
                        from: Phase::Stopping,
                        to: Phase::Stopped,
                    },
                );
                s.record(k, Event::Released);
                s.coords[k as usize].step = Step::Exited;
                s.coordinator_gone(k);
            }
            Action::Crash(k, outlive) => {
                s.crashes += 1;
                let g = s.coords[k as usize].gen;
                s.coords[k as usize].step = Step::Crashed;
                s.coordinator_gone(k);
                // Its children die with it unless they outlive it.
                let may_outlive =
                    outlive && (s.recorded(g) || self.fault == Some(Fault::NoPdeathsig));
                if !may_outlive {
                    for p in [&mut s.holder, &mut s.supervisor] {
                        if *p == Some(g) {
                            *p = None;
                        }
                    }
                }
                if outlive && !may_outlive {
                    // The same as `Crash(k, false)`.
                    return None;
                }
            }
            Action::Write(i) => {
                let k = s.live_session(i)?;
                let r = &mut s.reqs[i as usize];
                r.written = true;
                r.coord = k;
            }
            Action::Accept(i) | Action::AcceptLate(i) => {
                let k = s.reqs[i as usize].coord;
                let r = &mut s.reqs[i as usize];
                r.accepted = true;
                r.resolving = true;
                if matches!(action, Action::AcceptLate(_)) {
                    r.stop = true;
                }
                s.record(
                    k,
                    Event::Accepted {
                        request: request(i),
                        session: session(i),
                    },
                );
            }
            Action::DenyEndedSession(i) => {
                let k = s.reqs[i as usize].coord;
                s.reqs[i as usize].results += 1;
                s.record(
                    k,
                    Event::Refused {
                        request: request(i),
                        kind: ResultKind::Denied,
                    },
                );
            }
            Action::Cancel(i) => s.reqs[i as usize].stop = true,
            Action::Approve(i) => {
                let r = &mut s.reqs[i as usize];
                r.told = true;
                r.cmd = Cmd::Running;
                let k = r.coord;
                s.record(
                    k,
                    Event::HostCommand {
                        request: request(i),
                    },
                );
            }
            Action::Deny(i) => s.publish(i, ResultKind::Denied),
            Action::Withdraw(i) => s.publish(i, ResultKind::Cancelled),
            Action::CommandExits(i) => {
                let live = s.live_session(i);
                let r = &mut s.reqs[i as usize];
                r.cmd = Cmd::Exited;
                r.outcome = live == Some(r.coord);
            }
            Action::Complete(i) => {
                s.publish(i, ResultKind::Completed);
                if self.fault == Some(Fault::ResultTwice) {
                    let r = &mut s.reqs[i as usize];
                    r.resolving = true;
                    r.outcome = false;
                }
            }
            Action::SendCancel(i) => {
                let live = s.live_session(i);
                let r = &mut s.reqs[i as usize];
                r.cancel_sent = true;
                let k = r.coord;
                if live == Some(k) {
                    s.record(
                        k,
                        Event::CancelSent {
                            request: request(i),
                        },
                    );
                }
            }
            Action::KillOnCancel(i) => {
                let live = s.live_session(i);
                let r = &mut s.reqs[i as usize];
                r.cmd = Cmd::Exited;
                r.outcome = live == Some(r.coord);
            }
            // The CLI's answer came, or its grace ran out.
            Action::CancelDone(i) => s.publish(i, ResultKind::Cancelled),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one owner per Domain", |_, s: &State| {
                let acting: Vec<u8> = (0..s.coords.len() as u8)
                    .filter(|&k| s.coords[k as usize].owns())
                    .collect();
                acting.len() <= 1
                    && acting.first().copied() == s.owner
                    && s.coords.iter().filter(|c| c.step == Step::Serving).count() <= 1
            }),
            Property::always(
                "every recorded step is one the replay allows",
                |_, s: &State| s.refused.is_none(),
            ),
            Property::always("one generation's resources at a time", |_, s: &State| {
                let mut gens = [s.holder, s.supervisor, s.run_dir].into_iter().flatten();
                let first = gens.next();
                gens.all(|g| Some(g) == first)
            }),
            Property::always(
                "nothing of an older generation remains once one starts",
                |_, s: &State| match s.store_gen() {
                    Some((n, Phase::Starting | Phase::Running | Phase::Stopping)) => {
                        [s.holder, s.supervisor, s.run_dir]
                            .into_iter()
                            .flatten()
                            .all(|g| g == n)
                            && s.leases & !(1 << n) == 0
                    }
                    _ => true,
                },
            ),
            Property::always(
                "a Stopped generation leaves nothing transient",
                |_, s: &State| {
                    s.store_gen().map(|(_, p)| p) != Some(Phase::Stopped)
                        || (s.holder.is_none() && s.supervisor.is_none() && s.run_dir.is_none())
                },
            ),
            Property::always("at most one result per request", |_, s: &State| {
                s.reqs.iter().all(|r| r.results <= 1)
            }),
            Property::always(
                "an accepted request is resolving or has its result while its session lives",
                |_, s: &State| {
                    (0..CLIS as u8).all(|i| {
                        let r = &s.reqs[i as usize];
                        !r.accepted
                            || r.results == 1
                            || r.resolving
                            || s.live_session(i) != Some(r.coord)
                    })
                },
            ),
            Property::always("no stranded host command", |_, s: &State| {
                (0..CLIS as u8).all(|i| {
                    let r = &s.reqs[i as usize];
                    if r.cmd != Cmd::Running {
                        return true;
                    }
                    // Its CLI runs it, and it ends with its request, is
                    // being cancelled, or its CLI is about to see the
                    // coordinator gone and kill it.
                    matches!(s.clis[i as usize], Cli::Connected(_))
                        && ((r.resolving && r.results == 0)
                            || r.cancel_sent
                            || s.live_session(i) != Some(r.coord))
                })
            }),
            Property::always(
                "at rest, nothing runs or leaks",
                |m: &Lifecycle, s: &State| {
                    let mut next = Vec::new();
                    m.actions(s, &mut next);
                    if !next.is_empty() {
                        return true;
                    }
                    let clean = s.coords.iter().all(|c| c.step == Step::Exited);
                    s.reqs.iter().all(|r| r.cmd != Cmd::Running)
                        && s.clis.iter().all(|c| matches!(c, Cli::Idle | Cli::Done))
                        && (!clean
                            || (s.holder.is_none()
                                && s.supervisor.is_none()
                                && s.run_dir.is_none()
                                && s.leases == 0))
                },
            ),
            Property::sometimes(
                "two sessions share one generation",
                |_, s: &State| matches!(s.clis, [Cli::Connected(a), Cli::Connected(b)] if a == b),
            ),
            Property::sometimes("a coordinator waits while another owns", |_, s: &State| {
                s.owner.is_some() && s.coords.iter().any(|c| c.step == Step::WaitLock)
            }),
            Property::sometimes("a second generation runs", |_, s: &State| {
                s.rec.generation == Some((2, Phase::Running))
            }),
            Property::sometimes(
                "recovery is about to kill a recorded stale holder",
                |_, s: &State| {
                    s.owner
                        .is_some_and(|k| s.coords[k as usize].step == Step::Recover)
                        && s.store_gen()
                            .is_some_and(|(n, _)| s.recorded(n) && s.holder == Some(n))
                },
            ),
            Property::sometimes(
                "recovery is about to finish a generation left Starting",
                |_, s: &State| {
                    s.owner
                        .is_some_and(|k| s.coords[k as usize].step == Step::Recover)
                        && s.rec.phase() == Some(Phase::Starting)
                },
            ),
            Property::sometimes("recovery is about to finish a teardown", |_, s: &State| {
                s.owner
                    .is_some_and(|k| s.coords[k as usize].step == Step::Recover)
                    && s.rec.phase() == Some(Phase::Stopping)
            }),
            Property::sometimes("a failed start is torn down", |_, s: &State| {
                s.coords.iter().any(|c| c.step == Step::Exited && !c.ready)
                    && s.rec.phase() == Some(Phase::Stopped)
            }),
            Property::sometimes(
                "a host command completes with its result",
                |_, s: &State| {
                    s.rec
                        .requests
                        .values()
                        .any(|r| r.host_command && r.kind == Some(ResultKind::Completed))
                },
            ),
            Property::sometimes(
                "a running host command is cancelled with its result",
                |_, s: &State| {
                    s.rec
                        .requests
                        .values()
                        .any(|r| r.cancel_sent && r.kind == Some(ResultKind::Cancelled))
                },
            ),
            Property::sometimes("a request of an ended session is denied", |_, s: &State| {
                s.rec
                    .requests
                    .values()
                    .any(|r| !r.accepted && r.results == 1)
            }),
            Property::sometimes("lazaret stop with a pending request", |_, s: &State| {
                s.stopped_by_command
                    && s.reqs
                        .iter()
                        .any(|r| r.resolving && s.coords[r.coord as usize].step == Step::Draining)
            }),
            Property::sometimes(
                "a crashed coordinator's host command outlives it",
                |_, s: &State| {
                    s.reqs.iter().any(|r| {
                        r.cmd == Cmd::Running && s.coords[r.coord as usize].step == Step::Crashed
                    })
                },
            ),
        ]
    }
}

fn model(fault: Option<Fault>) -> Lifecycle {
    Lifecycle {
        fault,
        coordinators: COORDINATORS,
    }
}

#[test]
fn the_lifecycle_model_holds_exhaustively() {
    let t = Instant::now();
    let c = model(None).checker().spawn_bfs().join();
    eprintln!(
        "lifecycle model: {} states ({} unique), depth {}, {:.1?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth(),
        t.elapsed()
    );
    // Every `always` holds and every `sometimes` has its example.
    c.assert_properties();
}

/// The checker names the property `fault` breaks.
fn caught(fault: Fault, property: &'static str) {
    let c = model(Some(fault))
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let path = c.discovery(property);
    assert!(
        path.is_some(),
        "{fault:?} was not caught by {property:?}; discoveries: {:?}",
        c.discoveries().keys().collect::<Vec<_>>()
    );
}

#[test]
fn recovery_that_spares_the_stale_holder_is_caught() {
    caught(
        Fault::RecoverySkipsKill,
        "a Stopped generation leaves nothing transient",
    );
    caught(
        Fault::RecoverySkipsKill,
        "nothing of an older generation remains once one starts",
    );
}

#[test]
fn a_second_result_is_caught() {
    caught(Fault::ResultTwice, "at most one result per request");
    caught(
        Fault::ResultTwice,
        "every recorded step is one the replay allows",
    );
}

#[test]
fn host_commands_outliving_their_session_are_caught() {
    caught(Fault::LeaveKeepsCommands, "no stranded host command");
}

#[test]
fn a_coordinator_without_the_domain_lock_is_caught() {
    caught(Fault::NoDomainLock, "one owner per Domain");
}

/// Without `PR_SET_PDEATHSIG`, a holder started before `Running` records
/// it outlives a crash unknown to recovery: the assumption is load-bearing.
#[test]
fn without_pdeathsig_an_unrecorded_holder_outlives_recovery() {
    caught(
        Fault::NoPdeathsig,
        "a Stopped generation leaves nothing transient",
    );
}
