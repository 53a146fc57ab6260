//! Volumes and the Storage Root end to end: a volume's host path is
//! resolved once with no symbolic link in any component (a link planted by
//! a sandbox through another writable volume included), and a Storage Root
//! or Domain Root that others could write is refused.

use lazaret_tests::{assert_domain_gone, require_env, text, Workspace};

fn volume(profile: &str, host: &str, sandbox: &str, read_only: bool) -> String {
    format!(
        "[[profiles.{profile}.volumes]]\nhost = \"{host}\"\nsandbox = \"{sandbox}\"\nread_only = {read_only}\n"
    )
}

fn run_profile(ws: &Workspace, profile: &str, script: &str) -> std::process::Output {
    ws.lazaret(&["run", "--profile", profile, "--", "sh", "-c", script])
        .output()
        .expect("run lazaret")
}

#[test]
fn a_volume_path_through_a_symlink_is_refused_with_its_name() {
    let env = require_env!();
    let ws = env.workspace("vol-link");
    let b = ws.base.display().to_string();
    let out = env.sh(&format!(
        "mkdir -p '{b}/real/data' && echo inside > '{b}/real/data/f' && ln -s '{b}/real' '{b}/link' && ln -s '{b}/real/data' '{b}/last'"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (host, link) in [
        (format!("{b}/link/data"), format!("{b}/link")),
        (format!("{b}/last"), format!("{b}/last")),
    ] {
        ws.write_config(&volume("default", &host, "/data", true));
        let out = ws.run_sh("cat /data/f; echo ran");
        assert_eq!(
            out.status.code(),
            Some(125),
            "{host}: {}",
            text(&out.stdout)
        );
        assert!(
            !text(&out.stdout).contains("ran"),
            "{host}: the command ran"
        );
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "volume host path {host}: {link} is a symbolic link"
            )),
            "{err}"
        );
    }
    // The real path is mounted.
    ws.write_config(&volume("default", &format!("{b}/real/data"), "/data", true));
    let out = ws.run_sh("cat /data/f");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "inside\n");
}

#[test]
fn a_symlink_planted_through_another_writable_volume_is_never_mounted() {
    let env = require_env!();
    let ws = env.workspace("vol-plant");
    let b = ws.base.display().to_string();
    let out = env.sh(&format!(
        "mkdir -p '{b}/shared/data' '{b}/secret' && echo host-secret-4711 > '{b}/secret/key' && echo data > '{b}/shared/data/f'"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Profile `writer` may write `shared`; profile `reader` mounts
    // `shared/data` read-only.
    ws.write_config(&format!(
        "[profiles.writer]\n{}\n[profiles.reader]\n{}",
        volume("writer", &format!("{b}/shared"), "/shared", false),
        volume("reader", &format!("{b}/shared/data"), "/data", true),
    ));
    let out = run_profile(&ws, "reader", "cat /data/f");
    assert_eq!(text(&out.stdout), "data\n", "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("reader"));

    // From inside the writer's sandbox: swap `data` for a link to a host
    // directory that no profile mounts.
    let out = run_profile(
        &ws,
        "writer",
        &format!("rm -rf /shared/data && ln -s '{b}/secret' /shared/data && ls -l /shared"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("writer"));
    assert!(std::fs::symlink_metadata(format!("{b}/shared/data"))
        .unwrap()
        .file_type()
        .is_symlink());

    // The reader's next start refuses, and shows nothing of the target.
    let out = run_profile(&ws, "reader", "cat /data/key; echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("host-secret-4711"));
    assert!(!text(&out.stdout).contains("ran"));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{b}/shared/data is a symbolic link")),
        "{err}"
    );
    assert_domain_gone(&ws.domain_id("reader"));

    // The link's target is the sandbox's text: the error quotes it escaped.
    let out = run_profile(
        &ws,
        "writer",
        r#"rm -f /shared/data && ln -s "$(printf '/x\033[2J\033]0;pwned\007')" /shared/data"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("writer"));
    let out = run_profile(&ws, "reader", "echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        !err.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal: {err:?}"
    );
    assert!(err.contains("(/x\\x1b[2J\\x1b]0;pwned\\x07)"), "{err}");
}

#[test]
fn a_storage_root_or_domain_root_others_can_write_is_refused() {
    let env = require_env!();
    let ws = env.workspace("vol-root");
    let data = ws.base.join("data");
    let d = data.display().to_string();
    // A Storage Root of its own; a small busybox image keeps its first
    // start short (no `lazaret:default` build there).
    let out = env.sh(&format!(
        "cd '{b}' && cat > mkoci.py <<'LAZARET_MKOCI_EOF'\n{m}\nLAZARET_MKOCI_EOF\npython3 mkoci.py layout bb",
        b = ws.base.display(),
        m = include_str!("mkoci.py")
    ));
    assert!(out.status.success(), "mkoci.py: {}", text(&out.stderr));
    let image = format!(
        "\n[profiles.default]\nimage = \"oci:{}/layout:bb\"\n",
        ws.base.display()
    );
    ws.write_config(&format!("[storage]\ndata_root = \"{d}\"\n{image}"));
    // Group- or world-writable: refused, with the fix.
    let out = env.sh(&format!("mkdir -p '{d}' && chmod 0777 '{d}'"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws.run_sh("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "Storage Root {d} is group- or world-writable (mode 0777): `chmod go-w {d}`"
        )),
        "{err}"
    );
    let out = ws.lazaret(&["state", "list"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "state list accepted it");

    // Fixed: it runs; then a Domain Root made group-writable is refused.
    let out = env.sh(&format!("chmod go-w '{d}'"));
    assert!(out.status.success());
    let out = ws.run_sh("echo ran");
    assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));
    let droot = data.join("domains").join(ws.domain_id("default"));
    let out = env.sh(&format!("chmod 0770 '{}'", droot.display()));
    assert!(out.status.success());
    let out = ws.run_sh("echo ran");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains(&format!(
            "Domain Root {} is group- or world-writable",
            droot.display()
        )),
        "{}",
        text(&out.stderr)
    );
    let out = ws.lazaret(&["state", "inspect"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));

    // Not owned by the user (root made it): refused.
    let other = ws.base.join("data-root-owned");
    std::fs::create_dir(&other).unwrap();
    if env.user.is_some() {
        ws.write_config(&format!(
            "[storage]\ndata_root = \"{}\"\n{image}",
            other.display()
        ));
        let out = ws.run_sh("echo ran");
        assert_eq!(out.status.code(), Some(125));
        assert!(
            text(&out.stderr).contains(&format!(
                "Storage Root {} is owned by uid 0, not by you",
                other.display()
            )),
            "{}",
            text(&out.stderr)
        );
    }
}

/// `lazaret run -- sh -c SCRIPT` with `--config FILE`.
fn run_with_config(ws: &Workspace, config: &std::path::Path, script: &str) -> std::process::Output {
    ws.lazaret(&[
        "--config",
        &config.to_string_lossy(),
        "run",
        "--",
        "sh",
        "-c",
        script,
    ])
    .output()
    .expect("run lazaret")
}

/// Asserts that the run was refused before anything started: status 125,
/// the command did not run, no Domain Root was made, and the error names
/// the config file, the line and the key, then says `what`.
fn assert_refused_at(
    out: &std::process::Output,
    domain_root: &std::path::Path,
    at: &str,
    what: &str,
) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!text(&out.stdout).contains("ran"), "the command ran: {err}");
    assert!(
        !domain_root.exists(),
        "a Domain Root was made: {}",
        domain_root.display()
    );
    assert!(err.contains(at), "not at {at}: {err}");
    assert!(err.contains(what), "no `{what}`: {err}");
}

/// The Domain Root of (`profile`, `workspace`) in the test Storage Root.
fn domain_root_of(
    ws: &Workspace,
    profile: &str,
    workspace: &std::path::Path,
) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let id = lazaret_protocol::DomainIdV1::derive(profile, workspace.as_os_str().as_bytes());
    ws.env
        .data_home
        .join("lazaret/domains")
        .join(id.to_string())
}

/// Issue 26, item 6: a volume over the workspace (or its parent, or inside
/// it), over the Git directory a linked worktree uses, over the Storage
/// Root or over where Lazaret reads its configuration is refused with the
/// file, line and key, and nothing starts. On the code before, each of
/// these started (the parent's volume gave the sandbox the workspace's
/// `.git/config` to write and its ignored files to read), and the last one
/// let the sandbox write the configuration the next `lazaret run` obeys:
/// an auto-approval rule for any host command.
#[test]
fn a_volume_over_the_workspace_or_what_guards_it_is_refused_and_nothing_starts() {
    let env = require_env!();
    let ws = env.workspace("vol-over");
    let b = ws.base.display().to_string();
    // The workspace is `~/src/app`, the developer's projects in `~/src`.
    let out = env.sh(&format!(
        "set -e; mkdir -p '{b}/src/app/docs' '{b}/shared/ro'; cd '{b}/src/app'; git init -q; \
         echo .env > .gitignore; echo secret > .env; git add .gitignore; git commit -qm app"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let app = std::fs::canonicalize(ws.base.join("src/app")).unwrap();
    let w = app.display().to_string();
    let src = format!("{b}/src");
    let app_root = domain_root_of(&ws, "default", &app);
    let key = |i: usize| format!("for key `profiles.default.volumes[{i}].host`");
    for (volumes, line, index, what) in [
        (
            volume("default", &src, "/src", false),
            2,
            0,
            format!("volume host path `{src}` contains the workspace {w}: "),
        ),
        (
            volume("default", &src, "/src", true),
            2,
            0,
            format!("volume host path `{src}` contains the workspace {w}: "),
        ),
        (
            volume("default", &w, "/again", false),
            2,
            0,
            format!("`{w}` is the workspace {w}"),
        ),
        (
            volume("default", &format!("{w}/docs"), "/docs", true),
            2,
            0,
            format!("`{w}/docs` lies inside the workspace {w}"),
        ),
        (
            volume(
                "default",
                &env.data_home.display().to_string(),
                "/data",
                true,
            ),
            2,
            0,
            "contains the Storage Root".to_string(),
        ),
        (
            format!(
                "{}{}",
                volume("default", &format!("{b}/shared"), "/shared", false),
                volume("default", &format!("{b}/shared/ro"), "/ro", true)
            ),
            6,
            1,
            "which is writable: it would be writable there".to_string(),
        ),
    ] {
        let config = ws.write_config(&volumes);
        let config = std::fs::canonicalize(config).unwrap();
        let out = ws
            .lazaret(&["run", "--workspace", &w, "--", "sh", "-c", "echo ran"])
            .output()
            .unwrap();
        assert_refused_at(
            &out,
            &app_root,
            &format!("config {}:{line}: ", config.display()),
            &what,
        );
        assert!(
            text(&out.stderr).contains(&key(index)),
            "{}",
            text(&out.stderr)
        );
    }
    let domain_root = ws.domain_root("default");
    let w = ws.path.display().to_string();

    // The directory the configuration is read from by default, writable
    // in the sandbox while this run reads another file: refused too.
    let other = ws.base.join("other.toml");
    let cfg_home = ws.config_home.display().to_string();
    let out = env.sh(&format!(
        "cat > '{o}' <<'EOF'\n{v}\nEOF\nchmod 600 '{o}'; rm -rf '{cfg_home}/lazaret'",
        o = other.display(),
        v = volume("default", &cfg_home, "/cfg", false)
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run_with_config(
        &ws,
        &other,
        "mkdir -p /cfg/lazaret && printf '[[profiles.default.escalation.auto_approve]]\\nargv = [\"/bin/sh\"]\\ntrailing_args = true\\n' > /cfg/lazaret/config.toml; echo ran",
    );
    assert_refused_at(
        &out,
        &domain_root,
        &format!("config {}:2: ", other.display()),
        "contains the configuration file",
    );
    assert!(
        !ws.config_home.join("lazaret/config.toml").exists(),
        "the sandbox wrote the configuration"
    );

    // A linked worktree: its common Git directory lies outside it.
    let wt = ws.base.join("wt");
    let out = ws.host_sh(&format!("git worktree add -q '{}' -b wt", wt.display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config = std::fs::canonicalize(ws.write_config(&volume(
        "default",
        &format!("{w}/.git"),
        "/common",
        false,
    )))
    .unwrap();
    let wt_root = domain_root_of(&ws, "default", &wt);
    let out = ws
        .lazaret(&[
            "run",
            "--workspace",
            &wt.to_string_lossy(),
            "--",
            "echo",
            "ran",
        ])
        .output()
        .unwrap();
    assert_refused_at(
        &out,
        &wt_root,
        &format!("config {}:2: ", config.display()),
        &format!("is the Git directory {w}/.git"),
    );

    // Beside the workspace: accepted.
    ws.write_config(&volume("default", &format!("{b}/shared"), "/shared", false));
    let out = ws.run_sh("echo ran");
    assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
}

/// The forged configuration of [`git_sentry_covers_every_repository_in_a_writable_volume`]:
/// host Git would create `marker` on its next `git status`.
fn forged_git_config(marker: &std::path::Path) -> String {
    let m = marker.display();
    format!("[core]\\n\\tfsmonitor = touch {m} #\\n\\thooksPath = /tmp\\n[alias]\\n\\tstatus = !touch {m}\\n")
}

/// Issue 26, item 6: inside a writable volume, the sandbox forges a host
/// repository's configuration and hooks, and makes new repositories (in a
/// new directory and in a host directory); after a restart, host Git in
/// each of them runs nothing it wrote, and none of the new ones is a
/// repository on the host. Git inside still works, and its commits reach
/// the host. On the code before, the volume was bound directly and host
/// `git status` ran the forged `core.fsmonitor`.
#[test]
fn git_sentry_covers_every_repository_in_a_writable_volume() {
    let env = require_env!();
    let ws = env.workspace("vol-sentry");
    let vol = ws.base.join("vol");
    let v = vol.display().to_string();
    let marker = ws.base.join("PWNED");
    let out = env.sh(&format!(
        "set -e; mkdir -p '{v}/plain'; git init -q '{v}/repo'; cd '{v}/repo'; echo data > f; git add f; git commit -qm host"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config_before = std::fs::read(vol.join("repo/.git/config")).unwrap();
    let hooks_before = env.sh(&format!("ls -a '{v}/repo/.git/hooks'")).stdout;
    ws.write_config(&volume("default", &v, "/vol", false));
    let cfg = forged_git_config(&marker);
    let out = ws.run_sh(&format!(
        "c='{cfg}'; cd /vol/repo; \
         printf \"$c\" >> .git/config; \
         git config core.fsmonitor 'touch {m}'; \
         printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf \"$c\" > .git/config.worktree; \
         git init -q /vol/new && printf \"$c\" >> /vol/new/.git/config && echo DID new; \
         git init -q /vol/plain && printf \"$c\" >> /vol/plain/.git/config && echo DID plain; \
         git status >/dev/null && echo GIT-OK",
        m = marker.display()
    ));
    let said = text(&out.stdout);
    assert!(
        said.contains("GIT-OK"),
        "git broke inside: {said} {}",
        text(&out.stderr)
    );
    for w in ["new", "plain"] {
        assert!(said.contains(&format!("DID {w}\n")), "{w}: {said}");
    }
    assert_domain_gone(&ws.domain_id("default"));

    // The next generation: what the sandbox made is still its own, and
    // Git inside commits into the host's repository.
    let out = ws.run_sh(
        "cd /vol/repo && test -x .git/hooks/pre-commit && git -C /vol/new rev-parse --git-dir >/dev/null \
         && git -c core.hooksPath=/dev/null -c user.name=agent -c user.email=agent@lazaret.invalid \
            commit -q --allow-empty -m inside && echo STILL",
    );
    assert!(
        text(&out.stdout).contains("STILL"),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    let host = env.sh(&format!(
        "for d in repo new plain; do git -C '{v}/'$d status >/dev/null 2>&1; done; \
         cd '{v}/repo' && git commit -q --allow-empty -m host2 >/dev/null 2>&1; git log --format=%s -2"
    ));
    assert_eq!(
        text(&host.stdout),
        "host2\ninside\n",
        "host git in the volume: {}",
        text(&host.stderr)
    );
    assert!(!marker.exists(), "host git ran something the sandbox wrote");
    assert_eq!(
        std::fs::read(vol.join("repo/.git/config")).unwrap(),
        config_before,
        "the host's .git/config changed"
    );
    assert_eq!(
        env.sh(&format!("ls -a '{v}/repo/.git/hooks'")).stdout,
        hooks_before
    );
    for p in ["new/.git", "plain/.git", "repo/.git/config.worktree"] {
        assert!(
            std::fs::symlink_metadata(vol.join(p)).is_err(),
            "{p} reached the host"
        );
    }
}

/// `git_sentry = false` binds a writable volume directly, as asked, and
/// every start says what that hands over.
#[test]
fn a_writable_volume_bound_directly_is_named_at_every_start() {
    let env = require_env!();
    let ws = env.workspace("vol-direct");
    let vol = ws.base.join("vol");
    let out = env.sh(&format!("mkdir -p '{}'", vol.display()));
    assert!(out.status.success());
    ws.write_config(&format!(
        "{}git_sentry = false\n",
        volume("default", &vol.display().to_string(), "/vol", false)
    ));
    for _ in 0..2 {
        let out = ws.run_sh("git init -q /vol/r && echo made");
        assert_eq!(text(&out.stdout), "made\n", "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("volume /vol (host ")
                && text(&out.stderr).contains(
                    "is bound directly (git_sentry = false): Git Sentry does not cover it"
                ),
            "{}",
            text(&out.stderr)
        );
        assert_domain_gone(&ws.domain_id("default"));
    }
    assert!(
        vol.join("r/.git").is_dir(),
        "bound directly, the repository is the host's"
    );
}
