//! Least authority around Host Escalation, end to end: the Escalation
//! Mailbox is read by `lazaret-mailbox`, a separate confined process (the
//! coordinator's child), and approved host commands run as children of
//! the requesting session's `lazaret` CLI, not of the coordinator. When
//! the reader dies, the coordinator says so and the Domain still stops.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text, Workspace};
use std::process::Stdio;
use std::time::Duration;

fn rules(ws: &Workspace, argv: &str) {
    ws.write_config(&format!(
        "[[profiles.default.escalation.auto_approve]]\nargv = {argv}\n"
    ));
}

/// The Domain's process whose command line names `binary`.
fn domain_process(domain_id: &str, binary: &str) -> Option<i32> {
    lazaret_tests::processes_mentioning(domain_id)
        .into_iter()
        .find(|(_, c)| c.split(' ').next().is_some_and(|p| p.ends_with(binary)))
        .map(|(p, _)| p)
}

/// Live children of `parent` named `comm`.
fn children_named(parent: i32, comm: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let mut f = after.split(' ');
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<i32>().ok()));
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if ppid == Some(parent) && state != Some("Z") && name.trim_end() == comm {
            out.push(pid);
        }
    }
    out
}

fn status_field(pid: i32, key: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The Domain's mailbox reader, once the coordinator has started it.
fn mailbox_reader(domain: &str) -> Option<(i32, i32)> {
    let mut found = None;
    eventually(Duration::from_secs(60), || {
        found = domain_process(domain, "lazaret-coordinator").and_then(|c| {
            children_named(c, "lazaret-mailbox")
                .first()
                .map(|m| (c, *m))
        });
        found.is_some()
    });
    found
}

#[test]
fn the_mailbox_reader_is_a_separate_confined_child_of_the_coordinator() {
    let env = require_env!();
    let ws = env.workspace("esc-reader");
    rules(&ws, r#"["/bin/echo", "hi"]"#);
    let domain = ws.domain_id("default");
    // One session holds the Domain while the reader is inspected; it
    // escalates first, so the reader has done its work by then.
    let mut session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "lazaret-escalate -- /bin/echo hi; echo rc=$?; sleep 600",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Inspected once the escalation came back: the reader has read a
    // request by then, so it is past its start-up (and its confinement).
    let mut out = std::io::BufReader::new(session.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("rc=") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
    }
    assert!(seen.contains("rc=0"), "the escalation failed: {seen}");
    let (coordinator, reader) =
        mailbox_reader(&domain).expect("no lazaret-mailbox child of the coordinator");
    assert_ne!(coordinator, reader);
    assert_eq!(status_field(reader, "NoNewPrivs:").as_deref(), Some("1"));
    assert_eq!(status_field(reader, "Seccomp:").as_deref(), Some("2"));
    assert_eq!(
        status_field(reader, "CapEff:").as_deref(),
        Some("0000000000000000")
    );
    assert_eq!(
        status_field(reader, "CapPrm:").as_deref(),
        Some("0000000000000000")
    );
    // It holds stdio, the request directory, its socket and one inotify
    // watch (of that directory), nothing else (the input memfd is closed
    // once read).
    let fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{reader}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_link(e.path())
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    let requests = std::fs::canonicalize(
        ws.domain_root("default")
            .join("run/control/mailbox/requests"),
    )
    .unwrap();
    for (fd, target) in &fds {
        match fd.as_str() {
            "0" | "1" | "2" => {}
            "4" => assert_eq!(target, &requests.display().to_string(), "{fds:?}"),
            "5" => assert!(target.starts_with("socket:"), "{fds:?}"),
            _ if target == "anon_inode:inotify" => {}
            _ => panic!("the reader holds more than it needs: {fds:?}"),
        }
    }
    // The watch is of the request directory, and of nothing else.
    let watches: Vec<_> = fds
        .iter()
        .filter(|(_, t)| t == "anon_inode:inotify")
        .collect();
    assert_eq!(watches.len(), 1, "{fds:?}");
    let info = std::fs::read_to_string(format!("/proc/{reader}/fdinfo/{}", watches[0].0)).unwrap();
    let watched: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("inotify wd:"))
        .collect();
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&requests).unwrap());
    assert_eq!(watched.len(), 1, "{info}");
    assert!(
        watched[0].contains(&format!(" ino:{ino:x} ")),
        "not the request directory (inode {ino:x}): {info}"
    );
    // Escalation works through it: once its decision is recorded, the
    // session sleeps, and ends on SIGTERM.
    let recorded = eventually(Duration::from_secs(60), || {
        lazaret_protocol::escalation::log_files(&ws.domain_root("default"))
            .iter()
            .any(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .contains("\"event\":\"decision\"")
            })
    });
    assert!(recorded, "the request was never decided");
    let sid = session.id();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(sid.to_string())
        .status();
    let out = session.wait_with_output().unwrap();
    assert!(
        seen.starts_with("hi\nrc=0\n"),
        "{seen} {}",
        text(&out.stderr)
    );
    assert_domain_gone(&domain);
    assert!(
        eventually(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{reader}"
        ))
        .exists()
            || children_named(coordinator, "lazaret-mailbox").is_empty()),
        "the reader outlived its Domain"
    );
}

#[test]
fn approved_commands_run_as_children_of_the_requesting_cli() {
    let env = require_env!();
    let ws = env.workspace("esc-parent");
    rules(&ws, r#"["/bin/sh", "-c", "echo $PPID"]"#);
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "lazaret-escalate -- /bin/sh -c 'echo $PPID'; echo rc=$?",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The test user's `lazaret` (setpriv execs it: the same process).
    let cli = session.id();
    let out = session.wait_with_output().unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("{cli}\nrc=0\n"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn when_the_reader_dies_the_coordinator_says_so_and_the_domain_still_stops() {
    let env = require_env!();
    let ws = env.workspace("esc-reader-dies");
    let domain = ws.domain_id("default");
    let errfile = ws.base.join("stderr");
    let mut session = ws
        .lazaret(&["run", "--", "sleep", "600"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errfile).unwrap())
        .spawn()
        .unwrap();
    let (_, reader) = mailbox_reader(&domain).expect("no lazaret-mailbox child of the coordinator");
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(reader.to_string())
        .status();
    assert!(
        eventually(Duration::from_secs(30), || std::fs::read_to_string(
            &errfile
        )
        .unwrap_or_default()
        .contains("Escalation Mailbox reader ended")),
        "the session was not told: {}",
        std::fs::read_to_string(&errfile).unwrap_or_default()
    );
    let log: String = lazaret_protocol::escalation::log_files(&ws.domain_root("default"))
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    assert!(log.contains("\"event\":\"reader_exited\""), "{log}");
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(session.id().to_string())
        .status();
    let _ = session.wait();
    assert_domain_gone(&domain);
}

/// A Domain log's bound (`lazaret_protocol::logs::MAX_BYTES`, and
/// `escalation::bounds::LOG_MAX_BYTES`), written out so that this test
/// builds against any version of the code.
const LOG_BOUND: u64 = 1 << 20;
/// Rotations kept of each log.
const ROTATIONS: usize = 4;

/// The files of the Domain log `name`, oldest first, with their sizes
/// (0: absent).
fn log_files(root: &std::path::Path, name: &str) -> Vec<(std::path::PathBuf, u64)> {
    let mut v: Vec<std::path::PathBuf> = (1..=ROTATIONS + 1)
        .rev()
        .map(|i| root.join(format!("{name}.{i}")))
        .collect();
    v.push(root.join(name));
    v.into_iter()
        .map(|p| {
            let n = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (p, n)
        })
        .collect()
}

fn read_log(root: &std::path::Path, name: &str) -> String {
    log_files(root, name)
        .iter()
        .map(|(p, _)| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

/// The sandbox publishes refused mailbox entries (unsigned junk) and
/// signed requests (each a few lifecycle steps) for as long as it likes:
/// every log the Domain writes stays within its bound for the whole
/// session, `coordinator.log` says in one line per window how many
/// entries were refused, `lazaret logs` reads across the rotations, and
/// the lifecycle replays through the model from the checkpoint the
/// rotation left.
#[test]
fn a_flood_of_refused_entries_leaves_every_log_within_its_bound() {
    let env = require_env!();
    let ws = env.workspace("esc-log-flood");
    rules(&ws, r#"["/bin/true"]"#);
    let domain = ws.domain_id("default");
    let root = ws.domain_root("default");
    let flood = r#"
        R=/.lazaret/mailbox/requests
        # Junk entries, by rename, as fast as python publishes them.
        python3 -c '
import os
R = "/.lazaret/mailbox/requests"
i = 0
while not os.path.exists("/tmp/stop-flood"):
    for _ in range(100):
        t = "%s/.j%d" % (R, i)
        with open(t, "wb") as f:
            f.write(os.urandom(300))
        os.rename(t, "%s/j%d" % (R, i))
        i += 1
print("junk", i)
' &
        # Signed requests in this session's name, auto-approved: accepted,
        # run and resolved (or refused over the pending bound).
        for j in 1 2 3 4; do
            (i=0; while [ ! -e /tmp/stop-flood ]; do
                i=$((i + 1))
                lazaret-escalate --write-request-to $R/.s$j-$i -- /bin/true && mv $R/.s$j-$i $R/s$j-$i
            done; echo "signed $j $i") &
        done
        wait
    "#;
    let mut session = ws
        .lazaret(&["run", "--", "sh", "-c", flood])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Watched from the host while it runs: the largest size each file of
    // each log reached. Done once coordinator.log has been rotated and has
    // said how many entries it did not log one by one; on a version that
    // does not bound it, once it is far past the bound.
    let names = ["coordinator.log", "helpers.log", "escalations.log"];
    let mut largest = std::collections::BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20 * 60);
    loop {
        for name in names {
            for (p, n) in log_files(&root, name) {
                let e = largest.entry(p).or_insert(0u64);
                *e = (*e).max(n);
            }
        }
        let clog = log_files(&root, "coordinator.log");
        let rotated = clog[ROTATIONS].1 > 0;
        let far_past = largest.values().any(|&n| n > 3 * LOG_BOUND);
        let said = rotated && read_log(&root, "coordinator.log").contains(" more entries in the ");
        if said || far_past || std::time::Instant::now() > deadline {
            break;
        }
        assert!(
            session.try_wait().unwrap().is_none(),
            "the flood ended early"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let stop = ws.run_sh("touch /tmp/stop-flood");
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    let out = session.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_domain_gone(&domain);
    let said = text(&out.stdout);
    eprintln!("flood: {said}");
    for name in names {
        for (p, n) in log_files(&root, name) {
            let most = largest.get(&p).copied().unwrap_or(0).max(n);
            // escalations.log is rotated once it has reached its bound: by
            // at most one record more.
            assert!(
                most <= LOG_BOUND + (64 << 10),
                "{} reached {most} bytes, past its bound of {LOG_BOUND}",
                p.display()
            );
        }
        // No more than the rotations kept.
        assert!(!root.join(format!("{name}.{}", ROTATIONS + 1)).exists());
    }
    // The coalesced line says how many refused entries it stands for.
    let clog = read_log(&root, "coordinator.log");
    let counted: u64 = clog
        .lines()
        .filter_map(|l| {
            l.split_once("Escalation Mailbox: refused ")?
                .1
                .split_once(" more entries in the ")
        })
        .filter_map(|(n, _)| n.parse::<u64>().ok())
        .sum();
    assert!(counted > 0, "no coalesced line in coordinator.log");
    let rotated = log_files(&root, "coordinator.log");
    assert!(
        rotated[ROTATIONS].1 > 0,
        "coordinator.log was never rotated"
    );
    // Every file a rotation began starts with the lifecycle checkpoint a
    // replay can start from (the oldest may be the Domain's first).
    let kept: Vec<_> = rotated.iter().filter(|(_, n)| *n > 0).collect();
    for (i, (p, _)) in kept.iter().enumerate() {
        let t = std::fs::read_to_string(p).unwrap_or_default();
        let first = t.lines().next().unwrap_or_default();
        let checkpoint = first.contains("lifecycle: checkpoint owner");
        assert!(
            checkpoint || (i == 0 && first.contains("lifecycle: owner")),
            "{}: {first}",
            p.display()
        );
    }
    let record = lazaret_tests::assert_lifecycle_replays(&root);
    assert_eq!(record.owner, None);
    // `lazaret logs` reads every kept file, oldest first.
    let logs = ws.lazaret(&["logs"]).output().unwrap();
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    let shown = text(&logs.stdout);
    assert_eq!(shown.lines().count(), clog.lines().count());
    assert_eq!(shown.lines().next(), clog.lines().next());
    assert_eq!(shown.lines().last(), clog.lines().last());
    // And the Domain starts again.
    let again = ws.run_sh("echo again");
    assert_eq!(text(&again.stdout), "again\n", "{}", text(&again.stderr));
}
