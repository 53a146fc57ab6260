//! The lifecycle model, tied to the code: a real Domain's recorded steps
//! (the `lifecycle:` lines its coordinators write to `coordinator.log`)
//! replay through the model's transitions
//! (`lazaret_protocol::lifecycle`, checked exhaustively by
//! `lib/protocol/tests/lifecycle_model.rs`): start-up leader, a second session
//! joining, Host Escalations completed and cancelled, a coordinator killed
//! with SIGKILL, recovery, a second generation and its teardown.

use lazaret_protocol::lifecycle::{Event, Phase, ResultKind};
use lazaret_tests::{
    assert_domain_gone, assert_lifecycle_replays, eventually, lifecycle_trace, require_env, text,
};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn a_domain_lifecycle_with_a_crash_replays_through_the_model() {
    let env = require_env!();
    let ws = env.workspace("model-trace");
    ws.write_config(
        r#"[[profiles.default.escalation.auto_approve]]
argv = ["/bin/echo", "hi"]
[[profiles.default.escalation.auto_approve]]
argv = ["/bin/sleep", "60"]
"#,
    );
    let id = ws.domain_id("default");
    let root = ws.domain_root("default");

    // The first session leads the start-up and stays.
    let first = ws
        .lazaret(&["run", "--", "sleep", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(120), || {
        let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.as_array().is_some_and(|a| {
            a.iter()
                .any(|d| d["domain_id"] == id.as_str() && d["session_count"] == 1)
        })
    }));
    // A second session joins it: one request completes, another is
    // cancelled while its host command runs.
    let out = ws.run_sh(
        "lazaret-escalate -- /bin/echo hi; \
         lazaret-escalate -- /bin/sleep 60 & p=$!; sleep 2; kill -INT $p; wait $p; echo rc=$?",
    );
    assert!(
        text(&out.stdout) == "hi\nrc=130\n",
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The generation's coordinator is killed; its session learns it.
    let owner = lifecycle_trace(&root)
        .into_iter()
        .find(|(_, e)| *e == Event::Owner)
        .map(|(pid, _)| pid)
        .expect("the coordinator recorded no ownership");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(owner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert_domain_gone(&id);
    // The next start recovers the killed generation, then runs and
    // stops the second.
    let out = ws.run_sh("echo again");
    assert_eq!(text(&out.stdout), "again\n", "{}", text(&out.stderr));
    assert_domain_gone(&id);

    let record = assert_lifecycle_replays(&root);
    let trace = lifecycle_trace(&root);
    assert_eq!(record.generation, Some((2, Phase::Stopped)), "{trace:#?}");
    assert_eq!(record.owner, None, "{trace:#?}");
    let has = |e: &Event| trace.iter().any(|(_, t)| t == e);
    assert!(
        has(&Event::Recovered {
            generation: 1,
            from: Phase::Running
        }),
        "{trace:#?}"
    );
    let owners: Vec<u32> = trace
        .iter()
        .filter(|(_, e)| *e == Event::Owner)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(owners.len(), 2, "{trace:#?}");
    assert_eq!(owners[0], owner);
    let joined = trace
        .iter()
        .filter(|(_, e)| matches!(e, Event::Joined { .. }))
        .count();
    assert_eq!(joined, 3, "{trace:#?}");
    let requests: Vec<_> = record.requests.values().collect();
    assert!(
        requests
            .iter()
            .any(|r| r.host_command && r.kind == Some(ResultKind::Completed)),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.host_command && r.cancel_sent && r.kind == Some(ResultKind::Cancelled)),
        "{requests:#?}"
    );
}
