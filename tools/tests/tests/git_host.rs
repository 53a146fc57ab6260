//! Issue 11, properties 2 and 3, end to end: what the sandbox writes into
//! `.git` is hostile data for Lazaret itself. Each test writes, from
//! inside, what would make the coordinator's planning of the next Domain
//! generation run a command or touch a host path outside the workspace,
//! then restarts the Domain and checks the host.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text, Workspace};
use std::path::Path;
use std::time::Duration;

/// Sources of the bind mounts in the running generation's bundle.
fn bundle_sources(ws: &Workspace) -> Vec<String> {
    let p = ws.domain_root("default").join("run/bundle/config.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&p).expect("read config.json")).expect("json");
    v["mounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["source"].as_str().map(str::to_string))
        .collect()
}

/// Property 2: no Lazaret process runs anything Git configuration names.
/// Inside, a forged `commondir` points Git at a common directory whose
/// config sets `core.fsmonitor` to a command; host `git ls-files` (what
/// the coordinator ran to find submodules) runs it. After a restart the
/// command must not have run.
#[test]
fn forged_git_config_runs_nothing_at_restart() {
    let env = require_env!();
    let ws = env.workspace("git-exec");
    let marker = ws.base.join("MARKER-fsmonitor");
    let plant = format!(
        "set -e; cd .git; mkdir -p c/objects c/refs; \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {m}; false\"\\n' > c/config; \
         echo c > commondir; echo PLANTED",
        m = marker.display()
    );
    // Git Sentry's router refuses this from inside today; the planning
    // must hold all the same against a `.git` that holds it (written by
    // an earlier version, or by a host tool), so it is planted on the host.
    let inside = ws.run_sh(&format!("cd /workspace && {plant}"));
    assert!(
        !text(&inside.stdout).contains("PLANTED"),
        "the router let the sandbox plant it"
    );
    let out = ws.host_sh(&plant);
    assert!(
        text(&out.stdout).contains("PLANTED"),
        "the forged config could not be planted (the test would prove nothing): {}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));
    // The Domain's next generation: planned from the forged `.git`.
    let out = ws.run_sh("echo second");
    assert_eq!(
        text(&out.stdout),
        "second\n",
        "restart failed: {}",
        text(&out.stderr)
    );
    assert!(
        !marker.exists(),
        "a Lazaret process ran the sandbox's core.fsmonitor on the host"
    );
    for name in ["coordinator.log", "helpers.log"] {
        let log = std::fs::read_to_string(ws.domain_root("default").join(name)).unwrap_or_default();
        // The log names what each session ran (the planting script
        // included); no other line may mention the forged setting.
        let others: Vec<&str> = log
            .lines()
            .filter(|l| !(l.contains(" session ") && l.contains(" ran \"")))
            .collect();
        assert!(
            !others.iter().any(|l| l.contains("fsmonitor")),
            "{name}: {log}"
        );
    }
}

/// Property 3: paths named in sandbox-writable Git files never make a host
/// path outside the workspace mounted, created or visible. Planted inside:
/// `.git/modules` as a symlink to a Git-directory-looking host directory, a
/// worktree whose `gitdir` is `<workspace>/../outside/.git`, and an index
/// gitlink at `link/sub` where `link` is a symlink leading out.
#[test]
fn git_paths_never_reach_outside_the_workspace() {
    let env = require_env!();
    let ws = env.workspace("git-paths");
    let outside = ws.base.join("outside");
    let token = "OUTSIDE-SECRET-4c1d";
    let setup = env.sh(&format!(
        "set -e; o='{o}'; mkdir -p \"$o/repo/objects\" \"$o/repo/refs\" \"$o/sub\"; \
         echo 'ref: refs/heads/main' > \"$o/repo/HEAD\"; \
         printf '[core]\\n# {t}\\n' > \"$o/repo/config\"; \
         echo 'gitdir: {t}' > \"$o/.git\"; echo 'gitdir: {t}' > \"$o/sub/.git\"",
        o = outside.display(),
        t = token
    ));
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    let w = ws.path.display().to_string();
    // Planted on the host, as a `.git` written by an earlier version or a
    // host tool would hold it: from inside, Git Sentry's router refuses
    // the symlinks and new names in `.git` today.
    let out = ws.host_sh(&format!(
        "set -e; head=$(git rev-parse HEAD); \
         git update-index --add --cacheinfo 160000,$head,link/sub; \
         ln -s '{o}' link; \
         mkdir -p .git/worktrees/x; echo '{w}/../outside/.git' > .git/worktrees/x/gitdir; \
         rm -rf .git/modules; ln -s '{o}' .git/modules; echo PLANTED",
        o = outside.display(),
    ));
    assert!(
        text(&out.stdout).contains("PLANTED"),
        "planting failed (the test would prove nothing): {}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    // The next generation, kept running while the host looks at it.
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            &format!(
                "for p in /outside/.git /workspace/link/sub/.git /workspace/.git/modules/repo/config \
                   '{o}/repo/config' '{o}/.git'; do cat \"$p\" 2>/dev/null; done; \
                 grep -rs {t} /workspace /home /root /tmp /outside; echo looked; \
                 for i in $(seq 600); do [ -f /workspace/host-done ] && exit 0; sleep 0.05; done; exit 9",
                o = outside.display(),
                t = token
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let config = ws.domain_root("default").join("run/bundle/config.json");
    assert!(
        eventually(Duration::from_secs(60), || config.exists()),
        "the second generation did not start"
    );
    let sources = bundle_sources(&ws);
    for s in &sources {
        let p = Path::new(s);
        assert!(
            !p.starts_with(&outside) && !s.contains(".."),
            "a host path outside the workspace is mounted: {s} (all: {sources:#?})"
        );
    }
    assert!(ws.host_sh("touch host-done").status.success());
    let out = session.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "second generation: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "looked\n",
        "host content outside the workspace is visible inside"
    );
    for created in ["repo/hooks", "hooks", "sub/hooks"] {
        assert!(
            !outside.join(created).exists(),
            "{created} was created outside the workspace"
        );
    }
    // Nothing is logged as refused any more: Lazaret no longer reads the
    // Git directory on the host at start (the router enforces Git Sentry
    // on each operation), so the planted paths are never followed at all.
}

/// Hook managers: host Git's effective `core.hooksPath` (here the
/// repository's own config, as husky sets it) names a tracked directory;
/// inside it is read-only, so the sandbox cannot put a hook there that the
/// developer's next `git commit` on the host would run.
#[test]
fn hooks_path_in_the_workspace_is_read_only_inside() {
    let env = require_env!();
    let ws = env.workspace("git-hookspath");
    let marker = ws.base.join("MARKER-hook");
    let setup = ws.host_sh(
        "git config core.hooksPath .githooks && mkdir .githooks && echo '# tracked' > .githooks/README && git add .githooks && git commit -qm hooks",
    );
    assert!(setup.status.success(), "{}", text(&setup.stderr));
    let out = ws.run_sh(&format!(
        "cd /workspace; \
         printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit && echo WROTE-HOOK; \
         echo x >> .githooks/README && echo CHANGED-README; \
         mv .githooks .githooks-old && echo MOVED; \
         cat .githooks/README",
        m = marker.display()
    ));
    let s = text(&out.stdout);
    for forbidden in ["WROTE-HOOK", "CHANGED-README", "MOVED"] {
        assert!(
            !s.contains(forbidden),
            "{forbidden} succeeded inside: {s} / {}",
            text(&out.stderr)
        );
    }
    assert!(
        s.contains("# tracked"),
        "the hooks directory is not readable inside: {s}"
    );
    assert_domain_gone(&ws.domain_id("default"));
    let host = ws.host_sh("git commit -q --allow-empty -m host && echo COMMITTED");
    assert!(
        text(&host.stdout).contains("COMMITTED"),
        "{}",
        text(&host.stderr)
    );
    assert!(!marker.exists(), "host git ran a hook written inside");
    assert!(!ws.path.join(".githooks/pre-commit").exists());
}
