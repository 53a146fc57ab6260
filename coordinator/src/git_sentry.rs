//! Git Sentry: the mount layout that keeps Git working inside the sandbox
//! while the sandbox cannot change what the host's Git reads as
//! configuration or runs as hooks (SR-4).
//!
//! `.git` is its own mount, so it cannot be renamed or replaced from inside
//! (a mount point is busy). Inside it, each file through which Git finds
//! configuration or another Git directory (`config`, `config.worktree`,
//! `commondir`) is bound read-only, and each `hooks` directory is hidden
//! behind sandbox-local tmpfs. The same holds for the Git directories of
//! submodules (`.git/modules/...`) and linked worktrees
//! (`.git/worktrees/...`), and for the `.git` files of submodule and
//! worktree checkouts inside the workspace, which name their Git directory.
//!
//! Left to others: a repository the sandbox creates from nothing (a new
//! `sub/.git`) is the sandbox's own; the Ignored Workspace State router
//! and the developer's `safe.directory` policy are the defence there.

use lazaret_protocol::plan::{MountKind, MountPurpose, PlannedMount};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum GitSentryError {
    #[error("{path} is a symbolic link; Lazaret mounts only a real .git directory or file: replace the link with the directory it points to")]
    GitIsSymlink { path: PathBuf },
    #[error("{path} has no config file, so the sandbox could create one that the host's Git would read: run `git init` in the workspace to repair it")]
    NoConfig { path: PathBuf },
    #[error("cannot inspect {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GitSentryError + '_ {
    move |source| GitSentryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Host-side preparation the plan relies on: `hooks` directories must exist
/// to be mount points (an empty directory, harmless to the host's Git).
pub fn prepare_host(workspace: &Path) -> Result<(), GitSentryError> {
    let git = workspace.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&git) else {
        return Ok(());
    };
    if !meta.is_dir() {
        return Ok(());
    }
    for dir in git_dirs(&git)? {
        let hooks = dir.join("hooks");
        match std::fs::symlink_metadata(&hooks) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&hooks).map_err(io(&hooks))?
            }
            _ => {}
        }
    }
    Ok(())
}

/// The Git directories below `.git` that have their own hooks and config:
/// `.git` itself and every submodule Git directory under `.git/modules`.
fn git_dirs(git: &Path) -> Result<Vec<PathBuf>, GitSentryError> {
    let mut out = vec![git.to_path_buf()];
    let mut stack = vec![git.join("modules")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd {
            let e = e.map_err(io(&dir))?;
            let p = e.path();
            if !e.file_type().map_err(io(&p))?.is_dir() {
                continue;
            }
            if p.join("HEAD").is_file() {
                out.push(p.clone());
                // Nested submodules live in <gitdir>/modules.
                stack.push(p.join("modules"));
            } else {
                // Submodule names may contain slashes.
                stack.push(p);
            }
        }
    }
    Ok(out)
}

/// The mounts of the workspace and its Git Sentry, in mount order.
pub fn plan(workspace: &Path) -> Result<Vec<PlannedMount>, GitSentryError> {
    let mut mounts = vec![PlannedMount {
        destination: "/workspace".into(),
        kind: MountKind::Bind {
            source: workspace.to_path_buf(),
            read_only: false,
        },
        purpose: MountPurpose::Workspace,
    }];
    let git = workspace.join(".git");
    let meta = match std::fs::symlink_metadata(&git) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(mounts),
        r => r.map_err(io(&git))?,
    };
    let to_sandbox = |p: &Path| -> String {
        let rel = p.strip_prefix(workspace).expect("beneath the workspace");
        format!("/workspace/{}", rel.display())
    };
    let ro = |p: &Path| PlannedMount {
        destination: to_sandbox(p),
        kind: MountKind::Bind {
            source: p.to_path_buf(),
            read_only: true,
        },
        purpose: MountPurpose::GitSentry,
    };
    if meta.file_type().is_symlink() {
        return Err(GitSentryError::GitIsSymlink { path: git });
    }
    if meta.is_file() {
        // A `.git` file names the Git directory elsewhere (this workspace is
        // a linked worktree or a submodule checkout). It stays read-only so
        // the sandbox cannot point it anywhere else.
        mounts.push(ro(&git));
        return Ok(mounts);
    }
    if !git.join("config").is_file() {
        return Err(GitSentryError::NoConfig { path: git });
    }
    mounts.push(PlannedMount {
        destination: "/workspace/.git".into(),
        kind: MountKind::Bind {
            source: git.clone(),
            read_only: false,
        },
        purpose: MountPurpose::GitSentry,
    });
    let mut protected: Vec<PlannedMount> = Vec::new();
    for dir in git_dirs(&git)? {
        for name in ["config", "config.worktree", "commondir"] {
            let f = dir.join(name);
            if f.is_file() {
                protected.push(ro(&f));
            }
        }
        let hooks = dir.join("hooks");
        if hooks.is_dir() {
            protected.push(PlannedMount {
                destination: to_sandbox(&hooks),
                kind: MountKind::Tmpfs,
                purpose: MountPurpose::GitSentry,
            });
        }
    }
    // Linked worktrees: their Git directories point back to the common
    // directory, and their checkouts' `.git` files point to them.
    if let Ok(rd) = std::fs::read_dir(git.join("worktrees")) {
        for e in rd.flatten() {
            let dir = e.path();
            for name in ["config.worktree", "commondir", "gitdir"] {
                let f = dir.join(name);
                if f.is_file() {
                    protected.push(ro(&f));
                }
            }
            if let Ok(target) = std::fs::read_to_string(dir.join("gitdir")) {
                let dotgit = PathBuf::from(target.trim());
                if dotgit.starts_with(workspace) && dotgit.is_file() {
                    protected.push(ro(&dotgit));
                }
            }
        }
    }
    // Submodule checkouts: `<path>/.git` files naming `.git/modules/...`.
    for p in submodule_dotgit_files(workspace) {
        protected.push(ro(&p));
    }
    protected.sort_by(|a, b| a.destination.cmp(&b.destination));
    protected.dedup_by(|a, b| a.destination == b.destination);
    mounts.extend(protected);
    Ok(mounts)
}

/// `.git` files of the submodule checkouts recorded in the host index.
fn submodule_dotgit_files(workspace: &Path) -> Vec<PathBuf> {
    // `ls-files --stage` reads only the index; gitlinks have mode 160000.
    let Ok(out) = std::process::Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["ls-files", "--stage", "-z"])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    out.stdout
        .split(|b| *b == 0)
        .filter_map(|rec| {
            let rec = std::str::from_utf8(rec).ok()?;
            let (meta, path) = rec.split_once('\t')?;
            meta.starts_with("160000 ")
                .then(|| workspace.join(path).join(".git"))
        })
        .filter(|p| p.is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    fn dests(m: &[PlannedMount]) -> Vec<(String, bool)> {
        m.iter()
            .map(|m| {
                let ro = match &m.kind {
                    MountKind::Bind { read_only, .. } => *read_only,
                    MountKind::Tmpfs => true,
                };
                (m.destination.clone(), ro)
            })
            .collect()
    }

    #[test]
    fn plain_directory_has_only_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let m = plan(d.path()).unwrap();
        assert_eq!(dests(&m), vec![("/workspace".to_string(), false)]);
    }

    #[test]
    fn repository_layout() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        git(&w, &["init", "-q"]);
        prepare_host(&w).unwrap();
        let m = plan(&w).unwrap();
        let ds = dests(&m);
        assert_eq!(ds[0], ("/workspace".into(), false));
        assert_eq!(ds[1], ("/workspace/.git".into(), false));
        assert!(ds.contains(&("/workspace/.git/config".into(), true)));
        let hooks = m
            .iter()
            .find(|m| m.destination == "/workspace/.git/hooks")
            .unwrap();
        assert_eq!(hooks.kind, MountKind::Tmpfs);
    }

    #[test]
    fn missing_hooks_directory_is_created() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        git(&w, &["init", "-q"]);
        std::fs::remove_dir_all(w.join(".git/hooks")).unwrap();
        prepare_host(&w).unwrap();
        assert!(w.join(".git/hooks").is_dir());
    }

    #[test]
    fn symlinked_git_and_missing_config_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        std::fs::create_dir(w.join("real")).unwrap();
        std::os::unix::fs::symlink(w.join("real"), w.join(".git")).unwrap();
        assert!(matches!(plan(&w), Err(GitSentryError::GitIsSymlink { .. })));
        std::fs::remove_file(w.join(".git")).unwrap();
        std::fs::create_dir(w.join(".git")).unwrap();
        assert!(matches!(plan(&w), Err(GitSentryError::NoConfig { .. })));
    }

    #[test]
    fn submodules_and_worktrees_are_protected() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let sub = root.join("subsrc");
        let w = root.join("w");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&w).unwrap();
        git(&sub, &["init", "-q"]);
        git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
        git(&w, &["init", "-q"]);
        git(&w, &["commit", "-q", "--allow-empty", "-m", "w"]);
        git(
            &w,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                sub.to_str().unwrap(),
                "lib/sub",
            ],
        );
        git(&w, &["worktree", "add", "-q", "wt"]);
        prepare_host(&w).unwrap();
        let ds = dests(&plan(&w).unwrap());
        for (want, ro) in [
            ("/workspace/.git/modules/lib/sub/config", true),
            ("/workspace/.git/modules/lib/sub/hooks", true),
            ("/workspace/lib/sub/.git", true),
            ("/workspace/.git/worktrees/wt/commondir", true),
            ("/workspace/.git/worktrees/wt/gitdir", true),
            ("/workspace/wt/.git", true),
        ] {
            assert!(
                ds.contains(&(want.to_string(), ro)),
                "missing {want} in {ds:?}"
            );
        }
    }

    #[test]
    fn dotgit_file_is_read_only() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        std::fs::write(w.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let ds = dests(&plan(&w).unwrap());
        assert_eq!(ds[1], ("/workspace/.git".into(), true));
    }
}
