//! Compiles the statx LD_PRELOAD shim (`shim/statx-shim.c`) into
//! `$OUT_DIR/statx-shim.so`, which the library embeds.

// Build-time code: a build that cannot go on panics with a message, which cargo shows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn main() {
    let src = "shim/statx-shim.c";
    println!("cargo:rerun-if-changed={src}");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("statx-shim.so");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-nostdlib",
        "-ffreestanding",
        "-fno-stack-protector",
        "-o",
    ])
    .arg(&out)
    .arg(src);
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot run the C compiler {:?} for {src}: {e}; install a C compiler (e.g. `sudo apt-get install gcc`)", compiler.path())
    });
    if !status.success() {
        panic!("compiling {src} failed ({status}); install a working C compiler (e.g. `sudo apt-get install gcc`)");
    }
}
