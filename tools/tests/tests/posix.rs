//! POSIX semantics through the mount router equal the direct mount's.
//!
//! `pjdfstest` (vendored in `tools/tests/vendor/pjdfstest`, built static here) runs
//! inside the real sandbox in three placements at once: a tracked path
//! and a Git-ignored path (both through the router), and a host
//! directory bound directly as a volume. For every test file, no
//! assertion may fail through the router that passes directly:
//! gVisor itself fails some (times, some errnos), and those are the
//! baseline, not the router's. Differences the README documents with
//! their reason are listed in [`EXCEPTIONS`].
//!
//! By default the files where the router used to differ run (hard links,
//! renames, path and name limits); `LAZARET_POSIX=full` runs every file:
//! `sudo LAZARET_POSIX=full cargo test -p lazaret-tests --test posix -- --nocapture`
//! (about an hour on a 2-core machine).
//!
//! A second test checks the router's own former bugs directly and fast.

use lazaret_tests::{require_env, text, Workspace};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files `.ci/run` compares (where the router differed).
const CI_FILES: &[&str] = &[
    "link/00.t",
    "rename/00.t",
    "mkdir/03.t",
    "open/03.t",
    "unlink/03.t",
    "symlink/03.t",
];

/// Test files whose router results may differ from the direct mount's,
/// with the reason (also in the README). None today.
const EXCEPTIONS: &[(&str, &str)] = &[];

/// The suite, in this repository (a clone needs nothing beside it).
fn vendored_pjdfstest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vendor/pjdfstest")
}

/// Builds a static `pjdfstest` into a copy of the suite, once.
fn build_pjdfstest(into: &Path) -> Result<(), String> {
    let src = vendored_pjdfstest();
    if !src.join("pjdfstest.c").exists() {
        return Err(format!("no pjdfstest at {}", src.display()));
    }
    let script = format!(
        "set -e; cp -r '{src}' '{dst}'; chmod -R u+w '{dst}'; cd '{dst}'; \
         autoreconf -ifs >/dev/null 2>&1; ./configure >/dev/null; make pjdfstest LDFLAGS=-static >/dev/null; \
         find . -name .gitignore -delete",
        src = src.display(),
        dst = into.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "cannot build pjdfstest (needs autoconf automake gcc make): {}",
            text(&out.stderr)
        ));
    }
    Ok(())
}

/// Failed assertions per test file, from `pjdfstest-inside.sh` output.
fn parse(out: &str) -> (BTreeMap<String, BTreeSet<u32>>, BTreeSet<String>) {
    let mut fails: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut done = BTreeSet::new();
    for l in out.lines() {
        let mut w = l.split_whitespace();
        match (w.next(), w.next()) {
            (Some("done"), Some(f)) => {
                done.insert(f.to_string());
            }
            (Some(f), Some(n)) => {
                if let Ok(n) = n.parse() {
                    fails.entry(f.to_string()).or_default().insert(n);
                }
            }
            _ => {}
        }
    }
    (fails, done)
}

fn setup(ws: &Workspace<'_>) -> Result<(), String> {
    let tmp = std::env::temp_dir().join(format!("lazaret-pjd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    build_pjdfstest(&tmp)?;
    let inside = Path::new(env!("CARGO_MANIFEST_DIR")).join("posix/pjdfstest-inside.sh");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cp -r '{tmp}' '{ws}/.pjd' && cp '{inside}' '{ws}/.pjd/' && chown -R --reference='{ws}' '{ws}/.pjd' && rm -rf '{tmp}'",
            tmp = tmp.display(),
            ws = ws.path.display(),
            inside = inside.display()
        ))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    let out =
        ws.host_sh("printf 'ign/\\n' > .gitignore && git add .gitignore && git commit -qm ignore");
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    Ok(())
}

#[test]
fn pjdfstest_through_the_router_equals_the_direct_mount() {
    let env = require_env!();
    if std::env::var("LAZARET_TESTS_MUST_RUN").as_deref() != Ok("1")
        && Command::new("autoreconf")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipping: autoconf is not installed (apt-get install autoconf automake)");
        return;
    }
    let ws = env.workspace("posix");
    // The suite sits untracked (not ignored) in the workspace, where the
    // sandbox sees it.
    setup(&ws).expect("set up pjdfstest");
    // The direct placement: a host directory bound as a volume, which no
    // router serves (`git_sentry = false`: a writable volume is otherwise
    // served through a router of its own).
    let direct = ws.base.join("direct");
    let out = ws.env.sh(&format!("mkdir -p '{}'", direct.display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    ws.write_config(&format!(
        "[[profiles.default.volumes]]\nhost = \"{}\"\nsandbox = \"/direct\"\nread_only = false\ngit_sentry = false\n",
        direct.display()
    ));
    let files: Vec<String> = if std::env::var("LAZARET_POSIX").as_deref() == Ok("full") {
        let mut v = Vec::new();
        for d in std::fs::read_dir(ws.path.join(".pjd/tests"))
            .unwrap()
            .flatten()
        {
            let name = d.file_name().to_string_lossy().into_owned();
            if !d.path().is_dir() || name == "chflags" || name == "granular" {
                continue;
            }
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                let f = f.file_name().to_string_lossy().into_owned();
                if f.ends_with(".t") {
                    v.push(format!("{name}/{f}"));
                }
            }
        }
        v.sort();
        v
    } else {
        CI_FILES.iter().map(|s| s.to_string()).collect()
    };
    let placements: [(&str, Vec<&str>, &str); 3] = [
        ("tracked", vec!["run", "--"], "/workspace/run"),
        ("ignored", vec!["run", "--"], "/workspace/ign/run"),
        ("direct", vec!["run", "--"], "/direct/run"),
    ];
    let children: Vec<_> = placements
        .iter()
        .map(|(name, args, dir)| {
            let mut a: Vec<&str> = args.clone();
            a.extend([
                "sh",
                "/workspace/.pjd/pjdfstest-inside.sh",
                "/workspace/.pjd",
                dir,
            ]);
            a.extend(files.iter().map(|s| s.as_str()));
            let child = ws
                .lazaret(&a)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start a session");
            (*name, child)
        })
        .collect();
    let mut results = BTreeMap::new();
    for (name, child) in children {
        let out = child.wait_with_output().expect("session");
        let (fails, done) = parse(&text(&out.stdout));
        assert_eq!(
            done.len(),
            files.len(),
            "{name}: not every file ran: {}",
            text(&out.stderr)
        );
        results.insert(name, fails);
    }
    let direct = &results["direct"];
    let mut differences = Vec::new();
    for routed in ["tracked", "ignored"] {
        for f in &files {
            if EXCEPTIONS.iter().any(|(e, _)| e == f) {
                continue;
            }
            let empty = BTreeSet::new();
            let r = results[routed].get(f).unwrap_or(&empty);
            let d = direct.get(f).unwrap_or(&empty);
            // The router may pass what gVisor's direct mount fails (its
            // own gofer cache, for one), never the reverse.
            let worse: Vec<_> = r.difference(d).collect();
            if !worse.is_empty() {
                differences.push(format!(
                    "{routed} {f}: assertions {worse:?} fail through the router, not directly"
                ));
            }
            let better = d.difference(r).count();
            if better > 0 {
                eprintln!(
                    "{routed} {f}: {better} assertions pass through the router, fail directly"
                );
            }
        }
    }
    let baseline: usize = direct.values().map(|s| s.len()).sum();
    eprintln!(
        "pjdfstest: {} files, {baseline} assertions fail directly (gVisor), {} differences",
        files.len(),
        differences.len()
    );
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn hard_links_reused_names_renames_and_long_paths_behave_as_on_a_disk() {
    let env = require_env!();
    let ws = env.workspace("posix-quick");
    let out = ws.host_sh("printf 'ign/\\n' > .gitignore && git add .gitignore && git commit -qm i");
    assert!(out.status.success());
    for base in ["/workspace/t", "/workspace/ign/t"] {
        let out = ws.run_sh(&format!(
            r#"set -e; mkdir -p {base} && cd {base}
# a directory removed and made again at once
for i in 1 2 3; do rm -rf r; mkdir r; mkdir r/x; done; echo reuse-ok
# hard links: one inode, one link count
touch f; ln f g; set -- $(stat -c '%i %h' f) $(stat -c '%i %h' g)
[ "$1" = "$3" ] && [ "$2" = 2 ] && [ "$4" = 2 ] && echo link-ok
rm g; [ "$(stat -c %h f)" = 1 ] && echo unlink-ok
# renames keep the inode number
i=$(stat -c %i f); mv f h; mkdir -p d/e; mv h d/e/h; mv d d2
[ "$(stat -c %i d2/e/h)" = "$i" ] && echo rename-ok
# a path far longer than PATH_MAX from the workspace root, worked on
# relative to a deep directory
python3 - <<'PY'
import os
for i in range(24):
    os.mkdir("d" * 250)
    os.chdir("d" * 250)
open("z", "w").close()
os.link("z", "y"); os.rename("y", "w"); os.chmod("w", 0o600)
os.mkdir("q"); os.rmdir("q"); os.symlink("w", "s"); os.unlink("s")
assert os.stat("z").st_nlink == 2
print("long-ok")
PY"#
        ));
        let s = text(&out.stdout);
        for w in ["reuse-ok", "link-ok", "unlink-ok", "rename-ok", "long-ok"] {
            assert!(
                s.contains(w),
                "{base}: {w} missing: {s} {}",
                text(&out.stderr)
            );
        }
    }
}
