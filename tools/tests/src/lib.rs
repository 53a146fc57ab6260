//! End-to-end test support: every test here starts the real `lazaret`
//! binaries, which start a real `runsc`, as an unprivileged user.
//!
//! When the tests run as root (as in CI), `lazaret` runs as the user named
//! by `LAZARET_TEST_USER` (default `lazaret-e2e`), which `.ci/run` creates
//! with subordinate ID ranges. Run as an ordinary user, the tests run
//! `lazaret` as that user.
//!
//! A test whose prerequisites are missing prints `skipping: <reason>` and
//! passes, unless `LAZARET_TESTS_MUST_RUN=1`, which turns the skip into a
//! failure (CI sets it).

pub mod pty;

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The soft `RLIMIT_NOFILE` of a new user on Debian, which every command
/// run as the test user gets.
pub const NEW_USER_NOFILE: u64 = 1024;

pub const BINARIES: &[&str] = &[
    "lazaret",
    "lazaret-mount-router",
    "lazaret-escalate",
    "lazaret-coordinator",
    "lazaret-supervisor",
    "lazaret-exec-bridge",
    "lazaret-netpolicy",
    "lazaret-dns-filter",
    "lazaret-mailbox",
];

/// Returns `Some(env)` when the end-to-end prerequisites hold; otherwise
/// prints `skipping: <reason>` (or panics under `LAZARET_TESTS_MUST_RUN=1`)
/// and returns `None`.
pub fn env() -> Option<&'static TestEnv> {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    match ENV.get_or_init(TestEnv::probe) {
        Ok(e) => Some(e),
        Err(reason) => {
            skip(reason);
            None
        }
    }
}

/// Says the calling test skips, `skipping: <reason>`, or panics under
/// `LAZARET_TESTS_MUST_RUN=1`, where nothing may skip.
pub fn skip(reason: &str) {
    if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
        panic!("LAZARET_TESTS_MUST_RUN=1 but the test would skip: {reason}");
    }
    eprintln!("skipping: {reason}");
}

/// Skips the calling test (see [`env`]) when the prerequisites are missing.
#[macro_export]
macro_rules! require_env {
    () => {
        match $crate::env() {
            Some(e) => e,
            None => return,
        }
    };
}

pub struct TestEnv {
    /// Directory holding copies of the binaries, readable by the user.
    pub bin: PathBuf,
    /// The runsc every test runs Lazaret with: `LAZARET_TEST_RUNSC` (put
    /// first on the test user's `PATH` as `runsc`), else runsc on `PATH`.
    pub runsc: PathBuf,
    /// The directory holding that `runsc`, first on the test user's
    /// `PATH`, when `LAZARET_TEST_RUNSC` chose it.
    runsc_dir: Option<PathBuf>,
    pub user: Option<User>,
    pub home: PathBuf,
    /// Shared by all tests, so the image is built once.
    pub data_home: PathBuf,
    pub uid: u32,
}

#[derive(Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The test user's `PATH` (after the chosen runsc's directory).
const USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// The runsc the tests run Lazaret with: `LAZARET_TEST_RUNSC` (an absolute
/// path, e.g. an unpacked package's `usr/bin/runsc`), else runsc on `PATH`.
fn test_runsc() -> Result<PathBuf, String> {
    match std::env::var_os("LAZARET_TEST_RUNSC") {
        Some(p) => {
            let p = PathBuf::from(p);
            let executable = std::fs::metadata(&p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o001 != 0)
                .unwrap_or(false);
            if !p.is_absolute() || !executable {
                // A wrong choice must not quietly test another runsc.
                panic!(
                    "LAZARET_TEST_RUNSC={} is not an absolute path to a file every user may run",
                    p.display()
                );
            }
            Ok(p)
        }
        None => which("runsc").ok_or_else(|| "runsc is not installed".to_string()),
    }
}

/// Every runsc the per-release tests start a Domain with: the one the
/// tests use ([`TestEnv::runsc`]) and those `LAZARET_TEST_OTHER_RUNSC`
/// names (absolute paths, `:`-separated), e.g. Debian 12's 20221219 beside
/// bookworm-backports' 20240729.
pub fn installed_runscs(env: &TestEnv) -> Vec<PathBuf> {
    let mut all = vec![env.runsc.clone()];
    if let Some(others) = std::env::var_os("LAZARET_TEST_OTHER_RUNSC") {
        for p in std::env::split_paths(&others).filter(|p| !p.as_os_str().is_empty()) {
            assert!(
                p.is_absolute() && p.is_file(),
                "LAZARET_TEST_OTHER_RUNSC names {}, not an absolute path to a file",
                p.display()
            );
            if !all.contains(&p) {
                all.push(p);
            }
        }
    }
    all
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

impl TestEnv {
    fn probe() -> Result<TestEnv, String> {
        let runsc = test_runsc()?;
        for tool in ["newuidmap", "newgidmap", "mmdebstrap", "git", "setpriv"] {
            if which(tool).is_none() {
                return Err(format!("{tool} is not installed"));
            }
        }
        let target = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
            .ok_or("cannot find the target directory")?;
        for b in BINARIES {
            if !target.join(b).is_file() {
                return Err(format!(
                    "{} is not built: run `cargo build --bins` first",
                    target.join(b).display()
                ));
            }
        }
        let root = rustix::process::getuid().is_root();
        let user = if root {
            let name = std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "lazaret-e2e".into());
            let u = nix::unistd::User::from_name(&name)
                .ok()
                .flatten()
                .ok_or(format!(
                    "test user {name} does not exist (create it as .ci/run does)"
                ))?;
            Some(User {
                name,
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            })
        } else {
            None
        };
        let (home, uid) = match &user {
            Some(u) => (
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(u.uid))
                    .ok()
                    .flatten()
                    .map(|p| p.dir)
                    .ok_or("test user has no home")?,
                u.uid,
            ),
            None => (
                PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?),
                rustix::process::getuid().as_raw(),
            ),
        };
        let name = user
            .as_ref()
            .map(|u| u.name.clone())
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_default();
        let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        if !subuid
            .lines()
            .any(|l| l.starts_with(&format!("{name}:")) || l.starts_with(&format!("{uid}:")))
        {
            return Err(format!(
                "user {name} has no subordinate uid range in /etc/subuid"
            ));
        }
        for dev in ["/dev/fuse", "/dev/net/tun"] {
            let mode = std::fs::metadata(dev)
                .map(|m| m.permissions().mode())
                .unwrap_or(0);
            if mode & 0o006 != 0o006 {
                return Err(format!(
                    "{dev} is not read-write for all (chmod 0666 {dev})"
                ));
            }
        }
        // Copies of the binaries in a directory the user can read: the
        // checkout itself may sit in root's private home.
        // Each test binary leaves its copies behind (no destructor runs
        // for a process-wide environment): those of test processes that
        // have exited are removed here, so runs do not fill the disk.
        if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(pid) = name.strip_prefix("lazaret-e2e-bin-") else {
                    continue;
                };
                if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let bin = std::env::temp_dir().join(format!("lazaret-e2e-bin-{}", std::process::id()));
        std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        for b in BINARIES {
            std::fs::copy(target.join(b), bin.join(b)).map_err(|e| e.to_string())?;
        }
        let runsc_dir = match std::env::var_os("LAZARET_TEST_RUNSC") {
            Some(_) => {
                let dir = bin.join("runsc-dir");
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                std::os::unix::fs::symlink(&runsc, dir.join("runsc")).map_err(|e| e.to_string())?;
                Some(dir)
            }
            None => None,
        };
        let data_home = home.join(".cache/lazaret-e2e/data");
        let env = TestEnv {
            bin,
            runsc,
            runsc_dir,
            user,
            home,
            data_home,
            uid,
        };
        let out = env.sh(&format!(
            "mkdir -p {} && chmod 700 {}",
            env.data_home.display(),
            env.home.join(".cache/lazaret-e2e").display()
        ));
        if !out.status.success() {
            return Err(format!(
                "cannot create the test storage: {}",
                text(&out.stderr)
            ));
        }
        env.warm_up()?;
        Ok(env)
    }

    /// One `lazaret run` before any test, so that the first use's image
    /// build (about a minute) is not charged to whichever test comes first.
    fn warm_up(&self) -> Result<(), String> {
        let ws = self.workspace("warm-up");
        let out = ws
            .lazaret(&["run", "--", "true"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "`lazaret run -- true` fails on this machine ({}): {}",
                out.status,
                text(&out.stderr)
            ));
        }
        Ok(())
    }

    /// A command run as the test user, with a clean environment.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = match &self.user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={}", u.uid))
                    .arg(format!("--regid={}", u.gid))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(program);
                c
            }
            None => Command::new(program),
        };
        let mut path = OsString::new();
        if let Some(dir) = &self.runsc_dir {
            path.push(dir);
            path.push(":");
        }
        path.push(USER_PATH);
        cmd.env_clear()
            .env("HOME", &self.home)
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .env("XDG_DATA_HOME", &self.data_home)
            .env("GIT_AUTHOR_NAME", "Lazaret Test")
            .env("GIT_AUTHOR_EMAIL", "test@lazaret.invalid")
            .env("GIT_COMMITTER_NAME", "Lazaret Test")
            .env("GIT_COMMITTER_EMAIL", "test@lazaret.invalid");
        if let Some(u) = &self.user {
            cmd.env("USER", &u.name).env("LOGNAME", &u.name);
        }
        // A new user's default soft descriptor limit, whatever the test
        // runner's own (root's is often higher); the hard limit stays.
        // SAFETY: the closure runs in the forked child before exec and
        // only makes the async-signal-safe getrlimit/setrlimit calls.
        unsafe {
            cmd.pre_exec(|| {
                use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
                let hard = getrlimit(Resource::Nofile).maximum;
                let soft = hard.map_or(NEW_USER_NOFILE, |h| h.min(NEW_USER_NOFILE));
                setrlimit(
                    Resource::Nofile,
                    Rlimit {
                        current: Some(soft),
                        maximum: hard,
                    },
                )
                .map_err(std::io::Error::from)
            });
        }
        cmd
    }

    /// `sh -c SCRIPT` as the test user.
    pub fn sh(&self, script: &str) -> Output {
        self.command("/bin/sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .output()
            .expect("run sh")
    }

    pub fn lazaret_path(&self) -> PathBuf {
        self.bin.join("lazaret")
    }

    /// A fresh workspace with its own (empty) config home.
    pub fn workspace(&self, name: &str) -> Workspace<'_> {
        let mut rnd = [0u8; 6];
        getrandom(&mut rnd);
        let base = self.home.join(".cache/lazaret-e2e").join(format!(
            "{name}-{}",
            rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ));
        let ws = base.join("ws");
        let cfg = base.join("config");
        let out = self.sh(&format!(
            "mkdir -p '{ws}' '{cfg}' && cd '{ws}' && git init -q && echo hello > README && git add README && git commit -qm init",
            ws = ws.display(),
            cfg = cfg.display()
        ));
        assert!(
            out.status.success(),
            "workspace setup: {}",
            text(&out.stderr)
        );
        Workspace {
            env: self,
            base,
            path: ws,
            config_home: cfg,
        }
    }
}

fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .expect("urandom");
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub struct Workspace<'a> {
    pub env: &'a TestEnv,
    pub base: PathBuf,
    /// The canonical workspace path.
    pub path: PathBuf,
    pub config_home: PathBuf,
}

impl Workspace<'_> {
    /// `lazaret ARGS` in the workspace, stdin closed, as the test user.
    pub fn lazaret(&self, args: &[&str]) -> Command {
        let mut c = self.env.command(&self.env.lazaret_path().to_string_lossy());
        c.args(args)
            .current_dir(&self.path)
            .env("XDG_CONFIG_HOME", &self.config_home)
            .stdin(Stdio::null());
        c
    }

    /// `lazaret run -- sh -c SCRIPT`, waited for.
    pub fn run_sh(&self, script: &str) -> Output {
        self.lazaret(&["run", "--", "sh", "-c", script])
            .output()
            .expect("run lazaret")
    }

    pub fn domain_id(&self, profile: &str) -> String {
        use std::os::unix::ffi::OsStrExt;
        lazaret_protocol::DomainIdV1::derive(profile, self.path.as_os_str().as_bytes()).to_string()
    }

    pub fn domain_root(&self, profile: &str) -> PathBuf {
        self.env
            .data_home
            .join("lazaret/domains")
            .join(self.domain_id(profile))
    }

    /// Host-side shell in the workspace, as the test user.
    pub fn host_sh(&self, script: &str) -> Output {
        self.env
            .sh(&format!("cd '{}' && {script}", self.path.display()))
    }

    /// Writes the config file `config.toml` in this workspace's config home.
    pub fn write_config(&self, body: &str) -> PathBuf {
        let p = self.config_home.join("lazaret/config.toml");
        let out = self.env.sh(&format!(
            "mkdir -p '{dir}' && cat > '{p}' <<'LAZARET_EOF'\n{body}\nLAZARET_EOF\nchmod 600 '{p}'",
            dir = p.parent().unwrap().display(),
            p = p.display()
        ));
        assert!(out.status.success(), "{}", text(&out.stderr));
        p
    }
}

impl Workspace<'_> {
    /// Writes a small OCI image layout with `tools/tests/tests/mkoci.py` (a
    /// busybox rootfs; see the script for `args`) into `LAYOUT` beneath
    /// this workspace's base, as the test user; returns its reference
    /// `oci:<base>/LAYOUT:TAG`.
    pub fn mkoci(&self, layout: &str, tag: &str, args: &str) -> String {
        let out = self.env.sh(&format!(
            "cd '{b}' && cat > mkoci.py <<'LAZARET_MKOCI_EOF'\n{m}\nLAZARET_MKOCI_EOF\npython3 mkoci.py {layout} {tag} {args} >/dev/null",
            b = self.base.display(),
            m = include_str!("../tests/mkoci.py")
        ));
        assert!(out.status.success(), "mkoci.py: {}", text(&out.stderr));
        format!("oci:{}/{layout}:{tag}", self.base.display())
    }
}

impl Drop for Workspace<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Keep the evidence of a failure.
            for name in ["coordinator.log", "helpers.log"] {
                if let Ok(log) =
                    lazaret_protocol::logs::read_all(&self.domain_root("default"), name)
                {
                    eprintln!("--- {name} ---\n{}", String::from_utf8_lossy(&log));
                }
            }
            return;
        }
        // Every test's Domain, as far as its coordinators recorded it
        // (teardown may still be going on: a prefix replays too), took
        // only steps the lifecycle model allows.
        assert_lifecycle_replays(&self.domain_root("default"));
        let _ = self.env.sh(&format!("rm -rf '{}'", self.base.display()));
    }
}

/// The lifecycle steps the Domain's coordinators recorded in the
/// `coordinator.log` of `domain_root` and its rotations, oldest first
/// (`lifecycle: <event>` lines), each with the PID of the coordinator
/// that recorded it: the trace [`lazaret_protocol::lifecycle::replay`]
/// checks against the lifecycle model. Once the log was rotated past its
/// oldest kept file, the trace begins with that file's checkpoint.
pub fn lifecycle_trace(domain_root: &Path) -> Vec<(u32, lazaret_protocol::lifecycle::Event)> {
    let log =
        lazaret_protocol::logs::read_all(domain_root, lazaret_protocol::logs::COORDINATOR_LOG)
            .unwrap_or_default();
    lazaret_protocol::lifecycle::trace_of_log(&String::from_utf8_lossy(&log))
}

/// Replays the Domain's recorded lifecycle (see [`lifecycle_trace`])
/// through the lifecycle model's transitions, panicking with the step the
/// model does not allow and the whole trace.
pub fn assert_lifecycle_replays(domain_root: &Path) -> lazaret_protocol::lifecycle::Recorded {
    let trace = lifecycle_trace(domain_root);
    lazaret_protocol::lifecycle::replay(&trace).unwrap_or_else(|v| {
        let steps: Vec<String> = trace
            .iter()
            .enumerate()
            .map(|(i, (pid, e))| format!("{i:3} [{pid}] {e}"))
            .collect();
        panic!(
            "the recorded lifecycle leaves the model at {v}\n{}",
            steps.join("\n")
        )
    })
}

/// Live (non-zombie) processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].chars().next())
            .unwrap_or('?');
        if state == 'Z' || pid == std::process::id() as i32 {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = text(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            out.push((pid, cmdline));
        }
    }
    out
}

/// Mounts in the host's mount table whose mount point or source mentions
/// `needle`.
pub fn mounts_mentioning(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Waits until `f` holds, up to `timeout`.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that nothing of the Domain is left: no process mentions its ID
/// (the coordinator, supervisor, exec bridges and every runsc process
/// carry it in their argv), and no mount mentions it.
pub fn assert_domain_gone(domain_id: &str) {
    let gone = eventually(Duration::from_secs(30), || {
        processes_mentioning(domain_id).is_empty()
    });
    assert!(
        gone,
        "processes of Domain {domain_id} remain: {:#?}",
        processes_mentioning(domain_id)
    );
    assert!(
        mounts_mentioning(domain_id).is_empty(),
        "mounts of Domain {domain_id} remain: {:#?}",
        mounts_mentioning(domain_id)
    );
}

pub fn os(s: &str) -> OsString {
    OsString::from(s)
}

/// The test hosts' addresses, all on the `lo` of a [`TestNet`]'s remote
/// namespace.
pub const TEST_HOSTS: &[&str] = &[
    "10.99.0.1",
    "10.99.1.1",
    "10.99.5.53",
    "172.16.9.1",
    "198.51.100.1",
    "198.51.100.2",
    "198.51.100.3",
    "198.51.100.53",
    "169.254.169.254",
    "100.64.0.1",
];
/// The IPv6 test host (a unique local address, fc00::/7), on the `lo` of
/// the test "host" itself.
pub const TEST_HOST_V6: &str = "fd00:99::1";
/// The resolver of the test network namespace's own `/etc/resolv.conf`
/// (what slirp4netns A forwards the implicit resolver to).
pub const TEST_OUTER_RESOLVER: &str = "198.51.100.53";
/// The test "host"'s own interface address (a public-looking one, on its
/// link to the remote namespace): what a host's LAN or public address is.
pub const TEST_HOST_ADDRESS: &str = "203.0.113.1";
/// The remote namespace's end of that link (the host's default gateway).
const TEST_GATEWAY: &str = "203.0.113.2";

/// An isolated network namespace with no uplink, made by the test (as
/// root), which stands for the host: `lazaret run` runs inside it, so no
/// test traffic can leave the machine. Its one link (`lzh`,
/// [`TEST_HOST_ADDRESS`]/24) leads to a second namespace, the remote one,
/// which holds the test hosts on its `lo` (TCP 8080 and 8081 on every
/// address, a DNS responder on port 53: `*.lazaret.test` is 198.51.100.1)
/// and is the host's default gateway. The host itself runs the TCP test
/// servers too, on every address it has (its loopback, its interface
/// address, [`TEST_HOST_V6`], and any address a test adds), answering
/// "SERVED-OK <address>" like the remote's: what reaches them reached the
/// host. Its own `/etc/resolv.conf` (`ip netns exec` binds
/// `/etc/netns/NAME/`) names [`TEST_OUTER_RESOLVER`]. Removed on drop.
pub struct TestNet {
    pub name: String,
    /// The remote namespace, where the test hosts live.
    pub remote: String,
    hosts: Vec<std::process::Child>,
    _script: tempfile::TempDir,
}

fn ip_cmd(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip {args:?}: {}", text(&out.stderr)));
    }
    Ok(())
}

impl TestNet {
    /// `Err(reason)` when it cannot be made (not root, no `ip`).
    pub fn create() -> Result<TestNet, String> {
        if !rustix::process::getuid().is_root() {
            return Err("the network tests create a network namespace and need root".into());
        }
        if which("ip").is_none() && !Path::new("/usr/sbin/ip").exists() {
            return Err("ip (iproute2) is not installed".into());
        }
        let mut rnd = [0u8; 4];
        getrandom(&mut rnd);
        let name = format!(
            "lzt-{}",
            rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let remote = format!("{name}-r");
        let script = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut net = TestNet {
            name: name.clone(),
            remote: remote.clone(),
            hosts: Vec::new(),
            _script: script,
        };
        ip_cmd(&["netns", "add", &name])?;
        ip_cmd(&["netns", "add", &remote])?;
        net.links()?;
        let etc = PathBuf::from("/etc/netns").join(&name);
        std::fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
        std::fs::write(
            etc.join("resolv.conf"),
            format!("nameserver {TEST_OUTER_RESOLVER}\n"),
        )
        .map_err(|e| e.to_string())?;
        let py = net._script.path().join("nethosts.py");
        std::fs::write(&py, include_str!("../tests/nethosts.py")).map_err(|e| e.to_string())?;
        let py = py.to_string_lossy().into_owned();
        net.start_hosts(&remote, &[&py])?;
        net.start_hosts(&name, &[&py, "--tcp-only"])?;
        Ok(net)
    }

    /// The link between the two namespaces, their addresses and routes.
    fn links(&self) -> Result<(), String> {
        let (host, remote) = (self.name.as_str(), self.remote.as_str());
        for ns in [host, remote] {
            ip_cmd(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip_cmd(&[
            "-n", host, "link", "add", "lzh", "type", "veth", "peer", "name", "lzr", "netns",
            remote,
        ])?;
        let host_addr = format!("{TEST_HOST_ADDRESS}/24");
        let gateway = format!("{TEST_GATEWAY}/24");
        ip_cmd(&["-n", host, "addr", "add", &host_addr, "dev", "lzh"])?;
        ip_cmd(&["-n", remote, "addr", "add", &gateway, "dev", "lzr"])?;
        ip_cmd(&["-n", host, "link", "set", "lzh", "up"])?;
        ip_cmd(&["-n", remote, "link", "set", "lzr", "up"])?;
        ip_cmd(&["-n", host, "route", "add", "default", "via", TEST_GATEWAY])?;
        for h in TEST_HOSTS {
            ip_cmd(&["-n", remote, "addr", "add", &format!("{h}/32"), "dev", "lo"])?;
        }
        // Best effort: the IPv6 host (the sandbox must not reach it anyway).
        let v6 = format!("{TEST_HOST_V6}/128");
        let _ = ip_cmd(&["-n", host, "addr", "add", &v6, "dev", "lo"]);
        Ok(())
    }

    /// Runs `nethosts.py ARGS` in `ns` until dropped; waits for it.
    fn start_hosts(&mut self, ns: &str, args: &[&str]) -> Result<(), String> {
        let python = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut hosts = Command::new("ip")
            .args(["netns", "exec", ns, python])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("test hosts: {e}"))?;
        let mut line = String::new();
        {
            use std::io::BufRead;
            let mut r = std::io::BufReader::new(hosts.stdout.take().expect("stdout"));
            let _ = r.read_line(&mut line);
        }
        self.hosts.push(hosts);
        if line.trim() != "ready" {
            return Err(format!("the test hosts in {ns} did not start: {line:?}"));
        }
        Ok(())
    }

    /// Gives the test "host" one more address (on its `lo`), as a host
    /// gains one while a Domain runs; its test servers answer there.
    pub fn add_host_address(&self, addr: &str) {
        ip_cmd(&[
            "-n",
            &self.name,
            "addr",
            "add",
            &format!("{addr}/32"),
            "dev",
            "lo",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Every name the test hosts' DNS responder was asked, in order.
    pub fn queries(&self) -> Vec<String> {
        std::fs::read_to_string(self._script.path().join("queries.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// `cmd`, run inside this network namespace, the host's (the same
    /// program, args, environment and directory).
    pub fn wrap(&self, cmd: &Command) -> Command {
        wrap_in(&self.name, cmd)
    }

    /// `cmd`, run inside the remote namespace, where the test hosts are
    /// (a server a test adds).
    pub fn wrap_remote(&self, cmd: &Command) -> Command {
        wrap_in(&self.remote, cmd)
    }
}

fn wrap_in(ns: &str, cmd: &Command) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    c.stdin(Stdio::null());
    c
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for mut h in self.hosts.drain(..) {
            drop(h.stdin.take());
            let _ = h.kill();
            let _ = h.wait();
        }
        for ns in [&self.name, &self.remote] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&self.name));
    }
}

/// Returns a [`TestNet`], or prints `skipping: <reason>` (a failure under
/// `LAZARET_TESTS_MUST_RUN=1`) and returns `None`.
pub fn test_net() -> Option<TestNet> {
    match TestNet::create() {
        Ok(n) => Some(n),
        Err(reason) => {
            skip(&reason);
            None
        }
    }
}

impl Workspace<'_> {
    /// `lazaret ARGS` in the workspace, as the test user, inside `net`.
    pub fn lazaret_in(&self, net: &TestNet, args: &[&str]) -> Command {
        net.wrap(&self.lazaret(args))
    }

    /// `lazaret run -- sh -c SCRIPT` inside `net`, waited for.
    pub fn run_sh_in(&self, net: &TestNet, script: &str) -> Output {
        self.lazaret_in(net, &["run", "--", "sh", "-c", script])
            .output()
            .expect("run lazaret")
    }
}
