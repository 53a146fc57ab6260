//! The starting corpus: one valid input (or a few) per target, made from
//! the real types, so that mutations start where the decoders accept.
//! `lazaret-fuzz --write-seeds` writes them to `tools/fuzz/corpus/`.

use lazaret_protocol::plan::*;
use lazaret_protocol::{escalation, mailbox, netreport, session, supervisor};
use std::path::PathBuf;

fn frame<T: serde::Serialize>(out: &mut Vec<u8>, msg: &T) {
    let _ = lazaret_protocol::frame::write_frame(out, msg);
}

fn id_map() -> IdMap {
    IdMap {
        uid: 1000,
        gid: 1000,
        sub_uid: (100000, 65536),
        sub_gid: (100000, 65536),
    }
}

fn router() -> RouterPlan {
    RouterPlan {
        binary: "/usr/libexec/lazaret/lazaret-mount-router".into(),
        workspace: "/home/dev/src/p".into(),
        state: "/d/ignored".into(),
        mountpoint: "/d/run/workspace".into(),
        isolate_ignored: true,
        protected_paths: vec![".husky".into()],
        rules_baseline: Some("/d/rules-baseline".into()),
        state_max_bytes: Some(1 << 34),
        git_dir: None,
        inside_owner: None,
    }
}

fn sandbox_plan() -> SandboxPlan {
    let run = PathBuf::from("/d/run");
    SandboxPlan {
        sandbox_id: "lazaret-0123456789abcdef".into(),
        runsc: RunscInvocation {
            path: "/usr/bin/runsc".into(),
            global_flags: vec!["--rootless".into(), "--platform=systrap".into()],
        },
        state_dir: run.join("runsc"),
        bundle_dir: run.join("bundle"),
        run_dir: run.clone(),
        exec_bridge: "/usr/libexec/lazaret/lazaret-exec-bridge".into(),
        root: RootLayout {
            lower: "/s/lowers/ab/rootfs".into(),
            upper: run.join("root-upper"),
            work: run.join("root-work"),
            merged: run.join("root"),
        },
        anchors: vec![AnchorMount {
            path: "/usr".into(),
            lower: Some("/s/lowers/ab/rootfs/usr".into()),
            upper: "/d/state/anchors/usr/g1/upper".into(),
            work: "/d/state/anchors/usr/g1/work".into(),
            merged: run.join("anchors/usr"),
        }],
        control_lower: Some(run.join("control-lower")),
        mounts: vec![PlannedMount {
            destination: "/workspace".into(),
            kind: MountKind::Bind {
                source: run.join("workspace"),
                read_only: false,
            },
            purpose: MountPurpose::Workspace,
        }],
        hostname: "lazaret".into(),
        env: vec!["PATH=/usr/bin:/bin".into()],
        id_map: id_map(),
        network: None,
        router: Some(router()),
        git_router: None,
        volume_routers: Vec::new(),
        limits: SandboxLimits::default(),
    }
}

fn coordinator_input() -> CoordinatorInput {
    CoordinatorInput {
        domain_id: "0123456789abcdef0123456789abcdef".into(),
        profile_name: "default".into(),
        workspace: "/home/dev/src/p".into(),
        domain_root: "/d".into(),
        config_fingerprint: "f".repeat(64),
        image_rootfs: "/s/lowers/ab/rootfs".into(),
        image_reference: "lazaret:default".into(),
        runsc: RunscInvocation {
            path: "/usr/bin/runsc".into(),
            global_flags: vec![],
        },
        id_map: id_map(),
        env: vec![("EDITOR".into(), "vi".into())],
        persistent_paths: vec!["/usr".into(), "/root".into()],
        isolate_ignored: true,
        protected_paths: vec![],
        user: None,
        git_identity: (Some("Dev".into()), Some("dev@example.org".into())),
        host_ca: None,
        volumes: vec![VolumeSpec {
            host: "/data".into(),
            sandbox: "/data".into(),
            read_only: true,
            git_sentry: true,
        }],
        shared_paths: vec![],
        auto_approve: vec![AutoApproveRule {
            argv: vec!["git".into(), "fetch".into()],
            trailing_args: false,
            trailing_options: vec![],
        }],
        libexec: "/usr/libexec/lazaret".into(),
        network: NetworkInput {
            policy: Some(DerivedPolicy {
                bytes: vec![1, 0, 0],
                digest: "0".repeat(64),
            }),
            slirp4netns: Some("/usr/bin/slirp4netns".into()),
            hide_proc_sys_net: true,
            ports: vec![],
        },
        limits: SandboxLimits::default(),
        keep_alive_ms: Some(600_000),
        detach_on_hangup: false,
    }
}

/// (target, file name, bytes) of every seed.
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add =
        |t: &'static str, name: &str, bytes: Vec<u8>| out.push((t, name.to_string(), bytes));
    for name in ["claude-code.toml", "codex.toml", "aider.toml"] {
        if let Ok(b) = std::fs::read(crate::root().join("../../examples").join(name)) {
            add("config", name, b);
        }
    }
    add(
        "config",
        "full.toml",
        br#"[storage]
data_root = "/abs/data"
[profiles.default]
image = "lazaret:default"
persistent_paths = ["/usr", "/root"]
env = { EDITOR = "vi" }
pass_env = ["ANTHROPIC_API_KEY"]
[[profiles.default.volumes]]
host = "/abs/host"
sandbox = "/data"
[[profiles.default.volumes]]
host = "/abs/cache"
sandbox = "/cache"
read_only = false
git_sentry = false
[profiles.default.network]
allow = ["10.0.0.0/8"]
default = "deny"
dns = ["10.0.0.53"]
[profiles.default.limits]
memory = "4GiB"
[[profiles.default.escalation.auto_approve]]
argv = ["git", "fetch"]
trailing_args = true
trailing_options = ["--prune"]
"#
        .to_vec(),
    );
    let body = escalation::Body {
        version: escalation::VERSION,
        sandbox_id: "lazaret-0123456789abcdef".into(),
        session_id: "0123456789abcdef0123456789abcdef".into(),
        request_id: [9; 16],
        created_unix_ms: 1_800_000_000_000,
        kind: escalation::Kind::Cancel,
    };
    let key = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new([7; 32])).sk;
    add(
        "escalation-record",
        "cancel",
        escalation::seal(&body, &key, &[3; 32]),
    );
    add(
        "escalation-body",
        "cancel",
        postcard::to_stdvec(&body).unwrap_or_default(),
    );
    let result_key = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new([8; 32])).sk;
    add(
        "escalation-result",
        "completed",
        lazaret_protocol::trust::result::seal(
            &lazaret_protocol::trust::result::SignedBody {
                generation: crate::targets::fuzz_generation(),
                sandbox_id: "lazaret-0123456789abcdef".into(),
                session_id: "0123456789abcdef0123456789abcdef".into(),
                record: escalation::ResultRecord {
                    request_id: [9; 16],
                    outcome: escalation::Outcome::Completed {
                        status: 0,
                        stdout: b"hi\n".to_vec(),
                        stderr: Vec::new(),
                        truncated: false,
                    },
                },
            },
            &result_key,
        ),
    );
    if let Ok(anchor) =
        lazaret_trust::TrustAnchor::new(crate::targets::fuzz_generation(), "default", "c")
    {
        add("trust-anchor", "published", anchor.published().encode());
        let key = lazaret_trust::Key::from_seed([4; 32]);
        if let Ok(cert) = anchor.issue(
            &key.public(),
            &anchor.claims(
                lazaret_protocol::trust::Role::ClientCli,
                "cli",
                Some("0123456789abcdef0123456789abcdef"),
            ),
            None,
        ) {
            add("certificate-claims", "client", cert);
        }
    }
    {
        use hickory_proto::op::{Message, MessageType, Query};
        use hickory_proto::rr::{rdata, Name, RData, Record, RecordType};
        let name = Name::from_ascii("github.com.").unwrap_or_default();
        let mut q = Message::new();
        q.set_id(7)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(name.clone(), RecordType::A));
        add("dns-filter", "query", q.to_vec().unwrap_or_default());
        let mut a = Message::new();
        a.set_id(7)
            .set_message_type(MessageType::Response)
            .add_query(Query::query(name.clone(), RecordType::A));
        let lb = Name::from_ascii("lb.githubusercontent.com.").unwrap_or_default();
        a.add_answer(Record::from_rdata(
            name,
            60,
            RData::CNAME(rdata::CNAME(lb.clone())),
        ));
        a.add_answer(Record::from_rdata(
            lb,
            60,
            RData::A(rdata::A::new(192, 0, 2, 7)),
        ));
        add("dns-filter", "answer", a.to_vec().unwrap_or_default());
    }
    add(
        "registration",
        "register",
        postcard::to_stdvec(&session::Register {
            version: session::PROTOCOL_VERSION,
            public_key: [4; 32],
        })
        .unwrap_or_default(),
    );
    add(
        "sandbox-plan",
        "plan",
        postcard::to_stdvec(&sandbox_plan()).unwrap_or_default(),
    );
    add(
        "coordinator-input",
        "input",
        postcard::to_stdvec(&coordinator_input()).unwrap_or_default(),
    );
    let mut s = Vec::new();
    frame(
        &mut s,
        &session::Hello {
            version: session::PROTOCOL_VERSION,
            config_fingerprint: "f".repeat(64),
            argv: Some(vec!["make".into(), "test".into()]),
            tty: Some(session::TtyInfo {
                term: "xterm".into(),
                rows: 24,
                cols: 80,
            }),
            workdir: Some("src".into()),
            workdir_from: session::WorkdirFrom::Option,
            env: session::SessionEnv(vec![("K".into(), "v".into())]),
            control: None,
            ports: vec![lazaret_protocol::plan::PublishedPort {
                host_addr: std::net::Ipv4Addr::LOCALHOST,
                host_port: 8080,
                sandbox_port: 3000,
            }],
            detach: false,
            attach: None,
        },
    );
    frame(&mut s, &session::ClientMsg::Stdin(b"ls\n".to_vec()));
    frame(
        &mut s,
        &session::ClientMsg::Resize {
            rows: 50,
            cols: 120,
        },
    );
    add("session-frames", "client", s);
    let mut s = Vec::new();
    frame(
        &mut s,
        &session::ServerMsg::Accepted {
            session_id: "ab".into(),
        },
    );
    frame(&mut s, &session::ServerMsg::Stdout(b"out".to_vec()));
    frame(&mut s, &session::ServerMsg::Exit { status: 3 });
    add("session-frames", "server", s);
    add(
        "supervisor-channel",
        "stop",
        postcard::to_stdvec(&supervisor::ToSupervisor::Stop).unwrap_or_default(),
    );
    add(
        "supervisor-channel",
        "failed",
        postcard::to_stdvec(&supervisor::FromSupervisor::StartFailed { reason: "x".into() })
            .unwrap_or_default(),
    );
    add(
        "mailbox-channel",
        "added",
        postcard::to_stdvec(&mailbox::ToReader::SessionAdded {
            session_id: "ab".into(),
            anchor: [1; 32],
        })
        .unwrap_or_default(),
    );
    add(
        "netreport",
        "failed",
        serde_json::to_vec(&netreport::NetReport {
            ok: false,
            mode: netreport::NetMode::Install,
            attestation: None,
            probe: None,
            confinement: None,
            failed_stage: Some("probe".into()),
            error: Some("unreachable".into()),
        })
        .unwrap_or_default(),
    );
    add("oci-layer", "small.tar", tar_seed());
    for (i, text) in [
        "# comment\n*.o\n/build/\n!keep.o\nnode_modules\n",
        "a/**/b\n\\#x\n  trailing  \n[abc]?.rs\n",
        "**\n!important/\n",
    ]
    .iter()
    .enumerate()
    {
        add("ignore-rules", &format!("g{i}"), text.as_bytes().to_vec());
    }
    for (i, r) in [
        "lazaret:default",
        "local:claude-code",
        "oci:/a/b:v1",
        "docker://r.example/x:1",
        "oci-archive:x.tar",
    ]
    .iter()
    .enumerate()
    {
        add("image-reference", &format!("r{i}"), r.as_bytes().to_vec());
    }
    out
}

/// A layer with a directory, a file, a symlink, a hard link and a whiteout.
fn tar_seed() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    let _ = b.append_data(&mut h.clone(), "etc/", &[][..]);
    let mut f = tar::Header::new_gnu();
    f.set_mode(0o644);
    f.set_size(5);
    let _ = b.append_data(&mut f.clone(), "etc/hosts", &b"hello"[..]);
    let mut l = tar::Header::new_gnu();
    l.set_entry_type(tar::EntryType::Symlink);
    l.set_size(0);
    let _ = b.append_link(&mut l, "etc/link", "/etc/shadow");
    let mut hl = tar::Header::new_gnu();
    hl.set_entry_type(tar::EntryType::Link);
    hl.set_size(0);
    let _ = b.append_link(&mut hl, "etc/hard", "etc/hosts");
    f.set_size(0);
    let _ = b.append_data(&mut f, "etc/.wh.gone", &[][..]);
    b.into_inner().unwrap_or_default()
}
