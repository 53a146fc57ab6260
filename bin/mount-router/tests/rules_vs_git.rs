//! The ignore decision against `git check-ignore`, on a table of paths
//! covering every level of `.gitignore`, `info/exclude`,
//! `core.excludesFile`, negations, directory-only rules, anchoring, `**`,
//! escapes, character classes and non-UTF-8 names. No mount needed.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use lazaret_mount_router::{gitcfg, rules};
use rustix::fs::{Mode, OFlags};

fn rules_for(ws: &std::path::Path, home: &std::path::Path) -> rules::Rules {
    let env = |k: &str| -> Option<std::ffi::OsString> {
        match k {
            "HOME" => Some(home.into()),
            "GIT_CONFIG_NOSYSTEM" => Some("1".into()),
            "GIT_CONFIG_GLOBAL" => Some("/dev/null".into()),
            _ => None,
        }
    };
    let setup = gitcfg::discover(ws, &gitcfg::ExcludesChoice::FromConfig, &env).unwrap();
    let fd = rustix::fs::open(ws, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    rules::Rules::new(
        fd,
        setup.info_exclude,
        setup.excludes_file.map(rules::Source::Absolute),
        setup.ignore_case,
        lazaret_mount_router::baseline::Baseline::in_memory(),
    )
}

#[test]
fn table_agrees_with_git_check_ignore() {
    if which("git").is_none() {
        return skip("git is not installed");
    }
    let (tmp, ws) = fixture_repo();
    materialise(&ws, b"x\n");
    let git = git_ignored(&ws);
    let table = table();
    assert!(table.len() >= 30, "the table must cover at least 30 paths");
    let r = rules_for(&ws, tmp.path());
    let mut bad = Vec::new();
    for ((p, want), (_, g)) in table.iter().zip(&git) {
        let dir = p.ends_with(b"/");
        let bare = p.strip_suffix(b"/").unwrap_or(p);
        let got = r.is_ignored(bare, dir);
        if got != *g || got != *want {
            bad.push(format!(
                "{}: router {got}, git {g}, table {want}",
                String::from_utf8_lossy(p)
            ));
        }
    }
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}

#[test]
fn dot_git_is_never_ignored_but_ignored_parents_win() {
    let (tmp, ws) = fixture_repo();
    std::fs::write(ws.join(".gitignore"), "*\n").unwrap();
    let r = rules_for(&ws, tmp.path());
    assert!(!r.is_ignored(b".git", true));
    assert!(!r.is_ignored(b".git/config", false));
    assert!(!r.is_ignored(b".git/info/exclude", false));
    std::fs::write(ws.join(".gitignore"), "vendor/\n").unwrap();
    r.invalidate();
    assert!(
        !r.is_ignored(b"sub/.git", true),
        "a nested repository's .git stays on the host"
    );
    assert!(
        r.is_ignored(b"vendor/x/.git", true),
        "beneath an ignored directory"
    );
}

#[test]
fn live_changes_apply_after_invalidate_and_after_the_revalidation_window() {
    let (tmp, ws) = fixture_repo();
    let r = rules_for(&ws, tmp.path());
    assert!(!r.is_ignored(b"new.dat", false));
    std::fs::write(ws.join(".gitignore"), format!("{GITIGNORE}*.dat\n")).unwrap();
    r.invalidate();
    assert!(r.is_ignored(b"new.dat", false));
    // A host-side edit, without invalidate: seen after the window.
    std::fs::write(ws.join(".gitignore"), GITIGNORE).unwrap();
    std::thread::sleep(rules::REVALIDATE + std::time::Duration::from_millis(20));
    assert!(!r.is_ignored(b"new.dat", false));
    // A new .gitignore in a subdirectory, and its removal.
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/.gitignore"), "gen/\n").unwrap();
    r.invalidate();
    assert!(r.is_ignored(b"src/gen", true));
    std::fs::remove_file(ws.join("src/.gitignore")).unwrap();
    r.invalidate();
    assert!(!r.is_ignored(b"src/gen", true));
}

#[test]
fn symlinked_gitignore_is_not_followed() {
    let (tmp, ws) = fixture_repo();
    std::fs::write(tmp.path().join("outside"), "*.secret\n").unwrap();
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside"), ws.join("d/.gitignore")).unwrap();
    let r = rules_for(&ws, tmp.path());
    assert!(!r.is_ignored(b"d/x.secret", false));
}

#[test]
fn ignore_case_follows_core_ignorecase_like_git() {
    if which("git").is_none() {
        return skip("git is not installed");
    }
    let (tmp, ws) = fixture_repo();
    git(&ws, &["config", "core.ignoreCase", "true"]);
    std::fs::write(ws.join("A.LOG"), "x").unwrap();
    std::fs::create_dir_all(ws.join("NODE_MODULES")).unwrap();
    let r = rules_for(&ws, tmp.path());
    let out = git_cmd(&ws)
        .args(["check-ignore", "--no-index", "A.LOG", "NODE_MODULES"])
        .output()
        .unwrap();
    let g = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(r.is_ignored(b"A.LOG", false), g.contains("A.LOG"));
    assert_eq!(
        r.is_ignored(b"NODE_MODULES", true),
        g.contains("NODE_MODULES")
    );
    assert!(r.is_ignored(b"A.LOG", false));
}

#[test]
fn linked_worktree_uses_the_common_info_exclude() {
    if which("git").is_none() {
        return skip("git is not installed");
    }
    let (tmp, ws) = fixture_repo();
    let wt = tmp.path().join("wt");
    git(&ws, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let env = |k: &str| -> Option<std::ffi::OsString> {
        match k {
            "HOME" => Some(tmp.path().into()),
            "GIT_CONFIG_NOSYSTEM" => Some("1".into()),
            _ => None,
        }
    };
    let setup = gitcfg::discover(&wt, &gitcfg::ExcludesChoice::FromConfig, &env).unwrap();
    assert!(
        matches!(&setup.info_exclude, Some(rules::Source::Absolute(p)) if p.ends_with(".git/info/exclude")),
        "{setup:?}"
    );
    assert!(setup
        .excludes_file
        .as_deref()
        .is_some_and(|p| p.ends_with("global-ignore")));
    let fd = rustix::fs::open(&wt, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let r = rules::Rules::new(
        fd,
        setup.info_exclude,
        setup.excludes_file.map(rules::Source::Absolute),
        false,
        lazaret_mount_router::baseline::Baseline::in_memory(),
    );
    assert!(r.is_ignored(b"secret.txt", false));
    assert!(r.is_ignored(b"x.swp", false));
    assert!(r.is_ignored(b"a.log", false));
}
