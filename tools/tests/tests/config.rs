//! A bad config is refused with file, line and key, and nothing starts.

use lazaret_tests::{processes_mentioning, require_env, text, Workspace};

fn refused(ws: &Workspace, args: &[&str]) -> String {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let out = ws.lazaret(&all).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "stdout {} stderr {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let id = ws.domain_id("default");
    assert!(processes_mentioning(&id).is_empty(), "something started");
    assert!(
        !ws.domain_root("default").join("run").exists(),
        "something started"
    );
    text(&out.stderr)
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let env = require_env!();
    let ws = env.workspace("cfg-unknown");
    let p = ws.write_config("[profiles.default]\nimage = \"lazaret:default\"\nimagee = \"x\"\n");
    let err = refused(&ws, &[]);
    assert!(err.contains(&format!("{}:3", p.display())), "{err}");
    assert!(err.contains("imagee"), "{err}");
}

#[test]
fn wrong_type_names_file_line_and_key() {
    let env = require_env!();
    let ws = env.workspace("cfg-type");
    let p = ws.write_config("\n[profiles.default]\nisolate_ignored = \"yes\"\n");
    let err = refused(&ws, &[]);
    assert!(err.contains(&format!("{}:3", p.display())), "{err}");
    assert!(err.contains("isolate_ignored"), "{err}");
}

#[test]
fn group_writable_config_is_refused() {
    let env = require_env!();
    let ws = env.workspace("cfg-mode");
    let p = ws.write_config("[profiles.default]\n");
    assert!(env
        .sh(&format!("chmod 664 '{}'", p.display()))
        .status
        .success());
    let err = refused(&ws, &[]);
    assert!(
        err.contains(&p.display().to_string()) && err.contains("writable"),
        "{err}"
    );
}

#[test]
fn config_beneath_the_workspace_is_refused() {
    let env = require_env!();
    let ws = env.workspace("cfg-place");
    assert!(ws
        .host_sh("printf '[profiles.default]\\n' > lazaret.toml && chmod 600 lazaret.toml")
        .status
        .success());
    let cfg = ws.path.join("lazaret.toml");
    let err = refused(&ws, &["--config", &cfg.to_string_lossy()]);
    assert!(
        err.contains(&cfg.display().to_string()) && err.contains("workspace"),
        "{err}"
    );
}

#[test]
fn unknown_profile_is_refused() {
    let env = require_env!();
    let ws = env.workspace("cfg-profile");
    let err = refused(&ws, &["--profile", "nope"]);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn storage_root_beneath_the_workspace_is_refused() {
    let env = require_env!();
    let ws = env.workspace("cfg-storage");
    ws.write_config(&format!(
        "[storage]\ndata_root = \"{}/state\"\n",
        ws.path.display()
    ));
    let err = refused(&ws, &[]);
    assert!(
        err.contains("Storage Root") && err.contains("beneath the workspace"),
        "{err}"
    );
    assert!(
        !ws.path.join("state").exists(),
        "the Storage Root was created inside the workspace"
    );
}

#[test]
fn missing_volume_is_refused() {
    let env = require_env!();
    let ws = env.workspace("cfg-volume");
    ws.write_config("[[profiles.default.volumes]]\nhost = \"/nonexistent/lazaret-volume\"\nsandbox = \"/data\"\n");
    let err = refused(&ws, &[]);
    assert!(err.contains("/nonexistent/lazaret-volume"), "{err}");
}

#[test]
fn malformed_limits_name_file_line_and_key() {
    let env = require_env!();
    for (i, (body, key)) in [
        ("memory = \"lots\"", "profiles.default.limits.memory"),
        ("processes = 1", "profiles.default.limits.processes"),
        (
            "ignored_state_size = \"10 GB\"",
            "profiles.default.limits.ignored_state_size",
        ),
        ("anchor_size = 5", "profiles.default.limits.anchor_size"),
    ]
    .into_iter()
    .enumerate()
    {
        let ws = env.workspace(&format!("cfg-limits-{i}"));
        let p = ws.write_config(&format!(
            "[profiles.default]\n\n[profiles.default.limits]\n{body}\n"
        ));
        let err = refused(&ws, &[]);
        assert!(err.contains(&format!("{}:4", p.display())), "{err}");
        assert!(err.contains(key), "{err}");
    }
}
