//! The example profiles' exports, byte for byte (`tests/golden/NAME.yaml`).
//! A change to what is exported shows here as a diff to review; to take
//! it, regenerate: `LAZARET_UPDATE_GOLDEN=1 cargo test -p lazaret-kubernetes --test golden`.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

#[test]
fn example_profiles_match_their_golden_files() {
    let update = std::env::var_os("LAZARET_UPDATE_GOLDEN").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut stale = Vec::new();
    for name in ["codex", "claude-code", "aider"] {
        let config = common::example(name);
        let export = common::export(config.profile(name).unwrap(), name);
        let mut text = export.to_yaml().unwrap();
        text.push_str(
            &export
                .notes
                .iter()
                .map(|n| format!("# note: {n}\n"))
                .collect::<String>(),
        );
        let path = dir.join(format!("{name}.yaml"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let Ok(want) = std::fs::read_to_string(&path) else {
            stale.push(format!("{}: missing", path.display()));
            continue;
        };
        if want != text {
            stale.push(format!(
                "{}: differs from the export (first difference at line {})",
                path.display(),
                want.lines()
                    .zip(text.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(text.lines().count()))
                    + 1
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nreview the change, then: LAZARET_UPDATE_GOLDEN=1 cargo test -p lazaret-kubernetes --test golden",
        stale.join("\n")
    );
}

#[test]
fn the_export_is_deterministic() {
    let config = common::example("claude-code");
    let p = config.profile("claude-code").unwrap();
    let a = common::export(p, "claude-code").to_yaml().unwrap();
    let b = common::export(p, "claude-code").to_yaml().unwrap();
    assert_eq!(a, b);
}
