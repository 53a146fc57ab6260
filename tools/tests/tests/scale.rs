//! Real repositories, end to end, under a new user's default limits (soft
//! `RLIMIT_NOFILE` 1024, see `TestEnv::command`): a large tracked tree plus
//! an ignored `node_modules`-shaped tree, worked on by two sessions at
//! once, while the mount router's descriptors and memory are sampled from
//! `/proc` and held to their bounds.
//!
//! Sizes: `LAZARET_SCALE=full` runs the sizes real repositories have
//! (100,000 tracked files, 50,000 ignored ones, a million opens per
//! session); the default, which `.ci/run` runs, is a twentieth of the
//! trees and 10,000 opens per session. Full run:
//! `sudo LAZARET_SCALE=full cargo test -p lazaret-tests --test scale -- --nocapture`.

use lazaret_tests::{processes_mentioning, require_env, text, Workspace};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Sizes {
    tracked: usize,
    ignored: usize,
    opens: usize,
}

fn sizes() -> Sizes {
    if std::env::var("LAZARET_SCALE").as_deref() == Ok("full") {
        Sizes {
            tracked: 100_000,
            ignored: 50_000,
            opens: 1_000_000,
        }
    } else {
        Sizes {
            tracked: 5_000,
            ignored: 2_500,
            opens: 10_000,
        }
    }
}

/// The router may hold this many descriptors: its bound on open files
/// (`--max-open`, 4096 by default) plus its reserve (64).
const ROUTER_MAX_FDS: usize = 4096 + 64;
/// Resident memory the router may use, whatever the tree size.
const ROUTER_MAX_RSS_KIB: u64 = 256 * 1024;

/// `(descriptors, resident KiB)` of the Domain's router, if it runs.
fn router_usage(domain_id: &str) -> Option<(usize, u64)> {
    let (pid, _) = processes_mentioning(domain_id)
        .into_iter()
        .find(|(_, cmd)| cmd.contains("lazaret-mount-router"))?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    Some((fds, rss))
}

/// One session's workload, inside the sandbox; prints `ok <step>` per step.
fn workload(tag: &str, opens: usize) -> String {
    format!(
        r#"set -e
cd /workspace
n=$(grep -r -l x src | wc -l); echo "ok grep $n"
n=$(find . -path ./.git -prune -o -print | wc -l); echo "ok find $n"
git status --porcelain > /dev/null; echo "ok status"
tar cf - src node_modules | wc -c > /dev/null; echo "ok tar"
python3 -m venv --without-pip .venv-{tag}; test -x .venv-{tag}/bin/python3; echo "ok venv"
python3 - <<'PY'
import os
files = []
for root, dirs, names in os.walk("src"):
    files.extend(os.path.join(root, n) for n in names)
for root, dirs, names in os.walk("node_modules"):
    files.extend(os.path.join(root, n) for n in names)
for i in range({opens}):
    with open(files[i % len(files)], "rb") as f:
        f.read(1)
print("ok opens", {opens})
PY
"#
    )
}

fn make_tracked_tree(ws: &Workspace<'_>, files: usize) {
    let script = format!(
        r#"set -e
python3 - <<'PY'
import os
n = {files}
for i in range(n):
    d = "src/m%02d/p%03d" % (i % 100, (i // 100) % 100)
    if i < 10000:
        os.makedirs(d, exist_ok=True)
    with open("%s/f%06d.txt" % (d, i), "w") as f:
        f.write("x %d\n" % i)
PY
printf 'node_modules/\n.venv-*/\n' > .gitignore
git add -A && git commit -qm tree"#
    );
    let out = ws.host_sh(&script);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn large_trees_work_in_two_sessions_with_the_router_bounded() {
    let env = require_env!();
    let sz = sizes();
    let ws = env.workspace("scale");
    make_tracked_tree(&ws, sz.tracked);
    let domain = ws.domain_id("default");

    // The ignored tree is made inside: it lives in Ignored Workspace State.
    let out = ws.run_sh(&format!(
        r#"python3 - <<'PY'
import os
for i in range({ignored}):
    d = "/workspace/node_modules/pkg%03d/lib%02d" % (i % 500, (i // 500) % 100)
    os.makedirs(d, exist_ok=True)
    with open("%s/index%05d.js" % (d, i), "w") as f:
        f.write("module.exports = %d\n" % i)
print("made")
PY"#,
        ignored = sz.ignored
    ));
    assert!(
        out.status.success() && text(&out.stdout).contains("made"),
        "{}",
        text(&out.stderr)
    );
    let host = ws.host_sh("test ! -e node_modules && echo hidden");
    assert_eq!(text(&host.stdout).trim(), "hidden");

    // Sample the router while two sessions work.
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        let domain = domain.clone();
        std::thread::spawn(move || {
            let mut peak = (0usize, 0u64);
            let mut samples = 0;
            while !done.load(Ordering::Relaxed) {
                if let Some((fds, rss)) = router_usage(&domain) {
                    peak = (peak.0.max(fds), peak.1.max(rss));
                    samples += 1;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            (peak, samples)
        })
    };
    let sessions: Vec<_> = ["a", "b"]
        .iter()
        .map(|tag| {
            ws.lazaret(&["run", "--", "sh", "-c", &workload(tag, sz.opens)])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start a session")
        })
        .collect();
    let outs: Vec<_> = sessions
        .into_iter()
        .map(|c| c.wait_with_output().expect("session"))
        .collect();
    // A commit of everything, once both sessions are done with the tree.
    let commit = ws.run_sh(
        "cd /workspace && echo changed >> src/m00/p000/f000000.txt && git add -A && \
         git -c user.name=Agent -c user.email=agent@sandbox.invalid commit -qm work && echo ok commit",
    );
    done.store(true, Ordering::Relaxed);
    let ((fds, rss), samples) = sampler.join().unwrap();

    for (tag, out) in ["a", "b"].iter().zip(&outs) {
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "session {tag} failed: {stdout}\n{}",
            text(&out.stderr)
        );
        let tracked_with_rules = sz.tracked + 1;
        assert!(
            stdout.contains(&format!("ok grep {}", sz.tracked)),
            "session {tag}: {stdout}"
        );
        assert!(
            stdout.contains("ok status") && stdout.contains("ok tar"),
            "session {tag}: {stdout}"
        );
        assert!(stdout.contains("ok venv"), "session {tag}: {stdout}");
        assert!(
            stdout.contains(&format!("ok opens {}", sz.opens)),
            "session {tag}: {stdout}"
        );
        // find counts directories too: at least every file of both trees.
        let found: usize = stdout
            .lines()
            .find_map(|l| l.strip_prefix("ok find "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert!(
            found > tracked_with_rules + sz.ignored,
            "session {tag} found {found}: {stdout}"
        );
    }
    assert!(
        commit.status.success() && text(&commit.stdout).contains("ok commit"),
        "{}",
        text(&commit.stderr)
    );
    let log = ws.host_sh("git log --oneline | wc -l; git status --porcelain | wc -l");
    assert_eq!(
        text(&log.stdout),
        "3\n0\n",
        "the commit made inside is the host's"
    );
    assert!(samples > 0, "the router was never seen running");
    eprintln!("router peak: {fds} descriptors, {rss} KiB resident ({samples} samples)");
    assert!(
        fds <= ROUTER_MAX_FDS,
        "the router held {fds} descriptors (bound {ROUTER_MAX_FDS})"
    );
    assert!(
        rss <= ROUTER_MAX_RSS_KIB,
        "the router used {rss} KiB (bound {ROUTER_MAX_RSS_KIB})"
    );
}
