//! Disk full and read-only storage (issue 17, item 5): a Storage Root on
//! a small tmpfs the test mounts (as root), filled with `fallocate` and
//! empty files (bytes and inodes), or remounted read-only. Image
//! preparation, writes to State Anchors, the Domain Store at start-up and
//! `state reset` each meet a full file system: the developer gets a clear
//! error naming what to do, nothing is corrupt or half-written, nothing
//! transient is left behind, and everything works again once space is
//! freed. A read-only Storage Root changes nothing.
//!
//! Each test uses its own tmpfs, so that a full one cannot disturb other
//! tests; the mount goes on drop (lazily if something still holds it).

use lazaret_tests::{assert_domain_gone, eventually, require_env, text, TestEnv, Workspace};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// A tmpfs of `size` MiB and `inodes` inodes, mounted by the test (root)
/// at a fresh directory; the Storage Root is `data` in it, owned by the
/// test user. `fill/` (root's, 0700) holds what fills it.
struct Tmpfs {
    mnt: PathBuf,
    data: PathBuf,
    fill: PathBuf,
    filled: u32,
}

fn must_run() -> bool {
    std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1")
}

/// `None` (after `skipping: <reason>`, or a panic under
/// `LAZARET_TESTS_MUST_RUN=1`) unless the test runs as root with a test
/// user, which mounting a tmpfs and handing it over needs.
fn tmpfs(env: &TestEnv, size_mib: u64, inodes: u64) -> Option<Tmpfs> {
    let Some(user) = env
        .user
        .as_ref()
        .filter(|_| rustix::process::getuid().is_root())
    else {
        let reason = "the storage tests mount a tmpfs and need root";
        assert!(
            !must_run(),
            "LAZARET_TESTS_MUST_RUN=1 but the test would skip: {reason}"
        );
        eprintln!("skipping: {reason}");
        return None;
    };
    let mnt = tempfile::Builder::new()
        .prefix("lazaret-storage-full-")
        .tempdir()
        .expect("mount point")
        .keep();
    sh_root(&format!(
        "chmod 755 '{m}' && mount -t tmpfs -o size={size_mib}m,nr_inodes={inodes},mode=0755 tmpfs '{m}'",
        m = mnt.display()
    ));
    let t = Tmpfs {
        data: mnt.join("data"),
        fill: mnt.join("fill"),
        mnt,
        filled: 0,
    };
    sh_root(&format!(
        "mkdir -m 700 '{d}' '{f}' && chown {u}:{g} '{d}'",
        d = t.data.display(),
        f = t.fill.display(),
        u = user.uid,
        g = user.gid
    ));
    Some(t)
}

/// `sh -c SCRIPT` as root (the test runner); panics unless it succeeds.
fn sh_root(script: &str) -> Output {
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

impl Tmpfs {
    fn statvfs(&self) -> rustix::fs::StatVfs {
        rustix::fs::statvfs(&self.mnt).expect("statvfs")
    }

    /// Bytes an unprivileged writer can still use.
    fn available(&self) -> u64 {
        let st = self.statvfs();
        st.f_bavail * st.f_frsize
    }

    /// Takes all but `leave` bytes with a `fallocate`d file of root's.
    fn fill_leaving(&mut self, leave: u64) {
        let avail = self.available();
        assert!(
            avail > leave,
            "only {avail} bytes are free, cannot leave {leave}"
        );
        self.filled += 1;
        let p = self.fill.join(format!("blocks-{}", self.filled));
        let f = std::fs::File::create(&p).expect("fill file");
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, avail - leave)
            .expect("fallocate");
    }

    /// Takes every byte, then every inode: nothing more can be written,
    /// nor any file or directory created, as on a full disk.
    fn fill_all(&mut self) {
        self.fill_leaving(MIB);
        self.filled += 1;
        let mut n = 0u64;
        // Page by page, until the file system refuses one more.
        loop {
            let p = self.fill.join(format!("page-{}-{n}", self.filled));
            let Ok(f) = std::fs::File::create(&p) else {
                break;
            };
            if rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, 4096).is_err() {
                break;
            }
            n += 1;
        }
        // Then empty files, until no inode is left.
        loop {
            let p = self.fill.join(format!("inode-{}-{n}", self.filled));
            if std::fs::File::create(&p).is_err() {
                break;
            }
            n += 1;
        }
        let st = self.statvfs();
        assert_eq!(st.f_bavail, 0, "the tmpfs is not full");
        assert_eq!(st.f_favail, 0, "the tmpfs has inodes left");
    }

    /// Gives back everything [`Tmpfs::fill_leaving`] and
    /// [`Tmpfs::fill_all`] took.
    fn free(&self) {
        sh_root(&format!(
            "find '{f}' -mindepth 1 -delete",
            f = self.fill.display()
        ));
    }

    fn remount(&self, opts: &str) {
        sh_root(&format!("mount -o remount,{opts} '{}'", self.mnt.display()));
    }

    /// Every path under the Storage Root with its type, size, mode, owner
    /// and modification time, as root sees them: what "nothing changed"
    /// compares.
    fn snapshot(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.data.clone()];
        while let Some(p) = stack.pop() {
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            out.push(format!(
                "{} {:o} {}:{} {} {}.{}",
                p.display(),
                m.mode(),
                m.uid(),
                m.gid(),
                if m.is_dir() { 0 } else { m.len() },
                m.mtime(),
                m.mtime_nsec()
            ));
            if m.is_dir() {
                for e in std::fs::read_dir(&p).expect("readdir").flatten() {
                    stack.push(e.path());
                }
            }
        }
        out.sort();
        out
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let m = self.mnt.display().to_string();
        // A Domain that is still tearing down may hold it a moment.
        let gone = eventually(Duration::from_secs(20), || {
            Command::new("umount")
                .arg(&m)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !gone {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
        let _ = std::fs::remove_dir(&self.mnt);
    }
}

/// A workspace whose config puts the Storage Root at `data` and whose
/// default profile starts from `image` (a layout [`Workspace::mkoci`]
/// wrote, when given).
fn setup<'a>(env: &'a TestEnv, name: &str, data: &Path, image: Option<&str>) -> Workspace<'a> {
    let ws = env.workspace(name);
    write_config(&ws, data, image);
    ws
}

fn write_config(ws: &Workspace<'_>, data: &Path, image: Option<&str>) {
    let mut body = format!("[storage]\ndata_root = \"{}\"\n", data.display());
    if let Some(i) = image {
        body.push_str(&format!("\n[profiles.default]\nimage = \"{i}\"\n"));
    }
    ws.write_config(&body);
}

fn lazaret(ws: &Workspace<'_>, args: &[&str]) -> Output {
    ws.lazaret(args).output().expect("run lazaret")
}

/// What the Domain's coordinator and helpers logged, for a failure's
/// message.
fn logs(ws: &Workspace<'_>, data: &Path) -> String {
    let root = data.join("domains").join(ws.domain_id("default"));
    ["coordinator.log", "helpers.log"]
        .iter()
        .map(|n| {
            format!(
                "--- {n} ---\n{}",
                std::fs::read_to_string(root.join(n)).unwrap_or_default()
            )
        })
        .collect()
}

/// `lazaret run -- sh -c SCRIPT`, which must succeed; its stdout. The
/// Domain is gone afterwards, so the next run starts a new generation.
fn run_ok(ws: &Workspace<'_>, data: &Path, script: &str) -> String {
    let out = ws.run_sh(script);
    assert!(
        out.status.success(),
        "{script}: {} {}\n{}",
        out.status,
        text(&out.stderr),
        logs(ws, data)
    );
    assert_domain_gone(&ws.domain_id("default"));
    text(&out.stdout)
}

fn published(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("lowers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn leftovers(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("lowers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".staging-") || n.starts_with(".trash-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The error says the Storage Root's file system is full and what to do.
fn assert_says_full(what: &str, out: &Output) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{what}: {err}");
    assert!(
        err.contains("is full") && err.contains("free space there"),
        "{what}: the error does not say the storage is full and what to do: {err}"
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
}

/// The Domain's State Anchors verify (exit 0).
fn assert_verifies(ws: &Workspace<'_>, when: &str) {
    let v = lazaret(ws, &["state", "verify"]);
    assert_eq!(
        v.status.code(),
        Some(0),
        "state verify {when}: {}{}",
        text(&v.stdout),
        text(&v.stderr)
    );
}

/// The generation directories of the State Anchor `name` (`root` for
/// /root): exactly one once nothing is left over.
fn generations(data: &Path, ws: &Workspace<'_>, name: &str) -> Vec<String> {
    let dir = data
        .join("domains")
        .join(ws.domain_id("default"))
        .join("state/anchors")
        .join(name);
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// (a) Image preparation meets a full file system while unpacking and
/// while copying: a clear error that names the storage, not the image;
/// nothing published, no staging directory left; the same preparation
/// succeeds once there is room.
#[test]
fn image_preparation_out_of_space_publishes_nothing_and_succeeds_after() {
    let env = require_env!();
    let Some(mut fs) = tmpfs(env, 48, 16384) else {
        return;
    };
    let ws = setup(env, "full-prepare", &fs.data, None);
    // 40 MiB of incompressible content: the copy into the staging layout
    // fits in 48 MiB, the unpacked rootfs beside it does not.
    let big = ws.mkoci("layout", "big", "--big 40");
    let out = lazaret(&ws, &["image", "prepare", &big]);
    let err = text(&out.stderr);
    eprintln!("prepare without space: {}: {err}", out.status);
    assert_says_full("prepare, unpacking", &out);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        !err.contains("hostile") && !err.contains("damaged"),
        "a full disk is blamed on the image: {err}"
    );
    assert!(
        err.contains(&fs.data.display().to_string()),
        "the error does not name the path that failed: {err}"
    );
    assert!(published(&fs.data).is_empty(), "{:?}", published(&fs.data));
    assert!(leftovers(&fs.data).is_empty(), "{:?}", leftovers(&fs.data));
    let list = lazaret(&ws, &["image", "list", "--json"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    assert_eq!(text(&list.stdout).trim(), "[]");

    // Room: the same preparation publishes the whole image.
    fs.remount("size=160m");
    let out = lazaret(&ws, &["image", "prepare", &big]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(published(&fs.data), vec![id.clone()]);
    assert!(leftovers(&fs.data).is_empty(), "{:?}", leftovers(&fs.data));
    let last = fs
        .data
        .join("lowers")
        .join(&id)
        .join("rootfs/big/blob-0039");
    assert_eq!(std::fs::metadata(&last).map(|m| m.len()).ok(), Some(MIB));

    // Too little room for even the copy of another image.
    let other = ws.mkoci("layout", "other", "--big 40 --hello other");
    fs.fill_leaving(10 * MIB);
    let out = lazaret(&ws, &["image", "prepare", &other]);
    eprintln!("prepare, copying: {}: {}", out.status, text(&out.stderr));
    assert_says_full("prepare, copying", &out);
    assert_eq!(
        published(&fs.data),
        vec![id.clone()],
        "the failed one was published"
    );
    assert!(leftovers(&fs.data).is_empty(), "{:?}", leftovers(&fs.data));
    fs.free();
    let out = lazaret(&ws, &["image", "prepare", &other]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(published(&fs.data).len(), 2);
    assert!(leftovers(&fs.data).is_empty(), "{:?}", leftovers(&fs.data));
}

/// (b) A write to a State Anchor past the free space: the process inside
/// gets ENOSPC and its session goes on; a session that joins while the
/// Domain Root's file system is full is refused saying so (runsc writes
/// the joining process's PID file there), one that joins once the session
/// freed space inside runs; after the sessions end the anchor verifies and
/// the next start sees what was written.
#[test]
fn a_full_state_anchor_gives_enospc_inside_and_the_domain_goes_on() {
    let env = require_env!();
    let Some(mut fs) = tmpfs(env, 96, 16384) else {
        return;
    };
    let ws = setup(env, "full-anchor", &fs.data, None);
    let image = ws.mkoci("layout", "bb", "");
    write_config(&ws, &fs.data, Some(&image));
    assert_eq!(
        run_ok(&ws, &fs.data, "echo kept > /root/marker && echo ok"),
        "ok\n"
    );

    fs.fill_leaving(24 * MIB);
    let wait = |f: &str| {
        format!(
            "i=0; while [ ! -e /workspace/{f} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
        )
    };
    let first = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            &format!(
                "dd if=/dev/zero of=/root/big bs=1M count=96 2>&1 | grep -o 'No space left on device' | head -1; \
                 echo alive; cat /root/marker; touch /workspace/filled; {}; \
                 rm /root/big && echo more > /root/more && cat /root/more && touch /workspace/freed; {}; echo done",
                wait("go"),
                wait("go2")
            ),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lazaret run");
    let filled = eventually(Duration::from_secs(90), || ws.path.join("filled").exists());
    assert!(
        filled,
        "the first session never filled the anchor\n{}",
        logs(&ws, &fs.data)
    );
    assert!(
        fs.available() < MIB,
        "the sandbox's write did not fill the file system ({} bytes free)",
        fs.available()
    );
    // Joining now may work, or be refused saying why.
    let joined = ws.run_sh("echo joined; cat /root/marker");
    eprintln!(
        "joining while full: {}: {}",
        joined.status,
        text(&joined.stderr)
    );
    if !joined.status.success() {
        assert_says_full("joining while full", &joined);
    } else {
        assert_eq!(text(&joined.stdout), "joined\nkept\n");
    }
    assert!(ws.host_sh("touch go").status.success());
    let freed = eventually(Duration::from_secs(60), || ws.path.join("freed").exists());
    assert!(
        freed,
        "the first session did not go on\n{}",
        logs(&ws, &fs.data)
    );
    // The Domain went on: with room again, a session joins it.
    let joined = ws.run_sh("echo joined; cat /root/marker /root/more");
    assert!(
        joined.status.success(),
        "joining after the space was freed inside failed: {}\n{}",
        text(&joined.stderr),
        logs(&ws, &fs.data)
    );
    assert_eq!(text(&joined.stdout), "joined\nkept\nmore\n");
    assert!(ws.host_sh("touch go2").status.success());
    let out = first.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{} {}\n{}",
        out.status,
        text(&out.stderr),
        logs(&ws, &fs.data)
    );
    assert_eq!(
        text(&out.stdout),
        "No space left on device\nalive\nkept\nmore\ndone\n"
    );
    assert_domain_gone(&ws.domain_id("default"));
    assert_verifies(&ws, "after the anchor was full");
    assert_eq!(
        run_ok(
            &ws,
            &fs.data,
            "cat /root/marker /root/more; test -e /root/big || echo big-gone"
        ),
        "kept\nmore\nbig-gone\n"
    );
    assert_eq!(generations(&fs.data, &ws, "root"), vec!["g1"]);
    fs.free();
}

/// (c) The Domain Store and the rest of a start-up meet a Storage Root
/// with no byte and no inode left: `lazaret run` fails (125) saying so
/// and what to do, for a Domain that ran before and for a new one; no
/// process or mount is left; once space is freed both start, with their
/// State Anchors intact.
#[test]
fn a_full_storage_root_refuses_the_start_clearly_and_it_starts_after() {
    let env = require_env!();
    let Some(mut fs) = tmpfs(env, 64, 16384) else {
        return;
    };
    let ws = setup(env, "full-start", &fs.data, None);
    let image = ws.mkoci("layout", "bb", "");
    write_config(&ws, &fs.data, Some(&image));
    assert_eq!(
        run_ok(&ws, &fs.data, "echo kept > /root/marker && echo ok"),
        "ok\n"
    );
    let fresh = setup(env, "full-start-new", &fs.data, Some(&image));

    fs.fill_all();
    for (which, w) in [("a Domain that ran before", &ws), ("a new Domain", &fresh)] {
        let out = lazaret(w, &["run", "--", "true"]);
        eprintln!(
            "run with a full Storage Root, {which}: {}: {}",
            out.status,
            text(&out.stderr)
        );
        assert_says_full(which, &out);
        assert!(
            text(&out.stderr).contains(&format!("Storage Root {}", fs.data.display())),
            "{which}: {}",
            text(&out.stderr)
        );
        assert_domain_gone(&w.domain_id("default"));
    }

    fs.free();
    assert_eq!(
        run_ok(&ws, &fs.data, "cat /root/marker"),
        "kept\n",
        "the State Anchor lost its content"
    );
    assert_verifies(&ws, "after the full start");
    assert_eq!(
        run_ok(&fresh, &fs.data, "echo new > /root/n && cat /root/n"),
        "new\n"
    );
    assert_verifies(&fresh, "of the new Domain");
    for w in [&ws, &fresh] {
        let run_dir = fs
            .data
            .join("domains")
            .join(w.domain_id("default"))
            .join("run");
        assert!(!run_dir.exists(), "{} was left behind", run_dir.display());
    }
}

/// (d) `state reset` with no space left: either it fails saying so and
/// the State Anchor keeps its old content, or it succeeds and the anchor
/// is new and empty; never half, nothing left over, and the Domain starts
/// once space is freed.
#[test]
fn state_reset_without_space_keeps_the_old_anchor_or_a_new_empty_one() {
    let env = require_env!();
    let Some(mut fs) = tmpfs(env, 64, 16384) else {
        return;
    };
    let ws = setup(env, "full-reset", &fs.data, None);
    let image = ws.mkoci("layout", "bb", "");
    write_config(&ws, &fs.data, Some(&image));
    assert_eq!(
        run_ok(
            &ws,
            &fs.data,
            "echo kept > /root/marker && echo mine > /etc/mine && echo ok"
        ),
        "ok\n"
    );

    fs.fill_all();
    let out = lazaret(&ws, &["state", "reset", "/root", "--yes"]);
    let err = text(&out.stderr);
    eprintln!("state reset without space: {}: {err}", out.status);
    let reset = match out.status.code() {
        Some(0) => true,
        Some(125) => {
            assert_says_full("state reset", &out);
            assert!(!err.contains("undoing it failed too"), "{err}");
            assert!(err.contains("keeps its content"), "{err}");
            false
        }
        c => panic!("state reset exited {c:?}: {err}"),
    };
    fs.free();
    // Whatever happened, nothing is pending or left over.
    assert_verifies(&ws, "after the reset without space");
    let want = if reset { "new\nmine\n" } else { "old\nmine\n" };
    assert_eq!(
        run_ok(
            &ws,
            &fs.data,
            "{ test -e /root/marker && echo old || echo new; }; cat /etc/mine"
        ),
        want,
        "reset exited {:?}: {err}",
        out.status.code()
    );
    assert_eq!(generations(&fs.data, &ws, "root").len(), 1);
    assert_verifies(&ws, "after the next start");
    // And with room the reset goes through.
    let out = lazaret(&ws, &["state", "reset", "/root", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        run_ok(
            &ws,
            &fs.data,
            "test -e /root/marker && echo old || echo new"
        ),
        "new\n"
    );
}

/// (e) A read-only Storage Root: starting, resetting and preparing fail
/// saying so and what to do, and change nothing; remounted read-write,
/// the Domain starts with its state.
#[test]
fn a_read_only_storage_root_is_reported_and_nothing_changes() {
    let env = require_env!();
    let Some(fs) = tmpfs(env, 64, 16384) else {
        return;
    };
    let ws = setup(env, "ro-storage", &fs.data, None);
    let image = ws.mkoci("layout", "bb", "");
    let other = ws.mkoci("layout", "other", "--hello other");
    write_config(&ws, &fs.data, Some(&image));
    assert_eq!(
        run_ok(&ws, &fs.data, "echo kept > /root/marker && echo ok"),
        "ok\n"
    );

    let before = fs.snapshot();
    fs.remount("ro");
    for args in [
        &["run", "--", "true"][..],
        &["state", "reset", "/root", "--yes"][..],
        &["image", "prepare", &other][..],
    ] {
        let out = lazaret(&ws, args);
        let err = text(&out.stderr);
        eprintln!("read-only, {args:?}: {}: {err}", out.status);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(
            err.contains("read-only file system") && err.contains("remount it read-write"),
            "{args:?}: the error does not say the storage is read-only and what to do: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert_domain_gone(&ws.domain_id("default"));
    fs.remount("rw");
    assert_eq!(fs.snapshot(), before, "the read-only Storage Root changed");
    assert_eq!(run_ok(&ws, &fs.data, "cat /root/marker"), "kept\n");
    assert_verifies(&ws, "after the read-only storage");
}
