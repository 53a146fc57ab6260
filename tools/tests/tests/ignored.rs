//! Ignored Workspace State end to end: `lazaret run` with the
//! lazaret-mount-router between the sandbox and the workspace.
//!
//! The Domain's Ignored Workspace State lives in `<Domain Root>/ignored`.

use lazaret_tests::{eventually, processes_mentioning, require_env, text, Workspace};
use std::time::Duration;

/// Where the Domain keeps its Ignored Workspace State.
fn state_dir(ws: &Workspace<'_>) -> std::path::PathBuf {
    ws.domain_root("default").join("ignored")
}

fn commit_gitignore(ws: &Workspace<'_>, rules: &str) {
    let out = ws.host_sh(&format!(
        "printf '%s' '{rules}' > .gitignore && git add .gitignore && git commit -qm ignore"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn ignored_host_content_is_replaced_by_domain_state_that_persists() {
    let env = require_env!();
    let ws = env.workspace("ign-persist");
    commit_gitignore(&ws, "node_modules/\n.env\n");
    let out = ws.host_sh(
        "mkdir -p node_modules/hostpkg && echo host > node_modules/hostpkg/index.js && echo HOST_SECRET=1 > .env",
    );
    assert!(out.status.success());
    let out = ws.run_sh(
        "test ! -e .env && test -z \"$(ls -A node_modules 2>/dev/null)\" && echo empty; \
         mkdir -p node_modules/dep && echo sandbox > node_modules/dep/index.js && echo SANDBOX=1 > .env",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "empty",
        "host content visible inside"
    );
    let host = ws.host_sh("cat .env; test -e node_modules/dep && echo LEAK; ls node_modules");
    assert_eq!(text(&host.stdout), "HOST_SECRET=1\nhostpkg\n");
    // A restart keeps the Domain's state.
    let out = ws.run_sh("cat .env node_modules/dep/index.js");
    assert_eq!(
        text(&out.stdout),
        "SANDBOX=1\nsandbox\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn non_ignored_edits_are_seen_at_once_on_both_sides() {
    let env = require_env!();
    let ws = env.workspace("ign-shared");
    let mut session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "echo inside > untracked.txt; echo tracked >> README; \
             for i in $(seq 1 100); do [ -e host.txt ] && cat host.txt && exit 0; sleep 0.1; done; exit 1",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(30), || ws
        .path
        .join("untracked.txt")
        .exists()));
    assert!(eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(ws.path.join("README"))
            .unwrap_or_default()
            .contains("tracked")
    }));
    let out = ws.host_sh("echo from-host > host.txt");
    assert!(out.status.success());
    let st = session.wait().unwrap();
    assert!(st.success());
    let mut s = String::new();
    use std::io::Read;
    session
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "from-host\n");
}

/// (path, ignored by the rules below); a trailing `/` is a directory.
const TABLE: &[(&str, bool)] = &[
    ("a.log", true),
    ("keep.log", false),
    ("src/keep.log", false),
    ("src/x.log", true),
    ("build/", true),
    ("src/build/", false),
    ("build/out.bin", true),
    ("node_modules/", true),
    ("src/node_modules/", true),
    ("src/node_modules/p/i.js", true),
    (".env", true),
    ("src/.env", true),
    ("main.o", true),
    ("doc/x/y.tmp", true),
    ("doc/y.tmp", true),
    ("y.tmp", false),
    ("out-a/", true),
    ("out-keep/", false),
    ("out-keep/file", false),
    ("out-a/file", true),
    ("out-c", false),
    ("Temp1", true),
    ("temp2", true),
    ("root-only", true),
    ("src/root-only", false),
    ("a/b/c/z", true),
    ("a/z", true),
    ("sub/foo.c", true),
    ("foo.c", false),
    ("sub/important.c", false),
    ("sub/local/x", true),
    ("sub/deeper/a.log", false),
    ("src/main.rs", false),
];
const RULES: &str = "*.log\n!keep.log\n/build/\nnode_modules/\n.env\n*.o\ndoc/**/*.tmp\nout-*/\n!out-keep/\n[Tt]emp*\n/root-only\na/**/z\n";

#[test]
fn routing_agrees_with_git_check_ignore_and_rules_change_live() {
    let env = require_env!();
    let ws = env.workspace("ign-table");
    commit_gitignore(&ws, RULES);
    let out = ws.host_sh(
        "mkdir -p sub/deeper && printf '*.c\\n!important.c\\nlocal/\\n' > sub/.gitignore && \
         printf '!*.log\\n' > sub/deeper/.gitignore && git add sub && git commit -qm sub",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Create every path inside.
    let mut script = String::from("set -e\n");
    for (p, _) in TABLE {
        if let Some(d) = p.strip_suffix('/') {
            script.push_str(&format!("mkdir -p '{d}'\n"));
        } else {
            script.push_str(&format!("mkdir -p \"$(dirname '{p}')\"; echo in > '{p}'\n"));
        }
    }
    let out = ws.run_sh(&script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Host Git's verdict, and where each path landed.
    let paths: Vec<&str> = TABLE.iter().map(|(p, _)| p.trim_end_matches('/')).collect();
    // Directories keep their trailing slash: they exist only in the
    // Domain's state, so host Git learns they are directories from it.
    let out = ws.host_sh(&format!(
        "git check-ignore --no-index {}",
        TABLE
            .iter()
            .map(|(p, _)| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let ignored: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    for ((p, want), bare) in TABLE.iter().zip(&paths) {
        let git = ignored.iter().any(|l| l == p);
        assert_eq!(git, *want, "table vs git on {p}");
        let on_host = ws.path.join(bare).exists();
        let in_state = state_dir(&ws).join(bare).exists();
        assert_eq!((on_host, in_state), (!want, *want), "{p} routed wrongly");
    }
    // A pattern added inside applies to new files; a negation is honoured.
    let out = ws.run_sh(
        "printf '*.dat\\n!keep.dat\\n' >> .gitignore && echo 1 > a.dat && echo 2 > keep.dat",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ws.path.join("a.dat").exists() && ws.path.join("keep.dat").exists());
    // ... and one added on the host.
    let out = ws.host_sh("printf '*.tmp9\\n' >> .gitignore");
    assert!(out.status.success());
    // The router picks up host-side rule edits within 100 ms (documented);
    // a joining session can be faster than that.
    std::thread::sleep(Duration::from_millis(500));
    let out = ws.run_sh("echo 3 > x.tmp9");
    assert!(out.status.success());
    assert!(!ws.path.join("x.tmp9").exists());
    assert!(state_dir(&ws).join("x.tmp9").exists());
}

#[test]
fn renames_across_are_exdev_and_mv_still_works() {
    let env = require_env!();
    let ws = env.workspace("ign-exdev");
    commit_gitignore(&ws, "build/\n");
    let out = ws.run_sh(
        "mkdir -p build src && echo o > build/out.bin && \
         python3 -c \"import os,errno\ntry:\n os.rename('build/out.bin','src/out.bin')\nexcept OSError as e:\n print(errno.errorcode[e.errno])\" && \
         mv build/out.bin src/out.bin && cat src/out.bin",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "EXDEV\no\n");
    assert_eq!(
        std::fs::read_to_string(ws.path.join("src/out.bin")).unwrap(),
        "o\n"
    );
}

#[test]
fn isolate_ignored_false_shows_host_ignored_files() {
    let env = require_env!();
    let ws = env.workspace("ign-off");
    commit_gitignore(&ws, ".env\n");
    assert!(ws.host_sh("echo HOST=1 > .env").status.success());
    ws.write_config("[profiles.default]\nisolate_ignored = false\n");
    let out = ws.run_sh("cat .env && echo SANDBOX=1 >> .env");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "HOST=1\n");
    assert_eq!(
        std::fs::read_to_string(ws.path.join(".env")).unwrap(),
        "HOST=1\nSANDBOX=1\n"
    );
}

#[test]
fn killing_the_router_gives_errors_never_host_content() {
    let env = require_env!();
    let ws = env.workspace("ign-kill");
    commit_gitignore(&ws, ".env\n");
    assert!(ws.host_sh("echo HOST_SECRET > .env").status.success());
    let domain = ws.domain_id("default");
    let session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "echo sandbox > .env; touch /tmp/started; \
             for i in $(seq 1 300); do cat .env >/dev/null 2>&1 || { cat .env; exit 0; }; sleep 0.1; done; exit 9",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let router = || {
        processes_mentioning(&domain)
            .into_iter()
            .filter(|(_, c)| c.contains("lazaret-mount-router"))
            .map(|(p, _)| p)
            .collect::<Vec<_>>()
    };
    assert!(eventually(Duration::from_secs(30), || !router().is_empty()));
    // Kill it only once the sandbox has written its own `.env`.
    assert!(eventually(Duration::from_secs(60), || {
        std::fs::read_to_string(state_dir(&ws).join(".env")).unwrap_or_default() == "sandbox\n"
    }));
    for pid in router() {
        let _ = env.sh(&format!("kill -9 {pid}"));
    }
    let out = session.wait_with_output().unwrap();
    let so = text(&out.stdout);
    assert!(!so.contains("HOST_SECRET"), "host content shown: {so}");
    assert!(
        text(&out.stderr).contains("not connected")
            || text(&out.stderr).contains("Input/output error")
            || !out.status.success(),
        "stdout {so} stderr {}",
        text(&out.stderr)
    );
    // The Domain stops (its workspace is gone), and the next run recovers.
    lazaret_tests::assert_domain_gone(&domain);
    let out = ws.run_sh("cat .env");
    assert_eq!(text(&out.stdout), "sandbox\n", "{}", text(&out.stderr));
}

#[test]
fn state_inspect_shows_and_reset_discards_ignored_state() {
    let env = require_env!();
    let ws = env.workspace("ign-reset");
    commit_gitignore(&ws, "node_modules/\n");
    let out =
        ws.run_sh("mkdir -p node_modules/pkg && head -c 5000 /dev/zero > node_modules/pkg/blob");
    assert!(out.status.success(), "{}", text(&out.stderr));
    lazaret_tests::assert_domain_gone(&ws.domain_id("default"));
    let i = ws
        .lazaret(&["state", "inspect", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&i.stdout).expect("json");
    assert!(v["ignored_bytes"].as_u64().unwrap_or(0) >= 5000, "{v}");
    let r = ws
        .lazaret(&["state", "reset", "--ignored", "--yes"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}{}", text(&r.stdout), text(&r.stderr));
    assert!(
        text(&r.stdout).contains("Ignored Workspace State"),
        "{}",
        text(&r.stdout)
    );
    let out = ws.run_sh("test -e node_modules/pkg/blob && echo present || echo gone");
    assert_eq!(text(&out.stdout), "gone\n", "{}", text(&out.stderr));
}

#[test]
fn a_directory_listed_before_an_ignored_entry_is_created_shows_it_after() {
    // gVisor's gofer rewinds the descriptor it listed a directory with:
    // the router must list afresh, or new ignored entries stay invisible.
    let env = require_env!();
    let ws = env.workspace("ign-rewind");
    commit_gitignore(&ws, "node_modules/\n");
    let out = ws.run_sh(
        "python3 -c \"import os; os.chdir('/workspace'); a = sorted(os.listdir('.')); \
         os.makedirs('node_modules/x'); open('plain', 'w').close(); b = sorted(os.listdir('.')); \
         print('node_modules' in a, 'node_modules' in b, 'plain' in b)\"",
    );
    assert_eq!(
        text(&out.stdout),
        "False True True\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_sandbox_can_hide_more_but_never_reveal_ignored_host_content() {
    let env = require_env!();
    let ws = env.workspace("ign-reveal");
    commit_gitignore(&ws, ".env\n/sub/token\n");
    let out = ws.host_sh(
        "echo HOST_SECRET=1 > .env && mkdir sub && echo HOST_TOKEN > sub/token && echo visible > sub/file",
    );
    assert!(out.status.success());
    // Every way the sandbox could drop or negate the host's rules.
    let attacks = [
        "printf '!.env\\n!/sub/token\\n' >> .gitignore",
        "printf '' > .gitignore",
        "rm -f .gitignore",
        "printf '!.env\\n' > .gitignore",
        "mv .gitignore x; printf '!.env\\n' > x; mv x .gitignore",
        "printf '!.env\\n' > x; ln -f x .gitignore",
        "python3 -c \"import os; f=open('y','w'); os.rename('y', '.gitignore'); f.write('!.env\\\\n'); f.close()\"",
        "mkdir -p d && printf '!/.env\\n' > .git/info/exclude",
        "mv sub sub2; mv sub2 sub",
    ];
    let leaked = "grep -rh HOST_ /workspace/.env /workspace/sub /workspace/sub2 2>/dev/null; true";
    for a in attacks {
        let out = ws.run_sh(&format!("cd /workspace; {a} 2>/dev/null; {leaked}"));
        assert_eq!(
            text(&out.stdout),
            "",
            "after `{a}` host content is visible: {}",
            text(&out.stderr)
        );
    }
    // And in the next Domain generation, with the sandbox's edits still on
    // disk.
    let out = ws.run_sh("cd /workspace; printf '!.env\\n' > .gitignore; true");
    assert!(
        out.status.success(),
        "{:?} {} {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let out = ws.run_sh(leaked);
    assert_eq!(text(&out.stdout), "", "revealed after a restart");
    // The host content itself was never touched.
    let host = ws.host_sh("cat .env sub/token");
    assert_eq!(text(&host.stdout), "HOST_SECRET=1\nHOST_TOKEN\n");
    // A host-side edit of the rules is the host's word.
    let out = ws.host_sh("printf '/sub/token\\n' > .gitignore");
    assert!(out.status.success());
    // (A name the sandbox looked up keeps its route for the cache time.)
    let out = ws.run_sh(
        "for i in $(seq 100); do cat /workspace/.env 2>/dev/null && exit 0; sleep 0.1; done; exit 1",
    );
    assert_eq!(
        text(&out.stdout),
        "HOST_SECRET=1\n",
        "{}",
        text(&out.stderr)
    );
}
