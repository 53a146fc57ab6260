//! Builds the static `lazaret-escalate` that the coordinator installs in
//! every sandbox, the static `lazaret-port-relay` it installs where the
//! Domain publishes ports and the static `lazaret-sudo` it installs where
//! the profile has a `user`, whatever the image's C library (or none:
//! busybox).
//!
//! A plain `cargo build` links Rust binaries for the GNU target against
//! the host's glibc dynamically, and cargo has no stable way to give one
//! crate `-C target-feature=+crt-static` (as `RUSTFLAGS` it would reach
//! proc-macro crates too, which the GNU target cannot build static). So
//! this script runs cargo once more for those packages, with an explicit
//! `--target` (so proc macros stay host builds) and `crt-static` (glibc's
//! static `libc.a`, from `libc6-dev`), in a target directory of its own
//! under `OUT_DIR`; the coordinator embeds the results
//! (`LAZARET_ESCALATE_STATIC`, `LAZARET_PORT_RELAY_STATIC`,
//! `LAZARET_SUDO_STATIC`). A musl build (`musl.toml`) gets the same,
//! static anyway.

// Build-time code: a build that cannot go on panics with a message, which cargo shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

#[path = "../../lib/confinement/compile.rs"]
mod compile;

fn main() {
    // The coordinator's reviewed seccomp policy (beside src/confinement.rs).
    compile::policies(&["src/lazaret-coordinator.json"]);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("dir"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .expect("the workspace")
        .to_path_buf();
    let target = std::env::var("TARGET").expect("TARGET");
    let profile = match std::env::var("PROFILE").as_deref() {
        Ok("release") => "release",
        _ => "dev",
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for p in [
        "bin/escalate",
        "bin/port-relay",
        "bin/sudo",
        "lib/protocol",
        "lib/confinement",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
    let target_dir = out.join("static-target");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args(["build", "--locked"])
        .args(["--package", "lazaret-escalate", "--bin", "lazaret-escalate"])
        .args([
            "--package",
            "lazaret-port-relay",
            "--bin",
            "lazaret-port-relay",
        ])
        .args(["--package", "lazaret-sudo", "--bin", "lazaret-sudo"])
        .args(["--profile", profile])
        .arg("--target")
        .arg(&target)
        .arg("--target-dir")
        .arg(&target_dir)
        // Our stdout is cargo's channel of directives: progress goes to
        // stderr, as cargo's own does.
        .stdout(std::process::Stdio::from(std::io::stderr()))
        // What the outer cargo set for its own compilations must not leak
        // into this one (clippy's driver, the outer flags and target).
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            ["-Ctarget-feature=+crt-static", "-Cstrip=debuginfo"].join("\u{1f}"),
        );
    let status = cmd
        .status()
        .expect("run cargo for the static lazaret-escalate, lazaret-port-relay and lazaret-sudo");
    assert!(
        status.success(),
        "building the static lazaret-escalate, lazaret-port-relay and lazaret-sudo failed ({status}); the GNU target needs glibc's static libc.a (apt-get install libc6-dev)"
    );
    let dir = if profile == "dev" { "debug" } else { "release" };
    let bins = target_dir.join(&target).join(dir);
    for (var, name) in [
        ("LAZARET_ESCALATE_STATIC", "lazaret-escalate"),
        ("LAZARET_PORT_RELAY_STATIC", "lazaret-port-relay"),
        ("LAZARET_SUDO_STATIC", "lazaret-sudo"),
    ] {
        println!("cargo:rustc-env={var}={}", bins.join(name).display());
    }
}
