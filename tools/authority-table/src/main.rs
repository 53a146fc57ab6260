//! `lazaret-authority-table [--check] BIN_DIR README`: runs every binary of
//! the suite ([`lazaret_seccomp::suite::SUITE`]) from BIN_DIR with
//! `--print-confinement` and writes the generated authority table into
//! README between its markers; with `--check`, changes nothing and exits 1
//! with both versions of the table when README differs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.first().is_some_and(|a| a == "--check");
    if check {
        args.remove(0);
    }
    let [bin_dir, readme] = args.as_slice() else {
        eprintln!("usage: lazaret-authority-table [--check] BIN_DIR README");
        std::process::exit(2);
    };
    match run(Path::new(bin_dir), &PathBuf::from(readme), check) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("lazaret-authority-table: {e}");
            std::process::exit(2);
        }
    }
}

fn run(bin_dir: &Path, readme: &Path, check: bool) -> Result<bool, String> {
    let mut printed = Vec::new();
    for b in lazaret_seccomp::suite::SUITE {
        let p = bin_dir.join(b);
        let out = Command::new(&p)
            .arg("--print-confinement")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", p.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --print-confinement failed ({}): {}",
                p.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let text = String::from_utf8(out.stdout)
            .map_err(|_| format!("{} printed non-UTF-8", p.display()))?;
        printed.push((*b, text));
    }
    let table = lazaret_seccomp::table::markdown(&printed);
    let old = std::fs::read_to_string(readme)
        .map_err(|e| format!("cannot read {}: {e}", readme.display()))?;
    let new = lazaret_seccomp::table::splice(&old, &table).map_err(|e| e.to_string())?;
    if new == old {
        return Ok(true);
    }
    if check {
        eprintln!(
            "{} is out of date: run scripts/authority-table.\n--- README\n{}\n+++ generated\n{}",
            readme.display(),
            section(&old),
            section(&new)
        );
        return Ok(false);
    }
    std::fs::write(readme, new).map_err(|e| format!("cannot write {}: {e}", readme.display()))?;
    eprintln!("updated {}", readme.display());
    Ok(true)
}

fn section(s: &str) -> &str {
    let b = s.find(lazaret_seccomp::table::BEGIN).unwrap_or(0);
    let e = s
        .find(lazaret_seccomp::table::END)
        .map(|e| e + lazaret_seccomp::table::END.len())
        .unwrap_or(s.len());
    &s[b..e.max(b)]
}
