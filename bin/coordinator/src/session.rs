//! Client Sessions: one thread per session relays between the client's
//! socket and a non-detached `runsc exec` run by an exec bridge, on a
//! coordinator-owned PTY (FR-14) or on pipes that keep stdout and stderr
//! apart. The Runtime Supervisor starts each bridge on our request (the
//! coordinator is never `runsc`'s parent, so that it can be confined): we
//! hand it the PTY slave or the pipes' far ends and get the bridge's pidfd
//! back, for signals.

use crate::escalation::{self, Client, Escalations, Replies, SessionEntry, Terminal};
use crate::gate::Gate;
use crate::lifecycle::{log, record};
use crate::supervisor_link::{wait_exit, BridgeEvent, BridgeExit, Link};
use lazaret_helpers::sync::lock;
use lazaret_protocol::escalation::paths as esc_paths;
use lazaret_protocol::frame::{read_frame, write_frame, FrameError};
use lazaret_protocol::lifecycle::Event;
use lazaret_protocol::logs::{SessionEnd, SessionLog};
use lazaret_protocol::plan::CoordinatorInput;
use lazaret_protocol::session::{
    ClientMsg, Control, DomainStatus, Hello, ServerMsg, Signal, WorkdirFrom, PROTOCOL_VERSION,
};
use lazaret_protocol::supervisor::{ExitStatus, MemoryBound, SessionProcess};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a connection's session ended in error; the coordinator logs it as
/// `session ID: MESSAGE`.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The client was sent `Refused` with this reason (the protocol's
    /// text).
    #[error("{0}")]
    Refused(String),
    /// The connection itself (its mode, a copy of it, its timeouts).
    #[error("{0}")]
    Io(std::io::Error),
    /// The `Hello`, or the answer to a control request.
    #[error("{0}")]
    Frame(FrameError),
    #[error("the Domain is stopping: a session was turned away")]
    Stopping,
    #[error("{0}")]
    Random(getrandom::Error),
    #[error("openpty: {0}")]
    OpenPty(nix::errno::Errno),
    #[error("cannot create the session's pipes: {0}")]
    Pipes(rustix::io::Errno),
    /// The supervisor did not start the session's exec bridge.
    #[error("{0}")]
    Bridge(crate::supervisor_link::LinkError),
    #[error("the attaching terminal went away")]
    TerminalGone,
}

/// Why a connection is not the developer's own.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{0}")]
    Credentials(rustix::io::Errno),
    #[error("peer uid {uid} is not ours")]
    NotOurs { uid: u32 },
}

/// Why a client's session variables are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvRefusal {
    #[error("the session's variables are over the bound ({count} variables, {bytes} bytes)")]
    OverBound { count: usize, bytes: usize },
    /// `name` is shown escaped.
    #[error("the session variable {name} cannot be given")]
    Refused { name: String },
}

pub struct SessionCtx {
    /// Authenticates every control connection (SR-9).
    pub trust: crate::trust::ControlTrust,
    input: CoordinatorInput,
    run_dir: PathBuf,
    link: Arc<Link>,
    active: AtomicUsize,
    /// Exec bridges' pidfds of live sessions, by Session ID, to end them at
    /// teardown.
    bridges: Mutex<HashMap<String, Arc<OwnedFd>>>,
    pub escalations: Arc<Escalations>,
    /// Client Sessions admitted whose command has not ended (control
    /// requests and attached terminals are not; see [`Counted`]).
    sessions: AtomicUsize,
    /// Held while one Client Session is admitted, so that none is admitted
    /// into a Domain another connection stops for its new configuration.
    admit: Mutex<()>,
    /// Whether any Client Session was ever served.
    served: std::sync::atomic::AtomicBool,
    /// Set by `lazaret stop` (as by SIGTERM): the serve loop ends.
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// This generation, for `lazaret ps` (`sessions` is filled in).
    status: lazaret_protocol::session::DomainStatus,
    /// A pidfd of the sandbox holder: readable once the sandbox is gone.
    holder: Arc<OwnedFd>,
    /// Live Client Sessions, for `lazaret ps` and `lazaret attach`.
    live: Mutex<HashMap<String, Live>>,
    /// Detached sessions that ended, oldest first, until `lazaret attach`
    /// collects them (at most [`crate::attach::MAX_ENDED`]).
    ended: Mutex<std::collections::VecDeque<(String, Live)>>,
    /// What each open connection is doing, by connection ID (for the log
    /// when connections keep a Domain without sessions up).
    stages: Mutex<HashMap<String, &'static str>>,
}

/// A live Client Session as `lazaret ps` and `lazaret attach` see it.
#[derive(Clone)]
pub struct Live {
    /// The command as the client gave it.
    argv: Option<Vec<String>>,
    since_unix_ms: u64,
    writer: Writer,
    /// `Some` for a session on a PTY: where an attached terminal's input
    /// goes, and its replies.
    pty: Option<PtyEnd>,
}

#[derive(Clone)]
struct PtyEnd {
    master: Arc<std::fs::File>,
    replies: Replies,
    bridge: Arc<OwnedFd>,
    /// Set when the session is hung up because its client went away (for
    /// the `session ID ended` log line).
    hung_up: Arc<std::sync::atomic::AtomicBool>,
}

impl SessionCtx {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        trust: crate::trust::ControlTrust,
        input: CoordinatorInput,
        run_dir: PathBuf,
        link: Arc<Link>,
        escalations: Arc<Escalations>,
        stop: Arc<std::sync::atomic::AtomicBool>,
        status: lazaret_protocol::session::DomainStatus,
        holder: Arc<OwnedFd>,
    ) -> Self {
        Self {
            trust,
            input,
            run_dir,
            link,
            active: AtomicUsize::new(0),
            bridges: Mutex::new(HashMap::new()),
            escalations,
            sessions: AtomicUsize::new(0),
            admit: Mutex::new(()),
            served: std::sync::atomic::AtomicBool::new(false),
            stop,
            status,
            holder,
            live: Mutex::new(HashMap::new()),
            ended: Mutex::new(std::collections::VecDeque::new()),
            stages: Mutex::new(HashMap::new()),
        }
    }

    /// One [`SessionInfo`] per live session and per ended detached one.
    ///
    /// [`SessionInfo`]: lazaret_protocol::session::SessionInfo
    fn session_list(&self) -> Vec<lazaret_protocol::session::SessionInfo> {
        use lazaret_protocol::session::SessionInfo;
        let info = |id: &str, l: &Live| {
            let w = lock(&l.writer);
            SessionInfo {
                id: id.to_string(),
                argv: l.argv.clone(),
                attached: w.is_attached(),
                detachable: w.is_detachable(),
                since_unix_ms: l.since_unix_ms,
                exit_status: match w.ended() {
                    Some(ServerMsg::Exit { status }) => Some(*status),
                    _ => None,
                },
                failed: matches!(w.ended(), Some(ServerMsg::Failed { .. })),
            }
        };
        let mut v: Vec<SessionInfo> = lock(&self.live).iter().map(|(id, l)| info(id, l)).collect();
        v.extend(lock(&self.ended).iter().map(|(id, l)| info(id, l)));
        v.sort_by_key(|i| i.since_unix_ms);
        v
    }

    /// Whether the sandbox holder has exited (the sandbox is gone), waiting
    /// up to `grace` for it.
    fn holder_gone_within(&self, grace: Duration) -> bool {
        lazaret_helpers::pidfd::exited_within(&*self.holder, grace)
    }

    /// The open connections by what they are doing, for the log.
    pub fn connections_summary(&self) -> String {
        let stages = escalation::lock(&self.stages);
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for s in stages.values() {
            *counts.entry(s).or_default() += 1;
        }
        counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn stage(&self, conn: &str, stage: &'static str) {
        let mut stages = escalation::lock(&self.stages);
        stages.insert(conn.to_string(), stage);
    }

    /// Connections being served (sessions and control requests).
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Whether any Client Session was ever served (a control request,
    /// such as `lazaret ps`, is none: it never makes a Domain in its first
    /// session's grace period stop).
    /// The profile's `keep_alive`: how long the Domain waits after its last
    /// session ended.
    pub fn keep_alive(&self) -> Option<Duration> {
        self.input.keep_alive_ms.map(Duration::from_millis)
    }

    /// Client Sessions now served (control requests and attaches are not).
    pub fn sessions_now(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }

    pub fn served(&self) -> bool {
        self.served.load(Ordering::SeqCst)
    }

    /// Ends every live session (teardown).
    pub fn end_all(&self) {
        for pidfd in lock(&self.bridges).values() {
            let _ =
                lazaret_helpers::pidfd::send_signal(pidfd.as_ref(), rustix::process::Signal::KILL);
        }
    }
}

/// Only the developer's own processes may connect (SR-10); the socket's
/// directory is private too, this is the second check.
pub fn peer_is_us(stream: &UnixStream) -> Result<(), PeerError> {
    let cred = rustix::net::sockopt::socket_peercred(stream).map_err(PeerError::Credentials)?;
    if cred.uid != rustix::process::getuid() {
        return Err(PeerError::NotOurs {
            uid: cred.uid.as_raw(),
        });
    }
    Ok(())
}

pub const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/.lazaret/bin";

/// The environment of sandbox processes: a fixed base, the profile's
/// `env`, then the session's terminal type.
pub fn base_env(input: &CoordinatorInput, term: Option<&str>) -> Vec<String> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), "/root".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("LAZARET_PROFILE".into(), input.profile_name.clone()),
        ("LAZARET_DOMAIN".into(), input.domain_id.clone()),
    ];
    env.push((
        "GIT_CONFIG_SYSTEM".into(),
        crate::lifecycle::GIT_IDENTITY_CONFIG.into(),
    ));
    if input.host_ca.is_some() {
        for k in crate::lifecycle::HOST_CA_ENV {
            env.push(((*k).into(), crate::lifecycle::HOST_CA_PATH.into()));
        }
    }
    for (k, v) in &input.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    if let Some(t) = term {
        env.retain(|(k, _)| k != "TERM");
        env.push(("TERM".into(), t.into()));
    }
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The sandbox user's uid and gid for the mount routers, when the profile
/// has a `user`.
pub fn inside_owner(input: &CoordinatorInput) -> Option<(u32, u32)> {
    use lazaret_protocol::plan::SANDBOX_USER_ID;
    input
        .user
        .as_ref()
        .map(|_| (SANDBOX_USER_ID, SANDBOX_USER_ID))
}

/// Makes the profile's `user` (its name in `$1`, checked by the
/// configuration to be a plain POSIX name) if the image or an earlier
/// session has not: first in `/etc/passwd` and `/etc/group`, so that
/// uid 1000 is its name even where the image has a uid-1000 user of its
/// own (they then share the uid); no `/etc/shadow` entry (no password:
/// `sudo` asks none). Its home is beneath the `/home` State Anchor, so it
/// persists; `sudo` for it asks nothing. Then the command runs as it
/// (`setpriv`, util-linux), with the sandbox's capabilities left only in
/// the bounding set: Lazaret's `sudo` (`sudo.sh`, first on `PATH`) asks
/// `lazaret-sudo`'s service, root inside; the image's own set-user-ID sudo
/// works where runsc runs those.
const AS_USER: &str = r#"u=$1; shift; id=1000
if ! grep -q "^$u:" /etc/passwd; then
  sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash
  { echo "$u:x:$id:$id::/home/$u:$sh"; cat /etc/passwd; } > /etc/passwd.lazaret && cat /etc/passwd.lazaret > /etc/passwd && rm -f /etc/passwd.lazaret || exit 125
fi
if ! grep -q "^$u:" /etc/group; then
  { echo "$u:x:$id:"; cat /etc/group; } > /etc/group.lazaret && cat /etc/group.lazaret > /etc/group && rm -f /etc/group.lazaret || exit 125
fi
if [ ! -d "/home/$u" ]; then mkdir -p "/home/$u" && chown "$id:$id" "/home/$u" && chmod 0755 "/home/$u" || exit 125; fi
if [ -d /etc/sudoers.d ] && [ ! -f /etc/sudoers.d/lazaret-agent ]; then
  echo "$u ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/lazaret-agent && chmod 0440 /etc/sudoers.d/lazaret-agent
fi
command -v setpriv >/dev/null 2>&1 || { echo "lazaret: the image has no setpriv (util-linux): the profile's user cannot be taken" >&2; exit 125; }
exec setpriv --reuid="$id" --regid="$id" --init-groups -- "$@""#;

/// `argv` run as the profile's `user` (see [`AS_USER`]).
fn as_user(user: &str, argv: Vec<String>) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        AS_USER.into(),
        "lazaret".into(),
        user.into(),
    ];
    v.extend(argv);
    v
}

/// The session's environment for the profile's `user`: its `HOME`,
/// `USER` and `LOGNAME`, unless the profile or the session set them.
fn user_env(user: &str, mut env: Vec<String>) -> Vec<String> {
    for (k, v) in [
        ("HOME", format!("/home/{user}")),
        ("USER", user.to_owned()),
        ("LOGNAME", user.to_owned()),
    ] {
        let prefix = format!("{k}=");
        if k == "HOME" {
            // The base `HOME` is root's; replace it unless the profile's.
            env.retain(|e| e != "HOME=/root");
        }
        if !env.iter().any(|e| e.starts_with(&prefix)) {
            env.push(format!("{k}={v}"));
        }
    }
    env
}

/// The argv run in the sandbox. No command means an interactive login
/// shell. Both start in `workdir` (an absolute path beneath `/workspace`,
/// from [`lazaret_protocol::session::sandbox_workdir`]). When it is not a
/// directory inside, `from` decides: a directory named with `-w` fails the
/// session with 125 before anything runs; the directory `lazaret` runs in
/// starts the session in `/workspace` with a note, which names Ignored
/// Workspace State only when the host's rules ignore the directory (the
/// CLI checked). A command in
/// `/workspace` (the process's `cwd`) is run as it is: one exec less
/// inside gVisor, about 10 ms of a 50 ms session; when runsc cannot invoke
/// it, [`not_invokable`] gives the 127 or 126 a shell would. In another
/// directory it goes through `sh -c 'cd ...; exec "$@"'`.
///
/// `term` is the session's terminal type, when it has a terminal: unless
/// every Debian image knows it ([`COMMON_TERMS`]), the script checks that
/// the image has its terminfo (`tput`), and else sets
/// `TERM=xterm-256color` with a one-line note, so `tput`, `less` and
/// editors work under kitty, alacritty or ghostty too. An image without
/// `tput` is left as it is.
pub fn sandbox_argv(
    argv: Option<&[String]>,
    workdir: &str,
    from: WorkdirFrom,
    term: Option<&str>,
) -> Vec<String> {
    let check_term = term.is_some_and(|t| !COMMON_TERMS.contains(&t));
    if let (Some(argv), "/workspace", false) = (argv, workdir, check_term) {
        if !argv.is_empty() {
            return argv.to_vec();
        }
    }
    let mut v: Vec<String> = vec!["/bin/sh".into(), "-c".into()];
    // The directory comes in `WORKDIR_ENV` (see `workdir_env`), never
    // inside the script, so no byte of it is interpreted by the shell;
    // the terminal type is in `TERM`, likewise.
    let mut pre = if check_term {
        format!(
            "if command -v tput >/dev/null 2>&1 && ! tput -T \"$TERM\" longname >/dev/null 2>&1; then echo \"lazaret: note: the image has no terminfo for TERM=$TERM: using TERM={FALLBACK_TERM}\" >&2; TERM={FALLBACK_TERM}; export TERM; fi; "
        )
    } else {
        String::new()
    };
    let w = WORKDIR_ENV;
    let missing = match from {
        WorkdirFrom::Option => format!(
            "{{ echo \"lazaret: -w ${w}: no such directory in the sandbox\" >&2; exit 125; }}"
        ),
        WorkdirFrom::CwdIgnored => format!(
            "echo \"lazaret: note: ${w} is Git-ignored on the host and not in the sandbox (Git-ignored paths are the sandbox's own Ignored Workspace State): starting in /workspace\" >&2"
        ),
        WorkdirFrom::Cwd => format!(
            "echo \"lazaret: note: ${w} is not in the sandbox: starting in /workspace\" >&2"
        ),
    };
    if workdir != "/workspace" {
        pre.push_str(&format!(
            "cd -- \"${w}\" 2>/dev/null || {missing}; unset {w}; "
        ));
    }
    match argv {
        Some(argv) => {
            v.push(format!("{pre}exec \"$@\""));
            v.push("lazaret".into());
            v.extend(argv.iter().cloned());
        }
        None => v.push(format!(
            "{pre}if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"
        )),
    }
    v
}

/// The terminal type a session gets when the image has no terminfo for
/// the host's.
pub const FALLBACK_TERM: &str = "xterm-256color";

/// Terminal types whose terminfo every Debian image has (`ncurses-base`):
/// a session with one of these is not checked.
pub const COMMON_TERMS: &[&str] = &[
    "dumb",
    "linux",
    "vt100",
    "vt102",
    "vt220",
    "ansi",
    "xterm",
    "xterm-color",
    "xterm-256color",
    "screen",
    "screen-256color",
];

/// A client's session variables, checked again here (the CLI checks them
/// first): names the kernel accepts, none of Lazaret's own, no NUL, within
/// [`SessionEnv`]'s bounds.
pub fn check_session_env(e: &lazaret_protocol::session::SessionEnv) -> Result<(), EnvRefusal> {
    use lazaret_protocol::session::SessionEnv;
    let bytes: usize = e.0.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if e.0.len() > SessionEnv::MAX_VARS || bytes > SessionEnv::MAX_BYTES {
        return Err(EnvRefusal::OverBound {
            count: e.0.len(),
            bytes,
        });
    }
    for (k, v) in &e.0 {
        let bad_name =
            !lazaret_protocol::session::env_name_is_valid(k) || k.starts_with("LAZARET_");
        if bad_name || v.contains('\0') {
            return Err(EnvRefusal::Refused {
                name: lazaret_protocol::display::escape(k.as_bytes()),
            });
        }
    }
    Ok(())
}

/// Carries the session's starting directory to [`sandbox_argv`]'s script.
pub const WORKDIR_ENV: &str = "LAZARET_WORKDIR";

/// The `WORKDIR_ENV` entry for `workdir`, when it is not `/workspace`.
pub fn workdir_env(workdir: &str) -> Option<String> {
    (workdir != "/workspace").then(|| format!("{WORKDIR_ENV}={workdir}"))
}

/// One accepted connection's place in [`SessionCtx`]: counted in `active`
/// and named in the stage map from before its thread starts until it ends.
struct Guard {
    ctx: Arc<SessionCtx>,
    id: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        lock(&self.ctx.bridges).remove(&self.id);
        self.ctx.link.forget(&self.id);
        escalation::lock(&self.ctx.stages).remove(&self.id);
        self.ctx.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A Client Session's place in [`SessionCtx`]'s `sessions`, given back
/// once: when its command has ended, before its client is told how (see
/// [`finish_session`]), or when the connection ends. Given back before the
/// client learns the status, a `lazaret run` started right after it finds
/// the Domain done serving (it starts a new one, with the configuration
/// as it is now), not a session still counted.
struct Counted<'a> {
    count: &'a AtomicUsize,
    given_back: std::sync::atomic::AtomicBool,
}

impl<'a> Counted<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Counted {
            count,
            given_back: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn give_back(&self) {
        if !self.given_back.swap(true, Ordering::SeqCst) {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

pub fn spawn(ctx: Arc<SessionCtx>, stream: UnixStream) {
    let mut id = [0u8; 16];
    if let Err(e) = getrandom::getrandom(&mut id) {
        log(format!("refused a control connection: no Session ID: {e}"));
        return;
    }
    // Counted and staged before the thread starts, so that the serve loop
    // never sees a moment with an accepted connection and no active
    // session, and every counted connection is named in the stage map
    // (what the lingering note lists). A thread that cannot start drops
    // its closure, and with it the Guard.
    ctx.active.fetch_add(1, Ordering::SeqCst);
    let guard = Guard {
        ctx: ctx.clone(),
        id: hex::encode(id),
    };
    ctx.stage(&guard.id, "starting");
    let started = std::thread::Builder::new()
        .name(format!("conn-{}", &guard.id[..8]))
        .spawn(move || {
            let guard = guard;
            ctx.stage(&guard.id, "authenticating");
            let stream = match ctx.trust.accept(stream, &guard.id) {
                Ok(s) => {
                    ctx.stage(&guard.id, "before its first request");
                    lazaret_helpers::timeline::mark("coordinator", "session-authenticated");
                    s
                }
                Err(e) => {
                    log(format!(
                        "refused a control connection (Session ID {}): {e}",
                        &guard.id[..8]
                    ));
                    return;
                }
            };
            if let Err(e) = serve(&ctx, &guard.id, stream) {
                log(format!("session {}: {e}", &guard.id[..8]));
            }
        });
    if let Err(e) = started {
        log(format!(
            "refused a control connection: no thread for it: {e}"
        ));
    }
}

fn serve(ctx: &SessionCtx, sid: &str, stream: UnixStream) -> Result<(), SessionError> {
    let (hello, reader) = read_hello(&stream)?;
    // A session on a PTY outlives its terminal when it was started
    // detached, or when the profile says a hang-up detaches it.
    let detachable = hello.tty.is_some()
        && (hello.detach || ctx.input.detach_on_hangup)
        && hello.attach.is_none();
    let writer: Writer = Arc::new(Mutex::new(if detachable {
        Sink::detachable(stream)
    } else {
        Sink::attached(stream)
    }));
    if hello.version != PROTOCOL_VERSION {
        return refuse(&writer, format!(
            "protocol version {} is not {PROTOCOL_VERSION}: the running Domain was started by another version of lazaret; end its sessions first",
            hello.version
        ));
    }
    if let Some(c) = hello.control {
        ctx.stage(sid, "answering a control request");
        let answer = answer_control(ctx, c);
        return write_frame(&mut *lock(&writer), &answer).map_err(SessionError::Frame);
    }
    if let Some(a) = hello.attach {
        ctx.stage(sid, "attached terminal");
        return attach(ctx, sid, a, reader, writer);
    }
    let counted = match admit(ctx, &hello) {
        Ok(c) => c,
        Err(Admission::Refused(why)) => return refuse(&writer, why),
        // Closed before `Accepted`: the CLI leads a new start-up once this
        // Domain is down, instead of joining a sandbox that is gone.
        Err(Admission::Stopping) => return Err(SessionError::Stopping),
    };
    ctx.stage(sid, "Client Session");
    let tty = hello.tty.clone();
    // The session's own variables (`lazaret run -e`, `pass_env`) win over
    // the profile's; Lazaret's own names stay Lazaret's. They reach runsc
    // in a sealed memfd only, and are never logged (names or values).
    if let Err(why) = check_session_env(&hello.env) {
        return refuse(&writer, why.to_string());
    }
    let workdir = lazaret_protocol::session::sandbox_workdir(hello.workdir.as_deref());
    let (env, anchor) = session_env(ctx, sid, &hello, &workdir)?;
    let (entry, gate, replies) = session_entry(&writer, anchor, tty.is_some());
    let (_registration, notice) = Registration::new(ctx, sid, entry);
    let (bridge, latch) = session_bridge(ctx, (sid, &counted), &hello, &workdir, env);

    // The first record is Accepted; a notice (no Host Escalation in this
    // Domain any more) follows it.
    let accepted: Vec<ServerMsg> = std::iter::once(ServerMsg::Accepted {
        session_id: sid.to_string(),
    })
    .chain(notice.map(|n| ServerMsg::Stderr(n.into_bytes())))
    .collect();
    match tty {
        Some(t) => run_pty(
            ctx,
            bridge,
            (t.rows, t.cols),
            reader,
            writer,
            accepted,
            (gate, replies),
            latch,
        ),
        None => run_pipes(ctx, bridge, reader, writer, accepted, latch, replies),
    }
}

/// The session's entry in the Domain (its client and, on a terminal, the
/// gate and prompt lock its Host Escalation prompts use), with the gate and
/// the replies the session's own loop shares with it.
fn session_entry(
    writer: &Writer,
    anchor: [u8; 32],
    terminal: bool,
) -> (SessionEntry, Arc<Gate>, Replies) {
    let gate = Arc::new(Gate::default());
    let replies = Replies::default();
    let entry = SessionEntry {
        anchor,
        client: Client {
            writer: writer.clone(),
            replies: replies.clone(),
        },
        terminal: terminal.then(|| Terminal {
            gate: gate.clone(),
            prompt_lock: Arc::new(Mutex::new(())),
        }),
        gone: Arc::new(std::sync::atomic::AtomicBool::new(false)),
    };
    (entry, gate, replies)
}

/// What the supervisor is asked to run for the session, and the latch that
/// holds its output until runsc has started it; the session is logged as
/// run.
fn session_bridge<'a>(
    ctx: &SessionCtx,
    (sid, counted): (&'a str, &'a Counted<'a>),
    hello: &Hello,
    workdir: &str,
    env: Vec<String>,
) -> (Bridge<'a>, Arc<StartLatch>) {
    let tty = hello.tty.as_ref();
    let argv = sandbox_argv(
        hello.argv.as_deref(),
        workdir,
        hello.workdir_from,
        tty.map(|t| t.term.as_str()),
    );
    let process = session_process(ctx, argv, env);
    // The supervisor has runsc write the pid file once the command's
    // process exists: until then, whatever comes out is runsc's own (see
    // `StartLatch`).
    let pid_file = ctx.run_dir.join("sessions").join(format!("{sid}.pid"));
    let latch = Arc::new(StartLatch::new(pid_file));
    log(SessionLog::Ran {
        session: sid.to_string(),
        argv: hello.argv.clone(),
        workdir: workdir.to_string(),
        terminal: tty.is_some(),
    });
    let bridge = Bridge {
        sid,
        counted,
        process,
        ending: Ending::new(sid),
        shown: hello.argv.clone(),
        detach: hello.detach,
    };
    (bridge, latch)
}

/// The connection's `Hello`, read within 10 s, and a blocking reader for
/// what follows it.
fn read_hello(stream: &UnixStream) -> Result<(Hello, UnixStream), SessionError> {
    stream.set_nonblocking(false).map_err(SessionError::Io)?;
    let mut reader = stream.try_clone().map_err(SessionError::Io)?;
    reader
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(SessionError::Io)?;
    let hello: Hello = read_frame(&mut reader).map_err(SessionError::Frame)?;
    lazaret_helpers::timeline::mark("coordinator", "session-hello");
    reader.set_read_timeout(None).map_err(SessionError::Io)?;
    Ok((hello, reader))
}

/// Tells the client why its session is refused, and ends the connection
/// with that reason.
fn refuse(writer: &Writer, reason: String) -> Result<(), SessionError> {
    let _ = write_frame(
        &mut *lock(writer),
        &ServerMsg::Refused {
            reason: reason.clone(),
        },
    );
    Err(SessionError::Refused(reason))
}

/// The answer to a control request (`lazaret ps`, `lazaret stop`).
fn answer_control(ctx: &SessionCtx, c: Control) -> ServerMsg {
    match c {
        Control::Status => ServerMsg::Status(DomainStatus {
            sessions: u32::try_from(ctx.sessions.load(Ordering::SeqCst)).unwrap_or(u32::MAX),
            session_list: ctx.session_list(),
            ..ctx.status.clone()
        }),
        Control::Stop => {
            log("asked to stop by lazaret stop");
            ctx.stop.store(true, Ordering::SeqCst);
            ServerMsg::Stopping
        }
    }
}

/// Why a Client Session is not admitted.
enum Admission {
    /// It cannot run in this Domain: the client is told why.
    Refused(String),
    /// The Domain is stopping: the client starts a new one once it is down.
    Stopping,
}

/// The start of the refusal of a session of another configuration.
const OTHER_CONFIGURATION: &str = "the Domain is running with a different configuration (the config file changed since it started)";

/// Admits a Client Session of `hello` into this Domain, counted until its
/// command ends, or says why not. A `hello` of another configuration is
/// refused while a Client Session runs; with none running (`keep_alive`
/// holds the Domain up, or its last session has just ended) the Domain
/// stops for it, so that its CLI starts one with the new configuration.
fn admit<'c>(ctx: &'c SessionCtx, hello: &Hello) -> Result<Counted<'c>, Admission> {
    if hello.detach && hello.tty.is_none() {
        return Err(Admission::Refused(
            "a detached session needs a terminal size (the CLI sends one)".into(),
        ));
    }
    let _one = lock(&ctx.admit);
    if hello.config_fingerprint != ctx.input.config_fingerprint {
        let running = ctx.sessions_now();
        if running != 0 {
            return Err(Admission::Refused(format!(
                "{OTHER_CONFIGURATION} and {running} session(s) still run in it (`lazaret ps`): end them, or wait for them to end, then run again"
            )));
        }
        let ended = lock(&ctx.ended).len();
        if ended != 0 {
            return Err(Admission::Refused(format!(
                "{OTHER_CONFIGURATION} and keeps what {ended} ended detached session(s) wrote (`lazaret ps`): collect it with `lazaret attach`, or `lazaret stop` the Domain, then run again"
            )));
        }
        if !ctx.stop.swap(true, Ordering::SeqCst) {
            log("a session came with another configuration and no Client Session runs: stopping, so that its CLI starts the Domain with that configuration");
        }
        return Err(Admission::Stopping);
    }
    if let Some(why) = unpublished(&hello.ports, &ctx.input.network.ports) {
        return Err(Admission::Refused(why));
    }
    if ctx.stop.load(Ordering::SeqCst)
        || ctx.link.is_closed()
        || ctx.holder_gone_within(Duration::ZERO)
    {
        return Err(Admission::Stopping);
    }
    ctx.served.store(true, Ordering::SeqCst);
    Ok(Counted::new(&ctx.sessions))
}

/// The session's environment (the profile's, then the session's own
/// variables, then its identity and working directory) and its Session
/// Anchor: given only to this session's processes, it binds their
/// escalation requests to this session (FR-10).
fn session_env(
    ctx: &SessionCtx,
    sid: &str,
    hello: &Hello,
    workdir: &str,
) -> Result<(Vec<String>, [u8; 32]), SessionError> {
    let tty = hello.tty.as_ref();
    let mut env = base_env(&ctx.input, tty.map(|t| t.term.as_str()));
    for (k, v) in &hello.env.0 {
        let prefix = format!("{k}=");
        env.retain(|e| !e.starts_with(&prefix));
        env.push(format!("{k}={v}"));
    }
    let mut anchor = [0u8; 32];
    getrandom::getrandom(&mut anchor).map_err(SessionError::Random)?;
    env.push(format!("{}={sid}", esc_paths::SESSION_ID_ENV));
    env.push(format!(
        "{}={}",
        esc_paths::SESSION_ANCHOR_ENV,
        hex::encode(anchor)
    ));
    env.extend(workdir_env(workdir));
    Ok((env, anchor))
}

/// What the session runs inside: as the profile's user where it has one.
fn session_process(ctx: &SessionCtx, argv: Vec<String>, env: Vec<String>) -> SessionProcess {
    match &ctx.input.user {
        Some(user) => SessionProcess {
            argv: as_user(user, argv),
            env: user_env(user, env),
            cwd: "/workspace".into(),
            setuid: true,
        },
        None => SessionProcess {
            argv,
            env,
            cwd: "/workspace".into(),
            setuid: false,
        },
    }
}

/// Holds a session's output until runsc has started its command (runsc
/// writes `--pid-file` once the process exists). When runsc cannot start
/// it (a `/workspace` the sandbox can no longer reach, a stopped sandbox),
/// everything that came out is runsc's own diagnostics: it goes to the
/// coordinator log, and the developer gets a Lazaret error and exit 125
/// (`ServerMsg::Failed`) instead of runsc's raw text and its status 128.
pub struct StartLatch {
    pid_file: PathBuf,
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    started: bool,
    msgs: Vec<ServerMsg>,
    bytes: usize,
}

/// More held output than this is not runsc's diagnostics: the command runs.
const MAX_HELD_BYTES: usize = 256 * 1024;

impl StartLatch {
    pub fn new(pid_file: PathBuf) -> Self {
        Self {
            pid_file,
            state: Mutex::new(Held::default()),
        }
    }

    /// Whether runsc wrote the command's PID. An empty file is not enough:
    /// runsc creates it, then writes the PID, and on a full Domain Root
    /// that write fails; runsc then exits 128 with only its own
    /// diagnostics, which must not pass for the command's output.
    fn pid_written(&self) -> bool {
        std::fs::metadata(&self.pid_file).is_ok_and(|m| m.len() > 0)
    }

    /// Sends `msg` (after what was held) once the command has started;
    /// holds it until then. False when the client is gone.
    fn send(&self, w: &Writer, msg: ServerMsg) -> bool {
        let len = match &msg {
            ServerMsg::Stdout(d) | ServerMsg::Stderr(d) => d.len(),
            _ => 0,
        };
        let mut held = lock(&self.state);
        if !held.started && (held.bytes + len > MAX_HELD_BYTES || self.pid_written()) {
            held.started = true;
        }
        if !held.started {
            held.bytes += len;
            held.msgs.push(msg);
            return true;
        }
        for m in std::mem::take(&mut held.msgs) {
            if !send(w, &m) {
                return false;
            }
        }
        send(w, &msg)
    }

    /// Watches for the pid file while runsc runs, and sends what was held
    /// as soon as it appears (within a few milliseconds), so output held
    /// at the start never waits for the command's next output.
    fn watch(self: &Arc<Self>, w: &Writer) -> Arc<std::sync::atomic::AtomicBool> {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (latch, w, stop) = (self.clone(), w.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if latch.pid_written() {
                    let mut held = lock(&latch.state);
                    held.started = true;
                    for m in std::mem::take(&mut held.msgs) {
                        if !send(&w, &m) {
                            return;
                        }
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        done
    }

    /// After runsc has exited: `Ok(true)` when it had started the command
    /// (what was held is sent now); `Ok(false)` when it created the PID
    /// file but could not write it (what was held, the command's output
    /// and runsc's complaint, is sent too: the command may well have run);
    /// else the held bytes (runsc's diagnostics).
    fn finish(&self, w: &Writer) -> Result<bool, Vec<u8>> {
        let mut held = lock(&self.state);
        let written = held.started || self.pid_written();
        if written || self.pid_file.exists() {
            held.started = true;
            for m in std::mem::take(&mut held.msgs) {
                if !send(w, &m) {
                    break;
                }
            }
            return Ok(written);
        }
        let mut diag = Vec::new();
        for m in std::mem::take(&mut held.msgs) {
            if let ServerMsg::Stdout(d) | ServerMsg::Stderr(d) = m {
                diag.extend_from_slice(&d);
            }
        }
        Err(diag)
    }
}

/// The Lazaret error for a command runsc could not start, with runsc's
/// cause (the text after its last `: `, printable ASCII only, bounded) and
/// what to do.
pub fn start_failure_reason(diag: &[u8], domain_root: &std::path::Path) -> String {
    let text = String::from_utf8_lossy(diag);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let cause: String = first
        .rsplit(": ")
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(120)
        .collect();
    let cause = if cause.trim().is_empty() {
        "no reason given".to_string()
    } else {
        cause.trim().to_string()
    };
    let workspace = if first.contains("initial working directory") {
        ": the sandbox cannot reach /workspace"
    } else {
        ""
    };
    let lower = cause.to_ascii_lowercase();
    if lower.contains("no space left on device") || lower.contains("read-only file system") {
        // Restarting the Domain does not help: the storage must change
        // (the CLI says how, from the file system's condition).
        return format!(
            "the command could not be started in the sandbox (runsc: {cause}): the file system of the Domain Root {} refuses writes (details in its coordinator.log)",
            domain_root.display()
        );
    }
    format!(
        "the command could not be started in the sandbox{workspace} (runsc: {cause}); end this workspace's other `lazaret run` sessions so that its Domain stops, then run again (details in {}/coordinator.log)",
        domain_root.display()
    )
}

/// A command runsc could not invoke, from its diagnostics: the status a
/// shell gives (127 not found, 126 found but not runnable) and the line
/// for the developer. `None` for any other failure.
pub fn not_invokable(diag: &[u8]) -> Option<(i32, String)> {
    let text = String::from_utf8_lossy(diag);
    let line = text.lines().find(|l| l.contains("executing command"))?;
    let show = |s: &str| lazaret_protocol::display::escape(s.as_bytes());
    if let Some((_, rest)) = line.split_once("error finding executable \"") {
        let name = rest.split('"').next().unwrap_or_default();
        return Some((
            127,
            format!("{}: command not found in the sandbox", show(name)),
        ));
    }
    let (_, rest) = line.split_once("failed to load ")?;
    let (path, cause) = rest.split_once(": ")?;
    let code = if cause.contains("no such file or directory") {
        127
    } else {
        126
    };
    Some((
        code,
        format!(
            "{}: cannot run it in the sandbox: {}",
            show(path),
            show(cause.trim())
        ),
    ))
}

/// How long a session whose `runsc exec` failed (status 128) or whose
/// command was SIGKILLed waits to learn whether the sandbox went away
/// under it.
const SANDBOX_END_GRACE: Duration = Duration::from_secs(3);

/// Why a session's status is not its command's own, if it is not: the
/// sandbox ended while the command ran (its `runsc exec` then fails with
/// 128, or the command is killed with it). `None` for `status`: the
/// supervisor went away first. A Domain being stopped is not this: its
/// commands are killed, and the status says so.
fn sandbox_end(ctx: &SessionCtx, status: Option<ExitStatus>) -> Option<String> {
    let root = ctx.run_dir.parent().unwrap_or(&ctx.run_dir);
    if ctx.stop.load(Ordering::SeqCst) && status.is_some() {
        return None;
    }
    let status = match status {
        // The bridge exits with its command's status, never by a signal:
        // a signalled bridge was killed itself, and took the status with it.
        Some(ExitStatus::Signaled(sig)) if !ctx.holder_gone_within(Duration::ZERO) => {
            return Some(format!(
                "the session's exec bridge was killed (signal {sig}): the command's status is unknown, and it may still run in the sandbox until the Domain stops (`lazaret stop`)"
            ));
        }
        s => s.map(ExitStatus::shell_code),
    };
    // 128: runsc exec's own failure; 137: SIGKILL, as the sandbox's end
    // gives its processes. Either may come just before the holder's end.
    let gone = match status {
        None => true,
        Some(128 | 137) => ctx.holder_gone_within(SANDBOX_END_GRACE),
        Some(_) => ctx.holder_gone_within(Duration::ZERO),
    };
    gone.then(|| {
        format!(
            "the sandbox stopped while the command ran; `lazaret run` starts a new one (details in {}/coordinator.log and helpers.log)",
            root.display()
        )
    })
}

/// The note for a command that ended with `status` while the sandbox's
/// memory was at the profile's `limits.memory` (`memory`), or `None`.
/// What failed inside cannot be seen from here, so the note says what
/// holds (the memory file reached its bound) and what may follow from it;
/// a session that did not take it there gets a note only for the signals
/// an allocation past the bound gives (SIGSEGV, SIGBUS). Statuses of a
/// command the developer interrupted (SIGHUP, SIGINT, SIGTERM) get none.
fn memory_note(profile: &str, status: i32, memory: Option<MemoryBound>) -> Option<String> {
    const BY_SIGNAL: [i32; 2] = [128 + libc::SIGSEGV, 128 + libc::SIGBUS];
    const INTERRUPTED: [i32; 3] = [128 + libc::SIGHUP, 128 + libc::SIGINT, 128 + libc::SIGTERM];
    let m = memory?;
    if status == 0 || INTERRUPTED.contains(&status) || (m.before && !BY_SIGNAL.contains(&status)) {
        return None;
    }
    let limit = config_size(m.limit);
    let raise = format!(
        "raise `memory` under [profiles.{profile}.limits] in Lazaret's config file; it applies when the Domain starts again (`lazaret stop`, then `lazaret run`)"
    );
    Some(if m.before {
        format!(
            "lazaret: the sandbox's memory is at its bound, limits.memory = \"{limit}\" of profile {profile:?}: that may be why the command ended with status {status} (a process that touches memory past the bound gets SIGSEGV); if it needs more, {raise}\n"
        )
    } else {
        format!(
            "lazaret: the sandbox's memory reached its bound during this command, limits.memory = \"{limit}\" of profile {profile:?}; past it a process that touches new memory gets SIGSEGV (status 139) and a write to /tmp fails. If the command (status {status}) needs more, {raise}\n"
        )
    })
}

/// `bytes` as the config file writes sizes (`"4GiB"`, `"1536MiB"`).
fn config_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB")];
    for (unit, name) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

/// Ends a session after its bridge exited (`None`: the supervisor went
/// away first): the command's status, or a Lazaret failure when runsc
/// never started the command or the sandbox ended under it.
fn finish_session(
    ctx: &SessionCtx,
    bridge: &Bridge<'_>,
    writer: &Writer,
    latch: &StartLatch,
    exit: Option<BridgeExit>,
) {
    lazaret_helpers::timeline::mark("coordinator", "session-bridge-exited");
    bridge.counted.give_back();
    let (sid, ending) = (bridge.sid, &bridge.ending);
    let memory = exit.and_then(|e| e.memory);
    let exit = exit.map(|e| e.status);
    let status = exit.map(ExitStatus::shell_code);
    match latch.finish(writer) {
        Ok(true) => match sandbox_end(ctx, exit) {
            None => finish_ran(ctx, bridge, writer, status.unwrap_or(125), memory),
            Some(reason) => {
                log(format!("session {sid}: {reason} (status {status:?})"));
                ending.set(if ctx.holder_gone_within(Duration::ZERO) {
                    SessionEnd::SandboxStopped
                } else {
                    SessionEnd::Unknown
                });
                send(writer, &ServerMsg::Failed { reason });
            }
        },
        Ok(false) => {
            ending.set(SessionEnd::Unknown);
            log(format!(
                "session {sid}: runsc exec ({status:?}) could not write the command's PID file: its status is unknown"
            ));
            let root = ctx.run_dir.parent().unwrap_or(&ctx.run_dir);
            send(
                writer,
                &ServerMsg::Failed {
                    reason: format!(
                        "runsc started the command but could not write its PID file in the Domain Root {} (its file system refuses writes): the command's status is unknown and it may still run in the sandbox until the Domain stops (`lazaret stop`)",
                        root.display()
                    ),
                },
            );
        }
        Err(diag) => finish_not_started(ctx, bridge, writer, status, &diag),
    }
}

/// The end of a session whose command ran and exited with `status`: why
/// it ended (the Domain stopped, the client hung up, or the command
/// exited, with a note where the memory bound may be why), then its exit.
fn finish_ran(
    ctx: &SessionCtx,
    bridge: &Bridge<'_>,
    writer: &Writer,
    status: i32,
    memory: Option<MemoryBound>,
) {
    let (sid, ending) = (bridge.sid, &bridge.ending);
    if ctx.stop.load(Ordering::SeqCst) {
        let note = "lazaret: the Domain was stopped (`lazaret stop`)\n";
        send(writer, &ServerMsg::Stderr(note.as_bytes().to_vec()));
        ending.set(SessionEnd::DomainStopped { status });
    } else if ending.hung_up.load(Ordering::SeqCst) {
        ending.set(SessionEnd::HungUp { status });
    } else {
        if let Some(note) = memory_note(&ctx.input.profile_name, status, memory) {
            log(format!("session {sid}: {}", note.trim_end()));
            send(writer, &ServerMsg::Stderr(note.into_bytes()));
        }
        ending.set(SessionEnd::Exited { status });
    }
    send(writer, &ServerMsg::Exit { status });
}

/// The end of a session whose `runsc exec` failed before the command ran
/// (`diag`: what runsc said): a command that cannot be invoked gets the
/// shell's code, anything else a Lazaret error.
fn finish_not_started(
    ctx: &SessionCtx,
    bridge: &Bridge<'_>,
    writer: &Writer,
    status: Option<i32>,
    diag: &[u8],
) {
    let (sid, ending) = (bridge.sid, &bridge.ending);
    match not_invokable(diag) {
        Some((code, line)) => {
            ending.set(SessionEnd::NotRun { status: code });
            let line = format!("lazaret: {line}\n");
            send(writer, &ServerMsg::Stderr(line.into_bytes()));
            send(writer, &ServerMsg::Exit { status: code });
        }
        None => {
            // A client that went away before the command started
            // had its `runsc exec` hung up: that is why it ended.
            ending.set(if ending.hung_up.load(Ordering::SeqCst) {
                SessionEnd::HungUp {
                    status: status.unwrap_or(125),
                }
            } else {
                SessionEnd::NotRun { status: 125 }
            });
            log(format!(
                "session {sid}: runsc exec failed ({status:?}) before the command ran: {:?}",
                String::from_utf8_lossy(diag)
            ));
            let root = ctx.run_dir.parent().unwrap_or(&ctx.run_dir);
            send(
                writer,
                &ServerMsg::Failed {
                    reason: start_failure_reason(diag, root),
                },
            );
        }
    }
}

use crate::attach::{Sink, Writer};

/// What the supervisor needs to start a session's exec bridge, and the
/// record of how the session ends.
struct Bridge<'a> {
    sid: &'a str,
    /// The session's count in `sessions`, given back once its command ended.
    counted: &'a Counted<'a>,
    process: SessionProcess,
    ending: Ending,
    /// The command as the client gave it, for `lazaret ps`.
    shown: Option<Vec<String>>,
    /// Started detached (`lazaret run -d`): no client after `Accepted`.
    detach: bool,
}

/// How a session ended, logged once when it is dropped (`session ID
/// ended: ...`, see [`SessionLog`]): what [`finish_session`] found, or,
/// when the command never started, that it did not run.
struct Ending {
    sid: String,
    end: Mutex<SessionEnd>,
    /// Set when the client went away and the session was hung up.
    hung_up: Arc<std::sync::atomic::AtomicBool>,
}

impl Ending {
    fn new(sid: &str) -> Ending {
        Ending {
            sid: sid.to_string(),
            end: Mutex::new(SessionEnd::NotRun { status: 125 }),
            hung_up: Arc::default(),
        }
    }

    fn set(&self, end: SessionEnd) {
        *lock(&self.end) = end;
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        let end = *lock(&self.end);
        log(SessionLog::Ended {
            session: self.sid.clone(),
            end,
        });
    }
}

impl Bridge<'_> {
    /// Has the supervisor start the bridge on `stdio`, then registers its
    /// pidfd for teardown.
    fn start(
        &self,
        ctx: &SessionCtx,
        tty: bool,
        stdio: &[OwnedFd],
    ) -> Result<(Arc<OwnedFd>, Receiver<BridgeEvent>), SessionError> {
        let (pidfd, events) = ctx
            .link
            .start_bridge(self.sid, tty, &self.process, stdio)
            .map_err(SessionError::Bridge)?;
        let pidfd = Arc::new(pidfd);
        lock(&ctx.bridges).insert(self.sid.to_string(), pidfd.clone());
        Ok((pidfd, events))
    }

    /// Starts a session's bridge ([`Self::start`]) after sending what was
    /// accepted: once runsc exec may run the command, a client that loses
    /// this coordinator must say so, never start the command again in a
    /// new Domain (it retries only when nothing was accepted). A bridge
    /// that cannot start is the session's `Failed`.
    fn start_session(
        &self,
        ctx: &SessionCtx,
        tty: bool,
        stdio: &[OwnedFd],
        writer: &Writer,
        accepted: &[ServerMsg],
    ) -> Result<(Arc<OwnedFd>, Receiver<BridgeEvent>), SessionError> {
        for m in accepted {
            send(writer, m);
        }
        let started = self.start(ctx, tty, stdio).inspect_err(|e| {
            send(
                writer,
                &ServerMsg::Failed {
                    reason: bridge_failed(e),
                },
            );
        })?;
        lazaret_helpers::timeline::mark("coordinator", "session-bridge-started");
        Ok(started)
    }
}

/// The developer's message when the supervisor could not start a
/// session's exec bridge.
fn bridge_failed(e: &dyn std::fmt::Display) -> String {
    format!("the command could not be started in the sandbox: {e}")
}

/// The bridge's status; `None`, with a log line, when the supervisor (and
/// the sandbox with it) went away first.
fn bridge_status(sid: &str, events: &Receiver<BridgeEvent>) -> Option<BridgeExit> {
    let status = wait_exit(events);
    if status.is_none() {
        log(format!(
            "session {sid}: the Runtime Supervisor is gone: the sandbox stopped"
        ));
    }
    status
}

fn signal_bridge(pidfd: &OwnedFd, sig: rustix::process::Signal) {
    let _ = lazaret_helpers::pidfd::send_signal(pidfd, sig);
}

/// The session in the Escalation Mailbox's registry while it lives; when it
/// ends, its pending requests end and their host commands stop (OR-3).
struct Registration<'a> {
    ctx: &'a SessionCtx,
    sid: String,
}

impl<'a> Registration<'a> {
    /// Also returns what the session must be told once accepted (see
    /// `Escalations::register`).
    fn new(ctx: &'a SessionCtx, sid: &str, entry: SessionEntry) -> (Self, Option<String>) {
        let notice = ctx.escalations.register(sid, entry);
        record(Event::Joined {
            session: sid.to_string(),
        });
        (
            Self {
                ctx,
                sid: sid.to_string(),
            },
            notice,
        )
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.ctx.escalations.unregister(&self.sid);
        record(Event::Left {
            session: self.sid.clone(),
        });
    }
}

/// The PTY reader: stops reading while the gate is closed, so a prompt
/// owns the developer's terminal alone.
fn pump_gated(
    master: std::fs::File,
    w: Writer,
    gate: Arc<Gate>,
    latch: Arc<StartLatch>,
) -> std::thread::JoinHandle<()> {
    use std::os::fd::AsFd;
    std::thread::spawn(move || {
        let mut master = master;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            gate.pass();
            let mut pfd = [nix::poll::PollFd::new(
                master.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(100u16)) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
            match master.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !latch.send(&w, ServerMsg::Stdout(buf[..n].to_vec())) {
                        return;
                    }
                }
            }
        }
    })
}

fn send(w: &Writer, msg: &ServerMsg) -> bool {
    lock(w).send(msg)
}

fn pump<R: Read + Send + 'static>(
    mut r: R,
    w: Writer,
    wrap: fn(Vec<u8>) -> ServerMsg,
    latch: Arc<StartLatch>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !latch.send(&w, wrap(buf[..n].to_vec())) {
                        return;
                    }
                }
            }
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn run_pty(
    ctx: &SessionCtx,
    bridge: Bridge<'_>,
    (rows, cols): (u16, u16),
    reader: UnixStream,
    writer: Writer,
    accepted: Vec<ServerMsg>,
    (gate, replies): (Arc<Gate>, Replies),
    latch: Arc<StartLatch>,
) -> Result<(), SessionError> {
    let ws = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&ws), None).map_err(SessionError::OpenPty)?;
    // runsc chowns the slave it is given; it is ours alone, never the
    // developer's own terminal.
    let slave = [pty.slave];
    let (bridge_fd, events) = bridge.start_session(ctx, true, &slave, &writer, &accepted)?;
    // Only the bridge holds the slave now: the reader ends with EIO once
    // the session's processes have closed it.
    drop(slave);
    let sid = bridge.sid;
    let master = std::fs::File::from(pty.master);
    let end = PtyEnd {
        master: Arc::new(master.try_clone().map_err(SessionError::Io)?),
        replies,
        bridge: bridge_fd.clone(),
        hung_up: bridge.ending.hung_up.clone(),
    };
    let listed = Listed::new(ctx, sid, &bridge, &writer, Some(end.clone()));
    if bridge.detach {
        // `lazaret run -d` has its Session ID: the session goes on without
        // it, before any of its output is sent, so all of it is kept.
        let mut w = lock(&writer);
        let epoch = w.epoch();
        w.detach(epoch);
    } else {
        let (end, w) = (end.clone(), writer.clone());
        std::thread::spawn(move || relay_input(reader, end, w, 0));
    }
    let watching = latch.watch(&writer);

    let out = pump_gated(
        master.try_clone().map_err(SessionError::Io)?,
        writer.clone(),
        gate,
        latch.clone(),
    );
    let status = bridge_status(sid, &events);
    // Output written just before exit is still in the PTY; the reader ends
    // with EIO once every slave is closed.
    watching.store(true, Ordering::SeqCst);
    join_with_timeout(out, Duration::from_secs(2));
    drop(master);
    finish_session(ctx, &bridge, &writer, &latch, status);
    listed.end();
    Ok(())
}

/// Relays one terminal's records into a session's PTY until it goes: a
/// session that outlives its terminal is detached then (`epoch` is that
/// terminal's attach, see [`Sink::detach`]), any other is hung up.
fn relay_input(mut reader: UnixStream, end: PtyEnd, writer: Writer, epoch: u64) {
    let mut m: &std::fs::File = &end.master;
    loop {
        match read_frame::<_, ClientMsg>(&mut reader) {
            Ok(ClientMsg::Stdin(data)) => {
                if m.write_all(&data).is_err() {
                    return;
                }
            }
            Ok(ClientMsg::Resize { rows, cols }) => resize(m, rows, cols),
            Ok(ClientMsg::StdinEof) => {
                // EOF on a terminal is the line discipline's ^D.
                let _ = m.write_all(&[4]);
            }
            Ok(ClientMsg::Signal(_)) => {}
            Ok(ClientMsg::Detach) => {
                let mut w = lock(&writer);
                if w.is_detachable() && w.epoch() == epoch && w.is_attached() {
                    w.send(&ServerMsg::Detached);
                    w.detach(epoch);
                    return;
                }
            }
            Ok(m @ (ClientMsg::Decision { .. } | ClientMsg::HostCommandOutcome { .. })) => {
                escalation::deliver(&end.replies, m)
            }
            Err(FrameError::Closed) | Err(_) => {
                let mut w = lock(&writer);
                if w.is_detachable() {
                    // The terminal hung up: the session goes on.
                    w.detach(epoch);
                } else {
                    drop(w);
                    // The client is gone: hang up the session.
                    end.hung_up.store(true, Ordering::SeqCst);
                    signal_bridge(&end.bridge, rustix::process::Signal::HUP);
                }
                return;
            }
        }
    }
}

fn resize(m: &std::fs::File, rows: u16, cols: u16) {
    let ws = rustix::termios::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let _ = rustix::termios::tcsetwinsize(m, ws);
}

/// A session in [`SessionCtx::live`] while it runs.
struct Listed<'a> {
    ctx: &'a SessionCtx,
    sid: String,
}

impl<'a> Listed<'a> {
    fn new(
        ctx: &'a SessionCtx,
        sid: &str,
        bridge: &Bridge<'_>,
        writer: &Writer,
        pty: Option<PtyEnd>,
    ) -> Self {
        let live = Live {
            argv: bridge.shown.clone(),
            since_unix_ms: now_unix_ms(),
            writer: writer.clone(),
            pty,
        };
        lock(&ctx.live).insert(sid.to_string(), live);
        Self {
            ctx,
            sid: sid.to_string(),
        }
    }

    /// The session ended: a detached one's status is kept for `lazaret ps`
    /// and `lazaret attach`; an attached terminal is let go.
    fn end(self) {
        let Some(live) = lock(&self.ctx.live).remove(&self.sid) else {
            return;
        };
        let mut w = lock(&live.writer);
        w.close();
        if w.ended().is_some() {
            drop(w);
            log(format!(
                "session {}: ended while detached; its status is kept for lazaret ps and attach",
                &self.sid[..8]
            ));
            let mut ended = lock(&self.ctx.ended);
            if ended.len() >= crate::attach::MAX_ENDED {
                ended.pop_front();
            }
            ended.push_back((self.sid.clone(), live));
        }
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        lock(&self.ctx.live).remove(&self.sid);
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `lazaret attach`: hands this connection to a detached session's
/// terminal end (see [`crate::attach`]), then relays its input.
fn attach(
    ctx: &SessionCtx,
    conn: &str,
    a: lazaret_protocol::session::Attach,
    reader: UnixStream,
    writer: Writer,
) -> Result<(), SessionError> {
    let (id, target) = match choose(ctx, a.session.as_deref()) {
        Ok(t) => t,
        Err(why) => {
            let reason = why.to_string();
            lock(&writer).send(&ServerMsg::Refused {
                reason: reason.clone(),
            });
            return Err(SessionError::Refused(reason));
        }
    };
    let short = &id[..id.len().min(8)];
    let Some(mut stream) = lock(&writer).take_stream() else {
        return Err(SessionError::TerminalGone);
    };
    let mut w = lock(&target.writer);
    if w.is_attached() {
        drop(w);
        let reason = format!(
            "session {short} is attached to another terminal (one at a time): detach it there first (ctrl-p ctrl-q) or close that terminal"
        );
        let _ = write_frame(
            &mut stream,
            &ServerMsg::Refused {
                reason: reason.clone(),
            },
        );
        return Err(SessionError::Refused(reason));
    }
    // Its size first, so that the program redraws for this terminal.
    if let Some(p) = &target.pty {
        resize(&p.master, a.rows, a.cols);
    }
    let first = ServerMsg::Accepted {
        session_id: id.clone(),
    };
    let epoch = w.attach(stream, &first).ok_or(SessionError::TerminalGone)?;
    let ended = w.ended().is_some();
    drop(w);
    if ended {
        // Its status is told once.
        lock(&ctx.ended).retain(|(i, _)| *i != id);
        log(format!(
            "session {short}: its end was collected by lazaret attach"
        ));
        return Ok(());
    }
    log(format!(
        "session {short}: attached (connection {})",
        &conn[..8]
    ));
    let Some(end) = target.pty else {
        return Ok(());
    };
    relay_input(reader, end, target.writer.clone(), epoch);
    log(format!("session {short}: the terminal left"));
    Ok(())
}

/// Why `lazaret attach` has no session to attach; `named` is the session
/// it named, shown escaped, and `sessions` are shown as `ID (command)`.
#[derive(Debug, thiserror::Error)]
enum NoAttach {
    #[error("session {named} cannot be attached: it ends with its own terminal (it was not started with `lazaret run -d`, and the profile does not set detach_on_hangup)")]
    NotDetachable { named: String },
    #[error("no session {named} in this workspace's Domain (`lazaret ps` lists its sessions)")]
    NoSuchSession { named: String },
    #[error("{named} names {} sessions: give more of the ID ({})", sessions.len(), sessions.join(", "))]
    Ambiguous {
        named: String,
        sessions: Vec<String>,
    },
    #[error("no detached session in this workspace's Domain (`lazaret run -d` starts one; `lazaret ps` lists its sessions)")]
    NoneDetached,
    #[error("{} detached sessions: name one (`lazaret attach ID`): {}", sessions.len(), sessions.join(", "))]
    SeveralDetached { sessions: Vec<String> },
}

/// The session `lazaret attach` named (a Session ID or a unique prefix),
/// or the Domain's only detached one; else why not.
fn choose(ctx: &SessionCtx, want: Option<&str>) -> Result<(String, Live), NoAttach> {
    let live = lock(&ctx.live);
    let ended = lock(&ctx.ended);
    let attachable = |l: &Live| l.pty.is_some() && lock(&l.writer).is_detachable();
    let mut all: Vec<(String, Live)> = live
        .iter()
        .filter(|(_, l)| attachable(l))
        .map(|(i, l)| (i.clone(), l.clone()))
        .collect();
    all.extend(ended.iter().cloned());
    let show = |(i, l): &(String, Live)| {
        let cmd = match &l.argv {
            Some(a) => lazaret_protocol::display::escape(a.join(" ").as_bytes()),
            None => "login shell".into(),
        };
        format!("{} ({cmd})", &i[..i.len().min(8)])
    };
    match want {
        Some(w) => {
            let hits: Vec<_> = all
                .iter()
                .filter(|(i, _)| !w.is_empty() && i.starts_with(w))
                .collect();
            let named = lazaret_protocol::display::escape(w.as_bytes());
            match hits.as_slice() {
                [one] => Ok((*one).clone()),
                [] if live.keys().any(|i| !w.is_empty() && i.starts_with(w)) => {
                    Err(NoAttach::NotDetachable { named })
                }
                [] => Err(NoAttach::NoSuchSession { named }),
                more => Err(NoAttach::Ambiguous {
                    named,
                    sessions: more.iter().map(|s| show(s)).collect(),
                }),
            }
        }
        None => {
            let detached: Vec<_> = all
                .iter()
                .filter(|(_, l)| !lock(&l.writer).is_attached())
                .collect();
            match detached.as_slice() {
                [one] => Ok((*one).clone()),
                [] => Err(NoAttach::NoneDetached),
                more => Err(NoAttach::SeveralDetached {
                    sessions: more.iter().map(|s| show(s)).collect(),
                }),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_pipes(
    ctx: &SessionCtx,
    bridge: Bridge<'_>,
    reader: UnixStream,
    writer: Writer,
    accepted: Vec<ServerMsg>,
    latch: Arc<StartLatch>,
    replies: Replies,
) -> Result<(), SessionError> {
    let pipe =
        || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(SessionError::Pipes);
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let far_ends = [in_r, out_w, err_w];
    let (bridge_fd, events) = bridge.start_session(ctx, false, &far_ends, &writer, &accepted)?;
    // Only the bridge holds them now: the readers see EOF when it ends.
    drop(far_ends);
    let sid = bridge.sid;
    let listed = Listed::new(ctx, sid, &bridge, &writer, None);
    let watching = latch.watch(&writer);
    let out = pump(
        std::fs::File::from(out_r),
        writer.clone(),
        ServerMsg::Stdout,
        latch.clone(),
    );
    let err = pump(
        std::fs::File::from(err_r),
        writer.clone(),
        ServerMsg::Stderr,
        latch.clone(),
    );
    let stdin = Some(std::fs::File::from(in_w));
    let signals = bridge_fd.clone();
    let hung_up = bridge.ending.hung_up.clone();
    std::thread::spawn(move || forward_client(reader, stdin, signals, hung_up, replies));
    let status = bridge_status(sid, &events);
    watching.store(true, Ordering::SeqCst);
    join_with_timeout(out, Duration::from_secs(5));
    join_with_timeout(err, Duration::from_secs(5));
    finish_session(ctx, &bridge, &writer, &latch, status);
    listed.end();
    Ok(())
}

/// A session without a terminal: what its client sends, until it goes
/// away. Input goes to the bridge's stdin (`None` once closed), signals
/// to the bridge (`signals`, its pidfd), decisions and host command
/// outcomes to the session's Host Escalation requests; a client gone is a
/// hang-up.
fn forward_client(
    mut reader: UnixStream,
    mut stdin: Option<std::fs::File>,
    signals: Arc<OwnedFd>,
    hung_up: Arc<std::sync::atomic::AtomicBool>,
    replies: Replies,
) {
    loop {
        use rustix::process::Signal as S;
        let forward = |s: S| signal_bridge(&signals, s);
        match read_frame::<_, ClientMsg>(&mut reader) {
            Ok(ClientMsg::Stdin(data)) => {
                if let Some(i) = stdin.as_mut() {
                    if i.write_all(&data).is_err() {
                        stdin = None;
                    }
                }
            }
            Ok(ClientMsg::StdinEof) => stdin = None,
            Ok(ClientMsg::Resize { .. } | ClientMsg::Detach) => {}
            // No terminal: no prompt, but auto-approved commands run in
            // this session's client.
            Ok(m @ (ClientMsg::Decision { .. } | ClientMsg::HostCommandOutcome { .. })) => {
                escalation::deliver(&replies, m)
            }
            Ok(ClientMsg::Signal(sig)) => forward(match sig {
                Signal::Interrupt => S::INT,
                Signal::Quit => S::QUIT,
                Signal::Terminate => S::TERM,
                Signal::Hangup => S::HUP,
            }),
            Err(_) => {
                hung_up.store(true, Ordering::SeqCst);
                forward(S::HUP);
                return;
            }
        }
    }
}

fn join_with_timeout(h: std::thread::JoinHandle<()>, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    while !h.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if h.is_finished() {
        let _ = h.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lazaret attach`'s refusals read as they did when they were built
    /// as text.
    #[test]
    fn attach_refusals_list_the_sessions() {
        let sessions = vec![
            "0123abcd (make)".to_string(),
            "4567ef01 (login shell)".into(),
        ];
        let e = NoAttach::Ambiguous {
            named: "0".into(),
            sessions: sessions.clone(),
        };
        assert_eq!(
            e.to_string(),
            "0 names 2 sessions: give more of the ID (0123abcd (make), 4567ef01 (login shell))"
        );
        let e = NoAttach::SeveralDetached { sessions };
        assert_eq!(
            e.to_string(),
            "2 detached sessions: name one (`lazaret attach ID`): 0123abcd (make), 4567ef01 (login shell)"
        );
    }

    #[test]
    fn a_command_that_took_the_memory_to_its_bound_is_told_which_limit() {
        let reached = Some(MemoryBound {
            limit: 2 << 30,
            before: false,
        });
        let note = memory_note("big", 139, reached).unwrap();
        assert!(note.starts_with("lazaret: "), "{note}");
        assert!(
            note.contains("limits.memory = \"2GiB\" of profile \"big\""),
            "{note}"
        );
        assert!(note.contains("[profiles.big.limits]"), "{note}");
        assert!(note.contains("`lazaret stop`"), "{note}");
        assert!(note.ends_with('\n'));
        // Any failure: MemoryError, a failed write to /tmp...
        assert!(memory_note("big", 1, reached).is_some());
        // Success, an interrupt, or no bound reached: nothing.
        for quiet in [0, 129, 130, 143] {
            assert_eq!(memory_note("big", quiet, reached), None, "{quiet}");
        }
        assert_eq!(memory_note("big", 139, None), None);
    }

    #[test]
    fn a_bound_reached_before_the_command_is_named_only_for_its_signals() {
        let before = Some(MemoryBound {
            limit: 1 << 30,
            before: true,
        });
        let note = memory_note("default", 139, before).unwrap();
        assert!(note.contains("may be why"), "{note}");
        assert!(note.contains("\"1GiB\""), "{note}");
        assert!(memory_note("default", 135, before).is_some(), "SIGBUS");
        assert_eq!(memory_note("default", 1, before), None);
        assert_eq!(memory_note("default", 2, before), None);
    }

    #[test]
    fn sizes_are_written_as_the_config_file_takes_them() {
        assert_eq!(config_size(4 << 30), "4GiB");
        assert_eq!(config_size(1536 << 20), "1536MiB");
        assert_eq!(config_size(2 << 40), "2TiB");
        assert_eq!(config_size(12345), "12345B");
    }

    #[test]
    fn a_command_in_the_workspace_runs_as_it_is_elsewhere_through_cd() {
        let cwd = WorkdirFrom::Cwd;
        let argv = sandbox_argv(
            Some(&["echo".into(), "a b".into()]),
            "/workspace",
            cwd,
            None,
        );
        assert_eq!(argv, ["echo", "a b"]);
        let argv = sandbox_argv(Some(&["echo".into()]), "/workspace", cwd, Some("xterm"));
        assert_eq!(argv, ["echo"]);
        assert!(sandbox_argv(None, "/workspace", cwd, None)[2].contains("bash -l"));
        let sub = sandbox_argv(Some(&["true".into()]), "/workspace/a b", cwd, None);
        assert!(sub[2].starts_with("cd -- \"$LAZARET_WORKDIR\""), "{sub:?}");
        assert!(
            !sub[2].contains("a b"),
            "the directory is never in the script"
        );
        let named = sandbox_argv(
            Some(&["true".into()]),
            "/workspace/x",
            WorkdirFrom::Option,
            None,
        );
        assert!(named[2].contains("exit 125"), "{named:?}");
        for from in [WorkdirFrom::Cwd, WorkdirFrom::CwdIgnored] {
            let here = sandbox_argv(Some(&["true".into()]), "/workspace/x", from, None);
            assert!(!here[2].contains("exit 125"), "{here:?}");
            assert_eq!(
                here[2].contains("Git-ignored"),
                from == WorkdirFrom::CwdIgnored,
                "the note names the cause only when the host checked it"
            );
        }
        // A terminal type not every image knows is checked, by name in
        // TERM, never in the script.
        let kitty = sandbox_argv(
            Some(&["tput".into(), "cols".into()]),
            "/workspace",
            cwd,
            Some("xterm-kitty"),
        );
        assert!(kitty[2].starts_with("if command -v tput"), "{kitty:?}");
        assert!(!kitty[2].contains("kitty"));
        assert_eq!(&kitty[3..], ["lazaret", "tput", "cols"]);
        assert_eq!(workdir_env("/workspace"), None);
        assert_eq!(
            workdir_env("/workspace/a b").as_deref(),
            Some("LAZARET_WORKDIR=/workspace/a b")
        );
    }

    #[test]
    fn commands_runsc_cannot_invoke_get_a_shells_127_or_126() {
        // runsc 20221219's words.
        let missing = b"executing processes for container: executing command \"nosuchcmd\" in sandbox: error finding executable \"nosuchcmd\" in PATH [/usr/bin /bin]: no such file or directory\n";
        let (code, line) = not_invokable(missing).unwrap();
        assert_eq!(code, 127);
        assert_eq!(line, "nosuchcmd: command not found in the sandbox");
        let gone = b"executing processes for container: executing command \"/no/such\" in sandbox: failed to load /no/such: no such file or directory\n";
        assert_eq!(not_invokable(gone).unwrap().0, 127);
        let dir = b"executing processes for container: executing command \"/tmp\" in sandbox: failed to load /tmp: permission denied\n";
        let (code, line) = not_invokable(dir).unwrap();
        assert_eq!(code, 126);
        assert_eq!(
            line,
            "/tmp: cannot run it in the sandbox: permission denied"
        );
        let cwd = b"executing processes for container: executing command \"/bin/true\" in sandbox: failed to find initial working directory \"/workspace\": no such file or directory\n";
        assert_eq!(not_invokable(cwd), None);
        assert_eq!(not_invokable(b"something else entirely"), None);
    }

    #[test]
    fn start_failure_names_the_cause_without_runsc_text() {
        let diag = b"executing processes for container: executing command \"sh\" in sandbox: failed to find initial working directory \"/workspace\": too many open files\x1b[2J";
        let r = start_failure_reason(diag, std::path::Path::new("/d/root"));
        assert!(r.contains("cannot reach /workspace"), "{r}");
        assert!(r.contains("(runsc: too many open files[2J)"), "{r}");
        assert!(!r.contains("executing processes"), "{r}");
        assert!(!r.contains('\x1b'));
        assert!(r.contains("/d/root/coordinator.log"));
        let r = start_failure_reason(b"", std::path::Path::new("/d"));
        assert!(r.contains("no reason given"), "{r}");
        let r = start_failure_reason(
            b"writing pid file: write /d/run/sessions/x.pid: no space left on device",
            std::path::Path::new("/d"),
        );
        assert!(r.contains("(runsc: no space left on device)"), "{r}");
        assert!(r.contains("Domain Root /d refuses writes"), "{r}");
        assert!(!r.contains("other `lazaret run` sessions"), "{r}");
    }

    #[test]
    fn an_empty_pid_file_leaves_the_command_untracked() {
        let d = tempfile::tempdir().unwrap();
        let pid = d.path().join("s.pid");
        let latch = StartLatch::new(pid.clone());
        let (w, r) = pair();
        assert!(latch.send(&w, ServerMsg::Stderr(b"runsc: ".to_vec())));
        // Created, but the write of the PID failed (a full file system):
        // held on, then sent as output of a command whose fate is unknown.
        std::fs::write(&pid, "").unwrap();
        assert!(latch.send(&w, ServerMsg::Stdout(b"out".to_vec())));
        assert_eq!(latch.finish(&w), Ok(false));
        assert_stderr_then_stdout(w, r, b"runsc: ", b"out");
    }

    fn pair() -> (Writer, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Arc::new(Mutex::new(Sink::attached(a))), b)
    }

    /// Closes `w`; what `r` got is `stderr`, then `stdout`, nothing else.
    fn assert_stderr_then_stdout(w: Writer, r: UnixStream, stderr: &[u8], stdout: &[u8]) {
        drop(w);
        let got = drain(r);
        assert!(
            matches!(&got[..], [ServerMsg::Stderr(a), ServerMsg::Stdout(b)] if a == stderr && b == stdout),
            "{got:?}"
        );
    }

    fn drain(mut r: UnixStream) -> Vec<ServerMsg> {
        r.set_nonblocking(false).unwrap();
        let mut out = Vec::new();
        while let Ok(m) = read_frame::<_, ServerMsg>(&mut r) {
            out.push(m);
        }
        out
    }

    #[test]
    fn output_is_held_until_the_pid_file_exists() {
        let d = tempfile::tempdir().unwrap();
        let pid = d.path().join("s.pid");
        let latch = StartLatch::new(pid.clone());
        let (w, r) = pair();
        assert!(latch.send(&w, ServerMsg::Stderr(b"early".to_vec())));
        std::fs::write(&pid, "42").unwrap();
        assert!(latch.send(&w, ServerMsg::Stdout(b"late".to_vec())));
        assert_eq!(latch.finish(&w), Ok(true));
        assert_stderr_then_stdout(w, r, b"early", b"late");
    }

    #[test]
    fn output_of_a_command_that_never_started_is_runscs() {
        let d = tempfile::tempdir().unwrap();
        let latch = StartLatch::new(d.path().join("s.pid"));
        let (w, r) = pair();
        assert!(latch.send(&w, ServerMsg::Stderr(b"runsc: boom".to_vec())));
        assert_eq!(latch.finish(&w).unwrap_err(), b"runsc: boom");
        drop(w);
        assert!(drain(r).is_empty());
        // A lot of output is the command's, pid file or not.
        let latch = StartLatch::new(d.path().join("s.pid"));
        let (w, r) = pair();
        let big = vec![b'x'; MAX_HELD_BYTES + 1];
        let t = std::thread::spawn(move || drain(r));
        assert!(latch.send(&w, ServerMsg::Stdout(big)));
        assert_eq!(latch.finish(&w), Ok(true));
        drop(w);
        assert_eq!(t.join().unwrap().len(), 1);
    }

    #[test]
    fn held_output_is_sent_when_the_pid_file_appears() {
        let d = tempfile::tempdir().unwrap();
        let pid = d.path().join("s.pid");
        let latch = Arc::new(StartLatch::new(pid.clone()));
        let (w, mut r) = pair();
        let done = latch.watch(&w);
        assert!(latch.send(&w, ServerMsg::Stdout(b"prompt$ ".to_vec())));
        std::fs::write(&pid, "42").unwrap();
        r.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let got = read_frame::<_, ServerMsg>(&mut r).unwrap();
        assert!(matches!(got, ServerMsg::Stdout(d) if d == b"prompt$ "));
        done.store(true, Ordering::SeqCst);
    }
}

/// Ports are set when the Domain starts (slirp4netns B's forwards and the
/// host sockets are made before the sandbox runs, and no API socket is
/// kept to add more): a session that asks for one the running Domain does
/// not publish is refused, never joined without it.
fn unpublished(
    asked: &[lazaret_protocol::plan::PublishedPort],
    published: &[lazaret_protocol::plan::PublishedPort],
) -> Option<String> {
    let missing: Vec<String> = asked
        .iter()
        .filter(|p| !published.contains(p))
        .map(|p| p.to_string())
        .collect();
    if missing.is_empty() {
        return None;
    }
    let now = if published.is_empty() {
        "none".to_string()
    } else {
        published
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "the Domain is already running and publishes {now}, not {}: ports are set when the Domain starts; run `lazaret stop` (it ends the Domain's sessions), then `lazaret run` with the ports",
        missing.join(", ")
    ))
}

#[cfg(test)]
mod port_tests {
    use super::unpublished;
    use lazaret_protocol::plan::PublishedPort;

    fn p(host_port: u16, sandbox_port: u16) -> PublishedPort {
        PublishedPort {
            host_addr: std::net::Ipv4Addr::LOCALHOST,
            host_port,
            sandbox_port,
        }
    }

    #[test]
    fn a_session_joins_only_with_ports_the_domain_publishes() {
        assert_eq!(unpublished(&[], &[]), None);
        assert_eq!(unpublished(&[], &[p(8080, 80)]), None);
        assert_eq!(
            unpublished(&[p(8080, 80)], &[p(8080, 80), p(9090, 90)]),
            None
        );
        let e = unpublished(&[p(8080, 81)], &[p(8080, 80)]).unwrap();
        assert!(
            e.contains("publishes 127.0.0.1:8080->80, not 127.0.0.1:8080->81"),
            "{e}"
        );
        assert!(e.contains("lazaret stop"), "{e}");
        let e = unpublished(&[p(8080, 80)], &[]).unwrap();
        assert!(e.contains("publishes none"), "{e}");
    }
}
