//! The table of binaries and their authority in docs/security-model.md is
//! what the built binaries print: it runs `lazaret-authority-table --check`
//! (which runs every binary of `lazaret_seccomp::suite::SUITE` with
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
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security-model.md");
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

/// At every Landlock ABI from 0 to the kernel's (capped with the test-only
/// `LAZARET_TEST_LANDLOCK_ABI`), each binary prints its description
/// unchanged and then exactly what of it this kernel enforces (the same
/// report its own confinement is cut down by); at 0 a confined binary
/// says it refuses; the table is the same at every ABI; a bad cap is an
/// error naming the variable.
#[test]
fn every_binary_reports_what_each_capped_abi_enforces() {
    use lazaret_seccomp::abi::{Available, Kernel, TEST_CAP_ENV};
    use lazaret_seccomp::suite as binaries;
    let dir = target_dir();
    let gen = dir.join("lazaret-authority-table");
    if !gen.is_file() {
        if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() == Ok("1") {
            panic!("LAZARET_TESTS_MUST_RUN=1 but the binaries are not built");
        }
        eprintln!("skipping: the binaries are not built");
        return;
    }
    let kernel = Kernel::detect();
    assert!(kernel.abi() >= 1, "no Landlock on this kernel: {kernel:?}");
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/security-model.md");
    let cases: Vec<(&str, Option<&str>, &str)> = binaries::SUITE
        .iter()
        .map(|b| (*b, None, *b))
        .chain([(
            "lazaret-netpolicy",
            Some("watch"),
            "lazaret-netpolicy-watch",
        )])
        .collect();
    for cap in 0..=kernel.abi() {
        let avail = Available {
            kernel,
            cap: Some(cap),
        };
        for (bin, arg, name) in &cases {
            let out = Command::new(dir.join(bin))
                .arg("--print-confinement")
                .args(arg)
                .env(TEST_CAP_ENV, cap.to_string())
                .output()
                .unwrap();
            let printed = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{bin} at ABI {cap}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let conf = binaries::get(name).unwrap();
            assert!(
                printed.starts_with(&conf.print()),
                "{name} at ABI {cap}:\n{printed}"
            );
            match conf.on_kernel(&avail) {
                Some(report) => {
                    assert!(
                        printed.contains(&report),
                        "{name} at ABI {cap}:\n{printed}\nwant:\n{report}"
                    );
                    if cap == 0 {
                        assert!(report.contains("this binary refuses to run"), "{report}");
                    }
                }
                None => assert!(!printed.contains("landlock on this kernel"), "{printed}"),
            }
        }
        // The brief's example, from the binary itself.
        if (1..4).contains(&cap) {
            let out = Command::new(dir.join("lazaret-netpolicy"))
                .arg("--print-confinement")
                .env(TEST_CAP_ENV, cap.to_string())
                .output()
                .unwrap();
            let want = format!("network connect and bind restriction (TCP): not enforced (kernel Landlock ABI {cap} as capped, needs 4)");
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(&want),
                "{want}"
            );
        }
        let out = Command::new(&gen)
            .arg("--check")
            .arg(&dir)
            .arg(&doc)
            .env(TEST_CAP_ENV, cap.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the table differs at ABI {cap}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(dir.join("lazaret-mailbox"))
        .arg("--print-confinement")
        .env(TEST_CAP_ENV, "six")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LAZARET_TEST_LANDLOCK_ABI=\"six\""));
}
