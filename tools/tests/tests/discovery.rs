//! Repository discovery (issue 14, item 2): `lazaret run` from anywhere in
//! a repository works on the repository's top level, starts in the matching
//! subdirectory of `/workspace`, and shares the top level's Domain.

use lazaret_tests::{assert_domain_gone, require_env, text};

#[test]
fn a_subdirectory_runs_in_the_repositorys_domain_and_starts_there() {
    let env = require_env!();
    let ws = env.workspace("discover");
    let out =
        ws.host_sh("mkdir -p src/deep && echo x > src/deep/f && git add -A && git commit -qm f");
    assert!(out.status.success(), "{}", text(&out.stderr));

    let deep = ws.path.join("src/deep");
    let out = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "pwd; cat f; git rev-parse --show-toplevel; git status --porcelain | wc -l",
        ])
        .current_dir(&deep)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "/workspace/src/deep\nx\n/workspace\n0\n",
        "{}",
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("note:"),
        "a repository needs no note: {}",
        text(&out.stderr)
    );
    // The top level's Domain, and no other.
    assert!(ws.domain_root("default").join("domain.redb").exists());
    let domains = std::fs::read_dir(env.data_home.join("lazaret/domains"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("meta.json"))
                .map(|m| m.contains(&*ws.path.to_string_lossy()))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(domains, 1, "one Domain for the repository");
    assert_domain_gone(&ws.domain_id("default"));

    // A Git-ignored directory on the host is the sandbox's own inside: it
    // is not there, so the session starts at the top, and says so.
    let out = ws.host_sh("echo 'build/' > .gitignore && mkdir -p build/out && git add .gitignore && git commit -qm ignore");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws
        .lazaret(&["run", "--", "pwd"])
        .current_dir(ws.path.join("build/out"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\n");
    assert!(
        text(&out.stderr)
            .contains("/workspace/build/out is Git-ignored on the host and not in the sandbox"),
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    // A repository the sandbox makes in a subdirectory is the sandbox's
    // own: the host never sees it, so the workspace stays the top level.
    let out = ws.run_sh("cd src/deep && git init -q . && test -d .git && echo made");
    assert_eq!(text(&out.stdout), "made\n", "{}", text(&out.stderr));
    assert!(
        !deep.join(".git").exists(),
        "the sandbox's .git reached the host"
    );
    assert_domain_gone(&ws.domain_id("default"));
    let out = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "pwd; git rev-parse --show-toplevel",
        ])
        .current_dir(&deep)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "/workspace/src/deep\n/workspace/src/deep\n",
        "inside, the sandbox's own repository is found first; on the host, the top level: {}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    // `--workspace` still chooses explicitly: the subdirectory itself.
    let out = ws
        .lazaret(&["run", "--workspace", "src", "--", "sh", "-c", "pwd; ls"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\ndeep\n");
    let sub = lazaret_protocol::DomainIdV1::derive(
        "default",
        format!("{}/src", ws.path.display()).as_bytes(),
    )
    .to_string();
    assert_ne!(sub, ws.domain_id("default"));
    assert_domain_gone(&sub);
}

#[test]
fn a_directory_outside_any_repository_is_the_workspace_with_a_note() {
    let env = require_env!();
    let ws = env.workspace("plain");
    let plain = ws.base.join("plain");
    let out = env.sh(&format!(
        "mkdir -p '{}/d' && echo p > '{}/d/f'",
        plain.display(),
        plain.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws
        .lazaret(&["run", "--", "sh", "-c", "pwd; cat d/f"])
        .current_dir(&plain)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\np\n");
    let err = text(&out.stderr);
    assert!(
        err.contains("is not a Git repository's top level") && err.contains("Git Sentry"),
        "{err}"
    );
    let id = lazaret_protocol::DomainIdV1::derive(
        "default",
        plain.as_os_str().to_string_lossy().as_bytes(),
    )
    .to_string();
    assert_domain_gone(&id);
    // Said once per Domain, not at every run (issue 29).
    let out = ws
        .lazaret(&["run", "--", "true"])
        .current_dir(&plain)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("is not a Git repository's top level"),
        "the note came again: {}",
        text(&out.stderr)
    );
    assert_domain_gone(&id);
}
