//! Where, and with which environment, an approved host command runs.
//!
//! **The directory.** The request says from which directory inside the
//! sandbox it was made (`Request::cwd`): the sandbox's words, any string.
//! When that is `/workspace` or beneath it, the command runs in the host
//! directory at the same place beneath the host workspace, opened from a
//! descriptor of the workspace with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`: a symbolic link the sandbox made anywhere on the
//! way, a `..`, or a directory that is not there on the host makes it
//! fail, and the command then runs in the workspace's top with a note (in
//! the prompt, and first on its standard error). The command enters the
//! directory through that descriptor (`fchdir`), never by its path again,
//! so a rename or a link made between the check and the start changes
//! nothing. Not mapped either, so the workspace's top with a note: a path
//! through a `.git` (the sandbox sees Git directories through Git Sentry,
//! not as the host has them) and, with `isolate_ignored`, a path the host's
//! ignore rules ignore (inside, it is the sandbox's own Ignored Workspace
//! State, not the host's directory of that name).
//!
//! **The environment.** The developer's `PATH` (without its relative
//! entries and those in the workspace or a writable volume, which the
//! sandbox could fill with a `git` of its own), `HOME`, `USER`, `LOGNAME`,
//! `LANG=C.UTF-8`, `LAZARET_ESCALATION=1`, and the profile's
//! `escalation.pass_env` names that are set in this CLI's environment,
//! with their values from there, read when the command starts. Nothing
//! comes from the sandbox: the request has no field for it. Host Git is
//! also given `safe.bareRepository=explicit` (through `GIT_CONFIG_COUNT`),
//! as a directory the sandbox filled with `HEAD`, `objects/` and `refs/`
//! would otherwise be opened as a repository, with a configuration that
//! runs commands.
//!
//! Left to others: whether the command runs (the coordinator's rules, the
//! prompt), and running it (`host_command`).

use crate::ignore_check::HostRules;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// The workspace's mount point inside the sandbox.
pub const SANDBOX_WORKSPACE: &str = "/workspace";

/// The `PATH` of approved host commands when the developer's has no
/// usable entry.
pub const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Why the sandbox's directory does not give the host directory.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotMapped {
    #[error("it is not in {SANDBOX_WORKSPACE}")]
    Outside,
    #[error("it has an empty, `.` or `..` component")]
    NotNormal,
    #[error("it is in a Git directory, which the sandbox sees through Git Sentry")]
    GitDir,
    #[error("the host's ignore rules ignore it: inside, it is the sandbox's own")]
    Ignored,
    #[error("it does not resolve beneath the host workspace without symbolic links ({0})")]
    Unresolved(String),
}

/// What a host command is given besides its vector: from the profile and
/// the workspace this CLI resolved, never from the sandbox.
#[derive(Clone, Debug)]
pub struct Setting {
    pub workspace: PathBuf,
    pub pass_env: Vec<String>,
    pub isolate_ignored: bool,
    /// Host paths the sandbox can write besides the workspace (writable
    /// volumes): no `PATH` entry of the command lies in one.
    pub writable: Vec<PathBuf>,
}

/// The host directory a command runs in.
pub struct Place {
    /// Shown in the prompt (the host path, not escaped yet).
    pub shown: PathBuf,
    /// The directory, opened beneath the workspace; `None`: the workspace
    /// itself could not be opened, and the command starts there by path.
    pub fd: Option<OwnedFd>,
    /// Why it is the workspace's top rather than the sandbox's directory.
    pub note: Option<String>,
}

/// `cwd` (the sandbox's words) as a path relative to the workspace:
/// empty for the workspace itself. Pure: nothing is opened.
pub fn relative(cwd: &str) -> Result<PathBuf, NotMapped> {
    let rest = cwd
        .strip_prefix(SANDBOX_WORKSPACE)
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .ok_or(NotMapped::Outside)?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let mut rel = PathBuf::new();
    if rest.is_empty() {
        return Ok(rel);
    }
    for part in rest.split('/') {
        if part.is_empty() || part == "." || part == ".." || part.contains('\0') {
            return Err(NotMapped::NotNormal);
        }
        if part == ".git" {
            return Err(NotMapped::GitDir);
        }
        rel.push(part);
    }
    debug_assert!(rel.components().all(|c| matches!(c, Component::Normal(_))));
    Ok(rel)
}

impl Setting {
    /// The directory for a request made from `cwd`, opened now.
    pub fn place(&self, cwd: &str) -> Place {
        let root = lazaret_state::beneath::Root::open(&self.workspace);
        let top = |note: Option<String>| Place {
            shown: self.workspace.clone(),
            fd: root
                .as_ref()
                .ok()
                .and_then(|r| r.open_dir(Path::new("")).ok()),
            note,
        };
        let why = |e: NotMapped| {
            Some(format!(
                "the sandbox's directory is not used: {e}; it runs in the workspace's top"
            ))
        };
        let rel = match relative(cwd) {
            Ok(rel) => rel,
            Err(NotMapped::Outside) => return top(None),
            Err(e) => return top(why(e)),
        };
        if rel.as_os_str().is_empty() {
            return top(None);
        }
        if self.isolate_ignored
            && HostRules::load(&self.workspace).is_ignored_dir(rel.as_os_str().as_bytes())
        {
            return top(why(NotMapped::Ignored));
        }
        let opened = match &root {
            Ok(r) => r.open_dir(&rel),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        match opened {
            Ok(fd) => Place {
                shown: self.workspace.join(&rel),
                fd: Some(fd),
                note: None,
            },
            Err(e) => top(why(NotMapped::Unresolved(e.to_string()))),
        }
    }

    /// The command's environment, values from `lookup` (this CLI's own).
    pub fn environment(
        &self,
        lookup: &dyn Fn(&str) -> Option<OsString>,
    ) -> Vec<(String, OsString)> {
        fn set(vars: &mut Vec<(String, OsString)>, k: &str, v: OsString) {
            vars.retain(|(n, _)| n != k);
            vars.push((k.to_string(), v));
        }
        let mut vars: Vec<(String, OsString)> = Vec::new();
        set(&mut vars, "PATH", self.path(lookup("PATH").as_deref()).0);
        set(&mut vars, "LANG", "C.UTF-8".into());
        for k in ["HOME", "USER", "LOGNAME"] {
            if let Some(v) = lookup(k) {
                set(&mut vars, k, v);
            }
        }
        for k in &self.pass_env {
            if let Some(v) = lookup(k) {
                set(&mut vars, k, v);
            }
        }
        set(&mut vars, "LAZARET_ESCALATION", "1".into());
        // Appended to what the developer passes, never replacing it.
        let n: usize = vars
            .iter()
            .find(|(k, _)| k == "GIT_CONFIG_COUNT")
            .and_then(|(_, v)| v.to_str()?.parse().ok())
            .unwrap_or(0);
        set(
            &mut vars,
            &format!("GIT_CONFIG_KEY_{n}"),
            "safe.bareRepository".into(),
        );
        set(
            &mut vars,
            &format!("GIT_CONFIG_VALUE_{n}"),
            "explicit".into(),
        );
        set(&mut vars, "GIT_CONFIG_COUNT", (n + 1).to_string().into());
        vars
    }

    /// The developer's `PATH` without the entries the sandbox could
    /// write to or choose (relative ones name the sandbox's directory),
    /// and how many were left out.
    pub fn path(&self, developer: Option<&OsStr>) -> (OsString, usize) {
        let Some(developer) = developer else {
            return (FALLBACK_PATH.into(), 0);
        };
        let within = |p: &Path, top: &Path| {
            let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
            let top = top.canonicalize().unwrap_or_else(|_| top.to_path_buf());
            p.starts_with(top)
        };
        let mut kept: Vec<&[u8]> = Vec::new();
        let mut dropped = 0;
        for entry in developer.as_bytes().split(|b| *b == b':') {
            let p = Path::new(OsStr::from_bytes(entry));
            let risky = !p.is_absolute()
                || std::iter::once(&self.workspace)
                    .chain(&self.writable)
                    .any(|top| within(p, top));
            if risky {
                dropped += 1;
            } else {
                kept.push(entry);
            }
        }
        if kept.is_empty() {
            return (FALLBACK_PATH.into(), dropped);
        }
        (OsString::from_vec(kept.join(&b':')), dropped)
    }

    /// The names the prompt shows: what the command is given from this
    /// CLI's environment (never the values).
    pub fn shown_env(&self, lookup: &dyn Fn(&str) -> Option<OsString>) -> String {
        let (_, dropped) = self.path(lookup("PATH").as_deref());
        let mut parts = vec![match dropped {
            0 => "PATH (yours)".to_string(),
            n => format!("PATH (yours, without {n} entries the sandbox could write)"),
        }];
        for k in &self.pass_env {
            parts.push(match lookup(k) {
                Some(_) => k.clone(),
                None => format!("{k} (unset here)"),
            });
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn setting(ws: &Path) -> Setting {
        Setting {
            workspace: ws.to_path_buf(),
            pass_env: vec!["SSH_AUTH_SOCK".into(), "GPG_AGENT_INFO".into()],
            isolate_ignored: true,
            writable: vec![],
        }
    }

    #[test]
    fn relative_takes_normal_paths_beneath_the_workspace_only() {
        for (cwd, want) in [
            ("/workspace", Ok("")),
            ("/workspace/", Ok("")),
            ("/workspace/sub/dir", Ok("sub/dir")),
            ("/workspace/sub/", Ok("sub")),
            ("/workspacex", Err(NotMapped::Outside)),
            ("/", Err(NotMapped::Outside)),
            ("", Err(NotMapped::Outside)),
            ("workspace/sub", Err(NotMapped::Outside)),
            ("/tmp/workspace", Err(NotMapped::Outside)),
            ("/workspace/../etc", Err(NotMapped::NotNormal)),
            ("/workspace/a/../../etc", Err(NotMapped::NotNormal)),
            ("/workspace//a", Err(NotMapped::NotNormal)),
            ("/workspace/./a", Err(NotMapped::NotNormal)),
            ("/workspace/a\0b", Err(NotMapped::NotNormal)),
            ("/workspace/.git", Err(NotMapped::GitDir)),
            ("/workspace/sub/.git/hooks", Err(NotMapped::GitDir)),
        ] {
            assert_eq!(relative(cwd), want.map(PathBuf::from), "{cwd:?}");
        }
    }

    #[test]
    fn place_resolves_beneath_without_links_or_falls_back_with_a_note() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/dir")).unwrap();
        std::fs::create_dir_all(ws.join("build/x")).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::fs::write(ws.join(".gitignore"), "build/\n").unwrap();
        std::os::unix::fs::symlink(d.path().join("outside"), ws.join("out")).unwrap();
        std::os::unix::fs::symlink("sub", ws.join("inner")).unwrap();
        let s = setting(&ws);
        let p = s.place("/workspace/sub/dir");
        assert_eq!((p.shown, p.note), (ws.join("sub/dir"), None));
        assert!(p.fd.is_some());
        for (cwd, why) in [
            ("/workspace/out", "symbolic links"),
            ("/workspace/inner/dir", "symbolic links"),
            ("/workspace/missing", "symbolic links"),
            ("/workspace/../ws/sub", "`..`"),
            ("/workspace/build/x", "ignore rules"),
            ("/workspace/.git", "Git directory"),
        ] {
            let p = s.place(cwd);
            assert_eq!(p.shown, ws, "{cwd}");
            assert!(
                p.note.as_deref().is_some_and(|n| n.contains(why)),
                "{cwd}: {:?}",
                p.note
            );
        }
        // Not in the workspace at all (a volume, /tmp): the top, no note.
        let p = s.place("/tmp");
        assert_eq!((p.shown, p.note), (ws.clone(), None));
        // Without isolation, ignored directories are the host's own.
        let mut open = setting(&ws);
        open.isolate_ignored = false;
        assert_eq!(open.place("/workspace/build/x").shown, ws.join("build/x"));
    }

    #[test]
    fn the_environment_is_the_developers_never_the_sandboxs() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("bin")).unwrap();
        let vol = d.path().join("vol");
        std::fs::create_dir_all(&vol).unwrap();
        let mut s = setting(&ws);
        s.writable = vec![vol.clone()];
        let path = format!(
            "/home/dev/.cargo/bin:.::bin:{}:{}/x:/usr/bin",
            ws.join("bin").display(),
            vol.display()
        );
        let host: HashMap<&str, OsString> = [
            ("PATH", path.into()),
            ("HOME", "/home/dev".into()),
            ("SSH_AUTH_SOCK", "/run/user/1000/agent.sock".into()),
            ("NOT_LISTED", "x".into()),
            ("LAZARET_ESCALATION", "0".into()),
        ]
        .into_iter()
        .collect();
        let lookup = |k: &str| host.get(k).cloned();
        let env: HashMap<String, OsString> = s.environment(&lookup).into_iter().collect();
        assert_eq!(env["PATH"], "/home/dev/.cargo/bin:/usr/bin");
        assert_eq!(env["SSH_AUTH_SOCK"], "/run/user/1000/agent.sock");
        assert_eq!(env["HOME"], "/home/dev");
        assert_eq!(env["LAZARET_ESCALATION"], "1");
        assert_eq!(env["GIT_CONFIG_COUNT"], "1");
        assert_eq!(env["GIT_CONFIG_KEY_0"], "safe.bareRepository");
        assert_eq!(env["GIT_CONFIG_VALUE_0"], "explicit");
        assert!(!env.contains_key("NOT_LISTED"));
        assert!(!env.contains_key("GPG_AGENT_INFO"));
        assert_eq!(
            s.shown_env(&lookup),
            "PATH (yours, without 5 entries the sandbox could write), SSH_AUTH_SOCK, GPG_AGENT_INFO (unset here)"
        );
        // The developer's own Git configuration by variables is kept.
        s.pass_env.push("GIT_CONFIG_COUNT".into());
        let mut host2 = host.clone();
        host2.insert("GIT_CONFIG_COUNT", "2".into());
        let env: HashMap<String, OsString> = s
            .environment(&|k: &str| host2.get(k).cloned())
            .into_iter()
            .collect();
        assert_eq!(env["GIT_CONFIG_COUNT"], "3");
        assert_eq!(env["GIT_CONFIG_KEY_2"], "safe.bareRepository");
        // No PATH at all, or nothing usable in it: the fixed one.
        assert_eq!(s.path(None).0, FALLBACK_PATH);
        assert_eq!(s.path(Some(OsStr::new(".:bin"))), (FALLBACK_PATH.into(), 2));
    }
}
