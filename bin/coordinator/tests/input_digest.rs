//! The coordinator checks its input memfd's SHA-256 (passed in argv by the
//! startup leader) before it parses the input, and says why on its typed
//! readiness pipe: a forged or swapped input starts nothing.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_helpers::{fds, memfd};
use lazaret_protocol::plan::CoordinatorReadiness;
use std::process::{Command, Stdio};

fn coordinator(bytes: &[u8], digest: Option<&str>) -> (CoordinatorReadiness, Option<i32>) {
    let fd = memfd::sealed("coordinator-input", bytes).unwrap();
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lazaret-coordinator"));
    cmd.args(["--domain", "test"]);
    if let Some(d) = digest {
        cmd.args(["--input-digest", d]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    fds::pass_fds(&mut cmd, vec![(fd, 3), (ready_w, 4)]);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut r = std::fs::File::from(ready_r);
    let msg = lazaret_protocol::frame::read_frame(&mut r).unwrap();
    (msg, child.wait().unwrap().code())
}

#[test]
fn an_input_whose_digest_differs_is_refused_before_it_is_parsed() {
    let bytes = b"not even postcard";
    let wrong = memfd::digest(b"another input");
    match coordinator(bytes, Some(&wrong)) {
        (CoordinatorReadiness::Failed(why), Some(2)) => {
            assert!(why.contains("digest"), "{why}");
        }
        other => panic!("expected a refusal with exit 2, got {other:?}"),
    }
    // Without a digest at all, nothing is parsed either.
    match coordinator(bytes, None) {
        (CoordinatorReadiness::Failed(why), Some(2)) => {
            assert!(why.contains("--input-digest"), "{why}");
        }
        other => panic!("expected a refusal with exit 2, got {other:?}"),
    }
    // The right digest gets as far as parsing (which fails on these bytes).
    match coordinator(bytes, Some(&memfd::digest(bytes))) {
        (CoordinatorReadiness::Failed(why), Some(2)) => {
            assert!(why.contains("coordinator input"), "{why}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}
