//! The sandbox plan: everything the Runtime Supervisor needs to create the
//! namespaces, mount the root and start `runsc`, decided by the coordinator
//! and handed over as a sealed memfd. The supervisor applies it and decides
//! nothing of its own.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The Agent Sandbox ID, also the runsc container ID.
    pub sandbox_id: String,
    pub runsc: RunscInvocation,
    /// The runsc state directory (`--root`).
    pub state_dir: PathBuf,
    /// Where config.json is written.
    pub bundle_dir: PathBuf,
    /// The Domain's transient run directory (the sessions' runsc process
    /// and pid files live in its `sessions/`); the supervisor removes it
    /// when it stops the sandbox.
    pub run_dir: PathBuf,
    /// `lazaret-exec-bridge`, which the supervisor starts for each Client
    /// Session.
    pub exec_bridge: PathBuf,
    pub root: RootLayout,
    /// State Anchors, overlaid on their sandbox paths, parents first.
    pub anchors: Vec<AnchorMount>,
    /// A Lazaret-owned read-only layer placed above the image in the root
    /// and in every anchor that covers part of it (for example the
    /// `/usr/local/bin/lazaret-escalate` link into the control mount), so
    /// that no upper ever has to hold a control file.
    pub control_lower: Option<PathBuf>,
    /// Mounts in order; later ones may sit inside earlier ones.
    pub mounts: Vec<PlannedMount>,
    pub hostname: String,
    /// Environment of the sandbox's init process.
    pub env: Vec<String>,
    /// Subordinate ID ranges of the developer, for the user namespace.
    pub id_map: IdMap,
    /// The Network Sidecar; `None` runs the sandbox with `--network=none`.
    pub network: Option<SandboxNetwork>,
    /// The FUSE mount router presenting the workspace (Git Sentry, and
    /// Ignored Workspace State unless turned off); `None` binds the
    /// workspace directly (a workspace that is no Git repository with
    /// Ignored Workspace State off).
    pub router: Option<RouterPlan>,
    /// A second router presenting only the Git directory of a linked
    /// worktree or submodule checkout (see `RouterPlan::git_dir`).
    pub git_router: Option<RouterPlan>,
    /// The writable volumes served through a router of their own, which
    /// applies Git Sentry to every Git directory in them.
    pub volume_routers: Vec<VolumeRouter>,
    /// The Domain's resource limits (`[profiles.NAME.limits]`).
    pub limits: SandboxLimits,
}

/// `[profiles.NAME.limits]` in bytes and counts; `None`: unlimited.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxLimits {
    /// All memory of the sandbox (its processes, tmpfs mounts and page
    /// cache): the supervisor bounds the Sentry's memory file with it.
    pub memory: Option<u64>,
    /// Processes and threads per user ID inside: `RLIMIT_NPROC` of every
    /// sandbox process, which gVisor enforces.
    pub processes: Option<u64>,
    /// Bytes of file data in the Ignored Workspace State (the router
    /// refuses more with `ENOSPC`).
    pub ignored_state: Option<u64>,
    /// Bytes in each State Anchor's upper (checked at start).
    pub anchor: Option<u64>,
}

/// `lazaret-mount-router`, started by the holder before runsc; its mount
/// point is bound at `/workspace` instead of the host workspace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouterPlan {
    pub binary: PathBuf,
    pub workspace: PathBuf,
    /// The Domain's Ignored Workspace State (persistent).
    pub state: PathBuf,
    pub mountpoint: PathBuf,
    /// Whether Git-ignored paths go to `state`; without it the router
    /// enforces Git Sentry only (`--sentry-only`).
    pub isolate_ignored: bool,
    /// Workspace-relative paths read-only inside (`--protect`), beyond
    /// those the router finds itself.
    pub protected_paths: Vec<String>,
    /// Where the router remembers the host's own ignore rules across the
    /// sandbox's edits (`--rules-baseline`), in the Domain Root.
    pub rules_baseline: Option<PathBuf>,
    /// Bytes of file data the Ignored Workspace State may hold
    /// (`--state-max-bytes`); `None`: unbounded.
    pub state_max_bytes: Option<u64>,
    /// Present only this host Git directory, as `.git` beneath
    /// `workspace` (`--git-dir`): a linked worktree's common directory or
    /// a submodule checkout's Git directory.
    pub git_dir: Option<PathBuf>,
    /// The sandbox user's UID:GID (`--inside-owner`), when the profile
    /// has a `user`.
    pub inside_owner: Option<(u32, u32)>,
}

/// A writable volume presented through `lazaret-mount-router` with
/// Ignored Workspace State off (`--sentry-only`): Git Sentry holds for
/// every Git directory in it, those the sandbox makes later included.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeRouter {
    /// The volume's bind in `SandboxPlan::mounts`: the holder pins its
    /// host path, starts the router over what it pinned (replacing
    /// `router.workspace`) when that is a directory, and mounts the
    /// router's view there instead.
    pub mount: usize,
    pub router: RouterPlan,
}

/// What the supervisor and the holder need to build the Network Sidecar
/// (see `lib/netpolicy/README.md`): the enforcement namespace N1 is the
/// holder's, the sandbox namespace N2 a child's; the policy is installed
/// and probed in N1 before `runsc run` (fail closed).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxNetwork {
    /// The canonical policy bytes (opaque here; the helper
    /// `lazaret-netpolicy` checks them against `digest`).
    pub policy: Vec<u8>,
    /// SHA-256 (hex) of `policy`.
    pub digest: String,
    /// `lazaret-netpolicy`.
    pub helper: PathBuf,
    pub slirp4netns: PathBuf,
    /// The resolver file: bound over `/etc/resolv.conf` in the holder's
    /// mount namespace (for slirp4netns B) and, read-only, in the sandbox.
    pub resolv_conf: PathBuf,
    /// Where the holder leaves the helper's reports (`install.json`,
    /// `probe.json`) for the coordinator.
    pub evidence_dir: PathBuf,
    /// A tmpfs over `/proc/sys/net` before `runsc run`: runsc has the
    /// root-network-namespace check (`isRootNS`) and this kernel would
    /// make it fire (see `lazaret_helpers::runsc::root_ns_workaround`).
    pub hide_proc_sys_net: bool,
    /// Named in the argv of the slirp4netns processes, so that `ps` (and
    /// the tests) can tell which Domain they belong to.
    pub domain_id: String,
    /// The network attachment (`crate::trust::network_attachment`) the
    /// helper's attestation must name.
    pub attachment: String,
    /// `allow_hosts`: the filtering resolver to start before slirp4netns B.
    pub dns_filter: Option<DnsFilterPlan>,
    /// The log of `lazaret-netpolicy watch` (`host-addresses.log` in the
    /// Domain Root), opened by the holder for appending.
    pub host_watch_log: PathBuf,
    /// Published ports: the supervisor binds their host sides in the
    /// host's network namespace before the holder exists; the holder
    /// relays each connection to slirp4netns B's forward in N1.
    pub ports: Vec<PublishedPort>,
    /// The directory (in the Domain's run directory, never mounted into
    /// the sandbox) where slirp4netns B's API socket is made while its
    /// forwards are added, and removed after; used only with `ports`.
    pub api_socket_dir: PathBuf,
}

/// Where the sandbox has `lazaret-port-relay` when its Domain publishes
/// ports: in the control directory, read-only; the sandbox's init starts it.
pub const PORT_RELAY: &str = "/.lazaret/bin/lazaret-port-relay";

/// Where the sandbox has `lazaret-sudo` when its profile has a `user`: the
/// sandbox's init starts its service when it is there.
pub const SUDO_SERVICE: &str = "/.lazaret/bin/lazaret-sudo";

/// A published port (`lazaret run -p`, the profile's `ports`): host
/// processes connecting to `host_addr:host_port` reach whatever listens
/// on `sandbox_port` inside, on its loopback or the sandbox's address.
/// TCP only.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublishedPort {
    pub host_addr: std::net::Ipv4Addr,
    pub host_port: u16,
    pub sandbox_port: u16,
}

impl std::fmt::Display for PublishedPort {
    /// `127.0.0.1:8080->3000`, as `lazaret ps` shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}->{}",
            self.host_addr, self.host_port, self.sandbox_port
        )
    }
}

/// How the holder starts `lazaret-dns-filter`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DnsFilterPlan {
    /// `lazaret-dns-filter`.
    pub binary: PathBuf,
    /// Bound over `/etc/resolv.conf` in the holder's mount namespace
    /// instead of `resolv_conf`: slirp4netns B forwards to the filter.
    pub sidecar_resolv_conf: PathBuf,
    /// Its log (`dns-filter.log` in the Domain Root), opened by the holder
    /// for appending.
    pub log: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunscInvocation {
    pub path: PathBuf,
    /// Global flags placed before the verb (`--root` excluded).
    pub global_flags: Vec<String>,
}

impl RunscInvocation {
    /// The argv for one runsc verb.
    pub fn command(&self, state_dir: &std::path::Path, verb_and_args: &[&str]) -> Vec<String> {
        let mut argv = vec![self.path.to_string_lossy().into_owned()];
        argv.push(format!("--root={}", state_dir.display()));
        argv.extend(self.global_flags.iter().cloned());
        argv.extend(verb_and_args.iter().map(|s| s.to_string()));
        argv
    }
}

/// The sandbox's root file system: a kernel overlayfs with the prepared
/// image as its read-only lower.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RootLayout {
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The empty directory where the merged root is mounted.
    pub merged: PathBuf,
}

/// One State Anchor: an overlay of a Domain-scoped upper over the image's
/// copy of `path`, mounted at `merged` and bound into the sandbox at `path`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AnchorMount {
    pub path: String,
    /// The image's directory for `path`; `None` when the image has none
    /// (an empty lower is used).
    pub lower: Option<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub merged: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum MountKind {
    /// A bind of a host path.
    Bind { source: PathBuf, read_only: bool },
    /// Sandbox-local transient storage.
    Tmpfs,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedMount {
    pub destination: String,
    pub kind: MountKind,
    /// Why this mount exists, for logs and `--print-plan`.
    pub purpose: MountPurpose,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum MountPurpose {
    Workspace,
    Volume,
    /// Lazaret's fixed control mount (`/.lazaret`) and its mailbox.
    Control,
    /// `/etc/resolv.conf`: the resolvers of the network policy.
    Network,
    /// A profile's shared path: one host directory mounted read-write into
    /// every Domain of the profile (pinned like a volume).
    SharedPath,
}

/// `0 -> uid` and `1.. -> subordinate range`, the same shape for gids.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdMap {
    pub uid: u32,
    pub gid: u32,
    pub sub_uid: (u32, u32),
    pub sub_gid: (u32, u32),
}

/// What a new Session Coordinator tells the startup leader on its
/// readiness pipe: one postcard frame ([`crate::frame`]), then the pipe
/// closes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum CoordinatorReadiness {
    /// The Domain's sandbox runs and the coordinator serves sessions.
    Ready,
    /// Start-up failed; the reason, for the developer.
    Failed(String),
}

/// What the `lazaret` CLI hands to a new Session Coordinator, as a sealed
/// memfd (its SHA-256 on the command line, `--input-digest`): the
/// validated profile, already resolved against the host.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CoordinatorInput {
    pub domain_id: String,
    pub profile_name: String,
    /// The canonical Agent Workspace.
    pub workspace: PathBuf,
    pub domain_root: PathBuf,
    pub config_fingerprint: String,
    /// The prepared image rootfs, the read-only lower of the sandbox root.
    pub image_rootfs: PathBuf,
    pub image_reference: String,
    pub runsc: RunscInvocation,
    pub id_map: IdMap,
    pub env: Vec<(String, String)>,
    /// The profile's persistent paths: one State Anchor each.
    pub persistent_paths: Vec<String>,
    /// Route Git-ignored workspace paths to Ignored Workspace State.
    pub isolate_ignored: bool,
    /// Workspace-relative paths the profile makes read-only inside.
    pub protected_paths: Vec<String>,
    /// The profile's `user`: every session runs as this user inside
    /// (made at its start, uid and gid [`SANDBOX_USER_ID`]); `None`: root.
    pub user: Option<String>,
    /// `user.name` and `user.email` for Git inside (the host's, or the
    /// profile's `git_identity`), each already checked to be one line.
    pub git_identity: (Option<String>, Option<String>),
    /// The host CA bundle to trust inside (`trust_host_ca`), as read by
    /// the CLI.
    pub host_ca: Option<Vec<u8>>,
    pub volumes: Vec<VolumeSpec>,
    /// The profile's shared paths, each with its host directory (made by
    /// the CLI): mounted read-write after the volumes.
    pub shared_paths: Vec<SharedPathSpec>,
    /// Host Escalation auto-approval rules, in the profile's order.
    pub auto_approve: Vec<AutoApproveRule>,
    /// Directory holding `lazaret-supervisor` and `lazaret-exec-bridge`.
    pub libexec: PathBuf,
    pub network: NetworkInput,
    pub limits: SandboxLimits,
    /// `keep_alive`: how long the Domain stays up after its last Client
    /// Session ended (`None`: it stops then).
    pub keep_alive_ms: Option<u64>,
    /// `detach_on_hangup`: a session on a PTY whose terminal hangs up
    /// keeps running detached, for `lazaret attach`.
    pub detach_on_hangup: bool,
}

/// The uid and gid of the profile's `user` inside.
pub const SANDBOX_USER_ID: u32 = 1000;

/// The Domain's network, as the CLI prepared it from the profile's
/// `[network]`, and what the host offers for it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkInput {
    /// The egress policy the CLI derived (`None`: `mode = "none"`, no
    /// network at all).
    pub policy: Option<DerivedPolicy>,
    /// `slirp4netns` as found on `PATH`; `None` when it is missing.
    pub slirp4netns: Option<PathBuf>,
    /// See [`SandboxNetwork::hide_proc_sys_net`].
    pub hide_proc_sys_net: bool,
    /// The profile's `ports` and the startup leader's `-p`, checked.
    pub ports: Vec<PublishedPort>,
}

/// The egress policy derived by the CLI, in the host's network namespace
/// (the host's own addresses, taken then, are denied), before the
/// coordinator starts: the coordinator links no configuration parser and
/// never derives it. It is not yet bound to a generation: the coordinator
/// checks `digest`, decodes the canonical bytes
/// ([`crate::netpolicy::Policy`]'s `from_bytes`, which refuses bytes that
/// are not canonical), and
/// binds the policy to the generation's network attachment.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DerivedPolicy {
    /// The policy's canonical bytes (opaque here).
    pub bytes: Vec<u8>,
    /// SHA-256 (lower-case hex) of `bytes`.
    pub digest: String,
}

/// What a [`DerivedPolicy`] is bound to until the coordinator binds it.
pub const UNBOUND_POLICY: &str = "unbound";

/// One `[[escalation.auto_approve]]` rule of the profile.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AutoApproveRule {
    /// The vector approved (with `trailing_args`, its prefix).
    pub argv: Vec<String>,
    /// Further arguments are allowed, but never an option the rule does
    /// not list in `trailing_options`.
    pub trailing_args: bool,
    /// The options the sandbox may add, each exactly as written.
    pub trailing_options: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct VolumeSpec {
    pub host: PathBuf,
    pub sandbox: String,
    pub read_only: bool,
    /// A writable volume is served through a mount router of its own with
    /// Git Sentry on every Git directory in it; `false` binds it directly.
    pub git_sentry: bool,
}

/// One `shared_paths` entry: the sandbox path and the profile's host
/// directory for it (beneath the Storage Root, `profiles/<profile>/shared/`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SharedPathSpec {
    pub sandbox: String,
    pub host: PathBuf,
}
