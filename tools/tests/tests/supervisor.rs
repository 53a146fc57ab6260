//! The Runtime Supervisor, not the coordinator, starts every Client
//! Session's exec bridge (issue 13): the coordinator confines itself after
//! start-up, and a confined process must not be the parent of `runsc`.

use lazaret_tests::{assert_domain_gone, eventually, processes_mentioning, require_env, text};
use std::time::Duration;

/// The parent PID of `pid` (field 4 of `/proc/PID/stat`).
fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

fn find(procs: &[(i32, String)], what: &str) -> Vec<i32> {
    procs
        .iter()
        .filter(|(_, c)| c.contains(what))
        .map(|(p, _)| *p)
        .collect()
}

#[test]
fn exec_bridges_are_children_of_the_supervisor_not_of_the_coordinator() {
    let env = require_env!();
    let ws = env.workspace("bridge-parent");
    let id = ws.domain_id("default");
    // A session that runs until the second one says so.
    let first = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "while [ ! -e /tmp/go ]; do sleep 0.1; done; echo first-done",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = (Vec::new(), Vec::new(), Vec::new());
    let up = eventually(Duration::from_secs(120), || {
        let procs = processes_mentioning(&id);
        let coordinators = find(&procs, "lazaret-coordinator");
        // The holder is a clone of the supervisor (same command line):
        // the supervisor is the coordinator's child.
        let supervisors: Vec<i32> = find(&procs, "lazaret-supervisor")
            .into_iter()
            .filter(|p| coordinators.len() == 1 && ppid(*p) == Some(coordinators[0]))
            .collect();
        seen = (
            coordinators,
            supervisors,
            find(&procs, "lazaret-exec-bridge"),
        );
        seen.0.len() == 1 && seen.1.len() == 1 && seen.2.len() == 1
    });
    assert!(
        up,
        "the Domain's processes: {:#?}",
        processes_mentioning(&id)
    );
    let (coordinator, supervisor, bridges) = (seen.0[0], seen.1[0], seen.2.clone());
    assert_eq!(ppid(supervisor), Some(coordinator));
    for b in &bridges {
        assert_eq!(
            ppid(*b),
            Some(supervisor),
            "exec bridge {b} is not the supervisor's child: {:#?}",
            processes_mentioning(&id)
        );
    }
    // The coordinator's only child among the Domain's processes is the
    // supervisor: no bridge, no runsc.
    let children: Vec<_> = processes_mentioning(&id)
        .into_iter()
        .filter(|(p, _)| ppid(*p) == Some(coordinator))
        .collect();
    assert!(
        children
            .iter()
            .all(|(_, c)| !c.contains("runsc") && !c.contains("lazaret-exec-bridge")),
        "the coordinator is the parent of {children:#?}"
    );

    // A second, concurrent session: its bridge is the supervisor's too,
    // and it ends the first one.
    let out = ws.run_sh("touch /tmp/go; echo second-done");
    assert_eq!(text(&out.stdout), "second-done\n", "{}", text(&out.stderr));
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "first-done\n");
    assert_domain_gone(&id);
    // The supervisor removed the run directory before it exited.
    assert!(
        !ws.domain_root("default").join("run").exists(),
        "transient state left"
    );
}

#[test]
fn a_session_status_and_signals_still_pass_through_the_supervisor() {
    let env = require_env!();
    let ws = env.workspace("bridge-status");
    let id = ws.domain_id("default");
    let out = ws.run_sh("echo out; echo err >&2; exit 7");
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    assert!(text(&out.stderr).contains("err\n"), "{}", text(&out.stderr));
    // A signal the client forwards reaches the command (through the
    // bridge's pidfd, which the supervisor handed to the coordinator).
    let mut child = ws
        .lazaret(&["run", "--", "sh", "-c", "echo started; exec sleep 120"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut line = [0u8; 8];
    std::io::Read::read_exact(&mut stdout, &mut line).unwrap();
    assert_eq!(&line, b"started\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert_domain_gone(&id);
}
