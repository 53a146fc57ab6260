//! The supervisor checks the plan memfd's SHA-256 digest (passed in argv)
//! before it parses the plan, and refuses a mismatch with a clear, typed
//! error on its control channel, before it creates or starts anything.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_helpers::channel;
use lazaret_helpers::{fds, memfd};
use lazaret_protocol::fdno::supervisor::{CHANNEL as CHANNEL_FD, PLAN as PLAN_FD};
use lazaret_protocol::plan::*;
use lazaret_protocol::supervisor::{FromSupervisor, MAX_RECORD};
use std::path::Path;
use std::process::{Command, Stdio};

fn plan(run: &Path) -> SandboxPlan {
    SandboxPlan {
        sandbox_id: "s1".into(),
        runsc: RunscInvocation {
            path: "/bin/false".into(),
            global_flags: vec![],
        },
        state_dir: run.join("runsc"),
        bundle_dir: run.join("bundle"),
        run_dir: run.to_path_buf(),
        exec_bridge: "/bin/false".into(),
        root: RootLayout {
            lower: run.join("lower"),
            upper: run.join("root-upper"),
            work: run.join("root-work"),
            merged: run.join("root"),
        },
        control_lower: None,
        anchors: vec![],
        mounts: vec![],
        hostname: "lazaret".into(),
        env: vec![],
        id_map: IdMap {
            uid: 1000,
            gid: 1000,
            sub_uid: (100000, 65536),
            sub_gid: (100000, 65536),
        },
        network: None,
        router: None,
        git_router: None,
        volume_routers: Vec::new(),
        limits: SandboxLimits::default(),
    }
}

/// Runs the supervisor on `bytes` with `digest`; returns its first record
/// and its exit code.
fn supervise(bytes: &[u8], digest: &str) -> (FromSupervisor, Option<i32>) {
    let fd = memfd::sealed("sandbox-plan", bytes).unwrap();
    let (ours, theirs) = channel::pair().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazaret-supervisor"));
    cmd.args(["--domain", "test", "--plan-digest", digest])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    fds::pass_fds(
        &mut cmd,
        vec![(fd, PLAN_FD), (theirs.into_fd(), CHANNEL_FD)],
    );
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let (msg, fds) = ours.recv(MAX_RECORD).unwrap();
    assert!(fds.is_empty());
    (msg, child.wait().unwrap().code())
}

#[test]
fn a_plan_whose_digest_differs_is_refused_before_anything_starts() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run");
    let bytes = postcard::to_stdvec(&plan(&run)).unwrap();
    let wrong = memfd::digest(b"another plan");
    let (msg, code) = supervise(&bytes, &wrong);
    match msg {
        FromSupervisor::StartFailed { reason } => {
            assert!(reason.contains("sandbox-plan"), "{reason}");
            assert!(reason.contains("digest"), "{reason}");
            assert!(reason.contains(&wrong), "{reason}");
        }
        other => panic!("expected StartFailed, got {other:?}"),
    }
    // lazaret_supervisor::exit::BAD_PLAN
    assert_eq!(code, Some(2));
    // Nothing was created: not even the bundle directory.
    assert!(!run.exists(), "the supervisor created {}", run.display());
}

#[test]
fn a_network_policy_whose_digest_differs_is_refused_before_anything_starts() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("run");
    let mut p = plan(&run);
    p.network = Some(SandboxNetwork {
        policy: b"the policy".to_vec(),
        // Not the policy's digest: a plan whose parts disagree.
        digest: memfd::digest(b"another policy"),
        helper: "/bin/false".into(),
        slirp4netns: "/bin/false".into(),
        resolv_conf: "/etc/resolv.conf".into(),
        evidence_dir: run.join("evidence"),
        hide_proc_sys_net: false,
        domain_id: "test".into(),
        attachment: "test".into(),
        dns_filter: None,
        host_watch_log: run.join("host-addresses.log"),
        ports: vec![],
        api_socket_dir: run.join("net"),
    });
    let bytes = postcard::to_stdvec(&p).unwrap();
    let (msg, code) = supervise(&bytes, &memfd::digest(&bytes));
    match msg {
        FromSupervisor::StartFailed { reason } => {
            assert!(reason.contains("network"), "{reason}");
            assert!(reason.contains("digest"), "{reason}");
        }
        other => panic!("expected StartFailed, got {other:?}"),
    }
    assert_eq!(code, Some(2));
    assert!(!run.exists(), "the supervisor created {}", run.display());
}

#[test]
fn a_missing_digest_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let bytes = postcard::to_stdvec(&plan(&d.path().join("run"))).unwrap();
    let fd = memfd::sealed("sandbox-plan", &bytes).unwrap();
    let (ours, theirs) = channel::pair().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazaret-supervisor"));
    cmd.args(["--domain", "test"]).stdin(Stdio::null());
    fds::pass_fds(
        &mut cmd,
        vec![(fd, PLAN_FD), (theirs.into_fd(), CHANNEL_FD)],
    );
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let (msg, _) = ours.recv::<FromSupervisor>(MAX_RECORD).unwrap();
    assert!(
        matches!(&msg, FromSupervisor::StartFailed { reason } if reason.contains("--plan-digest")),
        "{msg:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(2));
}
