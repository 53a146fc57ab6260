//! Shared fixtures: a Git repository with a table of paths, the router
//! started on it, and the skip rule (`skipping: <reason>`, a failure under
//! `LAZARET_TESTS_MUST_RUN=1`).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_lazaret-mount-router");

/// Prints `skipping: <reason>` and returns, or panics when CI demands the
/// test run.
pub fn skip(reason: &str) {
    if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
        panic!("LAZARET_TESTS_MUST_RUN=1 but the test would skip: {reason}");
    }
    eprintln!("skipping: {reason}");
}

/// Why the router cannot be mounted by this test process, if it cannot.
pub fn mount_unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some(
            "mount tests run as root (the userns test covers the unprivileged path)".into(),
        );
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        return Some("/dev/fuse cannot be opened (modprobe fuse; chmod 0666 /dev/fuse)".into());
    }
    if which("git").is_none() {
        return Some("git is not installed".into());
    }
    None
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Runs a command with a clean Git environment, panicking on failure.
pub fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = git_cmd(dir).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t.invalid");
    c
}

/// The rules of the fixture repository.
pub const GITIGNORE: &str = "# comment
*.log
!keep.log
/build/
node_modules/
.env
*.o
doc/**/*.tmp
\\#hash
trailing\\ 
out-*/
!out-keep/
[Tt]emp*
/root-only
a/**/z
";
pub const SUB_GITIGNORE: &str = "*.c\n!important.c\nlocal/\n/anchored\n";
pub const DEEPER_GITIGNORE: &str = "!*.log\n";
pub const INFO_EXCLUDE: &str = "secret.txt\n";
pub const EXCLUDES_FILE: &str = "*.swp\n";

/// The table: path (a trailing `/` makes a directory) and whether Git
/// ignores it. Checked against `git check-ignore` too.
pub fn table() -> Vec<(Vec<u8>, bool)> {
    let t: &[(&[u8], bool)] = &[
        (b"a.log", true),
        (b"keep.log", false),
        (b"src/keep.log", false),
        (b"src/x.log", true),
        (b"build/", true),
        (b"src/build/", false),
        (b"build/out.bin", true),
        (b"node_modules/", true),
        (b"src/node_modules/", true),
        (b"src/node_modules/pkg/index.js", true),
        (b".env", true),
        (b"src/.env", true),
        (b"main.o", true),
        (b"doc/x/y.tmp", true),
        (b"doc/y.tmp", true),
        (b"y.tmp", false),
        (b"#hash", true),
        (b"trailing ", true),
        (b"trailing", false),
        (b"out-a/", true),
        (b"out-keep/", false),
        (b"out-keep/file", false),
        (b"out-a/file", true),
        (b"out-c", false),
        (b"Temp1", true),
        (b"temp2", true),
        (b"root-only", true),
        (b"src/root-only", false),
        (b"a/b/c/z", true),
        (b"a/z", true),
        (b"secret.txt", true),
        (b"x.swp", true),
        (b"sub/foo.c", true),
        (b"foo.c", false),
        (b"sub/important.c", false),
        (b"sub/local/", true),
        (b"sub/local/x", true),
        (b"sub/anchored", true),
        (b"sub/x/anchored", false),
        (b"sub/deeper/a.log", false),
        (b"sub/a.log", true),
        (b"caf\xe9.log", true),
        (b"caf\xe9.txt", false),
        (b"src/main.rs", false),
        (b"README", false),
    ];
    t.iter().map(|(p, i)| (p.to_vec(), *i)).collect()
}

pub fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// A repository with the rules above; `core.excludesFile` points at a
/// file beside it. Returns (temp root, workspace).
pub fn fixture_repo() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("lazaret-router-test")
        .tempdir()
        .unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    let excludes = tmp.path().join("global-ignore");
    std::fs::write(&excludes, EXCLUDES_FILE).unwrap();
    git(
        &ws,
        &["config", "core.excludesFile", excludes.to_str().unwrap()],
    );
    std::fs::write(ws.join(".gitignore"), GITIGNORE).unwrap();
    std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
    std::fs::write(ws.join("sub/.gitignore"), SUB_GITIGNORE).unwrap();
    std::fs::write(ws.join("sub/deeper/.gitignore"), DEEPER_GITIGNORE).unwrap();
    std::fs::write(ws.join(".git/info/exclude"), INFO_EXCLUDE).unwrap();
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    git(&ws, &["add", ".gitignore", "sub", "README"]);
    git(&ws, &["commit", "-qm", "init"]);
    (tmp, ws)
}

/// Creates every table path beneath `root` (files hold `content`).
pub fn materialise(root: &Path, content: &[u8]) {
    for (p, _) in table() {
        let dir = p.ends_with(b"/");
        let p = root.join(os(p.strip_suffix(b"/").unwrap_or(&p)));
        if dir {
            std::fs::create_dir_all(&p).unwrap();
        } else {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
    }
}

/// `git check-ignore --no-index` over the table, on the host workspace.
pub fn git_ignored(ws: &Path) -> Vec<(Vec<u8>, bool)> {
    let mut input = Vec::new();
    for (p, _) in table() {
        input.extend_from_slice(p.strip_suffix(b"/").unwrap_or(&p));
        input.push(0);
    }
    let mut child = git_cmd(ws)
        .args(["check-ignore", "--no-index", "-z", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let ignored: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
    table()
        .into_iter()
        .map(|(p, _)| {
            let bare = p.strip_suffix(b"/").unwrap_or(&p).to_vec();
            let i = ignored.contains(&bare.as_slice());
            (p, i)
        })
        .collect()
}

/// A running router over (workspace, state) at `mnt`.
pub struct Router {
    pub child: Option<Child>,
    pub mnt: PathBuf,
    pub ws: PathBuf,
    pub state: PathBuf,
}

impl Router {
    /// Starts the router and waits for `ready\n` on its readiness pipe.
    pub fn start(tmp: &Path, ws: &Path, extra: &[&str]) -> Router {
        let state = tmp.join("state");
        let mnt = tmp.join("mnt");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let wfd = w.as_raw_fd();
        let mut cmd = Command::new(BIN);
        cmd.arg("--workspace")
            .arg(ws)
            .arg("--state")
            .arg(&state)
            .arg("--mountpoint")
            .arg(&mnt)
            .arg("--ready-fd")
            .arg("3")
            .args(extra)
            .env("HOME", tmp)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null());
        let w_owned: OwnedFd = w;
        // SAFETY: only async-signal-safe dup2 between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(wfd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start lazaret-mount-router");
        drop(w_owned);
        let mut f = std::fs::File::from(r);
        let mut buf = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let _ = f.read_to_end(&mut buf);
        assert!(Instant::now() < deadline, "router start timed out");
        assert_eq!(
            buf,
            b"ready\n",
            "router did not signal readiness (exit: {:?})",
            child.id()
        );
        Router {
            child: Some(child),
            mnt,
            ws: ws.to_path_buf(),
            state,
        }
    }

    pub fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}
