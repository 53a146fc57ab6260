//! The table of binaries and their authority in docs/security-model.md is
//! what the built binaries print: it runs `lazaret-authority-table --check`
//! (which runs every binary of `lazaret_seccomp::binaries::SUITE` with
//! `--print-confinement`) against that file, and fails with both versions
//! of the table when they differ. Regenerate with `scripts/authority-table`.
//!
//! Needs the built binaries (`cargo build --workspace --bins`); without
//! them it prints `skipping:` (a failure under `LAZARET_TESTS_MUST_RUN=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .expect("the target directory")
}

#[test]
fn security_model_table_matches_the_binaries() {
    let dir = target_dir();
    let gen = dir.join("lazaret-authority-table");
    if !gen.is_file() {
        let reason = format!(
            "{} is not built: run `cargo build --workspace --bins` first",
            gen.display()
        );
        if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
            panic!("LAZARET_TESTS_MUST_RUN=1 but the test would skip: {reason}");
        }
        eprintln!("skipping: {reason}");
        return;
    }
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/security-model.md");
    let out = Command::new(&gen)
        .arg("--check")
        .arg(&dir)
        .arg(&doc)
        .output()
        .expect("run lazaret-authority-table");
    assert!(
        out.status.success(),
        "the authority table in docs/security-model.md differs from what the binaries print (run scripts/authority-table):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
