//! Load (issue 17, item 2): 16 clients join and leave one Domain at
//! random for a bounded time, each session running a command and two Host
//! Escalations (one auto-approved, one denied). Every command's status
//! comes back, every accepted request ends in exactly one recorded result
//! (OR-2), the coordinator's threads and memory come back to where they
//! were, and the Domain is torn down after its last session.
//!
//! `LAZARET_LOAD_SECS` sets the duration (default 40 s, as `.ci/run` runs
//! it); `LAZARET_LOAD_SECS=600 cargo test -p lazaret-tests --test load` is
//! the full version.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 16;

/// (threads, RSS in KiB) of `pid`.
fn threads_and_rss(pid: i32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    Some((field("Threads:")?, field("VmRSS:")?))
}

#[test]
fn sixteen_clients_joining_and_leaving_all_get_their_results_and_nothing_grows() {
    let env = require_env!();
    let ws = env.workspace("load");
    ws.write_config(
        "[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/echo\", \"host-ok\"]\n",
    );
    let secs: u64 = std::env::var("LAZARET_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let id = ws.domain_id("default");

    // One long session keeps the Domain (and its coordinator) up.
    let mut keeper = ws
        .lazaret(&["run", "--", "sleep", &(secs + 300).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let coordinator = || -> Option<i32> {
        // The process holding the Domain lock (see `lazaret ps`).
        let out = ws.lazaret(&["ps", "--json"]).output().ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v.as_array()?
            .iter()
            .find(|d| d["domain_id"] == id.as_str() && d["session_count"].as_u64() >= Some(1))?;
        lazaret_tests::processes_mentioning(&id)
            .into_iter()
            .find(|(_, c)| c.contains("lazaret-coordinator"))
            .map(|(p, _)| p)
    };
    assert!(eventually(Duration::from_secs(60), || coordinator().is_some()));
    let pid = coordinator().unwrap();

    let script = r#"echo "start $1"
lazaret-escalate -- /bin/echo host-ok; echo "auto=$?"
lazaret-escalate -- /bin/echo not-approved 2>/dev/null; echo "denied=$?"
exit $2"#;
    let run_once = |tag: &str, code: usize| {
        ws.lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            tag,
            &code.to_string(),
        ])
        .output()
        .unwrap()
    };
    // Warm up (thread pools, caches), then take the baseline.
    for i in 0..4 {
        let out = run_once(&format!("warm{i}"), 0);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let base = threads_and_rss(pid).unwrap();

    let deadline = Instant::now() + Duration::from_secs(secs);
    let done = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let peak = Arc::new(Mutex::new(base));
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (done, failures, ws) = (done.clone(), failures.clone(), &ws);
            s.spawn(move || {
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let tag = format!("c{c}-{i}");
                    let code = (c + i) % 5;
                    let out = ws
                        .lazaret(&[
                            "run",
                            "--",
                            "sh",
                            "-c",
                            script,
                            "sh",
                            &tag,
                            &code.to_string(),
                        ])
                        .output()
                        .unwrap();
                    let o = text(&out.stdout);
                    let want = format!("start {tag}\nhost-ok\nauto=0\ndenied=77\n");
                    if out.status.code() != Some(code as i32) || o != want {
                        failures.lock().unwrap().push(format!(
                            "{tag}: status {:?}, stdout {o:?}, stderr {:?}",
                            out.status.code(),
                            text(&out.stderr)
                        ));
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    i += 1;
                    // Join and leave at random moments.
                    std::thread::sleep(Duration::from_millis(
                        (c as u64 * 37 + i as u64 * 53) % 400,
                    ));
                }
            });
        }
        let peak = peak.clone();
        s.spawn(move || {
            while Instant::now() < deadline {
                if let Some((t, r)) = threads_and_rss(pid) {
                    let mut p = peak.lock().unwrap();
                    *p = (p.0.max(t), p.1.max(r));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    });
    let failures = failures.lock().unwrap().clone();
    let sessions = done.load(Ordering::SeqCst);
    assert!(
        failures.is_empty(),
        "{} of {sessions} sessions failed, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(sessions >= CLIENTS, "only {sessions} sessions ran");

    // Back where it was once the load is gone.
    let settled = eventually(Duration::from_secs(30), || {
        threads_and_rss(pid).is_some_and(|(t, _)| t <= base.0 + 2)
    });
    let after = threads_and_rss(pid).unwrap();
    let peak = *peak.lock().unwrap();
    eprintln!(
        "load: {sessions} sessions in {secs} s; coordinator threads {} -> peak {} -> {}, RSS {} KiB -> peak {} -> {}",
        base.0, peak.0, after.0, base.1, peak.1, after.1
    );
    assert!(
        settled,
        "coordinator threads {} after the load, {} before",
        after.0, base.0
    );
    assert!(
        after.1 <= base.1 + 32 * 1024,
        "coordinator RSS grew from {} KiB to {} KiB",
        base.1,
        after.1
    );

    // Exactly one recorded result per request (two per session).
    let out = ws.lazaret(&["escalations", "--json"]).output().unwrap();
    let records: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut per_request: HashMap<String, usize> = HashMap::new();
    for r in records.as_array().unwrap() {
        if r["event"] == "decision" {
            *per_request
                .entry(r["request_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    assert!(
        per_request.values().all(|&n| n == 1),
        "a request with more than one result"
    );
    // The record keeps its last 5 MiB: a long run outgrows it.
    if secs <= 60 {
        assert_eq!(per_request.len(), 2 * (sessions + 4), "requests recorded");
    }

    let _ = keeper.kill();
    let _ = keeper.wait();
    assert_domain_gone(&id);
}
