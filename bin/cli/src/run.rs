//! `lazaret run`: resolve the Domain, join its coordinator (or lead its
//! start-up), and relay one Client Session.

use crate::error::CliError;
use crate::global::Global;
use crate::{host_command, leader, prompt, terminal};
use lazaret_config::EnvVars;
use lazaret_helpers::sync::lock;
use lazaret_protocol::frame::{read_frame, write_frame, FrameError};
use lazaret_protocol::session::{
    ClientMsg, Hello, ServerMsg, SessionEnv, Signal, TtyInfo, WorkdirFrom, PROTOCOL_VERSION,
};
use lazaret_protocol::DomainIdV1;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Working directory inside the sandbox: absolute beneath /workspace,
    /// or relative to /workspace (default: where `lazaret` runs, when that
    /// is beneath the workspace, else /workspace)
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    workdir: Option<String>,
    /// Give this session's processes KEY from this environment, or KEY=VALUE
    /// (repeatable; never stored or shown, not even in `ps`)
    #[arg(short = 'e', long = "env", value_name = "KEY[=VALUE]")]
    env: Vec<String>,
    /// Publish a sandbox port on the host (repeatable): host processes
    /// connecting to HOST_ADDR:HOST_PORT (default 127.0.0.1) reach what
    /// listens on SANDBOX_PORT inside, now or later. Set when the Domain
    /// starts, with the profile's `ports`
    #[arg(
        short = 'p',
        long = "publish",
        value_name = "[HOST_ADDR:]HOST_PORT:SANDBOX_PORT"
    )]
    publish: Vec<String>,
    /// Start the session in the background on a PTY of its own, print its
    /// Session ID and exit; `lazaret attach` reattaches a terminal to it
    #[arg(short = 'd', long = "detach")]
    detach: bool,
    /// Command to run instead of an interactive login shell: everything
    /// from its first word on is the command's (`run ls -la`). An option
    /// `run` does not know before it is an error, never the command; put
    /// `--` before a command that starts with `-`
    // No `allow_hyphen_values`: with it, `run --rm true` ran `--rm`.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Everything resolved about the Domain before anything runs.
pub struct Resolved {
    pub loaded: lazaret_config::Loaded,
    pub profile_name: String,
    pub profile: lazaret_config::Profile,
    pub workspace: PathBuf,
    /// Where the session starts, relative to `/workspace`.
    pub subdir: Option<PathBuf>,
    /// Where `subdir` came from.
    pub workdir_from: WorkdirFrom,
    /// Whether the workspace is a Git work tree's top level.
    pub git: bool,
    /// The session's own variables (`-e`, `pass_env`).
    pub env: SessionEnv,
    pub domain_id: DomainIdV1,
    pub storage_root: PathBuf,
    pub domain_root: PathBuf,
    /// The ports to publish: the profile's `ports`, then `-p`.
    pub ports: Vec<lazaret_protocol::plan::PublishedPort>,
}

fn mkdir_private(p: &Path) -> Result<(), CliError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(CliError::storage(p))
}

/// The canonical Agent Workspace: `--workspace`, else the top level of the
/// Git repository the current directory is in, else the current directory;
/// resolved once; it must be a directory.
pub fn canonical_workspace(given: Option<&Path>) -> Result<PathBuf, CliError> {
    discover_workspace(given).map(|d| d.top)
}

/// Where `lazaret` runs: the workspace and where in it the session starts.
#[derive(Debug)]
pub struct Discovered {
    /// The canonical Agent Workspace.
    pub top: PathBuf,
    /// The current directory relative to `top`, when it lies beneath it
    /// (the session starts there, beneath `/workspace`).
    pub subdir: Option<PathBuf>,
    /// Whether `top` is a Git work tree's top level.
    pub git: bool,
}

/// `--workspace` as given (canonicalised), or the current directory's
/// repository: the top level of the Git work tree it is in, found by
/// looking at the file system only (`gix-discover`: no Git configuration is
/// read, nothing is executed), so that every subdirectory of one
/// repository shares one Domain.
pub fn discover_workspace(given: Option<&Path>) -> Result<Discovered, CliError> {
    let canonical = |ws: &Path| -> Result<PathBuf, CliError> {
        let c = ws.canonicalize().map_err(|source| CliError::Workspace {
            path: ws.display().to_string(),
            source,
        })?;
        if !c.is_dir() {
            return Err(CliError::Workspace {
                path: c.display().to_string(),
                source: std::io::Error::other("not a directory"),
            });
        }
        Ok(c)
    };
    if let Some(w) = given {
        let top = canonical(w)?;
        let git = git_top_level(&top).as_deref() == Some(top.as_path());
        return Ok(Discovered {
            top,
            subdir: None,
            git,
        });
    }
    let cwd = std::env::current_dir().map_err(|source| CliError::Workspace {
        path: ".".into(),
        source,
    })?;
    let cwd = canonical(&cwd)?;
    Ok(match git_top_level(&cwd) {
        Some(top) => {
            let rel = cwd.strip_prefix(&top).unwrap_or(Path::new(""));
            Discovered {
                subdir: (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf()),
                top,
                git: true,
            }
        }
        None => Discovered {
            top: cwd,
            subdir: None,
            git: false,
        },
    })
}

/// The canonical top level of the Git work tree `dir` is in (`dir` itself
/// or an ancestor on the same file system), if any.
fn git_top_level(dir: &Path) -> Option<PathBuf> {
    let (found, _trust) = gix_discover::upwards(dir).ok()?;
    let (_git_dir, work_tree) = found.into_repository_and_work_tree_directories();
    let top = work_tree?.canonicalize().ok()?;
    dir.starts_with(&top).then_some(top)
}

/// `-w/--workdir` as a path relative to `/workspace` (`None`: `/workspace`
/// itself): `.` components and `..` within it are resolved here, by name;
/// a path that leaves `/workspace` is refused, since the session only
/// starts beneath it.
pub fn workdir_beneath_workspace(given: &str) -> Result<Option<PathBuf>, CliError> {
    use std::path::Component;
    let p = Path::new(given);
    let rel = if p.is_absolute() {
        p.strip_prefix("/workspace").map_err(|_| {
            CliError::Usage(format!(
                "--workdir {}: the session starts beneath /workspace; give a path in it (absolute, or relative to /workspace)",
                lazaret_protocol::display::escape(given.as_bytes())
            ))
        })?
    } else {
        p
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir if out.pop() => {}
            _ => {
                return Err(CliError::Usage(format!(
                    "--workdir {}: leaves /workspace; give a path in it",
                    lazaret_protocol::display::escape(given.as_bytes())
                )))
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

pub fn resolve(args: &RunArgs, g: &Global) -> Result<Resolved, CliError> {
    let env = EnvVars::from_process();
    let loaded = lazaret_config::load(g.config(), &env, rustix::process::getuid().as_raw())?;
    let profile_name = g.profile().to_string();
    let profile = loaded.config.profile(&profile_name)?.clone();
    let ports = crate::ports::published(&profile, &args.publish)?;
    let Discovered {
        top: workspace,
        subdir,
        git,
    } = discover_workspace(g.workspace())?;
    // `-w` chooses where the session starts; otherwise it starts where
    // `lazaret` runs.
    let (subdir, workdir_from) = match &args.workdir {
        Some(w) => (workdir_beneath_workspace(w)?, WorkdirFrom::Option),
        None => {
            // Checked here, on the host, so that the note inside names the
            // cause only when it is the cause.
            let ignored = subdir.as_ref().is_some_and(|d| {
                crate::ignore_check::HostRules::load(&workspace)
                    .is_ignored_dir(d.as_os_str().as_bytes())
            });
            let from = if ignored {
                WorkdirFrom::CwdIgnored
            } else {
                WorkdirFrom::Cwd
            };
            (subdir, from)
        }
    };
    let storage_root = lazaret_config::storage_root(&loaded.config, &env)?;
    if storage_root.starts_with(&workspace) {
        return Err(CliError::Placement(format!(
            "the Storage Root {} lies beneath the workspace {}, which is mounted into the sandbox: choose a narrower workspace, or set storage.data_root outside it",
            storage_root.display(),
            workspace.display()
        )));
    }
    check_volumes_exist(&profile.volumes)?;
    // The overlaps first: they name the key at fault.
    lazaret_config::check_host_overlap(
        &loaded,
        &profile_name,
        &host_places(&workspace, &storage_root, &env),
    )?;
    lazaret_config::check_not_mounted(&loaded, &profile, &workspace)?;
    let env =
        crate::session_env::session_env(&profile.pass_env, &args.env, &|k| std::env::var_os(k))?;
    let domain_id = DomainIdV1::derive(&profile_name, workspace.as_os_str().as_bytes());
    let domain_root = storage_root.join("domains").join(domain_id.to_string());
    make_domain_root(&storage_root, &domain_root)?;
    Ok(Resolved {
        loaded,
        profile_name,
        profile,
        workspace,
        subdir,
        workdir_from,
        git,
        env,
        domain_id,
        storage_root,
        domain_root,
        ports,
    })
}

/// Each volume's host path exists. Early, for a clear message; the holder
/// resolves it again, once, and mounts what it resolved. A link is refused
/// before anything is said about its target.
fn check_volumes_exist(volumes: &[lazaret_config::Volume]) -> Result<(), CliError> {
    use lazaret_helpers::hostpath::{open_volume, HostPathError};
    for v in volumes {
        match open_volume(&v.host) {
            Ok(_) => {}
            Err(HostPathError::Open { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(CliError::Placement(format!(
                    "volume host path {} (mounted at {}) does not exist: create it or remove the volume from the profile",
                    v.host.display(),
                    v.sandbox
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Creates the Storage Root, its `domains` and the Domain Root, each
/// private to this user, and checks each is.
fn make_domain_root(storage_root: &Path, domain_root: &Path) -> Result<(), CliError> {
    let uid = rustix::process::getuid().as_raw();
    use lazaret_helpers::hostpath::check_private_dir;
    let mkdir = |p: &Path| mkdir_private(p).map_err(|e| e.with_storage(storage_root));
    mkdir(storage_root)?;
    check_private_dir("Storage Root", storage_root, uid)?;
    mkdir(&storage_root.join("domains"))?;
    check_private_dir("Storage Root", &storage_root.join("domains"), uid)?;
    mkdir(domain_root)?;
    check_private_dir("Domain Root", domain_root, uid)?;
    Ok(())
}

/// The host places no volume of the profile may overlap (see
/// `lazaret_config::check_host_overlap`): the workspace and the Git
/// directories it uses outside itself (read from the two pointer files Git
/// Sentry keeps read-only, never by running Git), the Storage Root, where
/// the configuration is read by default, and Lazaret's own programs.
fn host_places(workspace: &Path, storage_root: &Path, env: &EnvVars) -> lazaret_config::HostPlaces {
    let git_dirs = match lazaret_gitconfig::linked::linked(workspace) {
        Ok(Some(l)) => vec![l.present, l.git_dir],
        // A broken link fails the start later, with its own message.
        Ok(None) | Err(_) => Vec::new(),
    };
    lazaret_config::HostPlaces {
        workspace: workspace.to_path_buf(),
        git_dirs,
        storage_root: storage_root.to_path_buf(),
        default_config: lazaret_config::config_path(None, env),
        programs: crate::leader::libexec().ok(),
    }
}

/// How a connection to a Domain's coordinator failed.
#[derive(Debug)]
pub enum ConnectError {
    /// Nobody listens: the Domain is not running (or not yet listening).
    NotListening,
    /// A coordinator listens but is stopping: its Trust Anchor is
    /// withdrawn, or it closed the connection while registering us.
    Stopping(String),
    /// Whoever answered is not the Session Coordinator of the Trust Anchor
    /// the Domain published: nothing is sent to it.
    Untrusted(String),
}

fn connect_socket(domain_root: &Path) -> std::io::Result<UnixStream> {
    let short = lazaret_helpers::sockpath::short(&domain_root.join("run"), "coordinator.sock")?;
    UnixStream::connect(&short.path)
}

/// Whether something listens on the Domain's control socket.
pub fn listening(domain_root: &Path) -> bool {
    connect_socket(domain_root).is_ok()
}

/// Connects to the Domain's coordinator: registers a fresh key, then TLS
/// 1.3 with mutual authentication against the Trust Anchor the Domain
/// published in its host-private run directory (SR-9). The plain end of
/// the authenticated stream.
pub fn connect(domain_root: &Path) -> Result<UnixStream, ConnectError> {
    use lazaret_protocol::trust::manifest::{Published, FILE_NAME};
    let sock = connect_socket(domain_root).map_err(|_| ConnectError::NotListening)?;
    let domain_id = domain_root
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let pin = domain_root.join("run").join(FILE_NAME);
    if !pin.exists() {
        return Err(ConnectError::Stopping(
            "its Trust Anchor is withdrawn".into(),
        ));
    }
    let trust = Published::read_verified(&pin, Some(domain_id)).map_err(|e| {
        ConnectError::Untrusted(format!(
            "the Trust Anchor {}: {e}",
            lazaret_protocol::display::escape(pin.as_os_str().as_bytes())
        ))
    })?;
    match lazaret_trust::register::connect(sock, &trust) {
        Ok((stream, _session_id)) => Ok(stream),
        Err(lazaret_trust::TrustError::Io(e) | lazaret_trust::TrustError::Refused(e)) => {
            Err(ConnectError::Stopping(e))
        }
        Err(e) => Err(ConnectError::Untrusted(e.to_string())),
    }
}

pub fn run(args: RunArgs, g: &Global) -> Result<i32, CliError> {
    lazaret_helpers::timeline::mark("cli", "start");
    if rustix::process::geteuid().is_root() {
        // Root's Domain would be root's, its files root's, and its
        // sandbox would need root's subordinate IDs: never what was meant.
        return Err(CliError::Usage(format!(
            "not started as root: {}",
            crate::doctor::AS_ROOT
        )));
    }
    let r = resolve(&args, g)?;
    lazaret_helpers::timeline::mark("cli", "config-resolved");
    let mut notes = Vec::new();
    if !r.git {
        notes.push(format!(
            "lazaret: note: {} is not a Git repository's top level: Git Sentry has no Git directory to protect there (`.gitignore` files still route ignored paths to Ignored Workspace State)",
            lazaret_protocol::display::escape(r.workspace.as_os_str().as_bytes())
        ));
    }
    notes.extend(crate::shared_paths::notice(
        &r.profile_name,
        &r.profile.shared_paths,
    ));
    for line in notes {
        note_once(&r.domain_root, &line);
    }
    // A protection the profile turned off is said at every start.
    for line in direct_volume_notices(&r.profile.volumes) {
        eprintln!("{line}");
    }
    for line in crate::ports::notices(&r.ports) {
        eprintln!("{line}");
    }
    let argv = (!args.command.is_empty()).then(|| args.command.clone());
    let mode = Mode::New {
        argv,
        detach: args.detach,
    };
    join_or_start(&r, mode).map_err(|e| e.with_storage(&r.storage_root))
}

/// What a connection to the coordinator is for.
#[derive(Clone)]
enum Mode {
    /// A new Client Session (`lazaret run [-d]`).
    New {
        argv: Option<Vec<String>>,
        detach: bool,
    },
    /// This terminal to a running session (`lazaret attach`).
    Attach(Option<String>),
}

/// `lazaret attach [SESSION]`: this terminal to a session that runs
/// detached in the workspace's Domain (the named one, or its only one).
pub fn attach(which: Option<String>, g: &Global) -> Result<i32, CliError> {
    if !terminal::is_tty() {
        return Err(CliError::Usage(
            "attach needs a terminal: stdin and stdout are not one".into(),
        ));
    }
    let args = RunArgs {
        workdir: None,
        env: Vec::new(),
        detach: false,
        publish: Vec::new(),
        command: Vec::new(),
    };
    let r = resolve(&args, g)?;
    let stream = match connect(&r.domain_root) {
        Ok(s) => s,
        Err(ConnectError::NotListening | ConnectError::Stopping(_)) => {
            return Err(CliError::Session(format!(
                "no Domain is running for profile {} in {}: nothing to attach (`lazaret ps` lists the running Domains)",
                r.profile_name,
                lazaret_protocol::display::escape(r.workspace.as_os_str().as_bytes())
            )))
        }
        Err(ConnectError::Untrusted(why)) => {
            return Err(CliError::Session(format!(
                "the Domain's coordinator could not be authenticated, nothing was sent to it: {why}"
            )))
        }
    };
    match session(stream, &r, Mode::Attach(which))? {
        Some(code) => Ok(code),
        None => Err(CliError::Session(
            "the Domain is stopping: nothing to attach".into(),
        )),
    }
}

/// The file in the Domain Root that lists (by digest) the notes already
/// shown for the Domain.
const NOTES_SHOWN: &str = "notes-shown";

/// Prints `line` on stderr unless this Domain showed it before: a note is
/// news once, noise at every run. A changed note (another volume, another
/// shared path) is a new one. The record is the host-private Domain
/// Root's, which the sandbox cannot write; when it cannot be read or
/// written, the note is shown.
fn note_once(domain_root: &Path, line: &str) {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(line.as_bytes()));
    let path = domain_root.join(NOTES_SHOWN);
    let shown = std::fs::read_to_string(&path).unwrap_or_default();
    if shown.lines().any(|l| l == digest) {
        return;
    }
    eprintln!("{line}");
    // Bounded: a few notes per Domain; past 64 KiB start again.
    let keep = if shown.len() > 64 << 10 { "" } else { &shown };
    let _ = std::fs::write(&path, format!("{keep}{digest}\n"));
}

/// One line per writable volume the profile binds directly
/// (`git_sentry = false`), at every start: Git Sentry does not cover it.
pub fn direct_volume_notices(volumes: &[lazaret_config::Volume]) -> Vec<String> {
    volumes
        .iter()
        .filter(|v| !v.read_only && !v.git_sentry)
        .map(|v| {
            format!(
                "lazaret: volume {} (host {}) is bound directly (git_sentry = false): Git Sentry does not cover it, so host Git in a repository there runs what the sandbox writes (configuration, hooks)",
                lazaret_protocol::display::message(&v.sandbox),
                lazaret_protocol::display::escape(v.host.as_os_str().as_bytes())
            )
        })
        .collect()
}

/// Joins the Domain's running sandbox, or leads its start-up first; the
/// session's exit status.
fn join_or_start(r: &Resolved, mode: Mode) -> Result<i32, CliError> {
    // A coordinator that is tearing down closes the connection before it
    // accepts the session; then we lead a new start-up.
    let mut said_protected = false;
    let mut last_stopping = None;
    let started_ms = crate::changes_cmd::now_ms();
    for _ in 0..5 {
        let stream = match connect(&r.domain_root) {
            Ok(s) => s,
            Err(ConnectError::NotListening) => {
                leader::start_domain(r)?;
                continue;
            }
            Err(ConnectError::Stopping(why)) => {
                last_stopping = Some(why);
                wait_domain_down(&r.domain_root, Duration::from_secs(60));
                continue;
            }
            Err(ConnectError::Untrusted(why)) => {
                return Err(CliError::Session(format!(
                    "the Domain's coordinator could not be authenticated, nothing was sent to it: {why}"
                )))
            }
        };
        lazaret_helpers::timeline::mark("cli", "control-authenticated");
        if !said_protected {
            say_protected(&r.domain_root);
            said_protected = true;
        }
        match session(stream, r, mode.clone())? {
            Some(code) => {
                crate::changes_cmd::session_note(&r.domain_root, &r.workspace, started_ms);
                return Ok(code);
            }
            None => wait_domain_down(&r.domain_root, Duration::from_secs(60)),
        }
    }
    Err(CliError::Start(format!(
        "the Domain's coordinator kept closing the connection{}; see coordinator.log in the Domain Root",
        last_stopping
            .map(|w| format!(" (last: {w})"))
            .unwrap_or_default()
    )))
}

/// After a coordinator turned this session away (its Domain is stopping),
/// waits until that Domain is down (its coordinator holds the Domain
/// `flock` until then), so the next attempt starts a new one instead of
/// meeting the stopping coordinator again. Bounded: past `limit` the next
/// attempt goes on regardless and says what it finds.
fn wait_domain_down(domain_root: &Path, limit: Duration) {
    use rustix::fs::{flock, FlockOperation, Mode, OFlags};
    let Ok(lock) = rustix::fs::open(
        domain_root.join("domain.lock"),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let deadline = std::time::Instant::now() + limit;
    // Shared, and let go at once: a new coordinator takes it exclusively.
    while flock(&lock, FlockOperation::NonBlockingLockShared).is_err()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One line on stderr naming what Git Sentry keeps read-only beyond its
/// defaults (hook managers' files, `core.hooksPath` in the workspace, the
/// profile's `protected_paths`), as the Domain's router found them at
/// start (`<Domain Root>/rules-baseline/protected`). The router reads
/// sandbox-writable files, so the names are escaped.
fn say_protected(domain_root: &Path) {
    let Ok(bytes) = std::fs::read(domain_root.join("rules-baseline/protected")) else {
        return;
    };
    let items: Vec<String> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .take(64)
        .map(|l| match l.iter().position(|&b| b == b'\t') {
            Some(i) => format!(
                "{} ({})",
                lazaret_protocol::display::escape(&l[..i]),
                lazaret_protocol::display::escape(&l[i + 1..])
            ),
            None => lazaret_protocol::display::escape(l),
        })
        .collect();
    if !items.is_empty() {
        eprintln!(
            "lazaret: Git Sentry also keeps read-only inside: {}",
            items.join(", ")
        );
    }
}

/// Runs one Client Session. `None`: the coordinator went away before it
/// accepted us (it was stopping), so the caller tries again.
fn session(stream: UnixStream, r: &Resolved, mode: Mode) -> Result<Option<i32>, CliError> {
    let tty = terminal::is_tty();
    let tty_info = session_tty(&mode, tty);
    let attaching = matches!(mode, Mode::Attach(_));
    let mut w = stream
        .try_clone()
        .map_err(|e| CliError::Session(e.to_string()))?;
    let mut rd = stream;
    let hello = hello(r, mode, tty_info);
    let detach = hello.detach;
    let Some(session_id) = accept(&mut w, &mut rd, &hello)? else {
        return Ok(None);
    };
    if detach {
        // The session goes on without us; its ID is what `attach` takes.
        println!("{session_id}");
        return Ok(Some(0));
    }
    if tty {
        terminal::enter_raw()
            .map_err(|e| CliError::Session(format!("cannot set the terminal to raw mode: {e}")))?;
    }
    let w = Arc::new(Mutex::new(w));
    // Approved host commands run here, in this session's CLI; they end
    // with the session, however this function returns.
    let setting = host_setting(r);
    let runner = host_command::Runner::new(w.clone(), setting.clone());
    let _end_commands = EndCommands(runner.clone());
    let route: prompt::KeyRoute = Arc::new(Mutex::new(None));
    spawn_signal_relay(&w, tty);
    spawn_stdin_relay(w.clone(), route.clone(), attaching);
    let (tx, events) = std::sync::mpsc::channel::<prompt::Event>();
    std::thread::spawn(move || read_server(rd, &runner, &tx));
    Relay {
        r,
        tty,
        session_id,
        w,
        setting,
        route,
        events,
        backlog: VecDeque::new(),
        modes: crate::vt::Modes::default(),
    }
    .run()
}

/// The session's terminal: this one's size, or, for a detached session
/// (which gets a PTY whether or not this is a terminal), 24x80.
fn session_tty(mode: &Mode, tty: bool) -> Option<TtyInfo> {
    let term = || std::env::var("TERM").unwrap_or_else(|_| "xterm".into());
    let detach = matches!(mode, Mode::New { detach: true, .. });
    if tty {
        let (rows, cols) = terminal::size();
        Some(TtyInfo {
            term: term(),
            rows,
            cols,
        })
    } else {
        detach.then(|| TtyInfo {
            term: term(),
            rows: 24,
            cols: 80,
        })
    }
}

/// The session's first record: what it runs, or which session it attaches
/// to, on which terminal, where and with what.
fn hello(r: &Resolved, mode: Mode, tty_info: Option<TtyInfo>) -> Hello {
    let (argv, detach, attach) = match mode {
        Mode::New { argv, detach } => (argv, detach, None),
        Mode::Attach(session) => (
            None,
            false,
            Some(lazaret_protocol::session::Attach {
                session,
                rows: tty_info.as_ref().map_or(24, |t| t.rows),
                cols: tty_info.as_ref().map_or(80, |t| t.cols),
            }),
        ),
    };
    Hello {
        version: PROTOCOL_VERSION,
        config_fingerprint: r.loaded.fingerprint.clone(),
        argv,
        tty: tty_info,
        workdir: r
            .subdir
            .as_ref()
            .and_then(|p| p.to_str())
            .map(str::to_string),
        workdir_from: r.workdir_from,
        env: r.env.clone(),
        control: None,
        ports: r.ports.clone(),
        detach,
        attach,
    }
}

/// Sends `hello` and reads the coordinator's answer: the Session ID, or
/// `None` when the coordinator went away first (it was stopping).
fn accept(
    w: &mut UnixStream,
    rd: &mut UnixStream,
    hello: &Hello,
) -> Result<Option<String>, CliError> {
    if write_frame(w, hello).is_err() {
        return Ok(None);
    }
    match read_frame::<_, ServerMsg>(rd) {
        Ok(ServerMsg::Accepted { session_id }) => {
            lazaret_helpers::timeline::mark("cli", "session-accepted");
            Ok(Some(session_id))
        }
        Ok(ServerMsg::Refused { reason }) => Err(CliError::Session(reason)),
        Ok(other) => Err(CliError::Session(format!(
            "unexpected first record {other:?}"
        ))),
        Err(FrameError::Closed) => Ok(None),
        Err(e) if matches!(&e, FrameError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionReset) => {
            Ok(None)
        }
        Err(e) => Err(CliError::Session(e.to_string())),
    }
}

/// Where and how this session's approved host commands run.
fn host_setting(r: &Resolved) -> crate::host_dir::Setting {
    crate::host_dir::Setting {
        workspace: r.workspace.clone(),
        pass_env: r.profile.escalation.pass_env.clone(),
        isolate_ignored: r.profile.isolate_ignored,
        writable: r
            .profile
            .volumes
            .iter()
            .filter(|v| !v.read_only)
            .map(|v| v.host.clone())
            .collect(),
    }
}

/// Reads the coordinator's records until the connection ends: host
/// commands start and stop here, not behind a prompt that owns the main
/// loop; everything else goes to the main loop.
fn read_server(
    mut rd: UnixStream,
    runner: &host_command::Runner,
    tx: &std::sync::mpsc::Sender<prompt::Event>,
) {
    loop {
        let m = read_frame::<_, ServerMsg>(&mut rd).map_err(prompt::Lost::Frame);
        match m {
            Ok(ServerMsg::RunHostCommand(c)) => {
                lazaret_helpers::timeline::mark("cli", "host-command-in");
                runner.start(c);
                continue;
            }
            Ok(ServerMsg::CancelHostCommand { request_id }) => {
                runner.cancel(&request_id);
                continue;
            }
            _ => {}
        }
        let end = m.is_err();
        if tx.send(m).is_err() || end {
            return;
        }
    }
}

/// The session's main loop: what the coordinator sends, played out on
/// this terminal.
struct Relay<'a> {
    r: &'a Resolved,
    tty: bool,
    session_id: String,
    w: Arc<Mutex<UnixStream>>,
    setting: crate::host_dir::Setting,
    route: prompt::KeyRoute,
    events: std::sync::mpsc::Receiver<prompt::Event>,
    /// Records a prompt read past while it owned the terminal.
    backlog: VecDeque<prompt::Event>,
    /// The terminal's input modes and screen as the session's program set
    /// them, to give back after a prompt resets them.
    modes: crate::vt::Modes,
}

impl Relay<'_> {
    fn run(mut self) -> Result<Option<i32>, CliError> {
        let mut out = std::io::stdout().lock();
        let mut err = std::io::stderr();
        loop {
            let ev = match self.backlog.pop_front() {
                Some(ev) => ev,
                None => self.events.recv().unwrap_or(Err(prompt::Lost::ReaderGone)),
            };
            match ev {
                Ok(ServerMsg::Stdout(d)) => {
                    if self.tty {
                        self.modes.feed(&d);
                    }
                    if out.write_all(&d).and_then(|_| out.flush()).is_err() {
                        // Our reader is gone (`lazaret run -- yes | head`):
                        // hang the session up, exit as if by SIGPIPE.
                        terminal::restore();
                        let _ = lock(&self.w).shutdown(std::net::Shutdown::Both);
                        return Ok(Some(128 + libc::SIGPIPE));
                    }
                }
                Ok(ServerMsg::Stderr(d)) => {
                    let _ = err.write_all(&d);
                }
                Ok(ServerMsg::Exit { status }) => {
                    lazaret_helpers::timeline::mark("cli", "exit-received");
                    terminal::restore();
                    return Ok(Some(status));
                }
                Ok(ServerMsg::Prompt(p)) => {
                    drop(out);
                    self.prompt(&p);
                    out = std::io::stdout().lock();
                }
                Ok(ServerMsg::PromptWithdrawn { .. }) => {}
                Ok(ServerMsg::Detached) => {
                    terminal::restore();
                    let session_id = &self.session_id;
                    eprintln!(
                        "\r\nlazaret: detached from session {session_id}; it goes on (`lazaret attach {}` reattaches)",
                        &session_id[..session_id.len().min(8)]
                    );
                    return Ok(Some(0));
                }
                Ok(ServerMsg::Failed { reason }) => {
                    terminal::restore();
                    return Err(CliError::Session(reason));
                }
                Ok(other) => {
                    terminal::restore();
                    return Err(CliError::Session(format!("unexpected record {other:?}")));
                }
                Err(e) => {
                    terminal::restore();
                    return Err(CliError::Session(format!(
                        "the connection to the Domain's coordinator was lost ({e}); see coordinator.log in {}",
                        self.r.domain_root.display()
                    )));
                }
            }
        }
    }

    /// Asks about a Host Escalation on this terminal, sends the decision,
    /// and gives the terminal back to the session's program.
    fn prompt(&mut self, p: &lazaret_protocol::session::EscalationPrompt) {
        let r = self.r;
        let changed = crate::changes_cmd::read_by_command(&r.domain_root, &r.workspace, &p.argv);
        let host = prompt::HostSide::of(&self.setting, &p.cwd);
        let decision = prompt::ask(
            p,
            &host,
            &changed,
            &self.route,
            &self.events,
            &mut self.backlog,
        );
        if let Some(argv) = decision {
            let _ = write_frame(
                &mut *lock(&self.w),
                &ClientMsg::Decision {
                    request_id: p.request_id.clone(),
                    argv,
                },
            );
        }
        give_back(&mut self.modes, &self.w);
    }
}

/// After a prompt, once decided: the session's program gets its input
/// modes and screen back, and a full-screen one is made to redraw the
/// screen the prompt took, by a resize to one row less and back (the
/// kernel signals only a change of size), through the session's own
/// resize path.
fn give_back(modes: &mut crate::vt::Modes, w: &Arc<Mutex<UnixStream>>) {
    let restore = modes.restore();
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(restore.as_bytes()).and_then(|_| o.flush());
    if !modes.alternate_screen() {
        return;
    }
    let (rows, cols) = terminal::size();
    if rows > 1 {
        send_resize(w, rows - 1, cols);
    } else {
        send_resize(w, rows, cols.saturating_sub(1).max(1));
    }
    let w = w.clone();
    // Apart, so the program sees two sizes, not one it already had; the
    // terminal's size as it is then.
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let (rows, cols) = terminal::size();
        send_resize(&w, rows, cols);
    });
}

fn send_resize(w: &Mutex<UnixStream>, rows: u16, cols: u16) {
    let msg = ClientMsg::Resize { rows, cols };
    let _ = write_frame(&mut *lock(w), &msg);
}

/// Ends the session's host commands when the session ends.
struct EndCommands(host_command::Runner);

impl Drop for EndCommands {
    fn drop(&mut self) {
        self.0.end_all();
    }
}

fn spawn_stdin_relay(w: Arc<Mutex<UnixStream>>, route: prompt::KeyRoute, detach_keys: bool) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 16 * 1024];
        let mut keys = DetachKeys::default();
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = write_frame(&mut *lock(&w), &ClientMsg::StdinEof);
                    return;
                }
                Ok(n) => n,
            };
            // While a prompt owns the terminal, keystrokes are its alone.
            if let Some(tx) = lock(&route).as_ref() {
                let _ = tx.send(buf[..n].to_vec());
                continue;
            }
            let (data, detach) = if detach_keys {
                keys.feed(&buf[..n])
            } else {
                (buf[..n].to_vec(), false)
            };
            if !data.is_empty() && write_frame(&mut *lock(&w), &ClientMsg::Stdin(data)).is_err() {
                return;
            }
            if detach {
                let _ = write_frame(&mut *lock(&w), &ClientMsg::Detach);
                return;
            }
        }
    });
}

/// `lazaret attach`'s detach keys, ctrl-p ctrl-q (as docker): a ctrl-p
/// is held back until the next byte shows whether it starts them; any
/// other byte sends it on.
#[derive(Default)]
struct DetachKeys {
    held: bool,
}

impl DetachKeys {
    /// The bytes for the session, and whether the keys were typed (what
    /// follows them is dropped: the terminal is leaving).
    fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let [p, q] = DETACH_KEYS;
        let mut out = Vec::with_capacity(input.len() + 1);
        for &b in input {
            if self.held {
                self.held = false;
                if b == q {
                    return (out, true);
                }
                out.push(p);
            }
            if b == p {
                self.held = true;
            } else {
                out.push(b);
            }
        }
        (out, false)
    }
}

/// ctrl-p ctrl-q.
const DETACH_KEYS: [u8; 2] = [0x10, 0x11];

/// Resizes follow the terminal; without a PTY, Ctrl-C and friends are
/// forwarded as signals. SIGTERM and SIGHUP end the session cleanly, so the
/// terminal is restored on the way out.
fn spawn_signal_relay(w: &Arc<Mutex<UnixStream>>, tty: bool) {
    use signal_hook::consts::*;
    let w = w.clone();
    let Ok(mut signals) =
        signal_hook::iterator::Signals::new([SIGWINCH, SIGINT, SIGQUIT, SIGTERM, SIGHUP])
    else {
        return;
    };
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let msg = match sig {
                SIGWINCH if tty => {
                    let (rows, cols) = terminal::size();
                    ClientMsg::Resize { rows, cols }
                }
                SIGWINCH => continue,
                SIGINT if !tty => ClientMsg::Signal(Signal::Interrupt),
                SIGQUIT if !tty => ClientMsg::Signal(Signal::Quit),
                SIGTERM if !tty => ClientMsg::Signal(Signal::Terminate),
                SIGHUP if !tty => ClientMsg::Signal(Signal::Hangup),
                SIGTERM | SIGHUP => {
                    let _ = lock(&w).shutdown(std::net::Shutdown::Both);
                    return;
                }
                _ => continue,
            };
            if write_frame(&mut *lock(&w), &msg).is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::workdir_beneath_workspace as w;
    use std::path::PathBuf;

    #[test]
    fn ctrl_p_ctrl_q_detaches_and_a_lone_ctrl_p_is_passed_on() {
        let mut k = super::DetachKeys::default();
        assert_eq!(k.feed(b"ab\x10"), (b"ab".to_vec(), false));
        assert_eq!(k.feed(b"\x10x"), (b"\x10\x10x".to_vec(), false));
        assert_eq!(k.feed(b"y\x10\x11rest"), (b"y".to_vec(), true));
        let mut k = super::DetachKeys::default();
        assert_eq!(k.feed(b"\x10"), (vec![], false));
        assert_eq!(k.feed(b"\x11"), (vec![], true));
    }

    #[test]
    fn workdir_is_beneath_the_workspace() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(w("src").unwrap(), p("src"));
        assert_eq!(w("/workspace/src/a").unwrap(), p("src/a"));
        assert_eq!(w("./src/../lib/").unwrap(), p("lib"));
        assert_eq!(w("/workspace").unwrap(), None);
        assert_eq!(w(".").unwrap(), None);
        assert_eq!(w("a/..").unwrap(), None);
        for bad in [
            "/tmp",
            "/workspaces/x",
            "..",
            "a/../..",
            "/workspace/../etc",
        ] {
            let e = w(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--workdir {bad}:")), "{e}");
        }
    }
}
