//! User namespaces mapped with the developer's subordinate ID ranges.
//!
//! The layout is the one of `unshare --map-root-user --map-auto`: ID 0 in the
//! namespace is the developer, IDs 1.. are the first subordinate range from
//! `/etc/subuid` and `/etc/subgid`. The maps are written by the setuid
//! `newuidmap`/`newgidmap`, which check the ranges against those files, so
//! this process never needs privilege of its own.

use lazaret_protocol::plan::IdMap;
use nix::sched::CloneFlags;
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error("no subordinate {kind} range for user {user} in {file}: add one with `{fix}` (a range no other user has; `lazaret doctor` checks)", kind = if *.is_uid { "uid" } else { "gid" })]
    NoRange {
        is_uid: bool,
        user: String,
        file: String,
        /// The usermod command that adds a free range.
        fix: String,
    },
    #[error("cannot read {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{tool} failed for pid {pid}: {detail}; check that the uidmap package is installed and `{tool}` is setuid root")]
    Map {
        tool: &'static str,
        pid: i32,
        detail: String,
    },
    #[error("cannot create the user namespace: {0}; check `sysctl user.max_user_namespaces` (must be > 0)")]
    Clone(nix::Error),
    #[error("i/o error while creating the user namespace: {0}")]
    Io(#[from] std::io::Error),
    #[error("the new user namespace's first process: {0}")]
    Pidfd(#[from] crate::pidfd::PidfdError),
}

/// Reads the first subordinate range of `user` (or its numeric `uid`) from a
/// subid file (`name:start:count` per line). The count is capped at 65535,
/// since ID 0 of the namespace is taken by the developer.
pub fn subid_range(file: &Path, user: &str, uid: u32) -> Result<Option<(u32, u32)>, UsernsError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(UsernsError::Read {
                file: file.display().to_string(),
                source,
            })
        }
    };
    let uid_s = uid.to_string();
    for line in text.lines() {
        let mut parts = line.trim().split(':');
        let (Some(name), Some(start), Some(count)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if name != user && name != uid_s {
            continue;
        }
        if let (Ok(start), Ok(count)) = (start.parse::<u32>(), count.parse::<u32>()) {
            if count > 0 {
                return Ok(Some((start, count.min(65535))));
            }
        }
    }
    Ok(None)
}

/// The size of the range the sandbox maps (its IDs 1..=65535, and 0).
pub const SUBID_SIZE: u32 = 65536;

/// The first subordinate ID above every range in `/etc/subuid` and
/// `/etc/subgid` now: where a new range overlaps no other user's.
pub fn free_subid_start_now() -> u32 {
    let read = |f| std::fs::read_to_string(f).unwrap_or_default();
    free_subid_start(&[&read("/etc/subuid"), &read("/etc/subgid")])
}

/// The first subordinate ID above every range in the given subuid/subgid
/// texts, at least 100000.
pub fn free_subid_start(texts: &[&str]) -> u32 {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| {
            let mut p = l.trim().split(':');
            let (_, start, count) = (p.next()?, p.next()?, p.next()?);
            start.parse::<u32>().ok()?.checked_add(count.parse().ok()?)
        })
        .fold(100_000, u32::max)
}

/// The usermod command giving `user` fresh uid and gid ranges at `start`.
pub fn usermod_fix(user: &str, start: u32) -> String {
    let end = start.saturating_add(SUBID_SIZE - 1);
    format!("sudo usermod --add-subuids {start}-{end} --add-subgids {start}-{end} {user}")
}

/// The ID map of the invoking user, from `/etc/subuid` and `/etc/subgid`.
pub fn current_id_map() -> Result<IdMap, UsernsError> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string());
    let find = |file: &str, is_uid: bool, id: u32| -> Result<(u32, u32), UsernsError> {
        subid_range(Path::new(file), &user, id)?.ok_or_else(|| UsernsError::NoRange {
            is_uid,
            user: user.clone(),
            file: file.to_string(),
            fix: usermod_fix(&user, free_subid_start_now()),
        })
    };
    Ok(IdMap {
        uid,
        gid,
        sub_uid: find("/etc/subuid", true, uid)?,
        sub_gid: find("/etc/subgid", false, uid)?,
    })
}

/// Writes the maps of the process `pid`, which has just created its user
/// namespace and waits for them.
pub fn write_maps(pid: i32, map: &IdMap) -> Result<(), UsernsError> {
    for (tool, id, (start, count)) in [
        ("newuidmap", map.uid, map.sub_uid),
        ("newgidmap", map.gid, map.sub_gid),
    ] {
        let out = Command::new(tool)
            .args([
                pid.to_string(),
                "0".into(),
                id.to_string(),
                "1".into(),
                "1".into(),
                start.to_string(),
                count.to_string(),
            ])
            .output()
            .map_err(|e| UsernsError::Map {
                tool,
                pid,
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(UsernsError::Map {
                tool,
                pid,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(())
}

/// Clones a child into a new user namespace (plus `extra` namespaces owned
/// by it), maps it, and runs `child` there as ID 0. Returns the child's PID
/// in the caller's PID namespace.
///
/// The caller must be single-threaded, or `child` must only make
/// async-signal-safe calls before it execs: the clone copies the address
/// space the way fork does.
pub fn clone_mapped<F>(map: &IdMap, extra: CloneFlags, child: F) -> Result<Pid, UsernsError>
where
    F: FnOnce() -> isize,
{
    clone_mapped_pidfd(map, extra, child).map(|(pid, _)| pid)
}

/// [`clone_mapped`], with a pidfd of the child taken right after the
/// clone, before its PID is used for anything (even for its maps).
pub fn clone_mapped_pidfd<F>(
    map: &IdMap,
    extra: CloneFlags,
    child: F,
) -> Result<(Pid, std::os::fd::OwnedFd), UsernsError>
where
    F: FnOnce() -> isize,
{
    let (go_r, go_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;
    let mut child = Some(child);
    let go_r_raw = go_r.as_raw_fd();
    let go_w_raw = go_w.as_raw_fd();
    let mut stack = vec![0u8; 1 << 20];
    let cb = Box::new(move || -> isize {
        if !child_awaits_maps(go_r_raw, go_w_raw) {
            return 125;
        }
        match child.take() {
            Some(f) => f(),
            None => 125,
        }
    });
    // SAFETY: the child runs on its own stack in a copy of this address space
    // (no CLONE_VM); the callback only touches data it owns.
    let pid = unsafe {
        nix::sched::clone(
            cb,
            &mut stack,
            CloneFlags::CLONE_NEWUSER | extra,
            Some(libc::SIGCHLD),
        )
    }
    .map_err(UsernsError::Clone)?;
    drop(go_r);
    // Our unreaped child: its PID cannot be reused before we wait for it.
    let pidfd = match crate::pidfd::open(pid.as_raw()) {
        Ok(fd) => fd,
        Err(e) => {
            // The child sees EOF and exits; reap it.
            drop(go_w);
            let _ = nix::sys::wait::waitpid(pid, None);
            return Err(e.into());
        }
    };
    let result = write_maps(pid.as_raw(), map);
    let mut go_w = std::fs::File::from(go_w);
    match result {
        Ok(()) => {
            go_w.write_all(b"g")?;
            Ok((pid, pidfd))
        }
        Err(e) => {
            // The child sees EOF and exits; reap it.
            drop(go_w);
            let _ = nix::sys::wait::waitpid(pid, None);
            Err(e)
        }
    }
}

/// In the cloned child, before its callback runs: drops its copy of the
/// write end, waits for the parent's byte (its maps are written) and
/// becomes ID 0 of the namespace. False when the parent gave up (end of
/// file) or the IDs cannot be set.
fn child_awaits_maps(go_r_raw: std::os::fd::RawFd, go_w_raw: std::os::fd::RawFd) -> bool {
    // Our copy of the write end must go, or a parent that fails to map
    // us (and drops its own) would leave us waiting forever.
    // SAFETY: closing the clone's copy of a descriptor it owns.
    unsafe { libc::close(go_w_raw) };
    // Wait until the parent wrote our maps (one byte), or gave up (EOF).
    let mut b = [0u8; 1];
    // SAFETY: go_r_raw is the read end of a pipe this process inherited
    // from the clone; reading one byte into a stack buffer is sound.
    let n = unsafe { libc::read(go_r_raw, b.as_mut_ptr().cast(), 1) };
    if n != 1 {
        return false;
    }
    rustix::thread::set_thread_res_gid(
        rustix::process::Gid::ROOT,
        rustix::process::Gid::ROOT,
        rustix::process::Gid::ROOT,
    )
    .is_ok()
        && rustix::thread::set_thread_res_uid(
            rustix::process::Uid::ROOT,
            rustix::process::Uid::ROOT,
            rustix::process::Uid::ROOT,
        )
        .is_ok()
}

/// Runs `cmd` as ID 0 of a fresh mapped user namespace and waits for it.
/// Used to unpack and remove image trees whose files belong to the
/// developer's subordinate IDs.
pub fn run_mapped(map: &IdMap, cmd: &mut Command) -> Result<std::process::ExitStatus, UsernsError> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let (err_r, err_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)?;
    let err_w_raw = err_w.as_raw_fd();
    let pid = clone_mapped(map, CloneFlags::empty(), || {
        let e = cmd.exec();
        let msg = e.to_string();
        // SAFETY: writing a byte slice we own to the error pipe.
        unsafe { libc::write(err_w_raw, msg.as_ptr().cast(), msg.len()) };
        127
    })?;
    drop(err_w);
    let mut msg = String::new();
    std::fs::File::from(err_r).read_to_string(&mut msg)?;
    let status = nix::sys::wait::waitpid(pid, None).map_err(std::io::Error::from)?;
    if !msg.is_empty() {
        return Err(UsernsError::Io(std::io::Error::other(format!(
            "cannot run {:?} in the user namespace: {msg}",
            cmd.get_program()
        ))));
    }
    Ok(match status {
        nix::sys::wait::WaitStatus::Exited(_, c) => std::process::ExitStatus::from_raw(c << 8),
        nix::sys::wait::WaitStatus::Signaled(_, s, _) => {
            std::process::ExitStatus::from_raw(s as i32)
        }
        _ => std::process::ExitStatus::from_raw(125 << 8),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_missing_range_is_advised_where_no_other_user_has_one() {
        // Two users hold 100000.. and 165536..: the advice starts above
        // both, never at 100000.
        let texts = [
            "alice:100000:65536\nbob:165536:65536\n",
            "alice:100000:65536\n",
        ];
        let start = free_subid_start(&texts);
        assert_eq!(start, 231072);
        let e = UsernsError::NoRange {
            is_uid: true,
            user: "carol".into(),
            file: "/etc/subuid".into(),
            fix: usermod_fix("carol", start),
        };
        let msg = e.to_string();
        assert!(msg.contains("--add-subuids 231072-296607"), "{msg}");
        assert!(!msg.contains("100000-165535"), "{msg}");
    }
    use super::*;

    #[test]
    fn a_failed_mapping_is_an_error_not_a_hang() {
        // Ranges nobody may map: newuidmap refuses them for any caller but
        // root, and root has no subordinate ranges of its own here either.
        let map = IdMap {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            sub_uid: (4_000_000_000, 1),
            sub_gid: (4_000_000_000, 1),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = clone_mapped(&map, CloneFlags::empty(), || 0);
            let _ = tx.send(r.is_err());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(failed) => assert!(failed, "an impossible mapping succeeded"),
            Err(_) => panic!("clone_mapped hung after a failed mapping"),
        }
    }

    #[test]
    fn parses_first_range_by_name_or_uid() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("subuid");
        std::fs::write(
            &f,
            "alice:200000:65536\n# junk\ndev:100000:70000\n1002:300000:10\n",
        )
        .unwrap();
        assert_eq!(subid_range(&f, "dev", 1001).unwrap(), Some((100000, 65535)));
        assert_eq!(subid_range(&f, "bob", 1002).unwrap(), Some((300000, 10)));
        assert_eq!(subid_range(&f, "carol", 1003).unwrap(), None);
        assert_eq!(
            subid_range(&dir.path().join("none"), "dev", 1).unwrap(),
            None
        );
    }
}
