//! Linked worktrees and submodule checkouts as workspaces (issue 14, item
//! 3): the Git directories they need are presented with Git Sentry's
//! rules, so status, commit, branch and fetch work inside, the host's
//! repository gets the commits and nothing it runs or reads as
//! configuration, and nothing else of the main repository is visible.

use lazaret_tests::{assert_domain_gone, require_env, text};
use std::path::Path;

/// Who Git inside commits as (the test user has no Git identity).
const IDENTITY: &str =
    "[profiles.default.git_identity]\nname = \"Agent\"\nemail = \"agent@sandbox.invalid\"\n";

fn domain_of(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    lazaret_protocol::DomainIdV1::derive("default", path.as_os_str().as_bytes()).to_string()
}

#[test]
fn a_linked_worktree_commits_branches_and_fetches_inside_and_keeps_the_main_repository_safe() {
    let env = require_env!();
    let ws = env.workspace("worktree");
    ws.write_config(IDENTITY);
    let main = &ws.path;
    let wt = ws.base.join("wt");
    let out = ws.host_sh(&format!(
        "echo 'SECRET=1' > secret.env && git worktree add -q -b feature '{}'",
        wt.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config_before = std::fs::read(main.join(".git/config")).unwrap();
    let dot_git_before = std::fs::read(wt.join(".git")).unwrap();
    let commondir_before = std::fs::read(main.join(".git/worktrees/wt/commondir")).unwrap();

    let script = r#"
        git status --porcelain | wc -l
        git rev-parse --abbrev-ref HEAD
        git rev-parse --show-toplevel
        echo new > new.txt && git add new.txt && git commit -qm inside && echo COMMITTED
        git branch from-inside && echo BRANCHED
        git init -q /tmp/up && git -C /tmp/up commit -q --allow-empty -m upstream \
          && git fetch -q /tmp/up HEAD:refs/heads/fetched && echo FETCHED
        common=$(git rev-parse --git-common-dir)
        echo "ABOVE: $(ls -A "$common/..")"
        git config core.fsmonitor 'touch /tmp/pwned' && echo CONFIG-INSIDE
        printf '#!/bin/sh\ntouch /tmp/pwned\n' > "$common/hooks/post-checkout" && echo HOOK-INSIDE
        mkdir -p "$common/worktrees/evil" && echo NEW-WORKTREE-DIR-INSIDE
        echo .. > "$(git rev-parse --git-dir)/commondir" 2>/dev/null && echo DID-commondir
        echo 'gitdir: /tmp' > /workspace/.git 2>/dev/null && echo DID-dotgit
        echo '[core] fsmonitor = x' > "$common/config.worktree.lock" 2>/dev/null && mv "$common/config.worktree.lock" "$common/commondir" 2>/dev/null && echo DID-rename
        true
    "#;
    let out = ws
        .lazaret(&["run", "--", "sh", "-c", script])
        .current_dir(&wt)
        .output()
        .unwrap();
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}\n{}", text(&out.stderr));
    let lines: Vec<&str> = so.lines().collect();
    assert_eq!(&lines[..3], ["0", "feature", "/workspace"], "{so}");
    for want in [
        "COMMITTED",
        "BRANCHED",
        "FETCHED",
        "ABOVE: .git",
        "CONFIG-INSIDE",
        "HOOK-INSIDE",
        "NEW-WORKTREE-DIR-INSIDE",
    ] {
        assert!(
            lines.contains(&want),
            "missing {want}: {so}\n{}",
            text(&out.stderr)
        );
    }
    for refused in ["DID-commondir", "DID-dotgit", "DID-rename"] {
        assert!(!so.contains(refused), "{refused}: {so}");
    }
    assert!(!so.contains("SECRET"), "{so}");
    assert_domain_gone(&domain_of(&wt));

    // The host's repository has what Git wrote in normal operation...
    let out = ws.host_sh(
        "git log -1 --format=%s feature; git rev-parse -q --verify from-inside >/dev/null && echo branch; \
         git rev-parse -q --verify fetched >/dev/null && echo fetched",
    );
    assert_eq!(
        text(&out.stdout),
        "inside\nbranch\nfetched\n",
        "{}",
        text(&out.stderr)
    );
    let out = env.sh(&format!("cd '{}' && git status --porcelain", wt.display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "host Git in the worktree");
    // ...and nothing it reads as configuration, runs, or follows.
    assert_eq!(
        std::fs::read(main.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), dot_git_before);
    assert_eq!(
        std::fs::read(main.join(".git/worktrees/wt/commondir")).unwrap(),
        commondir_before
    );
    assert!(!main.join(".git/hooks/post-checkout").exists());
    assert!(!main.join(".git/worktrees/evil").exists());
    assert!(!Path::new("/tmp/pwned").exists());

    // The sandbox's own configuration stays its own in the next Domain
    // generation; the host's stays untouched.
    let out = ws
        .lazaret(&["run", "--", "git", "config", "--get", "core.fsmonitor"])
        .current_dir(&wt)
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "touch /tmp/pwned\n",
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(main.join(".git/config")).unwrap(),
        config_before
    );
    assert_domain_gone(&domain_of(&wt));
}

#[test]
fn a_submodule_checkout_is_a_workspace_of_its_own() {
    let env = require_env!();
    let ws = env.workspace("submodule");
    ws.write_config(IDENTITY);
    let origin = ws.base.join("origin-sub");
    let out = env.sh(&format!(
        "mkdir -p '{o}' && cd '{o}' && git init -q && echo lib > lib.txt && git add -A && git commit -qm lib \
         && cd '{w}' && git -c protocol.file.allow=always submodule add -q '{o}' lib/sub && git commit -qm sub",
        o = origin.display(),
        w = ws.path.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sub = ws.path.join("lib/sub");
    let config_before = std::fs::read(ws.path.join(".git/modules/lib/sub/config")).unwrap();

    let out = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "git rev-parse --show-toplevel; cat lib.txt; git status --porcelain | wc -l; \
             echo more > more.txt && git add more.txt && git commit -qm from-sandbox && echo COMMITTED; \
             git config user.name Someone && echo CONFIG-INSIDE",
        ])
        .current_dir(&sub)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "/workspace\nlib\n0\nCOMMITTED\nCONFIG-INSIDE\n",
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&domain_of(&sub));
    let out = env.sh(&format!(
        "cd '{}' && git log -1 --format=%s && git status --porcelain",
        sub.display()
    ));
    assert_eq!(text(&out.stdout), "from-sandbox\n", "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read(ws.path.join(".git/modules/lib/sub/config")).unwrap(),
        config_before
    );
}
