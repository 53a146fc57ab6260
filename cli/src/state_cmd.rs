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
use lazaret_protocol::DomainIdV1;
use lazaret_state::anchors::Anchors;
use lazaret_state::meta::DomainMeta;
use lazaret_state::scan::Summary;
use lazaret_state::store::Store;
use lazaret_state::DomainLayout;
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const VERIFY_PROBLEMS: i32 = 1;
pub const REFUSED: i32 = crate::error::REFUSED;

#[derive(clap::Subcommand)]
pub enum StateCmd {
    /// Every Domain with its profile, workspace, image, State Anchors and sizes
    List {
        /// One JSON array of Domains instead of text
        #[arg(long)]
        json: bool,
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
        #[command(flatten)]
        which: Which,
    },
}

/// The config that names the Storage Root (`--config`).
#[derive(Default)]
pub struct Common {
    config: Option<PathBuf>,
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
            workspace: None,
            common: Common { config },
        }
    }

    /// The Domain `domain` (an ID) or the shared options name.
    pub(crate) fn new(domain: Option<String>, g: &Global) -> Result<Which, CliError> {
        Which {
            domain,
            profile: String::new(),
            workspace: None,
            common: Common::default(),
        }
        .with(g)
    }

    /// Completes the Domain's name with the shared options (`--profile`,
    /// `--workspace`, `--config`); `--domain` stands alone.
    pub(crate) fn with(mut self, g: &Global) -> Result<Which, CliError> {
        g.check_domain_id(self.domain.as_deref())?;
        self.profile = g.profile().to_string();
        self.workspace = g.workspace.clone();
        self.common = Common {
            config: g.config.clone(),
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
    let anchors =
        Anchors::new(&domain.layout, store).map_err(|e| CliError::Session(e.to_string()))?;
    anchors
        .recover(&mut |p: &Path| remove_tree(p))
        .map_err(|e| CliError::Session(e.to_string()))?;
    Ok(anchors)
}

/// Locks the (inactive) Domain `which` names and reads its image and the
/// current generation of its State Anchors, for `lazaret image commit`.
pub(crate) fn for_commit(which: &Which, storage_root: &Path) -> Result<ForCommit, CliError> {
    let domain = resolve(which)?;
    let lock = lock_inactive(&domain).map_err(|(code, msg)| match code {
        REFUSED => CliError::Refused(msg),
        _ => CliError::Session(msg),
    })?;
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
    let store =
        Store::open(&domain.layout.store()).map_err(|e| CliError::Session(e.to_string()))?;
    let anchors = recovered_anchors(&domain, &store)?;
    let layers = anchors
        .current()
        .map_err(|e| CliError::Session(e.to_string()))?
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
    let root = storage_root(&Common {
        config: config.clone(),
    })?;
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
        match resolve(&Which::id(name.clone(), config.clone())) {
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
    let loaded = lazaret_config::load(
        common.config.as_deref(),
        &env,
        rustix::process::getuid().as_raw(),
    )?;
    let root = lazaret_config::storage_root(&loaded.config, &env)?;
    let uid = rustix::process::getuid().as_raw();
    for p in [root.clone(), root.join("domains")] {
        if p.exists() {
            lazaret_helpers::hostpath::check_private_dir("Storage Root", &p, uid)?;
        }
    }
    Ok((root, loaded.config))
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
    let root = storage_root(&which.common)?;
    let id = match &which.domain {
        Some(d) => match DomainIdV1::parse(d) {
            Some(id) => id,
            None => by_prefix(&root, d)?,
        },
        None => {
            let ws = crate::run::canonical_workspace(which.workspace.as_deref())?;
            DomainIdV1::derive(&which.profile, ws.as_os_str().as_bytes())
        }
    };
    let layout = DomainLayout::new(root.join("domains").join(id.to_string()));
    if layout.root.exists() {
        let uid = rustix::process::getuid().as_raw();
        lazaret_helpers::hostpath::check_private_dir("Domain Root", &layout.root, uid)?;
    }
    lazaret_state::beneath::Root::open(&layout.root).map_err(|e| {
        CliError::Session(format!(
            "no Domain {id} in {} ({e}); `lazaret state list` shows the Domains",
            root.display()
        ))
    })?;
    let meta = lazaret_state::meta::read(&layout.meta()).ok();
    Ok(Domain {
        id: id.to_string(),
        layout,
        meta,
    })
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

/// The exclusive lifecycle lock: the Domain `flock` a running coordinator
/// holds. A Domain that serves sessions is refused, naming its
/// coordinator; one that is stopping (or starting, before its first
/// session) is waited for, up to [`crate::lifecycle_cmd::STOP_WAIT`], with
/// a message. Then establishes that no process or mount uses its state.
fn lock_inactive(domain: &Domain) -> Result<std::fs::File, (i32, String)> {
    use crate::lifecycle_cmd::{ask, STOP_WAIT};
    use lazaret_protocol::session::{Control, ServerMsg};
    let lock = rustix::fs::open(
        domain.layout.lock(),
        rustix::fs::OFlags::CREATE
            | rustix::fs::OFlags::RDWR
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .map_err(|e| {
        (
            crate::error::LAZARET_FAILED,
            format!("cannot open the Domain lock: {e}"),
        )
    })?;
    let lock = std::fs::File::from(lock);
    let try_lock =
        || rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok();
    if !try_lock() {
        let who = match lock_holder(&domain.layout.lock()) {
            Some(pid) => format!("lazaret-coordinator (pid {pid}) holds it"),
            None => "another lazaret process holds it".into(),
        };
        if let Some(ServerMsg::Status(s)) = ask(&domain.layout.root, Control::Status) {
            if s.sessions > 0 {
                return Err((
                    REFUSED,
                    format!(
                        "Domain {} is active: {who}, serving {} session(s); end them, or `lazaret stop --domain {}`, and try again",
                        domain.id, s.sessions, domain.id
                    ),
                ));
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
                return Err((
                    REFUSED,
                    format!("Domain {} is still active after {} s: {who}; end its sessions (`lazaret stop --domain {}`) and try again", domain.id, STOP_WAIT.as_secs(), domain.id),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let users = users_of(&domain.layout.root);
    if !users.is_empty() {
        let list: Vec<String> = users.iter().map(|(p, c)| format!("pid {p}: {c}")).collect();
        return Err((
            REFUSED,
            format!(
                "processes still use Domain {}: {}",
                domain.id,
                list.join("; ")
            ),
        ));
    }
    let m = mounts(&domain.layout.root);
    if !m.is_empty() {
        return Err((
            REFUSED,
            format!("mounts still use Domain {}: {}", domain.id, m.join("; ")),
        ));
    }
    Ok(lock)
}

fn remove_tree(p: &Path) -> Result<(), String> {
    let libexec = crate::leader::libexec().map_err(|e| e.to_string())?;
    lazaret_state::remove::remove_tree(&libexec, p)
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
    let out = Command::new(crate::leader::libexec().ok()?.join("lazaret-supervisor"))
        .arg("--scan-anchor")
        .arg("/workspace")
        .arg(&dir)
        .arg(domain.layout.root.join(".no-lower"))
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let s: Summary = serde_json::from_slice(&out.stdout).ok()?;
    Some(s.bytes)
}

pub(crate) fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
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

pub fn run(cmd: StateCmd, g: &Global) -> Result<i32, CliError> {
    match cmd {
        StateCmd::List { json } => {
            g.check("state list", Uses::Config)?;
            let common = Common {
                config: g.config.clone(),
            };
            let (root, config) = storage_root_and_config(&common)?;
            let mut views = Vec::new();
            let mut names: Vec<String> = std::fs::read_dir(root.join("domains"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| DomainIdV1::parse(n).is_some())
                .collect();
            names.sort();
            for name in names {
                let which = Which {
                    profile: String::new(),
                    workspace: None,
                    domain: Some(name),
                    common: Common {
                        config: common.config.clone(),
                    },
                };
                let domain = match resolve(&which) {
                    Ok(d) => d,
                    // Removed while we looked (`state rm` elsewhere).
                    Err(_)
                        if !root
                            .join("domains")
                            .join(which.domain.as_deref().unwrap_or(""))
                            .exists() =>
                    {
                        continue
                    }
                    Err(e) => return Err(e),
                };
                views.push(view(&domain, false, &config)?);
            }
            if json {
                println!(
                    "{}",
                    lazaret_protocol::display::ascii_json(
                        &serde_json::to_string_pretty(&views).expect("json")
                    )
                );
            } else if views.is_empty() {
                println!("no Domains in {}", root.display());
            } else {
                for v in &views {
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
            }
            Ok(0)
        }
        StateCmd::Inspect { which, json, paths } => {
            let which = which.with(g)?;
            let domain = resolve(&which)?;
            let (_, config) = storage_root_and_config(&which.common)?;
            let v = view(&domain, true, &config)?;
            if json {
                println!(
                    "{}",
                    lazaret_protocol::display::ascii_json(
                        &serde_json::to_string_pretty(&v).expect("json")
                    )
                );
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
        StateCmd::Verify { which } => {
            let which = which.with(g)?;
            let domain = resolve(&which)?;
            let _lock = match lock_inactive(&domain) {
                Ok(l) => l,
                Err((code, msg)) => {
                    eprintln!("lazaret: {}", display::message(&msg));
                    return Ok(code);
                }
            };
            let store = Store::open(&domain.layout.store())
                .map_err(|e| CliError::Session(e.to_string()))?;
            let problems = Anchors::new(&domain.layout, &store)
                .and_then(|a| a.verify())
                .map_err(|e| CliError::Session(e.to_string()))?;
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
        StateCmd::Reset {
            paths,
            all,
            ignored,
            yes,
            which,
        } => reset(&which.with(g)?, paths, all, ignored, yes),
        StateCmd::Rm {
            domains,
            yes,
            which,
        } => {
            let which = which.with(g)?;
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
        StateCmd::Prune { yes } => {
            g.check("state prune", Uses::Config)?;
            let common = Common {
                config: g.config.clone(),
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
    }
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
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("lazaret: not removed: pass --yes to remove without a terminal to ask at");
            return Ok(REFUSED);
        }
        print!(
            "Remove {} Domain(s) with their State Anchors and Ignored Workspace State? [y/N] ",
            domains.len()
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        if !matches!(line.trim(), "y" | "Y" | "yes") {
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
            remove_tree(&e.path()).map_err(CliError::Session)?;
        }
    }
    let mut code = 0;
    for d in domains {
        let lock = match lock_inactive(d) {
            Ok(l) => l,
            Err((c, msg)) => {
                eprintln!("lazaret: {}", display::message(&msg));
                code = c;
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
        remove_tree(&trash).map_err(CliError::Session)?;
        println!("removed Domain {}", d.id);
    }
    Ok(code)
}

fn reset(
    which: &Which,
    paths: Vec<String>,
    all: bool,
    ignored: bool,
    yes: bool,
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
    reset_domain(&domain, paths, all, ignored, yes).map_err(|e| e.with_storage(&storage_root))
}

fn reset_domain(
    domain: &Domain,
    paths: Vec<String>,
    all: bool,
    ignored: bool,
    yes: bool,
) -> Result<i32, CliError> {
    let _lock = match lock_inactive(domain) {
        Ok(l) => l,
        Err((REFUSED, msg)) => {
            eprintln!("lazaret: {}", display::message(&msg));
            return Ok(REFUSED);
        }
        // A failure, not a refusal: reported as one, with the storage's
        // condition when that is the cause (a read-only Domain lock).
        Err((_, msg)) => return Err(CliError::Session(msg)),
    };
    let store =
        Store::open(&domain.layout.store()).map_err(|e| CliError::Session(e.to_string()))?;
    let anchors = recovered_anchors(domain, &store)?;
    let recorded = anchors
        .list()
        .map_err(|e| CliError::Session(e.to_string()))?;
    let targets: Vec<String> = if all {
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
    };
    let meta = domain.meta.as_ref();
    println!(
        "Domain {}: profile {}, workspace {}",
        domain.id,
        meta.map(|m| m.profile.as_str()).unwrap_or("?"),
        meta.map(|m| m.workspace.as_str()).unwrap_or("?")
    );
    for t in &targets {
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
    if !yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("lazaret: not confirmed: pass --yes to reset without a terminal");
            return Ok(REFUSED);
        }
        print!("Reset? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            println!("nothing was reset");
            return Ok(REFUSED);
        }
    }
    if !targets.is_empty() {
        let switches = anchors
            .reset(&targets, &mut |p: &Path| remove_tree(p))
            .map_err(|e| CliError::Session(e.to_string()))?;
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
    }
    if ignored {
        reset_ignored(domain)?;
        println!("reset the Ignored Workspace State (empty)");
    }
    Ok(0)
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
        remove_tree(&root.abs(Path::new(&aside))).map_err(CliError::Session)?;
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
    let records: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if json {
        println!(
            "{}",
            lazaret_protocol::display::ascii_json(
                &serde_json::to_string_pretty(&records).expect("json")
            )
        );
        return Ok(0);
    }
    if records.is_empty() {
        println!("no Host Escalation recorded for Domain {}", domain.id);
    }
    for r in records {
        // Every field may hold the sandbox's words: escaped.
        let s = |k: &str| display::escape(r[k].as_str().unwrap_or(""));
        if let Some(ms) = r["time_unix_ms"].as_u64() {
            print!("{}  ", crate::human::time_ms(ms));
        }
        if s("event") == "refused" {
            // The entry name is recorded in its escaped form already.
            println!(
                "refused mailbox entry {}: {}",
                display::message(r["entry"].as_str().unwrap_or("")),
                s("reason")
            );
            continue;
        }
        let argv: Vec<String> = r["argv"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let ran: Option<Vec<String>> = r["ran_argv"].as_array().map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        });
        let short = |k: &str| s(k).chars().take(8).collect::<String>();
        print!(
            "{} session {}: {} -> {} (by {})",
            short("request_id"),
            short("session_id"),
            crate::prompt::show_argv(&argv),
            s("result"),
            s("decided_by")
        );
        match ran {
            Some(ran) if ran != argv => println!(", edited to {}", crate::prompt::show_argv(&ran)),
            _ => println!(),
        }
    }
    Ok(0)
}
