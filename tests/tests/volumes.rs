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
