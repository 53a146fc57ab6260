//! `lazaret state list|inspect|verify|reset`: the developer's view of the
//! Domains' persistent state, without touching Lazaret's storage by hand
//! (FR-11, DX-6, SR-14).
//!
//! Exit codes: 0 success; 1 `verify` found problems; 2 refused (the Domain
//! is active or in use, or the reset was not confirmed); 125 failure.

use crate::error::CliError;
use crate::global::{Global, Uses};
use lazaret_config::EnvVars;
use lazaret_protocol::display;
use lazaret_protocol::escalation::{LogEvent, LogRecord};
use lazaret_protocol::DomainIdV1;
use lazaret_state::anchors::Anchors;
use lazaret_state::meta::DomainMeta;
use lazaret_state::scan::Summary;
use lazaret_state::store::Store;
use lazaret_state::DomainLayout;
use serde::Serialize;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const VERIFY_PROBLEMS: i32 = 1;
pub const REFUSED: i32 = crate::error::REFUSED;

#[derive(clap::Subcommand)]
pub enum StateCmd {
    /// Every Domain, one line each: ID, profile, whether active, the size
    /// of its State Anchors against their bound, workspace (`--profile`
    /// and `--workspace` keep the Domains that match)
    List {
        /// One JSON array of Domains (every detail) instead of text
        #[arg(long)]
        json: bool,
        /// Every Domain in detail: image, limits, Ignored Workspace State,
        /// each State Anchor's generation and size
        #[arg(short, long, conflicts_with = "json")]
        long: bool,
    },
    /// One Domain's metadata and a summary of its overlay changes (never file contents)
    Inspect {
        #[command(flatten)]
        which: Which,
        /// One JSON document instead of text
        #[arg(long)]
        json: bool,
        /// List the paths added, changed and deleted (up to 1000 of each
        /// per State Anchor), not only their counts
        #[arg(long)]
        paths: bool,
    },
    /// Remove an inactive Domain: its State Anchors, Ignored Workspace
    /// State, records and image leases (the workspace itself is untouched)
    Rm {
        /// Domain IDs, as `lazaret state list` shows them (default: the
        /// Domain of --profile and --workspace)
        domains: Vec<String>,
        /// Do not ask for confirmation (the safety checks still apply)
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        which: Which,
    },
    /// Remove every inactive Domain whose workspace no longer exists
    Prune {
        /// Do not ask for confirmation
        #[arg(long)]
        yes: bool,
    },
    /// Structural verification of an inactive Domain's state
    Verify {
        #[command(flatten)]
        which: Which,
    },
    /// Discard State Anchors: the next start follows the current image
    Reset {
        /// Persistent paths to reset (e.g. /usr)
        paths: Vec<String>,
        /// Reset every State Anchor of the Domain
        #[arg(long, conflicts_with = "paths")]
        all: bool,
        /// Discard the Ignored Workspace State (what the sandbox wrote at
        /// Git-ignored workspace paths)
        #[arg(long)]
        ignored: bool,
        /// Do not ask for confirmation (the safety checks still apply)
        #[arg(long)]
        yes: bool,
        /// Reset only the paths named, even when the package manager's
        /// database in /var then disagrees with /usr and /etc (by default
        /// /usr, /etc and /var are reset together once a package was
        /// installed)
        #[arg(long)]
        only: bool,
        #[command(flatten)]
        which: Which,
    },
}

/// The config that names the Storage Root (`--config`).
#[derive(Default)]
pub struct Common {
    config: Option<PathBuf>,
    /// Go on with a broken configuration (`ps`, `stop --all`): its Storage
    /// Root as far as it can be read, with a warning.
    lenient: bool,
}

/// How the Domain is named: by its ID (`--domain`), or by the shared
/// `--profile` and `--workspace` (see [`Which::with`]).
#[derive(clap::Args)]
pub struct Which {
    /// A Domain ID, as `lazaret state list` shows it (instead of --profile
    /// and --workspace)
    #[arg(long)]
    domain: Option<String>,
    // The shared options, filled in by `Which::with`.
    #[arg(skip)]
    profile: String,
    /// Whether `--profile` was given: without it, the workspace's only
    /// Domain is the one meant, whatever its profile.
    #[arg(skip)]
    profile_given: bool,
    #[arg(skip)]
    workspace: Option<PathBuf>,
    #[arg(skip)]
    common: Common,
}

impl Which {
    pub(crate) fn config(&self) -> Option<PathBuf> {
        self.common.config.clone()
    }

    /// The Domain with ID `domain`, in the Storage Root `config` names.
    pub(crate) fn id(domain: String, config: Option<PathBuf>) -> Which {
        Which {
            domain: Some(domain),
            profile: String::new(),
            profile_given: false,
            workspace: None,
            common: Common {
                config,
                lenient: false,
            },
        }
    }

    /// The Domain `domain` (an ID) or the shared options name.
    pub(crate) fn new(domain: Option<String>, g: &Global) -> Result<Which, CliError> {
        Which {
            domain,
            profile: String::new(),
            profile_given: false,
            workspace: None,
            common: Common::default(),
        }
        .with(g)
    }

    /// Goes on with a broken configuration, its Storage Root as far as it
    /// can be read (for `stop`, which needs nothing else).
    pub(crate) fn despite_config(mut self) -> Which {
        self.common.lenient = true;
        self
    }

    /// Completes the Domain's name with the shared options (`--profile`,
    /// `--workspace`, `--config`); `--domain` stands alone.
    pub(crate) fn with(mut self, g: &Global) -> Result<Which, CliError> {
        g.check_domain_id(self.domain.as_deref())?;
        self.profile = g.profile().to_string();
        self.profile_given = g.profile.is_some();
        self.workspace = g.workspace.clone();
        self.common = Common {
            config: g.config.clone(),
            lenient: false,
        };
        Ok(self)
    }
}

/// What `lazaret image commit` takes from a Domain, found with the Domain
/// locked (inactive) until this is dropped.
pub(crate) struct ForCommit {
    _lock: std::fs::File,
    pub id: String,
    pub meta: DomainMeta,
    /// The prepared image the Domain's State Anchors lie over.
    pub base: String,
    pub layers: Vec<lazaret_image::commit::AnchorLayer>,
}

/// The (inactive, locked) Domain's State Anchors, an interrupted reset
/// finished or rolled back first.
fn recovered_anchors<'a>(domain: &Domain, store: &'a Store) -> Result<Anchors<'a>, CliError> {
    let anchors = Anchors::new(&domain.layout, store)?;
    anchors.recover(&mut |p: &Path| remove_tree(p))?;
    Ok(anchors)
}

/// Locks the (inactive) Domain `which` names and reads its image and the
/// current generation of its State Anchors, for `lazaret image commit`.
pub(crate) fn for_commit(which: &Which, storage_root: &Path) -> Result<ForCommit, CliError> {
    let domain = resolve(which)?;
    let lock = lock_inactive(&domain)?;
    let Some(meta) = domain.meta.clone() else {
        return Err(CliError::Session(format!(
            "Domain {} has never started: run `lazaret run` in it first",
            domain.id
        )));
    };
    let rootfs = Path::new(&meta.image_rootfs);
    let base = lazaret_image::artifact_id_of_rootfs(rootfs)
        .filter(|_| lazaret_image::storage_root_of_rootfs(rootfs) == Some(storage_root))
        .ok_or_else(|| {
            CliError::Session(format!(
                "Domain {}'s image lower {} is not a prepared image of this Storage Root",
                domain.id,
                display::escape_os(rootfs.as_os_str())
            ))
        })?
        .to_string();
    let store = Store::open(&domain.layout.store())?;
    let anchors = recovered_anchors(&domain, &store)?;
    let layers = anchors
        .current()?
        .into_iter()
        .map(|a| lazaret_image::commit::AnchorLayer {
            path: a.path,
            upper: a.upper,
        })
        .collect();
    Ok(ForCommit {
        _lock: lock,
        id: domain.id,
        meta,
        base,
        layers,
    })
}

/// Every Domain of the Storage Root, by ID.
pub(crate) fn all_domains(config: Option<PathBuf>) -> Result<Vec<Domain>, CliError> {
    domains_of(config, false)
}

/// Every Domain, found even while the configuration is broken (for `ps`
/// and `stop --all`, which need only the Storage Root).
pub(crate) fn all_domains_despite_config(config: Option<PathBuf>) -> Result<Vec<Domain>, CliError> {
    domains_of(config, true)
}

fn domains_of(config: Option<PathBuf>, lenient: bool) -> Result<Vec<Domain>, CliError> {
    let common = Common {
        config: config.clone(),
        lenient,
    };
    let root = storage_root(&common)?;
    let mut names: Vec<String> = std::fs::read_dir(root.join("domains"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| DomainIdV1::parse(n).is_some())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let mut which = Which::id(name.clone(), config.clone());
        which.common.lenient = lenient;
        match resolve(&which) {
            Ok(d) => out.push(d),
            // Removed while we looked (`state rm` elsewhere): not listed.
            Err(_) if !root.join("domains").join(&name).exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn storage_root(common: &Common) -> Result<PathBuf, CliError> {
    Ok(storage_root_and_config(common)?.0)
}

fn storage_root_and_config(common: &Common) -> Result<(PathBuf, lazaret_config::Config), CliError> {
    let env = EnvVars::from_process();
    let uid = rustix::process::getuid().as_raw();
    let (root, config) = if common.lenient {
        let (root, err) =
            lazaret_config::storage_root_despite_errors(common.config.as_deref(), &env, uid)?;
        if let Some(e) = err {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "lazaret: warning: {}; going on with the Storage Root {}",
                    display::message(&e.to_string()),
                    display::escape_os(root.as_os_str())
                )
            });
        }
        (root, lazaret_config::Config::builtin())
    } else {
        let loaded = lazaret_config::load(common.config.as_deref(), &env, uid)?;
        let root = lazaret_config::storage_root(&loaded.config, &env)?;
        (root, loaded.config)
    };
    for p in [root.clone(), root.join("domains")] {
        if p.exists() {
            lazaret_helpers::hostpath::check_private_dir("Storage Root", &p, uid)?;
        }
    }
    Ok((root, config))
}

pub(crate) struct Domain {
    pub id: String,
    pub layout: DomainLayout,
    pub meta: Option<DomainMeta>,
}

/// Resolves a Domain through trusted metadata only: the ID is derived or
/// parsed, never taken as a path.
pub(crate) fn resolve(which: &Which) -> Result<Domain, CliError> {
    if which.domain.is_none() && which.profile.is_empty() {
        // A `Which` from clap names no profile until `Which::with` ran:
        // never derive a Domain ID from the empty name.
        return Err(CliError::Usage(
            "internal error: the Domain was named before the shared options were read".into(),
        ));
    }
    let (root, config) = storage_root_and_config(&which.common)?;
    let id = match &which.domain {
        Some(d) => match DomainIdV1::parse(d) {
            Some(id) => id,
            None => by_prefix(&root, d)?,
        },
        None => {
            let ws = crate::run::canonical_workspace(which.workspace.as_deref())?;
            let profile = if which.profile_given {
                which.profile.clone()
            } else {
                obvious_profile(&root, &config, &ws)?
            };
            let id = DomainIdV1::derive(&profile, ws.as_os_str().as_bytes());
            if !root.join("domains").join(id.to_string()).exists() {
                return Err(CliError::Session(format!(
                    "the workspace {} has no Domain of profile {} in {}: `lazaret run{}` starts it; `lazaret state list` shows the Domains",
                    display::escape_os(ws.as_os_str()),
                    display::message(&profile),
                    display::escape_os(root.as_os_str()),
                    if profile == crate::global::DEFAULT_PROFILE {
                        String::new()
                    } else {
                        format!(" --profile {}", display::message(&profile))
                    }
                )));
            }
            id
        }
    };
    let layout = DomainLayout::new(root.join("domains").join(id.to_string()));
    if layout.root.exists() {
        let uid = rustix::process::getuid().as_raw();
        lazaret_helpers::hostpath::check_private_dir("Domain Root", &layout.root, uid)?;
    }
    lazaret_state::beneath::Root::open(&layout.root).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::NotFound {
            "no such Domain".to_string()
        } else {
            e.to_string()
        };
        CliError::Session(format!(
            "Domain {id} in {}: {why}; `lazaret state list` shows the Domains",
            display::escape_os(root.as_os_str())
        ))
    })?;
    let meta = lazaret_state::meta::read(&layout.meta()).ok();
    Ok(Domain {
        id: id.to_string(),
        layout,
        meta,
    })
}

/// The workspace's Domains (profile, ID), by profile: those of the
/// configuration's profiles (and `default`) whose Domain Root exists, and
/// those whose trusted metadata names this workspace (a profile since
/// removed from the configuration).
pub(crate) fn workspace_domains(
    root: &Path,
    config: &lazaret_config::Config,
    ws: &Path,
) -> Vec<(String, DomainIdV1)> {
    let ws_bytes = ws.as_os_str().as_bytes();
    let mut profiles: std::collections::BTreeSet<String> =
        config.profiles.keys().cloned().collect();
    profiles.insert(crate::global::DEFAULT_PROFILE.to_string());
    let domains = root.join("domains");
    for e in std::fs::read_dir(&domains).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(id) = name.to_str().and_then(DomainIdV1::parse) else {
            continue;
        };
        let layout = DomainLayout::new(domains.join(id.to_string()));
        if let Ok(m) = lazaret_state::meta::read(&layout.meta()) {
            // Trusted only as far as the ID it derives: a meta naming
            // this workspace counts when its profile gives this very ID.
            if m.workspace.as_bytes() == ws_bytes && DomainIdV1::derive(&m.profile, ws_bytes) == id
            {
                profiles.insert(m.profile);
            }
        }
    }
    profiles
        .into_iter()
        .map(|p| {
            let id = DomainIdV1::derive(&p, ws_bytes);
            (p, id)
        })
        .filter(|(_, id)| domains.join(id.to_string()).exists())
        .collect()
}

/// The profile meant when a command acts on one Domain and `--profile` is
/// not given: the workspace's only Domain, whatever its profile; with none,
/// `default` (whose absence the caller reports); with several, a refusal
/// that lists them, never a guess.
pub(crate) fn obvious_profile(
    root: &Path,
    config: &lazaret_config::Config,
    ws: &Path,
) -> Result<String, CliError> {
    let mut found = workspace_domains(root, config, ws);
    match found.len() {
        0 => Ok(crate::global::DEFAULT_PROFILE.to_string()),
        1 => Ok(found.remove(0).0),
        n => {
            let list: Vec<String> = found
                .iter()
                .map(|(p, id)| format!("  --profile {}  (Domain {})", display::message(p), id))
                .collect();
            Err(CliError::Usage(format!(
                "the workspace {} has {n} Domains; name one:\n{}",
                display::escape_os(ws.as_os_str()),
                list.join("\n")
            )))
        }
    }
}

/// The one Domain whose ID begins with `prefix` (at least 4 of its hex
/// digits, as `lazaret ps` shows 12), as `docker` takes a short container
/// ID.
fn by_prefix(root: &Path, prefix: &str) -> Result<DomainIdV1, CliError> {
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if prefix.len() < 4 || prefix.len() > 32 || !prefix.chars().all(hex) {
        return Err(CliError::Session(format!(
            "{} is not a Domain ID (32 lowercase hex digits, as `lazaret state list` shows, or the first 4 or more of them)",
            display::message(prefix)
        )));
    }
    let mut found: Vec<DomainIdV1> = std::fs::read_dir(root.join("domains"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(DomainIdV1::parse))
        .filter(|id| id.to_string().starts_with(prefix))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(CliError::Session(format!(
            "no Domain ID begins with {prefix} in {}; `lazaret state list` shows the Domains",
            root.display()
        ))),
        n => Err(CliError::Session(format!(
            "{n} Domain IDs begin with {prefix}: give more of the ID (`lazaret state list` shows them whole)"
        ))),
    }
}

fn scan(domain: &Domain, path: &str, generation: u64) -> Result<Summary, CliError> {
    let upper = domain
        .layout
        .anchors()
        .join(lazaret_state::layout::anchor_dir_name(path))
        .join(lazaret_state::layout::generation_dir_name(generation))
        .join("upper");
    let lower = domain
        .meta
        .as_ref()
        .map(|m| Path::new(&m.image_rootfs).join(path.trim_start_matches('/')))
        .unwrap_or_default();
    let out = Command::new(crate::leader::libexec()?.join("lazaret-supervisor"))
        .arg("--scan-anchor")
        .arg(path)
        .arg(&upper)
        .arg(&lower)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::Session(format!("cannot run lazaret-supervisor: {e}")))?;
    if !out.status.success() {
        // The scan may name entries of the upper, which the sandbox named.
        let lines: Vec<String> = out
            .stderr
            .trim_ascii()
            .split(|&b| b == b'\n')
            .map(|l| match std::str::from_utf8(l) {
                Ok(l) => display::message(l),
                Err(_) => display::escape(l),
            })
            .collect();
        return Err(CliError::Session(lines.join("\n")));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| CliError::Session(format!("bad scan output: {e}")))
}

/// The State Anchors of the Domain at `domain_root` whose upper holds more
/// than `max` bytes, with what each holds. Checked before a Domain
/// starts: the uppers are host directories the sandbox writes through the
/// gofer, which nothing here can bound while it runs (see
/// `lazaret doctor`), so a Domain past its bound does not start again
/// until the anchor is reset or the bound raised. An anchor that cannot be
/// scanned is left to `lazaret state verify`.
pub(crate) fn anchors_over(domain_root: &Path, max: u64) -> Vec<(String, u64)> {
    let layout = DomainLayout::new(domain_root.to_path_buf());
    let Ok(meta) = lazaret_state::meta::read(&layout.meta()) else {
        return Vec::new();
    };
    let domain = Domain {
        id: String::new(),
        layout,
        meta: Some(meta),
    };
    // One confined scan per anchor, all at once: each is a process of its
    // own (a user namespace, landlock, seccomp), so this takes about the
    // time of the largest rather than the sum.
    let anchors: Vec<_> = domain.meta.iter().flat_map(|m| m.anchors.iter()).collect();
    std::thread::scope(|s| {
        let scans: Vec<_> = anchors
            .iter()
            .map(|a| s.spawn(|| (a.path.clone(), scan(&domain, &a.path, a.generation))))
            .collect();
        scans
            .into_iter()
            .filter_map(|h| match h.join() {
                Ok((path, Ok(s))) if s.bytes > max => Some((path, s.bytes)),
                _ => None,
            })
            .collect()
    })
}

/// Whether a coordinator holds the Domain's lock right now.
fn is_active(domain: &Domain) -> bool {
    let Ok(f) = std::fs::File::open(domain.layout.lock()) else {
        return false;
    };
    // Taken and dropped at once: a starting coordinator retries its lock.
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
}

/// The process holding the Domain lock, read from `/proc/locks` by the
/// lock file's device and inode (what it holds, never its command line).
fn lock_holder(lock: &Path) -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(lock).ok()?;
    let (major, minor) = (rustix::fs::major(m.dev()), rustix::fs::minor(m.dev()));
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        // `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`
        let f: Vec<&str> = l.split_whitespace().collect();
        let (pid, id) = (f.get(4)?, f.get(5)?);
        let mut parts = id.split(':');
        let (ma, mi, ino) = (parts.next()?, parts.next()?, parts.next()?);
        (f.get(1) == Some(&"FLOCK")
            && u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && ino.parse::<u64>().ok()? == m.ino())
        .then(|| pid.parse().ok())
        .flatten()
    })
}

/// Live processes (not zombies, not us) that hold something beneath the
/// Domain Root: an open file, their working or root directory. Processes
/// whose descriptors cannot be read (another user's) are not ours to
/// find; the mount check covers what the kernel still holds.
fn users_of(root: &Path) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next()) == Some('Z');
        if pid == me || zombie {
            continue;
        }
        let holds = |p: PathBuf| std::fs::read_link(p).is_ok_and(|t| t.starts_with(root));
        let base = e.path();
        let mut what = None;
        if holds(base.join("cwd")) || holds(base.join("root")) {
            what = Some("its working directory".to_string());
        } else if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
            what = fds
                .flatten()
                .find(|fd| holds(fd.path()))
                .map(|fd| format!("descriptor {}", fd.file_name().to_string_lossy()));
        }
        if let Some(what) = what {
            // Sandbox processes choose their own names.
            let comm = std::fs::read(base.join("comm")).unwrap_or_default();
            out.push((
                pid,
                format!("{} ({what})", display::escape(comm.trim_ascii())),
            ));
        }
    }
    out
}

/// Mounts of the Domain Root seen from any of our processes' namespaces.
fn mounts(root: &Path) -> Vec<String> {
    let needle = root.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().parse::<i32>().is_err() {
            continue;
        }
        if let Ok(info) = std::fs::read_to_string(e.path().join("mountinfo")) {
            out.extend(
                info.lines()
                    .filter(|l| l.contains(&needle))
                    .map(display::escape),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}

/// How long processes may still hold a Domain whose lock is free before a
/// `state` command that changes or checks its anchors refuses.
const LAST_PROCESSES_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a `state` command cannot take a Domain: it is in use (refused,
/// nothing changed), or its lock cannot be opened (a failure).
#[derive(Debug, thiserror::Error)]
enum LockError {
    #[error("cannot open the Domain lock: {0}")]
    Open(rustix::io::Errno),
    #[error("Domain {id} is active: {who}, serving {sessions} session(s); end them, or `lazaret stop --domain {id}`, and try again")]
    Active {
        id: String,
        who: String,
        sessions: u32,
    },
    #[error("Domain {id} is still active after {secs} s: {who}; end its sessions (`lazaret stop --domain {id}`) and try again")]
    StillActive { id: String, who: String, secs: u64 },
    /// `users` as `pid PID: COMMAND`.
    #[error("processes still use Domain {id}: {}", users.join("; "))]
    Processes { id: String, users: Vec<String> },
    #[error("mounts still use Domain {id}: {}", mounts.join("; "))]
    Mounts { id: String, mounts: Vec<String> },
}

impl LockError {
    /// [`REFUSED`] for a Domain in use, [`crate::error::LAZARET_FAILED`]
    /// for a lock that cannot be opened.
    fn exit_code(&self) -> i32 {
        match self {
            LockError::Open(_) => crate::error::LAZARET_FAILED,
            _ => REFUSED,
        }
    }
}

impl From<LockError> for CliError {
    fn from(e: LockError) -> CliError {
        match e {
            LockError::Open(_) => CliError::Session(e.to_string()),
            _ => CliError::Refused(e.to_string()),
        }
    }
}

/// The exclusive lifecycle lock: the Domain `flock` a running coordinator
/// holds. A Domain that serves sessions is refused, naming its
/// coordinator; one that is stopping (or starting, before its first
/// session) is waited for, up to [`crate::lifecycle_cmd::STOP_WAIT`], with
/// a message. Then establishes that no process or mount uses its state.
fn lock_inactive(domain: &Domain) -> Result<std::fs::File, LockError> {
    let lock = rustix::fs::open(
        domain.layout.lock(),
        rustix::fs::OFlags::CREATE
            | rustix::fs::OFlags::RDWR
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .map_err(LockError::Open)?;
    let lock = std::fs::File::from(lock);
    wait_for_lock(domain, &lock)?;
    check_unused(domain)?;
    Ok(lock)
}

/// Takes `lock` exclusively: at once, or, when its coordinator serves no
/// session (it is stopping or starting), once it lets go, up to
/// [`crate::lifecycle_cmd::STOP_WAIT`].
fn wait_for_lock(domain: &Domain, lock: &std::fs::File) -> Result<(), LockError> {
    use crate::lifecycle_cmd::{ask, STOP_WAIT};
    use lazaret_protocol::session::{Control, ServerMsg};
    let try_lock =
        || rustix::fs::flock(lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok();
    if try_lock() {
        return Ok(());
    }
    let who = match lock_holder(&domain.layout.lock()) {
        Some(pid) => format!("lazaret-coordinator (pid {pid}) holds it"),
        None => "another lazaret process holds it".into(),
    };
    if let Some(ServerMsg::Status(s)) = ask(&domain.layout.root, Control::Status) {
        if s.sessions > 0 {
            return Err(LockError::Active {
                id: domain.id.to_string(),
                who,
                sessions: s.sessions,
            });
        }
    }
    eprintln!(
        "lazaret: Domain {} is stopping (or starting): waiting up to {} s",
        domain.id,
        STOP_WAIT.as_secs()
    );
    let deadline = std::time::Instant::now() + STOP_WAIT;
    while !try_lock() {
        if std::time::Instant::now() > deadline {
            return Err(LockError::StillActive {
                id: domain.id.to_string(),
                who,
                secs: STOP_WAIT.as_secs(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// With the lock held no Domain starts; a generation that just stopped
/// may still have processes in their last moments (the last ones of its
/// PID namespace exiting): they get a few seconds to go. Then no process
/// and no mount may use the Domain's state.
fn check_unused(domain: &Domain) -> Result<(), LockError> {
    let deadline = std::time::Instant::now() + LAST_PROCESSES_WAIT;
    let mut users = users_of(&domain.layout.root);
    while !users.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        users = users_of(&domain.layout.root);
    }
    if !users.is_empty() {
        return Err(LockError::Processes {
            id: domain.id.to_string(),
            users: users.iter().map(|(p, c)| format!("pid {p}: {c}")).collect(),
        });
    }
    let m = mounts(&domain.layout.root);
    if !m.is_empty() {
        return Err(LockError::Mounts {
            id: domain.id.to_string(),
            mounts: m,
        });
    }
    Ok(())
}

fn remove_tree(p: &Path) -> Result<(), CliError> {
    let libexec = crate::leader::libexec()?;
    Ok(lazaret_state::remove::remove_tree(&libexec, p)?)
}

#[derive(Serialize)]
struct AnchorView {
    path: String,
    generation: u64,
    bytes: u64,
    /// Whether `bytes` is past the profile's `limits.anchor_size` (the
    /// next start refuses the Domain until it is reset or the bound
    /// raised).
    over_bound: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<Summary>,
    /// Why the anchor could not be scanned (`lazaret state verify` tells more).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct DomainView {
    domain_id: String,
    profile: Option<String>,
    workspace: Option<String>,
    image: Option<String>,
    generation: Option<u64>,
    active: bool,
    anchors: Vec<AnchorView>,
    /// Bytes of Ignored Workspace State, when the Domain has some.
    ignored_bytes: Option<u64>,
    /// The profile's `[limits]` as the config says now (the defaults when
    /// the profile is gone from the config).
    limits: LimitsView,
}

#[derive(Serialize)]
struct LimitsView {
    memory: String,
    processes: u64,
    ignored_state_size: String,
    anchor_size: String,
}

impl LimitsView {
    fn of(config: &lazaret_config::Config, profile: Option<&str>) -> LimitsView {
        let l = profile
            .and_then(|p| config.profiles.get(p))
            .map(|p| p.limits.clone())
            .unwrap_or_default();
        LimitsView {
            memory: l.memory,
            processes: l.processes,
            ignored_state_size: l.ignored_state_size,
            anchor_size: l.anchor_size,
        }
    }
}

fn view(
    domain: &Domain,
    with_changes: bool,
    config: &lazaret_config::Config,
) -> Result<DomainView, CliError> {
    let limits = LimitsView::of(config, domain.meta.as_ref().map(|m| m.profile.as_str()));
    let anchor_max = lazaret_config::parse_size(&limits.anchor_size)
        .ok()
        .flatten();
    let mut anchors = Vec::new();
    if let Some(m) = &domain.meta {
        for a in &m.anchors {
            // One unreadable anchor (or Domain) must not hide the others.
            let (bytes, changes, error) = match scan(domain, &a.path, a.generation) {
                Ok(s) => (s.bytes, with_changes.then_some(s), None),
                Err(e) => (0, None, Some(e.to_string())),
            };
            anchors.push(AnchorView {
                path: a.path.clone(),
                generation: a.generation,
                bytes,
                over_bound: anchor_max.is_some_and(|m| bytes > m),
                changes,
                error,
            });
        }
    }
    Ok(DomainView {
        domain_id: domain.id.clone(),
        profile: domain.meta.as_ref().map(|m| m.profile.clone()),
        workspace: domain.meta.as_ref().map(|m| m.workspace.clone()),
        image: domain.meta.as_ref().map(|m| m.image.clone()),
        generation: domain.meta.as_ref().map(|m| m.generation),
        active: is_active(domain),
        anchors,
        ignored_bytes: ignored_bytes(domain),
        limits,
    })
}

fn ignored_bytes(domain: &Domain) -> Option<u64> {
    let dir = domain.layout.ignored();
    if !dir.is_dir() {
        return None;
    }
    allocated_bytes(&dir).ok()
}

/// The bytes the tree `dir` takes on disk (allocated blocks, each inode
/// once), counted by the supervisor's confined scan, which reads the
/// files the sandbox's subordinate IDs own as their owner does; never the
/// apparent sizes the sandbox sets at will. `None` when `dir` is absent.
pub(crate) fn allocated_bytes(dir: &Path) -> Result<u64, CliError> {
    let out = Command::new(crate::leader::libexec()?.join("lazaret-supervisor"))
        .arg("--scan-anchor")
        .arg("/")
        .arg(dir)
        // No lower: a path that cannot exist (never one inside `dir`,
        // where the sandbox could place a link).
        .arg("/dev/null/no-lower")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::Session(format!("cannot run lazaret-supervisor: {e}")))?;
    let s: Summary = serde_json::from_slice(&out.stdout).map_err(|_| {
        CliError::Session(format!(
            "cannot count {}: {}",
            display::escape_os(dir.as_os_str()),
            display::escape(out.stderr.trim_ascii())
        ))
    })?;
    Ok(s.bytes)
}

pub(crate) fn human_bytes(b: u64) -> String {
    crate::human::bytes_in(b, &["B", "KiB", "MiB", "GiB"])
}

fn print_header(v: &DomainView) {
    let o = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".into());
    println!(
        "Domain {}  profile {}  workspace {}  image {}  {}",
        v.domain_id,
        o(&v.profile),
        o(&v.workspace),
        o(&v.image),
        if v.active { "active" } else { "inactive" }
    );
    let l = &v.limits;
    println!(
        "  limits: memory {}, processes {} per user ID inside, Ignored Workspace State {}, each State Anchor {}",
        l.memory, l.processes, l.ignored_state_size, l.anchor_size
    );
    if let Some(b) = v.ignored_bytes {
        println!(
            "  Ignored Workspace State: {} of {}",
            human_bytes(b),
            l.ignored_state_size
        );
    }
}

/// `state list --long`: a Domain's header, then one line per State Anchor.
fn print_long(v: &DomainView) {
    print_header(v);
    for a in &v.anchors {
        let size = match &a.error {
            None if a.over_bound => format!(
                "{} of {}: OVER THE BOUND (the next start refuses the Domain: `lazaret state reset {}`, or raise limits.anchor_size)",
                human_bytes(a.bytes),
                v.limits.anchor_size,
                a.path
            ),
            None => format!("{} of {}", human_bytes(a.bytes), v.limits.anchor_size),
            Some(e) => format!("unreadable: {e}"),
        };
        println!("  {:<12} generation {:<4} {size}", a.path, a.generation);
    }
}

/// What `state list` keeps: the Domains of `--profile` and of
/// `--workspace` (canonicalised as every command does; a workspace that
/// no longer exists is compared as its absolute path).
#[derive(Debug, Default)]
struct ListFilter {
    profile: Option<String>,
    workspace: Option<PathBuf>,
}

impl ListFilter {
    fn of(g: &Global) -> Result<ListFilter, CliError> {
        let workspace = match g.workspace() {
            None => None,
            Some(w) => Some(match crate::run::canonical_workspace(Some(w)) {
                Ok(c) => c,
                Err(CliError::Workspace { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    std::path::absolute(w).map_err(|source| CliError::Workspace {
                        path: w.display().to_string(),
                        source,
                    })?
                }
                Err(e) => return Err(e),
            }),
        };
        Ok(ListFilter {
            profile: g.profile.clone(),
            workspace,
        })
    }

    /// A Domain that never started (no metadata) matches no filter.
    fn keeps(&self, meta: Option<&DomainMeta>) -> bool {
        if self.profile.is_none() && self.workspace.is_none() {
            return true;
        }
        let Some(m) = meta else {
            return false;
        };
        self.profile.as_ref().is_none_or(|p| *p == m.profile)
            && self
                .workspace
                .as_ref()
                .is_none_or(|w| w.as_os_str().as_bytes() == m.workspace.as_bytes())
    }

    fn described(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(p) = &self.profile {
            parts.push(format!("--profile {}", display::message(p)));
        }
        if let Some(w) = &self.workspace {
            parts.push(format!("--workspace {}", display::escape_os(w.as_os_str())));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

/// `state list`: a header and one line per Domain (ID prefix, profile,
/// whether active, the total of its State Anchors against each one's
/// bound, workspace), then a line for each State Anchor over its bound or
/// unreadable.
fn compact(views: &[DomainView]) -> Vec<String> {
    let o = |s: &Option<String>| s.clone().unwrap_or_else(|| "?".into());
    // As wide as the longest profile name (names of the configuration,
    // escaped): never cut, so every row's columns line up.
    let profiles: Vec<String> = views
        .iter()
        .map(|v| display::message(&o(&v.profile)))
        .collect();
    let pw = profiles
        .iter()
        .map(|p| p.chars().count())
        .max()
        .unwrap_or(0)
        .max(7);
    let mut out = vec![format!(
        "{:<12}  {:<pw$}  {:<8}  {:>10}  {:<14}  WORKSPACE",
        "DOMAIN", "PROFILE", "STATE", "ANCHORS", "LIMIT"
    )];
    let mut notes = Vec::new();
    for (v, profile) in views.iter().zip(&profiles) {
        let total: u64 = v.anchors.iter().map(|a| a.bytes).sum();
        let mut flag = "";
        for a in &v.anchors {
            if let Some(e) = &a.error {
                flag = "?";
                notes.push(format!(
                    "Domain {}: State Anchor {} is unreadable: {}",
                    &v.domain_id[..12],
                    a.path,
                    display::message(e)
                ));
            } else if a.over_bound {
                flag = "!";
                notes.push(format!(
                    "Domain {}: State Anchor {} holds {}, over limits.anchor_size {}: the next start refuses the Domain (`lazaret state reset --domain {} {}`, or raise the limit)",
                    &v.domain_id[..12],
                    a.path,
                    human_bytes(a.bytes),
                    v.limits.anchor_size,
                    v.domain_id,
                    a.path
                ));
            }
        }
        out.push(format!(
            "{:<12}  {profile:<pw$}  {:<8}  {:>10}  {:<14}  {}",
            &v.domain_id[..12.min(v.domain_id.len())],
            if v.active { "active" } else { "inactive" },
            format!("{}{flag}", human_bytes(total)),
            format!("{} each", v.limits.anchor_size),
            display::message(&o(&v.workspace)),
        ));
    }
    out.extend(notes);
    out
}

pub fn run(cmd: StateCmd, g: &Global) -> Result<i32, CliError> {
    match cmd {
        StateCmd::List { json, long } => list(g, json, long),
        StateCmd::Inspect { which, json, paths } => inspect(which.with(g)?, json, paths),
        StateCmd::Verify { which } => verify(which.with(g)?),
        StateCmd::Reset {
            paths,
            all,
            ignored,
            yes,
            only,
            which,
        } => reset(&which.with(g)?, paths, all, ignored, Confirm { yes, only }),
        StateCmd::Rm {
            domains,
            yes,
            which,
        } => rm(g, &domains, yes, which.with(g)?),
        StateCmd::Prune { yes } => prune(g, yes),
    }
}

/// `state list`: the Domains the global options select, as JSON, one
/// block each (`--long`) or one line each.
fn list(g: &Global, json: bool, long: bool) -> Result<i32, CliError> {
    g.check("state list", Uses::Filter)?;
    let common = Common {
        config: g.config.clone(),
        lenient: false,
    };
    let (root, config) = storage_root_and_config(&common)?;
    let filter = ListFilter::of(g)?;
    let mut views = Vec::new();
    for domain in all_domains(common.config.clone())? {
        if filter.keeps(domain.meta.as_ref()) {
            views.push(view(&domain, false, &config)?);
        }
    }
    if json {
        crate::json::print(&views)?;
    } else if views.is_empty() {
        match filter.described() {
            Some(f) => println!("no Domain in {} matches {f}", root.display()),
            None => println!("no Domains in {}", root.display()),
        }
    } else if long {
        for v in &views {
            print_long(v);
        }
    } else {
        for line in compact(&views) {
            println!("{line}");
        }
    }
    Ok(0)
}

/// `state inspect`: one Domain and what each of its State Anchors holds
/// (with `--paths`, which paths).
fn inspect(which: Which, json: bool, paths: bool) -> Result<i32, CliError> {
    let domain = resolve(&which)?;
    let (_, config) = storage_root_and_config(&which.common)?;
    let v = view(&domain, true, &config)?;
    if json {
        crate::json::print(&v)?;
        return Ok(0);
    }
    print_header(&v);
    for a in &v.anchors {
        let Some(c) = a.changes.as_ref() else {
            println!(
                "  {} (generation {}): unreadable: {}",
                a.path,
                a.generation,
                a.error.as_deref().unwrap_or("?")
            );
            continue;
        };
        println!(
            "  {} (generation {}): {} added, {} changed, {} deleted, {}",
            a.path,
            a.generation,
            c.added_count,
            c.changed_count,
            c.deleted_count,
            human_bytes(c.bytes)
        );
        if !paths {
            continue;
        }
        // Each path is already in its escaped form (the scan's
        // output, see `Summary`); `message` only guards it.
        for (mark, list) in [("+", &c.added), ("~", &c.changed), ("-", &c.deleted)] {
            for p in list {
                println!("    {mark} {}", display::message(p));
            }
        }
        if c.truncated {
            println!("    ... (lists cut at 1000 paths each)");
        }
    }
    Ok(0)
}

/// `state verify`: the Domain's State Anchors checked against its store,
/// with the Domain locked inactive.
fn verify(which: Which) -> Result<i32, CliError> {
    let domain = resolve(&which)?;
    let _lock = match lock_inactive(&domain) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lazaret: {}", display::message(&e.to_string()));
            return Ok(e.exit_code());
        }
    };
    let store = Store::open(&domain.layout.store())?;
    let problems = Anchors::new(&domain.layout, &store).and_then(|a| a.verify())?;
    if problems.is_empty() {
        println!(
            "Domain {}: State Anchors verified, no problem found",
            domain.id
        );
        Ok(0)
    } else {
        for p in &problems {
            println!("problem: {}", display::message(&p.to_string()));
        }
        Ok(VERIFY_PROBLEMS)
    }
}

/// `state rm [DOMAIN...]`: the named Domains, else the selected one.
fn rm(g: &Global, domains: &[String], yes: bool, which: Which) -> Result<i32, CliError> {
    if !domains.is_empty() {
        // Domain IDs name the Domains on their own.
        g.check_domain_id(Some(""))?;
    }
    let targets = if domains.is_empty() {
        vec![resolve(&which)?]
    } else {
        domains
            .iter()
            .map(|d| resolve(&Which::id(d.clone(), which.config())))
            .collect::<Result<Vec<_>, _>>()?
    };
    remove_domains(&targets, yes, &which.common)
}

/// `state prune`: every Domain whose workspace is gone.
fn prune(g: &Global, yes: bool) -> Result<i32, CliError> {
    g.check("state prune", Uses::Config)?;
    let common = Common {
        config: g.config.clone(),
        lenient: false,
    };
    let gone: Vec<Domain> = all_domains(common.config.clone())?
        .into_iter()
        .filter(|d| {
            d.meta
                .as_ref()
                .is_some_and(|m| std::fs::symlink_metadata(&m.workspace).is_err())
        })
        .collect();
    if gone.is_empty() {
        println!("no Domain has lost its workspace");
        return Ok(0);
    }
    remove_domains(&gone, yes, &common)
}

/// Removes each of `domains` (asking first, unless `yes`): locked
/// inactive, moved aside in one rename (an interrupted removal leaves
/// `domains/.trash-*`, removed by the next `rm` or `prune`), its image
/// leases released, then deleted as ID 0 of the mapped user namespace.
fn remove_domains(domains: &[Domain], yes: bool, common: &Common) -> Result<i32, CliError> {
    for d in domains {
        let m = d.meta.as_ref();
        println!(
            "Domain {}: profile {}, workspace {}",
            d.id,
            m.map(|m| m.profile.as_str()).unwrap_or("?"),
            display::message(m.map(|m| m.workspace.as_str()).unwrap_or("?"))
        );
    }
    use crate::confirm::{ask, Answer};
    let question = format!(
        "Remove {} Domain(s) with their State Anchors and Ignored Workspace State?",
        domains.len()
    );
    match ask(&question, yes) {
        Answer::Yes => {}
        Answer::NoTerminal => {
            eprintln!("lazaret: not removed: pass --yes to remove without a terminal to ask at");
            return Ok(REFUSED);
        }
        Answer::No => {
            println!("nothing was removed");
            return Ok(REFUSED);
        }
    }
    let root = storage_root(common)?;
    let domains_dir = root.join("domains");
    // Leftovers of an interrupted removal.
    for e in std::fs::read_dir(&domains_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(".trash-") {
            remove_tree(&e.path())?;
        }
    }
    let mut code = 0;
    for d in domains {
        let lock = match lock_inactive(d) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("lazaret: {}", display::message(&e.to_string()));
                code = e.exit_code();
                continue;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_nanos())
            .unwrap_or(0);
        let trash = domains_dir.join(format!(".trash-{}-{nanos}", d.id));
        std::fs::rename(&d.layout.root, &trash).map_err(|e| {
            CliError::Session(format!(
                "cannot move {} aside: {e}",
                d.layout.root.display()
            ))
        })?;
        drop(lock);
        if let Err(e) = lazaret_image::Catalog::open(&root).release_domain(&d.id, None) {
            eprintln!("lazaret: Domain {}: its image leases stay recorded ({e}); `lazaret image gc` drops them", d.id);
        }
        remove_tree(&trash)?;
        println!("removed Domain {}", d.id);
    }
    Ok(code)
}

/// `state reset`'s `--yes` and `--only`.
#[derive(Clone, Copy)]
pub(crate) struct Confirm {
    pub yes: bool,
    pub only: bool,
}

/// The State Anchors one package installation spreads over: its files in
/// /usr and /etc, its database in /var.
const PACKAGE_SET: [&str; 3] = ["/usr", "/etc", "/var"];

/// Package managers' databases, relative to /var.
const PACKAGE_DBS: [&str; 3] = ["lib/dpkg", "lib/rpm", "lib/pacman"];

/// Whether the Domain's /var State Anchor holds a package database the
/// sandbox changed (a package was installed or removed). Looked up
/// beneath the upper without following any link the sandbox made.
fn package_db_changed(domain: &Domain, recorded: &[(String, u64)]) -> bool {
    let Some((_, generation)) = recorded.iter().find(|(p, _)| p == "/var") else {
        return false;
    };
    let upper = domain
        .layout
        .anchors()
        .join(lazaret_state::layout::anchor_dir_name("/var"))
        .join(lazaret_state::layout::generation_dir_name(*generation))
        .join("upper");
    let Ok(root) = lazaret_state::beneath::Root::open(&upper) else {
        return false;
    };
    PACKAGE_DBS
        .iter()
        .any(|db| matches!(root.kind(Path::new(db)), Ok(Some(_))))
}

/// The package set's anchors missing from `targets` when `targets` holds
/// part of it and a package database changed: resetting /usr alone leaves
/// dpkg sure that what it installed there is still installed (and apt
/// refusing to install it again).
fn package_set_missing(
    domain: &Domain,
    recorded: &[(String, u64)],
    targets: &[String],
) -> Vec<String> {
    let set: Vec<&str> = PACKAGE_SET
        .into_iter()
        .filter(|p| recorded.iter().any(|(r, _)| r == p))
        .collect();
    if !targets.iter().any(|t| set.contains(&t.as_str())) {
        return Vec::new();
    }
    let missing: Vec<String> = set
        .into_iter()
        .filter(|p| !targets.iter().any(|t| t == p))
        .map(str::to_string)
        .collect();
    if missing.is_empty() || !package_db_changed(domain, recorded) {
        return Vec::new();
    }
    missing
}

fn reset(
    which: &Which,
    paths: Vec<String>,
    all: bool,
    ignored: bool,
    confirm: Confirm,
) -> Result<i32, CliError> {
    if paths.is_empty() && !all && !ignored {
        return Err(CliError::Session(
            "name the persistent paths to reset (e.g. /usr), or pass --all or --ignored".into(),
        ));
    }
    let domain = resolve(which)?;
    // The Domain Root is `<Storage Root>/domains/<id>`.
    let storage_root = domain
        .layout
        .root
        .parent()
        .and_then(Path::parent)
        .unwrap_or(&domain.layout.root)
        .to_path_buf();
    reset_domain(&domain, paths, all, ignored, confirm).map_err(|e| e.with_storage(&storage_root))
}

fn reset_domain(
    domain: &Domain,
    paths: Vec<String>,
    all: bool,
    ignored: bool,
    confirm: Confirm,
) -> Result<i32, CliError> {
    let yes = confirm.yes;
    let _lock = match lock_inactive(domain) {
        Ok(l) => l,
        // A failure, not a refusal: reported as one, with the storage's
        // condition when that is the cause (a read-only Domain lock).
        Err(e @ LockError::Open(_)) => return Err(e.into()),
        Err(e) => {
            eprintln!("lazaret: {}", display::message(&e.to_string()));
            return Ok(REFUSED);
        }
    };
    let store = Store::open(&domain.layout.store())?;
    let anchors = recovered_anchors(domain, &store)?;
    let recorded = anchors.list()?;
    let mut targets = reset_targets(&paths, all, &recorded);
    say_reset_targets(domain, &recorded, &targets)?;
    add_package_set(domain, &recorded, &mut targets, confirm.only);
    if ignored {
        println!("  discard the Ignored Workspace State: what the sandbox wrote at Git-ignored workspace paths");
    }
    println!(
        "  kept: the image, the workspace{} and every other State Anchor",
        if ignored {
            ""
        } else {
            ", Ignored Workspace State"
        }
    );
    match crate::confirm::ask("Reset?", yes) {
        crate::confirm::Answer::Yes => {}
        crate::confirm::Answer::NoTerminal => {
            eprintln!("lazaret: not confirmed: pass --yes to reset without a terminal");
            return Ok(REFUSED);
        }
        crate::confirm::Answer::No => {
            println!("nothing was reset");
            return Ok(REFUSED);
        }
    }
    if !targets.is_empty() {
        reset_anchors(domain, &anchors, &targets)?;
    }
    if ignored {
        reset_ignored(domain)?;
        println!("reset the Ignored Workspace State (empty)");
    }
    Ok(0)
}

/// The State Anchors `state reset` names: every recorded one (`--all`),
/// or the given paths without trailing slashes.
fn reset_targets(paths: &[String], all: bool, recorded: &[(String, u64)]) -> Vec<String> {
    if all {
        recorded.iter().map(|(p, _)| p.clone()).collect()
    } else if paths.is_empty() {
        Vec::new()
    } else {
        paths
            .iter()
            .map(|p| {
                let t = p.trim_end_matches('/');
                if t.is_empty() {
                    "/".to_string()
                } else {
                    t.to_string()
                }
            })
            .collect()
    }
}

/// Says which Domain is reset and what becomes of each target; a target
/// that is no State Anchor of the Domain is refused.
fn say_reset_targets(
    domain: &Domain,
    recorded: &[(String, u64)],
    targets: &[String],
) -> Result<(), CliError> {
    let meta = domain.meta.as_ref();
    println!(
        "Domain {}: profile {}, workspace {}",
        domain.id,
        meta.map(|m| m.profile.as_str()).unwrap_or("?"),
        meta.map(|m| m.workspace.as_str()).unwrap_or("?")
    );
    for t in targets {
        match recorded.iter().find(|(p, _)| p == t) {
            Some((_, g)) => println!("  reset State Anchor {t}: generation {g} is discarded, {t} follows the image again"),
            None => {
                let known: Vec<_> = recorded.iter().map(|(p, _)| p.as_str()).collect();
                return Err(CliError::Session(format!(
                    "no State Anchor for {t}; this Domain has: {}",
                    known.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// When a package was installed in the Domain, the rest of the package
/// set (/usr, /etc, /var) is reset with the targets, or, with `--only`,
/// a warning says what disagrees afterwards.
fn add_package_set(
    domain: &Domain,
    recorded: &[(String, u64)],
    targets: &mut Vec<String>,
    only: bool,
) {
    let missing = package_set_missing(domain, recorded, targets);
    if missing.is_empty() {
        return;
    }
    let named = targets.join(" ");
    if only {
        println!(
            "  warning: a package was installed in this Domain: its database in the /var State Anchor will still list what resetting {named} removes, and the package manager may refuse to install it again (without --only, {} are reset with it)",
            missing.join(" ")
        );
    } else {
        println!(
            "  also reset {}: a package was installed in this Domain and its database in /var must agree with /usr and /etc (--only resets just {named})",
            missing.join(" ")
        );
        for t in &missing {
            if let Some((_, g)) = recorded.iter().find(|(p, _)| p == t) {
                println!("  reset State Anchor {t}: generation {g} is discarded, {t} follows the image again");
            }
        }
        targets.extend(missing);
    }
}

/// Switches each target to a new, empty generation and records the new
/// generations in meta.json.
fn reset_anchors(
    domain: &Domain,
    anchors: &Anchors<'_>,
    targets: &[String],
) -> Result<(), CliError> {
    let switches = anchors.reset(targets, &mut |p: &Path| remove_tree(p))?;
    // `state list` and `inspect` read the generations from meta.json:
    // they show the new, empty ones at once, not the removed ones.
    if let Some(mut meta) = domain.meta.clone() {
        for (p, _, new) in &switches {
            if let Some(a) = meta.anchors.iter_mut().find(|a| &a.path == p) {
                a.generation = *new;
            }
        }
        if let Err(e) = lazaret_state::meta::write(&domain.layout.meta(), &meta) {
            eprintln!(
                "lazaret: cannot update {}: {e} (the next start rewrites it)",
                domain.layout.meta().display()
            );
        }
    }
    for (p, old, new) in switches {
        println!("reset {p}: generation {old} -> {new} (empty)");
    }
    Ok(())
}

/// Moves the Ignored Workspace State aside in one rename (the next start
/// finds none and makes an empty one), then removes it; the same for what
/// the sandbox keeps private in a linked worktree's Git directory and in
/// its writable volumes (`volume-git`).
/// Interrupted, the Domain has either its old state or none; the
/// coordinator removes a leftover `<name>.discard-*` at its next start.
fn reset_ignored(domain: &Domain) -> Result<(), CliError> {
    use lazaret_state::DomainLayout as Layout;
    let root = lazaret_state::beneath::Root::open(&domain.layout.root)
        .map_err(|e| CliError::Session(e.to_string()))?;
    for name in [Layout::IGNORED, Layout::LINKED_GIT, Layout::VOLUME_GIT] {
        match root.kind(Path::new(name)) {
            Ok(None) => continue,
            Ok(Some(lazaret_state::beneath::Kind::Dir)) => {}
            Ok(Some(_)) => {
                return Err(CliError::Session(format!(
                    "{} is not a real directory: run `lazaret state verify` and remove it by hand",
                    domain.layout.root.join(name).display()
                )))
            }
            Err(e) => return Err(CliError::Session(e.to_string())),
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let aside = format!("{name}.discard-{nanos}");
        root.rename(Path::new(""), name, &aside).map_err(|e| {
            CliError::Session(format!(
                "cannot move the Ignored Workspace State aside: {e}"
            ))
        })?;
        lazaret_helpers::fault::point("reset-ignored-aside");
        remove_tree(&root.abs(Path::new(&aside)))?;
    }
    Ok(())
}

/// `lazaret escalations [--json]`: the Domain's record of Host Escalation
/// decisions (who or which rule decided, the requested and the run vector,
/// the result), and of refused mailbox entries, oldest first across the
/// record's rotations (`escalations.log.N` .. `.1`, then `escalations.log`).
pub fn escalations(which: Which, g: &Global, json: bool) -> Result<i32, CliError> {
    let domain = resolve(&which.with(g)?)?;
    let mut text = String::new();
    for path in lazaret_protocol::escalation::log_files(&domain.layout.root) {
        match std::fs::read(&path) {
            Ok(t) => text.push_str(&String::from_utf8_lossy(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CliError::Session(format!(
                    "cannot read {}: {e}",
                    display::escape_os(&path)
                )))
            }
        }
    }
    // A line that is not a record (torn by a crash, say) is left out.
    let records: Vec<LogRecord> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if json {
        // Each record as a JSON object with its keys sorted, as printed
        // before the reader was typed.
        let records: Vec<serde_json::Value> = records
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect();
        crate::json::print(&records)?;
        return Ok(0);
    }
    if records.is_empty() {
        println!("no Host Escalation recorded for Domain {}", domain.id);
    }
    for r in records {
        print!("{}  ", crate::human::time_ms(r.time_unix_ms));
        match &r.event {
            LogEvent::Refused { entry, reason } => {
                // The entry name is recorded in its escaped form already.
                println!(
                    "refused mailbox entry {}: {}",
                    display::message(entry),
                    display::escape(reason)
                );
            }
            LogEvent::Decision {
                request_id,
                session_id,
                argv,
                ran_argv,
                decided_by,
                result,
                ..
            } => print_decision(
                [request_id, session_id, result, decided_by],
                argv,
                ran_argv.as_deref(),
            ),
            // Shown as a decision without fields, as it was before the
            // record was read typed (issue 30: no behaviour change).
            LogEvent::ReaderExited { .. } => print_decision(["", "", "", ""], &[], None),
        }
    }
    Ok(0)
}

/// One decision line of `lazaret escalations`: `[request_id, session_id,
/// result, decided_by]`, the requested vector and the one that ran.
fn print_decision(fields: [&str; 4], argv: &[String], ran: Option<&[String]>) {
    // Every field may hold the sandbox's words: escaped.
    let [request_id, session_id, result, decided_by] = fields.map(display::escape);
    let short = |s: &str| s.chars().take(8).collect::<String>();
    print!(
        "{} session {}: {} -> {} (by {})",
        short(&request_id),
        short(&session_id),
        crate::prompt::show_argv(argv),
        result,
        decided_by
    );
    match ran {
        Some(ran) if ran != argv => println!(", edited to {}", crate::prompt::show_argv(ran)),
        _ => println!(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain_view(id: &str, profile: &str, anchors: &[(&str, u64, bool)]) -> DomainView {
        DomainView {
            domain_id: id.into(),
            profile: Some(profile.into()),
            workspace: Some("/home/dev/proj\x1b[2J".into()),
            image: Some("lazaret:default".into()),
            generation: Some(3),
            active: false,
            anchors: anchors
                .iter()
                .map(|(path, bytes, over)| AnchorView {
                    path: (*path).into(),
                    generation: 1,
                    bytes: *bytes,
                    over_bound: *over,
                    changes: None,
                    error: None,
                })
                .collect(),
            ignored_bytes: None,
            limits: LimitsView {
                memory: "4GiB".into(),
                processes: 1024,
                ignored_state_size: "10GiB".into(),
                anchor_size: "10GiB".into(),
            },
        }
    }

    #[test]
    fn the_list_has_one_line_per_domain_and_a_note_per_anchor_over_its_bound() {
        let views = [
            domain_view(
                "0123456789abcdef0123456789abcdef",
                "default",
                &[("/usr", 1024, false), ("/etc", 1024, false)],
            ),
            domain_view(
                "fedcba9876543210fedcba9876543210",
                "a-very-long-profile-name",
                &[("/usr", 11 << 30, true)],
            ),
        ];
        let lines = compact(&views);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].starts_with("DOMAIN "), "{}", lines[0]);
        assert!(
            lines[1].starts_with("0123456789ab  default   "),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with("fedcba987654  a-very-long-profile-name  inactive"));
        assert!(lines[1].contains("2.0 KiB"), "{}", lines[1]);
        assert!(lines[1].contains("10GiB each"), "{}", lines[1]);
        // The workspace is escaped, never raw bytes for the terminal.
        assert!(lines[1].ends_with("/home/dev/proj\\x1b[2J"), "{}", lines[1]);
        assert!(lines[2].contains("11.0 GiB!"), "{}", lines[2]);
        assert!(
            lines[3].contains("State Anchor /usr holds 11.0 GiB, over limits.anchor_size 10GiB")
        );
        // Columns line up: the workspace starts at the same column.
        let col = |l: &str| l.find("/home").unwrap();
        assert_eq!(col(&lines[1]), col(&lines[2]));
        assert_eq!(lines[0].find("WORKSPACE").unwrap(), col(&lines[1]));
    }

    #[test]
    fn the_filters_keep_the_domains_of_the_profile_and_workspace() {
        let meta = |profile: &str, ws: &str| DomainMeta {
            domain_id: String::new(),
            profile: profile.into(),
            workspace: ws.into(),
            image: String::new(),
            image_rootfs: String::new(),
            generation: 1,
            anchors: Vec::new(),
        };
        let f = |profile: Option<&str>, ws: Option<&str>| ListFilter {
            profile: profile.map(Into::into),
            workspace: ws.map(PathBuf::from),
        };
        let m = meta("agent", "/w/a");
        assert!(f(None, None).keeps(Some(&m)));
        assert!(f(None, None).keeps(None));
        assert!(f(Some("agent"), None).keeps(Some(&m)));
        assert!(!f(Some("default"), None).keeps(Some(&m)));
        assert!(f(None, Some("/w/a")).keeps(Some(&m)));
        assert!(!f(None, Some("/w")).keeps(Some(&m)));
        assert!(!f(Some("agent"), Some("/w/b")).keeps(Some(&m)));
        assert!(!f(Some("agent"), None).keeps(None));
        assert_eq!(
            f(Some("agent"), Some("/w/a")).described().unwrap(),
            "--profile agent --workspace /w/a"
        );
    }
}
