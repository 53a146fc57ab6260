//! Client Session records between the `lazaret` CLI and the Session
//! Coordinator, over the Domain's host-private Unix socket.

use serde::{Deserialize, Serialize};

/// 5: [`HostCommand`] carries the request's directory inside,
/// [`Hello::workdir_from`] where the session's directory came from,
/// [`Hello::ports`] the ports to publish, [`Hello::detach`] and
/// [`Hello::attach`] sessions that outlive their terminal.
pub const PROTOCOL_VERSION: u32 = 5;

/// The first record on a control connection, before TLS: the Client
/// CLI's public key, for the certificate it then presents. It crosses the
/// socket in the clear; the socket's directory and mode and the peer-uid
/// check (SR-10) are what guard it, and it carries nothing secret.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Register {
    pub version: u32,
    pub public_key: [u8; 32],
}

/// The coordinator's answer to [`Register`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Registered {
    /// A certificate of role Client CLI for the key, bound to a new
    /// Client CLI ID and Session ID, valid on this connection only.
    Issued {
        certificate: Vec<u8>,
        client_id: String,
        session_id: String,
    },
    Refused {
        reason: String,
    },
}

/// The largest [`Register`] record the coordinator reads.
pub const MAX_REGISTER: usize = 256;

/// Terminal facts of the client, present when the session gets a PTY.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TtyInfo {
    pub term: String,
    pub rows: u16,
    pub cols: u16,
}

/// The first record a client sends.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    /// The Configuration Fingerprint of the config the client loaded; a
    /// client whose config differs from the running Domain's is refused.
    pub config_fingerprint: String,
    /// `None`: an interactive login shell.
    pub argv: Option<Vec<String>>,
    /// `Some`: run on a coordinator-owned PTY.
    pub tty: Option<TtyInfo>,
    /// Where the command starts, relative to `/workspace` (the
    /// subdirectory of the repository `lazaret run` was started in).
    pub workdir: Option<String>,
    /// Why the session starts in `workdir`: what a directory missing inside
    /// means.
    pub workdir_from: WorkdirFrom,
    /// Variables for this session's processes only.
    pub env: SessionEnv,
    /// `Some`: no session, one control request (`lazaret ps`, `lazaret
    /// stop`); answered with one record, then the connection closes. The
    /// configuration need not match the running Domain's.
    pub control: Option<Control>,
    /// The ports this client asks to be published (its profile's and its
    /// `-p`): a session is refused when one of them is not published by
    /// the running Domain, since ports are set when the Domain starts.
    pub ports: Vec<crate::plan::PublishedPort>,
    /// `lazaret run -d`: the session runs on a coordinator-owned PTY
    /// (`tty` gives its size) with no client once it is accepted; its
    /// output goes to a bounded ring buffer until `lazaret attach`.
    pub detach: bool,
    /// `Some`: no new session; attach this terminal to a running one
    /// (`lazaret attach`). Its configuration need not match.
    pub attach: Option<Attach>,
}

/// What `lazaret attach` asks for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Attach {
    /// A Session ID or a unique prefix of one; `None`: the Domain's only
    /// detached session.
    pub session: Option<String>,
    pub rows: u16,
    pub cols: u16,
}

impl Hello {
    /// The `Hello` of a control request: no session, no configuration.
    pub fn control(c: Control) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            config_fingerprint: String::new(),
            argv: None,
            tty: None,
            workdir: None,
            workdir_from: WorkdirFrom::Cwd,
            env: SessionEnv::default(),
            control: Some(c),
            ports: Vec::new(),
            detach: false,
            attach: None,
        }
    }
}

/// Where [`Hello::workdir`] came from, so that a directory that is not
/// there inside gets the right answer: an error for one the developer
/// named, a note naming the cause (checked on the host) for the directory
/// `lazaret` happened to run in.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum WorkdirFrom {
    /// The directory `lazaret run` runs in: missing inside, the session
    /// starts in `/workspace` with a note.
    Cwd,
    /// As `Cwd`, and the host's ignore rules ignore it: the sandbox has
    /// its own Ignored Workspace State there, which the note says.
    CwdIgnored,
    /// `-w/--workdir`: missing inside, the session fails (125) and runs
    /// nothing.
    Option,
}

/// A control request ([`Hello::control`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Control {
    /// Answered with [`ServerMsg::Status`].
    Status,
    /// End every session and tear the Domain down; answered with
    /// [`ServerMsg::Stopping`] at once (the Domain lock is free once it
    /// is down).
    Stop,
}

/// What a running Domain says of itself (`lazaret ps`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DomainStatus {
    pub generation: u64,
    /// When this generation became ready, seconds since the epoch.
    pub started: u64,
    /// Client Sessions now served.
    pub sessions: u32,
    /// The sandbox holder's PID (PID 1 of the Domain's PID namespace),
    /// for the memory of the Domain's processes.
    pub holder_pid: Option<i32>,
    /// The ports the Domain publishes (set when it started).
    pub ports: Vec<crate::plan::PublishedPort>,
    /// One per Client Session, and per detached session that ended and
    /// whose status nobody has collected yet.
    pub session_list: Vec<SessionInfo>,
}

/// One Client Session, for `lazaret ps`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    /// The command as the developer gave it (`None`: a login shell).
    pub argv: Option<Vec<String>>,
    /// Whether a terminal or client is attached.
    pub attached: bool,
    /// Whether it keeps running when its terminal goes (`run -d`,
    /// `detach_on_hangup`).
    pub detachable: bool,
    pub since_unix_ms: u64,
    /// How it ended while detached: its exit status, or `None` while it runs
    /// (and for a session that failed to start: see `failed`).
    pub exit_status: Option<i32>,
    pub failed: bool,
}

/// Environment variables the developer gives one session's processes
/// (`lazaret run -e`, the profile's `pass_env`): API keys and the like.
/// The values travel over the session socket and, to runsc, in a sealed
/// memfd: never in a file, a log or a command line. `Debug` shows the
/// names only.
#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionEnv(pub Vec<(String, String)>);

impl std::fmt::Debug for SessionEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| format!("{k}=<hidden>")))
            .finish()
    }
}

impl SessionEnv {
    /// The most variables one session may be given.
    pub const MAX_VARS: usize = 256;
    /// The most bytes of names and values together.
    pub const MAX_BYTES: usize = 256 * 1024;

    /// The names, for messages and logs.
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// Whether `name` is a name the kernel and shells accept in an environment
/// block: not empty, no NUL, no `=`, not starting with a digit. The
/// coordinator checks a session's variables with it; `lazaret-config`'s
/// `env_name` is the same rule with an error for each case.
pub fn env_name_is_valid(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\0', '='])
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// The working directory inside for a [`Hello::workdir`]: `/workspace`,
/// or beneath it when `rel` is a relative path of plain components (no
/// `.`, `..` or empty component, no NUL); anything else is `/workspace`.
pub fn sandbox_workdir(rel: Option<&str>) -> String {
    match rel {
        Some(r)
            if !r.is_empty()
                && !r.contains('\0')
                && r.split('/').all(|c| !c.is_empty() && c != "." && c != "..") =>
        {
            format!("/workspace/{r}")
        }
        _ => "/workspace".to_string(),
    }
}

/// Signals a client forwards when it has no PTY (with a PTY, Ctrl-C and
/// friends travel in-band and the sandbox's line discipline handles them).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Quit,
    Terminate,
    Hangup,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ClientMsg {
    Stdin(Vec<u8>),
    StdinEof,
    Resize {
        rows: u16,
        cols: u16,
    },
    Signal(Signal),
    /// The developer's decision on a prompted Host Escalation: the vector
    /// to run (possibly edited), or `None` to deny.
    Decision {
        request_id: String,
        argv: Option<Vec<String>>,
    },
    /// Detach this terminal from the session (`lazaret attach`'s
    /// ctrl-p ctrl-q); the session goes on. Answered with
    /// [`ServerMsg::Detached`].
    Detach,
    /// How a host command this CLI ran for [`ServerMsg::RunHostCommand`]
    /// ended.
    HostCommandOutcome {
        request_id: String,
        outcome: crate::escalation::Outcome,
    },
}

/// An approved host command, for the requesting session's CLI to run: the
/// exact vector, by execve without a shell, in the host directory that
/// corresponds to `cwd` (the CLI resolves it beneath the workspace).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostCommand {
    pub request_id: String,
    pub argv: Vec<String>,
    /// The request's directory inside the sandbox: the sandbox's words.
    pub cwd: String,
    /// Who approved it: "the developer" or "auto-approval rule N".
    pub decided_by: String,
    /// Milliseconds the command may run; `None`: no timeout.
    pub timeout_ms: Option<u64>,
}

/// What the developer is asked to decide (DX-4). `cwd`, `argv`,
/// `justification` and `requester` are the sandbox's words; everything
/// else is the coordinator's. The Session ID is the one the request named
/// and whose Session Anchor it holds: every process inside can read every
/// session's anchor, so it does not prove which session's process asked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EscalationPrompt {
    pub request_id: String,
    pub profile: String,
    pub session_id: String,
    /// The directory inside the sandbox the request was made from.
    pub cwd: String,
    /// The host workspace. The CLI shows the directory the command runs
    /// in, which it derives from `cwd` beneath this.
    pub host_dir: String,
    pub argv: Vec<String>,
    pub justification: String,
    /// The process that asked, as the request claims it.
    pub requester: crate::escalation::Requester,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ServerMsg {
    /// The session is registered and its command is starting.
    Accepted {
        session_id: String,
    },
    /// Stdout, or the merged PTY output.
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The command ended with this exit status (podman's conventions).
    Exit {
        status: i32,
    },
    /// The session could not be served; the text says what to do next.
    Refused {
        reason: String,
    },
    /// Terminal ownership moves to the prompt: sandbox output is paused.
    Prompt(EscalationPrompt),
    /// The prompted request ended without a decision (it was cancelled).
    PromptWithdrawn {
        request_id: String,
    },
    /// Run an approved host command (see [`HostCommand`]); answered with
    /// [`ClientMsg::HostCommandOutcome`].
    RunHostCommand(HostCommand),
    /// The request was cancelled, or its session is ending: kill the
    /// command's process group.
    CancelHostCommand {
        request_id: String,
    },
    /// The command could not be started (runsc failed before it ran): a
    /// Lazaret failure, exit 125; the text says what to do next.
    Failed {
        reason: String,
    },
    /// The answer to [`Control::Status`].
    Status(DomainStatus),
    /// The answer to [`Control::Stop`].
    Stopping,
    /// The answer to [`ClientMsg::Detach`]: the session goes on without
    /// this terminal.
    Detached,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_as_the_kernel_and_shells_take_them() {
        for ok in ["PATH", "_X1", "a_b", "ÄPFEL"] {
            assert!(env_name_is_valid(ok), "{ok}");
        }
        for bad in ["", "A=B", "1X", "A\0B", "="] {
            assert!(!env_name_is_valid(bad), "{bad:?}");
        }
    }
}
