//! `bench/net/run`: TCP connection latency and throughput to a test host,
//! from the sandbox namespace through the whole chain (slirp B, N1's
//! routes, slirp A), from the enforcement namespace (slirp A only), and
//! from OUT itself (the host's view: the test host is local there), in the
//! same run. Prints medians and ratios. Every address is a test host on
//! OUT's `lo`; nothing leaves the namespaces this run creates.

use super::*;
use std::time::Instant;

struct Args {
    connects: usize,
    mib: usize,
    transfers: usize,
}

fn parse(args: &[String]) -> Args {
    let mut a = Args {
        connects: 200,
        mib: 64,
        transfers: 5,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let v = it.next().and_then(|v| v.parse().ok());
        match (k.as_str(), v) {
            ("--connects", Some(v)) => a.connects = v,
            ("--mib", Some(v)) => a.mib = v,
            ("--transfers", Some(v)) => a.transfers = v,
            _ => {
                eprintln!("usage: bench [--connects N] [--mib N] [--transfers N]");
                std::process::exit(2);
            }
        }
    }
    a
}

/// In some namespace: `connects` connection round trips (connect, read the
/// greeting, close) and `transfers` uploads of `mib` MiB; prints JSON.
pub fn client(args: &[String]) {
    let host: Ipv4Addr = args[0].parse().expect("host");
    let a = parse(&args[1..]);
    let mut lat = Vec::new();
    for _ in 0..a.connects {
        let t = Instant::now();
        let mut c = std::net::TcpStream::connect((host, PORT)).expect("connect");
        let mut b = [0u8; 10];
        c.read_exact(&mut b).expect("greeting");
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let chunk = vec![0x5au8; 1 << 16];
    let mut thr = Vec::new();
    for _ in 0..a.transfers {
        let t = Instant::now();
        let mut c = std::net::TcpStream::connect((host, SINK_PORT)).expect("connect sink");
        for _ in 0..(a.mib * 16) {
            c.write_all(&chunk).expect("send");
        }
        c.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut n = [0u8; 8];
        c.read_exact(&mut n).expect("ack");
        assert_eq!(u64::from_le_bytes(n), (a.mib as u64) << 20);
        thr.push(a.mib as f64 / t.elapsed().as_secs_f64());
    }
    println!(
        "{}",
        serde_json::json!({"latency_ms": lat, "throughput_mibs": thr})
    );
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn main(args: &[String]) {
    let a = parse(args);
    if let Some(r) = missing_prerequisite() {
        eprintln!("bench/net: cannot run: {r}");
        std::process::exit(1);
    }
    let policy = derive_policy(
        net(
            &["10.99.0.0/24"],
            &[],
            &["10.99.5.53"],
            NetworkDefault::Allow,
        ),
        opts("bench"),
    )
    .expect("policy");
    let mut t = Topology::build(&policy).expect("topology");
    let v = t.install(&policy).expect("install");
    let fp = v["attestation"]["fingerprint"]
        .as_str()
        .unwrap_or("")
        .to_string();
    t.start_slirp_b().expect("slirp B");
    let (code, _, err) = t.probe(&policy, &fp).expect("probe");
    assert_eq!(code, 0, "probe: {err}");
    let me = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    for (label, target, flags) in [
        ("direct (OUT, the host's view)", &t.out, &["-U", "-n"][..]),
        ("enforcement ns (slirp A)", &t.h1, &["-U", "-n"][..]),
        (
            "sandbox ns (slirp B + policy + slirp A)",
            &t.h2,
            &["-U", "-n"][..],
        ),
    ] {
        for host in ["198.51.100.1", "10.99.0.1"] {
            let out = nsenter(target, flags)
                .arg(&me)
                .arg("bench-client")
                .arg(host)
                .args(["--connects", &a.connects.to_string()])
                .args(["--mib", &a.mib.to_string()])
                .args(["--transfers", &a.transfers.to_string()])
                .output()
                .expect("client");
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "{label} {host}: {e}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let f = |k: &str| -> Vec<f64> {
                j[k].as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|x| x.as_f64())
                    .collect()
            };
            rows.push((
                label,
                host,
                median(&f("latency_ms")),
                median(&f("throughput_mibs")),
            ));
        }
    }
    println!(
        "bench/net: {} connects, {} x {} MiB uploads per row; medians",
        a.connects, a.transfers, a.mib
    );
    println!(
        "{:<42} {:<14} {:>12} {:>14} {:>10} {:>10}",
        "from", "to", "connect ms", "MiB/s", "lat x", "thr x"
    );
    for (label, host, lat, thr) in &rows {
        let base = rows
            .iter()
            .find(|r| r.0.starts_with("direct") && r.1 == *host)
            .unwrap();
        println!(
            "{:<42} {:<14} {:>12.3} {:>14.1} {:>10.2} {:>10.3}",
            label,
            host,
            lat,
            thr,
            lat / base.2,
            thr / base.3
        );
    }
    println!("(lat x = connect latency / direct; thr x = throughput / direct)");
}
