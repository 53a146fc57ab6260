//! The router mounted for real (as root here; `unprivileged_user_in_a_user_namespace`
//! covers the product's path, root of a user namespace as an ordinary
//! user). Each test starts `lazaret-mount-router` over a fresh repository.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

macro_rules! require_mount {
    () => {
        if let Some(reason) = mount_unavailable() {
            return skip(&reason);
        }
    };
}

fn errno(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn read(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

#[test]
fn table_routes_like_git_and_host_content_stays_hidden() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    // The host already has content at every path, ignored or not.
    materialise(&ws, b"host\n");
    let git = git_ignored(&ws);
    let r = Router::start(tmp.path(), &ws, &[]);
    for ((p, want), (_, g)) in table().iter().zip(&git) {
        assert_eq!(
            want,
            g,
            "table and git disagree on {}",
            String::from_utf8_lossy(p)
        );
    }
    // Before any write: non-ignored host files show; ignored ones do not.
    for (p, ignored) in table() {
        if p.ends_with(b"/") {
            continue;
        }
        let through = read(&r.mnt.join(os(&p)));
        if ignored {
            assert_eq!(
                through,
                None,
                "{} is ignored: host content must be hidden",
                String::from_utf8_lossy(&p)
            );
        } else {
            assert_eq!(
                through.as_deref(),
                Some(&b"host\n"[..]),
                "{}",
                String::from_utf8_lossy(&p)
            );
        }
    }
    // Write every path through the mount.
    for (p, _) in table() {
        let dir = p.ends_with(b"/");
        let bare = p.strip_suffix(b"/").unwrap_or(&p).to_vec();
        let m = r.mnt.join(os(&bare));
        if dir {
            std::fs::create_dir_all(&m).unwrap();
        } else {
            std::fs::create_dir_all(m.parent().unwrap()).unwrap();
            std::fs::write(&m, b"sandbox\n")
                .unwrap_or_else(|e| panic!("write {}: {e}", String::from_utf8_lossy(&p)));
        }
    }
    for (p, ignored) in table() {
        if p.ends_with(b"/") {
            continue;
        }
        let name = String::from_utf8_lossy(&p).into_owned();
        let host = read(&ws.join(os(&p)));
        let state = read(&r.state.join(os(&p)));
        if ignored {
            assert_eq!(
                host.as_deref(),
                Some(&b"host\n"[..]),
                "{name}: host content changed"
            );
            assert_eq!(
                state.as_deref(),
                Some(&b"sandbox\n"[..]),
                "{name}: not in state"
            );
        } else {
            assert_eq!(
                host.as_deref(),
                Some(&b"sandbox\n"[..]),
                "{name}: not on the host"
            );
            assert_eq!(state, None, "{name}: leaked into state");
        }
        assert_eq!(
            read(&r.mnt.join(os(&p))).as_deref(),
            Some(&b"sandbox\n"[..]),
            "{name}"
        );
    }
    // Git inside the view sees the same ignore status.
    let out = git_cmd(&r.mnt)
        .args(["status", "--porcelain", "--ignored"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ignored_host_secrets_are_invisible_and_state_persists_across_restarts() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    std::fs::write(ws.join(".env"), "HOST_SECRET=1\n").unwrap();
    std::fs::create_dir_all(ws.join("node_modules/evil")).unwrap();
    std::fs::write(ws.join("node_modules/evil/index.js"), "host\n").unwrap();
    {
        let r = Router::start(tmp.path(), &ws, &[]);
        let names: Vec<_> = std::fs::read_dir(&r.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !names.iter().any(|n| n == ".env" || n == "node_modules"),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n == ".git"), "{names:?}");
        assert_eq!(errno(std::fs::metadata(r.m(".env"))), libc::ENOENT);
        std::fs::create_dir(r.m("node_modules")).unwrap();
        std::fs::write(r.m("node_modules/dep.js"), "sandbox\n").unwrap();
        std::fs::write(r.m(".env"), "SANDBOX=1\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join(".env")).unwrap(),
            "HOST_SECRET=1\n"
        );
        assert!(!ws.join("node_modules/dep.js").exists());
    }
    let r = Router::start(tmp.path(), &ws, &[]);
    assert_eq!(std::fs::read_to_string(r.m(".env")).unwrap(), "SANDBOX=1\n");
    assert_eq!(
        std::fs::read_to_string(r.m("node_modules/dep.js")).unwrap(),
        "sandbox\n"
    );
    assert!(!r.m("node_modules/evil").exists());
}

#[test]
fn gitignore_changes_apply_live_from_either_side_with_negation() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &["--cache-ms", "0"]);
    std::fs::write(r.m("before.dat"), "1").unwrap();
    assert!(ws.join("before.dat").exists());
    // Inside: append a pattern and a negation through the mount.
    let mut gi = std::fs::read_to_string(r.m(".gitignore")).unwrap();
    gi.push_str("*.dat\n!keep.dat\n");
    std::fs::write(r.m(".gitignore"), &gi).unwrap();
    std::fs::write(r.m("a.dat"), "2").unwrap();
    std::fs::write(r.m("keep.dat"), "3").unwrap();
    assert!(!ws.join("a.dat").exists() && r.state.join("a.dat").exists());
    assert!(ws.join("keep.dat").exists() && !r.state.join("keep.dat").exists());
    // The existing host file is now ignored: hidden, not moved, not lost.
    assert_eq!(errno(std::fs::metadata(r.m("before.dat"))), libc::ENOENT);
    assert!(ws.join("before.dat").exists());
    // On the host: a new pattern applies within the revalidation window.
    gi.push_str("*.tmp9\n");
    std::fs::write(ws.join(".gitignore"), &gi).unwrap();
    std::thread::sleep(lazaret_mount_router::rules::REVALIDATE + Duration::from_millis(50));
    std::fs::write(r.m("x.tmp9"), "4").unwrap();
    assert!(r.state.join("x.tmp9").exists() && !ws.join("x.tmp9").exists());
}

#[test]
fn cross_store_rename_and_link_are_exdev_and_mv_falls_back() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &[]);
    // Inode numbers are the host's (Git's index stat data stays valid).
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(r.m("README")).unwrap().ino(),
        std::fs::metadata(ws.join("README")).unwrap().ino()
    );
    std::fs::write(r.m("keep.log"), "k\n").unwrap();
    std::fs::create_dir(r.m("build")).unwrap();
    assert_eq!(
        errno(std::fs::rename(r.m("keep.log"), r.m("build/keep.log"))),
        libc::EXDEV
    );
    assert_eq!(
        errno(std::fs::hard_link(r.m("keep.log"), r.m("build/k2"))),
        libc::EXDEV
    );
    std::fs::write(r.m("build/out.bin"), "o\n").unwrap();
    assert_eq!(
        errno(std::fs::rename(r.m("build/out.bin"), r.m("out.bin"))),
        libc::EXDEV
    );
    std::fs::create_dir(r.m("plain")).unwrap();
    assert_eq!(
        errno(std::fs::rename(r.m("plain"), r.m("out-z"))),
        libc::EXDEV
    );
    // `mv` falls back to copy and delete, each side routed.
    let st = Command::new("mv")
        .arg(r.m("keep.log"))
        .arg(r.m("build/keep.log"))
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!ws.join("keep.log").exists());
    assert_eq!(
        std::fs::read_to_string(r.state.join("build/keep.log")).unwrap(),
        "k\n"
    );
    let st = Command::new("mv")
        .arg(r.m("build/out.bin"))
        .arg(r.m("out.bin"))
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(std::fs::read_to_string(ws.join("out.bin")).unwrap(), "o\n");
    // Same-store renames and links work.
    std::fs::write(r.m("a.txt"), "a").unwrap();
    std::fs::rename(r.m("a.txt"), r.m("b.txt")).unwrap();
    std::fs::hard_link(r.m("b.txt"), r.m("c.txt")).unwrap();
    assert!(ws.join("b.txt").exists() && ws.join("c.txt").exists());
    std::fs::write(r.m("x.log"), "x").unwrap();
    std::fs::rename(r.m("x.log"), r.m("build/x.log")).unwrap();
    assert!(r.state.join("build/x.log").exists());
}

#[test]
fn a_host_directory_rename_carries_its_ignored_files() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &[]);
    std::fs::create_dir(r.m("lib")).unwrap();
    std::fs::write(r.m("lib/a.c"), "c").unwrap();
    std::fs::write(r.m("lib/a.o"), "o").unwrap();
    std::fs::rename(r.m("lib"), r.m("lib2")).unwrap();
    assert_eq!(std::fs::read_to_string(r.m("lib2/a.o")).unwrap(), "o");
    assert_eq!(std::fs::read_to_string(r.m("lib2/a.c")).unwrap(), "c");
    assert!(r.state.join("lib2/a.o").exists() && !r.state.join("lib").exists());
    assert!(ws.join("lib2/a.c").exists() && !ws.join("lib2/a.o").exists());
}

#[test]
fn rmdir_never_deletes_hidden_content() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/host.log"), "host build log\n").unwrap();
    let r = Router::start(tmp.path(), &ws, &[]);
    assert_eq!(std::fs::read_dir(r.m("d")).unwrap().count(), 0);
    assert_eq!(errno(std::fs::remove_dir(r.m("d"))), libc::ENOTEMPTY);
    assert!(ws.join("d/host.log").exists());
    // An empty directory with empty state scaffolding goes.
    std::fs::create_dir(r.m("e")).unwrap();
    std::fs::write(r.m("e/x.o"), "o").unwrap();
    std::fs::remove_file(r.m("e/x.o")).unwrap();
    std::fs::remove_dir(r.m("e")).unwrap();
    assert!(!ws.join("e").exists() && !r.state.join("e").exists());
}

#[test]
fn devices_are_refused_fifos_and_symlinks_are_routed() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &[]);
    let c = std::ffi::CString::new(r.m("dev0").as_os_str().as_bytes()).unwrap();
    // SAFETY: plain mknod(2) on a NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );
    let c = std::ffi::CString::new(r.m("p.log").as_os_str().as_bytes()).unwrap();
    // SAFETY: plain mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(r.state.join("p.log").exists());
    std::os::unix::fs::symlink("/etc/passwd", r.m("link.log")).unwrap();
    assert_eq!(
        std::fs::read_link(r.state.join("link.log")).unwrap(),
        Path::new("/etc/passwd")
    );
    std::os::unix::fs::symlink("README", r.m("readme-link")).unwrap();
    assert!(ws.join("readme-link").is_symlink());
}

#[test]
fn open_handles_stay_bound_when_the_rules_change() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &["--cache-ms", "0"]);
    use std::io::Write;
    let mut f = std::fs::File::create(r.m("data.bin")).unwrap();
    f.write_all(b"one\n").unwrap();
    let mut gi = std::fs::read_to_string(r.m(".gitignore")).unwrap();
    gi.push_str("data.bin\n");
    std::fs::write(r.m(".gitignore"), gi).unwrap();
    f.write_all(b"two\n").unwrap();
    drop(f);
    assert_eq!(
        std::fs::read_to_string(ws.join("data.bin")).unwrap(),
        "one\ntwo\n"
    );
    assert!(!r.state.join("data.bin").exists());
    // A new lookup follows the new rules: the host file is hidden now.
    assert_eq!(errno(std::fs::metadata(r.m("data.bin"))), libc::ENOENT);
}

#[test]
fn non_utf8_names_are_routed_and_listed_as_bytes() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &[]);
    std::fs::write(r.mnt.join(os(b"caf\xe9.txt")), "t").unwrap();
    std::fs::write(r.mnt.join(os(b"caf\xe9.log")), "l").unwrap();
    assert!(ws.join(os(b"caf\xe9.txt")).exists());
    assert!(r.state.join(os(b"caf\xe9.log")).exists());
    let names: Vec<Vec<u8>> = std::fs::read_dir(&r.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    assert!(names.contains(&b"caf\xe9.txt".to_vec()) && names.contains(&b"caf\xe9.log".to_vec()));
}

#[test]
fn a_killed_router_gives_enotconn_never_host_content() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    std::fs::write(ws.join(".env"), "HOST_SECRET\n").unwrap();
    let mut r = Router::start(tmp.path(), &ws, &[]);
    std::fs::write(r.m(".env"), "sandbox\n").unwrap();
    let mut child = r.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    for p in [".env", "README", ".git/config", ""] {
        let e =
            errno(std::fs::read(r.m(p)).or_else(|_| std::fs::read_dir(r.m(p)).map(|_| Vec::new())));
        assert!(e == libc::ENOTCONN || e == libc::EIO, "{p}: errno {e}");
    }
}

#[test]
fn the_router_is_confined() {
    require_mount!();
    let (tmp, ws) = fixture_repo();
    let r = Router::start(tmp.path(), &ws, &[]);
    let pid = r.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .map(|l| l[k.len()..].trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2");
    assert_eq!(field("Seccomp_filters:"), "2");
    // CHOWN|DAC_OVERRIDE|DAC_READ_SEARCH|FOWNER|FSETID
    assert_eq!(field("CapEff:"), "000000000000001f");
    assert_eq!(field("CapBnd:"), "000000000000001f");
    let out = Command::new(BIN)
        .arg("--print-confinement")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for needle in [
        "landlock",
        "kill_process",
        "FUSE_DEV_IOC_CLONE",
        "CAP_DAC_OVERRIDE",
        "TCP: no bind, no connect",
    ] {
        assert!(
            s.contains(needle),
            "--print-confinement lacks {needle}:\n{s}"
        );
    }
}

#[test]
fn overlapping_directories_are_refused() {
    let (tmp, ws) = fixture_repo();
    std::fs::create_dir_all(ws.join("inner-state")).unwrap();
    std::fs::create_dir_all(tmp.path().join("m")).unwrap();
    let out = Command::new(BIN)
        .arg("--workspace")
        .arg(&ws)
        .arg("--state")
        .arg(ws.join("inner-state"))
        .arg("--mountpoint")
        .arg(tmp.path().join("m"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("disjoint"));
}

/// The product's path: an ordinary user, root of its own user namespace
/// (`unshare --map-root-user --mount`), mounts and serves the router.
#[test]
fn unprivileged_user_in_a_user_namespace() {
    require_mount!();
    let user = std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "dev".into());
    let Some(pw) = nix_user(&user) else {
        return skip(&format!(
            "user {user} does not exist (set LAZARET_TEST_USER)"
        ));
    };
    if which("unshare").is_none() {
        return skip("unshare (util-linux) is not installed");
    }
    // A directory the user owns, with a copy of the binary it can run.
    let base = std::env::temp_dir().join(format!("lazaret-router-userns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::copy(BIN, base.join("router")).unwrap();
    std::fs::set_permissions(base.join("router"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", pw.0, pw.1))
        .arg(&base)
        .status();
    let script = r#"
set -eu
B=$1; cd $B
mkdir ws state mnt
cd ws; git init -q; printf 'node_modules/\n.env\n*.log\n!keep.log\n' > .gitignore
echo host-secret > .env; mkdir node_modules; echo host > node_modules/x; echo hi > README
cd $B
exec unshare --map-root-user --mount sh -c '
  B=$1
  $B/router --workspace $B/ws --state $B/state --mountpoint $B/mnt --ready-fd 3 3>$B/ready 2>$B/err &
  P=$!
  for i in $(seq 1 100); do [ -s $B/ready ] && break; sleep 0.05; done
  echo "ready=$(cat $B/ready)"
  test ! -e $B/mnt/.env && echo env-hidden
  test ! -e $B/mnt/node_modules && echo nm-hidden
  echo sandbox > $B/mnt/.env; mkdir $B/mnt/node_modules; echo s > $B/mnt/node_modules/y
  echo k > $B/mnt/keep.log; echo d > $B/mnt/debug.log
  cat $B/ws/.env; ls -A $B/state | tr "\n" " "; echo; ls $B/ws | tr "\n" " "; echo
  mv $B/mnt/keep.log $B/mnt/node_modules/ && echo mv-ok
  grep -E "^(NoNewPrivs|Seccomp):" /proc/$P/status | tr -s "\t" " " | tr "\n" " "; echo
  kill -9 $P; wait $P 2>/dev/null || true
  cat $B/mnt/README 2>&1 || true
' sh $B
"#;
    let out = Command::new("setpriv")
        .arg(format!("--reuid={}", pw.0))
        .arg(format!("--regid={}", pw.1))
        .arg("--init-groups")
        .arg("--")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&base)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &base)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&base);
    assert!(out.status.success(), "stdout:\n{so}\nstderr:\n{se}");
    for needle in [
        "ready=ready",
        "env-hidden",
        "nm-hidden",
        "host-secret",
        ".env debug.log node_modules",
        "README keep.log node_modules",
        "mv-ok",
        "NoNewPrivs: 1 Seccomp: 2",
        "Transport endpoint is not connected",
    ] {
        assert!(
            so.contains(needle),
            "missing {needle:?} in:\n{so}\nstderr:\n{se}"
        );
    }
}

fn nix_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 4 || f[0] != name {
            return None;
        }
        Some((f[2].parse().ok()?, f[3].parse().ok()?))
    })
}
