//! `lazaret export kubernetes --out DIR` with DIR inside the workspace, as
//! the attacker inside would prepare it: links to the developer's files
//! and a FIFO at the manifests' names, planted from the sandbox before the
//! Domain stops. The host-side export then replaces each name and writes
//! through none of them (and does not hang on the FIFO).

use lazaret_tests::{assert_domain_gone, require_env, text};

#[test]
fn an_export_into_the_workspace_writes_through_no_link_the_sandbox_planted() {
    let env = require_env!();
    let ws = env.workspace("export-links");
    let domain = ws.domain_id("default");
    // A file of the developer's outside the workspace.
    let outside = ws.base.join("outside-file");
    let out = env.sh(&format!("printf 'mine\\n' > '{}'", outside.display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws.run_sh(&format!(
        "mkdir -p k8s && ln -s '{o}' k8s/02-sandboxtemplate-lazaret-default.yaml && \
         mkfifo k8s/01-runtimeclass-lazaret-gvisor.yaml && \
         ln -s '{o}' k8s/.03-networkpolicy-lazaret-default-agent.yaml.lazaret-tmp && echo planted",
        o = outside.display()
    ));
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_domain_gone(&domain);

    let out = ws
        .lazaret(&[
            "export",
            "kubernetes",
            "--profile",
            "default",
            "--out",
            "k8s",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mine = env.sh(&format!("cat '{}'", outside.display()));
    assert_eq!(
        text(&mine.stdout),
        "mine\n",
        "the export wrote through a planted link"
    );
    let listing = ws.host_sh("ls -la k8s && find k8s ! -type f ! -type d");
    assert_eq!(
        text(&ws.host_sh("find k8s ! -type f ! -type d").stdout),
        "",
        "a planted link or FIFO is still there:\n{}",
        text(&listing.stdout)
    );
    let t = ws.host_sh("cat k8s/02-sandboxtemplate-lazaret-default.yaml");
    assert!(
        text(&t.stdout).contains("kind: SandboxTemplate"),
        "{}",
        text(&t.stdout)
    );

    // --out a link the sandbox made: refused, nothing written where it points.
    let out =
        ws.run_sh("mkdir -p /workspace/elsewhere && ln -s elsewhere k8s-link && echo planted");
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_domain_gone(&domain);
    let out = ws
        .lazaret(&[
            "export",
            "kubernetes",
            "--profile",
            "default",
            "--out",
            "k8s-link",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&ws.host_sh("ls -A elsewhere").stdout), "");
}
