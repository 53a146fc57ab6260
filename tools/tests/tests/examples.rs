//! The example Agent Profiles (issue 14, item 5; issue 28, item 2):
//! `examples/check` installs the quickest agent, Codex CLI, from the npm
//! registry in its setup profile, commits that Domain as an image, and in a
//! new workspace the agent profile's sandbox starts its binary, which prints
//! its version, then runs it unattended against the scripted model server
//! (examples/model-server) on the host: Codex edits a file of the workspace
//! and runs a command inside, asking nothing. It needs the package registries: when they cannot be reached
//! (the script's exit 3), the test skips like any other missing
//! prerequisite.

use std::path::{Path, PathBuf};

use lazaret_tests::{require_env, text};

/// The script's exit status when the registries are not reachable.
const REGISTRIES_UNREACHABLE: i32 = 3;

fn skip(reason: &str) {
    if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
        panic!("LAZARET_TESTS_MUST_RUN=1 but the test would skip: {reason}");
    }
    eprintln!("skipping: {reason}");
}

#[test]
fn the_codex_example_starts_codex_and_prints_its_version() {
    let env = require_env!();
    // A copy of examples/ the test user can read (the checkout may not be),
    // and a TMPDIR of the user's own for the script's scratch files, so
    // what it leaves behind can be seen. Under /tmp: runsc does not start
    // when TMPDIR is beneath a directory others cannot search, as the
    // harness's 0700 cache is (reported with issue 14).
    let ws = env.workspace("examples");
    let dir = ws.base.join("examples");
    let out = env.sh(&format!(
        "mkdir -p '{}' && mktemp -d /tmp/lazaret-examples.XXXXXX",
        dir.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tmp = PathBuf::from(text(&out.stdout).trim());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for f in [
        "check",
        "model-server",
        "setup.sh",
        "claude-code.toml",
        "codex.toml",
        "aider.toml",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).expect("copy examples");
    }

    let out = env
        .command("/bin/bash")
        .arg(dir.join("check"))
        .arg("codex")
        .env("LAZARET", env.lazaret_path())
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run examples/check");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    eprintln!("{stdout}{stderr}");
    if out.status.code() == Some(REGISTRIES_UNREACHABLE) {
        skip(&format!(
            "the package registries are not reachable: {}",
            stderr.trim()
        ));
        return;
    }
    assert!(out.status.success(), "examples/check codex: {}", out.status);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("codex: "))
        .expect("a line for codex");
    let version = line
        .strip_prefix("codex: ok, codex ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("not a success line: {line}"));
    // The whole flow: setup, `image commit`, and the agent profile on the
    // committed image in a new workspace (not the setup Domain).
    assert!(
        line.contains(" commit ") && !line.contains("setup Domain"),
        "the version was not checked on the committed image: {line}"
    );
    assert!(
        version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()),
        "no version in: {line}"
    );
    // The unattended run: the edit, the command and the final answer, each
    // a turn the model server answered (the check looked at the files).
    assert!(
        line.contains("unattended ") && line.contains("edit, command, final answered"),
        "the agent did not work unattended: {line}"
    );

    // What the check made is gone: its scratch directory, its image, its
    // profile's shared paths.
    let left = std::fs::read_dir(&tmp)
        .expect("read TMPDIR")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(left.is_empty(), "examples/check left {left:?} in TMPDIR");
    let _ = env.sh(&format!("rmdir '{}'", tmp.display()));
    let shared = env.data_home.join("lazaret/profiles/lazaret-check-codex");
    assert!(
        !shared.exists(),
        "examples/check left its profile's shared paths: {}",
        shared.display()
    );
    let out = ws.lazaret(&["image", "list"]).output().expect("image list");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("lazaret-check-"),
        "examples/check left its image: {}",
        text(&out.stdout)
    );
}
