//! The Trust Anchor and the authenticated control plane (SR-9), against a
//! real Domain: forged peers on the control socket, a CLI facing a
//! coordinator that is not the published one, and forged or replayed
//! Escalation Results inside.

use lazaret_tests::{eventually, require_env, text, Workspace};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// How the coordinator names a certificate of another CA.
const NOT_OURS: &str = "not issued by this generation's Trust Anchor";

const FORGE: &str = env!("CARGO_BIN_EXE_lazaret-forge-peer");

fn coordinator_log(root: &Path) -> String {
    std::fs::read_to_string(root.join("coordinator.log")).unwrap_or_default()
}

/// Starts a long session in `profile` and waits until its Domain has
/// published its Trust Anchor and answers a genuine peer.
fn hold(ws: &Workspace<'_>, profile: &str) -> Child {
    let child = ws
        .lazaret(&["--profile", profile, "run", "--", "sleep", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let root = ws.domain_root(profile);
    assert!(
        eventually(Duration::from_secs(120), || {
            root.join("run/trust").exists()
                && forge(ws, &root, &["genuine"]).starts_with("accepted")
        }),
        "the Domain never answered a genuine peer: {}",
        coordinator_log(&root)
    );
    child
}

fn forge(ws: &Workspace<'_>, root: &Path, args: &[&str]) -> String {
    let out = ws
        .env
        .command(FORGE)
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lazaret-forge-peer {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The lines the coordinator logged for refused control connections.
fn refusals(root: &Path) -> Vec<String> {
    coordinator_log(root)
        .lines()
        .filter(|l| l.contains("refused a control connection"))
        .map(str::to_string)
        .collect()
}

/// Runs `forge` in `mode` and checks that it was refused, with a new
/// refusal in the log that contains `reason`.
fn refused(ws: &Workspace<'_>, root: &Path, args: &[&str], reason: &str) {
    let before = refusals(root).len();
    let said = forge(ws, root, args);
    assert!(said.starts_with("refused"), "{args:?} was accepted: {said}");
    let mut last = Vec::new();
    assert!(
        eventually(Duration::from_secs(15), || {
            last = refusals(root);
            last.len() > before && last[before..].iter().any(|l| l.contains(reason))
        }),
        "{args:?}: no refusal naming {reason:?} was logged: {last:#?}"
    );
}

fn stop(mut c: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = c.wait();
}

fn credential_file(ws: &Workspace<'_>, name: &str) -> PathBuf {
    ws.base.join(name)
}

#[test]
fn forged_peers_on_the_control_socket_are_refused_with_the_reason_logged() {
    let env = require_env!();
    let ws = env.workspace("trust-peers");
    ws.write_config("[profiles.default]\n\n[profiles.other]\n");
    let root = ws.domain_root("default");
    let other_root = ws.domain_root("other");
    let holder = hold(&ws, "default");

    // A genuine peer, whose credential is kept for the replays below.
    let gen1 = credential_file(&ws, "gen1.cred");
    let said = forge(&ws, &root, &["save", gen1.to_str().unwrap()]);
    assert!(said.starts_with("accepted generation"), "{said}");

    // Its certificate again, on a new connection: another Client Session.
    refused(
        &ws,
        &root,
        &["replay", gen1.to_str().unwrap()],
        "another Client Session",
    );
    // The Agent Sandbox's certificate and key, from this generation's CA.
    refused(&ws, &root, &["sandbox"], "role AgentSandbox");
    // This generation's exact claims, from a CA of the forger's own.
    refused(&ws, &root, &["self-signed"], NOT_OURS);
    // The wrong ALPN, and none.
    refused(
        &ws,
        &root,
        &["alpn", "http/1.1"],
        "did not offer ALPN lazaret-control/1",
    );
    refused(&ws, &root, &["no-alpn"], "did not agree on ALPN");
    // The session protocol without TLS.
    refused(&ws, &root, &["plain"], "plain (non-TLS)");

    // A certificate of another Domain (another profile, same workspace).
    let other_holder = hold(&ws, "other");
    let other = credential_file(&ws, "other.cred");
    let said = forge(&ws, &other_root, &["save", other.to_str().unwrap()]);
    assert!(said.starts_with("accepted"), "{said}");
    refused(&ws, &root, &["replay", other.to_str().unwrap()], NOT_OURS);
    stop(other_holder);

    // A certificate of the previous generation of this Domain.
    stop(holder);
    assert!(eventually(Duration::from_secs(90), || !root
        .join("run/trust")
        .exists()));
    let holder = hold(&ws, "default");
    refused(&ws, &root, &["replay", gen1.to_str().unwrap()], NOT_OURS);

    // After all that the Domain serves genuine sessions.
    let out = ws.run_sh("echo still-here");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "still-here\n");
    stop(holder);
}

#[test]
fn the_cli_sends_nothing_to_a_coordinator_that_is_not_the_published_one() {
    let env = require_env!();
    let ws = env.workspace("trust-pin");
    ws.write_config("[profiles.default]\n\n[profiles.other]\n");
    let root = ws.domain_root("default");
    let holder = hold(&ws, "default");
    let other_holder = hold(&ws, "other");
    // The pin names another Domain's anchor: whoever answers on this
    // socket is not what the CLI may trust.
    let pin = root.join("run/trust");
    let genuine = std::fs::read(&pin).unwrap();
    std::fs::copy(ws.domain_root("other").join("run/trust"), &pin).unwrap();
    let out = ws.run_sh("touch /workspace/should-not-exist");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("could not be authenticated") && err.contains("Trust Anchor"),
        "{err}"
    );
    assert!(!ws.path.join("should-not-exist").exists());
    // A pin of the right Domain but of a coordinator other than the one
    // listening (its TLS CA differs): refused at the handshake.
    let impostor = lazaret_trust::TrustAnchor::new(
        lazaret_trust::new_generation(&ws.domain_id("default"), 1).unwrap(),
        "default",
        "impostor",
    )
    .unwrap();
    std::fs::write(&pin, impostor.published().encode()).unwrap();
    let out = ws.run_sh("touch /workspace/should-not-exist");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("could not be authenticated"),
        "{}",
        text(&out.stderr)
    );
    assert!(!ws.path.join("should-not-exist").exists());
    // The genuine pin again: sessions work.
    std::fs::write(&pin, &genuine).unwrap();
    let out = ws.run_sh("echo ok");
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    stop(other_holder);
    stop(holder);
}

/// The IDs of accepted escalations in `root`'s coordinator.log, in order.
fn accepted(root: &Path) -> Vec<String> {
    coordinator_log(root)
        .lines()
        .filter_map(|l| {
            let rest = l.split("lifecycle: escalation ").nth(1)?;
            let (id, what) = rest.split_once(' ')?;
            what.starts_with("accepted").then(|| id.to_string())
        })
        .collect()
}

#[test]
fn lazaret_escalate_refuses_a_forged_or_replayed_result() {
    let env = require_env!();
    let ws = env.workspace("trust-results");
    ws.write_config(
        "[profiles.default]\n\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/echo\", \"genuine\"]\n\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/sleep\", \"5\"]\n",
    );
    let root = ws.domain_root("default");
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "lazaret-escalate -- /bin/echo genuine; echo rc1=$?; \
             lazaret-escalate -- /bin/sleep 5; echo rc2=$?; \
             lazaret-escalate -- /bin/sleep 5; echo rc3=$?",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let results = root.join("run/control/mailbox/results");
    // The first, genuine result, kept by the coordinator for a while.
    let mut ids = Vec::new();
    assert!(eventually(Duration::from_secs(120), || {
        ids = accepted(&root);
        ids.len() >= 2
    }));
    let genuine = results.join(&ids[0]);
    assert!(eventually(Duration::from_secs(10), || genuine.exists()));
    // While the second request's host command runs, a genuine result of
    // another request (a replay) appears at its result path.
    let plant = |id: &str, from: &str| {
        let out = ws.env.sh(&format!(
            "cp '{from}' '{r}/.{id}.tmp' && mv '{r}/.{id}.tmp' '{r}/{id}'",
            r = results.display()
        ));
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    plant(&ids[1], genuine.to_str().unwrap());
    // And for the third: bytes of the right shape signed by nobody.
    assert!(eventually(Duration::from_secs(30), || {
        ids = accepted(&root);
        ids.len() >= 3
    }));
    let forged = ws.base.join("forged");
    let mut bytes = std::fs::read(&genuine).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&forged, &bytes).unwrap();
    plant(&ids[2], forged.to_str().unwrap());

    let out = session.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stdout.contains("genuine\nrc1=0\n"), "{stdout} / {stderr}");
    assert!(stdout.contains("rc2=125\n"), "{stdout} / {stderr}");
    assert!(stdout.contains("rc3=125\n"), "{stdout} / {stderr}");
    assert!(
        stderr.contains("made for another Escalation Request"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not signed by this Domain's Session Coordinator"),
        "{stderr}"
    );
}
