//! A non-root user inside (issue 28, item 1), with the real runsc, as the
//! unprivileged user: with the profile's `user = "agent"` every session
//! runs as agent, with its home under the `/home` State Anchor (kept across
//! Domain restarts) and a `sudo` rule; it writes the workspace, and what
//! it writes there belongs to the developer on the host. Git Sentry's
//! read-only names stay read-only for it. Without the key
//! sessions are root as before.

use lazaret_tests::{require_env, text, Workspace};
use std::os::unix::fs::MetadataExt;

const AGENT: &str = "[profiles.default]\nuser = \"agent\"\n";

/// `sh -c SCRIPT` inside; asserts success and returns stdout.
fn inside(ws: &Workspace<'_>, script: &str) -> String {
    let out = ws.run_sh(script);
    assert!(
        out.status.success(),
        "inside `{script}`: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn sessions_run_as_the_profile_user_with_a_persistent_home() {
    let env = require_env!();
    let ws = env.workspace("user");
    ws.write_config(AGENT);
    let out = inside(
        &ws,
        "id -un; id -u; echo \"$HOME $USER\"; pwd; cd && pwd; echo kept > ~/note; \
         stat -c '%U %a' /etc/sudoers.d/lazaret-agent",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "agent",
            "1000",
            "/home/agent agent",
            "/workspace",
            "/home/agent",
            "root 440"
        ],
        "{out}"
    );
    // The Domain stopped when that session ended: the home is kept.
    let out = inside(&ws, "cat /home/agent/note; stat -c '%U' /home/agent/note");
    assert_eq!(out, "kept\nagent\n");
}

#[test]
fn sudo_takes_the_user_to_root_asking_nothing() {
    let env = require_env!();
    let ws = env.workspace("user-sudo");
    ws.write_config(AGENT);
    // As the user it cannot write root's files; with sudo (Lazaret's, on
    // a runsc that runs no set-user-ID program) it is root, its input,
    // output, variables and exit status carried.
    let out = inside(
        &ws,
        "command -v sudo; \
         touch /etc/by-agent 2>/dev/null && echo AGENT-WROTE-ETC; \
         sudo id -u; sudo -n -E sh -c 'echo $SUDO_USER $HOME'; sudo sh -c 'echo $HOME'; \
         sudo -n sh -c 'echo r > /etc/by-sudo' && stat -c '%U' /etc/by-sudo; \
         echo piped | sudo cat; sudo FOO=bar sh -c 'echo FOO=$FOO'; \
         sudo -i pwd; sudo -s echo 'a b'; \
         sudo sh -c 'exit 7'; echo status=$?; \
         sudo sleep 30 & p=$!; sleep 1; kill -TERM $p; wait $p; echo term=$?; \
         sudo -u nobody true; echo other-user=$?; sudo --frobnicate true; echo bad-option=$?; \
         id -u",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "/usr/local/bin/sudo",
            "0",
            "agent /home/agent",
            "/root",
            "root",
            "piped",
            "FOO=bar",
            "/root",
            "a b",
            "status=7",
            "term=143",
            "other-user=1",
            "bad-option=1",
            "1000",
        ],
        "{out}"
    );
}

#[test]
fn without_the_key_sessions_are_root() {
    let env = require_env!();
    let ws = env.workspace("user-root");
    let out = inside(
        &ws,
        "id -un; echo $HOME; touch /workspace/byroot; \
         [ -e /.lazaret/bin/sudo ] && echo LAZARET-SUDO; true",
    );
    assert_eq!(out, "root\n/root\n");
    let m = std::fs::metadata(ws.path.join("byroot")).unwrap();
    assert_eq!(m.uid(), env.uid);
}

#[test]
fn the_user_writes_the_workspace_as_the_developer() {
    let env = require_env!();
    let ws = env.workspace("user-ws");
    ws.write_config(AGENT);
    let out = inside(
        &ws,
        "cd /workspace && stat -c '%U' README && echo edited >> README && \
         mkdir -p sub && echo new > sub/made && ln -s made sub/link && \
         chown agent:agent sub/made && echo r > byagent && \
         git status --porcelain | sort",
    );
    assert!(out.starts_with("agent\n"), "{out}");
    assert!(out.contains(" M README"), "{out}");
    // On the host: all the developer's, never a subordinate uid's.
    assert_eq!(
        std::fs::read_to_string(ws.path.join("README")).unwrap(),
        "hello\nedited\n"
    );
    for p in ["README", "sub", "sub/made", "sub/link", "byagent"] {
        let m = std::fs::symlink_metadata(ws.path.join(p)).unwrap();
        assert_eq!(m.uid(), env.uid, "{p} is not the developer's");
    }
    let dev_gid = std::fs::metadata(&ws.path).unwrap().gid();
    for p in ["sub", "sub/made", "byagent"] {
        let m = std::fs::symlink_metadata(ws.path.join(p)).unwrap();
        assert_eq!(m.gid(), dev_gid, "{p}: group is not the developer's");
    }
    // Host tools work on them: the developer removes what agent made.
    let host = ws.host_sh("rm -r sub byagent && git checkout -q README && git status --porcelain");
    assert!(host.status.success(), "{}", text(&host.stderr));
    assert_eq!(text(&host.stdout), "");
}

#[test]
fn git_sentry_holds_for_the_user() {
    let env = require_env!();
    let ws = env.workspace("user-sentry");
    ws.write_config(AGENT);
    let host_config = std::fs::read(ws.path.join(".git/config")).unwrap();
    let out = ws.run_sh(
        "cd /workspace; id -un; \
         ls .git/hooks | grep -v sample | grep . && echo HOOKS-VISIBLE; \
         printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> .git/config && echo DID-APPEND; \
         echo '#!/bin/sh' > .git/hooks/pre-commit && echo HOOK-PRIVATE; \
         true",
    );
    let o = text(&out.stdout);
    eprintln!("{o}\n{}", text(&out.stderr));
    assert!(o.starts_with("agent\n"), "{o}");
    assert!(!o.contains("DID-APPEND"), "agent wrote .git/config: {o}");
    // Git inside may shadow the configuration into a private copy, which
    // the host never reads: the host's file is unchanged either way.
    assert_eq!(
        std::fs::read(ws.path.join(".git/config")).unwrap(),
        host_config,
        "the host's .git/config changed"
    );
    assert!(!o.contains("HOOKS-VISIBLE"), "{o}");
    assert!(
        !ws.path.join(".git/hooks/pre-commit").exists(),
        "a hook reached the host"
    );
    assert!(!o.contains("DID-"), "{o}");
}

#[test]
fn a_bad_user_is_refused_with_its_place() {
    let env = require_env!();
    let ws = env.workspace("user-bad");
    for (value, says) in [
        ("root", "root"),
        ("Agent", "POSIX user name"),
        ("9lives", "POSIX user name"),
        ("a b", "POSIX user name"),
    ] {
        let p = ws.write_config(&format!("[profiles.default]\nuser = \"{value}\"\n"));
        let out = ws.run_sh("true");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{value}: {err}");
        assert!(
            err.contains(&format!("{}:2", p.display()))
                && err.contains("user")
                && err.contains(says),
            "{value}: {err}"
        );
    }
}

/// The profile's user asks for host commands as root does: it reads the
/// request key and the results and adds requests, whatever its umask, and
/// an auto-approved command's output comes back to it.
#[test]
fn the_user_escalates_as_root_does() {
    let env = require_env!();
    let ws = env.workspace("user-esc");
    let marker = ws.base.join("ran-for-agent");
    ws.write_config(&format!(
        "[profiles.default]\nuser = \"agent\"\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/echo\", \"hi\"]\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"/usr/bin/touch\", \"{}\"]\n",
        marker.display()
    ));
    let out = inside(
        &ws,
        &format!(
            "id -un; umask 077; lazaret-escalate -- /bin/echo hi; \
             lazaret-escalate -- /usr/bin/touch '{}'",
            marker.display()
        ),
    );
    assert_eq!(out, "agent\nhi\n");
    assert!(marker.exists(), "the command did not run on the host");
    // Not approved: refused, as for root, and said so.
    let out = ws.run_sh("lazaret-escalate --timeout 1 -- /bin/echo other </dev/null");
    assert_ne!(out.status.code(), Some(0));
}
