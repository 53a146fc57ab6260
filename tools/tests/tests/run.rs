//! `lazaret run` end to end, with the real runsc, as an unprivileged user.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text};
use std::time::Duration;

#[test]
fn exit_status_comes_back() {
    let env = require_env!();
    let ws = env.workspace("exit");
    let out = ws.run_sh("exit 7");
    assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));
    let out = ws
        .lazaret(&["run", "--", "no-such-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(127),
        "stderr: {}",
        text(&out.stderr)
    );
    // A command that prints runsc's own words for a missing executable
    // (and exits with its own status) is not taken for one: only runsc's
    // output before the command exists is read as runsc's.
    let out = ws.run_sh(
        "echo 'executing processes for container: executing command \"x\" in sandbox: error finding executable \"x\" in PATH [/bin]: no such file or directory' >&2; exit 3",
    );
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("lazaret: x: command not found"));
    let out = ws.lazaret(&["run", "--", "/tmp"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(126),
        "stderr: {}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn stdout_and_stderr_stay_apart_and_stdin_flows() {
    let env = require_env!();
    let ws = env.workspace("streams");
    let mut child = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "read l; echo out:$l; echo err:$l >&2",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"ping\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out:ping\n");
    assert_eq!(text(&out.stderr), "err:ping\n");
}

#[test]
fn kernel_inside_is_gvisor() {
    let env = require_env!();
    let ws = env.workspace("kernel");
    let out = ws.run_sh("dmesg; uname -r");
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("gVisor"), "dmesg does not show gVisor: {s}");
    let host = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    assert!(
        !s.lines().any(|l| l == host),
        "the host kernel {host} is visible: {s}"
    );
}

#[test]
fn workspace_edits_propagate_both_ways() {
    let env = require_env!();
    let ws = env.workspace("files");
    // A long session, so that the host edits happen while it runs.
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            // `-s`: the host's `>` creates the file before `echo` writes
            // it; an empty one is not yet the edit.
            "echo inside > /workspace/from-inside; \
             for i in $(seq 200); do [ -s /workspace/from-host ] && break; sleep 0.05; done; \
             cat /workspace/from-host",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `>` creates the file before `echo` writes it: wait for the content.
    assert!(
        eventually(Duration::from_secs(30), || std::fs::read_to_string(
            ws.path.join("from-inside")
        )
        .unwrap_or_default()
            == "inside\n"),
        "the file written inside never appeared on the host"
    );
    assert!(ws.host_sh("echo outside > from-host").status.success());
    let out = session.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "outside\n");
}

#[test]
fn a_host_rewrite_of_a_file_read_inside_is_read_anew() {
    let env = require_env!();
    let ws = env.workspace("rewrite");
    assert!(ws.host_sh("echo before-1 > f.txt").status.success());
    // Inside reads the file (its pages are cached, and kept across opens),
    // waits for the host's rewrite (same size, another inode or the same),
    // then reads it again after the router's attribute TTL (1 s).
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "cd /workspace; cat f.txt f.txt; : > ready; \
             for i in $(seq 400); do [ -f go ] && break; sleep 0.05; done; \
             sleep 2; cat f.txt; \
             : > ready2; for i in $(seq 400); do [ -f go2 ] && break; sleep 0.05; done; \
             sleep 2; cat f.txt",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ready = |n: &str| eventually(Duration::from_secs(60), || ws.path.join(n).exists());
    assert!(ready("ready"), "the session never read the file");
    // In place (the same inode, as an editor that writes through does).
    assert!(ws
        .host_sh("printf 'after-2\\n\\n' > f.txt && touch go")
        .status
        .success());
    assert!(ready("ready2"), "the session never read the file again");
    // By rename (a new inode, as most editors and git do).
    assert!(ws
        .host_sh("printf 'after-3\\n\\n' > t && mv t f.txt && touch go2")
        .status
        .success());
    let out = session.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout),
        "before-1\nbefore-1\nafter-2\n\nafter-3\n\n"
    );
}

#[test]
fn git_works_inside_and_commits_reach_the_host() {
    let env = require_env!();
    let ws = env.workspace("git");
    let out = ws.run_sh(
        "set -e; cd /workspace; echo change >> README; echo new > added.txt; \
         git status --short; git add -A; \
         git -c user.name=Agent -c user.email=agent@sandbox.invalid commit -qm 'from the sandbox'; \
         git log --oneline | head -1",
    );
    assert!(
        out.status.success(),
        "stdout: {} stderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let s = text(&out.stdout);
    assert!(
        s.contains(" M README") && s.contains("?? added.txt"),
        "git status inside: {s}"
    );
    let log = ws.host_sh("git log --format=%s -1 && git status --porcelain");
    assert_eq!(
        text(&log.stdout),
        "from the sandbox\n",
        "host git: {}",
        text(&log.stderr)
    );
}

#[test]
fn git_sentry_protects_config_and_hooks() {
    let env = require_env!();
    let ws = env.workspace("sentry");
    let config_before = std::fs::read(ws.path.join(".git/config")).unwrap();
    let hooks_before = ws.host_sh("ls .git/hooks").stdout;
    let out = ws.run_sh(
        "cd /workspace; \
         echo '[core] fsmonitor = evil' >> .git/config && echo WROTE-CONFIG; \
         git config core.hooksPath /tmp/h && echo SET-HOOKSPATH; \
         mv .git/config .git/config.old && echo MOVED-CONFIG; \
         mv .git .git-moved && echo MOVED-GIT; \
         ln -sf /tmp .git/hooks2 && mv -T .git/hooks2 .git/hooks && echo REPLACED-HOOKS; \
         printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo HOOK-INSIDE; \
         echo '[core] fsmonitor = evil' > .git/commondir-test; \
         ls .git/hooks | wc -l",
    );
    let s = text(&out.stdout);
    // `git config` inside writes a private copy (the host's stays as it
    // is, checked below), so SET-HOOKSPATH may succeed.
    for forbidden in [
        "WROTE-CONFIG",
        "MOVED-CONFIG",
        "MOVED-GIT",
        "REPLACED-HOOKS",
    ] {
        assert!(
            !s.contains(forbidden),
            "{forbidden} succeeded inside: {s} / {}",
            text(&out.stderr)
        );
    }
    // Hooks may be written inside, into sandbox-local storage only.
    assert!(s.contains("HOOK-INSIDE"), "hooks tmpfs not writable: {s}");
    assert_eq!(
        std::fs::read(ws.path.join(".git/config")).unwrap(),
        config_before
    );
    assert!(
        !ws.path.join(".git/hooks/pre-commit").exists(),
        "a hook written inside reached the host"
    );
    assert_eq!(ws.host_sh("ls .git/hooks").stdout, hooks_before);
    // The host's Git still works and runs no hook of the sandbox.
    let host = ws.host_sh("git commit -q --allow-empty -m host && git log --oneline | wc -l");
    assert!(host.status.success(), "{}", text(&host.stderr));
    assert!(!text(&host.stdout).contains("pwned"));
}

#[test]
fn home_and_config_are_invisible_inside() {
    let env = require_env!();
    let ws = env.workspace("hidden");
    let cfg = ws.write_config("[profiles.default]\nimage = \"lazaret:default\"\n");
    let secret = env
        .home
        .join(".cache/lazaret-e2e")
        .join("secret-outside-workspace");
    assert!(env
        .sh(&format!("echo s3cr3t > '{}'", secret.display()))
        .status
        .success());
    let out = ws.run_sh(&format!(
        "for p in '{}' '{}' '{}' '{}'; do [ -e \"$p\" ] && echo VISIBLE:$p; done; \
         grep -rs s3cr3t /home /root /tmp /workspace /mnt /srv /opt; echo done",
        secret.display(),
        cfg.display(),
        env.home.display(),
        env.data_home.display(),
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n", "host paths visible inside");
    let _ = std::fs::remove_file(secret);
}

#[test]
fn two_sessions_share_one_sandbox_and_nothing_remains() {
    let env = require_env!();
    let ws = env.workspace("shared");
    let id = ws.domain_id("default");
    let first = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "echo from-first > /tmp/shared; for i in $(seq 600); do [ -f /tmp/second-done ] && exit 0; sleep 0.05; done; exit 9",
        ])
        .spawn()
        .unwrap();
    let mut read = String::new();
    assert!(
        eventually(Duration::from_secs(120), || {
            let out = ws.run_sh("cat /tmp/shared 2>/dev/null");
            read = text(&out.stdout);
            read == "from-first\n"
        }),
        "the second session did not see the first one's /tmp: {read:?}"
    );
    // One coordinator, one runsc sandbox for both sessions.
    let coordinators: Vec<_> = lazaret_tests::processes_mentioning(&id)
        .into_iter()
        .filter(|(_, c)| c.contains("lazaret-coordinator"))
        .collect();
    assert_eq!(coordinators.len(), 1, "{coordinators:#?}");
    assert!(ws.run_sh("touch /tmp/second-done").status.success());
    let status = first.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(0));
    assert_domain_gone(&id);
    assert!(
        !ws.domain_root("default").join("run").exists(),
        "transient state left"
    );
    // Every step its coordinator recorded is one the lifecycle model allows.
    lazaret_tests::assert_lifecycle_replays(&ws.domain_root("default"));
    // Persistent Domain state stays.
    assert!(ws.domain_root("default").join("domain.redb").exists());
}

#[test]
fn sigkill_of_the_coordinator_is_recovered() {
    let env = require_env!();
    let ws = env.workspace("crash");
    let id = ws.domain_id("default");
    let session = ws
        .lazaret(&["run", "--", "sleep", "120"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut coordinator = None;
    assert!(eventually(Duration::from_secs(120), || {
        let sandbox_up = lazaret_tests::processes_mentioning(&id)
            .iter()
            .any(|(_, c)| c.contains("runsc") && c.contains(" exec "));
        coordinator = lazaret_tests::processes_mentioning(&id)
            .into_iter()
            .find(|(_, c)| c.contains("lazaret-coordinator"))
            .map(|(p, _)| p);
        sandbox_up && coordinator.is_some()
    }));
    let pid = coordinator.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // The session learns that its Domain is gone and says so.
    let out = session.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("lost"), "{}", text(&out.stderr));
    // Nothing of the killed generation survives its coordinator.
    assert_domain_gone(&id);
    // And the next run works.
    let out = ws.run_sh("echo again");
    assert_eq!(text(&out.stdout), "again\n", "{}", text(&out.stderr));
    assert_domain_gone(&id);
    // The killed generation was recovered as the lifecycle model allows.
    lazaret_tests::assert_lifecycle_replays(&ws.domain_root("default"));
}

/// A runsc that behaves as the installed one except for the `SUBCOMMAND`
/// invocations, whose arguments `EDIT` (a shell snippet over "$@") changes
/// first (`$REAL` is the runsc the tests use): a real runsc failure,
/// provoked on demand.
fn runsc_wrapper(ws: &lazaret_tests::Workspace, name: &str, edit: &str) -> std::path::PathBuf {
    let real = ws.env.runsc.display();
    let wrapper = ws.base.join(name);
    let script = format!("#!/bin/sh\nREAL={real}\n{edit}\nexec \"$REAL\" \"$@\"\n");
    let out = ws.env.sh(&format!(
        "cat > '{w}' <<'LAZARET_EOF'\n{script}LAZARET_EOF\nchmod 755 '{w}'",
        w = wrapper.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    wrapper
}

#[test]
fn a_runsc_failure_at_start_is_a_lazaret_error() {
    let env = require_env!();
    let ws = env.workspace("runsc-fail");
    // `runsc exec` is given a working directory that does not exist in
    // the sandbox, as when /workspace breaks: runsc then fails before the
    // command runs, with "failed to find initial working directory" and
    // status 128.
    let wrapper = runsc_wrapper(
        &ws,
        "runsc-bad-cwd",
        // The specification comes in a sealed memfd: the wrapper hands
        // runsc an edited copy instead.
        r##"n=$#; prev=
for a in "$@"; do
  if [ "$prev" = --process ]; then
    t=$(mktemp); sed 's#"cwd":"/workspace"#"cwd":"/workspace/no-such-dir"#' "$a" > "$t"; a=$t
  fi
  set -- "$@" "$a"; prev=$a
done
shift "$n""##,
    );
    ws.write_config(&format!("[runtime]\nrunsc = \"{}\"\n", wrapper.display()));
    let out = ws.run_sh("echo RAN");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(!text(&out.stdout).contains("RAN"));
    assert!(
        err.starts_with("lazaret: error: ")
            && err.contains("could not be started in the sandbox")
            && err.contains("cannot reach /workspace")
            && err.contains("then run again"),
        "not a Lazaret error with its fix: {err}"
    );
    for raw in [
        "executing processes for container",
        "initial working directory",
    ] {
        assert!(
            !err.contains(raw),
            "runsc's raw message reached the user: {err}"
        );
    }
    // `runsc run` itself failing (an argument it refuses): the sandbox
    // never starts; a Lazaret error, runsc's text only in the log.
    let broken = env.workspace("runsc-run-fail");
    let wrapper = runsc_wrapper(
        &broken,
        "runsc-bad-run",
        r#"for a in "$@"; do [ "$a" = run ] && exec "$REAL" --no-such-runsc-flag "$@"; done"#,
    );
    broken.write_config(&format!("[runtime]\nrunsc = \"{}\"\n", wrapper.display()));
    let out = broken.run_sh("echo RAN");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(
        err.starts_with("lazaret: error: the sandbox could not start: runsc failed to start it")
            && err.contains("lazaret doctor"),
        "{err}"
    );
    assert!(
        !err.contains("no-such-runsc-flag"),
        "runsc's raw text: {err}"
    );
    // A session whose command does start is unaffected by the latch.
    let good = env.workspace("runsc-ok");
    let out = good.run_sh("echo out; echo err >&2; exit 3");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
}

/// runsc's `--dcache` as Lazaret passes it (`DCACHE_SIZE` in
/// lib/helpers/src/runsc.rs) to the runsc 20221219 these tests run.
const DCACHE_SIZE: u32 = 1000;

/// The soft and hard `Max open files` of a live process.
fn nofile_of(pid: i32) -> Option<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut f = line["Max open files".len()..].split_whitespace();
    Some((f.next()?.to_string(), f.next()?.to_string()))
}

#[test]
fn long_lived_processes_raise_their_soft_descriptor_limit_and_runsc_bounds_its_dcache() {
    let env = require_env!();
    let ws = env.workspace("nofile");
    let id = ws.domain_id("default");
    // A new user's limits: soft 1024, and a hard limit above it.
    let mut cmd = ws.lazaret(&[
        "run",
        "--",
        "sh",
        "-c",
        "for i in $(seq 1200); do [ -f /workspace/host-done ] && exit 0; sleep 0.05; done; exit 9",
    ]);
    // SAFETY: setrlimit is a raw system call, async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit {
                    current: Some(1024),
                    maximum: Some(8192),
                },
            )
            .map_err(std::io::Error::from)
        });
    }
    let mut session = cmd.spawn().unwrap();
    let cli = session.id() as i32;
    let wanted = [
        "lazaret-coordinator",
        "lazaret-supervisor",
        "lazaret-exec-bridge",
        "runsc",
    ];
    let found = eventually(Duration::from_secs(60), || {
        let procs = lazaret_tests::processes_mentioning(&id);
        wanted
            .iter()
            .all(|w| procs.iter().any(|(_, c)| c.contains(w)))
    });
    let procs = lazaret_tests::processes_mentioning(&id);
    assert!(
        found,
        "not every process of the Domain appeared: {procs:#?}"
    );
    // gVisor's dentry cache (and so its host files) is bounded.
    let runsc_run: Vec<_> = procs
        .iter()
        .filter(|(_, c)| c.contains("runsc") && c.contains(" run "))
        .collect();
    assert!(
        !runsc_run.is_empty()
            && runsc_run
                .iter()
                .all(|(_, c)| c.contains(&format!("--dcache={DCACHE_SIZE}"))),
        "runsc run without --dcache: {runsc_run:#?}"
    );
    let mut checked = vec![("lazaret run".to_string(), cli)];
    for (pid, cmdline) in &procs {
        if cmdline.contains("lazaret-mount-router") {
            continue; // its own engineer's: it raises its limit itself
        }
        checked.push((cmdline.clone(), *pid));
    }
    for (what, pid) in &checked {
        let Some((soft, hard)) = nofile_of(*pid) else {
            continue; // exited meanwhile
        };
        assert_eq!(
            (soft.as_str(), hard.as_str()),
            ("8192", "8192"),
            "{what} (pid {pid}) keeps soft {soft} / hard {hard}"
        );
    }
    assert!(ws.host_sh("touch host-done").status.success());
    assert_eq!(session.wait().unwrap().code(), Some(0));
}

#[test]
fn doctor_warns_about_bare_repositories_and_shows_descriptor_limits() {
    let env = require_env!();
    let ws = env.workspace("doctor-git");
    let global = ws.base.join("gitconfig");
    let doctor = |body: &str| {
        assert!(env
            .sh(&format!("printf '{body}' > '{}'", global.display()))
            .status
            .success());
        let out = ws
            .lazaret(&["doctor"])
            .env("GIT_CONFIG_GLOBAL", &global)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout))
    };
    let (code, s) = doctor("[user]\\n\\tname = x\\n");
    assert_eq!(code, Some(0), "a warning must not fail doctor: {s}");
    let line = s
        .lines()
        .find(|l| l.contains("safe.bareRepository"))
        .unwrap_or_default();
    assert!(
        line.starts_with("WARN") && line.contains("explicit") && line.contains("runs"),
        "{s}"
    );
    let (_, s) = doctor("[safe]\\n\\tbareRepository = explicit\\n");
    assert!(
        s.lines()
            .any(|l| l.starts_with("ok") && l.contains("safe.bareRepository")),
        "{s}"
    );
    let nofile = s
        .lines()
        .find(|l| l.contains("RLIMIT_NOFILE"))
        .unwrap_or_default();
    assert!(
        nofile.contains("soft ") && nofile.contains("hard ") && nofile.contains("4160"),
        "{s}"
    );
}

#[test]
fn doctor_passes_on_a_prepared_machine() {
    let env = require_env!();
    let ws = env.workspace("doctor");
    let out = ws.lazaret(&["doctor"]).output().unwrap();
    let s = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{s}{}", text(&out.stderr));
    // An older runsc works, with a warning naming what a newer one gains.
    assert!(
        s.lines()
            .any(|l| (l.starts_with("ok") || l.starts_with("WARN")) && l.contains(" runsc: ")),
        "no runsc line: {s}"
    );
    for what in [
        "newuidmap",
        "subordinate uids",
        "user namespaces",
        "/dev/fuse",
        "slirp4netns",
        "landlock",
        "mmdebstrap",
    ] {
        assert!(
            s.lines().any(|l| l.starts_with("ok") && l.contains(what)),
            "no passing {what} line: {s}"
        );
    }
}

/// Git inside commits as the host's identity (its `user.name` and
/// `user.email`, read from the host's Git configuration), the repository's
/// own setting still wins, and the profile's `git_identity` replaces the
/// host's or turns it off.
#[test]
fn git_inside_commits_as_the_host_identity_unless_told_otherwise() {
    let env = require_env!();
    let ws = env.workspace("git-identity");
    let global = ws.base.join("host-gitconfig");
    let out = env.sh(&format!(
        "printf '[user]\\n\\tname = Host Dev\\n\\temail = dev@host.example\\n' > '{}'",
        global.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let commit = || {
        let a = [
            "run",
            "--",
            "sh",
            "-c",
            "cd /workspace && git -c user.useConfigOnly=true commit -q --allow-empty -m x \
             && git log -1 --format=%an/%ae",
        ];
        let out = ws
            .lazaret(&a)
            .env("GIT_CONFIG_GLOBAL", &global)
            .output()
            .unwrap();
        (
            out.status.code(),
            text(&out.stdout).trim().to_string(),
            text(&out.stderr),
        )
    };
    let (code, who, err) = commit();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(who, "Host Dev/dev@host.example");

    // A Domain still tearing down would refuse the changed config.
    assert_domain_gone(&ws.domain_id("default"));
    ws.write_config("[profiles.default.git_identity]\nname = \"Agent\"\n");
    let (code, who, err) = commit();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        who, "Agent/dev@host.example",
        "the profile's name replaces the host's"
    );

    // A Domain still tearing down would refuse the changed config.
    assert_domain_gone(&ws.domain_id("default"));
    ws.write_config("[profiles.default.git_identity]\nfrom_host = false\n");
    let (code, _, err) = commit();
    assert_ne!(code, Some(0), "Git inside still had an identity: {err}");

    // The repository's own configuration wins over the host's.
    assert_domain_gone(&ws.domain_id("default"));
    ws.write_config("");
    assert!(ws
        .host_sh("git config user.name Repo && git config user.email repo@example.org")
        .status
        .success());
    let (code, who, err) = commit();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(who, "Repo/repo@example.org");
}

/// Every installed runsc (the one the tests use, and
/// `LAZARET_TEST_OTHER_RUNSC`: Debian 12's 20221219 beside
/// bookworm-backports' 20240729) starts a Domain with the default network,
/// whatever the kernel makes of runsc's root-network-namespace check:
/// Lazaret asks the kernel, not the release date, whether the check would
/// fire (on 6.18 it fires with every release, and 20240729 failed to start
/// with "cannot run with network enabled in root network namespace"), and
/// `lazaret doctor` says which runsc, platform and workaround run.
#[test]
fn each_installed_runsc_starts_a_domain_with_its_network() {
    let env = require_env!();
    for runsc in lazaret_tests::installed_runscs(env) {
        let ws = env.workspace("each-runsc");
        ws.write_config(&format!("[runtime]\nrunsc = \"{}\"\n", runsc.display()));
        let version = std::process::Command::new(&runsc)
            .arg("--version")
            .output()
            .unwrap();
        let version = text(&version.stdout);
        let version = version
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("runsc version "))
            .unwrap_or_else(|| panic!("{}: no version in {version:?}", runsc.display()));

        let doctor = ws.lazaret(&["doctor"]).output().unwrap();
        let doctor = text(&doctor.stdout);
        let line = doctor
            .lines()
            .find(|l| l.contains(" runsc: "))
            .unwrap_or_else(|| panic!("no runsc line: {doctor}"));
        assert!(line.contains(&format!("version {version}")), "{line}");
        assert!(line.contains(", platform "), "{line}");
        assert!(line.contains(", file access: "), "{line}");
        let shown = std::process::Command::new("unshare")
            .args([
                "--user",
                "--net",
                "test",
                "-e",
                "/proc/sys/net/core/rmem_default",
            ])
            .status()
            .unwrap()
            .success();
        assert_eq!(line.contains("/proc/sys/net tmpfs"), shown, "{line}");

        // A session with the default network, seen from the host while it
        // runs: the sandbox is this runsc, and it has the network stack's
        // interface besides loopback.
        let session = ws
            .lazaret(&["run", "--", "sh", "-c", "cat /proc/net/dev; sleep 60"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let id = ws.domain_id("default");
        let sandbox = || {
            lazaret_tests::processes_mentioning(&id)
                .into_iter()
                .find(|(_, c)| c.starts_with("runsc-sandbox"))
        };
        // Its executable, once it can be read: the process may be seen
        // before it can (while runsc re-executes itself as the sandbox).
        let exe =
            || sandbox().and_then(|(pid, _)| std::fs::read_link(format!("/proc/{pid}/exe")).ok());
        let up = eventually(Duration::from_secs(120), || exe().is_some());
        let exe = exe();
        // The session ends with its Domain (exit 137).
        let stop = ws.lazaret(&["stop"]).output().unwrap();
        assert!(stop.status.success(), "{}", text(&stop.stderr));
        let out = session.wait_with_output().unwrap();
        assert!(
            up,
            "{}: no sandbox came up: {}",
            runsc.display(),
            text(&out.stderr)
        );
        assert_eq!(
            exe,
            Some(std::fs::canonicalize(&runsc).unwrap()),
            "the sandbox is not {}",
            runsc.display()
        );
        let dev = text(&out.stdout);
        assert!(
            dev.lines()
                .skip(2)
                .any(|l| l.split(':').next().is_some_and(|n| n.trim() != "lo")),
            "{}: no interface but loopback inside: {dev}\n{}",
            runsc.display(),
            text(&out.stderr)
        );
        assert_domain_gone(&id);
    }
}

/// A package installed with apt without a terminal prints no `E:` line
/// (issue 29): runsc releases that refuse the `TIOCSCTTY` apt's child
/// issues on its pseudo-terminal get an image whose apt does not open one.
/// Meaningful on those releases: the smoke subset runs it on 20221219.
#[test]
fn apt_without_a_terminal_installs_without_an_error_line() {
    let env = require_env!();
    let ws = env.workspace("apt-notty");
    // A local package apt installs with no network and no package lists.
    let out = ws.run_sh(
        "set -e; d=$(mktemp -d); mkdir -p $d/pkg/DEBIAN $d/pkg/usr/bin; \
         printf 'Package: lzapt\\nVersion: 1\\nArchitecture: all\\nMaintainer: t <t@t>\\nDescription: t\\n' > $d/pkg/DEBIAN/control; \
         printf '#!/bin/sh\\necho lzapt-ok\\n' > $d/pkg/usr/bin/lzapt; chmod 755 $d/pkg/usr/bin/lzapt; \
         dpkg-deb --build $d/pkg /tmp/lzapt.deb >/dev/null; \
         apt-get install -y /tmp/lzapt.deb </dev/null; lzapt",
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        text(&out.stdout).ends_with("lzapt-ok\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        !err.lines()
            .chain(text(&out.stdout).lines())
            .any(|l| l.starts_with("E:")),
        "apt printed an error line on success:\n{err}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}
