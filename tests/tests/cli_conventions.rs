//! Command-line conventions users of podman expect (issue 15, item 2).

use lazaret_tests::{assert_domain_gone, require_env, text};

#[test]
fn run_takes_a_command_without_double_dash() {
    let env = require_env!();
    let ws = env.workspace("nodash");
    // Everything from the first non-option on is the command, its own
    // options included; `--` still works.
    let out = ws
        .lazaret(&[
            "run",
            "sh",
            "-c",
            "echo \"$0\" \"$1\"; exit 3",
            "--profile",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "--profile x\n");
    let out = ws
        .lazaret(&["run", "--", "echo", "-n", "y"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "y");
    assert_domain_gone(&ws.domain_id("default"));
}
