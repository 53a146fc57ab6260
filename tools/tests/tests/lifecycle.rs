//! Everyday lifecycle commands (issue 15, item 1): `lazaret ps`, `stop`,
//! `logs`, `state rm` and `state prune`; commands that need an inactive
//! Domain wait for one that is stopping; processes are found by what they
//! hold, never by their command line; records refresh after a reset.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text};
use std::process::Stdio;
use std::time::Duration;

/// Whether `lazaret ps --json` shows Domain `id` serving one session.
fn one_session(ws: &lazaret_tests::Workspace<'_>, id: &str) -> bool {
    let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array().is_some_and(|a| {
        a.iter()
            .any(|d| d["domain_id"] == id && d["session_count"] == 1)
    })
}

#[test]
fn ps_shows_a_running_domain_stop_ends_it_and_logs_are_timestamped() {
    let env = require_env!();
    let ws = env.workspace("ps-stop");
    let id = ws.domain_id("default");
    let mut session = ws
        .lazaret(&["run", "--", "sleep", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(60), || one_session(
        &ws, &id
    )));
    let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["domain_id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["profile"], "default");
    assert_eq!(row["workspace"], ws.path.to_str().unwrap());
    assert_eq!(row["state"], "running");
    assert!(row["memory_bytes"].as_u64().unwrap() > 1 << 20, "{row}");
    let out = ws.lazaret(&["ps"]).output().unwrap();
    let table = text(&out.stdout);
    assert!(table.starts_with("DOMAIN"), "{table}");
    assert!(
        table.contains(&id[..12]) && table.contains("running"),
        "{table}"
    );

    // Nothing that needs an inactive Domain proceeds while it serves one.
    let out = ws
        .lazaret(&["state", "reset", "--all", "--yes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("serving 1 session(s)"),
        "{}",
        text(&out.stderr)
    );

    let out = ws.lazaret(&["stop"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("stopped Domain {id}\n"));
    // Its session ended as a stopped container's does (SIGKILL), and
    // says why.
    let status = session.wait().unwrap();
    assert_eq!(status.code(), Some(137));
    let mut err = String::new();
    use std::io::Read;
    session
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("lazaret: the Domain was stopped (`lazaret stop`)"),
        "{err}"
    );
    assert_domain_gone(&id);
    // `lazaret stop` tore it down as the lifecycle model allows.
    lazaret_tests::assert_lifecycle_replays(&ws.domain_root("default"));
    let out = ws.lazaret(&["ps"]).output().unwrap();
    assert!(!text(&out.stdout).contains(&id[..12]));
    // By ID too, or its first digits as `lazaret ps` shows them.
    let out = ws.lazaret(&["stop", &id[..12]]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("is not running"));
    let out = ws.lazaret(&["stop", "zz"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("is not a Domain ID"));

    // Coordinator events carry a UTC timestamp; the helpers' output is
    // apart.
    let out = ws.lazaret(&["logs"]).output().unwrap();
    let log = text(&out.stdout);
    let by_id = ws.lazaret(&["logs", &id]).output().unwrap();
    assert_eq!(text(&by_id.stdout), log);
    assert!(log.contains("asked to stop by lazaret stop"), "{log}");
    for line in log.lines() {
        assert!(
            line.len() > 25
                && line.as_bytes()[4] == b'-'
                && line[..25].contains('T')
                && line[..25].contains('Z'),
            "not timestamped: {line}"
        );
    }
    assert!(!log.contains("slirp"), "{log}");
    let out = ws.lazaret(&["logs", "--helpers"]).output().unwrap();
    assert!(
        text(&out.stdout).contains("lazaret-supervisor"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn reset_waits_for_a_stopping_domain_and_ignores_command_lines() {
    let env = require_env!();
    let ws = env.workspace("reset-wait");
    let id = ws.domain_id("default");
    let out = ws.run_sh("echo x > /usr/local/marker");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // At once: the Domain may still be tearing down.
    let out = ws
        .lazaret(&["state", "reset", "/usr", "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The records follow the reset at once: no "unreadable" generation.
    let out = ws.lazaret(&["state", "inspect"]).output().unwrap();
    let list = text(&out.stdout);
    assert!(list.contains("/usr (generation 2)"), "{list}");
    assert!(!list.contains("unreadable"), "{list}");
    // A process that merely names the Domain is no user of it.
    let mut namer = env
        .command("/bin/sh")
        .args(["-c", "sleep 60", &id])
        .spawn()
        .unwrap();
    let out = ws
        .lazaret(&["state", "reset", "--all", "--yes"])
        .output()
        .unwrap();
    let _ = namer.kill();
    let _ = namer.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `inspect` summarizes; `--paths` lists.
    let out =
        ws.run_sh("mkdir -p /opt/many && for i in $(seq 50); do echo $i > /opt/many/f$i; done");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&id);
    let out = ws.lazaret(&["state", "inspect"]).output().unwrap();
    let short = text(&out.stdout);
    assert!(
        short.contains("/opt") && !short.contains("/opt/many/f1"),
        "{short}"
    );
    let out = ws
        .lazaret(&["state", "inspect", "--paths"])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("/opt/many/f1"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn state_rm_and_prune_remove_inactive_domains_only() {
    let env = require_env!();
    let keep = env.workspace("prune-keep");
    let gone = env.workspace("prune-gone");
    for w in [&keep, &gone] {
        let out = w.run_sh("echo x > /root/marker");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_domain_gone(&w.domain_id("default"));
    }
    let gone_root = gone.domain_root("default");
    let gone_id = gone.domain_id("default");
    assert!(gone_root.exists());
    // The workspace goes away; prune asks, and without a terminal needs --yes.
    let out = env.sh(&format!("rm -rf '{}'", gone.path.display()));
    assert!(out.status.success());
    let out = keep.lazaret(&["state", "prune"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
    assert!(gone_root.exists(), "nothing is removed unasked");
    let out = keep.lazaret(&["state", "prune", "--yes"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("removed Domain {gone_id}")));
    assert!(!gone_root.exists());
    assert!(keep.domain_root("default").exists());

    // `state rm` refuses an active Domain, then removes it once inactive.
    let mut session = keep
        .lazaret(&["run", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let sock = keep.domain_root("default").join("run/coordinator.sock");
    assert!(eventually(Duration::from_secs(60), || sock.exists()));
    assert!(eventually(Duration::from_secs(30), || {
        let out = keep.lazaret(&["ps", "--json"]).output().unwrap();
        text(&out.stdout).contains("\"session_count\": 1")
    }));
    let out = keep.lazaret(&["state", "rm", "--yes"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is active"),
        "{}",
        text(&out.stderr)
    );
    assert!(keep.domain_root("default").exists());
    let _ = keep.lazaret(&["stop"]).output().unwrap();
    let _ = session.wait();
    let out = keep.lazaret(&["state", "rm", "--yes"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!keep.domain_root("default").exists());
    // The workspace itself is untouched.
    assert!(keep.path.join("README").exists());
}

/// Issue 29, item 3: without --profile, commands that act on one Domain
/// use the workspace's only Domain whatever its profile; with several
/// they list them and refuse; with none they say so, never a raw OS error.
#[test]
fn the_workspaces_only_domain_is_the_one_meant() {
    let env = require_env!();
    let ws = env.workspace("obvious");
    ws.write_config("[profiles.agent]\n");
    // None yet: a plain message naming the workspace, no OS error.
    for args in [&["logs"][..], &["escalations"][..], &["stop"][..]] {
        let out = ws.lazaret(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("has no Domain of profile default"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("os error"), "{args:?}: {err}");
    }
    let out = ws
        .lazaret(&["--profile", "agent", "run", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let agent = ws.domain_id("agent");
    // The only Domain is agent's: every command finds it.
    let out = ws.lazaret(&["logs"]).output().unwrap();
    assert!(out.status.success(), "logs: {}", text(&out.stderr));
    assert!(!out.stdout.is_empty(), "logs printed nothing");
    let out = ws.lazaret(&["escalations", "--json"]).output().unwrap();
    assert!(out.status.success(), "escalations: {}", text(&out.stderr));
    let out = ws.lazaret(&["net", "show"]).output().unwrap();
    assert!(out.status.success(), "net show: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("Domain {agent} (profile agent")),
        "{}",
        text(&out.stdout)
    );
    let out = ws.lazaret(&["state", "inspect"]).output().unwrap();
    assert!(out.status.success(), "state inspect: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&agent), "{}", text(&out.stdout));
    // A second Domain in the workspace: no guess; both listed by profile.
    let out = ws.lazaret(&["run", "true"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let default = ws.domain_id("default");
    for args in [
        &["logs"][..],
        &["state", "inspect"][..],
        &["net", "show"][..],
    ] {
        let out = ws.lazaret(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(125),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert!(err.contains("has 2 Domains"), "{args:?}: {err}");
        assert!(
            err.contains(&format!("--profile agent  (Domain {agent})")),
            "{err}"
        );
        assert!(
            err.contains(&format!("--profile default  (Domain {default})")),
            "{err}"
        );
    }
    // Naming one still works.
    let out = ws
        .lazaret(&["--profile", "agent", "logs"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&agent);
    assert_domain_gone(&default);
}

/// `lazaret ps` asks every running Domain's coordinator. Polling it (a
/// status bar, `watch -n 0.1 lazaret ps`, another test waiting for its own
/// Domain) must not keep up a Domain whose last session ended: a control
/// request is no Client Session, and the coordinator stops taking new
/// connections once it is done serving, so the ones in flight end.
#[test]
fn polling_ps_does_not_keep_an_idle_domain_up() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let env = require_env!();
    let ws = env.workspace("ps-poll");
    let id = ws.domain_id("default");
    let session = ws
        .lazaret(&["run", "--", "sleep", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let polling = AtomicBool::new(true);
    let polls = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Two pollers back to back: a control connection is nearly always
        // in flight, as with several status bars.
        for _ in 0..2 {
            s.spawn(|| {
                while polling.load(Ordering::SeqCst) {
                    let _ = ws
                        .lazaret(&["ps", "--json"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status();
                    polls.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let out = session.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let before = polls.load(Ordering::SeqCst);
        let gone = eventually(Duration::from_secs(20), || {
            lazaret_tests::processes_mentioning(&id).is_empty()
        });
        let during = polls.load(Ordering::SeqCst) - before;
        polling.store(false, Ordering::SeqCst);
        assert!(
            before > 2,
            "the pollers ran while the session did ({before} polls)"
        );
        assert!(
            gone,
            "the Domain stayed up while `lazaret ps` was polled ({during} polls): {:#?}",
            lazaret_tests::processes_mentioning(&id)
        );
    });
    assert_domain_gone(&id);
    let log = std::fs::read_to_string(ws.domain_root("default").join("coordinator.log")).unwrap();
    assert!(log.contains("no Client Session left"), "{log}");
}

/// A changed configuration takes effect on the next `lazaret run`: right
/// after the last session ended (its coordinator may still be winding
/// down when the CLI returns), and while `keep_alive` holds an idle Domain
/// up. While a session runs, a run with another configuration is refused
/// and says why, and the running session goes on.
#[test]
fn a_changed_configuration_takes_effect_on_the_next_run() {
    let env = require_env!();
    let ws = env.workspace("config-change");
    let id = ws.domain_id("default");
    let config = |keep: &str, value: &str| {
        ws.write_config(&format!(
            "[profiles.default]\n{keep}env = {{ CHANGED = \"{value}\" }}\n"
        ));
    };
    let run = |want: &str| {
        let out = ws.run_sh("echo $CHANGED");
        assert!(
            out.status.success(),
            "the run with {want}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), format!("{want}\n"));
    };
    // Back to back, each run with the value its configuration gives.
    for i in 0..8 {
        config("", &format!("v{i}"));
        run(&format!("v{i}"));
    }

    // keep_alive holds the idle Domain up; a new configuration replaces it.
    let keep = "keep_alive = \"5m\"\n";
    config(keep, "kept");
    run("kept");
    assert!(
        !lazaret_tests::processes_mentioning(&id).is_empty(),
        "keep_alive did not keep the Domain up"
    );
    config(keep, "new");
    run("new");
    let log = std::fs::read_to_string(ws.domain_root("default").join("coordinator.log")).unwrap();
    assert!(
        log.contains("a session came with another configuration and no Client Session runs"),
        "{log}"
    );

    // While a session runs, another configuration is refused.
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "while [ ! -e /workspace/.end ]; do sleep 0.1; done; echo $CHANGED",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(60), || one_session(
        &ws, &id
    )));
    config(keep, "other");
    let out = ws.run_sh("echo $CHANGED");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("running with a different configuration")
            && err.contains("1 session(s) still run in it"),
        "{err}"
    );
    assert!(ws.host_sh("touch .end").status.success());
    let out = session.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "new\n");

    let out = ws.lazaret(&["stop"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&id);
    lazaret_tests::assert_lifecycle_replays(&ws.domain_root("default"));
}
