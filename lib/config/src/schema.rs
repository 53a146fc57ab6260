//! The configuration schema: what `config.toml` may contain.
//!
//! Key names are stable interface. Every struct denies unknown fields so a
//! typo (`imagee`) is an error instead of a silently ignored setting that
//! the user believes is in force. The types are also sent to other processes
//! with postcard, so they stay within what a non-self-describing format can
//! encode: no `flatten`, no untagged enums, no skipped fields.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::limits::Limits;

/// Name of the Agent Profile used when none is chosen; always present.
pub const DEFAULT_PROFILE: &str = "default";

/// Image used by a profile that does not name one.
pub const DEFAULT_IMAGE: &str = "lazaret:default";

/// Sandbox paths kept across sessions by default.
pub const DEFAULT_PERSISTENT_PATHS: [&str; 6] = ["/usr", "/etc", "/var", "/opt", "/root", "/home"];

/// The whole host configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub storage: Storage,
    #[serde(default)]
    pub runtime: Runtime,
    /// Agent Profiles by name. After loading, `default` is always present.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// `[storage]`: where lazaret keeps its state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    /// Storage Root override; see [`crate::storage_root`] for the fallback.
    #[serde(default)]
    pub data_root: Option<PathBuf>,
}

/// `[runtime]`: how the sandbox runtime is found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// Absolute path of the `runsc` binary; `None` lets the caller search.
    #[serde(default)]
    pub runsc: Option<PathBuf>,
}

/// `[profiles.NAME]`: one Agent Profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    pub image: String,
    /// Sandbox paths whose changes survive the session.
    pub persistent_paths: Vec<String>,
    pub isolate_ignored: bool,
    /// Workspace-relative paths that are read-only inside (Git Sentry),
    /// beyond those it protects by itself.
    pub protected_paths: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Names of host environment variables whose values each session gets
    /// (taken at each `lazaret run`, never stored): API keys and the like.
    pub pass_env: Vec<String>,
    /// Trust the host's CA bundle inside (`/.lazaret/host-ca.pem`, with
    /// the usual variables pointing at it): for TLS-inspecting proxies.
    pub trust_host_ca: bool,
    /// The bundle to trust; default: the host's system bundle.
    pub host_ca_file: Option<PathBuf>,
    pub volumes: Vec<Volume>,
    /// Sandbox directories kept in one host directory per (profile, path)
    /// and mounted read-write into every Domain of this profile, so that
    /// (for example) an agent's login made in one workspace is there in
    /// all of them. What one of these Domains writes there, the others
    /// read: Domain isolation does not hold for these paths, by design.
    pub shared_paths: Vec<String>,
    pub network: Network,
    /// Published ports, `[HOST_ADDR:]HOST_PORT:SANDBOX_PORT` each
    /// (`crate::parse_port`): host processes reach a sandbox listener
    /// there; the host side binds 127.0.0.1 unless an address is given.
    pub ports: Vec<String>,
    pub escalation: Escalation,
    /// Who Git inside commits as.
    pub git_identity: GitIdentity,
    /// The user every session runs as inside (a POSIX user name, not
    /// `root`), made at the Domain's start with passwordless `sudo` and a
    /// home under `/home`; `None`: root.
    pub user: Option<String>,
    /// `[profiles.NAME.limits]`: the Domain's share of the host.
    pub limits: Limits,
    /// How long the Domain stays up after its last Client Session ended
    /// (`"10m"`); `None`: it stops then.
    pub keep_alive: Option<String>,
    /// A session on a PTY whose terminal hangs up keeps running detached,
    /// for `lazaret attach`, instead of ending.
    pub detach_on_hangup: bool,
}

impl Profile {
    /// `keep_alive` in milliseconds (validated at load).
    pub fn keep_alive_ms(&self) -> Option<u64> {
        self.keep_alive
            .as_deref()
            .and_then(|v| crate::limits::parse_duration_ms(v).ok())
    }
}

impl Default for Profile {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            persistent_paths: DEFAULT_PERSISTENT_PATHS
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            isolate_ignored: true,
            protected_paths: Vec::new(),
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            trust_host_ca: false,
            host_ca_file: None,
            volumes: Vec::new(),
            shared_paths: Vec::new(),
            network: Network::default(),
            ports: Vec::new(),
            escalation: Escalation::default(),
            git_identity: GitIdentity::default(),
            user: None,
            limits: Limits::default(),
            keep_alive: None,
            detach_on_hangup: false,
        }
    }
}

/// `[profiles.NAME.git_identity]`: the `user.name` and `user.email` Git
/// inside uses unless the repository's or the sandbox's own configuration
/// sets them. By default the host's (read from its Git configuration
/// files, never by running Git); `name`/`email` replace them, and
/// `from_host = false` leaves Git inside without one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GitIdentity {
    pub from_host: bool,
    pub name: Option<String>,
    pub email: Option<String>,
}

impl Default for GitIdentity {
    fn default() -> Self {
        Self {
            from_host: true,
            name: None,
            email: None,
        }
    }
}

/// `[[profiles.NAME.volumes]]`: a host directory mounted into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    pub host: PathBuf,
    /// Mount point inside the sandbox (a sandbox path, hence a string).
    pub sandbox: String,
    /// Read-only unless explicitly opened up: the safe choice is the default.
    #[serde(default = "default_true")]
    pub read_only: bool,
    /// A writable volume is served through a mount router of its own that
    /// applies Git Sentry to every Git directory in it (those made later
    /// included); `false` binds it directly, and host Git run in a
    /// repository there then runs what the sandbox wrote. Lazaret says so
    /// at every start. Read-only volumes are always bound directly.
    #[serde(default = "default_true")]
    pub git_sentry: bool,
}

// `[profiles.NAME.network]` is the egress policy's input: its type lives
// with the policy's derivation (`lazaret-netpolicy`), which reads it
// without linking this parser.
pub use lazaret_netpolicy::section::{Network, NetworkDefault, NetworkMode};

/// `[profiles.NAME.escalation]`: commands run on the host without asking.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Escalation {
    pub auto_approve: Vec<AutoApprove>,
    /// Names of variables an approved host command takes from the
    /// requesting `lazaret` CLI's environment (`SSH_AUTH_SOCK`,
    /// `GPG_AGENT_INFO`), read when it runs, never stored. The sandbox
    /// never sets one.
    pub pass_env: Vec<String>,
}

/// One `[[profiles.NAME.escalation.auto_approve]]` rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoApprove {
    /// Exact argv prefix to match.
    pub argv: Vec<String>,
    /// Whether arguments beyond `argv` are allowed; off so a rule approves
    /// exactly what it spells out.
    #[serde(default)]
    pub trailing_args: bool,
    /// With `trailing_args`: the options the sandbox may add, each exactly
    /// as written. A trailing argument that reads as an option (it starts
    /// with `-`, `+` or `@`, or holds `=`, as make's `NAME=VALUE`) and is
    /// not listed here makes the request unmatched: it goes to the prompt.
    #[serde(default)]
    pub trailing_options: Vec<String>,
}

fn default_true() -> bool {
    true
}

impl Config {
    /// The built-in configuration used when no file exists: one `default`
    /// Agent Profile and no overrides.
    pub fn builtin() -> Self {
        let mut profiles = BTreeMap::new();
        profiles.insert(DEFAULT_PROFILE.to_owned(), Profile::default());
        Self {
            storage: Storage::default(),
            runtime: Runtime::default(),
            profiles,
        }
    }

    /// The Agent Profile called `name`.
    pub fn profile(&self, name: &str) -> Result<&Profile, ConfigError> {
        self.profiles
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProfile {
                name: name.to_owned(),
                available: self.profiles.keys().cloned().collect(),
            })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::builtin()
    }
}
