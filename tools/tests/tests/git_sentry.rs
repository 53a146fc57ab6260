//! Git Sentry, as the attacker inside would try it: nothing the sandbox
//! writes, through any file operation and including names that did not
//! exist at start, makes the host's Git read a configuration, hook,
//! attribute or Git-directory redirection of its making, after a Domain
//! restart too. Each forged configuration would make host Git create a
//! marker file on the host (`core.fsmonitor` runs on `git status`, hooks on
//! `git commit`); the marker must never appear.

use lazaret_tests::{require_env, text, Workspace};
use std::path::PathBuf;

/// A host path the forged configuration would create.
fn marker(ws: &Workspace<'_>) -> PathBuf {
    ws.base.join("PWNED")
}

/// A Git configuration that runs `touch MARKER` on the host's next
/// `git status`, and a hook that does on `git commit`.
fn forged(ws: &Workspace<'_>) -> (String, String) {
    let m = marker(ws).display().to_string();
    (
        format!("[core]\\n\\tfsmonitor = touch {m} #\\n\\thooksPath = /tmp\\n[alias]\\n\\tstatus = !touch {m}\\n"),
        format!("#!/bin/sh\\ntouch {m}\\n"),
    )
}

/// Restarts the Domain, then runs host Git in the workspace and in each of
/// `dirs` (relative), and asserts that nothing the sandbox wrote ran.
fn host_git_runs_nothing(ws: &Workspace<'_>, dirs: &[&str]) {
    let out = ws.run_sh("true");
    assert!(out.status.success(), "restart: {}", text(&out.stderr));
    let mut script = String::from(
        "git status >/dev/null 2>&1; git add -A >/dev/null 2>&1; \
         git commit -q --allow-empty -m host >/dev/null 2>&1; \
         git checkout -q -b host-branch >/dev/null 2>&1; git gc -q >/dev/null 2>&1; \
         git log --format=%s -1; ",
    );
    for d in dirs {
        script.push_str(&format!(
            "git -C '{d}' status >/dev/null 2>&1; git -C '{d}' commit -q --allow-empty -m h >/dev/null 2>&1; "
        ));
    }
    let host = ws.host_sh(&script);
    assert!(
        text(&host.stdout).starts_with("host\n"),
        "host git no longer works: {} {}",
        text(&host.stdout),
        text(&host.stderr)
    );
    assert!(
        !marker(ws).exists(),
        "host git ran something the sandbox wrote"
    );
}

/// Runs `script` inside and returns its stdout; each attempt prints
/// `DID <what>` only when it succeeded.
fn inside(ws: &Workspace<'_>, script: &str) -> String {
    let out = ws.run_sh(&format!("cd /workspace; {script}"));
    eprintln!("inside: {}", text(&out.stderr));
    text(&out.stdout)
}

fn assert_none(out: &str, what: &[&str]) {
    for w in what {
        assert!(
            !out.contains(&format!("DID {w}\n")),
            "{w} succeeded inside:\n{out}"
        );
    }
}

#[test]
fn new_names_in_the_git_directory_cannot_redirect_host_git() {
    let env = require_env!();
    let ws = env.workspace("sentry-new");
    let (cfg, _) = forged(&ws);
    let config_before = std::fs::read(ws.path.join(".git/config")).unwrap();
    let out = inside(
        &ws,
        &format!(
            "c='{cfg}'; \
             printf \"$c\" > .git/config.worktree && echo DID config.worktree; \
             printf '..\\n' > .git/commondir && echo DID commondir; \
             printf '* filter=x\\n' > .git/info/attributes && echo DID attributes; \
             mkdir -p .git/objects/info; printf '/tmp\\n' > .git/objects/info/alternates && echo DID alternates; \
             mkdir .git/remotes && echo DID remotes; \
             ln -s /tmp/x .git/config.worktree && echo DID symlink; \
             printf \"$c\" > x && ln x .git/config.worktree && echo DID hardlink-to; \
             mv x .git/config && echo DID rename-onto-config; \
             printf \"$c\" > y && mv y .git/config.worktree && echo DID rename-new; \
             ln .git/config z && echo DID hardlink-from; \
             printf \"$c\" >> .git/config && echo DID append-config; \
             chmod 666 .git/config && echo DID chmod-config; \
             true > .git/config && echo DID truncate-config; \
             mv .git/config .git/config.old && echo DID rename-config; \
             rm -f .git/config && echo DID unlink-config; \
             mv .git .git-moved && echo DID rename-git; \
             rm -rf .git/info; mkdir d && printf '* filter=x\\n' > d/attributes && mv d .git/info && echo DID replace-info; \
             mkdir d2 && ln -s ../d2 .git/info && echo DID symlink-info; \
             mkdir d3 && printf \"$c\" > d3/config && mv d3 .git/info2 && echo DID rename-dir-in; \
             printf 'x\\n' > .git/new-name && echo DID new-name; \
             git config core.fsmonitor 'touch /tmp/m' && echo PRIVATE-CONFIG; \
             git status >/dev/null && echo GIT-OK"
        ),
    );
    assert_none(
        &out,
        &[
            "commondir",
            "attributes",
            "alternates",
            "remotes",
            "symlink",
            "hardlink-to",
            "rename-onto-config",
            "hardlink-from",
            "rename-git",
            "replace-info",
            "symlink-info",
            "rename-dir-in",
            "new-name",
        ],
    );
    assert!(out.contains("GIT-OK"), "git broke inside: {out}");
    // Git inside rewrites its configuration into a private copy.
    assert!(out.contains("PRIVATE-CONFIG"), "{out}");
    assert_eq!(
        std::fs::read(ws.path.join(".git/config")).unwrap(),
        config_before,
        "the host's .git/config changed"
    );
    for p in [
        ".git/config.worktree",
        ".git/commondir",
        ".git/info/attributes",
        ".git/objects/info/alternates",
        ".git/remotes",
        ".git/info2",
        ".git/info/attributes",
        ".git/new-name",
    ] {
        assert!(
            std::fs::symlink_metadata(ws.path.join(p)).is_err(),
            "{p} reached the host"
        );
    }
    host_git_runs_nothing(&ws, &[]);
}

#[test]
fn hooks_and_repositories_made_inside_stay_in_the_sandbox() {
    let env = require_env!();
    let ws = env.workspace("sentry-nested");
    let (cfg, hook) = forged(&ws);
    let hooks_before = ws.host_sh("ls -a .git/hooks").stdout;
    let out = inside(
        &ws,
        &format!(
            "printf '{hook}' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo DID hook; \
             git init -q sub && printf '{cfg}' >> sub/.git/config && echo DID nested; \
             mkdir -p a/b && printf 'gitdir: /tmp/elsewhere\\n' > a/b/.git && echo DID gitfile; \
             mkdir -p .git/modules/evil && printf '{cfg}' > .git/modules/evil/config && echo DID new-module"
        ),
    );
    // Inside, these are the sandbox's own to make.
    for w in ["hook", "nested", "gitfile", "new-module"] {
        assert!(out.contains(&format!("DID {w}\n")), "{w} failed: {out}");
    }
    assert_eq!(ws.host_sh("ls -a .git/hooks").stdout, hooks_before);
    for p in ["sub/.git", "a/b/.git", ".git/modules/evil"] {
        assert!(
            std::fs::symlink_metadata(ws.path.join(p)).is_err(),
            "{p} reached the host"
        );
    }
    // They persist for the sandbox across a restart.
    let again = inside(
        &ws,
        "test -x .git/hooks/pre-commit && git -C sub rev-parse --git-dir && echo STILL",
    );
    assert!(again.contains("STILL"), "{again}");
    host_git_runs_nothing(&ws, &["sub", "a/b"]);
}

#[test]
fn submodule_and_worktree_git_directories_are_protected() {
    let env = require_env!();
    let ws = env.workspace("sentry-sub");
    let setup = ws.host_sh(
        "set -e; git init -q ../subsrc && git -C ../subsrc commit -q --allow-empty -m s; \
         git -c protocol.file.allow=always submodule add -q ../subsrc lib/sub; \
         git commit -qm sub; git worktree add -q wt",
    );
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    let (cfg, hook) = forged(&ws);
    let out = inside(
        &ws,
        &format!(
            "c='{cfg}'; \
             printf \"$c\" >> .git/modules/lib/sub/config && echo DID sub-config; \
             printf \"$c\" > .git/modules/lib/sub/config.worktree && echo DID sub-config.worktree; \
             printf '{hook}' > .git/modules/lib/sub/hooks/post-checkout && echo HOOK-PRIVATE; \
             printf '..\\n' > .git/worktrees/wt/commondir && echo DID wt-commondir; \
             printf \"$c\" > .git/worktrees/wt/config.worktree && echo DID wt-config.worktree; \
             printf 'gitdir: /tmp\\n' > lib/sub/.git && echo DID sub-gitfile; \
             printf 'gitdir: /tmp\\n' > wt/.git && echo DID wt-gitfile; \
             mv lib/sub lib/sub2 && echo DID rename-sub; \
             mv lib lib2 && echo DID rename-parent; \
             mv .git/modules .git/refs/m && echo DID rename-modules; \
             rm -rf .git/worktrees/wt && echo DID rm-worktree; \
             git -C lib/sub status >/dev/null && echo SUB-OK"
        ),
    );
    assert_none(
        &out,
        &[
            "sub-config",
            "wt-commondir",
            "sub-gitfile",
            "wt-gitfile",
            "rename-sub",
            "rename-parent",
            "rename-modules",
            "rm-worktree",
        ],
    );
    assert!(out.contains("HOOK-PRIVATE"), "{out}");
    for p in [
        ".git/modules/lib/sub/config.worktree",
        ".git/worktrees/wt/config.worktree",
    ] {
        assert!(
            std::fs::symlink_metadata(ws.path.join(p)).is_err(),
            "{p} reached the host"
        );
    }
    let sub_cfg = std::fs::read_to_string(ws.path.join(".git/modules/lib/sub/config")).unwrap();
    assert!(!sub_cfg.contains("fsmonitor"), "{sub_cfg}");
    assert!(out.contains("SUB-OK"), "git in the submodule broke: {out}");
    assert!(!ws
        .path
        .join(".git/modules/lib/sub/hooks/post-checkout")
        .exists());
    host_git_runs_nothing(&ws, &["lib/sub", "wt"]);
}

#[test]
fn git_inside_keeps_working_and_stays_live_both_ways() {
    let env = require_env!();
    let ws = env.workspace("sentry-git");
    let setup = ws.host_sh(
        "set -e; git init -q ../subsrc && git -C ../subsrc commit -q --allow-empty -m s1 && \
         git -C ../subsrc commit -q --allow-empty -m s2; \
         git -c protocol.file.allow=always submodule add -q ../subsrc lib/sub; git commit -qm sub",
    );
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    let out = ws.run_sh(
        "set -e; cd /workspace; export GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=A GIT_COMMITTER_EMAIL=a@x; \
         main=$(git branch --show-current); \
         git checkout -q -b feature; echo f > f.txt; git add f.txt; git commit -qm f; \
         git checkout -q \"$main\"; echo m > m.txt; git add m.txt; git commit -qm m; \
         git merge -q --no-edit feature; \
         git checkout -q -b topic; echo t > t.txt; git add t.txt; git commit -qm t; \
         git checkout -q \"$main\"; echo m2 > m2.txt; git add m2.txt; git commit -qm m2; \
         git checkout -q topic; git rebase -q \"$main\"; \
         echo dirty >> README; git stash -q; git stash pop -q; git checkout -q README; \
         git branch -q tmp && git branch -q -D tmp; git tag v1; \
         git gc -q; \
         git init -q /tmp/src && git -C /tmp/src commit -q --allow-empty -m remote; \
         git fetch -q /tmp/src HEAD:refs/remotes/src/main; \
         git -C lib/sub checkout -q HEAD~1; git submodule update -q; \
         test \"$(git -C lib/sub log --format=%s -1)\" = s2; \
         git checkout -q \"$main\"; git log --oneline | wc -l; echo INSIDE-OK",
    );
    assert!(
        text(&out.stdout).contains("INSIDE-OK"),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The host sees the refs, objects and index the sandbox wrote.
    let host = ws.host_sh(
        "git fsck --no-progress && git log --oneline --all | wc -l && git tag && git status --porcelain -uno",
    );
    assert!(host.status.success(), "{}", text(&host.stderr));
    let h = text(&host.stdout);
    assert!(h.contains("v1"), "{h}");
    // And the sandbox sees what the host commits.
    let c = ws.host_sh("echo host > host.txt && git add host.txt && git commit -qm from-host");
    assert!(c.status.success(), "{}", text(&c.stderr));
    let out = ws.run_sh("cd /workspace && git log --format=%s -1 && git status --porcelain -uno");
    assert_eq!(text(&out.stdout), "from-host\n", "{}", text(&out.stderr));
}

#[test]
fn hook_managers_hooks_path_and_protected_paths_are_read_only() {
    let env = require_env!();
    let ws = env.workspace("sentry-hooks");
    // The host runs husky (its hook names it), hooks from `.githooks`, and
    // the profile protects one more file.
    let setup = ws.host_sh(
        "set -e; mkdir -p .husky .githooks tools; \
         printf '#!/bin/sh\\nexit 0\\n' > .husky/pre-commit; \
         printf '#!/bin/sh\\n# husky\\n. .husky/pre-commit\\n' > .githooks/pre-commit; \
         chmod +x .githooks/pre-commit; \
         printf 'echo ci\\n' > tools/ci.sh; \
         git add -A && git commit -qm hooks && git config core.hooksPath .githooks",
    );
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    ws.write_config("[profiles.default]\nprotected_paths = [\"tools/ci.sh\"]\n");
    let (_, hook) = forged(&ws);
    let out = inside(
        &ws,
        &format!(
            "printf '{hook}' > .githooks/pre-commit && echo DID githooks; \
             printf '{hook}' > .githooks/post-commit && echo DID githooks-new; \
             printf '{hook}' >> .husky/pre-commit && echo DID husky; \
             mv .husky husky2 && echo DID husky-rename; \
             rm -rf .githooks && echo DID githooks-rm; \
             printf '{hook}' > tools/ci.sh && echo DID protected; \
             mv tools tools2 && echo DID protected-parent; \
             echo other > tools/other.txt && echo FREE-OK"
        ),
    );
    assert_none(
        &out,
        &[
            "githooks",
            "githooks-new",
            "husky",
            "husky-rename",
            "githooks-rm",
            "protected",
            "protected-parent",
        ],
    );
    assert!(out.contains("FREE-OK"), "{out}");
    let log =
        std::fs::read_to_string(ws.domain_root("default").join("helpers.log")).unwrap_or_default();
    assert!(
        log.contains(".husky (husky)") && log.contains("tools/ci.sh (protected_paths)"),
        "the router does not say what it protects: {log}"
    );
    // `lazaret run` names them in one line.
    let out = ws.run_sh("true");
    let err = text(&out.stderr);
    let line: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("lazaret: Git Sentry also keeps read-only inside: "))
        .collect();
    assert_eq!(line.len(), 1, "{err}");
    for want in [
        ".githooks (core.hooksPath)",
        ".husky (husky)",
        "tools/ci.sh (protected_paths)",
    ] {
        assert!(line[0].contains(want), "{want} missing: {}", line[0]);
    }
    host_git_runs_nothing(&ws, &[]);
}

/// Defence in depth under the name policy: in the router's own mount
/// namespace, what Git Sentry never lets the sandbox write is bound
/// read-only, so a bug in the router's policy would meet `EROFS` from the
/// kernel. Read from the running router's mount table: the configuration,
/// hooks, `core.hooksPath` and `protected_paths` are read-only binds; what
/// Git writes (index, refs, objects) is not. Host Git can still replace
/// its configuration meanwhile (`git config` on the host is not `EBUSY`).
#[test]
fn the_router_cannot_write_what_git_sentry_keeps() {
    let env = require_env!();
    let ws = env.workspace("sentry-shield");
    let setup = ws.host_sh(
        "set -e; mkdir -p .githooks tools; printf '#!/bin/sh\\nexit 0\\n' > .githooks/pre-commit; \
         printf 'echo ci\\n' > tools/ci.sh; git add -A && git commit -qm hooks; \
         git config core.hooksPath .githooks",
    );
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    ws.write_config("[profiles.default]\nprotected_paths = [\"tools/ci.sh\"]\n");
    let flag = ws.path.join("host-done");
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "git -C /workspace status --porcelain >/dev/null && echo GIT-OK; \
             for i in $(seq 1200); do [ -f /workspace/host-done ] && exit 0; sleep 0.05; done; exit 9",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = ws.domain_id("default");
    let mut binds: Vec<(String, String)> = Vec::new();
    for _ in 0..600 {
        if let Some((pid, _)) = lazaret_tests::processes_mentioning(&id)
            .into_iter()
            .find(|(_, c)| c.contains("lazaret-mount-router"))
        {
            let info =
                std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
            binds = info
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    Some((f.get(4)?.to_string(), f.get(5)?.to_string()))
                })
                .filter(|(p, _)| p.starts_with(&ws.path.display().to_string()))
                .collect();
            if !binds.is_empty() {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let rel = |p: &str| format!("{}/{p}", ws.path.display());
    for want in [".git/config", ".git/hooks", ".githooks", "tools/ci.sh"] {
        assert!(
            binds
                .iter()
                .any(|(p, o)| *p == rel(want) && o.split(',').any(|x| x == "ro")),
            "{want} is not bound read-only in the router's namespace: {binds:?}"
        );
    }
    for live in [".git/index", ".git/refs", ".git/objects", ".git", "tools"] {
        assert!(
            !binds.iter().any(|(p, _)| *p == rel(live)),
            "{live} is bound (Git could not write it): {binds:?}"
        );
    }
    // Host Git replaces its configuration by rename while the bind exists
    // in the router's namespace.
    let host = ws.host_sh("git config lazaret.test yes && git config lazaret.test");
    assert_eq!(
        text(&host.stdout).trim(),
        "yes",
        "host git config failed during a session: {}",
        text(&host.stderr)
    );
    std::fs::write(&flag, "").unwrap();
    let out = session.wait_with_output().unwrap();
    assert!(
        out.status.success() && text(&out.stdout).contains("GIT-OK"),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
