//! The coordinator confines itself once start-up is over (issue 13): while
//! sessions run it has no capabilities, `no_new_privs`, a seccomp filter,
//! and still serves sessions, PTYs and escalations (the rest of the suite).

use lazaret_tests::{assert_domain_gone, require_env, text};

fn status_field(pid: i32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

#[test]
fn the_running_coordinator_is_confined() {
    let env = require_env!();
    let ws = env.workspace("coordconf");
    let mut child = ws
        .lazaret(&["run", "--", "sh", "-c", "echo up; sleep 6"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "up\n");
    let id = ws.domain_id("default");
    let coordinators: Vec<(i32, String)> = lazaret_tests::processes_mentioning(&id)
        .into_iter()
        .filter(|(pid, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("lazaret-coordi"))
        })
        .collect();
    assert_eq!(coordinators.len(), 1, "{coordinators:?}");
    let pid = coordinators[0].0;
    assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
    assert_eq!(status_field(pid, "Seccomp:"), "2");
    assert_eq!(status_field(pid, "CapEff:"), "0000000000000000");
    assert_eq!(status_field(pid, "CapPrm:"), "0000000000000000");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&id);
    // It logged no refusal of its own confinement.
    let log = std::fs::read_to_string(ws.domain_root("default").join("coordinator.log"))
        .unwrap_or_default();
    assert!(!log.contains("cannot confine"), "{log}");
}
