//! The targets: each feeds bytes to one decoder as the product does.

use lazaret_protocol::{escalation, mailbox, netreport, plan, session, supervisor};
use std::io::Cursor;

/// A private scratch directory, or nothing to do.
fn scratch() -> Option<tempfile::TempDir> {
    tempfile::tempdir().ok()
}

/// The configuration file (TOML, schema, validation), read from a file
/// of the developer's own with the usual checks.
pub fn config(bytes: &[u8]) {
    let Some(dir) = scratch() else { return };
    let path = dir.path().join("config.toml");
    if std::fs::write(&path, bytes).is_err() {
        return;
    }
    let env = lazaret_config::EnvVars::default();
    // The owner is whoever runs the fuzzer.
    let uid = std::fs::metadata(&path)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0);
    if let Ok(loaded) = lazaret_config::load(Some(&path), &env, uid) {
        for name in loaded.config.profiles.keys() {
            let _ = loaded.config.profile(name);
        }
    }
}

/// An Escalation Mailbox entry as the reader takes it: signature, MAC and
/// body, verified with a key the bytes do not know.
pub fn escalation_record(bytes: &[u8]) {
    let key = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new([7; 32])).pk;
    let _ = escalation::open(bytes, &key);
}

/// The body of an entry, as if its signature held (a signing key can
/// leak: the decoder must stand on its own).
pub fn escalation_body(bytes: &[u8]) {
    if let Ok(b) = postcard::from_bytes::<escalation::Body>(bytes) {
        let _ = postcard::to_stdvec(&b);
    }
}

/// The sandbox plan, as the supervisor reads it from its memfd.
pub fn sandbox_plan(bytes: &[u8]) {
    let _ = postcard::from_bytes::<plan::SandboxPlan>(bytes);
}

/// The coordinator's input, as it reads it from its memfd.
pub fn coordinator_input(bytes: &[u8]) {
    let _ = postcard::from_bytes::<plan::CoordinatorInput>(bytes);
}

/// Session frames in both directions, as read from the socket.
pub fn session_frames(bytes: &[u8]) {
    let mut c = Cursor::new(bytes);
    if lazaret_protocol::frame::read_frame::<_, session::Hello>(&mut c).is_ok() {
        while lazaret_protocol::frame::read_frame::<_, session::ClientMsg>(&mut c).is_ok() {}
    }
    let mut c = Cursor::new(bytes);
    while lazaret_protocol::frame::read_frame::<_, session::ServerMsg>(&mut c).is_ok() {}
}

/// Records on the coordinator-supervisor channel.
pub fn supervisor_channel(bytes: &[u8]) {
    let _ = postcard::from_bytes::<supervisor::ToSupervisor>(bytes);
    let _ = postcard::from_bytes::<supervisor::FromSupervisor>(bytes);
}

/// Records between the coordinator and the mailbox reader.
pub fn mailbox_channel(bytes: &[u8]) {
    let _ = postcard::from_bytes::<mailbox::ToReader>(bytes);
    let _ = postcard::from_bytes::<mailbox::FromReader>(bytes);
}

/// The network helper's report (JSON).
pub fn netreport(bytes: &[u8]) {
    let _ = serde_json::from_slice::<netreport::NetReport>(bytes);
}

/// An image layer (tar), through the checked unpacker, into scratch.
pub fn oci_layer(bytes: &[u8]) {
    let Some(dir) = scratch() else { return };
    lazaret_image::fuzzing::unpack_layer(bytes, dir.path());
}

/// A `.gitignore` the sandbox wrote, through the router's rules.
pub fn ignore_rules(bytes: &[u8]) {
    use lazaret_mount_router::rules::{Rules, Source};
    let Some(dir) = scratch() else { return };
    if std::fs::write(dir.path().join(".gitignore"), bytes).is_err() {
        return;
    }
    let Ok(host) = std::fs::File::open(dir.path()) else {
        return;
    };
    let rules = Rules::new(
        host.into(),
        Some(Source::Workspace(b".git/info/exclude".to_vec())),
        None,
        bytes.first().is_some_and(|b| b & 1 == 1),
        lazaret_mount_router::baseline::Baseline::in_memory(),
    );
    for p in [
        &b"a"[..],
        b"build",
        b"x/y.o",
        b"deep/a/b/c",
        b".git",
        b"\xff\xfe",
    ] {
        let _ = rules.is_ignored(p, false);
        let _ = rules.is_ignored_both(p);
    }
}

/// An image reference as a profile's `image` gives it.
pub fn image_reference(bytes: &[u8]) {
    if let Ok(s) = std::str::from_utf8(bytes) {
        lazaret_image::fuzzing::reference(s);
    }
}

/// The generation every trust seed and target names.
pub fn fuzz_generation() -> lazaret_protocol::trust::GenerationId {
    lazaret_protocol::trust::GenerationId {
        domain_id: "0123456789abcdef0123456789abcdef".into(),
        number: 1,
        nonce: [5; 16],
    }
}

/// An Escalation Result as `lazaret-escalate` reads it from the result
/// path (which a root process inside can shadow), then its body as if the
/// signature held.
pub fn escalation_result(bytes: &[u8]) {
    use lazaret_protocol::trust::result;
    let key = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new([8; 32])).pk;
    let g = fuzz_generation();
    let _ = result::open(
        bytes,
        &key,
        &result::Expect {
            generation: &g,
            sandbox_id: "lazaret-0123456789abcdef",
            session_id: "0123456789abcdef0123456789abcdef",
            request_id: &[9; 16],
        },
    );
    if bytes.len() > 64 {
        let _ = postcard::from_bytes::<result::SignedBody>(&bytes[64..]);
    }
}

/// The published Trust Anchor, as `lazaret-escalate` reads it from
/// `/.lazaret/trust` and the CLI from the run directory.
pub fn trust_anchor(bytes: &[u8]) {
    use lazaret_protocol::trust::manifest::Published;
    if let Ok(p) = Published::decode(bytes) {
        let _ = p.verify("0123456789abcdef0123456789abcdef");
        let _ = p.domain_id();
    }
}

/// A control connection's first record, as the coordinator reads it
/// before TLS.
pub fn registration(bytes: &[u8]) {
    let _ = postcard::take_from_bytes::<lazaret_protocol::session::Register>(bytes);
    let _ = postcard::from_bytes::<lazaret_protocol::session::Registered>(bytes);
}

/// The claims of a peer's certificate (read after the chain verified).
pub fn certificate_claims(bytes: &[u8]) {
    let _ = lazaret_trust::certificate::claims_of(bytes);
}

/// The allow-list the DNS filter target judges against.
pub fn fuzz_allow_hosts() -> lazaret_protocol::netpolicy::hosts::AllowHosts {
    lazaret_protocol::netpolicy::hosts::AllowHosts::parse(&[
        "github.com",
        "*.githubusercontent.com",
    ])
    .expect("fuzz allow-list")
}

/// A query from the sandbox and an upstream answer, as the filtering
/// resolver of `allow_hosts` will judge them.
pub fn dns_filter(bytes: &[u8]) {
    let allow = fuzz_allow_hosts();
    let _ = lazaret_protocol::netpolicy::judge::judge_query(&allow, bytes);
    let _ = lazaret_protocol::netpolicy::judge::judge_answer(&allow, "github.com", bytes);
}

/// An index the sandbox's Git puts in place, as the mount router
/// sanitizes it for the host (alone, and against itself as the host's).
pub fn git_index(bytes: &[u8]) {
    let _ = lazaret_mount_router::index::sanitize(bytes, None);
    let _ = lazaret_mount_router::index::sanitize(bytes, Some(bytes));
}

/// Lines of the changes journal (the sandbox chose the names in them).
pub fn changes_journal(bytes: &[u8]) {
    for line in String::from_utf8_lossy(bytes).lines() {
        let _ = lazaret_protocol::changes::parse_line(line);
    }
}
