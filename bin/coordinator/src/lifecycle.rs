//! Start, serve, tear down, and recover a Domain.

use crate::escalation::{Escalations, MailboxKeys, ResultSigner};
use crate::logs::HelpersLog;
use crate::session::{self, SessionCtx};
use crate::start_error::{InputError, StartError};
use crate::supervisor_link::Link;
use crate::{exit, procs};
use lazaret_helpers::channel::{self, Channel, ChannelError};
use lazaret_helpers::{fds, memfd};
use lazaret_protocol::escalation::paths as esc_paths;
use lazaret_protocol::fdno;
use lazaret_protocol::lifecycle::{Event, LOG_PREFIX as LIFECYCLE_PREFIX};
use lazaret_protocol::plan::{
    AnchorMount, CoordinatorInput, CoordinatorReadiness, MountKind, MountPurpose, PlannedMount,
    RootLayout, SandboxPlan,
};
use lazaret_protocol::supervisor::FromSupervisor;
use lazaret_state::anchors::{AnchorDirs, Anchors};
use lazaret_state::meta::{AnchorMeta, DomainMeta};
use lazaret_state::store::{Generation, Phase, Store};
use lazaret_state::DomainLayout as Layout;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `lazaret-escalate`, statically linked (built by `build.rs`): what every
/// sandbox gets at `/.lazaret/bin/lazaret-escalate`.
pub static ESCALATE_STATIC: &[u8] = include_bytes!(env!("LAZARET_ESCALATE_STATIC"));

/// `lazaret-port-relay`, statically linked (built by `build.rs`): what a
/// sandbox whose Domain publishes ports gets at
/// [`lazaret_protocol::plan::PORT_RELAY`].
pub static PORT_RELAY_STATIC: &[u8] = include_bytes!(env!("LAZARET_PORT_RELAY_STATIC"));

/// Lazaret's `sudo` for a profile's `user`, at `/.lazaret/bin/sudo` and
/// linked at `/usr/local/bin/sudo`: it parses sudo's options and asks
/// `lazaret-sudo`'s service, which the sandbox's init starts.
const SUDO_SCRIPT: &str = include_str!("sudo.sh");

/// `lazaret-sudo`, statically linked (built by `build.rs`): what a sandbox
/// whose profile has a `user` gets at [`lazaret_protocol::plan::SUDO_SERVICE`].
pub static SUDO_STATIC: &[u8] = include_bytes!(env!("LAZARET_SUDO_STATIC"));

/// How long a started Domain waits for its first session before it stops.
const FIRST_SESSION_GRACE: Duration = Duration::from_secs(30);

/// One timestamped line of the Domain's `coordinator.log` (what its
/// helpers say goes to `helpers.log`); see [`crate::logs`].
pub fn log(msg: impl std::fmt::Display) {
    crate::logs::line(msg);
}

/// Records one lifecycle step in `coordinator.log` (`lifecycle: <event>`,
/// see [`lazaret_protocol::lifecycle`]), at the moment it is taken. After
/// [`Event::Released`] nothing more is recorded: threads that still end
/// while the process exits are no steps of an owner.
pub fn record(event: Event) {
    let mut released = lazaret_helpers::sync::lock(&RECORDING);
    if *released {
        return;
    }
    *released = matches!(event, Event::Released);
    log(format_args!("{LIFECYCLE_PREFIX}{event}"));
}

/// Whether [`Event::Released`] was recorded; held while a step is written,
/// so the steps of all threads are in the order they were recorded.
static RECORDING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// The Domain lock, held for as long as this coordinator owns the Domain;
/// [`Event::Released`] is recorded as it is given up.
struct Ownership {
    _lock: std::fs::File,
}

impl Drop for Ownership {
    fn drop(&mut self) {
        crate::logs::flush(true);
        record(Event::Released);
    }
}

pub fn main() -> i32 {
    // Inherited by the supervisor, the exec bridges and what they start.
    lazaret_helpers::limits::raise_nofile();
    let ready = match fds::inherited(fdno::coordinator::READY) {
        Ok(fd) => Some(std::fs::File::from(fd)),
        Err(_) => None,
    };
    let mut ready = ready;
    let leader = fds::inherited(fdno::coordinator::LEADER).ok();
    let input = match read_input() {
        Ok(i) => i,
        Err(e) => {
            let msg = e.to_string();
            report(&mut ready, CoordinatorReadiness::Failed(msg.clone()));
            log(&msg);
            return exit::BAD_INPUT;
        }
    };
    crate::logs::init(&input.domain_root);
    // A panicking thread (a connection's, the supervisor link's) says so
    // in coordinator.log, with its name, before it unwinds.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        log(format!(
            "panic in thread {}: {info}",
            thread.name().unwrap_or("unnamed")
        ));
        default_hook(info);
    }));
    match run(&input, &mut ready, leader.as_ref()) {
        Ok(()) => exit::OK,
        Err(e) => {
            let msg = e.to_string();
            report(&mut ready, CoordinatorReadiness::Failed(msg.clone()));
            log(format!("error: {msg}"));
            exit::START_FAILED
        }
    }
}

fn report(ready: &mut Option<std::fs::File>, r: CoordinatorReadiness) {
    if let Some(f) = ready.as_mut() {
        let _ = lazaret_protocol::frame::write_frame(f, &r);
    }
    *ready = None;
}

/// The input memfd ([`fdno::coordinator::INPUT`]), checked against `--input-digest HEX` before
/// it is parsed.
fn read_input() -> Result<CoordinatorInput, InputError> {
    let args: Vec<String> = std::env::args().collect();
    let digest = args
        .iter()
        .position(|a| a == "--input-digest")
        .and_then(|i| args.get(i + 1))
        .ok_or(InputError::NoDigest)?;
    let fd = fds::inherited(fdno::coordinator::INPUT).map_err(|source| InputError::NoInput {
        fd: fdno::coordinator::INPUT,
        source,
    })?;
    let bytes = memfd::read_checked("coordinator-input", &fd, 1 << 20, digest)?;
    postcard::from_bytes(&bytes).map_err(InputError::Decode)
}

fn random_id() -> Result<String, StartError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(StartError::Random)?;
    Ok(hex::encode(b))
}

/// Takes the Domain lock, waiting for a previous coordinator that is still
/// tearing down.
fn lock_domain(path: &Path) -> Result<std::fs::File, StartError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| StartError::OpenLock {
            path: path.to_path_buf(),
            source,
        })?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(25))
            }
            Err(source) => {
                return Err(StartError::Locked {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
}

fn run(
    input: &CoordinatorInput,
    ready: &mut Option<std::fs::File>,
    leader: Option<&OwnedFd>,
) -> Result<(), StartError> {
    // A network policy that cannot be taken stops the start before
    // anything is touched.
    lazaret_helpers::timeline::mark("coordinator", "start");
    crate::network::policy(input, lazaret_protocol::plan::UNBOUND_POLICY)?;
    let layout = Layout::new(&input.domain_root);
    let _owner = Ownership {
        _lock: lock_domain(&layout.lock())?,
    };
    record(Event::Owner);
    let store = Store::open(&layout.store())?;
    let previous = store.generation()?;
    let anchor_dirs = recover_domain(input, &layout, &store, previous.as_ref())?;
    let stop = stop_on_signals()?;
    let mut gen = begin_generation(input, &layout, &store, previous, &anchor_dirs)?;
    let d = Domain {
        input,
        layout: &layout,
        store: &store,
    };
    crate::lease::take(input, gen.number).map_err(|e| d.abort(&mut gen, None, e.into()))?;

    lazaret_helpers::timeline::mark("coordinator", "generation-leased");
    let anchor = new_trust_anchor(input, &gen).map_err(|e| d.abort(&mut gen, None, e))?;
    // The network policy of this generation, bound to its network
    // attachment; its intent is durable before the supervisor starts.
    let binding = lazaret_protocol::trust::network_attachment(
        anchor.generation(),
        &format!("sidecar-{}", &random_id()?[..16]),
        &gen.sandbox_id,
    );
    let policy = crate::network::policy(input, &binding)?;
    crate::network::record_intent(&store, &layout, input, gen.number, policy.as_ref())?;

    // The sandbox request-signing key of this generation: the secret half
    // is mounted read-only into the sandbox, the public half stays here.
    let keys = ed25519_compact::KeyPair::generate();
    lazaret_helpers::timeline::mark("coordinator", "policy-derived");
    // What the helpers say reaches `helpers.log` through a pipe this
    // process copies; the rest of it is copied however `run` ends.
    let (helpers, helpers_pipe) =
        HelpersLog::open(&layout.root).map_err(|e| d.abort(&mut gen, None, e.into()))?;
    let _helpers_finish = crate::logs::FinishOnDrop(helpers.clone());
    let started = start_sandbox(
        input,
        &layout,
        &gen,
        &anchor_dirs,
        (&keys, &anchor),
        policy.as_ref(),
        (&helpers, helpers_pipe),
    );
    // `network` takes the start's failure as its message.
    let start_error = started.as_ref().err().map(ToString::to_string);
    crate::network::record_evidence(
        &store,
        &layout,
        input,
        gen.number,
        policy.as_ref(),
        start_error.as_ref(),
    );
    lazaret_helpers::timeline::mark("coordinator", "sandbox-started");
    let started = started.map_err(|e| d.abort(&mut gen, None, e))?;
    let secrets = Secrets {
        keys: &keys,
        anchor,
    };
    serve_generation(
        &d,
        &mut gen,
        started,
        secrets,
        (&helpers, stop),
        (ready, leader),
    )
}

/// What a generation's start and teardown act on.
struct Domain<'a> {
    input: &'a CoordinatorInput,
    layout: &'a Layout,
    store: &'a Store,
}

impl Domain<'_> {
    /// Tears `gen` down and hands back the error that stopped its start.
    fn abort(
        &self,
        gen: &mut Generation,
        supervisor: Option<&mut Supervisor>,
        e: StartError,
    ) -> StartError {
        teardown(self.layout, self.store, gen, supervisor, self.input);
        e
    }

    /// As [`Domain::abort`], once the Escalation Mailbox reader may run:
    /// the reader is stopped first.
    fn abort_started(
        &self,
        gen: &mut Generation,
        supervisor: &mut Supervisor,
        escalations: &Escalations,
        e: StartError,
    ) -> StartError {
        escalations.stop_reader();
        self.abort(gen, Some(supervisor), e)
    }
}

/// The generation's request-signing key pair and Trust Anchor.
struct Secrets<'a> {
    keys: &'a ed25519_compact::KeyPair,
    anchor: Arc<lazaret_trust::TrustAnchor>,
}

/// Recovers what an earlier coordinator left (its generation, stale leases,
/// an interrupted State Anchor reset) and returns the current generation of
/// every persistent path.
fn recover_domain(
    input: &CoordinatorInput,
    layout: &Layout,
    store: &Store,
    previous: Option<&Generation>,
) -> Result<Vec<AnchorDirs>, StartError> {
    recover(layout, store, previous, &input.libexec)?;
    lazaret_helpers::timeline::mark("coordinator", "recovered");
    crate::lease::release_stale(input);
    lazaret_helpers::timeline::mark("coordinator", "stale-leases-released");

    // State Anchors: finish or roll back an interrupted reset, then make
    // sure every persistent path has its current generation.
    let anchors = Anchors::new(layout, store)?;
    anchors.recover(&mut |p: &Path| remove_tree(&input.libexec, p))?;
    let anchor_dirs = anchors.ensure(&input.persistent_paths)?;
    lazaret_helpers::timeline::mark("coordinator", "recovered-anchors-ready");
    Ok(anchor_dirs)
}

/// The flag SIGTERM, SIGINT and SIGHUP set to stop the Domain.
fn stop_on_signals() -> Result<Arc<AtomicBool>, StartError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone()).map_err(StartError::Signals)?;
    }
    Ok(stop)
}

/// The next generation, made durable as an intent (and described in the
/// Domain's meta file) before anything of it exists.
fn begin_generation(
    input: &CoordinatorInput,
    layout: &Layout,
    store: &Store,
    previous: Option<Generation>,
    anchor_dirs: &[AnchorDirs],
) -> Result<Generation, StartError> {
    let gen = Generation {
        number: previous.map(|g| g.number + 1).unwrap_or(1),
        phase: Phase::Starting,
        sandbox_id: format!("lazaret-{}", &random_id()?[..16]),
        coordinator_id: random_id()?,
        supervisor: None,
        holder: None,
    };
    // The intent is durable before anything exists.
    store.set_generation(&gen)?;
    record(Event::Begin {
        generation: gen.number,
    });
    let meta = DomainMeta {
        domain_id: input.domain_id.clone(),
        profile: input.profile_name.clone(),
        workspace: input.workspace.display().to_string(),
        image: input.image_reference.clone(),
        image_rootfs: input.image_rootfs.display().to_string(),
        generation: gen.number,
        anchors: anchor_dirs
            .iter()
            .map(|a| AnchorMeta {
                path: a.path.clone(),
                generation: a.generation,
            })
            .collect(),
    };
    lazaret_state::meta::write(&layout.meta(), &meta).map_err(StartError::write(&layout.meta()))?;
    Ok(gen)
}

/// The Trust Anchor of this generation: its secret keys stay in this
/// process; its public half is published before the sandbox starts.
fn new_trust_anchor(
    input: &CoordinatorInput,
    gen: &Generation,
) -> Result<Arc<lazaret_trust::TrustAnchor>, StartError> {
    lazaret_trust::new_generation(&input.domain_id, gen.number)
        .and_then(|g| lazaret_trust::TrustAnchor::new(g, &input.profile_name, &gen.coordinator_id))
        .map(Arc::new)
        .map_err(StartError::TrustAnchor)
}

/// Runs a started sandbox: records the supervisor and holder, listens,
/// starts the Escalation Mailbox, confines this process, reports ready,
/// serves Client Sessions until the Domain stops, and tears it down.
fn serve_generation(
    d: &Domain<'_>,
    gen: &mut Generation,
    started: Started,
    secrets: Secrets<'_>,
    (helpers, stop): (&Arc<HelpersLog>, Arc<AtomicBool>),
    (ready, leader): (&mut Option<std::fs::File>, Option<&OwnedFd>),
) -> Result<(), StartError> {
    let (input, layout) = (d.input, d.layout);
    let Started {
        child,
        channel,
        holder,
    } = started;
    // For recovery only (by pid and start time, before this coordinator
    // exists); this coordinator acts on the holder through its pidfd.
    let holder_pid = lazaret_helpers::pidfd::pid_of(&holder);
    gen.supervisor = procs::start_time(child.id() as i32).map(|t| (child.id() as i32, t));
    gen.holder = holder_pid.and_then(|p| procs::start_time(p).map(|t| (p, t)));
    set_phase(d.store, gen, Phase::Running)?;
    let mut supervisor = Supervisor {
        child,
        link: None,
        holder: Arc::new(holder),
        helpers: helpers.clone(),
    };
    let listener = bind(&layout.socket()).map_err(|e| d.abort(gen, Some(&mut supervisor), e))?;

    // The Escalation Mailbox: read by the confined `lazaret-mailbox`,
    // started here, before the coordinator confines itself.
    let escalations = domain_escalations(input, layout, gen, &secrets);
    let from_reader = start_mailbox_reader(&escalations, &input.libexec);

    // Start-up is over: every process the coordinator starts runs, and it
    // has one thread, so landlock and seccomp bind all it will do.
    let catalog = lazaret_catalog::storage_root_of_rootfs(&input.image_rootfs);
    helpers.drain();
    let confined = crate::confine::confine(&layout.root, catalog).map_err(StartError::Confine);
    let confined = confined.map_err(|e| d.abort_started(gen, &mut supervisor, &escalations, e))?;
    log(confined.trim_end().replace('\n', "; "));

    helpers.clone().spawn();
    let link = Link::start(channel)
        .map_err(StartError::Link)
        .map_err(|e| d.abort_started(gen, &mut supervisor, &escalations, e))?;
    supervisor.link = Some(link.clone());
    if let Some(r) = from_reader {
        escalations.take_from_reader(r);
    }
    log(format!(
        "Domain {} generation {} ready: sandbox {}",
        input.domain_id, gen.number, gen.sandbox_id
    ));
    lazaret_helpers::timeline::mark("coordinator", "ready");
    report(ready, CoordinatorReadiness::Ready);
    let mailbox_stop = Arc::new(AtomicBool::new(false));
    escalations.clone().watch(mailbox_stop.clone());
    let status = domain_status(input, gen, holder_pid);
    let trust = crate::trust::ControlTrust::new(secrets.anchor, &layout.run())
        .map_err(|e| d.abort_started(gen, &mut supervisor, &escalations, e.into()))?;
    let ctx = Arc::new(SessionCtx::new(
        trust,
        input.clone(),
        layout.run(),
        link,
        escalations,
        stop.clone(),
        status,
        supervisor.holder.clone(),
    ));
    serve(&listener, &ctx, &stop, &mut supervisor, leader);
    mailbox_stop.store(true, Ordering::Relaxed);
    stop_sessions(&ctx, listener, layout);
    teardown(layout, d.store, gen, Some(&mut supervisor), input);
    Ok(())
}

/// Starts the confined Escalation Mailbox reader; a reader that does not
/// start leaves the Domain running without Host Escalation.
fn start_mailbox_reader(
    escalations: &Arc<Escalations>,
    libexec: &Path,
) -> Option<std::os::unix::net::UnixStream> {
    match escalations.start_reader(libexec) {
        Ok(r) => Some(r),
        Err(e) => {
            log(format!(
                "the Escalation Mailbox reader did not start, Host Escalation requests are not read in this Domain: {e}"
            ));
            None
        }
    }
}

/// Ends every Client Session once the Domain stops serving: the reader
/// stops, then the Trust Anchor is invalidated before the socket goes, so
/// no new session may join.
fn stop_sessions(ctx: &SessionCtx, listener: UnixListener, layout: &Layout) {
    ctx.escalations.stop_reader();

    // No new session may join from here on: the Trust Anchor first.
    ctx.trust.invalidate();
    let _ = std::fs::remove_file(layout.socket());
    drop(listener);
    ctx.end_all();
}

/// The Escalation Mailbox of this generation: requests are checked with
/// the sandbox's request key, results signed by the Trust Anchor.
fn domain_escalations(
    input: &CoordinatorInput,
    layout: &Layout,
    gen: &Generation,
    secrets: &Secrets<'_>,
) -> Arc<Escalations> {
    Arc::new(Escalations::new(
        MailboxKeys {
            requests: secrets.keys.pk,
            results: ResultSigner {
                generation: secrets.anchor.generation().clone(),
                key: secrets.anchor.result_key().clone(),
            },
        },
        gen.sandbox_id.clone(),
        input.profile_name.clone(),
        input.workspace.clone(),
        &control_dir(layout),
        layout.root.join(lazaret_protocol::escalation::LOG_FILE),
        input.auto_approve.clone(),
    ))
}

/// The Domain's status as `lazaret ps` first sees it.
fn domain_status(
    input: &CoordinatorInput,
    gen: &Generation,
    holder_pid: Option<i32>,
) -> lazaret_protocol::session::DomainStatus {
    lazaret_protocol::session::DomainStatus {
        generation: gen.number,
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        sessions: 0,
        holder_pid,
        ports: input.network.ports.clone(),
        session_list: Vec::new(),
    }
}

fn bind(path: &Path) -> Result<UnixListener, StartError> {
    let _ = std::fs::remove_file(path);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(StartError::SocketPath {
            path: path.to_path_buf(),
        });
    };
    let short =
        lazaret_helpers::sockpath::short(dir, &name.to_string_lossy()).map_err(|source| {
            StartError::SocketDir {
                dir: dir.to_path_buf(),
                source,
            }
        })?;
    let l = UnixListener::bind(&short.path).map_err(|source| StartError::Listen {
        path: path.to_path_buf(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(StartError::Socket)?;
    l.set_nonblocking(true).map_err(StartError::Socket)?;
    Ok(l)
}

fn serve(
    listener: &UnixListener,
    ctx: &Arc<SessionCtx>,
    stop: &AtomicBool,
    supervisor: &mut Supervisor,
    leader: Option<&OwnedFd>,
) {
    let since = Instant::now();
    // Since when no Client Session runs, for `keep_alive`.
    let mut idle: Option<Instant> = None;
    // Since when no session runs while connections are still served, for
    // one log line if that lasts (what keeps the Domain up).
    let mut lingering: Option<(Instant, bool)> = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            log("asked to stop");
            return;
        }
        if let Ok(Some(status)) = supervisor.child.try_wait() {
            log(format!(
                "the Runtime Supervisor exited ({status}): the sandbox is lost"
            ));
            return;
        }
        // A session ends the wait; `lazaret ps` does not prolong it.
        if ctx.sessions_now() != 0 {
            idle = None;
        }
        note_lingering(ctx, &mut lingering);
        if let Some(why) = done_serving(ctx, since, &mut idle) {
            // Stopping: no new connection is taken while those in flight
            // end. A control request (`lazaret ps`, which asks every
            // running Domain) ends in milliseconds, so polling it cannot
            // keep the Domain up; one that becomes a Client Session makes
            // `done_serving` false again, and taking connections resumes.
            if ctx.active() == 0 {
                log(why);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        if ctx.active() == 0 && !ctx.served() && leader.is_some_and(lazaret_helpers::pidfd::exited)
        {
            log("the lazaret CLI that started this Domain exited before its session");
            return;
        }
        accept_one(listener, ctx);
    }
}

/// Why the Domain is done serving, once no Client Session runs: after
/// one was served (or none came within [`FIRST_SESSION_GRACE`]), and its
/// `keep_alive` (counted in `idle` from when the last one ended) is over.
/// Connections that are not Client Sessions (control requests, attached
/// terminals of an ended session) do not count here.
fn done_serving(ctx: &SessionCtx, since: Instant, idle: &mut Option<Instant>) -> Option<String> {
    if ctx.sessions_now() != 0 || !(ctx.served() || since.elapsed() > FIRST_SESSION_GRACE) {
        return None;
    }
    match ctx.served().then(|| ctx.keep_alive()).flatten() {
        // The profile keeps the Domain up a while (`keep_alive`); a new
        // session ends the wait.
        Some(k) if idle.get_or_insert_with(Instant::now).elapsed() < k => None,
        Some(k) => Some(format!(
            "no Client Session left for {}s (keep_alive)",
            k.as_secs()
        )),
        None => Some("no Client Session left".into()),
    }
}

/// Says once in the log when connections keep a Domain without Client
/// Sessions up for longer than [`LINGER_NOTE`] (`lingering`: since when,
/// and whether it was said).
fn note_lingering(ctx: &SessionCtx, lingering: &mut Option<(Instant, bool)>) {
    if ctx.sessions_now() == 0 && ctx.active() != 0 && ctx.served() {
        let (since, said) = lingering.get_or_insert((Instant::now(), false));
        if !*said && since.elapsed() > LINGER_NOTE {
            *said = true;
            log(format!(
                "no Client Session runs, but {} connection(s) have been open for {}s: the Domain stays up until they end ({})",
                ctx.active(),
                LINGER_NOTE.as_secs(),
                ctx.connections_summary()
            ));
        }
    } else {
        *lingering = None;
    }
}

/// Waits up to 100 ms for a connection and starts its session if it comes
/// from this user.
fn accept_one(listener: &UnixListener, ctx: &Arc<SessionCtx>) {
    let mut pfd = [nix::poll::PollFd::new(
        listener.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let _ = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(100u16));
    match listener.accept() {
        Ok((stream, _)) => {
            if let Err(e) = session::peer_is_us(&stream) {
                log(format!("refused a connection: {e}"));
                return;
            }
            session::spawn(ctx.clone(), stream);
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => log(format!("accept: {e}")),
    }
}

/// How long connections may keep a Domain without sessions up before the
/// log says so.
const LINGER_NOTE: Duration = Duration::from_secs(10);

pub(crate) fn mkdir_private(p: &Path) -> Result<(), StartError> {
    mkdir_all(p, 0o700)
}

/// Creates the directory `p` and its missing parents, with `mode` (less
/// the umask).
pub(crate) fn mkdir_all(p: &Path, mode: u32) -> Result<(), StartError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(p)
        .map_err(StartError::create(p))
}

/// Builds the sandbox plan (pure apart from reading the workspace's Git
/// layout) and starts the supervisor with it.
/// Lazaret's fixed control mount (`/.lazaret` inside): the escalation
/// client, the request-signing key, the sandbox ID and the mailbox.
fn control_dir(layout: &Layout) -> std::path::PathBuf {
    layout.run().join("control")
}

fn prepare_control(
    input: &CoordinatorInput,
    layout: &Layout,
    gen: &Generation,
    keys: &ed25519_compact::KeyPair,
    trust: &lazaret_trust::TrustAnchor,
) -> Result<Vec<PlannedMount>, StartError> {
    let control = control_dir(layout);
    for d in ["bin", "mailbox/requests", "mailbox/results"] {
        mkdir_private(&control.join(d))?;
    }
    // Modes for the profile's user inside, who escalates as root does: it
    // reads the Git identity, the host CA, the escalation client, the
    // request key and the results, and adds requests (sticky: it cannot
    // take root's away). They matter inside only: the sandbox's root has
    // them all anyway, and every process inside is the same agent's. On
    // the host the Domain Root around them stays yours alone.
    let shared = input.user.is_some();
    if shared {
        open_control_to_user(&control)?;
    }
    // The sandbox's root writes requests through the gofer, which runs as
    // the developer: the request directory stays private to the developer.
    let write = |name: &str, bytes: &[u8], mode: u32| write_new(&control.join(name), bytes, mode);
    write(
        "request-key",
        keys.sk.as_ref(),
        if shared { 0o644 } else { 0o600 },
    )?;
    write("sandbox-id", gen.sandbox_id.as_bytes(), 0o644)?;
    // The public Trust Anchor: lazaret-escalate verifies results with it.
    // The CLI pins its own copy, in the run directory the sandbox never
    // sees.
    let published = trust.published().encode();
    write(
        lazaret_protocol::trust::manifest::FILE_NAME,
        &published,
        0o644,
    )?;
    write_new(&crate::trust::pin_path(&layout.run()), &published, 0o600)?;
    // The Agent Sandbox's certificate, for its request-signing key.
    let sandbox_cert = trust
        .issue(
            &keys.pk,
            &trust.claims(
                lazaret_protocol::trust::Role::AgentSandbox,
                &gen.sandbox_id,
                None,
            ),
            None,
        )
        .map_err(StartError::Certificate)?;
    write(esc_paths::SANDBOX_CERTIFICATE_NAME, &sandbox_cert, 0o644)?;
    write(
        "gitconfig",
        git_identity_config(&input.git_identity).as_bytes(),
        0o644,
    )?;
    if let Some(pem) = &input.host_ca {
        write(HOST_CA_NAME, pem, 0o644)?;
    }
    write_executables(input, &control)?;
    link_on_path(input, layout)?;
    write_agents_text(&layout.run().join("control-lower"))?;
    Ok(control_mounts(&control))
}

/// Opens the control directories to the profile's user inside (see
/// [`prepare_control`]).
fn open_control_to_user(control: &Path) -> Result<(), StartError> {
    for (d, mode) in [
        ("", 0o755),
        ("bin", 0o755),
        ("mailbox", 0o755),
        ("mailbox/results", 0o755),
        ("mailbox/requests", 0o1733),
    ] {
        let d = control.join(d);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
            .map_err(|source| StartError::OpenToUser { path: d, source })?;
    }
    Ok(())
}

/// Writes a new file (never one that exists) with `mode`.
fn write_new(p: &Path, bytes: &[u8], mode: u32) -> Result<(), StartError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(p)
        .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
        .map_err(StartError::write(p))
}

/// The static builds embedded at compile time (see build.rs), in the
/// control directory's `bin`: they run in any image, with or without a C
/// library. The port relay only where ports are published (the sandbox's
/// init starts it: see bin/supervisor/src/ports.rs); `sudo` and its
/// service only for a profile's user (see sudo.sh).
fn write_executables(input: &CoordinatorInput, control: &Path) -> Result<(), StartError> {
    let mut executables: Vec<(&str, &[u8])> = vec![("lazaret-escalate", ESCALATE_STATIC)];
    if !input.network.ports.is_empty() {
        executables.push(("lazaret-port-relay", PORT_RELAY_STATIC));
    }
    if input.user.is_some() {
        executables.extend([
            ("sudo", SUDO_SCRIPT.as_bytes()),
            ("lazaret-sudo", SUDO_STATIC),
        ]);
    }
    for (name, bytes) in executables {
        let rel = format!("bin/{name}");
        write_new(&control.join(&rel), bytes, 0o755)?;
        let bin = control.join(rel);
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
            .map_err(|source| StartError::Executable { path: bin, source })?;
    }
    Ok(())
}

/// Puts the escalation client (and `sudo` for a profile's user) on every
/// PATH, login shells included: a link in a layer of ours. Modes as in the
/// image: the layer's directories show through.
fn link_on_path(input: &CoordinatorInput, layout: &Layout) -> Result<(), StartError> {
    let link_dir = layout.run().join("control-lower/usr/local/bin");
    mkdir_all(&link_dir, 0o755)?;
    for d in [
        "control-lower",
        "control-lower/usr",
        "control-lower/usr/local",
    ] {
        let _ =
            std::fs::set_permissions(layout.run().join(d), std::fs::Permissions::from_mode(0o755));
    }
    // `sudo` ahead of an image's own on PATH, which set-user-ID cannot run
    // on a runsc without --allow-suid.
    let linked: &[&str] = match input.user {
        Some(_) => &["lazaret-escalate", "sudo"],
        None => &["lazaret-escalate"],
    };
    for &name in linked {
        std::os::unix::fs::symlink(format!("{}/{name}", esc_paths::BIN), link_dir.join(name))
            .map_err(|source| StartError::PathLink { name, source })?;
    }
    Ok(())
}

/// The control directory, read-only at [`esc_paths::CONTROL`], and its
/// request directory, writable at [`esc_paths::REQUESTS`].
fn control_mounts(control: &Path) -> Vec<PlannedMount> {
    vec![
        PlannedMount {
            destination: esc_paths::CONTROL.into(),
            kind: MountKind::Bind {
                source: control.to_path_buf(),
                read_only: true,
            },
            purpose: MountPurpose::Control,
        },
        PlannedMount {
            destination: esc_paths::REQUESTS.into(),
            kind: MountKind::Bind {
                source: control.join("mailbox/requests"),
                read_only: false,
            },
            purpose: MountPurpose::Control,
        },
    ]
}

/// What an agent inside should know about Host Escalation, for its
/// `AGENTS.md` or `CLAUDE.md` to point at.
pub const AGENTS_TEXT: &str = include_str!("../../escalate/AGENTS.md");

/// Writes [`AGENTS_TEXT`] at [`esc_paths::AGENTS_TEXT`] in the layer of
/// ours above the image (`lower`), so it is there whatever the image.
fn write_agents_text(lower: &Path) -> Result<(), StartError> {
    let rel = esc_paths::AGENTS_TEXT.trim_start_matches('/');
    let file = lower.join(rel);
    let mut dir = lower.to_path_buf();
    if let Some(parent) = Path::new(rel).parent() {
        for c in parent.components() {
            dir.push(c);
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                })
                .map_err(StartError::create(&dir))?;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        }
    }
    std::fs::write(&file, AGENTS_TEXT)
        .and_then(|_| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)))
        .map_err(StartError::write(&file))
}

/// A started Runtime Supervisor: our child, its channel, and the sandbox
/// holder's pidfd (from the supervisor's `Ready`).
struct Started {
    child: Child,
    channel: Channel,
    holder: OwnedFd,
}

/// The running supervisor, as the coordinator holds it after start-up.
struct Supervisor {
    child: Child,
    link: Option<Arc<Link>>,
    /// Kept open: the holder's pidfd pins nothing, but names the sandbox
    /// for as long as this coordinator serves it; the sessions read from
    /// it whether the sandbox is gone.
    holder: Arc<OwnedFd>,
    /// What it and the helpers under it say: copied while the coordinator
    /// waits for them too (before it is confined no thread copies it).
    helpers: Arc<HelpersLog>,
}

fn start_sandbox(
    input: &CoordinatorInput,
    layout: &Layout,
    gen: &Generation,
    anchors: &[AnchorDirs],
    (keys, trust): (&ed25519_compact::KeyPair, &lazaret_trust::TrustAnchor),
    policy: Option<&lazaret_protocol::netpolicy::Policy>,
    (helpers, helpers_pipe): (&HelpersLog, OwnedFd),
) -> Result<Started, StartError> {
    let run = layout.run();
    mkdir_private(&run)?;
    // Nothing here reads the Git directory: the sandbox can write it, and
    // the mount router enforces Git Sentry on every operation instead.
    let mut mounts = prepare_control(input, layout, gen, keys, trust)?;
    let network = match policy {
        Some(p) => {
            let (net, mount) = crate::network::prepare(input, layout, p)?;
            mounts.push(mount);
            Some(net)
        }
        None => None,
    };
    let mut plan = plan(input, &run, gen, anchors, mounts);
    plan.network = network;
    plan.router = Some(route_workspace(input, layout, &mut plan)?);
    // Read before the sandbox exists; both pointer files are read-only to
    // every sandbox (Git Sentry).
    if let Some(linked) = lazaret_gitconfig::linked::linked(&input.workspace)? {
        plan.git_router = Some(present_linked_git(input, layout, &linked, &mut plan)?);
    }
    plan.volume_routers = crate::volumes::route(input, layout, &plan.mounts)?;
    let bytes = postcard::to_stdvec(&plan).map_err(StartError::Encode)?;
    let (plan_fd, digest) =
        memfd::sealed_with_digest("sandbox-plan", &bytes).map_err(StartError::Memfd)?;
    let (ours, theirs) = channel::pair().map_err(StartError::Channel)?;
    let child = spawn_supervisor(input, &digest, (plan_fd, theirs), helpers_pipe)?;
    await_ready(child, ours, helpers)
}

/// Starts `lazaret-supervisor` with the sealed plan and its end of the
/// channel.
fn spawn_supervisor(
    input: &CoordinatorInput,
    digest: &str,
    (plan_fd, theirs): (OwnedFd, Channel),
    helpers_pipe: OwnedFd,
) -> Result<Child, StartError> {
    // What the supervisor and every helper under it (the holder, runsc,
    // the routers, slirp4netns) say goes to `helpers.log`, through the
    // pipe, so that `coordinator.log` holds the coordinator's timestamped
    // events only.
    lazaret_helpers::timeline::mark("coordinator", "supervisor-spawn");
    let mut cmd = lazaret_helpers::child::domain_command(
        &input.libexec,
        "lazaret-supervisor",
        &input.domain_id,
        "--plan-digest",
        digest,
        helpers_pipe,
    )
    .map_err(StartError::HelpersPipe)?;
    fds::pass_fds(
        &mut cmd,
        vec![
            (plan_fd, fdno::supervisor::PLAN),
            (theirs.into_fd(), fdno::supervisor::CHANNEL),
        ],
    );
    // The supervisor dies with the thread that spawned it, which is this
    // coordinator's main thread.
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::DIE_WITH_PARENT,
    );
    let child = cmd.spawn().map_err(StartError::SpawnSupervisor)?;
    // Closes our copy of the supervisor's end: its exit reads as `Closed`.
    drop(cmd);
    Ok(child)
}

/// The supervisor's answer to its start: `Ready` with the holder's pidfd,
/// or why not (a supervisor that did not fail by itself is killed).
fn await_ready(
    mut child: Child,
    ours: Channel,
    helpers: &HelpersLog,
) -> Result<Started, StartError> {
    if !wait_answer(&ours, helpers, Instant::now() + Duration::from_secs(60))? {
        let _ = child.kill();
        let _ = child.wait();
        return Err(StartError::Timeout);
    }
    let answer = ours.recv_checked::<FromSupervisor>(
        lazaret_protocol::supervisor::MAX_RECORD,
        FromSupervisor::fd_count,
    );
    match answer {
        Ok((FromSupervisor::Ready, mut fds)) => match fds.pop() {
            Some(holder) => Ok(Started {
                child,
                channel: ours,
                holder,
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(StartError::NoHolder)
            }
        },
        // The CLI says "the sandbox could not start: " before it.
        Ok((FromSupervisor::StartFailed { reason }, _)) => {
            let _ = child.wait();
            Err(StartError::Supervisor(reason))
        }
        Ok((other, _)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartError::Answered(Box::new(other)))
        }
        Err(ChannelError::Closed) => {
            let _ = child.wait();
            Err(StartError::SupervisorExited)
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(StartError::Answer(e))
        }
    }
}

/// Waits until the supervisor answers on `ours` (`false`: not by
/// `deadline`), copying what the helpers say meanwhile.
fn wait_answer(
    ours: &Channel,
    helpers: &HelpersLog,
    deadline: Instant,
) -> Result<bool, StartError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    // Until every helper's end of the pipe is closed.
    let mut copying = true;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let mut pfd = vec![PollFd::new(ours.as_fd(), PollFlags::POLLIN)];
        if copying {
            pfd.push(PollFd::new(helpers.fd(), PollFlags::POLLIN));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut pfd, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(StartError::Poll(e)),
        }
        let ready = |p: &PollFd| p.revents().is_some_and(|r| !r.is_empty());
        if pfd.get(1).is_some_and(ready) {
            copying = helpers.drain();
        }
        if ready(&pfd[0]) {
            return Ok(true);
        }
    }
}

pub fn plan(
    input: &CoordinatorInput,
    run: &Path,
    gen: &Generation,
    anchors: &[AnchorDirs],
    mut mounts: Vec<PlannedMount>,
) -> SandboxPlan {
    let mut anchors: Vec<AnchorMount> = anchors
        .iter()
        .map(|a| {
            let in_image = input.image_rootfs.join(a.path.trim_start_matches('/'));
            AnchorMount {
                path: a.path.clone(),
                lower: in_image.is_dir().then_some(in_image),
                upper: a.upper.clone(),
                work: a.work.clone(),
                merged: run
                    .join("anchors")
                    .join(lazaret_state::layout::anchor_dir_name(&a.path)),
            }
        })
        .collect();
    // Parents before children, so `/usr/local` lands on top of `/usr`.
    anchors.sort_by(|a, b| a.path.cmp(&b.path));
    for v in &input.volumes {
        mounts.push(PlannedMount {
            destination: v.sandbox.clone(),
            kind: MountKind::Bind {
                source: v.host.clone(),
                read_only: v.read_only,
            },
            purpose: MountPurpose::Volume,
        });
    }
    // After the volumes and the State Anchors (the bundle mounts anchors
    // first), so `/root/.claude` lands on top of the `/root` anchor.
    for s in &input.shared_paths {
        mounts.push(PlannedMount {
            destination: s.sandbox.clone(),
            kind: MountKind::Bind {
                source: s.host.clone(),
                read_only: false,
            },
            purpose: MountPurpose::SharedPath,
        });
    }
    SandboxPlan {
        sandbox_id: gen.sandbox_id.clone(),
        runsc: input.runsc.clone(),
        state_dir: run.join("runsc"),
        bundle_dir: run.join("bundle"),
        run_dir: run.to_path_buf(),
        exec_bridge: input.libexec.join("lazaret-exec-bridge"),
        root: RootLayout {
            lower: input.image_rootfs.clone(),
            upper: run.join("root-upper"),
            work: run.join("root-work"),
            merged: run.join("root"),
        },
        anchors,
        control_lower: Some(run.join("control-lower")),
        mounts,
        hostname: "lazaret".into(),
        env: session::base_env(input, None),
        id_map: input.id_map.clone(),
        network: None,
        router: None,
        git_router: None,
        volume_routers: Vec::new(),
        limits: input.limits.clone(),
    }
}

/// The workspace reaches the sandbox through `lazaret-mount-router`, whose
/// mount point replaces the host workspace as the source of `/workspace`.
/// The router enforces Git Sentry's name policy on every Git directory
/// (SR-4), so `.git` is served through it rather than bound from the
/// host, and the bind-mount layout of Git Sentry is not used. It routes Git-ignored paths to Ignored Workspace
/// State (SR-13) unless the profile turns that off.
fn route_workspace(
    input: &CoordinatorInput,
    layout: &Layout,
    plan: &mut SandboxPlan,
) -> Result<lazaret_protocol::plan::RouterPlan, StartError> {
    // A reset interrupted after moving the state aside left it here.
    if let Ok(rd) = std::fs::read_dir(&layout.root) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if [Layout::IGNORED, Layout::LINKED_GIT, Layout::VOLUME_GIT]
                .iter()
                .any(|d| name.starts_with(&format!("{d}.discard-")))
            {
                if let Err(err) = remove_tree(&input.libexec, &e.path()) {
                    log(err);
                }
            }
        }
    }
    let state = layout.ignored();
    mkdir_private(&state)?;
    // Kept apart from the state the sandbox sees, and by `state reset`.
    let rules_baseline = layout.root.join("rules-baseline");
    mkdir_private(&rules_baseline)?;
    let mountpoint = layout.run().join("workspace");
    mkdir_private(&mountpoint)?;
    // First, so volumes planned beneath /workspace land on top of it.
    plan.mounts.insert(
        0,
        PlannedMount {
            destination: "/workspace".into(),
            kind: MountKind::Bind {
                source: mountpoint.clone(),
                read_only: false,
            },
            purpose: MountPurpose::Workspace,
        },
    );
    Ok(lazaret_protocol::plan::RouterPlan {
        binary: input.libexec.join("lazaret-mount-router"),
        workspace: input.workspace.clone(),
        state,
        mountpoint,
        isolate_ignored: input.isolate_ignored,
        protected_paths: input.protected_paths.clone(),
        rules_baseline: Some(rules_baseline),
        state_max_bytes: input.limits.ignored_state,
        git_dir: None,
        inside_owner: crate::session::inside_owner(input),
    })
}

/// Where linked Git directories appear inside: the host's path beneath it.
const LINKED_GIT_INSIDE: &str = "/.lazaret/git";

/// A linked worktree or a submodule checkout (see
/// [`lazaret_gitconfig::linked`]): a second router presents only its Git
/// directory (a worktree's common directory, which holds its own) with
/// Git Sentry's rules, at `/.lazaret/git/<host path>`, and `/workspace/.git`
/// is a read-only file of ours naming the workspace's Git directory there.
/// Git resolves the relative names it finds (`commondir`, a submodule's
/// `core.worktree`) from that place, so the host's layout is mirrored
/// beneath `/.lazaret/git`: the workspace's own host path there is a link
/// to `/workspace`. Nothing else of the main repository is visible.
fn present_linked_git(
    input: &CoordinatorInput,
    layout: &Layout,
    linked: &lazaret_gitconfig::linked::LinkedGit,
    plan: &mut SandboxPlan,
) -> Result<lazaret_protocol::plan::RouterPlan, StartError> {
    let run = layout.run().join("linked-git");
    // The router's root: `.git` in it is where the router binds the Git
    // directory, in its own mount namespace only.
    let root = run.join("root");
    mkdir_private(&root.join(".git"))?;
    let mountpoint = run.join("mount");
    mkdir_private(&mountpoint)?;
    let state = layout.linked_git();
    mkdir_private(&state)?;
    let control = control_dir(layout);
    let mirror = |host: &Path| {
        control
            .join("git")
            .join(host.strip_prefix("/").unwrap_or(host))
    };
    let inside = |host: &Path| format!("{LINKED_GIT_INSIDE}{}", host.display());
    mkdir_private(&mirror(&linked.present))?;
    let link = mirror(&linked.workspace);
    if let Some(parent) = link.parent() {
        mkdir_private(parent)?;
    }
    std::os::unix::fs::symlink("/workspace", &link).map_err(StartError::create(&link))?;
    let dot_git = control.join("dot-git");
    std::fs::write(&dot_git, format!("gitdir: {}\n", inside(&linked.git_dir)))
        .map_err(StartError::write(&dot_git))?;
    plan.mounts.push(PlannedMount {
        destination: inside(&linked.present),
        kind: MountKind::Bind {
            source: mountpoint.join(".git"),
            read_only: false,
        },
        purpose: MountPurpose::Workspace,
    });
    plan.mounts.push(PlannedMount {
        destination: "/workspace/.git".into(),
        kind: MountKind::Bind {
            source: dot_git,
            read_only: true,
        },
        purpose: MountPurpose::Control,
    });
    Ok(crate::volumes::sentry_only(
        input,
        root,
        state,
        mountpoint,
        Some(linked.present.clone()),
    ))
}

/// Stops the sandbox (through the supervisor, which also removes the run
/// directory), removes what is left transient and records the Domain as
/// stopped. Persistent state stays. Nothing here execs once the supervisor
/// runs: the `--remove-tree` fallback is for a supervisor that never
/// started or did not finish (and recovery repeats it at the next start).
fn teardown(
    layout: &Layout,
    store: &Store,
    gen: &mut Generation,
    supervisor: Option<&mut Supervisor>,
    input: &CoordinatorInput,
) {
    // Trust material is withdrawn before anything else is stopped.
    crate::trust::withdraw(&crate::trust::pin_path(&layout.run()));
    let _ = set_phase(store, gen, Phase::Stopping);
    lazaret_helpers::fault::point("coordinator:teardown-stopping");
    let mut removed = false;
    if let Some(sup) = supervisor {
        // Stopping the holder takes up to 20 s before it is killed.
        let answered = sup
            .link
            .as_ref()
            .and_then(|l| l.stop(Duration::from_secs(45)));
        removed = answered == Some(true);
        // Only while it is unreaped may its PID be signalled.
        if answered.is_none() && matches!(sup.child.try_wait(), Ok(None)) {
            log("the Runtime Supervisor did not answer the stop request: sending SIGTERM");
            let pid = nix::unistd::Pid::from_raw(sup.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let child = &mut sup.child;
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    log("the Runtime Supervisor did not stop in 30 s: killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => {
                    sup.helpers.drain();
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    lazaret_helpers::fault::point("coordinator:teardown-supervisor-ended");
    if !removed {
        remove_run_dir(layout, &input.libexec);
    }
    // Unmounted: the image may go now.
    crate::lease::release(input, gen.number);
    lazaret_helpers::fault::point("coordinator:teardown-lease-released");
    gen.supervisor = None;
    gen.holder = None;
    let _ = set_phase(store, gen, Phase::Stopped);
    log(format!("generation {} stopped", gen.number));
}

/// Records `gen` in phase `to` in the Domain Store, then in the log.
fn set_phase(store: &Store, gen: &mut Generation, to: Phase) -> Result<(), StartError> {
    let from = gen.phase;
    gen.phase = to;
    store.set_generation(gen)?;
    record(Event::Phase {
        generation: gen.number,
        from,
        to,
    });
    Ok(())
}

pub use lazaret_state::remove::remove_tree;

/// The run directory holds the root overlay's upper.
fn remove_run_dir(layout: &Layout, libexec: &Path) {
    let run = layout.run();
    if run.exists() {
        if let Err(e) = remove_tree(libexec, &run) {
            log(e);
        }
    }
}

/// Recovery after an interrupted generation (FR-7): nothing is assumed to
/// have disappeared with its owner. Processes are killed by (pid, start
/// time); the PID namespace of the holder takes every sandbox process with
/// it; transient files are removed.
fn recover(
    layout: &Layout,
    store: &Store,
    previous: Option<&Generation>,
    libexec: &Path,
) -> Result<(), StartError> {
    let Some(prev) = previous else {
        remove_run_dir(layout, libexec);
        return Ok(());
    };
    if prev.phase != Phase::Stopped {
        log(format!(
            "recovering generation {} left in phase {:?}",
            prev.number, prev.phase
        ));
        for (pid, start) in [prev.holder, prev.supervisor].into_iter().flatten() {
            if procs::alive(pid, start) {
                if let Ok(fd) = procs::pidfd(pid) {
                    if procs::alive(pid, start) {
                        log(format!("killing stale process {pid}"));
                        procs::kill_pidfd(&fd);
                        wait_gone(pid, start);
                    }
                }
            }
        }
    }
    remove_run_dir(layout, libexec);
    let mut g = prev.clone();
    g.phase = Phase::Stopped;
    g.supervisor = None;
    g.holder = None;
    if &g == prev {
        // A clean stop recorded it so already: no write (and no fsync).
        return Ok(());
    }
    store.set_generation(&g)?;
    if prev.phase != Phase::Stopped {
        record(Event::Recovered {
            generation: prev.number,
            from: prev.phase,
        });
    }
    Ok(())
}

fn wait_gone(pid: i32, start: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs::alive(pid, start) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod sudo_tests {
    use super::SUDO_SCRIPT;
    use std::os::unix::fs::PermissionsExt;

    /// `sudo ARGS` with a `lazaret-sudo` that prints what it was given, one
    /// word a line, and an `id` that says uid 1000, name agent: the
    /// command line Lazaret's sudo builds, and its exit status.
    fn sudo(args: &[&str]) -> (String, String, i32) {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path();
        let tool = |name: &str, body: &str| {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        tool("lazaret-sudo", "printf '%s\\n' \"$@\"");
        tool(
            "id",
            "case $1 in -un) echo agent;; -u) echo 1000;; -g) echo 1000;; esac",
        );
        let script = SUDO_SCRIPT.replace(
            "/.lazaret/bin/lazaret-sudo",
            &bin.join("lazaret-sudo").display().to_string(),
        );
        assert_ne!(
            script, SUDO_SCRIPT,
            "the script no longer asks lazaret-sudo"
        );
        std::fs::write(bin.join("sudo"), script).unwrap();
        let out = std::process::Command::new("/bin/sh")
            .arg(bin.join("sudo"))
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("SHELL", "/bin/zsh")
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.code().unwrap_or(-1),
        )
    }

    const ROOT: &str = "--run\n--\nenv\n";
    const RESET: &str = "HOME=/root\nUSER=root\nLOGNAME=root\n";
    const SUDO_VARS: &str = "SUDO_USER=agent\nSUDO_UID=1000\nSUDO_GID=1000\n";

    #[test]
    fn a_command_runs_as_root_with_roots_home_and_sudos_variables() {
        let (out, err, code) = sudo(&["apt-get", "install", "-y", "make"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            out,
            format!("{ROOT}{RESET}{SUDO_VARS}apt-get\ninstall\n-y\nmake\n")
        );
        // -E keeps the caller's environment; -n asks nothing anyway;
        // grouped short options and -u root are taken.
        let (out, _, code) = sudo(&["-nE", "-u", "root", "--", "FOO=bar", "make", "-j2"]);
        assert_eq!(code, 0);
        assert_eq!(out, format!("{ROOT}{SUDO_VARS}FOO=bar\nmake\n-j2\n"));
        let (out, _, _) = sudo(&["-uroot", "true"]);
        assert_eq!(out, format!("{ROOT}{RESET}{SUDO_VARS}true\n"));
    }

    #[test]
    fn shells_take_the_words_quoted_as_their_command() {
        let (out, _, code) = sudo(&["-s", "echo", "a b", "it's"]);
        assert_eq!(code, 0);
        assert_eq!(
            out,
            format!("{ROOT}{RESET}{SUDO_VARS}/bin/zsh\n-c\n'echo' 'a b' 'it'\\''s'\n")
        );
        let (out, _, _) = sudo(&["-i"]);
        assert!(
            out.ends_with("cd /root 2>/dev/null || cd /; exec \"$0\" -l \"$@\"\n/bin/sh\n")
                || out
                    .ends_with("cd /root 2>/dev/null || cd /; exec \"$0\" -l \"$@\"\n/bin/bash\n"),
            "{out}"
        );
    }

    #[test]
    fn other_users_unknown_options_and_no_command_are_refused() {
        for args in [
            &["-u", "nobody", "true"][..],
            &["--user=postgres", "true"],
            &["-x", "true"],
            &["--askpass", "true"],
            &[],
            &["FOO=bar"],
            &["-u"],
        ] {
            let (out, err, code) = sudo(args);
            assert_eq!(code, 1, "{args:?}: {out}");
            assert!(out.is_empty(), "{args:?} ran: {out}");
            assert!(
                err.starts_with("sudo: ") || err.starts_with("usage: sudo"),
                "{err}"
            );
        }
    }
}

#[cfg(test)]
mod static_client_tests {
    use super::{ESCALATE_STATIC, PORT_RELAY_STATIC, SUDO_STATIC};

    /// An ELF executable that asks for no program interpreter (no
    /// `PT_INTERP`) and has no dynamic section needing libraries runs
    /// without a C library in the image.
    #[test]
    fn the_embedded_binaries_are_static() {
        for b in [ESCALATE_STATIC, PORT_RELAY_STATIC, SUDO_STATIC] {
            assert_static(b);
        }
    }

    fn assert_static(b: &[u8]) {
        assert_eq!(&b[..4], b"\x7fELF", "not an ELF file");
        assert_eq!(b[4], 2, "not 64-bit");
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
        let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
        for i in 0..phnum {
            let p_type = u32::from_le_bytes(b[phoff + i * phentsize..][..4].try_into().unwrap());
            assert_ne!(
                p_type, 3,
                "an embedded binary has a PT_INTERP: it is dynamically linked"
            );
        }
    }
}

/// The host CA bundle in the control directory, and where it is inside.
pub const HOST_CA_NAME: &str = "host-ca.pem";
pub const HOST_CA_PATH: &str = "/.lazaret/host-ca.pem";

/// The variables that make common TLS stacks trust [`HOST_CA_PATH`]:
/// OpenSSL and what uses it (curl, Python's ssl, Git), Python requests,
/// pip, Node.js (in addition to its own roots).
pub const HOST_CA_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
];

/// Git's system-level configuration inside (`GIT_CONFIG_SYSTEM`, so the
/// repository's and the sandbox's own configuration still win).
pub const GIT_IDENTITY_CONFIG: &str = "/.lazaret/gitconfig";

/// Git's system-level configuration for the sandbox: the identity, a
/// stat check that agrees with the host's index, then the image's own
/// `/etc/gitconfig` (included after, so it wins over ours as it would at
/// the same level).
///
/// `core.checkStat = minimal`: the host and the sandbox see the same
/// files under other owners (you, and root inside), so Git's default
/// check, which compares owners, takes every entry the other side wrote
/// as changed and reads every file again: each side's first `git status`
/// after the other's would re-read the whole tree and rewrite every entry.
/// With the minimal check (modification and change times, size, mode),
/// an entry stays valid on both sides. It weakens nothing on the host:
/// the index the host gets keeps only entries it vouched for (see the
/// mount router's `index` module), and host Git checks with its own
/// settings.
pub fn git_identity_config(id: &(Option<String>, Option<String>)) -> String {
    // Quoted, with Git's escapes; the values are one line (checked by the
    // CLI), so this is all a value needs.
    let quote = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
    let mut text = String::from(
        "# Written by Lazaret: Git's system configuration inside this sandbox.\n[core]\n\tcheckStat = minimal\n",
    );
    if id.0.is_some() || id.1.is_some() {
        text.push_str("[user]\n");
    }
    if let Some(n) = &id.0 {
        text.push_str(&format!("\tname = {}\n", quote(n)));
    }
    if let Some(e) = &id.1 {
        text.push_str(&format!("\temail = {}\n", quote(e)));
    }
    text.push_str("[include]\n\tpath = /etc/gitconfig\n");
    text
}

#[cfg(test)]
mod git_identity_tests {
    use super::git_identity_config;

    #[test]
    fn values_are_quoted_and_the_image_config_still_wins() {
        let none = git_identity_config(&(None, None));
        assert!(
            !none.contains("[user]") && none.contains("checkStat = minimal"),
            "{none}"
        );
        let t = git_identity_config(&(Some(r#"A "B" \C"#.into()), None));
        assert!(t.contains("\tname = \"A \\\"B\\\" \\\\C\"\n"), "{t}");
        assert!(!t.contains("email"));
        assert!(t.ends_with("[include]\n\tpath = /etc/gitconfig\n"));
    }
}
