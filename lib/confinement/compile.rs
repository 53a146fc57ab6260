//! Compiles a binary crate's reviewed seccomp policies to BPF at build
//! time, firecracker's way: a policy that does not compile fails the
//! build, not a start in the field, and no JSON compiler is linked into
//! the confined binaries. Not part of the library: each confined binary's
//! `build.rs` includes this file (`#[path]`) and calls [`policies`], with
//! `seccompiler` (feature `json`) as its build dependency.
//!
//! `<binary>.json` (beside the crate's `src/confinement.rs`) holds
//! seccompiler JSON filters: one named after the binary (its allow-list,
//! installed last) and optionally others (installed first, in name order,
//! e.g. one that makes a syscall fail with `ENOSYS` so the C library falls
//! back to one the allow-list checks). `OUT_DIR/policies.rs`, which the
//! crate includes, holds `POLICIES: &[lazaret_seccomp::Policy]`, one per
//! file named.

// Build-time code: a build that cannot go on panics with a message, which cargo shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Compiles `files` (relative to the crate's manifest directory) into
/// `OUT_DIR/policies.rs`.
pub fn policies(files: &[&str]) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").expect("target arch");
    let target = match arch.as_str() {
        "x86_64" => Some(seccompiler::TargetArch::x86_64),
        "aarch64" => Some(seccompiler::TargetArch::aarch64),
        _ => None,
    };

    let mut gen = String::from(
        "/// This crate's compiled seccomp policies, by binary name.\npub static POLICIES: &[lazaret_seccomp::Policy] = &[\n",
    );
    for rel in files {
        let file = manifest.join(rel);
        println!("cargo:rerun-if-changed={}", file.display());
        let binary = file
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
            .unwrap_or_else(|| {
                panic!(
                    "{}: name a policy file after its binary ([a-z0-9-]+.json)",
                    file.display()
                )
            })
            .to_string();
        let json = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut filters: Vec<(String, Vec<u8>)> = Vec::new();
        // The policies are reviewed for x86_64 (syscall names differ on
        // aarch64: no `open`, `stat`...): there a policy that does not
        // compile leaves the binary without one, and it refuses to start
        // (`ConfineError::NoPolicy`) rather than run unconfined.
        let compiled =
            target.and_then(
                |t| match seccompiler::compile_from_json(json.as_slice(), t) {
                    Ok(m) => Some(m),
                    Err(e) if arch != "x86_64" => {
                        println!(
                            "cargo:warning={}: {e} (no seccomp policy for {binary} on {arch})",
                            file.display()
                        );
                        None
                    }
                    Err(e) => panic!("{}: {e}", file.display()),
                },
            );
        if let Some(map) = compiled {
            if !map.contains_key(&binary) {
                panic!(
                    "{}: no filter named {binary:?} (the binary's allow-list)",
                    file.display()
                );
            }
            let mut names: Vec<&String> = map.keys().collect();
            // Auxiliary filters first, the allow-list last: installing a
            // filter needs syscalls the allow-list need not allow.
            names.sort_by_key(|n| (**n == binary, (*n).clone()));
            for n in names {
                let mut bytes = Vec::new();
                for ins in &map[n] {
                    bytes.extend_from_slice(&ins.code.to_le_bytes());
                    bytes.push(ins.jt);
                    bytes.push(ins.jf);
                    bytes.extend_from_slice(&ins.k.to_le_bytes());
                }
                filters.push((n.clone(), bytes));
            }
        }
        let _ = writeln!(
            gen,
            "    lazaret_seccomp::Policy {{\n        binary: {binary:?},\n        filters: &["
        );
        for (name, bytes) in filters {
            let bpf = out.join(format!("{binary}.{name}.bpf"));
            std::fs::write(&bpf, bytes).unwrap_or_else(|e| panic!("{}: {e}", bpf.display()));
            let _ = writeln!(
                gen,
                "            lazaret_seccomp::Filter {{ name: {name:?}, bpf: include_bytes!({:?}) }},",
                path_str(&bpf)
            );
        }
        gen.push_str("        ],\n    },\n");
    }
    gen.push_str("];\n");
    std::fs::write(out.join("policies.rs"), gen).expect("write policies.rs");
}

fn path_str(p: &Path) -> String {
    p.to_str()
        .unwrap_or_else(|| panic!("{}: the build path must be UTF-8", p.display()))
        .to_string()
}
