//! A profile's shared paths end to end: one host directory per (profile,
//! path) beneath the Storage Root, mounted read-write over the State
//! Anchor it lies in, in every workspace of that profile and in no other
//! profile's; links the sandbox plants in it are never followed on the
//! host; a bad entry is refused with file, line and key.

use lazaret_tests::{assert_domain_gone, require_env, text, TestEnv, Workspace};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Output;

const SHARED: &str = "/root/.agent-login";

/// Profile names unique to this run: the Storage Root (and with it the
/// profiles' shared directories) is common to every test.
struct Profiles {
    agent: String,
    other: String,
}

impl Profiles {
    fn new(ws: &Workspace) -> Self {
        let tag = ws
            .base
            .file_name()
            .unwrap()
            .to_string_lossy()
            .rsplit('-')
            .next()
            .unwrap()
            .to_owned();
        Self {
            agent: format!("agent-{tag}"),
            other: format!("other-{tag}"),
        }
    }

    fn config(&self) -> String {
        format!(
            "[profiles.{a}]\nshared_paths = [\"{SHARED}\"]\n\n[profiles.{o}]\nshared_paths = [\"{SHARED}\"]\n",
            a = self.agent,
            o = self.other
        )
    }

    /// Where the documentation says the host directory is.
    fn host_dir(&self, env: &TestEnv, profile: &str) -> PathBuf {
        env.data_home
            .join("lazaret/profiles")
            .join(profile)
            .join("shared/root%2F.agent-login")
    }

    fn remove(&self, env: &TestEnv) {
        for p in [&self.agent, &self.other] {
            let dir = env.data_home.join("lazaret/profiles").join(p);
            let _ = env.sh(&format!("rm -rf '{}'", dir.display()));
        }
    }
}

fn run(ws: &Workspace, profile: &str, script: &str) -> Output {
    let out = ws
        .lazaret(&["run", "--profile", profile, "--", "sh", "-c", script])
        .output()
        .expect("run lazaret");
    assert_domain_gone(&ws.domain_id(profile));
    out
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}: stdout {} stderr {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn a_shared_path_follows_its_profile_across_workspaces_and_no_further() {
    let env = require_env!();
    let one = env.workspace("shared-one");
    let two = env.workspace("shared-two");
    let three = env.workspace("shared-three");
    let profiles = Profiles::new(&one);
    for ws in [&one, &two, &three] {
        ws.write_config(&profiles.config());
    }
    let agent = profiles.agent.as_str();

    // The login, made in the first workspace; beside it, in the same
    // State Anchor, a file that stays that Domain's own.
    let out = run(
        &one,
        agent,
        &format!("echo token-4711 > {SHARED}/credentials && echo own > /root/domain-own"),
    );
    ok(&out);
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!(
            "shared with every workspace of profile {agent} (what one sandbox writes there, the others read): {SHARED}"
        )),
        "{said}"
    );

    // The host directory, where the documentation says, private.
    let host = profiles.host_dir(env, agent);
    let md = std::fs::symlink_metadata(&host).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o7777, 0o700, "{}", host.display());
    assert_eq!(md.uid(), env.uid);
    for parent in [
        host.parent().unwrap(),
        host.parent().unwrap().parent().unwrap(),
    ] {
        assert_eq!(
            std::fs::metadata(parent).unwrap().mode() & 0o7777,
            0o700,
            "{}",
            parent.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(host.join("credentials")).unwrap(),
        "token-4711\n"
    );

    // Another workspace of the same profile reads it; the rest of the
    // anchor stays the first Domain's.
    let out = run(
        &two,
        agent,
        &format!("cat {SHARED}/credentials; test -e /root/domain-own && echo LEAKED; echo done"),
    );
    assert_eq!(ok(&out), "token-4711\ndone\n");

    // Another profile, same sandbox path: its own, empty directory.
    let out = run(
        &three,
        &profiles.other,
        &format!("ls -A {SHARED}; echo done"),
    );
    assert_eq!(ok(&out), "done\n");
    assert_ne!(profiles.host_dir(env, &profiles.other), host);
    profiles.remove(env);
}

/// With a profile `user`, the shared path (here in the user's home) is
/// the user's inside, so an agent running as it keeps its login there
/// (Claude Code refuses its unattended mode as root); on the host what it
/// writes is the developer's, in the same host directory, and another
/// workspace's session, as the user too, reads and changes it.
#[test]
fn the_profile_user_writes_its_shared_path_and_the_host_keeps_it_the_developers() {
    let env = require_env!();
    let one = env.workspace("shared-user-one");
    let two = env.workspace("shared-user-two");
    let tag = one
        .base
        .file_name()
        .unwrap()
        .to_string_lossy()
        .rsplit('-')
        .next()
        .unwrap()
        .to_owned();
    let profile = format!("agentuser-{tag}");
    let config = format!(
        "[profiles.{profile}]\nuser = \"agent\"\nshared_paths = [\"/home/agent/.login\"]\n"
    );
    for ws in [&one, &two] {
        ws.write_config(&config);
    }
    let out = run(
        &one,
        &profile,
        "id -un; stat -c '%U %a' /home/agent/.login; echo token-0815 > /home/agent/.login/credentials && \
         mkdir /home/agent/.login/sub && echo ok",
    );
    assert_eq!(ok(&out), "agent\nagent 700\nok\n");
    let host = env
        .data_home
        .join("lazaret/profiles")
        .join(&profile)
        .join("shared/home%2Fagent%2F.login");
    assert_eq!(
        std::fs::read_to_string(host.join("credentials")).unwrap(),
        "token-0815\n"
    );
    for p in ["credentials", "sub"] {
        let m = std::fs::symlink_metadata(host.join(p)).unwrap();
        assert_eq!(m.uid(), env.uid, "{p} is not the developer's");
    }
    let out = run(
        &two,
        &profile,
        "cat /home/agent/.login/credentials && echo again >> /home/agent/.login/credentials && \
         stat -c '%U' /home/agent/.login/sub",
    );
    assert_eq!(ok(&out), "token-0815\nagent\n");
    assert_eq!(
        std::fs::read_to_string(host.join("credentials")).unwrap(),
        "token-0815\nagain\n"
    );
    let _ = env.sh(&format!(
        "rm -rf '{}'",
        env.data_home
            .join("lazaret/profiles")
            .join(&profile)
            .display()
    ));
}

#[test]
fn links_the_sandbox_plants_in_a_shared_path_are_never_followed_on_the_host() {
    let env = require_env!();
    let one = env.workspace("shared-link-one");
    let two = env.workspace("shared-link-two");
    let profiles = Profiles::new(&one);
    for ws in [&one, &two] {
        ws.write_config(&profiles.config());
    }
    let agent = profiles.agent.as_str();
    let probe = format!(
        "lazaret-shared-probe-{}",
        profiles.agent.trim_start_matches("agent-")
    );
    let host_probe = PathBuf::from("/etc").join(&probe);
    assert!(!host_probe.exists());

    // From inside: a subdirectory swapped for a link to /etc, a link to a
    // host file, and the mount's root opened up to everyone (the CLI does
    // not insist on its mode at the next start: the directories above it,
    // which the sandbox cannot reach, keep it private).
    let out = run(
        &one,
        agent,
        &format!(
            "mkdir -p {SHARED}/sub && rm -rf {SHARED}/sub && ln -s /etc {SHARED}/sub \
             && ln -s /etc/passwd {SHARED}/pw && chmod 0777 {SHARED} && ls -ld {SHARED}/sub"
        ),
    );
    ok(&out);
    let host = profiles.host_dir(env, agent);
    assert!(std::fs::symlink_metadata(host.join("sub"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::symlink_metadata(&host).unwrap().mode() & 0o7777,
        0o777,
        "the sandbox's chmod of the mount's root"
    );

    // The next start (another workspace) mounts it all the same; the link
    // resolves inside the sandbox, to the sandbox's own /etc.
    let out = run(
        &two,
        agent,
        &format!(
            "echo from-the-sandbox > {SHARED}/sub/{probe} && cat /etc/{probe} && readlink {SHARED}/pw"
        ),
    );
    assert_eq!(ok(&out), "from-the-sandbox\n/etc/passwd\n");
    assert!(
        !host_probe.exists(),
        "a write through the planted link reached the host's /etc"
    );
    // Still the same host directory, still a directory, not a link.
    assert!(std::fs::symlink_metadata(&host).unwrap().is_dir());
    profiles.remove(env);
}

#[test]
fn a_bad_shared_path_names_file_line_and_key_and_nothing_starts() {
    let env = require_env!();
    let ws = env.workspace("shared-bad");
    for (body, line, key, why) in [
        (
            "[profiles.default]\nshared_paths = [\n  \"/root/.claude\",\n  \"/root/.claude/x\",\n]\n",
            4,
            "profiles.default.shared_paths[1]",
            "lies beneath or above shared_paths[0]",
        ),
        (
            "[profiles.default]\n\nshared_paths = [\"/workspace/.claude\"]\n",
            3,
            "profiles.default.shared_paths[0]",
            "is `/workspace` or beneath it",
        ),
        (
            "[profiles.default]\nshared_paths = [\"root/.claude\"]\n",
            2,
            "profiles.default.shared_paths[0]",
            "is not absolute",
        ),
    ] {
        let p = ws.write_config(body);
        let out = ws.lazaret(&["run", "--", "true"]).output().unwrap();
        assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("config {}:{line}: ", p.display())),
            "{err}"
        );
        assert!(err.contains(&format!("for key `{key}`")), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(
            !ws.domain_root("default").join("run").exists(),
            "something started"
        );
    }
}

#[test]
fn an_image_committed_from_a_domain_holds_nothing_of_its_shared_paths() {
    let env = require_env!();
    let one = env.workspace("shared-commit-one");
    let two = env.workspace("shared-commit-two");
    let profiles = Profiles::new(&one);
    let name = format!("shared-{}", profiles.agent.trim_start_matches("agent-"));
    one.write_config(&profiles.config());
    let agent = profiles.agent.as_str();
    let out = run(
        &one,
        agent,
        &format!("echo token-4711 > {SHARED}/credentials && echo installed > /root/installed"),
    );
    ok(&out);
    let out = one
        .lazaret(&["image", "commit", "--profile", agent, &name])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A profile without shared paths, on that image: the State Anchor's
    // file is there, the login is not.
    two.write_config(&format!("[profiles.{agent}]\nimage = \"local:{name}\"\n"));
    let out = run(
        &two,
        agent,
        &format!("cat /root/installed; ls -A {SHARED} 2>/dev/null; echo done"),
    );
    assert_eq!(ok(&out), "installed\ndone\n");
    let out = one
        .lazaret(&["image", "rm", "--yes", &format!("local:{name}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    profiles.remove(env);
}
