//! The developer's environment does not break the sandbox: a `TMPDIR`
//! beneath a directory only its owner may search (a 0700 home, Ubuntu's
//! 0750) is not handed to runsc, whose Sentry runs as another uid.

use lazaret_tests::{require_env, text};

#[test]
fn a_private_tmpdir_does_not_stop_the_sandbox() {
    let env = require_env!();
    let ws = env.workspace("tmpdir");
    let private = ws.base.join("private");
    let tmp = private.join("tmp");
    let out = env.sh(&format!(
        "mkdir -p '{t}' && chmod 700 '{p}'",
        t = tmp.display(),
        p = private.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ws
        .lazaret(&["run", "--", "echo", "started"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "started\n");
}
