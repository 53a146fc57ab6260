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

/// Parent PIDs of every process (field 4 of `/proc/PID/stat`).
fn parents() -> Vec<(i32, i32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if let Some(pp) = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split(' ').nth(1)?.parse().ok())
        {
            v.push((pid, pp));
        }
    }
    v
}

/// `root` and every process beneath it.
fn descendants(root: i32) -> Vec<i32> {
    let all = parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Inside: one TCP connect per `HOST:PORT`, then a rename across
/// directories of the workspace (which the mount router performs), then
/// prints `RESULT {...}` and waits for the host to create `go`.
const INSIDE: &str = r#"
import json, os, socket, sys, time
res = {}
for t in sys.argv[1:]:
    host, port = t.rsplit(":", 1)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(6)
        s.connect((host, int(port)))
        res[t] = "OK " + s.recv(64).decode().strip()
    except OSError as e:
        res[t] = "ERR %s" % e.errno
os.makedirs("a", exist_ok=True)
os.makedirs("b", exist_ok=True)
open("a/f", "w").write("x")
try:
    os.rename("a/f", "b/f")
    res["rename"] = "OK"
except OSError as e:
    res["rename"] = "ERR %s" % e.errno
print("RESULT " + json.dumps(res), flush=True)
while not os.path.exists("go"):
    time.sleep(0.05)
"#;

/// A real Domain with the network at Landlock ABI 1 (Ubuntu 22.04's 5.15)
/// and 4 (Ubuntu 24.04's 6.8), capped with the test-only
/// `LAZARET_TEST_LANDLOCK_ABI`: it starts, the egress policy holds (the
/// allowed test host answers, the rest of 10/8 has no route), the
/// coordinator is confined and logs what this ABI enforces, every helper
/// of the Domain got the cap from the CLI (its environment), the mount
/// router's missing `refer` at ABI 1 shows as EXDEV inside, and `lazaret
/// doctor` says what is not enforced. At ABI 0 the start is refused.
#[test]
fn a_domain_runs_with_the_network_at_landlock_abi_1_and_4() {
    use lazaret_seccomp::abi::{Kernel, TEST_CAP_ENV};
    let env = require_env!();
    let Some(net) = lazaret_tests::test_net() else {
        return;
    };
    let kernel = Kernel::detect().abi();
    // No Landlock at all: refused, never run unconfined.
    let ws = env.workspace("abi0");
    let mut cmd = ws.lazaret(&["run", "--", "echo", "SANDBOX-RAN"]);
    cmd.env(TEST_CAP_ENV, "0");
    let out = net.wrap(&cmd).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("SANDBOX-RAN"));
    assert!(
        text(&out.stderr).contains("refusing to run without Landlock: LAZARET_TEST_LANDLOCK_ABI=0"),
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));
    for cap in [1, 4] {
        assert!(
            kernel >= cap,
            "the kernel's Landlock ABI {kernel} is below {cap}"
        );
        let ws = env.workspace(&format!("abi{cap}"));
        ws.write_config(
            "[profiles.default.network]\nallow = [\"10.99.0.0/24\"]\nprobe = \"10.99.0.1:8080\"",
        );
        let script = format!(
            "python3 -c '{}' 10.99.0.1:8080 10.99.1.1:8080",
            INSIDE.replace('\'', "'\"'\"'")
        );
        let mut cmd = ws.lazaret(&["run", "--", "sh", "-c", &script]);
        cmd.env(TEST_CAP_ENV, cap.to_string());
        let mut child = net
            .wrap(&cmd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        while !line.starts_with("RESULT ") {
            line.clear();
            if stdout.read_line(&mut line).unwrap() == 0 {
                let out = child.wait_with_output().unwrap();
                panic!("ABI {cap}: the session ended early: {}", text(&out.stderr));
            }
        }
        let r: serde_json::Value = serde_json::from_str(&line["RESULT ".len()..]).unwrap();
        assert_eq!(
            r["10.99.0.1:8080"], "OK SERVED-OK 10.99.0.1",
            "ABI {cap}: {r}"
        );
        assert_eq!(r["10.99.1.1:8080"], "ERR 113", "ABI {cap}: {r}");
        assert_eq!(
            r["rename"],
            if cap < 2 { "ERR 18" } else { "OK" },
            "ABI {cap}: {r}"
        );

        let id = ws.domain_id("default");
        let coordinator = lazaret_tests::processes_mentioning(&id)
            .into_iter()
            .find(|(pid, _)| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.starts_with("lazaret-coordi"))
            })
            .expect("the coordinator")
            .0;
        assert_eq!(status_field(coordinator, "Seccomp:"), "2");
        assert_eq!(status_field(coordinator, "CapEff:"), "0000000000000000");
        // Every Lazaret helper under it (supervisor, holder, router,
        // netpolicy watch, mailbox reader) has the cap.
        let mut helpers = Vec::new();
        for pid in descendants(coordinator) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if !comm.starts_with("lazaret-") {
                continue;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let want = format!("{TEST_CAP_ENV}={cap}");
            assert!(
                environ.split(|b| *b == 0).any(|v| v == want.as_bytes()),
                "ABI {cap}: {} ({pid}) lacks {want}",
                comm.trim()
            );
            helpers.push(comm.trim().to_string());
        }
        for h in [
            "lazaret-supervi",
            "lazaret-mailbox",
            "lazaret-mount-r",
            "lazaret-netpoli",
        ] {
            assert!(
                helpers.iter().any(|c| c == h),
                "ABI {cap}: no {h} in {helpers:?}"
            );
        }

        let doctor = net
            .wrap(ws.lazaret(&["doctor"]).env(TEST_CAP_ENV, cap.to_string()))
            .output()
            .unwrap();
        let doctor = text(&doctor.stdout);
        let ll = doctor
            .lines()
            .find(|l| l.contains(" landlock: "))
            .unwrap_or_else(|| panic!("no landlock line: {doctor}"));
        assert!(
            ll.contains(&format!(
                "Landlock ABI {cap} (the kernel's is {kernel}, capped"
            )),
            "{ll}"
        );
        assert!(
            ll.contains("abstract unix socket and signal scoping not enforced (needs ABI 6"),
            "{ll}"
        );
        assert_eq!(ll.contains("(refer) unavailable"), cap < 2, "{ll}");

        std::fs::write(ws.path.join("go"), b"").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "ABI {cap}: {}", text(&out.stderr));
        assert_domain_gone(&id);
        let log = std::fs::read_to_string(ws.domain_root("default").join("coordinator.log"))
            .unwrap_or_default();
        assert!(
            log.contains(&format!("landlock on this kernel: Landlock ABI {cap} (the kernel's is {kernel}, capped by {TEST_CAP_ENV}, test-only)")),
            "{log}"
        );
        // ABI 5's ioctl_dev is missing at both, ABI 3's truncate at 1.
        assert!(
            log.contains(&format!("device ioctl restriction (ioctl_dev): not enforced (kernel Landlock ABI {cap} as capped, needs 5); covered by seccomp")),
            "{log}"
        );
        assert_eq!(
            log.contains(&format!(
                "truncate restriction: not enforced (kernel Landlock ABI {cap} as capped, needs 3)"
            )),
            cap < 3,
            "{log}"
        );
        assert_eq!(
            log.contains("(refer): unavailable (kernel Landlock ABI 1 as capped, needs 2)"),
            cap < 2,
            "{log}"
        );
    }
}
