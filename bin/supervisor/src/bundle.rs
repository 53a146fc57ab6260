//! The OCI runtime bundle written for `runsc run`.
//!
//! Pure: the plan goes in, `config.json` comes out, so the mount order and
//! the authority given to the sandbox are unit-tested without a sandbox.

use lazaret_protocol::plan::{MountKind, SandboxPlan};
use serde_json::{json, Value};

/// Capabilities of processes in the sandbox: the usual container set,
/// without `CAP_NET_ADMIN`, `CAP_NET_RAW` and `CAP_SYS_ADMIN` (SR-5). They
/// are gVisor capabilities, held against gVisor's kernel, not the host's.
pub const SANDBOX_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_MKNOD",
    "CAP_AUDIT_WRITE",
    "CAP_SETFCAP",
];

pub fn capabilities() -> Value {
    json!({
        "bounding": SANDBOX_CAPS,
        "effective": SANDBOX_CAPS,
        "permitted": SANDBOX_CAPS,
    })
}

/// The sandbox's init: it only waits, so that sessions can come and go,
/// and, when the Domain publishes ports, keeps `lazaret-port-relay`
/// running (restarted a second after it ends: the sandbox may stop it;
/// see [`crate::ports`]), and `lazaret-sudo`'s service where the
/// coordinator installed it (a profile with a `user`). It ignores `SIGXFSZ`: the Sentry forwards to
/// init the signal the host kernel sends it when the memory bound refuses
/// to grow its memory file ([`crate::limits`]), and init must not die of
/// it.
pub fn init_args(plan: &SandboxPlan) -> Vec<String> {
    let relay = match plan.network.as_ref().map(|n| &n.ports) {
        // The arguments are ours, digits and `=` only.
        Some(ports) if !ports.is_empty() => format!(
            "(while :; do {} {}; sleep 1; done) & ",
            lazaret_protocol::plan::PORT_RELAY,
            crate::ports::relay_args(ports).join(" ")
        ),
        _ => String::new(),
    };
    // Only where the coordinator installed it: a profile with a `user`.
    let sudo = format!(
        "if [ -x {s} ]; then (while :; do {s} --serve; sleep 1; done) & fi; ",
        s = lazaret_protocol::plan::SUDO_SERVICE
    );
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("trap '' XFSZ; trap 'exit 0' TERM INT; {relay}{sudo}while :; do sleep 3600 & wait $!; done"),
    ]
}

/// `netns`: the sandbox network namespace (`/proc/K/ns/net` of the
/// holder's keeper child) when the plan has a network; otherwise the
/// sandbox gets a fresh, empty one.
pub fn config_json(plan: &SandboxPlan, netns: Option<&str>) -> Value {
    let network = match netns {
        Some(path) => json!({"type": "network", "path": path}),
        None => json!({"type": "network"}),
    };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        tmp_mount(&plan.limits),
    ];
    for a in &plan.anchors {
        mounts.push(json!({
            "destination": a.path,
            "type": "bind",
            "source": a.merged,
            "options": ["rbind", "rw"],
        }));
    }
    for m in &plan.mounts {
        mounts.push(match &m.kind {
            MountKind::Bind { source, read_only } => json!({
                "destination": m.destination,
                "type": "bind",
                "source": source,
                "options": ["rbind", if *read_only { "ro" } else { "rw" }],
            }),
            MountKind::Tmpfs => json!({
                "destination": m.destination,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=755"],
            }),
        });
    }
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": init_args(plan),
            "env": plan.env,
            "cwd": "/",
            "capabilities": capabilities(),
            "noNewPrivileges": true,
            "rlimits": crate::limits::oci_rlimits(&plan.limits),
        },
        "root": {"path": plan.root.merged, "readonly": false},
        "hostname": plan.hostname,
        "mounts": mounts,
        "linux": {
            // A new namespace of each kind: the sandbox joins no host
            // namespace (SR-12). With a network, the network namespace is
            // the Domain's sandbox namespace N2, behind the enforcement
            // namespace; never a host one.
            "namespaces": [
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                network,
            ],
        },
    })
}

/// `/tmp`: a gVisor tmpfs, so that what the sandbox writes there is memory
/// inside the memory bound rather than unbounded host disk. It may fill
/// half the bound, so a full `/tmp` is a plain `ENOSPC` while processes
/// still have memory.
fn tmp_mount(limits: &lazaret_protocol::plan::SandboxLimits) -> Value {
    let mut options = vec!["nosuid".to_string(), "nodev".into(), "mode=1777".into()];
    if let Some(bytes) = limits.memory {
        options.push(format!("size={}k", bytes / 2 / 1024));
    }
    json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": options})
}

/// The process spec for one `runsc exec`; `limits` as in the sandbox's
/// init (gVisor would otherwise give the process the init's, which is the
/// same; stating them keeps the bound independent of that).
pub fn exec_process_json(
    args: &[String],
    env: &[String],
    cwd: &str,
    terminal: bool,
    setuid: bool,
    limits: &lazaret_protocol::plan::SandboxLimits,
) -> Value {
    json!({
        "terminal": terminal,
        "user": {"uid": 0, "gid": 0},
        "args": args,
        "env": env,
        "cwd": cwd,
        "capabilities": capabilities(),
        "noNewPrivileges": !setuid,
        "rlimits": crate::limits::oci_rlimits(limits),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::plan::*;
    use std::path::PathBuf;

    fn plan() -> SandboxPlan {
        SandboxPlan {
            sandbox_id: "s1".into(),
            runsc: RunscInvocation {
                path: "/usr/bin/runsc".into(),
                global_flags: vec![],
            },
            state_dir: "/r/state".into(),
            bundle_dir: "/r/bundle".into(),
            run_dir: "/r".into(),
            exec_bridge: "/usr/libexec/lazaret/lazaret-exec-bridge".into(),
            root: RootLayout {
                lower: "/l".into(),
                upper: "/r/u".into(),
                work: "/r/w".into(),
                merged: "/r/root".into(),
            },
            control_lower: None,
            anchors: vec![AnchorMount {
                path: "/usr".into(),
                lower: Some("/l/usr".into()),
                upper: "/d/usr/g1/upper".into(),
                work: "/d/usr/g1/work".into(),
                merged: "/r/anchors/usr".into(),
            }],
            mounts: vec![
                PlannedMount {
                    destination: "/workspace".into(),
                    kind: MountKind::Bind {
                        source: PathBuf::from("/w"),
                        read_only: false,
                    },
                    purpose: MountPurpose::Workspace,
                },
                PlannedMount {
                    destination: "/workspace/.git/hooks".into(),
                    kind: MountKind::Tmpfs,
                    purpose: MountPurpose::Control,
                },
            ],
            hostname: "lazaret".into(),
            env: vec!["PATH=/bin".into()],
            id_map: IdMap {
                uid: 1000,
                gid: 1000,
                sub_uid: (100000, 65535),
                sub_gid: (100000, 65535),
            },
            network: None,
            router: None,
            git_router: None,
            volume_routers: Vec::new(),
            limits: SandboxLimits {
                memory: Some(4 << 30),
                processes: Some(100),
                ..Default::default()
            },
        }
    }

    /// The destinations of `config.json`'s mounts, in order.
    fn destinations(v: &Value) -> Vec<String> {
        v["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn limits_reach_init() {
        let v = config_json(&plan(), None);
        assert_eq!(
            v["process"]["rlimits"],
            json!([{"type": "RLIMIT_NPROC", "hard": 100, "soft": 100}])
        );
        assert!(v["process"]["args"][2]
            .as_str()
            .unwrap()
            .starts_with("trap '' XFSZ;"));
        let tmp = v["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/tmp")
            .unwrap();
        assert_eq!(tmp["type"], "tmpfs");
        assert!(tmp["options"]
            .as_array()
            .unwrap()
            .contains(&json!("size=2097152k")));
        let caps = v["process"]["capabilities"]["bounding"].as_array().unwrap();
        assert!(
            !caps.iter().any(|c| c == "CAP_SYS_RESOURCE"),
            "the sandbox could raise its limits"
        );
    }

    #[test]
    fn init_starts_the_port_relay_only_when_the_domain_publishes_ports() {
        let mut p = plan();
        assert!(!init_args(&p)[2].contains("lazaret-port-relay"));
        p.network = Some(SandboxNetwork {
            policy: vec![],
            digest: String::new(),
            helper: "/h".into(),
            slirp4netns: "/s".into(),
            resolv_conf: "/r".into(),
            evidence_dir: "/e".into(),
            hide_proc_sys_net: false,
            domain_id: "d".into(),
            attachment: "a".into(),
            dns_filter: None,
            host_watch_log: "/l".into(),
            ports: vec![],
            api_socket_dir: "/n".into(),
        });
        assert!(!init_args(&p)[2].contains("lazaret-port-relay"));
        let port = |host_port, sandbox_port| PublishedPort {
            host_addr: std::net::Ipv4Addr::LOCALHOST,
            host_port,
            sandbox_port,
        };
        p.network.as_mut().unwrap().ports = vec![port(8080, 3000), port(1455, 1455)];
        let script = &init_args(&p)[2];
        assert!(
            script.contains(
                "(while :; do /.lazaret/bin/lazaret-port-relay 61000=1455 61001=3000; sleep 1; done) & "
            ),
            "{script}"
        );
        // Still the init that ignores SIGXFSZ and waits.
        assert!(script.starts_with("trap '' XFSZ; trap 'exit 0' TERM INT; "));
        assert!(script.ends_with(
            "if [ -x /.lazaret/bin/lazaret-sudo ]; then (while :; do /.lazaret/bin/lazaret-sudo --serve; sleep 1; done) & fi; while :; do sleep 3600 & wait $!; done"
        ));
    }

    #[test]
    fn no_admin_capabilities() {
        let v = config_json(&plan(), None);
        let caps = v["process"]["capabilities"]["bounding"].as_array().unwrap();
        for bad in [
            "CAP_SYS_ADMIN",
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_SYS_PTRACE",
        ] {
            assert!(!caps.iter().any(|c| c == bad), "{bad} granted");
        }
        assert_eq!(v["process"]["noNewPrivileges"], true);
    }

    #[test]
    fn fresh_namespaces_without_paths() {
        let v = config_json(&plan(), None);
        for ns in v["linux"]["namespaces"].as_array().unwrap() {
            assert!(
                ns.get("path").is_none(),
                "joins an existing namespace: {ns}"
            );
        }
    }

    #[test]
    fn plan_mounts_follow_base_mounts_in_order() {
        let v = config_json(&plan(), None);
        let dests = destinations(&v);
        let ws = dests.iter().position(|d| d == "/workspace").unwrap();
        let usr = dests.iter().position(|d| d == "/usr").unwrap();
        assert!(usr < ws, "anchors come before the workspace");
        assert_eq!(v["mounts"][usr]["source"], "/r/anchors/usr");
        let hooks = dests
            .iter()
            .position(|d| d == "/workspace/.git/hooks")
            .unwrap();
        assert!(ws < hooks);
        assert_eq!(v["mounts"][ws]["options"][1], "rw");
        assert_eq!(v["mounts"][hooks]["type"], "tmpfs");
    }

    #[test]
    fn network_namespace_and_resolv_conf_over_the_etc_anchor() {
        let mut p = plan();
        p.anchors.push(AnchorMount {
            path: "/etc".into(),
            lower: Some("/l/etc".into()),
            upper: "/d/etc/g1/upper".into(),
            work: "/d/etc/g1/work".into(),
            merged: "/r/anchors/etc".into(),
        });
        p.mounts.push(PlannedMount {
            destination: "/etc/resolv.conf".into(),
            kind: MountKind::Bind {
                source: "/r/net/resolv.conf".into(),
                read_only: true,
            },
            purpose: MountPurpose::Network,
        });
        let v = config_json(&p, Some("/proc/2/ns/net"));
        let net: Vec<_> = v["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["type"] == "network")
            .collect();
        assert_eq!(net.len(), 1);
        assert_eq!(net[0]["path"], "/proc/2/ns/net");
        for ns in v["linux"]["namespaces"].as_array().unwrap() {
            if ns["type"] != "network" {
                assert!(ns.get("path").is_none(), "joins {ns}");
            }
        }
        let dests = destinations(&v);
        let etc = dests.iter().position(|d| d == "/etc").unwrap();
        let resolv = dests.iter().position(|d| d == "/etc/resolv.conf").unwrap();
        assert!(
            etc < resolv,
            "the resolver file must sit on top of the /etc anchor"
        );
        assert_eq!(v["mounts"][resolv]["options"][1], "ro");
        assert_eq!(v["mounts"][resolv]["source"], "/r/net/resolv.conf");
    }
}
