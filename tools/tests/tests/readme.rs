//! Every example in the README runs (issue 29, item 6).
//!
//! Each TOML block of README.md and docs/configuration.md is written as a
//! configuration, and `lazaret doctor` must find it valid. Each line of a
//! `sh` block that starts with `lazaret` runs, in the order written, as
//! the test user in a demo workspace (with a Makefile and a `src`
//! directory, as the examples assume), standard input closed: it must not
//! be refused by the parser or fail as Lazaret (125), and a command run in
//! the sandbox must succeed. A command that asks before it removes
//! anything is refused without a terminal (2): that proves it was
//! understood, and nothing is removed. Blocks run elsewhere say so in an
//! HTML comment just before them (`<!-- tested by ... -->`): the set-up
//! commands (`.ci/run` itself), installation (`cli_conventions.rs`) and
//! the agent quick start (`examples.rs`).

use lazaret_tests::{assert_domain_gone, require_env, text};
use std::path::Path;

/// A fenced block: its info string, its lines, and whether a `tested by`
/// comment precedes it.
struct Block {
    info: String,
    lines: Vec<String>,
    elsewhere: bool,
    file: &'static str,
    line: usize,
}

fn blocks(file: &'static str) -> Vec<Block> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(file);
    let Ok(md) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    let mut last_text = String::new();
    for (n, l) in md.lines().enumerate() {
        let trimmed = l.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match current.take() {
                Some(b) => out.push(b),
                None => {
                    current = Some(Block {
                        info: info.trim().to_string(),
                        lines: Vec::new(),
                        elsewhere: last_text.starts_with("<!-- tested by"),
                        file,
                        line: n + 1,
                    })
                }
            }
            continue;
        }
        match &mut current {
            Some(b) => b.lines.push(l.to_string()),
            None if !trimmed.is_empty() => last_text = trimmed.to_string(),
            None => {}
        }
    }
    out
}

/// The command of a `sh` line: what precedes its comment (`  # ...`).
fn command_of(line: &str) -> Option<String> {
    let l = line.trim();
    if !l.starts_with("lazaret ") && l != "lazaret" {
        return None;
    }
    let cmd = match l.find("  #").or_else(|| l.find(" # ")) {
        Some(i) => &l[..i],
        None => l,
    };
    Some(cmd.trim().to_string())
}

#[test]
fn every_configuration_example_is_valid() {
    let env = require_env!();
    let ws = env.workspace("readme-config");
    let mut checked = 0;
    for b in ["README.md", "docs/configuration.md"]
        .into_iter()
        .flat_map(blocks)
        .filter(|b| b.info == "toml" && !b.elsewhere)
    {
        ws.write_config(&b.lines.join("\n"));
        let out = ws.lazaret(&["doctor", "--json"]).output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", text(&out.stderr)));
        let check = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "configuration")
            .cloned()
            .unwrap();
        assert_eq!(
            check["status"], "ok",
            "{}:{}: the example does not load: {check}",
            b.file, b.line
        );
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} TOML examples found");
}

#[test]
fn every_command_example_runs() {
    let env = require_env!();
    let ws = env.workspace("readme-commands");
    let out = ws.host_sh(
        "printf 'test:\\n\\t@echo tests pass\\n' > Makefile && mkdir -p src && \
         printf 'test:\\n\\t@echo src tests pass\\n' > src/Makefile && \
         git add -A && git commit -qm examples",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut ran = 0;
    for b in blocks("README.md")
        .into_iter()
        .filter(|b| b.info == "sh" && !b.elsewhere)
    {
        for (i, l) in b.lines.iter().enumerate() {
            let Some(cmd) = command_of(l) else { continue };
            let out = env
                .command("/bin/sh")
                .arg("-c")
                .arg(&cmd)
                .current_dir(&ws.path)
                .env("XDG_CONFIG_HOME", &ws.config_home)
                .env("PATH", format!("{}:/usr/bin:/bin", env.bin.display()))
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let code = out.status.code();
            let at = format!("README.md:{}: `{cmd}`", b.line + 1 + i);
            let err = text(&out.stderr);
            assert!(
                matches!(code, Some(0..=2)),
                "{at} exited {code:?}: {err}{}",
                text(&out.stdout)
            );
            if cmd.starts_with("lazaret run") {
                assert_eq!(code, Some(0), "{at}: {err}");
            }
            if code == Some(2) {
                assert!(
                    err.contains("--yes")
                        || err.contains("not confirmed")
                        || err.contains("refused"),
                    "{at} exited 2 for another reason: {err}"
                );
            }
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} command examples found");
    let _ = ws.lazaret(&["stop"]).output();
    // What the examples made: the committed image (refused without --yes
    // above).
    let _ = ws
        .lazaret(&["image", "rm", "--yes", "local:my-tools"])
        .output();
    assert_domain_gone(&ws.domain_id("default"));
}
