//! Detection of the installed runsc: where it is, which release it is, which
//! platforms and top-level flags it knows, and so which flags Lazaret passes
//! it and which workarounds for old releases it needs.
//!
//! Every runsc invocation here runs under a timeout and is killed (with its
//! whole process group) when it runs over: a runsc that hangs must never
//! hang Lazaret.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long one `runsc --version` / `runsc flags` / `runsc help platforms`
/// may take before it is killed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Releases older than this reject `AT_NO_AUTOMOUNT` in statx (runsc
/// 20221219 does), which breaks coreutils' `ls`/`stat`; images then need the
/// statx LD_PRELOAD shim.
pub const STATX_FIXED_RELEASE: u32 = 20230301;

/// The first runsc release without the root-network-namespace check, once
/// one is known. runsc's `isRootNS` takes "`/proc/sys/net/core/rmem_default`
/// exists" (looked up from inside the sandbox's network namespace) as "this
/// is the root network namespace" and then refuses `--network=sandbox`
/// ("cannot run with network enabled in root network namespace"). Every
/// release seen so far has it, 20221219 (Debian 12's) and 20240729
/// (bookworm-backports) included, so `None`: every release, an unknown one
/// too, is taken to have it. Whether the check fires is the kernel's
/// doing, not the release's: see [`probe_netns_rmem_default`].
pub const ROOT_NS_CHECK_REMOVED_RELEASE: Option<u32> = None;

/// The file runsc's `isRootNS` looks for.
pub const ROOT_NS_CHECK_FILE: &str = "/proc/sys/net/core/rmem_default";

/// The first release whose systrap platform Lazaret trusts. Older ones may
/// list systrap (it was experimental for a while); they get ptrace.
pub const SYSTRAP_MIN_RELEASE: u32 = 20230801;

/// runsc's `--dcache`: the size of the Sentry's global dentry cache, "a
/// coarse-grained control on the number of host FDs simultaneously open
/// by the sentry" (runsc 20221219's own words). Without it, every mount
/// keeps its own cache and gVisor holds a host file (and so a file the
/// mount router keeps open) for every name it has cached, bounded only by
/// the tree's size. 1000 names bounds that well below a new user's soft
/// limit of 1024 and the router's bound of 4096 open files, and is far
/// more than a working set of directories a build walks at once; a name
/// evicted from the cache is looked up again on its next use. Passed only
/// when this runsc knows the flag (`runsc flags`).
///
/// It is also what a `git status` of a large tree costs: gVisor opens
/// every file it walks to (`O_RDONLY` first), so a name not in the cache
/// costs a FUSE lookup, open and release through the router. A cache that
/// holds the whole tree makes the second `git status` of 10,000 files as
/// fast as bare runsc's (runsc 20240729: 488 ms against 445 ms with a
/// 15,000-name cache), but it is not sized from the descriptor limit: the
/// Sentry keeps up to three host files for a cached file (its walk's, a
/// reader's, a writer's) and more for the directories the cached names
/// keep alive, so at a hard limit of 20,000 a cache of 15,000 names ran out
/// of descriptors inside once every file was read, and one of 6,325 on the
/// scale test's tree (5,000 directories of one file each).
pub const DCACHE_SIZE: u32 = 1000;

/// Where the search for `runsc` looks when `PATH` is not set.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// At most this much output of one probe is kept.
const MAX_OUTPUT: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RunscError {
    #[error("runsc not found on PATH: install it with `sudo apt-get install runsc`, or set runtime.runsc in the config")]
    NotFound,
    #[error("runsc {path} (runtime.runsc in the config) is not an executable file: {reason}; point runtime.runsc at the runsc binary, or remove it to search PATH")]
    NotExecutable {
        path: PathBuf,
        reason: NotExecutable,
    },
    #[error("cannot run `{path} {args}`: {source}; check that {path} is a working runsc binary")]
    Spawn {
        path: PathBuf,
        args: String,
        source: std::io::Error,
    },
    #[error("`{path} {args}` did not finish within {} s and was killed; check that {path} is a working runsc binary (try running it by hand)", timeout.as_secs())]
    Timeout {
        path: PathBuf,
        args: String,
        timeout: Duration,
    },
    #[error("`{path} {args}` failed ({status}): {output}; check that {path} is a working runsc binary, or reinstall it with `sudo apt-get install --reinstall runsc`")]
    Failed {
        path: PathBuf,
        args: String,
        status: ExitStatus,
        output: String,
    },
}

impl RunscError {
    /// A command (or config change) that should cure this error, for
    /// `lazaret doctor`.
    pub fn fix(&self) -> String {
        match self {
            RunscError::NotFound => {
                "sudo apt-get install runsc (or set runtime.runsc in the config)".into()
            }
            RunscError::NotExecutable { .. } => {
                "set runtime.runsc in the config to the runsc binary, or remove it to search PATH"
                    .into()
            }
            RunscError::Spawn { .. } | RunscError::Timeout { .. } | RunscError::Failed { .. } => {
                "sudo apt-get install --reinstall runsc".into()
            }
        }
    }
}

/// What Lazaret knows about the installed runsc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunscInfo {
    /// The binary (absolute unless the override was a relative path that
    /// could not be made absolute).
    pub path: PathBuf,
    /// The version as printed, e.g. `0.0~20221219.0` or `release-20240101.0`.
    pub version: String,
    /// The release date (`yyyymmdd`) found in the version, if any.
    pub release_date: Option<u32>,
    /// The platforms this runsc offers (`runsc help platforms`), e.g.
    /// `["kvm", "ptrace"]`.
    pub platforms: Vec<String>,
    /// Names of the top-level flags (`runsc flags`), without dashes.
    pub flags: BTreeSet<String>,
    /// Whether a fresh network namespace on this kernel shows
    /// [`ROOT_NS_CHECK_FILE`] ([`probe_netns_rmem_default`]); `None` when
    /// the probe could not run (or was not asked for).
    pub netns_shows_rmem_default: Option<bool>,
}

impl RunscInfo {
    /// Finds runsc (`path`, the config's `runtime.runsc`, else `runsc` on
    /// `PATH`) and asks it for its version, flags and platforms. A bare name
    /// as override (no `/`) is looked up on `PATH` too.
    pub fn detect(path: Option<&Path>) -> Result<RunscInfo, RunscError> {
        Self::detect_resolved(resolve(path)?)
    }

    /// As [`RunscInfo::detect`], but the probes' outputs are kept in the
    /// file `cache` (in the Storage Root, which nothing in a sandbox can
    /// write) and reused while the binary is the same file (the same
    /// canonical path, device, inode, size, modification and change time)
    /// and the kernel the same boot (`/proc/sys/kernel/random/boot_id`).
    /// Installing or replacing runsc, or booting another kernel, changes
    /// them, so the next start probes again. The outputs, not the parsed
    /// result, are kept: a newer Lazaret parses them its own way. A cache
    /// that cannot be read or written only costs the probes (about 100 ms
    /// on a 2-core VM); a kernel probe that failed is not kept.
    pub fn detect_cached(path: Option<&Path>, cache: &Path) -> Result<RunscInfo, RunscError> {
        let path = resolve(path)?;
        let Some(key) = ProbeKey::of(&path) else {
            return Self::detect_resolved(path);
        };
        if let Some(c) = ProbeCache::read(cache).filter(|c| c.key == key) {
            return Ok(c.probes.info(path));
        }
        let probes = Probes::run(&path)?;
        let info = probes.info(path);
        if probes.netns_shows_rmem_default.is_some() {
            ProbeCache { key, probes }.write(cache);
        }
        Ok(info)
    }

    fn detect_resolved(path: PathBuf) -> Result<RunscInfo, RunscError> {
        Ok(Probes::run(&path)?.info(path))
    }

    /// Builds the info from the outputs of `runsc --version`, `runsc flags`
    /// and (if it worked) `runsc help platforms`.
    pub fn from_outputs(
        path: PathBuf,
        version_output: &str,
        flags_output: &str,
        platforms_output: Option<&str>,
    ) -> RunscInfo {
        let version = parse_version(version_output).unwrap_or_else(|| "unknown".to_string());
        let release_date = parse_release_date(&version);
        let mut platforms = platforms_output
            .map(parse_platform_list)
            .unwrap_or_default();
        if platforms.is_empty() {
            platforms = parse_platforms_from_flags(flags_output);
        }
        RunscInfo {
            path,
            version,
            release_date,
            platforms,
            flags: parse_flags(flags_output),
            netns_shows_rmem_default: None,
        }
    }

    /// The same info with the kernel's answer to
    /// [`probe_netns_rmem_default`] (`None`: it could not be probed).
    pub fn with_netns_probe(mut self, shows_rmem_default: Option<bool>) -> RunscInfo {
        self.netns_shows_rmem_default = shows_rmem_default;
        self
    }

    /// The platform Lazaret uses: systrap when this runsc offers it and is
    /// recent enough to trust it, else ptrace. Never kvm: it hangs forever
    /// on machines without VMX (`kvm_pvm`).
    pub fn platform(&self) -> &'static str {
        let has = |p: &str| self.platforms.iter().any(|x| x == p);
        let recent = self.release_date.is_some_and(|d| d >= SYSTRAP_MIN_RELEASE);
        if has("systrap") && (recent || (!self.platforms.is_empty() && !has("ptrace"))) {
            "systrap"
        } else {
            "ptrace"
        }
    }

    /// The top-level flags for every runsc invocation, for rootless use
    /// inside Lazaret's own user namespace: no `--rootless`, cgroups
    /// ignored (v1 has no delegation), the safe platform, no gVisor-side
    /// overlay (writes must reach the host), shared file access on bind
    /// mounts (host<->sandbox coherence) and a bounded dentry cache
    /// ([`DCACHE_SIZE`]). Network flags are the caller's.
    pub fn global_flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--ignore-cgroups".to_string(),
            format!("--platform={}", self.platform()),
        ];
        if self.flags.contains("overlay2") {
            flags.push("--overlay2=none".to_string());
        }
        if self.flags.contains("file-access-mounts") {
            flags.push("--file-access-mounts=shared".to_string());
        }
        if self.flags.contains("dcache") {
            flags.push(format!("--dcache={DCACHE_SIZE}"));
        }
        if self.directfs() {
            flags.push("--directfs=true".to_string());
        }
        if self.allow_suid() {
            flags.push("--allow-suid".to_string());
        }
        flags
    }

    /// Whether set-user-ID programs take effect inside (runsc's
    /// `--allow-suid`, gVisor since 2025): `sudo` for a profile's `user`.
    /// Passed where offered; a root session runs with `no_new_privs`
    /// anyway (see the supervisor's bundle), so only the profile's user
    /// gains anything, and only what root inside already has. Releases
    /// without the flag (20240729 and older) ignore the bit, and `sudo`
    /// refuses.
    pub fn allow_suid(&self) -> bool {
        self.flags.contains("allow-suid")
    }

    /// Whether the Sentry opens the container's files itself (runsc's
    /// `--directfs`, offered since 2023 and its default since), instead of
    /// asking the gofer for each: an order of magnitude fewer round trips
    /// on metadata-heavy work. The Sentry then holds host file descriptors
    /// of the mounts it is given, under the seccomp filter runsc installs
    /// for directfs; it is given nothing Lazaret would not bind anyway (the
    /// root overlay, the router's FUSE mount, the Domain's mounts). Passed
    /// explicitly where offered, so a release that changed the default
    /// still gets it; older releases (20221219) do not know the flag.
    pub fn directfs(&self) -> bool {
        self.flags.contains("directfs")
    }

    /// Whether images need the statx shim (the release rejects
    /// `AT_NO_AUTOMOUNT`); true when the release is unknown.
    pub fn needs_statx_shim(&self) -> bool {
        !matches!(self.release_date, Some(d) if d >= STATX_FIXED_RELEASE)
    }

    /// Whether this runsc has the root-network-namespace check
    /// ([`ROOT_NS_CHECK_REMOVED_RELEASE`]).
    pub fn has_root_ns_check(&self) -> bool {
        has_root_ns_check(self.release_date, ROOT_NS_CHECK_REMOVED_RELEASE)
    }

    /// Whether `--network=sandbox` needs the tmpfs over `/proc/sys/net` in
    /// the holder's mount namespace: this runsc has the check and the
    /// kernel shows its file in a fresh network namespace (or could not be
    /// asked). See [`root_ns_workaround`].
    pub fn needs_proc_sys_net_hack(&self) -> bool {
        root_ns_workaround(self.has_root_ns_check(), self.netns_shows_rmem_default)
    }
}

/// Whether a runsc of `release` (`None`: unknown) has the
/// root-network-namespace check, given the first release without it
/// (`None`: none known). An unknown release is taken to have it.
pub fn has_root_ns_check(release: Option<u32>, removed_in: Option<u32>) -> bool {
    match (release, removed_in) {
        (Some(r), Some(removed)) => r < removed,
        _ => true,
    }
}

/// The decision itself: the tmpfs over `/proc/sys/net` is needed when runsc
/// has the check and a fresh network namespace shows the file it looks for.
/// When the kernel could not be probed the workaround is applied: it only
/// hides the host's `/proc/sys/net` from runsc's own processes in the
/// holder's mount namespace (the sandbox has gVisor's own), while a runsc
/// whose check fires cannot start the network at all.
pub fn root_ns_workaround(has_check: bool, netns_shows_file: Option<bool>) -> bool {
    has_check && netns_shows_file != Some(false)
}

/// Whether a fresh network namespace, made as the holder makes the
/// sandbox's (with a fresh user namespace, so as an unprivileged user
/// too), shows [`ROOT_NS_CHECK_FILE`]. Kernels that register
/// `net.core.rmem_default` only in the initial network namespace do not
/// (there runsc's check works as meant); newer ones (6.18 here) show it in
/// every namespace, so runsc takes each for the root one. A forked child
/// makes the namespaces and looks, so the caller's stay as they are.
pub fn probe_netns_rmem_default() -> Result<bool, NetnsProbeError> {
    const SHOWN: i32 = 0;
    const HIDDEN: i32 = 1;
    const NO_NAMESPACE: i32 = 2;
    const CANNOT_LOOK: i32 = 3;
    let file = c"/proc/sys/net/core/rmem_default";
    // SAFETY: between fork and _exit the child makes only the raw,
    // async-signal-safe calls unshare, access and _exit on memory that
    // exists before the fork (a C string literal), so forking a possibly
    // multi-threaded process is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(NetnsProbeError::Fork(nix::errno::Errno::last()));
    }
    if pid == 0 {
        // SAFETY: see above; errno is thread-local to this, the only
        // thread of the child.
        unsafe {
            let code = if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                NO_NAMESPACE
            } else if libc::access(file.as_ptr(), libc::F_OK) == 0 {
                SHOWN
            } else if *libc::__errno_location() == libc::ENOENT {
                HIDDEN
            } else {
                CANNOT_LOOK
            };
            libc::_exit(code)
        }
    }
    use nix::sys::wait::{waitpid, WaitStatus};
    let status = loop {
        match waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.map_err(NetnsProbeError::Wait)?,
        }
    };
    match status {
        WaitStatus::Exited(_, SHOWN) => Ok(true),
        WaitStatus::Exited(_, HIDDEN) => Ok(false),
        WaitStatus::Exited(_, NO_NAMESPACE) => Err(NetnsProbeError::Unshare),
        _ => Err(NetnsProbeError::Look),
    }
}

/// Why [`probe_netns_rmem_default`] has no answer.
#[derive(Debug, thiserror::Error)]
pub enum NetnsProbeError {
    #[error("cannot fork the probe: {0}")]
    Fork(nix::errno::Errno),
    #[error("cannot wait for the probe: {0}")]
    Wait(nix::errno::Errno),
    #[error("cannot make a user and network namespace (unshare failed)")]
    Unshare,
    #[error("cannot look for {ROOT_NS_CHECK_FILE} in a fresh network namespace")]
    Look,
}

/// Finds an executable `name` on `PATH` (empty entries, meaning the current
/// directory, are skipped).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p).is_ok())
}

/// Why a path is no runsc to run.
#[derive(Debug, thiserror::Error)]
pub enum NotExecutable {
    #[error("not found on PATH")]
    NotOnPath,
    #[error("{0}")]
    Metadata(std::io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("no execute permission")]
    NoExecutePermission,
    #[error("{0}")]
    Access(rustix::io::Errno),
}

fn is_executable(p: &Path) -> Result<(), NotExecutable> {
    let meta = std::fs::metadata(p).map_err(NotExecutable::Metadata)?;
    if !meta.is_file() {
        return Err(NotExecutable::NotAFile);
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(NotExecutable::NoExecutePermission);
    }
    rustix::fs::access(p, rustix::fs::Access::EXEC_OK).map_err(NotExecutable::Access)
}

/// What the probes found: the outputs of `runsc --version`, `runsc flags`
/// and (when the topic exists: older or newer releases may lack it, and
/// the -platform flag's usage text is the fallback) `runsc help
/// platforms`, and the kernel's answer to [`probe_netns_rmem_default`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Probes {
    version: String,
    flags: String,
    platforms: Option<String>,
    netns_shows_rmem_default: Option<bool>,
}

impl Probes {
    fn run(path: &Path) -> Result<Probes, RunscError> {
        Ok(Probes {
            version: probe(path, &["--version"], PROBE_TIMEOUT)?,
            flags: probe(path, &["flags"], PROBE_TIMEOUT)?,
            platforms: probe(path, &["help", "platforms"], PROBE_TIMEOUT).ok(),
            netns_shows_rmem_default: probe_netns_rmem_default().ok(),
        })
    }

    fn info(&self, path: PathBuf) -> RunscInfo {
        RunscInfo::from_outputs(path, &self.version, &self.flags, self.platforms.as_deref())
            .with_netns_probe(self.netns_shows_rmem_default)
    }
}

/// What the cached probes hold for: one runsc binary file, one boot of
/// the kernel.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct ProbeKey {
    binary: BinaryKey,
    boot_id: String,
}

impl ProbeKey {
    fn of(path: &Path) -> Option<ProbeKey> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(ProbeKey {
            binary: BinaryKey::of(path)?,
            boot_id: boot_id.trim().to_string(),
        })
    }
}

/// What identifies one runsc binary file for [`RunscInfo::detect_cached`].
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct BinaryKey {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl BinaryKey {
    fn of(path: &Path) -> Option<BinaryKey> {
        use std::os::unix::fs::MetadataExt;
        let path = std::fs::canonicalize(path).ok()?;
        let m = std::fs::metadata(&path).ok()?;
        Some(BinaryKey {
            path,
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// The probes' outputs for one runsc binary and kernel boot, as kept on
/// disk. A cache of an older layout does not decode and is replaced.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProbeCache {
    key: ProbeKey,
    probes: Probes,
}

impl ProbeCache {
    /// Three probes' outputs at most ([`MAX_OUTPUT`] each).
    const MAX_FILE: u64 = 3 * MAX_OUTPUT + 4096;

    fn read(file: &Path) -> Option<ProbeCache> {
        let f = std::fs::File::open(file).ok()?;
        let mut bytes = Vec::new();
        f.take(Self::MAX_FILE + 1).read_to_end(&mut bytes).ok()?;
        if bytes.len() as u64 > Self::MAX_FILE {
            return None;
        }
        postcard::from_bytes(&bytes).ok()
    }

    /// Replaces `file` whole (a temporary file renamed over it), so a
    /// concurrent reader sees the old cache or the new one.
    fn write(&self, file: &Path) {
        let (Some(dir), Ok(bytes)) = (file.parent(), postcard::to_allocvec(self)) else {
            return;
        };
        let tmp = dir.join(format!(
            ".{}.{}",
            file.file_name().and_then(|n| n.to_str()).unwrap_or("cache"),
            std::process::id()
        ));
        let written = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| std::fs::write(&tmp, &bytes))
            .and_then(|()| std::fs::rename(&tmp, file));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

fn resolve(path: Option<&Path>) -> Result<PathBuf, RunscError> {
    let Some(p) = path else {
        return find_on_path("runsc").ok_or(RunscError::NotFound);
    };
    if p.components().count() == 1 && !p.is_absolute() {
        if let Some(name) = p.to_str() {
            return find_on_path(name).ok_or_else(|| RunscError::NotExecutable {
                path: p.to_path_buf(),
                reason: NotExecutable::NotOnPath,
            });
        }
    }
    is_executable(p).map_err(|reason| RunscError::NotExecutable {
        path: p.to_path_buf(),
        reason,
    })?;
    Ok(std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
}

/// Runs `path args` with stdin from /dev/null and stdout+stderr into one
/// memfd (no pipes, so no reader threads and no EOF to wait for), in its
/// own process group, which is killed when `timeout` passes. Returns the
/// combined output when the command exits with status 0.
fn probe(path: &Path, args: &[&str], timeout: Duration) -> Result<String, RunscError> {
    let args_s = args.join(" ");
    let spawn_err = |source: std::io::Error| RunscError::Spawn {
        path: path.to_path_buf(),
        args: args_s.clone(),
        source,
    };
    let out = rustix::fs::memfd_create("lazaret-runsc-probe", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| spawn_err(e.into()))?;
    let mut out = std::fs::File::from(out);
    let stdout = out.try_clone().map_err(spawn_err)?;
    let stderr = out.try_clone().map_err(spawn_err)?;
    let mut cmd = Command::new(path);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    // ETXTBSY: a just-written binary whose fd another thread's fork still
    // holds for a moment (seen with freshly installed or test binaries).
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 5 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r.map_err(spawn_err)?,
        }
    };
    drop(cmd);
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                kill_group(&mut child);
                return Err(spawn_err(e));
            }
        }
        if start.elapsed() >= timeout {
            kill_group(&mut child);
            return Err(RunscError::Timeout {
                path: path.to_path_buf(),
                args: args_s,
                timeout,
            });
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    };
    let mut bytes = Vec::new();
    out.seek(SeekFrom::Start(0))
        .and_then(|_| out.take(MAX_OUTPUT).read_to_end(&mut bytes))
        .map_err(spawn_err)?;
    let output = String::from_utf8_lossy(&bytes).into_owned();
    if !status.success() {
        return Err(RunscError::Failed {
            path: path.to_path_buf(),
            args: args_s,
            status,
            output: output.trim().chars().take(500).collect(),
        });
    }
    Ok(output)
}

/// Kills the child's process group (it leads one) and reaps the child.
fn kill_group(child: &mut std::process::Child) {
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let _ = child.kill();
    let _ = child.wait();
}

/// The version from `runsc --version` output (`runsc version X`); else the
/// first non-empty line; `None` for empty output.
pub fn parse_version(output: &str) -> Option<String> {
    let lines = || output.lines().map(str::trim).filter(|l| !l.is_empty());
    for line in lines() {
        if let Some(rest) = line.strip_prefix("runsc version") {
            if let Some(v) = rest.split_whitespace().next() {
                return Some(v.to_string());
            }
        }
    }
    lines().next().map(str::to_string)
}

/// The release date (`yyyymmdd`) in a version string: the first run of
/// exactly eight digits that is a plausible date.
pub fn parse_release_date(version: &str) -> Option<u32> {
    let bytes = version.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i - start == 8 {
            let d: u32 = version[start..i].parse().ok()?;
            let (year, month, day) = (d / 10000, d / 100 % 100, d % 100);
            if (2015..=2099).contains(&year) && (1..=12).contains(&month) && (1..=31).contains(&day)
            {
                return Some(d);
            }
        }
    }
    None
}

/// Names of the top-level flags in `runsc flags` output (Go's flag
/// package: a flag line is two spaces, a dash and the name, optionally
/// followed by a type word or, for short flags, a tab and the usage; usage
/// lines are indented further).
pub fn parse_flags(output: &str) -> BTreeSet<String> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("  -"))
        .filter_map(|rest| rest.trim_start_matches('-').split_whitespace().next())
        .filter(|name| {
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        })
        .map(str::to_string)
        .collect()
}

/// Platforms from `runsc help platforms` (one name per line).
pub fn parse_platform_list(output: &str) -> Vec<String> {
    let names: Vec<String> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let valid = names.iter().all(|n| {
        n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    });
    if valid {
        names
    } else {
        Vec::new()
    }
}

/// Platforms from the usage text of `-platform` in `runsc flags` output
/// ("specifies which platform to use: ptrace (default), kvm.").
pub fn parse_platforms_from_flags(output: &str) -> Vec<String> {
    let mut lines = output.lines().skip_while(|l| {
        l.strip_prefix("  -")
            .and_then(|r| r.split_whitespace().next())
            != Some("platform")
    });
    let Some(first) = lines.next() else {
        return Vec::new();
    };
    // The usage follows on the indented lines (or the same line for short
    // flags).
    let mut usage = first.to_string();
    for l in lines.take_while(|l| !l.starts_with("  -")) {
        usage.push(' ');
        usage.push_str(l.trim());
    }
    let Some((_, list)) = usage.split_once("use:") else {
        return Vec::new();
    };
    let list = list.split('.').next().unwrap_or("");
    list.split(',')
        .map(|p| p.replace("(default)", "").trim().to_string())
        .filter(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Excerpt of `runsc flags 2>&1` from runsc 0.0~20221219.0 (Debian
    /// bookworm), with its odd lines kept (`-net-raw runsc exec`, short
    /// descriptions, defaults).
    const FLAGS_20221219: &str = "  -EXPERIMENTAL-afxdp
    \tEXPERIMENTAL. Use an AF_XDP socket to receive packets.
  -TESTONLY-test-name-env string
    \tTEST ONLY; do not ever use! Used for automated tests to improve logging.
  -dcache int
    \tSet the global dentry cache size. This acts as a coarse-grained control on the number of host FDs simultaneously open by the sentry. If negative, per-mount caches are used. (default -1)
  -debug
    \tenable debug logging.
  -debug-log string
    \tadditional location for logs. If it ends with '/', log files are created inside the directory with default names. The following variables are available: %TIMESTAMP%, %COMMAND%.
  -file-access value
    \tspecifies which filesystem validation to use for the root mount: exclusive (default), shared.
  -file-access-mounts value
    \tspecifies which filesystem validation to use for volumes other than the root mount: shared (default), exclusive. (default shared)
  -ignore-cgroups
    \tdon't configure cgroups.
  -net-raw runsc exec
    \tenable raw sockets. When false, raw sockets are disabled by removing CAP_NET_RAW from containers (runsc exec will still be able to utilize raw sockets). Raw sockets allow malicious containers to craft packets and potentially attack the network.
  -network value
    \tspecifies which network to use: sandbox (default), host, none. Using network inside the sandbox is more secure because it's isolated from the host network.
  -overlay
    \tDEPRECATED: use --overlay2=all:memory to achieve the same effect
  -overlay2 value
    \twrap mounts with overlayfs. Format is {mount}:{medium}, where 'mount' can be 'root' or 'all' and medium can be 'memory' or existing directory path in which filestore will be created. 'none' will turn overlay mode off.
  -panic-signal int
    \tregister signal handling that panics. Usually set to SIGUSR2(12) to troubleshoot hangs. -1 disables it. (default -1)
  -platform string
    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")
  -platform_device_path string
    \tpath to a platform-specific device file (e.g. /dev/kvm for KVM platform). If unset, will use a sane platform-specific default.
  -rootless
    \tit allows the sandbox to be started with a user that is not root. Sandbox and Gofer processes may run with same privileges as current user.
  -version
    \tshow version and exit.
  -watchdog-action value
    \tsets what action the watchdog takes when triggered: log (default), panic.
";

    /// The same for a recent release (multi-line usage, systrap default).
    const FLAGS_RECENT: &str = "  -ignore-cgroups
    \tdon't configure cgroups.
  -overlay2 value
    \twrap mounts with overlayfs. Format is
    \t* 'none' to turn overlay mode off
    \t* {mount}:{medium}[,size={size}], where
    \t    'mount' can be 'root' or 'all'
    \t    'medium' can be 'memory', 'self' or 'dir=/abs/dir/path' in which filestore will be created
    \t (default root:self)
  -platform string
    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")
  -x\tshort flag
";

    /// From `runsc flags` of release-20240513.0 (the lines this code
    /// reads; the release prints about 120 flags).
    const FLAGS_20240513: &str = "  -dcache int
    \tglobal dirent cache size, -1 to disable. (default -1)
  -directfs
    \tdirectly access the container filesystems from the sentry. Sentry runs with higher privileges. (default true)
  -file-access-mounts value
    \tspecifies which filesystem validation to use for the volumes other than the root mount: shared (default), exclusive. (default shared)
  -ignore-cgroups
    \tdon't configure cgroups.
  -overlay2 value
    \twrap mounts with overlayfs. Format is
    \t* 'none' to turn overlay mode off
    \t (default root:self)
  -platform string
    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")
";

    #[test]
    fn directfs_and_systrap_are_used_where_offered() {
        let i = info(
            "runsc version release-20240513.0\nspec: 1.1.0\n",
            FLAGS_20240513,
            Some("systrap\nptrace\nkvm\n"),
        );
        assert!(i.directfs());
        assert_eq!(i.platform(), "systrap");
        assert_eq!(
            i.global_flags(),
            [
                "--ignore-cgroups",
                "--platform=systrap",
                "--overlay2=none",
                "--file-access-mounts=shared",
                "--dcache=1000",
                "--directfs=true"
            ]
        );
        // 20221219 (Debian 12's) has neither.
        let old = info("runsc version 0.0~20221219.0\n", FLAGS_20221219, None);
        assert!(!old.directfs());
        assert_eq!(old.platform(), "ptrace");
        assert!(!old.global_flags().iter().any(|f| f.contains("directfs")));
        assert!(!i.allow_suid() && !old.allow_suid());
    }

    #[test]
    fn set_user_id_programs_are_allowed_where_runsc_offers_it() {
        let flags = format!("{FLAGS_20240513}  -allow-suid\n    \tallows set-user-ID programs\n");
        let i = info(
            "runsc version release-20250901.0\nspec: 1.1.0\n",
            &flags,
            Some("systrap\nptrace\n"),
        );
        assert!(i.allow_suid());
        assert_eq!(
            i.global_flags().last().map(String::as_str),
            Some("--allow-suid")
        );
    }

    fn info(version_out: &str, flags: &str, platforms: Option<&str>) -> RunscInfo {
        RunscInfo::from_outputs("/usr/bin/runsc".into(), version_out, flags, platforms)
    }

    #[test]
    fn parses_versions() {
        let debian = "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n";
        assert_eq!(parse_version(debian).as_deref(), Some("0.0~20221219.0"));
        assert_eq!(parse_release_date("0.0~20221219.0"), Some(20221219));
        let upstream = "runsc version release-20240513.0\nspec: 1.1.0\n";
        assert_eq!(
            parse_version(upstream).as_deref(),
            Some("release-20240513.0")
        );
        assert_eq!(parse_release_date("release-20240513.0"), Some(20240513));
        assert_eq!(
            parse_release_date("release-20240513.0-12-gdeadbee"),
            Some(20240513)
        );
        assert_eq!(parse_release_date("20231002.0"), Some(20231002));
        // Not dates: wrong length, impossible month, none at all.
        assert_eq!(parse_release_date("google-123456789"), None);
        assert_eq!(parse_release_date("0.0~20221319.0"), None);
        assert_eq!(parse_release_date("unknown"), None);
        // Odd output: the first line is kept, the date still found.
        assert_eq!(
            parse_version("\n  gvisor 20230105\n").as_deref(),
            Some("gvisor 20230105")
        );
        assert_eq!(parse_version(" \n"), None);
    }

    #[test]
    fn parses_flags() {
        let flags = parse_flags(FLAGS_20221219);
        for f in [
            "EXPERIMENTAL-afxdp",
            "TESTONLY-test-name-env",
            "dcache",
            "debug",
            "debug-log",
            "file-access",
            "file-access-mounts",
            "ignore-cgroups",
            "net-raw",
            "network",
            "overlay",
            "overlay2",
            "panic-signal",
            "platform",
            "platform_device_path",
            "rootless",
            "version",
            "watchdog-action",
        ] {
            assert!(flags.contains(f), "{f} missing from {flags:?}");
        }
        assert_eq!(flags.len(), 18, "{flags:?}");
        let recent = parse_flags(FLAGS_RECENT);
        assert_eq!(
            recent.into_iter().collect::<Vec<_>>(),
            ["ignore-cgroups", "overlay2", "platform", "x"]
        );
    }

    #[test]
    fn parses_platforms() {
        assert_eq!(parse_platform_list("kvm\nptrace\n"), ["kvm", "ptrace"]);
        assert!(parse_platform_list("Usage: runsc help <topic>\n").is_empty());
        assert_eq!(
            parse_platforms_from_flags(FLAGS_20221219),
            ["ptrace", "kvm"]
        );
        assert_eq!(
            parse_platforms_from_flags(FLAGS_RECENT),
            ["systrap", "ptrace", "kvm"]
        );
        assert!(parse_platforms_from_flags("  -debug\n    \tenable debug.\n").is_empty());
    }

    #[test]
    fn debian_20221219_gets_ptrace_and_workarounds() {
        let i = info(
            "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n",
            FLAGS_20221219,
            Some("kvm\nptrace\n"),
        );
        assert_eq!(i.version, "0.0~20221219.0");
        assert_eq!(i.release_date, Some(20221219));
        assert_eq!(i.platforms, ["kvm", "ptrace"]);
        assert_eq!(
            i.global_flags(),
            [
                "--ignore-cgroups",
                "--platform=ptrace",
                "--overlay2=none",
                "--file-access-mounts=shared",
                "--dcache=1000"
            ]
        );
        assert!(i.needs_statx_shim());
        assert!(i.needs_proc_sys_net_hack());
    }

    #[test]
    fn recent_release_gets_systrap_and_no_statx_shim() {
        let i = info(
            "runsc version release-20240513.0\nspec: 1.1.0\n",
            FLAGS_RECENT,
            None,
        );
        assert_eq!(i.platforms, ["systrap", "ptrace", "kvm"]);
        assert_eq!(i.platform(), "systrap");
        assert_eq!(
            i.global_flags(),
            ["--ignore-cgroups", "--platform=systrap", "--overlay2=none"]
        );
        assert!(!i.needs_statx_shim());
        // The root-namespace check is still there: whether it fires is the
        // kernel's doing (`the_root_ns_workaround_follows_the_kernel`).
        assert!(i.has_root_ns_check());
        assert!(!i
            .clone()
            .with_netns_probe(Some(false))
            .needs_proc_sys_net_hack());
        assert!(i.with_netns_probe(Some(true)).needs_proc_sys_net_hack());
        let mid = info("runsc version release-20230605.0\n", FLAGS_RECENT, None);
        assert!(!mid.needs_statx_shim());
        // Systrap listed, but too old to trust: ptrace.
        assert_eq!(mid.platform(), "ptrace");
    }

    #[test]
    fn the_root_ns_workaround_follows_the_kernel() {
        // Each combination: runsc has the check or not, and a fresh network
        // namespace shows its file, does not, or could not be probed.
        assert!(root_ns_workaround(true, Some(true)));
        assert!(!root_ns_workaround(true, Some(false)));
        assert!(root_ns_workaround(true, None));
        assert!(!root_ns_workaround(false, Some(true)));
        assert!(!root_ns_workaround(false, Some(false)));
        assert!(!root_ns_workaround(false, None));
        // Which releases have the check: every one while no release
        // without it is known, an unknown one included; once one is, the
        // releases from it on do not, and an unknown one still does.
        for r in [Some(20221219), Some(20240729), Some(20991231), None] {
            assert!(has_root_ns_check(r, None), "{r:?}");
        }
        assert!(has_root_ns_check(Some(20240729), Some(20250101)));
        assert!(!has_root_ns_check(Some(20250101), Some(20250101)));
        assert!(!has_root_ns_check(Some(20250601), Some(20250101)));
        assert!(has_root_ns_check(None, Some(20250101)));
        // Debian 12's release and bookworm-backports', on a kernel that shows
        // the file in every namespace (6.18) and on one that does not.
        for (version, flags) in [
            ("runsc version 0.0~20221219.0\n", FLAGS_20221219),
            ("runsc version 0.0~20240729.0\n", FLAGS_20240513),
        ] {
            let i = info(version, flags, None);
            assert!(i.has_root_ns_check(), "{version}");
            let shown = i.clone().with_netns_probe(Some(true));
            assert!(shown.needs_proc_sys_net_hack(), "{version}, file shown");
            let hidden = i.clone().with_netns_probe(Some(false));
            assert!(!hidden.needs_proc_sys_net_hack(), "{version}, file hidden");
            assert!(i.needs_proc_sys_net_hack(), "{version}, kernel not probed");
        }
    }

    #[test]
    fn the_kernel_probe_agrees_with_a_shell_in_a_fresh_network_namespace() {
        assert_eq!(
            c"/proc/sys/net/core/rmem_default".to_str(),
            Ok(ROOT_NS_CHECK_FILE)
        );
        let shown = match probe_netns_rmem_default() {
            Ok(shown) => shown,
            Err(NetnsProbeError::Unshare) => {
                eprintln!("skipping: no user namespaces here");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        if find_on_path("unshare").is_none() {
            return;
        }
        let shell = Command::new("unshare")
            .args(["--user", "--net", "test", "-e", ROOT_NS_CHECK_FILE])
            .status()
            .unwrap();
        assert_eq!(shell.success(), shown, "unshare said {shell}");
    }

    #[test]
    fn unknown_version_is_treated_as_old() {
        let i = info("", FLAGS_RECENT, Some("systrap\nptrace\n"));
        assert_eq!(i.version, "unknown");
        assert_eq!(i.release_date, None);
        assert_eq!(i.platform(), "ptrace");
        assert!(i.needs_statx_shim());
        assert!(i.needs_proc_sys_net_hack());
        // Only systrap offered: systrap, whatever the date.
        let only = info("", "", Some("systrap\n"));
        assert_eq!(only.platform(), "systrap");
        // Nothing known: ptrace, the safe default.
        assert_eq!(
            info("", "", None).global_flags(),
            ["--ignore-cgroups", "--platform=ptrace"]
        );
    }

    #[test]
    fn missing_override_is_a_clear_error() {
        let e = RunscInfo::detect(Some(Path::new("/nonexistent/runsc"))).unwrap_err();
        assert!(matches!(e, RunscError::NotExecutable { .. }), "{e}");
        assert!(e.to_string().contains("runtime.runsc"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = RunscInfo::detect(Some(dir.path())).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(RunscError::NotFound
            .to_string()
            .contains("sudo apt-get install runsc"));
    }

    #[test]
    fn probes_are_reused_only_while_the_binary_and_the_boot_are_the_same() {
        if let Err(e) = probe_netns_rmem_default() {
            // Nothing is cached without the kernel's answer.
            eprintln!("skipping: {e}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("runsc");
        let calls = dir.path().join("calls");
        let script = |version: &str| {
            format!(
                "#!/bin/sh\necho \"$1\" >> {}\ncase \"$1\" in\n--version) echo 'runsc version release-{version}.0';;\n\
                 flags) echo '  -overlay2 value';;\n*) exit 2;;\nesac\n",
                calls.display()
            )
        };
        let install = |version: &str| {
            // A new file, as a package upgrade makes (rename over).
            let tmp = dir.path().join("runsc.new");
            std::fs::write(&tmp, script(version)).unwrap();
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&tmp, &fake).unwrap();
        };
        let probes = || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .filter(|l| *l == "--version")
                .count()
        };
        let cache = dir.path().join("cache/runsc-probe");
        install("20240513");
        let first = RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(probes(), 1);
        let again = RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(probes(), 1, "the unchanged binary was probed again");
        assert_eq!(first, again);
        assert_eq!(again, RunscInfo::detect(Some(&fake)).unwrap());
        assert_eq!(probes(), 2);

        // A replaced binary is probed afresh.
        install("20250101");
        let newer = RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(newer.version, "release-20250101.0");
        assert_eq!(probes(), 3);
        // The kernel's answer is kept with them.
        assert_eq!(
            newer.netns_shows_rmem_default,
            probe_netns_rmem_default().ok()
        );

        // Probes of another boot (another kernel, perhaps) are not reused.
        let mut other = ProbeCache::read(&cache).unwrap();
        other.key.boot_id = "another boot".into();
        other.write(&cache);
        assert_eq!(
            RunscInfo::detect_cached(Some(&fake), &cache).unwrap(),
            newer
        );
        assert_eq!(probes(), 4);
        RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(probes(), 4);

        // A cache that does not decode, or is too large, is ignored and
        // replaced.
        std::fs::write(&cache, b"\xffnot a cache").unwrap();
        let i = RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(i, newer);
        assert_eq!(probes(), 5);
        RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(probes(), 5);
        std::fs::write(&cache, vec![0u8; (ProbeCache::MAX_FILE + 1) as usize]).unwrap();
        RunscInfo::detect_cached(Some(&fake), &cache).unwrap();
        assert_eq!(probes(), 6);

        // A failing runsc is an error, and nothing is cached for it.
        install("x");
        std::fs::write(&fake, "#!/bin/sh\nexit 3\n").unwrap();
        assert!(RunscInfo::detect_cached(Some(&fake), &cache).is_err());
    }

    #[test]
    fn fake_runsc_is_probed_and_a_hanging_one_killed() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("runsc");
        std::fs::write(
            &fake,
            "#!/bin/sh\ncase \"$1\" in\n--version) echo 'runsc version release-20240513.0'; echo 'spec: 1.1.0';;\n\
             flags) printf '  -overlay2 value\\n    \\tx\\n  -platform string\\n    \\tspecifies which platform to use: systrap (default), ptrace, kvm.\\n' >&2;;\n\
             *) exit 2;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let i = RunscInfo::detect(Some(&fake)).unwrap();
        assert_eq!(i.path, fake);
        assert_eq!(i.version, "release-20240513.0");
        // `help platforms` failed: the platforms come from the flag's usage.
        assert_eq!(i.platforms, ["systrap", "ptrace", "kvm"]);
        assert_eq!(i.flags.iter().collect::<Vec<_>>(), ["overlay2", "platform"]);

        // A runsc whose child keeps running is killed with its group.
        let hang = dir.path().join("hang");
        std::fs::write(&hang, "#!/bin/sh\nsleep 30 &\nsleep 30\n").unwrap();
        std::fs::set_permissions(&hang, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = Instant::now();
        let e = probe(&hang, &["--version"], Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, RunscError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));

        let fail = probe(&fake, &["bogus"], PROBE_TIMEOUT).unwrap_err();
        assert!(matches!(fail, RunscError::Failed { .. }), "{fail}");
    }

    #[test]
    fn detects_the_installed_runsc_if_any() {
        // Only meaningful where runsc is installed (this project's machines).
        if find_on_path("runsc").is_none() {
            return;
        }
        let i = RunscInfo::detect(None).unwrap();
        assert!(i.flags.contains("ignore-cgroups"), "{i:?}");
        assert!(i.platforms.iter().any(|p| p == "ptrace"), "{i:?}");
        assert!(!i
            .global_flags()
            .iter()
            .any(|f| f.contains("kvm") || f == "--rootless"));
    }

    #[test]
    fn dcache_is_bounded_only_where_runsc_offers_the_flag() {
        let with = info("runsc version 0.0~20221219.0\n", FLAGS_20221219, None);
        assert!(with.flags.contains("dcache"));
        assert!(with
            .global_flags()
            .contains(&format!("--dcache={DCACHE_SIZE}")));
        let without = info("runsc version release-20240513.0\n", FLAGS_RECENT, None);
        assert!(!without.global_flags().iter().any(|f| f.contains("dcache")));
        // A future layout of the same flag (double dash) is recognised too.
        let dashed = info("", "  --dcache int\n    \tcache size\n", None);
        assert!(dashed.global_flags().iter().any(|f| f == "--dcache=1000"));
    }
}
