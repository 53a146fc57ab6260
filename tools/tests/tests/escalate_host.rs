//! Where and with what an approved host command runs: the host directory
//! of the sandbox's, resolved beneath the workspace without links; the
//! developer's `PATH` and the profile's `escalation.pass_env` from the
//! requesting CLI's environment, never the sandbox's; and the attacks on
//! each (links out, ignored directories, a `PATH` entry the sandbox can
//! fill, a bare-looking repository with a hook); and an approved push over
//! the developer's ssh-agent, from a subdirectory.

use lazaret_tests::{assert_domain_gone, require_env, text, Workspace};
use std::ffi::OsString;
use std::process::Command;

/// `lazaret run -- sh -c SCRIPT` with `vars` added to the CLI's own
/// environment, and `PATH` given `before` in front of the test user's.
fn run_with(
    ws: &Workspace,
    before: &str,
    vars: &[(&str, &str)],
    script: &str,
) -> (i32, String, String) {
    let mut cmd: Command = ws.lazaret(&["run", "--", "sh", "-c", script]);
    let path: OsString = cmd
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(|v| v.to_os_string()))
        .unwrap_or_default();
    let mut p = OsString::from(before);
    p.push(&path);
    cmd.env("PATH", p);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run lazaret");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Commits `dirs` (each with a file) and the `.gitignore`; directories
/// beneath `ignored/` are made on the host only, as ignored ones are.
fn commit_dirs(ws: &Workspace, dirs: &[&str], gitignore: &str) {
    let mk: Vec<String> = dirs
        .iter()
        .map(|d| match d.starts_with("ignored/") {
            true => format!("mkdir -p {d} && echo host-only > {d}/secret"),
            false => format!("mkdir -p {d} && echo x > {d}/.keep && git add {d}/.keep"),
        })
        .collect();
    let out = ws.host_sh(&format!(
        "printf '{gitignore}' > .gitignore && git add .gitignore && {} && git commit -qm dirs",
        mk.join(" && ")
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn approved_commands_run_in_the_host_directory_with_the_developers_environment() {
    let env = require_env!();
    let ws = env.workspace("esc-host-env");
    let devbin = ws.base.join("devbin");
    let out = env.sh(&format!(
        "mkdir -p '{d}' && printf '#!/bin/sh\\necho the developers tool\\n' > '{d}/devtool' && chmod 755 '{d}/devtool'",
        d = devbin.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    commit_dirs(&ws, &["sub/deep", "ignored/inner"], "ignored/\\n");
    ws.write_config(
        r#"[profiles.default.escalation]
pass_env = ["SSH_AUTH_SOCK", "GPG_AGENT_INFO"]
[[profiles.default.escalation.auto_approve]]
argv = ["/bin/pwd"]
[[profiles.default.escalation.auto_approve]]
argv = ["/usr/bin/env"]
[[profiles.default.escalation.auto_approve]]
argv = ["devtool"]
"#,
    );
    // The developer's PATH has a relative entry and one in the workspace,
    // both places the sandbox can put a `devtool` of its own.
    let before = format!(
        ".:{sub}:{dev}:",
        sub = ws.path.join("sub").display(),
        dev = devbin.display()
    );
    let vars = [
        ("SSH_AUTH_SOCK", "/run/developer/agent.sock"),
        ("NOT_LISTED", "developer-secret"),
    ];
    let script = r#"
set -u
fake='#!/bin/sh
echo the sandboxs tool'
for d in /workspace /workspace/sub /workspace/sub/deep; do printf '%s\n' "$fake" > $d/devtool; chmod 755 $d/devtool; done
export SSH_AUTH_SOCK=/sandbox/agent.sock GPG_AGENT_INFO=/sandbox/gpg NOT_LISTED=sandbox PATH="/sandbox/bin:$PATH"
cd /workspace/sub/deep
echo "pwd=$(lazaret-escalate -- /bin/pwd)"
lazaret-escalate -- /usr/bin/env | sed 's/^/env:/'
echo "tool=$(lazaret-escalate -- devtool)"
cd /workspace
echo "top=$(lazaret-escalate -- /bin/pwd)"
"#;
    let (code, out, err) = run_with(&ws, &before, &vars, script);
    assert_eq!(code, 0, "{out}\n{err}");
    let host_ws = ws.path.display().to_string();
    assert!(
        out.contains(&format!("pwd={host_ws}/sub/deep\n")),
        "{out}\n{err}"
    );
    assert!(out.contains(&format!("top={host_ws}\n")), "{out}");
    assert!(out.contains("tool=the developers tool\n"), "{out}\n{err}");
    let envs: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("env:")).collect();
    let get = |k: &str| {
        envs.iter()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
    };
    assert_eq!(
        get("SSH_AUTH_SOCK").as_deref(),
        Some("/run/developer/agent.sock"),
        "{envs:?}"
    );
    // Unset here: not passed, and never the sandbox's value.
    assert_eq!(get("GPG_AGENT_INFO"), None, "{envs:?}");
    assert_eq!(get("NOT_LISTED"), None, "{envs:?}");
    assert_eq!(get("LAZARET_ESCALATION").as_deref(), Some("1"));
    let path = get("PATH").expect("PATH");
    assert!(
        path.starts_with(&format!("{}:", devbin.display())),
        "{path}"
    );
    assert!(
        !path
            .split(':')
            .any(|e| e == "." || e.starts_with(&host_ws) || e.starts_with("/sandbox")),
        "{path}"
    );
    assert!(!envs.iter().any(|l| l.contains("sandbox")), "{envs:?}");
    assert_eq!(
        get("GIT_CONFIG_KEY_0").as_deref(),
        Some("safe.bareRepository")
    );
    // Neither the sandbox's tool nor its environment ran or leaked.
    assert!(!out.contains("the sandboxs tool"), "{out}");
}

#[test]
fn a_directory_the_sandbox_names_never_takes_the_command_outside_the_workspace() {
    let env = require_env!();
    let ws = env.workspace("esc-host-dir");
    commit_dirs(&ws, &["sub", "ignored/inner"], "ignored/\\n");
    // Host content beside the workspace, and in an ignored directory.
    let outside = ws.base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    ws.write_config("[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/pwd\"]\n");
    let host_ws = ws.path.display().to_string();
    let script = format!(
        r#"
ln -s '{outside}' /workspace/out
ln -s ../.. /workspace/sub/up
ln -s sub /workspace/inner
for c in /workspace/out /workspace/sub/up /workspace/inner /workspace/../.. /workspace/./sub /workspace/.git \
         /workspace/ignored/inner /workspace/missing '{outside}' /; do
  echo "$c => $(lazaret-escalate --claim-cwd "$c" -- /bin/pwd 2>/tmp/err) ($(head -c 120 /tmp/err))"
done
"#,
        outside = outside.display()
    );
    let out = ws.run_sh(&script);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 10, "{stdout}");
    for l in &lines {
        let (claim, rest) = l.split_once(" => ").unwrap();
        // Every one runs in the workspace's top ...
        assert!(rest.starts_with(&format!("{host_ws} (")), "{l}");
        // ... with a note, unless the claim is not in /workspace at all.
        let noted = rest.contains("lazaret: the sandbox's directory is not used");
        assert_eq!(noted, claim.starts_with("/workspace"), "{l}");
    }
    // The symbolic links were real on the host: the router did not stop them.
    assert!(std::fs::symlink_metadata(ws.path.join("out"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn an_approved_push_from_a_subdirectory_reaches_the_remote() {
    let env = require_env!();
    let ws = env.workspace("esc-host-push");
    commit_dirs(&ws, &["sub"], "");
    let remote = ws.base.join("remote.git");
    let out = env.sh(&format!(
        "git init -q --bare '{r}' && cd '{w}' && git remote add origin 'file://{r}'",
        r = remote.display(),
        w = ws.path.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    ws.write_config(
        "[[profiles.default.escalation.auto_approve]]\nargv = [\"git\", \"push\", \"origin\", \"HEAD:refs/heads/from-sub\"]\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"git\", \"rev-parse\", \"--show-prefix\"]\n",
    );
    let out = ws.run_sh(
        "cd /workspace/sub && echo change > file && git add file && git -c user.name=A -c user.email=a@b commit -qm 'from the sandbox' \
         && echo \"prefix=$(lazaret-escalate -- git rev-parse --show-prefix)\" && lazaret-escalate -- git push origin HEAD:refs/heads/from-sub",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // Host Git ran in <workspace>/sub, and pushed the sandbox's commit.
    assert!(
        text(&out.stdout).contains("prefix=sub/\n"),
        "{}",
        text(&out.stdout)
    );
    let log = env.sh(&format!(
        "git --git-dir='{}' log -1 --format=%s from-sub",
        remote.display()
    ));
    assert_eq!(
        text(&log.stdout),
        "from the sandbox\n",
        "{}",
        text(&log.stderr)
    );
}

/// An sshd and an ssh-agent run by the test user, killed when dropped.
struct SshRemote<'a> {
    env: &'a lazaret_tests::TestEnv,
    dir: std::path::PathBuf,
}

impl Drop for SshRemote<'_> {
    fn drop(&mut self) {
        let _ = self.env.sh(&format!(
            "cd '{}' && kill $(cat sshd.pid) $(cat agent.pid) 2>/dev/null",
            self.dir.display()
        ));
    }
}

/// The developer's side of [`an_approved_push_over_the_developers_ssh_agent_reaches_the_remote`],
/// as the test user in `{d}`, for the repository in `{w}`: an sshd on
/// the loopback (admitting that user only), a key held only by the
/// ssh-agent, the repository's remote over ssh.
const SSH_REMOTE: &str = r#"set -e
mkdir -p '{d}' && cd '{d}'
ssh-keygen -q -t ed25519 -N '' -f hostkey
ssh-keygen -q -t ed25519 -N '' -f userkey
cp userkey.pub authorized_keys
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '%s\n' "Port $port" "ListenAddress 127.0.0.1" "HostKey {d}/hostkey" \
  "AuthorizedKeysFile {d}/authorized_keys" "PidFile {d}/sshd.pid" "StrictModes no" \
  "UsePAM no" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
  "LogLevel VERBOSE" > sshd_config
/usr/sbin/sshd -f '{d}/sshd_config' -E '{d}/sshd.log'
eval "$(ssh-agent -a '{d}/agent.sock')" >/dev/null
echo "$SSH_AGENT_PID" > agent.pid
SSH_AUTH_SOCK='{d}/agent.sock' ssh-add -q userkey
rm userkey
echo "[127.0.0.1]:$port $(cat hostkey.pub)" > known_hosts
git init -q --bare remote.git
cd '{w}'
git remote add origin "ssh://$(id -un)@127.0.0.1:$port{d}/remote.git"
git config core.sshCommand "ssh -o UserKnownHostsFile={d}/known_hosts -o BatchMode=yes"
"#;

#[test]
fn an_approved_push_over_the_developers_ssh_agent_reaches_the_remote() {
    let env = require_env!();
    if !std::path::Path::new("/usr/sbin/sshd").exists() {
        lazaret_tests::skip("no /usr/sbin/sshd (openssh-server) for the test remote");
        return;
    }
    let ws = env.workspace("esc-host-ssh");
    commit_dirs(&ws, &["sub"], "");
    let dir = ws.base.join("ssh");
    let setup = SSH_REMOTE
        .replace("{d}", &dir.display().to_string())
        .replace("{w}", &ws.path.display().to_string());
    let out = env.sh(&setup);
    let _remote = SshRemote {
        env,
        dir: dir.clone(),
    };
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    ws.write_config(
        "[profiles.default.escalation]\npass_env = [\"SSH_AUTH_SOCK\"]\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"git\", \"push\", \"origin\", \"HEAD:refs/heads/over-ssh\"]\n",
    );
    let sock = dir.join("agent.sock").display().to_string();
    let (code, out, err) = run_with(
        &ws,
        "",
        &[("SSH_AUTH_SOCK", &sock)],
        "cd /workspace/sub && echo change > file && git add file && \
         git -c user.name=A -c user.email=a@b commit -qm 'over ssh from the sandbox' && \
         lazaret-escalate -- git push origin HEAD:refs/heads/over-ssh",
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let log = env.sh(&format!(
        "git --git-dir='{}' log -1 --format=%s over-ssh",
        dir.join("remote.git").display()
    ));
    assert_eq!(
        text(&log.stdout),
        "over ssh from the sandbox\n",
        "{}",
        text(&log.stderr)
    );
    // The key that let it in was the agent's: its only copy.
    let sshd_log = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
    assert!(sshd_log.contains("Accepted publickey"), "{sshd_log}");
}

#[test]
fn a_bare_looking_directory_the_sandbox_makes_is_not_a_repository_to_an_approved_git() {
    let env = require_env!();
    let ws = env.workspace("esc-host-bare");
    commit_dirs(&ws, &["sub"], "");
    let marker = ws.base.join("hook-ran");
    ws.write_config(
        "[[profiles.default.escalation.auto_approve]]\nargv = [\"git\", \"push\", \"origin\", \"main\"]\n",
    );
    // A directory host Git would take for a bare repository, with a
    // commit, a remote it can push it to, and a pre-push hook that leaves
    // a marker on the host.
    let script = format!(
        r#"
set -e
f=/workspace/sub/fake
git init -q --bare $f
git init -q --bare /workspace/sub/dest
git -C /workspace push -q $f HEAD:refs/heads/main
git -C $f config remote.origin.url ../dest
printf '#!/bin/sh\ntouch {marker}\n' > $f/hooks/pre-push
chmod 755 $f/hooks/pre-push
cd $f
set +e
lazaret-escalate -- git push origin main
echo "rc=$?"
"#,
        marker = marker.display()
    );
    let out = ws.run_sh(&script);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("rc="), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("rc=0"), "{stdout}\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("bare repository"),
        "{}",
        text(&out.stderr)
    );
    assert!(!marker.exists(), "the sandbox's hook ran on the host");
    // Host Git without the setting takes the directory for a repository
    // and runs its hook: the test can fail. (Once the Domain is down: the
    // router may hold the hook open for writing until then.)
    assert_domain_gone(&ws.domain_id("default"));
    let plain = env.sh(&format!(
        "cd '{}/sub/fake' && git -c safe.bareRepository=all rev-parse --is-bare-repository && git -c safe.bareRepository=all hook run pre-push",
        ws.path.display()
    ));
    assert_eq!(text(&plain.stdout), "true\n", "{}", text(&plain.stderr));
    assert!(
        marker.exists(),
        "the hook did not run even without the setting: {}",
        text(&plain.stderr)
    );
}

#[test]
fn the_agents_text_is_inside_and_the_default_image_has_the_tools() {
    let env = require_env!();
    let ws = env.workspace("esc-agents");
    let out = ws.run_sh(
        "cat /usr/share/lazaret/AGENTS.md && for c in make rg jq ssh vi; do command -v $c >/dev/null || echo missing: $c; done",
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        stdout,
        include_str!("../../../bin/escalate/AGENTS.md"),
        "{stdout}"
    );
    assert!(stdout.contains("lazaret-escalate --justification"));
}
