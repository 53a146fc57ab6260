//! The chained topology, for real, with no uplink anywhere:
//!
//! ```text
//! OUT  (a netns this test creates; stands in for the host's; test hosts on lo)
//!  └─ slirp4netns A ── tap0 of N1 (enforcement: the policy's routes, IPv6 off)
//!                          └─ slirp4netns B (runs in N1) ── tap0 of N2 (sandbox)
//! ```
//! Every address contacted lives on OUT's `lo`; OUT has no other link.
//! The test runs as the invoking user and, when that is root and user `dev`
//! exists, again as `dev` (rootless). Without the tools it prints
//! `skipping: <reason>`; `LAZARET_TESTS_MUST_RUN=1` makes that a failure.
//!
//! The same executable is the test hosts (`testhost`) and the in-sandbox
//! client (`connect`, `dns`), started inside the namespaces with nsenter.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_config::{Network, NetworkDefault};
use lazaret_netpolicy::{derive, DeriveOptions, NetworkPlan};
use lazaret_netpolicy_helper::probe::{dns_ask, tcp_connect, TcpOutcome};
use lazaret_protocol::netpolicy::Policy;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The sealed memfd the helper reads on its policy descriptor, as the
/// supervisor hands it, and the digest to pass as `--digest`.
fn policy_memfd(policy: &Policy) -> Result<(OwnedFd, String), String> {
    let bytes = policy.to_bytes().map_err(|e| e.to_string())?;
    let digest = lazaret_protocol::netpolicy::policy::digest_bytes(&bytes);
    let fd = lazaret_helpers::memfd::sealed("network-policy", &bytes).map_err(|e| e.to_string())?;
    Ok((fd, digest))
}

const HOSTS: &[&str] = &[
    "10.99.0.1",
    "10.99.1.1",
    "10.99.5.53",
    "172.16.9.1",
    "198.51.100.1",
    "198.51.100.53",
    "203.0.113.1",
    "169.254.169.254",
    "100.64.0.1",
];
const PORT: u16 = 8080;
const SINK_PORT: u16 = 5201;
const NAME: &str = "probe.lazaret.test.";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("testhost") => return testhost(&args[2]),
        Some("connect") => {
            let t: SocketAddrV4 = args[2].parse().expect("addr");
            println!(
                "{}",
                serde_json::to_string(&tcp_connect(t, Duration::from_secs(3))).unwrap()
            );
            return;
        }
        Some("bench") => return bench::main(&args[2..]),
        Some("bench-client") => return bench::client(&args[2..]),
        Some("dns") => {
            let r: Ipv4Addr = args[2].parse().expect("resolver");
            match dns_ask(r, &args[3], Duration::from_secs(3)) {
                Ok(a) => println!("{}", a.answers.join(",")),
                Err(e) => println!("ERROR {e}"),
            }
            return;
        }
        _ => {}
    }
    let as_current_only = args.iter().any(|a| a == "--as-current-user");
    let must = std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1");
    if let Some(reason) = missing_prerequisite() {
        println!("skipping: {reason}");
        if must {
            println!("0 passed, 1 failed");
            std::process::exit(1);
        }
        println!("0 passed, 0 failed, 1 skipped");
        return;
    }
    let mut passed = 0;
    let mut failed = 0;
    let mut run = |name: &str, f: &dyn Fn() -> Result<(), String>| {
        let t0 = std::time::Instant::now();
        match f() {
            Ok(()) => {
                println!("test {name} ... ok ({:.2} s)", t0.elapsed().as_secs_f64());
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED\n    {e}");
                failed += 1;
            }
        }
    };
    let user = whoami();
    run(&format!("[{user}] print_confinement"), &print_confinement);
    run(
        &format!("[{user}] default_allow_with_private_allow"),
        &scenario_default_allow,
    );
    run(
        &format!("[{user}] default_deny_with_slirp_dns_chain"),
        &scenario_default_deny,
    );
    run(
        &format!("[{user}] probe_and_fingerprint_fail_closed"),
        &scenario_failures,
    );
    if !as_current_only && rustix::process::getuid().is_root() {
        match as_dev() {
            Ok(Some((p, f))) => {
                passed += p;
                failed += f;
            }
            Ok(None) => {
                println!(
                    "skipping: the rootless run (no user {} with subordinate IDs; set LAZARET_TEST_USER)",
                    test_user()
                );
                if must {
                    failed += 1;
                }
            }
            Err(e) => {
                println!("test [dev] rootless run ... FAILED\n    {e}");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

fn whoami() -> String {
    let uid = rustix::process::getuid().as_raw();
    if uid == 0 {
        "root".into()
    } else {
        format!("uid {uid}")
    }
}

fn missing_prerequisite() -> Option<String> {
    for tool in ["slirp4netns", "unshare", "nsenter", "ip", "mount"] {
        let found = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .chain(["/usr/sbin", "/sbin"])
            .any(|d| Path::new(d).join(tool).exists());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .is_err()
    {
        return Some("/dev/net/tun is not usable (chmod 0666 /dev/net/tun)".into());
    }
    let ok = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Some("cannot create user and network namespaces".into());
    }
    None
}

/// The unprivileged user of the rootless run: `LAZARET_TEST_USER`, the
/// user `.ci/run` creates, else `dev`.
fn test_user() -> String {
    std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "dev".into())
}

/// Runs this executable again as the test user, from copies it can read.
fn as_dev() -> Result<Option<(u32, u32)>, String> {
    let user = test_user();
    let known = Command::new("id")
        .arg(&user)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !known {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("lazaret-netpolicy-dev")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let copy = |src: &Path, name: &str| -> Result<PathBuf, String> {
        let dst = dir.path().join(name);
        std::fs::copy(src, &dst).map_err(|e| format!("copy {}: {e}", src.display()))?;
        Ok(dst)
    };
    let me = copy(&std::env::current_exe().unwrap(), "chain")?;
    let helper = copy(
        Path::new(env!("CARGO_BIN_EXE_lazaret-netpolicy")),
        "lazaret-netpolicy",
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let cmd = format!(
        "cd / && LAZARET_NETPOLICY_HELPER={} {} --as-current-user",
        helper.display(),
        me.display()
    );
    let out = Command::new("su")
        .args([user.as_str(), "-c", &cmd])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("su dev: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut p = 0;
    let mut f = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("test ") {
            println!("test [dev] {rest}");
        } else if let Some((a, b)) = line.split_once(" passed, ") {
            p = a.trim().parse().unwrap_or(0);
            f = b
                .split(' ')
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(1);
        } else {
            println!("    [dev] {line}");
        }
    }
    if !out.status.success() && f == 0 {
        return Err(format!(
            "the rootless run failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(Some((p, f)))
}

fn helper_path() -> PathBuf {
    std::env::var_os("LAZARET_NETPOLICY_HELPER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lazaret-netpolicy")))
}

fn print_confinement() -> Result<(), String> {
    let out = Command::new(helper_path())
        .arg("--print-confinement")
        .output()
        .map_err(|e| e.to_string())?;
    let s = String::from_utf8_lossy(&out.stdout);
    for want in [
        "CAP_NET_ADMIN only",
        "landlock: (ABI 1 or later; all of it from ABI 6)",
        "any other call kill_process",
    ] {
        if !s.contains(want) {
            return Err(format!("--print-confinement lacks {want:?}:\n{s}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- test hosts

/// Inside OUT, as root of the test's user namespace: addresses on lo, a
/// TCP service on every address, a DNS responder; serves until stdin closes.
fn testhost(resolv: &str) {
    let sh = |args: &[&str]| {
        let st = Command::new(args[0])
            .args(&args[1..])
            .status()
            .expect(args[0]);
        assert!(st.success(), "{args:?}");
    };
    sh(&["ip", "link", "set", "lo", "up"]);
    for h in HOSTS {
        sh(&["ip", "addr", "add", &format!("{h}/32"), "dev", "lo"]);
    }
    // slirp A resolves with OUT's /etc/resolv.conf: point it at our responder.
    sh(&["mount", "--bind", resolv, "/etc/resolv.conf"]);
    let tcp = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).expect("bind tcp");
    std::thread::spawn(move || {
        for c in tcp.incoming().flatten() {
            let mut c = c;
            let _ = c.write_all(b"SERVED-OK\n");
        }
    });
    // Throughput sink for the benchmark: reads to EOF, answers the count.
    let sink = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, SINK_PORT)).expect("bind sink");
    std::thread::spawn(move || {
        for c in sink.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut buf = vec![0u8; 1 << 16];
                let mut n: u64 = 0;
                while let Ok(k) = c.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                }
                let _ = c.write_all(&n.to_le_bytes());
            });
        }
    });
    let udp = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 53)).expect("bind udp 53");
    std::thread::spawn(move || dns_responder(udp));
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// Answers `probe.lazaret.test.` A 198.51.100.1, NXDOMAIN otherwise.
fn dns_responder(sock: std::net::UdpSocket) {
    use hickory_proto::op::{Message, MessageType, ResponseCode};
    use hickory_proto::rr::{rdata::A, RData, Record};
    let mut buf = [0u8; 1500];
    while let Ok((n, peer)) = sock.recv_from(&mut buf) {
        let Ok(q) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        let mut r = Message::new();
        r.set_id(q.id())
            .set_message_type(MessageType::Response)
            .set_recursion_available(true);
        r.add_queries(q.queries().to_vec());
        match q.queries().first() {
            Some(qq) if qq.name().to_ascii().eq_ignore_ascii_case(NAME) => {
                r.add_answer(Record::from_rdata(
                    qq.name().clone(),
                    60,
                    RData::A(A::new(198, 51, 100, 1)),
                ));
            }
            _ => {
                r.set_response_code(ResponseCode::NXDomain);
            }
        }
        if let Ok(bytes) = r.to_vec() {
            let _ = sock.send_to(&bytes, peer);
        }
    }
}

// ---------------------------------------------------------------- topology

struct Topology {
    dir: tempfile::TempDir,
    out: Child,
    h1: Child,
    h2: Child,
    slirp: Vec<Child>,
}

impl Drop for Topology {
    fn drop(&mut self) {
        for c in self.slirp.iter_mut().chain([&mut self.h2, &mut self.h1]) {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(self.out.stdin.take());
        let _ = self.out.kill();
        let _ = self.out.wait();
    }
}

fn pid(c: &Child) -> String {
    c.id().to_string()
}

/// Spawns `cmd`, waits for its first stdout line ("ready").
fn spawn_ready(cmd: &mut Command, what: &str) -> Result<Child, String> {
    let mut c = cmd
        .stdout(Stdio::piped())
        .stdin(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .map_err(|e| format!("{what}: {e}"))?;
    if line.trim() != "ready" {
        let _ = c.kill();
        return Err(format!("{what} did not start: {line:?}"));
    }
    Ok(c)
}

fn nsenter(target: &Child, flags: &[&str]) -> Command {
    let mut c = Command::new("nsenter");
    c.arg("-t")
        .arg(pid(target))
        .args(flags)
        .arg("--preserve-credentials")
        .arg("--");
    c
}

fn slirp(cmd: &mut Command, what: &str) -> Result<Child, String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| e.to_string())?;
    lazaret_helpers::fds::pass_fds(cmd, vec![(w, 3)]);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    drop(cmd_take_fds(cmd));
    let mut f = std::fs::File::from(r);
    let mut b = [0u8; 1];
    match f.read(&mut b) {
        Ok(1) => Ok(child),
        _ => Err(format!("{what} did not become ready")),
    }
}

/// Drops the Command (and the fds its pre_exec closure holds).
fn cmd_take_fds(cmd: &mut Command) -> Command {
    std::mem::replace(cmd, Command::new("true"))
}

impl Topology {
    fn build(policy: &Policy) -> Result<Topology, String> {
        let dir = tempfile::Builder::new()
            .prefix("lazaret-chain")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let out_resolv = dir.path().join("resolv-out.conf");
        std::fs::write(&out_resolv, "nameserver 198.51.100.53\n").map_err(|e| e.to_string())?;
        let me = std::env::current_exe().unwrap();
        let out = spawn_ready(
            Command::new("unshare")
                .args(["--user", "--map-root-user", "--net", "--mount", "--"])
                .arg(&me)
                .arg("testhost")
                .arg(&out_resolv),
            "test hosts (OUT)",
        )?;
        let h1 = spawn_ready(
            nsenter(&out, &["-U", "-n", "-m"])
                .args([
                    "unshare",
                    "--user",
                    "--map-root-user",
                    "--net",
                    "--mount",
                    "--",
                ])
                .args(["sh", "-c", "echo ready; exec sleep 600"]),
            "holder (N1)",
        );
        let h1 = match h1 {
            Ok(h) => h,
            Err(e) => {
                let mut o = out;
                let _ = o.kill();
                let _ = o.wait();
                return Err(e);
            }
        };
        let h2 = spawn_ready(
            nsenter(&h1, &["-U", "-n"])
                .args(["unshare", "--net", "--"])
                .args(["sh", "-c", "echo ready; exec sleep 600"]),
            "sandbox ns (N2)",
        )?;
        let mut t = Topology {
            dir,
            out,
            h1,
            h2,
            slirp: Vec::new(),
        };
        // slirp B resolves with N1's mount namespace's resolv.conf.
        let b_resolv = t.dir.path().join("resolv-b.conf");
        std::fs::write(&b_resolv, policy.resolv_conf()).map_err(|e| e.to_string())?;
        let st = nsenter(&t.h1, &["-U", "-m"])
            .arg("mount")
            .arg("--bind")
            .arg(&b_resolv)
            .arg("/etc/resolv.conf")
            .status()
            .map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("cannot bind resolv.conf in N1's mount namespace".into());
        }
        let a = slirp(
            nsenter(&t.out, &["-U", "-n", "-m"])
                .args([
                    "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--ready-fd=3",
                ])
                .arg(pid(&t.h1))
                .arg("tap0"),
            "slirp4netns A",
        )?;
        t.slirp.push(a);
        Ok(t)
    }

    /// Starts slirp B: in N1 (so its sockets obey N1's routes), for N2.
    fn start_slirp_b(&mut self) -> Result<(), String> {
        let b = slirp(
            nsenter(&self.h1, &["-U", "-n", "-m"])
                .args([
                    "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--enable-sandbox",
                    "--enable-seccomp",
                    "--ready-fd=3",
                    "--netns-type=path",
                ])
                .arg(format!("/proc/{}/ns/net", self.h2.id()))
                .arg("tap0"),
            "slirp4netns B",
        )?;
        self.slirp.push(b);
        Ok(())
    }

    /// Runs the helper in N1 with the policy memfd and N2's netns fd.
    fn helper(
        &self,
        fd3: OwnedFd,
        args: &[&str],
    ) -> Result<(i32, serde_json::Value, String), String> {
        let netns = std::fs::File::open(format!("/proc/{}/ns/net", self.h2.id()))
            .map_err(|e| e.to_string())?;
        let mut cmd = nsenter(&self.h1, &["-U", "-n"]);
        cmd.arg(helper_path()).args(args);
        lazaret_helpers::fds::pass_fds(&mut cmd, vec![(fd3, 3), (OwnedFd::from(netns), 4)]);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "helper output {:?}: {e}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        Ok((
            out.status.code().unwrap_or(-1),
            v,
            String::from_utf8_lossy(&out.stderr).to_string(),
        ))
    }

    fn install(&self, policy: &Policy) -> Result<serde_json::Value, String> {
        let (fd, digest) = policy_memfd(policy)?;
        let (code, v, err) = self.helper(fd, &["install", "--digest", &digest])?;
        if code != 0 {
            return Err(format!("install exited {code}: {err}"));
        }
        Ok(v)
    }

    fn probe(
        &self,
        policy: &Policy,
        fingerprint: &str,
    ) -> Result<(i32, serde_json::Value, String), String> {
        let (fd, digest) = policy_memfd(policy)?;
        self.helper(
            fd,
            &["probe", "--digest", &digest, "--fingerprint", fingerprint],
        )
    }

    /// A TCP attempt from N2, by a process in N2.
    fn connect(&self, host: &str) -> Result<TcpOutcome, String> {
        let out = nsenter(&self.h2, &["-U", "-n"])
            .arg(std::env::current_exe().unwrap())
            .arg("connect")
            .arg(format!("{host}:{PORT}"))
            .output()
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{e}: {:?}", String::from_utf8_lossy(&out.stdout)))
    }

    fn dns(&self, resolver: &str) -> Result<String, String> {
        let out = nsenter(&self.h2, &["-U", "-n"])
            .arg(std::env::current_exe().unwrap())
            .args(["dns", resolver, NAME])
            .output()
            .map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn in_ns(&self, target: &Child, argv: &[&str]) -> Result<String, String> {
        let out = nsenter(target, &["-U", "-n"])
            .args(argv)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "{argv:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }
}

fn derive_policy(net: Network, opts: DeriveOptions) -> Result<Policy, String> {
    match derive(&net, &opts).map_err(|e| e.to_string())? {
        NetworkPlan::Policy(p) => Ok(p),
        NetworkPlan::None => Err("no network".into()),
    }
}

fn expect_outcomes(t: &Topology, table: &[(&str, bool)]) -> Result<(), String> {
    let mut bad = Vec::new();
    for (host, reachable) in table {
        let o = t.connect(host)?;
        let ok = if *reachable {
            o == TcpOutcome::Connected
        } else {
            matches!(o, TcpOutcome::NoRoute { .. })
        };
        if !ok {
            bad.push(format!(
                "{host}: {o:?}, expected {}",
                if *reachable { "connected" } else { "no route" }
            ));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("; "))
    }
}

fn net(allow: &[&str], deny: &[&str], dns: &[&str], default: NetworkDefault) -> Network {
    Network {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        dns: dns.iter().map(|s| s.to_string()).collect(),
        allow_hosts: vec![],
        default,
        mode: None,
        probe: None,
    }
}

fn opts(binding: &str) -> DeriveOptions {
    DeriveOptions {
        binding: binding.into(),
        probe_denied: Some(SocketAddrV4::new(Ipv4Addr::new(169, 254, 169, 254), PORT)),
        probe_permitted: Some(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1), PORT)),
        dns_name: Some(NAME.into()),
        probe_timeout_ms: Some(2000),
        host_addresses: vec![],
    }
}

fn check_confined(v: &serde_json::Value) -> Result<(), String> {
    let c = &v["confinement"];
    let get = |k: &str| c[k].as_str().unwrap_or("").to_string();
    // CAP_NET_ADMIN is bit 12.
    if get("Seccomp") != "2"
        || get("NoNewPrivs") != "1"
        || get("CapEff") != "0000000000001000"
        || get("CapBnd") != "0000000000001000"
    {
        return Err(format!("helper not confined as documented: {c}"));
    }
    Ok(())
}

#[path = "chain/bench.rs"]
mod bench;

fn scenario_default_allow() -> Result<(), String> {
    let policy = derive_policy(
        net(
            &["10.99.0.0/24"],
            &["fc00::/7"],
            &["10.99.5.53"],
            NetworkDefault::Allow,
        ),
        opts("test generation 1"),
    )?;
    let mut t = Topology::build(&policy)?;

    // A memfd whose digest is not the one given is refused; nothing changes.
    let (fd, _) = policy_memfd(&policy)?;
    let (code, v, _) = t.helper(fd, &["install", "--digest", &"0".repeat(64)])?;
    if code != 2 || v["failed_stage"] != "policy" {
        return Err(format!("wrong digest: exit {code}, {v}"));
    }
    // An unsealed memfd is refused too.
    let unsealed = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::ALLOW_SEALING)
        .map_err(|e| e.to_string())?;
    let bytes = policy.to_bytes().map_err(|e| e.to_string())?;
    rustix::io::write(&unsealed, &bytes).map_err(|e| e.to_string())?;
    let (code, v, _) = t.helper(
        unsealed,
        &["install", "--digest", &policy.digest().unwrap()],
    )?;
    if code != 2 || !v["error"].as_str().unwrap_or("").contains("missing seals") {
        return Err(format!("unsealed memfd: exit {code}, {v}"));
    }
    let routes = t.in_ns(&t.h1, &["ip", "route"])?;
    if routes.contains("unreachable") {
        return Err(format!("routes changed by a refused policy:\n{routes}"));
    }

    let v = t.install(&policy)?;
    check_confined(&v)?;
    let fp = v["attestation"]["fingerprint"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if v["attestation"]["policy_digest"] != policy.digest().unwrap().as_str() || fp.len() != 64 {
        return Err(format!("attestation: {v}"));
    }
    t.start_slirp_b()?;
    let (code, pv, err) = t.probe(&policy, &fp)?;
    if code != 0 || pv["probe"]["passed"] != true {
        return Err(format!("probe exited {code}: {err} {pv}"));
    }
    check_confined(&pv)?;
    expect_outcomes(
        &t,
        &[
            ("198.51.100.1", true),
            ("203.0.113.1", true),
            ("10.99.0.1", true),
            ("10.99.1.1", false),
            ("172.16.9.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("10.0.2.2", false),
        ],
    )?;
    let a = t.dns("10.99.5.53")?;
    if !a.contains("198.51.100.1") {
        return Err(format!("DNS through the configured resolver: {a}"));
    }
    // slirp B's own forwarder follows the same resolv.conf.
    let a = t.dns("10.0.2.3")?;
    if !a.contains("198.51.100.1") {
        return Err(format!("DNS through slirp B's forwarder: {a}"));
    }
    for (ns, who) in [(&t.h1, "N1"), (&t.h2, "N2")] {
        for iface in ["all", "default", "tap0", "lo"] {
            let v = t.in_ns(
                ns,
                &[
                    "cat",
                    &format!("/proc/sys/net/ipv6/conf/{iface}/disable_ipv6"),
                ],
            )?;
            if v.trim() != "1" {
                return Err(format!("{who} {iface} disable_ipv6={v}"));
            }
        }
        let a6 = t.in_ns(ns, &["ip", "-6", "addr"])?;
        if a6.contains("inet6") {
            return Err(format!("{who} has IPv6 addresses: {a6}"));
        }
    }
    // The installed state is stable: a second probe gives the same fingerprint.
    let (code, _, err) = t.probe(&policy, &fp)?;
    if code != 0 {
        return Err(format!("second probe exited {code}: {err}"));
    }
    Ok(())
}

fn scenario_default_deny() -> Result<(), String> {
    let policy = derive_policy(
        net(&["198.51.100.0/28"], &[], &[], NetworkDefault::Deny),
        opts("test generation 2"),
    )?;
    if policy.resolvers != [Ipv4Addr::new(10, 0, 2, 3)] {
        return Err(format!("resolvers {:?}", policy.resolvers));
    }
    let mut t = Topology::build(&policy)?;
    let v = t.install(&policy)?;
    let fp = v["attestation"]["fingerprint"]
        .as_str()
        .unwrap_or("")
        .to_string();
    t.start_slirp_b()?;
    let (code, pv, err) = t.probe(&policy, &fp)?;
    if code != 0 {
        return Err(format!("probe exited {code}: {err} {pv}"));
    }
    expect_outcomes(
        &t,
        &[
            ("198.51.100.1", true),
            ("203.0.113.1", false),
            ("10.99.0.1", false),
            ("169.254.169.254", false),
        ],
    )?;
    // sandbox -> slirp B (10.0.2.3) -> N1 -> slirp A (10.0.2.3) -> OUT's resolver.
    let a = t.dns("10.0.2.3")?;
    if !a.contains("198.51.100.1") {
        return Err(format!("DNS through the slirp chain: {a}"));
    }
    // A resolver not in the policy is not reachable.
    let a = t.dns("198.51.100.53")?;
    if !a.starts_with("ERROR") {
        return Err(format!("unlisted resolver answered: {a}"));
    }
    Ok(())
}

fn scenario_failures() -> Result<(), String> {
    // A resolver with nobody behind it: the probe must fail, naming it.
    let policy = derive_policy(
        net(&[], &[], &["10.99.6.53"], NetworkDefault::Allow),
        opts("test generation 3"),
    )?;
    let mut t = Topology::build(&policy)?;
    let v = t.install(&policy)?;
    let fp = v["attestation"]["fingerprint"]
        .as_str()
        .unwrap_or("")
        .to_string();
    t.start_slirp_b()?;
    let (code, pv, _) = t.probe(&policy, &fp)?;
    let msg = pv["error"].as_str().unwrap_or("");
    if code != 5 || !msg.contains("resolver answers 10.99.6.53:53") {
        return Err(format!("failing resolver: exit {code}, {pv}"));
    }
    // Someone changes N1 after install: verification fails closed.
    t.in_ns(
        &t.h1,
        &[
            "ip",
            "route",
            "add",
            "10.99.1.0/24",
            "via",
            "10.0.2.2",
            "dev",
            "tap0",
            "onlink",
        ],
    )?;
    let (code, pv, _) = t.probe(&policy, &fp)?;
    if code != 4 || pv["failed_stage"] != "verify" {
        return Err(format!("tampered routes: exit {code}, {pv}"));
    }
    // A probe with a stale fingerprint fails closed too.
    t.in_ns(&t.h1, &["ip", "route", "del", "10.99.1.0/24"])?;
    let (code, pv, _) = t.probe(&policy, &"ab".repeat(32))?;
    if code != 4 || pv["failed_stage"] != "fingerprint" {
        return Err(format!("stale fingerprint: exit {code}, {pv}"));
    }
    Ok(())
}
