//! `lazaret doctor`: checks this machine's prerequisites for running
//! sandboxes as an ordinary user, one line per prerequisite, each failure
//! with the command that fixes it.
//!
//! The checks are a table of plain functions; each gathers its facts and
//! hands them to a pure `eval_*` function, which the unit tests feed with
//! fake facts. Doctor stays fast (well under 2 s): no runsc smoke test.

use lazaret_helpers::runsc::{find_on_path, RunscInfo};
use lazaret_helpers::userns;
use lazaret_seccomp::abi::{Available, Feature, Kernel, TEST_CAP_ENV};
use nix::errno::Errno;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    /// A warning: Lazaret works, but something weakens it (`ok` stays
    /// true, so the exit code is not affected).
    pub warn: bool,
    pub what: String,
    pub detail: String,
    /// The command that fixes a failure (empty when passing).
    pub fix: String,
}

impl Check {
    pub fn pass(what: &str, detail: impl Into<String>) -> Check {
        Check {
            ok: true,
            warn: false,
            what: what.to_string(),
            detail: detail.into(),
            fix: String::new(),
        }
    }

    pub fn warn(what: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            ok: true,
            warn: true,
            what: what.to_string(),
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    pub fn fail(what: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            ok: false,
            warn: false,
            what: what.to_string(),
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.line(false))
    }
}

impl Check {
    /// The check's line, its status word coloured when `colour` (only
    /// the word: the detail may quote file contents).
    pub fn line(&self, colour: bool) -> String {
        use crate::colour::{paint, Colour};
        let (word, pad) = if self.warn {
            (paint("WARN", Colour::Yellow, colour), "")
        } else if self.ok {
            (paint("ok", Colour::Green, colour), "  ")
        } else {
            (paint("FAIL", Colour::BoldRed, colour), "")
        };
        let mut l = format!("{word}{pad} {}: {}", self.what, self.detail);
        if self.warn || (!self.ok && !self.fix.is_empty()) {
            l.push_str(&format!(" — fix: {}", self.fix));
        }
        l
    }
}

/// What the checks need to know about the invocation.
#[derive(Debug, Clone)]
pub struct Ctx<'a> {
    pub runsc_override: Option<&'a Path>,
    /// The configuration `lazaret run` would use, when it loads.
    pub config: Option<&'a lazaret_config::Config>,
    /// Why the configuration does not load (file, line and field), or its
    /// path when it does (`None`: no file, the built-in defaults).
    pub config_status: Result<Option<String>, String>,
    pub uid: u32,
    pub euid: u32,
    pub user: String,
}

impl<'a> Ctx<'a> {
    pub fn current(
        runsc_override: Option<&'a Path>,
        config: Option<&'a lazaret_config::Config>,
        config_status: Result<Option<String>, String>,
    ) -> Ctx<'a> {
        let uid = nix::unistd::getuid();
        let user = nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        Ctx {
            runsc_override,
            config,
            config_status,
            uid: uid.as_raw(),
            euid: nix::unistd::geteuid().as_raw(),
            user,
        }
    }
}

/// A check: gathers its facts and judges them. Gets its `what` from the
/// table.
pub type CheckFn = fn(&Ctx, &str) -> Check;

/// Every prerequisite, in the order printed.
pub const CHECKS: &[(&str, CheckFn)] = &[
    ("user", check_user),
    ("configuration", check_config),
    ("Lazaret's helper binaries", check_helpers),
    ("runsc", check_runsc),
    ("newuidmap", check_newuidmap),
    ("newgidmap", check_newgidmap),
    ("subordinate uids", check_subuid),
    ("subordinate gids", check_subgid),
    ("user namespaces", check_userns),
    ("overlayfs in a user namespace", check_overlay),
    ("/dev/fuse", check_fuse),
    ("/dev/net/tun", check_tun),
    ("slirp4netns", check_slirp4netns),
    ("landlock", check_landlock),
    ("mmdebstrap", check_mmdebstrap),
    ("open files (RLIMIT_NOFILE)", check_nofile),
    ("sandbox resource limits", check_sandbox_limits),
    ("cgroup delegation", check_cgroup_delegation),
    ("host git safe.bareRepository", check_git_bare_repository),
    (
        "auto-approval rules with trailing arguments",
        check_trailing_rules,
    ),
    ("writable volumes bound directly", check_direct_volumes),
];

/// Runs every check, prints one line each (or, with `json`, one JSON
/// document once all ran), and returns the exit code: 0 when all pass, 1
/// otherwise.
pub fn run(
    runsc_override: Option<&Path>,
    config: Option<&lazaret_config::Config>,
    config_status: Result<Option<String>, String>,
    json: bool,
) -> i32 {
    let ctx = Ctx::current(runsc_override, config, config_status);
    let colour = crate::colour::stdout();
    let mut checks = Vec::with_capacity(CHECKS.len());
    for (what, check) in CHECKS {
        let c = check(&ctx, what);
        if !json {
            println!("{}", c.line(colour));
        }
        checks.push(c);
    }
    let code = exit_code(&checks);
    if json {
        println!("{}", to_json(&checks, code));
    }
    code
}

/// One check as `lazaret doctor --json` shows it.
#[derive(serde::Serialize)]
struct CheckView<'a> {
    check: &'a str,
    /// `ok`, `warn` or `fail`.
    status: &'static str,
    detail: &'a str,
    /// The command that fixes it; `null` when there is nothing to fix.
    fix: Option<&'a str>,
}

/// `{"ok": bool, "exit_code": N, "checks": [...]}`, ASCII only: details
/// may quote file contents.
pub fn to_json(checks: &[Check], code: i32) -> String {
    let views: Vec<CheckView> = checks
        .iter()
        .map(|c| CheckView {
            check: &c.what,
            status: match (c.ok, c.warn) {
                (_, true) => "warn",
                (true, false) => "ok",
                (false, false) => "fail",
            },
            detail: &c.detail,
            fix: (!c.fix.is_empty()).then_some(c.fix.as_str()),
        })
        .collect();
    let doc = serde_json::json!({
        "ok": code == 0,
        "exit_code": code,
        "checks": views,
    });
    // `{:#}` is `to_string_pretty`, and a `Value` cannot fail to encode.
    lazaret_protocol::display::ascii_json(&format!("{doc:#}"))
}

pub fn exit_code(checks: &[Check]) -> i32 {
    if checks.iter().all(|c| c.ok) {
        0
    } else {
        1
    }
}

// ---------------------------------------------------------------- helpers

/// `lazaret` runs its helpers from its own directory (as `scripts/install`
/// lays them out): all of them must be there.
fn check_helpers(_ctx: &Ctx, what: &str) -> Check {
    match crate::leader::libexec() {
        Ok(dir) => Check::pass(what, format!("beside lazaret in {}", dir.display())),
        Err(e) => Check::fail(
            what,
            e.to_string(),
            "reinstall Lazaret: scripts/install (or unpack the whole release tarball into one directory)",
        ),
    }
}

// ---------------------------------------------------------------- runsc

fn check_runsc(ctx: &Ctx, what: &str) -> Check {
    match RunscInfo::detect(ctx.runsc_override) {
        Ok(info) => eval_runsc(what, &info),
        Err(e) => Check::fail(what, e.to_string(), e.fix()),
    }
}

/// How to get a newer runsc: on Debian 12, bookworm-backports' package
/// (what `scripts/setup-host` installs).
pub const NEWER_RUNSC: &str = "on Debian 12: echo 'deb http://deb.debian.org/debian bookworm-backports main' | sudo tee /etc/apt/sources.list.d/bookworm-backports.list && sudo apt-get update && sudo apt-get install -y -t bookworm-backports runsc (what scripts/setup-host does); elsewhere: https://gvisor.dev/docs/user_guide/install/";

pub fn eval_runsc(what: &str, info: &RunscInfo) -> Check {
    let detail = runsc_detail(info);
    if !info.flags.contains("ignore-cgroups") {
        return Check::fail(
            what,
            format!("{detail}; it has no --ignore-cgroups flag"),
            NEWER_RUNSC,
        );
    }
    let platform = info.platform();
    if !info.platforms.is_empty() && !info.platforms.iter().any(|p| p == platform) {
        return Check::fail(
            what,
            format!("{detail}; it offers neither ptrace nor systrap"),
            NEWER_RUNSC,
        );
    }
    let gains = runsc_gains(info);
    if gains.is_empty() {
        return Check::pass(what, detail);
    }
    Check::warn(
        what,
        format!(
            "{detail}; a newer runsc (20240729, Debian's bookworm-backports) would add {}: \
             2-9x faster file work on a 10,000-file repository (bench/workloads)",
            gains.join(", ")
        ),
        NEWER_RUNSC,
    )
}

/// The release, the platform, the file access mode and the workarounds in
/// force, as `lazaret run` would use them.
fn runsc_detail(info: &RunscInfo) -> String {
    let offered = if info.platforms.is_empty() {
        "none listed".to_string()
    } else {
        info.platforms.join(", ")
    };
    let files = if info.directfs() {
        "directfs"
    } else {
        "every file through the gofer (no directfs)"
    };
    let mounts = if info.flags.contains("file-access-mounts") {
        ", mounts shared"
    } else {
        ""
    };
    let mut detail = format!(
        "{} version {}, platform {} (offered: {offered}), file access: {files}{mounts}",
        info.path.display(),
        info.version,
        info.platform(),
    );
    if !info.allow_suid() {
        detail.push_str(
            ", set-user-ID programs ignored (no --allow-suid: a profile's `user` has Lazaret's `sudo`, not the image's)",
        );
    }
    let mut workarounds = Vec::new();
    if info.needs_statx_shim() {
        workarounds.push("statx shim (this release rejects AT_NO_AUTOMOUNT)".to_string());
    }
    if info.needs_proc_sys_net_hack() {
        workarounds.push(format!("/proc/sys/net tmpfs ({})", root_ns_reason(info)));
    }
    if !workarounds.is_empty() {
        detail.push_str(&format!(", workarounds: {}", workarounds.join(", ")));
    }
    detail
}

/// Why the root-network-namespace workaround applies.
fn root_ns_reason(info: &RunscInfo) -> &'static str {
    match info.netns_shows_rmem_default {
        Some(true) => "a fresh network namespace here shows net.core.rmem_default, which runsc's root-namespace check takes for the root one",
        _ => "the kernel could not be asked whether runsc's root-namespace check fires",
    }
}

/// What this runsc lacks that a newer one has.
fn runsc_gains(info: &RunscInfo) -> Vec<&'static str> {
    let mut gains = Vec::new();
    if info.platform() != "systrap" {
        gains.push("the systrap platform (ptrace is slower)");
    }
    if !info.directfs() {
        gains.push("directfs (the Sentry opens files itself)");
    }
    if info.needs_statx_shim() {
        gains.push("a statx without the shim");
    }
    gains
}

// ------------------------------------------------- newuidmap / newgidmap

/// The facts about a file that the checks judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// `st_mode`, file type bits included.
    pub mode: u32,
    pub uid: u32,
    /// Whether the file carries file capabilities (`security.capability`),
    /// which some distributions give newuidmap instead of the setuid bit.
    pub file_caps: bool,
}

impl FileStat {
    fn of(path: &Path) -> std::io::Result<FileStat> {
        let m = std::fs::metadata(path)?;
        Ok(FileStat {
            mode: m.mode(),
            uid: m.uid(),
            file_caps: has_file_caps(path),
        })
    }
}

fn has_file_caps(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: both strings are NUL-terminated and live across the call; a
    // NULL buffer of size 0 only asks for the attribute's length.
    let n = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

fn check_newuidmap(_: &Ctx, what: &str) -> Check {
    setuid_tool(what, "newuidmap")
}

fn check_newgidmap(_: &Ctx, what: &str) -> Check {
    setuid_tool(what, "newgidmap")
}

fn setuid_tool(what: &str, name: &str) -> Check {
    let found = find_on_path(name).and_then(|p| FileStat::of(&p).ok().map(|s| (p, s)));
    eval_setuid(what, found.as_ref().map(|(p, s)| (p.as_path(), *s)))
}

pub fn eval_setuid(what: &str, found: Option<(&Path, FileStat)>) -> Check {
    let Some((path, st)) = found else {
        return Check::fail(what, "not found on PATH", "sudo apt-get install uidmap");
    };
    if st.uid == 0 && st.mode & 0o4000 != 0 {
        return Check::pass(what, format!("{}, setuid root", path.display()));
    }
    if st.file_caps {
        return Check::pass(what, format!("{}, file capabilities", path.display()));
    }
    Check::fail(
        what,
        format!(
            "{} is neither setuid root nor has file capabilities (mode {:04o}, owner uid {})",
            path.display(),
            st.mode & 0o7777,
            st.uid
        ),
        format!(
            "sudo chown root:root {p} && sudo chmod 4755 {p}  (or: sudo apt-get install --reinstall uidmap)",
            p = path.display()
        ),
    )
}

// ------------------------------------------------------ user, configuration

/// What to tell root: Lazaret is rootless by design.
pub const AS_ROOT: &str = "Lazaret runs as the ordinary user whose workspace it sandboxes (rootless): run it as that user, without sudo";

fn check_user(ctx: &Ctx, what: &str) -> Check {
    if ctx.euid == 0 {
        return Check::fail(
            what,
            format!("running as root; the checks below are for root, not for you. {AS_ROOT}"),
            "lazaret doctor   # as your own user",
        );
    }
    Check::pass(what, format!("{} (uid {})", ctx.user, ctx.uid))
}

fn check_config(ctx: &Ctx, what: &str) -> Check {
    match &ctx.config_status {
        Ok(Some(path)) => Check::pass(what, format!("{} is valid", lazaret_protocol::display::message(path))),
        Ok(None) => Check::pass(what, "no configuration file: the built-in defaults"),
        Err(e) => Check::fail(
            what,
            lazaret_protocol::display::message(e),
            "correct the file at the line and field named (`lazaret ps` and `stop --all` still work)",
        ),
    }
}

// ------------------------------------------------- subordinate ID ranges

/// IDs a sandbox needs mapped: 1..=65534 (65534 is `nobody`, the Sentry's
/// user).
const SUBID_NEEDED: u32 = 65534;

fn check_subuid(ctx: &Ctx, what: &str) -> Check {
    subid(ctx, what, "/etc/subuid", "uid")
}

fn check_subgid(ctx: &Ctx, what: &str) -> Check {
    subid(ctx, what, "/etc/subgid", "gid")
}

fn subid(ctx: &Ctx, what: &str, file: &str, kind: &str) -> Check {
    if ctx.euid == 0 {
        // Never advise giving root subordinate IDs.
        return Check::fail(
            what,
            format!("not checked for root: {AS_ROOT}"),
            "lazaret doctor   # as your own user",
        );
    }
    let range = userns::subid_range(Path::new(file), &ctx.user, ctx.uid).map_err(|e| e.to_string());
    eval_subid(what, file, kind, &ctx.user, range, free_subid_start_now())
}

use lazaret_helpers::userns::{free_subid_start_now, usermod_fix};

pub fn eval_subid(
    what: &str,
    file: &str,
    kind: &str,
    user: &str,
    range: Result<Option<(u32, u32)>, String>,
    free_start: u32,
) -> Check {
    match range {
        Err(e) => Check::fail(what, e, format!("sudo chmod 0644 {file}")),
        Ok(None) => Check::fail(
            what,
            format!("no range for {user} in {file}"),
            usermod_fix(user, free_start),
        ),
        Ok(Some((start, count))) if count < SUBID_NEEDED => {
            let end = start + count - 1;
            Check::fail(
                what,
                format!(
                    "{user}:{start}:{count} in {file} is too small: a sandbox needs {SUBID_NEEDED} {kind}s (up to nobody=65534)"
                ),
                format!(
                    "sudo usermod --del-sub{kind}s {start}-{end} {user} && {}",
                    usermod_fix(user, free_start)
                ),
            )
        }
        Ok(Some((start, count))) => Check::pass(
            what,
            format!(
                "{user}: {start}-{} in {file}, for the sandbox's {kind}s 1-{count}",
                start + count - 1
            ),
        ),
    }
}

// ------------------------------------------------------ user namespaces

const USERNS_FIX: &str =
    "echo user.max_user_namespaces=15000 | sudo tee /etc/sysctl.d/90-lazaret.conf && sudo sysctl --system";

fn check_userns(ctx: &Ctx, what: &str) -> Check {
    let read = |f: &str| -> Option<u64> { std::fs::read_to_string(f).ok()?.trim().parse().ok() };
    eval_userns(
        what,
        ctx.euid == 0,
        read("/proc/sys/user/max_user_namespaces"),
        read("/proc/sys/kernel/unprivileged_userns_clone"),
        read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        try_unshare_user(),
    )
}

/// Forks a child that creates a user namespace (left unmapped) and exits.
fn try_unshare_user() -> Result<(), Errno> {
    // SAFETY: between fork and _exit the child only makes the raw,
    // async-signal-safe calls unshare and _exit, so forking a possibly
    // multi-threaded process is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Errno::last());
    }
    if pid == 0 {
        // SAFETY: see above; the errno location is thread-local to this,
        // the only thread of the child.
        unsafe {
            let code = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            libc::_exit(code & 0xff)
        }
    }
    loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => return Ok(()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => return Err(Errno::from_raw(code)),
            Ok(_) => return Err(Errno::ECHILD),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn eval_userns(
    what: &str,
    as_root: bool,
    max_user_namespaces: Option<u64>,
    unprivileged_userns_clone: Option<u64>,
    apparmor_restrict: Option<u64>,
    tried: Result<(), Errno>,
) -> Check {
    if max_user_namespaces == Some(0) {
        return Check::fail(what, "user.max_user_namespaces is 0", USERNS_FIX);
    }
    if unprivileged_userns_clone == Some(0) && !as_root {
        return Check::fail(
            what,
            "kernel.unprivileged_userns_clone is 0",
            "echo kernel.unprivileged_userns_clone=1 | sudo tee /etc/sysctl.d/90-lazaret-userns.conf && sudo sysctl --system",
        );
    }
    if let Err(e) = tried {
        return Check::fail(
            what,
            format!("unshare(CLONE_NEWUSER) failed: {}", e.desc()),
            USERNS_FIX,
        );
    }
    if apparmor_restrict == Some(1) && !as_root {
        return Check::fail(
            what,
            "kernel.apparmor_restrict_unprivileged_userns is 1: new user namespaces get no capabilities",
            "echo kernel.apparmor_restrict_unprivileged_userns=0 | sudo tee /etc/sysctl.d/90-lazaret-apparmor.conf && sudo sysctl --system",
        );
    }
    let max = max_user_namespaces.map_or("unknown".to_string(), |m| m.to_string());
    Check::pass(
        what,
        format!("unshare(CLONE_NEWUSER) works, max_user_namespaces {max}"),
    )
}

// ---------------------------------------------- overlayfs in a userns

/// Mounts a small overlay (with `userxattr`) in a fresh mount namespace,
/// writes through it, and removes everything (from inside the namespace,
/// where the overlay's work dir is removable).
const OVERLAY_SCRIPT: &str = r#"set -e
trap 'rc=$?; set +e; umount "$1/merged" 2>/dev/null; cd /; rm -rf "$1"; exit $rc' EXIT
cd "$1"
mkdir lower upper work merged
echo lazaret > lower/probe
mount -t overlay -o "userxattr,lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" lazaret-doctor "$1/merged"
echo write >> "$1/merged/probe"
umount "$1/merged"
test -f "$1/upper/probe"
"#;

fn check_overlay(ctx: &Ctx, what: &str) -> Check {
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) => {
            return Check::fail(
                what,
                format!("not tried, no ID mapping: {e}"),
                usermod_fix(&ctx.user, free_subid_start_now()),
            )
        }
    };
    if find_on_path("unshare").is_none() {
        return Check::fail(
            what,
            "not tried: unshare not found on PATH",
            "sudo apt-get install util-linux",
        );
    }
    let base = match probe_dir() {
        Ok(d) => d,
        Err(e) => {
            return Check::fail(
                what,
                format!("not tried: cannot create a scratch directory: {e}"),
                "set TMPDIR to a writable directory",
            )
        }
    };
    let result = try_overlay(|cmd| userns::run_mapped(&map, cmd), &base);
    // The script removes it; this is for when the script never ran.
    let _ = std::fs::remove_dir_all(&base);
    eval_overlay(what, &base, result)
}

/// A fresh directory on the file system of Lazaret's default storage root
/// (`$XDG_DATA_HOME`, else `~/.local/share`) when that exists, else in
/// the temp dir.
fn probe_dir() -> std::io::Result<PathBuf> {
    let env_dir = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let parent = env_dir("XDG_DATA_HOME")
        .or_else(|| env_dir("HOME").map(|h| h.join(".local/share")))
        .filter(|p| {
            p.is_dir() && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::W_OK).is_ok()
        })
        .unwrap_or_else(std::env::temp_dir);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = parent.join(format!(".lazaret-doctor-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The overlay probe's outcome: Ok, or what went wrong and whether it was
/// the ID mapping (rather than the mount).
pub enum OverlayError {
    Mapping(userns::UsernsError),
    Mount(String),
}

/// Runs the overlay script through `run_mapped` (as ID 0 of a mapped user
/// namespace), with its stderr captured.
fn try_overlay<F>(run_mapped: F, base: &Path) -> Result<(), OverlayError>
where
    F: FnOnce(&mut Command) -> Result<std::process::ExitStatus, userns::UsernsError>,
{
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| OverlayError::Mount(format!("pipe: {e}")))?;
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", OVERLAY_SCRIPT, "lazaret-doctor"])
        .arg(base)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err_w));
    let status = run_mapped(&mut cmd);
    // Close our copy of the pipe's write end, so the read sees EOF.
    drop(cmd);
    let mut stderr = String::new();
    let _ = std::fs::File::from(err_r)
        .take(64 * 1024)
        .read_to_string(&mut stderr);
    match status {
        Err(e) => Err(OverlayError::Mapping(e)),
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(OverlayError::Mount(if stderr.trim().is_empty() {
            format!("the probe failed ({s})")
        } else {
            stderr.trim().replace('\n', "; ")
        })),
    }
}

pub fn eval_overlay(what: &str, base: &Path, result: Result<(), OverlayError>) -> Check {
    let dir = base.parent().unwrap_or(base).display();
    match result {
        Ok(()) => Check::pass(
            what,
            format!("mount -t overlay -o userxattr works (tried in {dir})"),
        ),
        Err(OverlayError::Mapping(e)) => {
            let fix = match &e {
                userns::UsernsError::Map { .. } => "sudo apt-get install uidmap",
                userns::UsernsError::Clone(_) => USERNS_FIX,
                _ => "see the user namespaces check",
            };
            Check::fail(what, format!("cannot enter a mapped user namespace: {e}"), fix)
        }
        Err(OverlayError::Mount(msg)) => Check::fail(
            what,
            format!("overlay mount in {dir} failed: {msg}"),
            "sudo modprobe overlay  (overlayfs in user namespaces needs Linux >= 5.11; tmpfs as upper dir needs >= 6.6)",
        ),
    }
}

// ------------------------------------------------------------ devices

fn check_fuse(ctx: &Ctx, what: &str) -> Check {
    module_device(ctx, what, "/dev/fuse", "fuse")
}

fn check_tun(ctx: &Ctx, what: &str) -> Check {
    module_device(ctx, what, "/dev/net/tun", "tun")
}

/// The device node `path` of the kernel module `module`: fixed with
/// `sudo chmod 0666 PATH`, after loading the module when the node is
/// missing. On machines without udev the mode falls back to 0600 at
/// every boot.
fn module_device(ctx: &Ctx, what: &str, path: &str, module: &str) -> Check {
    let fix_mode = format!("sudo chmod 0666 {path}");
    let fix_missing = format!("sudo modprobe {module} && {fix_mode}");
    rw_device(ctx, what, Path::new(path), &fix_mode, &fix_missing)
}

fn rw_device(ctx: &Ctx, what: &str, path: &Path, fix_mode: &str, fix_missing: &str) -> Check {
    use nix::unistd::AccessFlags;
    let stat = FileStat::of(path);
    let access = nix::unistd::access(path, AccessFlags::R_OK | AccessFlags::W_OK);
    eval_rw_device(
        what,
        path,
        stat,
        access,
        ctx.euid == 0,
        &ctx.user,
        fix_mode,
        fix_missing,
    )
}

/// Judges a device node that the invoking user must open read-write. As
/// root, `access()` always succeeds, so the mode must grant read-write to
/// everyone: Lazaret itself runs as an ordinary user.
#[allow(clippy::too_many_arguments)]
pub fn eval_rw_device(
    what: &str,
    path: &Path,
    stat: std::io::Result<FileStat>,
    access: Result<(), Errno>,
    as_root: bool,
    user: &str,
    fix_mode: &str,
    fix_missing: &str,
) -> Check {
    let p = path.display();
    let st = match stat {
        Ok(st) => st,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::fail(what, format!("{p} does not exist"), fix_missing)
        }
        Err(e) => return Check::fail(what, format!("cannot stat {p}: {e}"), fix_mode),
    };
    if st.mode & libc::S_IFMT != libc::S_IFCHR {
        return Check::fail(what, format!("{p} is not a character device"), fix_missing);
    }
    let mode = st.mode & 0o7777;
    if as_root {
        if st.mode & 0o006 == 0o006 {
            return Check::pass(
                what,
                format!("{p} mode {mode:04o}, read-write for all users"),
            );
        }
        return Check::fail(
            what,
            format!("{p} mode {mode:04o}: ordinary users cannot open it read-write"),
            fix_mode,
        );
    }
    match access {
        Ok(()) => Check::pass(what, format!("{p} mode {mode:04o}, read-write for {user}")),
        Err(e) => Check::fail(
            what,
            format!(
                "{p} mode {mode:04o}: not read-write for {user} ({})",
                e.desc()
            ),
            fix_mode,
        ),
    }
}

// ---------------------------------------------------------- programs

fn check_slirp4netns(_: &Ctx, what: &str) -> Check {
    eval_program(
        what,
        find_on_path("slirp4netns").as_deref(),
        "sudo apt-get install slirp4netns",
    )
}

fn check_mmdebstrap(_: &Ctx, what: &str) -> Check {
    eval_program(
        what,
        find_on_path("mmdebstrap").as_deref(),
        "sudo apt-get install mmdebstrap",
    )
}

pub fn eval_program(what: &str, found: Option<&Path>, fix: &str) -> Check {
    match found {
        Some(p) => Check::pass(what, p.display().to_string()),
        None => Check::fail(what, "not found on PATH", fix),
    }
}

// ------------------------------------------------------------ landlock

fn check_landlock(_: &Ctx, what: &str) -> Check {
    match Available::detect() {
        Ok(a) => eval_landlock(what, &a),
        Err(e) => Check::fail(what, e.to_string(), format!("unset {TEST_CAP_ENV}")),
    }
}

/// What of the helpers' Landlock rules a kernel with `a` enforces: each
/// helper uses every feature the ABI offers ([`lazaret_seccomp::abi`]);
/// what it lacks is named, with whether seccomp covers it. No Landlock at
/// all fails: the helpers refuse to run unconfined.
pub fn eval_landlock(what: &str, a: &Available) -> Check {
    if let Some(why) = a.missing() {
        let fix = match a.kernel {
            _ if a.kernel.abi() >= 1 => format!("unset {TEST_CAP_ENV} (a test-only setting)"),
            Kernel::Disabled => "add landlock to the lsm= kernel parameter (e.g. in GRUB_CMDLINE_LINUX), then `sudo update-grub` and reboot".into(),
            _ => "boot a kernel with CONFIG_SECURITY_LANDLOCK=y (Linux 5.13 or later; 6.12 or later for all of Lazaret's rules)".into(),
        };
        return Check::fail(
            what,
            format!("{why}; Lazaret's helpers refuse to run without Landlock"),
            fix,
        );
    }
    let confs = lazaret_seccomp::suite::landlocked();
    let mut lost = Vec::new();
    for f in Feature::ALL.into_iter().filter(|f| !a.has(*f)) {
        let users: Vec<_> = confs
            .iter()
            .filter(|c| {
                c.landlock
                    .as_ref()
                    .is_some_and(|l| l.features().contains(&f))
            })
            .collect();
        if users.is_empty() {
            continue;
        }
        let names = |v: Vec<&str>| v.join(", ");
        let uncovered: Vec<&str> = users
            .iter()
            .filter(|c| c.below(f).is_err())
            .map(|c| c.binary)
            .collect();
        lost.push(match f {
            Feature::Refer => format!(
                "{} unavailable (needs ABI 2), so refused in {}",
                f.name(),
                names(users.iter().map(|c| c.binary).collect())
            ),
            _ if uncovered.is_empty() => format!(
                "{} not enforced (needs ABI {}; seccomp covers it in every helper)",
                f.name(),
                f.abi()
            ),
            _ => format!(
                "{} not enforced (needs ABI {}; not fully covered by seccomp in {})",
                f.name(),
                f.abi(),
                names(uncovered)
            ),
        });
    }
    if lost.is_empty() {
        return Check::pass(
            what,
            format!("{a}: every helper's Landlock rules are enforced"),
        );
    }
    Check::warn(
        what,
        format!("{a}: the helpers use what it offers; {}", lost.join("; ")),
        "for all of it, boot Linux 6.12 or later (Landlock ABI 6); `lazaret-HELPER --print-confinement` says what each helper enforces on this kernel and why the rest is acceptable",
    )
}

// -------------------------------------------------- descriptor limits

/// The most files the mount router keeps open (`lazaret-mount-router
/// --max-open`, its `DEFAULT_MAX_OPEN`), plus the descriptors it keeps for
/// itself (its `RESERVED_FDS`): the documented bound of the router's
/// descriptors, which its (raised) soft limit must reach. Keep in step
/// with `bin/mount-router/src/router.rs`.
pub const ROUTER_MAX_OPEN: u64 = 4096;
pub const ROUTER_RESERVED_FDS: u64 = 64;
pub const NOFILE_NEEDED: u64 = ROUTER_MAX_OPEN + ROUTER_RESERVED_FDS;

fn check_nofile(ctx: &Ctx, what: &str) -> Check {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    eval_nofile(what, &ctx.user, lim.current, lim.maximum)
}

/// Judges this process's `RLIMIT_NOFILE` (`None`: unlimited). Every
/// long-lived Lazaret process raises its soft limit to the hard one at
/// start, so the hard limit is what counts.
pub fn eval_nofile(what: &str, user: &str, soft: Option<u64>, hard: Option<u64>) -> Check {
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let detail = format!(
        "soft {}, hard {}; Lazaret raises the soft limit to the hard one, and the mount router needs up to {NOFILE_NEEDED} ({ROUTER_MAX_OPEN} open files + {ROUTER_RESERVED_FDS})",
        show(soft),
        show(hard)
    );
    match hard {
        Some(h) if h < NOFILE_NEEDED => Check::warn(
            what,
            format!("{detail}: the hard limit is too low, so files opened inside beyond about {} fail with EMFILE", h.saturating_sub(ROUTER_RESERVED_FDS)),
            format!("echo '{user} hard nofile 65536' | sudo tee /etc/security/limits.d/90-lazaret.conf, then log in again (systemd services: LimitNOFILE=65536)"),
        ),
        _ => Check::pass(what, detail),
    }
}

// ------------------------------------------------ sandbox resource limits

/// What enforces each key of `[profiles.NAME.limits]` on this machine,
/// without root. These hold wherever Lazaret runs at all (a user
/// namespace and runsc): host rlimits on the gVisor Sentry, gVisor's own
/// `RLIMIT_NPROC`, the mount router's count.
fn check_sandbox_limits(_: &Ctx, what: &str) -> Check {
    eval_sandbox_limits(what)
}

pub fn eval_sandbox_limits(what: &str) -> Check {
    Check::pass(
        what,
        "limits.memory: RLIMIT_FSIZE and RLIMIT_DATA on the gVisor Sentry bound its memory file (processes, /tmp, /dev/shm, page cache; in whole GiB) and its own heap (RLIMIT_FSIZE also caps the data written into each file inside); \
         limits.processes: RLIMIT_NPROC, enforced by gVisor per user ID inside the sandbox; \
         limits.ignored_state_size: ENOSPC from the mount router; \
         limits.anchor_size: the disk each upper takes (allocated bytes; holes count nothing), checked before each start and shown by `lazaret state list`",
    )
}

/// A cgroup v2 directory the user may write: this process's own cgroup
/// under a `cgroup2` mount, with a writable `cgroup.procs`.
fn check_cgroup_delegation(ctx: &Ctx, what: &str) -> Check {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = delegated_cgroup(&own, &mounts).filter(|d| {
        rustix::fs::access(d.join("cgroup.procs"), rustix::fs::Access::WRITE_OK).is_ok()
    });
    eval_cgroup_delegation(what, &ctx.user, dir.as_deref())
}

/// The directory of this process's cgroup v2 (`0::/PATH` in
/// `/proc/self/cgroup`) under the first `cgroup2` mount of `mountinfo`.
pub fn delegated_cgroup(proc_self_cgroup: &str, mountinfo: &str) -> Option<PathBuf> {
    let rel = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim_start_matches('/');
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })?;
    Some(mount.join(rel))
}

/// Says plainly what nothing bounds on this machine. Lazaret does not use
/// a delegated cgroup yet, so the same holds with one; the check says so.
pub fn eval_cgroup_delegation(what: &str, user: &str, delegated: Option<&Path>) -> Check {
    let unbounded = "not bounded for a sandbox: its CPU time and disk I/O; the total of processes over all user IDs inside (limits.processes is per user ID; limits.memory holds the total); \
         disk written to a State Anchor upper during a session (limits.anchor_size is checked at start) and to the sandbox root outside the anchors (discarded at stop)";
    match delegated {
        Some(d) => Check::warn(
            what,
            format!("{user} may write the cgroup {}, which Lazaret does not use yet: {unbounded}", d.display()),
            "none needed to run; keep the default limits, or lower them in [profiles.NAME.limits]",
        ),
        None => Check::warn(
            what,
            format!("no cgroup is delegated to {user} (cgroup v1, or cgroup v2 not writable), and runsc needs --ignore-cgroups: {unbounded}"),
            "none without root (an administrator can delegate a cgroup v2 subtree, e.g. systemd user@.service with Delegate=yes); keep the default limits, or lower them in [profiles.NAME.limits]",
        ),
    }
}

// --------------------------------------------- host Git: bare repositories

/// Host Git's `safe.bareRepository`, from the files where Git honours it
/// (system and global configuration, never a repository's own). Read by
/// parsing, so doctor runs no `git` in a directory the sandbox may have
/// written.
fn check_git_bare_repository(_: &Ctx, what: &str) -> Check {
    if find_on_path("git").is_none() {
        return eval_git_bare_repository(what, false, Ok(None));
    }
    eval_git_bare_repository(what, true, read_safe_bare_repository())
}

/// `safe.bareRepository` as host Git sees it outside any repository: the
/// system and global files in Git's order (the global one wins), includes
/// followed.
fn read_safe_bare_repository() -> Result<Option<String>, String> {
    let lookup = lazaret_gitconfig::Lookup {
        env: &lazaret_gitconfig::process_env,
    };
    let config = lookup.load(None).map_err(|e| e.to_string())?;
    Ok(config.string("safe.bareRepository").map(|v| v.to_string()))
}

pub const BARE_REPOSITORY_FIX: &str = "git config --global safe.bareRepository explicit";

pub fn eval_git_bare_repository(
    what: &str,
    git_installed: bool,
    value: Result<Option<String>, String>,
) -> Check {
    if !git_installed {
        return Check::pass(what, "host git is not installed: nothing can run there");
    }
    let why = "the sandbox can write a directory that looks like a bare repository anywhere in the workspace (a HEAD, objects/, refs/ and a config naming core.fsmonitor or hooks); host Git run there, by you or your editor, treats it as a repository and runs what its config names. With `explicit`, Git opens a bare repository only when told to (--git-dir or GIT_DIR)";
    match value {
        Ok(Some(v)) if v.eq_ignore_ascii_case("explicit") => Check::pass(
            what,
            "explicit: host Git opens no bare repository it discovers in the workspace",
        ),
        Ok(Some(v)) => Check::warn(
            what,
            format!("is `{v}`, not `explicit`: {why}"),
            BARE_REPOSITORY_FIX,
        ),
        Ok(None) => Check::warn(
            what,
            format!("not set (Git's default is `all`): {why}"),
            BARE_REPOSITORY_FIX,
        ),
        Err(e) => Check::warn(what, format!("{e}: {why}"), BARE_REPOSITORY_FIX),
    }
}

// ------------------------------------------- what the configuration hands over

/// Every auto-approval rule of the configuration that takes trailing
/// arguments, with its profile and number.
fn check_trailing_rules(ctx: &Ctx, what: &str) -> Check {
    let rules: Vec<(&str, usize, &lazaret_config::AutoApprove)> = ctx
        .config
        .iter()
        .flat_map(|c| &c.profiles)
        .flat_map(|(name, p)| {
            p.escalation
                .auto_approve
                .iter()
                .enumerate()
                .filter(|(_, r)| r.trailing_args)
                .map(move |(i, r)| (name.as_str(), i + 1, r))
        })
        .collect();
    eval_trailing_rules(what, &rules)
}

pub const TRAILING_FIX: &str = "list complete vectors with trailing_args = false, or keep the program one whose plain arguments cannot name a command";

/// What a rule with trailing arguments hands over: the sandbox picks
/// every further argument, and the program runs with them unasked.
pub fn eval_trailing_rules(
    what: &str,
    rules: &[(&str, usize, &lazaret_config::AutoApprove)],
) -> Check {
    if rules.is_empty() {
        return Check::pass(
            what,
            "none: every auto-approved command is a complete vector",
        );
    }
    let listed: Vec<String> = rules
        .iter()
        .map(|(profile, n, r)| {
            let options = if r.trailing_options.is_empty() {
                "none".to_string()
            } else {
                r.trailing_options.join(" ")
            };
            format!(
                "profile {profile} rule {n} `{} ...` (options it may add: {options})",
                lazaret_protocol::display::message(&r.argv.join(" "))
            )
        })
        .collect();
    Check::warn(
        what,
        format!(
            "{}: the sandbox chooses every further argument (which remote, path, branch or target) and the command runs on the host without asking; an option it adds (an argument starting with -, + or @, or holding =) goes to the prompt unless the rule lists it in trailing_options, but a program that runs what its plain arguments or the workspace's files name (sh -c, make with a Makefile the sandbox wrote, a test runner) still runs what the sandbox chose",
            listed.join("; ")
        ),
        TRAILING_FIX,
    )
}

/// Every writable volume of the configuration bound directly.
fn check_direct_volumes(ctx: &Ctx, what: &str) -> Check {
    let direct: Vec<(String, String)> = ctx
        .config
        .iter()
        .flat_map(|c| &c.profiles)
        .flat_map(|(name, p)| {
            p.volumes
                .iter()
                .filter(|v| !v.read_only && !v.git_sentry)
                .map(move |v| (name.clone(), v.host.display().to_string()))
        })
        .collect();
    eval_direct_volumes(what, &direct)
}

pub fn eval_direct_volumes(what: &str, direct: &[(String, String)]) -> Check {
    if direct.is_empty() {
        return Check::pass(
            what,
            "none: Git Sentry covers every Git directory in a writable volume",
        );
    }
    let listed: Vec<String> = direct
        .iter()
        .map(|(p, h)| {
            format!(
                "profile {p} volume {}",
                lazaret_protocol::display::message(h)
            )
        })
        .collect();
    Check::warn(
        what,
        format!(
            "{} (git_sentry = false): host Git in a repository there runs what the sandbox writes (its configuration, hooks, a repository it makes)",
            listed.join(", ")
        ),
        "remove git_sentry = false (the volume is then served through a mount router with Git Sentry), or make it read_only = true",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_helpers::userns::free_subid_start;
    use std::collections::BTreeSet;

    fn chr(mode: u32) -> FileStat {
        FileStat {
            mode: libc::S_IFCHR | mode,
            uid: 0,
            file_caps: false,
        }
    }

    #[test]
    fn formats_lines() {
        let ok = Check::pass("landlock", "ABI 7");
        assert_eq!(ok.to_string(), "ok   landlock: ABI 7");
        let bad = Check::fail("/dev/fuse", "missing", "sudo chmod 0666 /dev/fuse");
        assert_eq!(
            bad.to_string(),
            "FAIL /dev/fuse: missing — fix: sudo chmod 0666 /dev/fuse"
        );
        assert_eq!(Check::fail("x", "broken", "").to_string(), "FAIL x: broken");
        assert_eq!(exit_code(std::slice::from_ref(&ok)), 0);
        assert_eq!(exit_code(&[ok, bad]), 1);
        assert_eq!(exit_code(&[]), 0);
    }

    #[test]
    fn json_has_every_check_with_status_and_fix() {
        let checks = [
            Check::pass("landlock", "ABI 7"),
            Check::warn(
                "git",
                "unset",
                "git config --global safe.bareRepository explicit",
            ),
            Check::fail("/dev/fuse", "missing \u{1b}", "sudo chmod 0666 /dev/fuse"),
        ];
        let text = to_json(&checks, exit_code(&checks));
        assert!(text.is_ascii(), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["exit_code"], 1);
        let c = v["checks"].as_array().unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0]["status"], "ok");
        assert_eq!(c[0]["fix"], serde_json::Value::Null);
        assert_eq!(c[1]["status"], "warn");
        assert_eq!(c[2]["status"], "fail");
        assert_eq!(c[2]["check"], "/dev/fuse");
        assert_eq!(c[2]["detail"], "missing \u{1b}");
        assert_eq!(c[2]["fix"], "sudo chmod 0666 /dev/fuse");
    }

    #[test]
    fn rules_with_trailing_arguments_say_what_they_hand_over() {
        assert!(!eval_trailing_rules("t", &[]).warn);
        let rule = lazaret_config::AutoApprove {
            argv: vec!["git".into(), "fetch".into()],
            trailing_args: true,
            trailing_options: vec!["--prune".into()],
        };
        let c = eval_trailing_rules("t", &[("default", 2, &rule)]);
        assert!(c.warn && c.ok, "{c}");
        for word in [
            "profile default rule 2 `git fetch ...` (options it may add: --prune)",
            "without asking",
            "goes to the prompt",
            "make with a Makefile",
        ] {
            assert!(c.detail.contains(word), "{word}: {c}");
        }
        assert!(!eval_direct_volumes("v", &[]).warn);
        let c = eval_direct_volumes("v", &[("p".into(), "/srv/x".into())]);
        assert!(
            c.warn && c.detail.contains("profile p volume /srv/x"),
            "{c}"
        );
    }

    #[test]
    fn the_table_has_every_check_once() {
        let names: BTreeSet<_> = CHECKS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), CHECKS.len());
        assert_eq!(CHECKS.len(), 21);
    }

    #[test]
    fn judges_devices() {
        let p = Path::new("/dev/fuse");
        let fix = "sudo chmod 0666 /dev/fuse";
        let missing = "sudo modprobe fuse && sudo chmod 0666 /dev/fuse";
        let c = eval_rw_device("f", p, Ok(chr(0o666)), Ok(()), false, "dev", fix, missing);
        assert!(c.ok, "{c}");
        assert_eq!(c.detail, "/dev/fuse mode 0666, read-write for dev");
        let c = eval_rw_device(
            "f",
            p,
            Ok(chr(0o600)),
            Err(Errno::EACCES),
            false,
            "dev",
            fix,
            missing,
        );
        assert!(!c.ok);
        assert_eq!(c.fix, fix);
        assert!(c.detail.contains("0600"), "{c}");
        // As root access() passes anyway: the mode must be world rw.
        let c = eval_rw_device("f", p, Ok(chr(0o600)), Ok(()), true, "root", fix, missing);
        assert!(!c.ok, "{c}");
        let c = eval_rw_device("f", p, Ok(chr(0o666)), Ok(()), true, "root", fix, missing);
        assert!(c.ok, "{c}");
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        let c = eval_rw_device(
            "f",
            p,
            Err(gone),
            Err(Errno::ENOENT),
            false,
            "dev",
            fix,
            missing,
        );
        assert!(!c.ok);
        assert_eq!(c.fix, missing);
        let file = FileStat {
            mode: libc::S_IFREG | 0o666,
            uid: 0,
            file_caps: false,
        };
        let c = eval_rw_device("f", p, Ok(file), Ok(()), false, "dev", fix, missing);
        assert!(c.detail.contains("not a character device"), "{c}");
    }

    #[test]
    fn judges_real_device_nodes() {
        // /dev/null is a 0666 character device everywhere.
        let ctx = Ctx::current(None, None, Ok(None));
        let c = rw_device(&ctx, "null", Path::new("/dev/null"), "fix", "missing");
        assert!(c.ok, "{c}");
        let c = rw_device(
            &ctx,
            "nope",
            Path::new("/dev/lazaret-nope"),
            "fix",
            "missing",
        );
        assert_eq!(c.fix, "missing");
    }

    #[test]
    fn a_missing_module_device_is_fixed_by_loading_the_module() {
        let ctx = Ctx::current(None, None, Ok(None));
        let c = module_device(&ctx, "nope", "/dev/lazaret-nope", "nope");
        assert_eq!(
            c.fix,
            "sudo modprobe nope && sudo chmod 0666 /dev/lazaret-nope"
        );
    }

    #[test]
    fn judges_setuid_helpers() {
        let p = Path::new("/usr/bin/newuidmap");
        let suid = FileStat {
            mode: libc::S_IFREG | 0o4755,
            uid: 0,
            file_caps: false,
        };
        assert!(eval_setuid("n", Some((p, suid))).ok);
        let plain = FileStat {
            mode: libc::S_IFREG | 0o755,
            ..suid
        };
        let c = eval_setuid("n", Some((p, plain)));
        assert!(!c.ok && c.detail.contains("0755"), "{c}");
        assert!(
            eval_setuid(
                "n",
                Some((
                    p,
                    FileStat {
                        file_caps: true,
                        ..plain
                    }
                ))
            )
            .ok
        );
        let not_root = FileStat { uid: 1000, ..suid };
        assert!(!eval_setuid("n", Some((p, not_root))).ok);
        let c = eval_setuid("n", None);
        assert_eq!(c.fix, "sudo apt-get install uidmap");
    }

    #[test]
    fn judges_subid_ranges() {
        let c = eval_subid(
            "s",
            "/etc/subuid",
            "uid",
            "dev",
            Ok(Some((100000, 65535))),
            165536,
        );
        assert!(c.ok, "{c}");
        assert_eq!(
            c.detail,
            "dev: 100000-165534 in /etc/subuid, for the sandbox's uids 1-65535"
        );
        let c = eval_subid("s", "/etc/subuid", "uid", "alice", Ok(None), 165536);
        assert!(!c.ok);
        assert_eq!(
            c.fix,
            "sudo usermod --add-subuids 165536-231071 --add-subgids 165536-231071 alice"
        );
        let c = eval_subid(
            "s",
            "/etc/subgid",
            "gid",
            "bob",
            Ok(Some((300000, 10))),
            165536,
        );
        assert!(!c.ok);
        assert!(
            c.fix
                .starts_with("sudo usermod --del-subgids 300000-300009 bob && "),
            "{c}"
        );
    }

    #[test]
    fn finds_a_free_subid_start() {
        assert_eq!(free_subid_start(&["", ""]), 100000);
        assert_eq!(
            free_subid_start(&[
                "dev:100000:65536\n#x\nbad\n",
                "dev:100000:65536\nops:200000:10\n"
            ]),
            200010
        );
    }

    #[test]
    fn judges_user_namespaces() {
        assert!(eval_userns("u", false, Some(96364), None, None, Ok(())).ok);
        let c = eval_userns("u", false, Some(0), None, None, Err(Errno::ENOSPC));
        assert!(!c.ok && c.fix.contains("max_user_namespaces"), "{c}");
        let c = eval_userns("u", false, Some(10), Some(0), None, Err(Errno::EPERM));
        assert!(
            !c.ok && c.fix.contains("unprivileged_userns_clone=1"),
            "{c}"
        );
        let c = eval_userns("u", false, Some(10), None, None, Err(Errno::EPERM));
        assert!(!c.ok && c.detail.contains("not permitted"), "{c}");
        let c = eval_userns("u", false, Some(10), None, Some(1), Ok(()));
        assert!(!c.ok && c.fix.contains("apparmor"), "{c}");
        assert!(eval_userns("u", true, Some(10), None, Some(1), Ok(())).ok);
    }

    #[test]
    fn judges_landlock_and_programs() {
        let at = |k, cap| Available {
            kernel: Kernel::Abi(k),
            cap,
        };
        let new = eval_landlock("l", &at(7, None));
        assert!(new.ok && !new.warn, "{new}");
        assert!(new.detail.starts_with("Landlock ABI 7: every"), "{new}");
        // Debian 12's 6.1: ABI 2. The helpers run; the report names what
        // is lost and where seccomp does not cover it.
        let old = eval_landlock("l", &at(2, None));
        assert!(old.ok && old.warn, "{old}");
        assert!(old.detail.contains("truncate restriction not enforced (needs ABI 3; seccomp covers it in every helper)"), "{old}");
        assert!(old.detail.contains("(TCP) not enforced (needs ABI 4; not fully covered by seccomp in lazaret-netpolicy)"), "{old}");
        assert!(old.detail.contains("scoping not enforced (needs ABI 6; not fully covered by seccomp in lazaret-mount-router, lazaret-supervisor-scan)"), "{old}");
        assert!(!old.detail.contains("refer"), "{old}");
        let one = eval_landlock("l", &at(7, Some(1)));
        assert!(one.warn && one.detail.contains("capped"), "{one}");
        assert!(one.detail.contains("(refer) unavailable (needs ABI 2), so refused in lazaret-coordinator, lazaret-mount-router"), "{one}");
        let none = eval_landlock("l", &at(7, Some(0)));
        assert!(!none.ok && none.fix.contains(TEST_CAP_ENV), "{none}");
        let off = Available {
            kernel: Kernel::Disabled,
            cap: None,
        };
        assert!(eval_landlock("l", &off).fix.contains("lsm="));
        let missing = Available {
            kernel: Kernel::Missing,
            cap: None,
        };
        assert!(!eval_landlock("l", &missing).ok);
        assert!(eval_program("m", Some(Path::new("/usr/bin/mmdebstrap")), "x").ok);
        assert_eq!(
            eval_program("m", None, "sudo apt-get install mmdebstrap").to_string(),
            "FAIL m: not found on PATH — fix: sudo apt-get install mmdebstrap"
        );
    }

    #[test]
    fn judges_runsc() {
        let mut info = RunscInfo {
            path: "/usr/bin/runsc".into(),
            version: "0.0~20221219.0".into(),
            release_date: Some(20221219),
            platforms: vec!["kvm".into(), "ptrace".into()],
            flags: ["ignore-cgroups", "overlay2", "file-access-mounts"]
                .map(String::from)
                .into(),
            netns_shows_rmem_default: Some(true),
        };
        let c = eval_runsc("runsc", &info);
        assert!(c.ok && c.warn, "{c}");
        assert_eq!(
            c.detail,
            "/usr/bin/runsc version 0.0~20221219.0, platform ptrace (offered: kvm, ptrace), \
             file access: every file through the gofer (no directfs), mounts shared, \
             set-user-ID programs ignored (no --allow-suid: a profile's `user` has Lazaret's `sudo`, not the image's), \
             workarounds: statx shim (this release rejects AT_NO_AUTOMOUNT), /proc/sys/net tmpfs \
             (a fresh network namespace here shows net.core.rmem_default, which runsc's root-namespace \
             check takes for the root one); a newer runsc (20240729, Debian's bookworm-backports) would add \
             the systrap platform (ptrace is slower), directfs (the Sentry opens files itself), \
             a statx without the shim: 2-9x faster file work on a 10,000-file repository (bench/workloads)"
        );
        assert!(c.fix.contains("-t bookworm-backports runsc"), "{c}");
        // On a kernel whose fresh network namespaces hide the file, no
        // tmpfs; unprobed, the tmpfs, saying why.
        info.netns_shows_rmem_default = Some(false);
        assert!(!eval_runsc("runsc", &info).detail.contains("/proc/sys/net"));
        info.netns_shows_rmem_default = None;
        assert!(eval_runsc("runsc", &info)
            .detail
            .contains("/proc/sys/net tmpfs (the kernel could not be asked"));

        // bookworm-backports' release: nothing to gain, so it passes.
        let new = RunscInfo {
            path: "/usr/bin/runsc".into(),
            version: "0.0~20240729.0".into(),
            release_date: Some(20240729),
            platforms: vec!["systrap".into(), "ptrace".into(), "kvm".into()],
            flags: [
                "ignore-cgroups",
                "overlay2",
                "file-access-mounts",
                "directfs",
            ]
            .map(String::from)
            .into(),
            netns_shows_rmem_default: Some(true),
        };
        let c = eval_runsc("runsc", &new);
        assert!(c.ok && !c.warn, "{c}");
        assert_eq!(
            c.detail,
            "/usr/bin/runsc version 0.0~20240729.0, platform systrap (offered: systrap, ptrace, kvm), \
             file access: directfs, mounts shared, set-user-ID programs ignored (no --allow-suid: \
             a profile's `user` has Lazaret's `sudo`, not the image's), workarounds: /proc/sys/net tmpfs \
             (a fresh network namespace here shows net.core.rmem_default, which runsc's root-namespace \
             check takes for the root one)"
        );

        info.platforms = vec!["kvm".into()];
        assert!(!eval_runsc("runsc", &info).ok);
        info.platforms = vec!["ptrace".into()];
        info.flags.clear();
        assert!(!eval_runsc("runsc", &info).ok);
    }

    #[test]
    fn overlay_probe_reports_the_scripts_stderr() {
        if find_on_path("unshare").is_none() {
            return;
        }
        // Run without a user namespace, on a directory that does not
        // exist: the script (or unshare, if unprivileged) fails and says
        // why on stderr.
        let r = try_overlay(
            |cmd| cmd.status().map_err(userns::UsernsError::Io),
            Path::new("/nonexistent/lazaret-doctor"),
        );
        match r {
            Err(OverlayError::Mount(msg)) => {
                assert!(!msg.is_empty() && !msg.contains("exit status"), "{msg}")
            }
            _ => panic!("expected a mount failure"),
        }
    }

    #[test]
    fn overlay_failures_name_their_fix() {
        let base = Path::new("/tmp/.lazaret-doctor-1-2");
        assert!(eval_overlay("o", base, Ok(())).detail.contains("/tmp"));
        let c = eval_overlay(
            "o",
            base,
            Err(OverlayError::Mount("mount: permission denied".into())),
        );
        assert!(!c.ok && c.fix.contains("modprobe overlay"), "{c}");
        let c = eval_overlay(
            "o",
            base,
            Err(OverlayError::Mapping(userns::UsernsError::Map {
                tool: "newuidmap",
                pid: 1,
                detail: "x".into(),
            })),
        );
        assert_eq!(c.fix, "sudo apt-get install uidmap");
    }
    #[test]
    fn only_the_status_word_is_coloured() {
        let c = Check::fail("x", "detail \x1b[31m", "do y");
        assert_eq!(c.line(false), c.to_string());
        assert_eq!(c.line(false), "FAIL x: detail \x1b[31m — fix: do y");
        assert_eq!(
            c.line(true),
            "\x1b[1;31mFAIL\x1b[0m x: detail \x1b[31m — fix: do y"
        );
        let ok = Check::pass("x", "fine");
        assert_eq!(ok.line(false), "ok   x: fine");
        assert_eq!(ok.line(true), "\x1b[32mok\x1b[0m   x: fine");
        let w = Check::warn("x", "hmm", "z");
        assert_eq!(w.line(true), "\x1b[33mWARN\x1b[0m x: hmm — fix: z");
    }

    #[test]
    fn warnings_do_not_fail() {
        let w = Check::warn("x", "weak", "do y");
        assert_eq!(w.to_string(), "WARN x: weak — fix: do y");
        assert_eq!(exit_code(&[w]), 0);
    }

    #[test]
    fn nofile_hard_limit_against_the_router_bound() {
        let c = eval_nofile("nofile", "dev", Some(1024), Some(524288));
        assert!(c.ok && !c.warn, "{c}");
        assert!(c.detail.contains("soft 1024, hard 524288"), "{c}");
        assert!(c.detail.contains(&NOFILE_NEEDED.to_string()));
        let c = eval_nofile("nofile", "dev", Some(1024), None);
        assert!(!c.warn && c.detail.contains("hard unlimited"), "{c}");
        let c = eval_nofile("nofile", "dev", Some(1024), Some(4096));
        assert!(c.warn, "{c}");
        assert!(
            c.detail.contains("too low") && c.fix.contains("dev hard nofile"),
            "{c}"
        );
        assert!(eval_nofile("n", "dev", Some(10), Some(NOFILE_NEEDED)).ok);
        assert!(!eval_nofile("n", "dev", Some(10), Some(NOFILE_NEEDED)).warn);
    }

    #[test]
    fn safe_bare_repository_not_explicit_warns_and_says_why() {
        let ok = eval_git_bare_repository("g", true, Ok(Some("Explicit".into())));
        assert!(ok.ok && !ok.warn, "{ok}");
        for v in [
            Ok(None),
            Ok(Some("all".to_string())),
            Err("cannot read".to_string()),
        ] {
            let c = eval_git_bare_repository("g", true, v);
            assert!(c.ok && c.warn, "{c}");
            assert!(
                c.detail.contains("bare repository") && c.detail.contains("runs"),
                "{c}"
            );
            assert_eq!(c.fix, BARE_REPOSITORY_FIX);
        }
        assert!(!eval_git_bare_repository("g", false, Ok(None)).warn);
    }

    #[test]
    fn delegated_cgroup_is_found_under_the_cgroup2_mount() {
        let mountinfo = "30 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                         31 25 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert_eq!(
            delegated_cgroup("8:pids:/\n0::/user.slice/u.service\n", mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice/u.service"))
        );
        assert_eq!(delegated_cgroup("8:pids:/\n", mountinfo), None);
        assert_eq!(delegated_cgroup("0::/\n", ""), None);
    }

    #[test]
    fn cgroup_check_says_what_is_not_bounded() {
        for c in [
            eval_cgroup_delegation("cgroup delegation", "dev", None),
            eval_cgroup_delegation(
                "cgroup delegation",
                "dev",
                Some(Path::new("/sys/fs/cgroup/x")),
            ),
        ] {
            assert!(c.ok && c.warn, "{c}");
            assert!(
                c.detail.contains("CPU time") && c.detail.contains("per user ID"),
                "{c}"
            );
        }
        let c = eval_sandbox_limits("sandbox resource limits");
        assert!(c.ok && !c.warn);
        for key in [
            "limits.memory",
            "limits.processes",
            "limits.ignored_state_size",
            "limits.anchor_size",
        ] {
            assert!(c.detail.contains(key), "{key}: {c}");
        }
    }
}
