//! A workspace whose `.git` is a `gitdir:` file: a linked worktree (its
//! Git directory is `<common>/worktrees/<name>`) or a submodule checkout
//! (its Git directory is the superproject's `.git/modules/<name>`, its
//! own common directory). Found by reading the two pointer files Git
//! reads, `.git` and `commondir`, never by running Git.
//!
//! Both pointers are names Git Sentry never lets a sandbox write (the
//! workspace's `.git` and every Git directory's `commondir` are
//! read-only inside), so what is read here is the host's.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The largest pointer file read (Git's own are one line).
const MAX_POINTER: u64 = 4096;

/// Where a linked workspace's Git directories are on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedGit {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// The workspace's own Git directory, canonical.
    pub git_dir: PathBuf,
    /// The directory to present to the sandbox: the common directory when
    /// `git_dir` lies beneath it (a linked worktree), else `git_dir`
    /// itself (a submodule checkout, its own common directory).
    pub present: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkedError {
    #[error("{path} is not a valid gitdir file: {reason}; repair the link (`git worktree repair`, or `git submodule absorbgitdirs` in the superproject)")]
    GitFile { path: PathBuf, reason: String },
    #[error("{path} names the Git directory {git_dir}, which {reason}; repair the link (`git worktree repair`) or run `git worktree prune` in the main repository")]
    Missing {
        path: PathBuf,
        git_dir: PathBuf,
        reason: String,
    },
    #[error("the Git directory {git_dir} of workspace {workspace} {reason}; Lazaret presents only a Git directory that lies outside the workspace and holds its own common directory, or lies beneath it")]
    Layout {
        workspace: PathBuf,
        git_dir: PathBuf,
        reason: String,
    },
}

/// Reads a one-line pointer file (`.git`, `commondir`): at most
/// [`MAX_POINTER`] bytes, trailing line ends removed as Git does.
fn read_pointer(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut text = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_POINTER + 1)
        .read_to_end(&mut text)?;
    if text.len() as u64 > MAX_POINTER {
        return Err(std::io::Error::other(format!(
            "it is larger than {MAX_POINTER} bytes"
        )));
    }
    while matches!(text.last(), Some(b'\n' | b'\r')) {
        text.pop();
    }
    Ok(text)
}

/// The Git directory named by the `gitdir:` file `dot_git` (relative
/// names are relative to the file's directory), not resolved further.
pub fn read_gitfile(dot_git: &Path) -> Result<PathBuf, LinkedError> {
    let bad = |reason: String| LinkedError::GitFile {
        path: dot_git.to_path_buf(),
        reason,
    };
    let text = read_pointer(dot_git).map_err(|e| bad(e.to_string()))?;
    let rel = text
        .strip_prefix(b"gitdir: ")
        .ok_or_else(|| bad("it does not start with `gitdir: `".into()))?;
    if rel.is_empty() || rel.contains(&b'\n') || rel.contains(&0) {
        return Err(bad("it names no single path".into()));
    }
    let base = dot_git.parent().unwrap_or(Path::new("/"));
    Ok(base.join(OsStr::from_bytes(rel)))
}

/// The common directory of the Git directory `gd`: its `commondir` file
/// (relative to `gd`), else `gd` itself. Not resolved further.
pub fn common_dir(gd: &Path) -> PathBuf {
    match read_pointer(&gd.join("commondir")) {
        Ok(t) if !t.is_empty() => gd.join(OsStr::from_bytes(&t)),
        _ => gd.to_path_buf(),
    }
}

/// What Git Sentry must present for `workspace` when its `.git` is a
/// `gitdir:` file; `None` when `.git` is a directory, a symbolic link, or
/// absent.
pub fn linked(workspace: &Path) -> Result<Option<LinkedGit>, LinkedError> {
    let workspace = &workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let dot_git = workspace.join(".git");
    match std::fs::symlink_metadata(&dot_git) {
        Ok(m) if m.is_file() => {}
        _ => return Ok(None),
    }
    let named = read_gitfile(&dot_git)?;
    let missing = |reason: String| LinkedError::Missing {
        path: dot_git.clone(),
        git_dir: named.clone(),
        reason,
    };
    let git_dir = named
        .canonicalize()
        .map_err(|e| missing(format!("cannot be resolved ({e})")))?;
    if !git_dir.join("HEAD").is_file() {
        return Err(missing("holds no HEAD".into()));
    }
    let layout = |git_dir: &Path, reason: String| LinkedError::Layout {
        workspace: workspace.to_path_buf(),
        git_dir: git_dir.to_path_buf(),
        reason,
    };
    let common = common_dir(&git_dir).canonicalize().map_err(|e| {
        layout(
            &git_dir,
            format!("names a common directory that cannot be resolved ({e})"),
        )
    })?;
    let present = if common == git_dir || git_dir.starts_with(&common) {
        common
    } else {
        return Err(layout(
            &git_dir,
            format!("has its common directory {} elsewhere", common.display()),
        ));
    };
    if present.starts_with(workspace) || workspace.starts_with(&present) {
        return Err(layout(
            &present,
            "overlaps the workspace (Git Sentry guards only a directory named .git there)".into(),
        ));
    }
    for p in [&present, &git_dir, workspace] {
        if p.to_str().is_none_or(|s| s.contains('\n')) {
            return Err(layout(
                p,
                "has a name that is not UTF-8 or holds a line break".into(),
            ));
        }
    }
    Ok(Some(LinkedGit {
        workspace: workspace.clone(),
        git_dir,
        present,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &Path) {
        std::fs::create_dir_all(dir.join("objects")).unwrap();
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    #[test]
    fn a_linked_worktree_presents_its_common_directory() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        repo(&t.join("main/.git"));
        repo(&t.join("main/.git/worktrees/wt"));
        std::fs::write(t.join("main/.git/worktrees/wt/commondir"), "../..\n").unwrap();
        std::fs::create_dir(t.join("wt")).unwrap();
        std::fs::write(
            t.join("wt/.git"),
            format!("gitdir: {}\n", t.join("main/.git/worktrees/wt").display()),
        )
        .unwrap();
        let l = linked(&t.join("wt")).unwrap().unwrap();
        assert_eq!(l.git_dir, t.join("main/.git/worktrees/wt"));
        assert_eq!(l.present, t.join("main/.git"));
    }

    #[test]
    fn a_submodule_checkout_presents_its_own_git_directory() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        repo(&t.join("super/.git"));
        repo(&t.join("super/.git/modules/lib/sub"));
        std::fs::create_dir_all(t.join("super/lib/sub")).unwrap();
        std::fs::write(
            t.join("super/lib/sub/.git"),
            "gitdir: ../../.git/modules/lib/sub\r\n",
        )
        .unwrap();
        let l = linked(&t.join("super/lib/sub")).unwrap().unwrap();
        assert_eq!(l.git_dir, t.join("super/.git/modules/lib/sub"));
        assert_eq!(l.present, l.git_dir);
    }

    #[test]
    fn a_git_directory_or_none_is_not_linked() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(linked(t.path()).unwrap(), None);
        repo(&t.path().join(".git"));
        assert_eq!(linked(t.path()).unwrap(), None);
    }

    #[test]
    fn broken_or_overlapping_links_are_clear_errors() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let ws = t.join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join(".git"), "nonsense\n").unwrap();
        assert!(matches!(linked(&ws), Err(LinkedError::GitFile { .. })));
        std::fs::write(ws.join(".git"), "gitdir: /nonexistent/x\n").unwrap();
        let e = linked(&ws).unwrap_err();
        assert!(matches!(e, LinkedError::Missing { .. }), "{e}");
        // A Git directory inside the workspace under another name.
        repo(&ws.join("real-git"));
        std::fs::write(ws.join(".git"), "gitdir: real-git\n").unwrap();
        let e = linked(&ws).unwrap_err();
        assert!(matches!(e, LinkedError::Layout { .. }), "{e}");
        assert!(e.to_string().contains("overlaps the workspace"), "{e}");
        // A common directory elsewhere than above the Git directory.
        repo(&t.join("gd"));
        repo(&t.join("other"));
        std::fs::write(t.join("gd/commondir"), "../other\n").unwrap();
        std::fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", t.join("gd").display()),
        )
        .unwrap();
        let e = linked(&ws).unwrap_err();
        assert!(e.to_string().contains("elsewhere"), "{e}");
        // Oversized.
        std::fs::write(ws.join(".git"), vec![b'a'; 5000]).unwrap();
        assert!(matches!(linked(&ws), Err(LinkedError::GitFile { .. })));
    }
}
