//! Command-line conventions users of podman expect (issue 15, item 2).

use lazaret_tests::{assert_domain_gone, require_env, text};
use std::process::Output;

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

/// `lazaret ARGS` in `dir` (not the workspace), as the test user.
fn lazaret_in(ws: &lazaret_tests::Workspace, dir: &std::path::Path, args: &[&str]) -> Output {
    ws.lazaret(args).current_dir(dir).output().unwrap()
}

/// Asserts a refusal with Lazaret's own exit code and a message containing
/// `needle`.
fn assert_refused_125(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(needle), "{}", text(&out.stderr));
}

#[test]
fn global_options_go_before_or_after_the_subcommand() {
    let env = require_env!();
    let ws = env.workspace("globals");
    ws.write_config("[profiles.agent]\n");
    // A config of its own, named only by --config: the default location
    // has an empty file that does not define `agent` any more.
    let other = ws.base.join("other.toml");
    let out = env.sh(&format!(
        "cp '{cfg}' '{other}' && chmod 600 '{other}' && : > '{cfg}'",
        cfg = ws.config_home.join("lazaret/config.toml").display(),
        other = other.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let other = other.to_str().unwrap();
    let wsp = ws.path.to_str().unwrap();
    // Before the subcommand, from outside the workspace.
    let out = lazaret_in(
        &ws,
        &ws.base,
        &[
            "--config",
            other,
            "--profile",
            "agent",
            "--workspace",
            wsp,
            "run",
            "--",
            "pwd",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\n");
    assert!(ws.domain_root("agent").is_dir(), "not the agent Domain");
    assert_domain_gone(&ws.domain_id("agent"));
    // After it, and mixed.
    let out = lazaret_in(
        &ws,
        &ws.base,
        &[
            "--config",
            other,
            "run",
            "--profile",
            "agent",
            "--workspace",
            wsp,
            "true",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !ws.domain_root("default").exists(),
        "the default Domain started"
    );
    assert_domain_gone(&ws.domain_id("agent"));
    // The other Domain commands take them too.
    let out = lazaret_in(
        &ws,
        &ws.base,
        &[
            "--config",
            other,
            "--profile",
            "agent",
            "--workspace",
            wsp,
            "state",
            "inspect",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["domain_id"], ws.domain_id("agent"), "{v}");
    // Without --config the profile is unknown: the flag was used above.
    let out = lazaret_in(
        &ws,
        &ws.base,
        &["--profile", "agent", "--workspace", wsp, "net", "show"],
    );
    assert_refused_125(&out, "agent");
    // A command that does not use an option refuses it by name.
    assert_refused_125(
        &ws.lazaret(&["--profile", "agent", "df"]).output().unwrap(),
        "does not take --profile",
    );
    assert_refused_125(
        &ws.lazaret(&["doctor", "--workspace", wsp])
            .output()
            .unwrap(),
        "does not take --workspace",
    );
    assert_refused_125(
        &ws.lazaret(&["--config", other, "completions", "bash"])
            .output()
            .unwrap(),
        "does not take --config",
    );
    assert_refused_125(
        &ws.lazaret(&["--profile", "agent", "image", "list"])
            .output()
            .unwrap(),
        "does not take --profile",
    );
    let id = ws.domain_id("agent");
    assert_refused_125(
        &ws.lazaret(&["--profile", "agent", "state", "verify", "--domain", &id])
            .output()
            .unwrap(),
        "--domain names the Domain on its own",
    );
}

#[test]
fn workdir_chooses_where_the_session_starts() {
    let env = require_env!();
    let ws = env.workspace("workdir");
    let out = ws.host_sh("mkdir -p sub/deeper && echo x > sub/deeper/f");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (w, expect) in [
        ("sub", "/workspace/sub\n"),
        ("/workspace/sub/deeper", "/workspace/sub/deeper\n"),
        ("./sub/../sub/deeper/..", "/workspace/sub\n"),
        ("/workspace", "/workspace\n"),
    ] {
        let out = ws.lazaret(&["run", "-w", w, "pwd"]).output().unwrap();
        assert!(out.status.success(), "{w}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expect, "-w {w}");
    }
    // `-w` wins over the directory `lazaret` runs in; relative to
    // /workspace, not to it.
    let out = lazaret_in(
        &ws,
        &ws.path.join("sub/deeper"),
        &["run", "--workdir", "sub", "pwd"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace/sub\n");
    // A directory named with -w that is not there inside: an error (125),
    // and the command never runs.
    let out = ws
        .lazaret(&["run", "-w", "missing", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("-w /workspace/missing: no such directory in the sandbox"),
        "{}",
        text(&out.stderr)
    );
    // The directory `lazaret` runs in, when it is not there inside: the
    // session starts in /workspace with a note, which blames Git-ignored
    // paths only when the host's rules ignore that directory.
    let out = ws.host_sh("echo 'build/' > .gitignore && mkdir -p build/out");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A host-side edit of a rules file applies within the router's cache
    // time (docs/how-it-works.md: rules re-checked after 100 ms, names
    // cached for 1 s), and the Domain of the runs above may still be up:
    // a session joining it within 100 ms of its last rules check would
    // still route `build` by the rules as they were.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let out = lazaret_in(&ws, &ws.path.join("build/out"), &["run", "pwd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "/workspace\n");
    let err = text(&out.stderr);
    assert!(
        err.contains("/workspace/build/out is Git-ignored on the host"),
        "{err}"
    );
    // Options `run` does not know, before the command: errors naming the
    // option, never the command (issue 29).
    for (args, opt) in [
        (&["run", "--rm", "true"][..], "--rm"),
        (&["run", "-it", "true"][..], "-i"),
        (&["run", "--bogus", "true"][..], "--bogus"),
    ] {
        let out = ws.lazaret(args).output().unwrap();
        assert_refused_125(&out, opt);
        assert!(
            text(&out.stderr).contains("-- "),
            "the error says to put -- before a command starting with -: {}",
            text(&out.stderr)
        );
    }
    // Outside /workspace: refused before anything starts.
    for w in ["/tmp", "..", "/workspace/../etc"] {
        let out = ws.lazaret(&["run", "-w", w, "pwd"]).output().unwrap();
        assert_refused_125(&out, "--workdir");
        assert!(out.stdout.is_empty());
    }
    assert_domain_gone(&ws.domain_id("default"));
}

/// The check named `name` of a `doctor --json` document.
fn doctor_check(doc: &serde_json::Value, name: &str) -> serde_json::Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name}: {doc}"))
}

/// Parses stdout as one JSON document.
fn json(out: &Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

#[test]
fn data_commands_print_json_and_human_times() {
    let env = require_env!();
    let ws = env.workspace("json");
    // One record for `escalations`: a mailbox entry the coordinator
    // refuses (and removes).
    let out = ws.run_sh(
        r#"e=/.lazaret/mailbox/requests/junk
           echo junk > "$e"
           i=0; while [ -e "$e" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
           test ! -e "$e""#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));
    let id = ws.domain_id("default");
    let ok = |args: &[&str]| {
        let out = ws.lazaret(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        json(&out, &format!("{args:?}"))
    };
    let list = ok(&["state", "list", "--json"]);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|d| d["domain_id"] == id),
        "{list}"
    );
    assert_eq!(ok(&["state", "inspect", "--json"])["domain_id"], id);
    let records = ok(&["escalations", "--json"]);
    let refused = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "refused")
        .unwrap_or_else(|| panic!("{records}"));
    assert!(refused["time_unix_ms"].is_u64(), "{refused}");
    assert!(ok(&["image", "list", "--json"]).is_array());
    let net = ok(&["net", "show", "--json"]);
    assert_eq!(net["domain_id"], id, "{net}");
    // No allow_hosts here: no filtering resolver, an empty log.
    assert_eq!(ok(&["net", "log", "--json"]), serde_json::json!([]));
    // doctor: every check with its status and fix; its exit code as the
    // document says.
    let out = ws.lazaret(&["doctor", "--json"]).output().unwrap();
    let doc = json(&out, "doctor --json");
    assert_eq!(
        out.status.code(),
        doc["exit_code"].as_i64().map(|c| c as i32),
        "{doc}"
    );
    let checks = doc["checks"].as_array().unwrap();
    assert!(checks.len() > 10, "{doc}");
    for c in checks {
        assert!(
            ["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
        assert!(c["check"].is_string() && c["detail"].is_string(), "{c}");
        if c["status"] == "ok" {
            assert!(c["fix"].is_null(), "{c}");
        }
    }
    // Text output: times for people, not epoch seconds.
    let out = ws.lazaret(&["escalations"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let line = line
        .lines()
        .find(|l| l.contains("refused mailbox entry"))
        .unwrap_or_else(|| panic!("{line}"));
    // `2026-12-01 09:30:12 UTC (3 s ago)  refused mailbox entry ...`
    assert!(
        line.starts_with("20") && line.contains(" ago)  refused"),
        "{line}"
    );
    let out = ws.lazaret(&["net", "show"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(!shown.contains("since the epoch"), "{shown}");
    if net["evidence"].is_object() {
        assert!(shown.contains(" ago)"), "{shown}");
    }
}

#[test]
fn completions_and_man_pages_come_from_the_parser() {
    let env = require_env!();
    let ws = env.workspace("completions");
    for shell in ["bash", "zsh", "fish"] {
        let out = ws.lazaret(&["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        // Every subcommand and the shared options are offered.
        for word in ["run", "state", "doctor", "workdir", "profile"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let out = ws.lazaret(&["completions", "bash"]).output().unwrap();
    let check = env.sh(&format!("bash -n <<'EOF'\n{}\nEOF", text(&out.stdout)));
    assert!(check.status.success(), "bash -n: {}", text(&check.stderr));
    assert_refused_125(
        &ws.lazaret(&["completions", "tcsh"]).output().unwrap(),
        "tcsh",
    );

    let dir = ws.base.join("man");
    let out = ws
        .lazaret(&["man", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "lazaret.1",
        "lazaret-run.1",
        "lazaret-state-reset.1",
        "lazaret-doctor.1",
    ] {
        let body =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(body.contains(".TH"), "{page}");
    }
    // Every page ends with examples and the exit code table.
    let mut pages = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let body = std::fs::read_to_string(&p).unwrap();
        let command = p.file_stem().unwrap().to_str().unwrap().replace('-', " ");
        let ex = body.find(".SH EXAMPLES").unwrap_or_else(|| panic!("{p:?}"));
        let codes = body
            .find(".SH \"EXIT STATUS\"")
            .unwrap_or_else(|| panic!("{p:?}"));
        assert!(ex < codes, "{p:?}");
        assert!(
            body[ex..codes].contains(&format!("\\fB{command}")),
            "{p:?}: {}",
            &body[ex..]
        );
        for code in [
            "\\fB0\\fR",
            "\\fB1\\fR",
            "\\fB2\\fR",
            "\\fB125\\fR",
            "126, 127, 128+N",
        ] {
            assert!(body[codes..].contains(code), "{p:?}: {code}");
        }
        pages += 1;
    }
    assert!(pages > 20, "{pages} pages");
    let stop = std::fs::read_to_string(dir.join("lazaret-stop.1")).unwrap();
    assert!(stop.contains("did not stop within its bound"), "{stop}");
    // man renders them as sections (when it is installed).
    let shown = env.sh(&format!(
        "command -v man >/dev/null || exit 0; MANWIDTH=120 man -l '{}' 2>&1",
        dir.join("lazaret-logs.1").display()
    ));
    let shown = text(&shown.stdout);
    if !shown.is_empty() {
        assert!(
            shown.contains("EXAMPLES") && shown.contains("EXIT STATUS"),
            "{shown}"
        );
        assert!(shown.contains("lazaret logs --json -f"), "{shown}");
    }
    let run = std::fs::read_to_string(dir.join("lazaret-run.1")).unwrap();
    assert!(run.contains("workdir"), "{run}");
    assert!(
        !dir.join("lazaret-man.1").exists(),
        "the hidden command has a page"
    );
}

#[test]
fn exit_codes_follow_the_table() {
    let env = require_env!();
    let ws = env.workspace("exitcodes");
    let code = |args: &[&str]| ws.lazaret(args).output().unwrap().status.code();
    // Lazaret's own errors, a bad command line included: 125.
    assert_eq!(code(&["--no-such-option"]), Some(125));
    assert_eq!(code(&["no-such-command"]), Some(125));
    assert_eq!(code(&["image", "rm", "no-such-image"]), Some(125));
    assert_eq!(
        code(&["state", "verify", "--domain", "not-an-id"]),
        Some(125)
    );
    // --help and --version are not errors.
    assert_eq!(code(&["--help"]), Some(0));
    assert_eq!(code(&["run", "--help"]), Some(0));
    assert_eq!(code(&["--version"]), Some(0));
    // run: the command's own status, 126, 127.
    assert_eq!(code(&["run", "false"]), Some(1));
    assert_eq!(code(&["run", "sh", "-c", "exit 7"]), Some(7));
    assert_eq!(code(&["run", "--", "/no/such/command"]), Some(127));
    let out = ws.host_sh("echo echo > not-executable && chmod 644 not-executable");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(code(&["run", "--", "./not-executable"]), Some(126));
    assert_domain_gone(&ws.domain_id("default"));
    // state: 0 done, 2 refused (not confirmed without a terminal).
    assert_eq!(code(&["state", "verify"]), Some(0));
    assert_eq!(code(&["state", "reset", "--all"]), Some(2));
    // 2 as well for every command refused while the Domain is active.
    let mut running = ws.lazaret(&["run", "--", "sleep", "60"]).spawn().unwrap();
    // Serving the session, not only listening: a command that finds the
    // Domain starting waits for it instead of refusing.
    let id = ws.domain_id("default");
    assert!(lazaret_tests::eventually(
        std::time::Duration::from_secs(60),
        || {
            let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v.as_array().is_some_and(|a| {
                a.iter()
                    .any(|d| d["domain_id"] == id.as_str() && d["session_count"] == 1)
            })
        }
    ));
    let verify = code(&["state", "verify"]);
    let reset = code(&["state", "reset", "--all", "--yes"]);
    let commit = code(&["image", "commit", "busy"]);
    let _ = running.kill();
    let _ = running.wait();
    assert_eq!((verify, reset, commit), (Some(2), Some(2), Some(2)));
    assert_domain_gone(&ws.domain_id("default"));
    // doctor: 0 or 1, as its JSON says.
    let out = ws.lazaret(&["doctor", "--json"]).output().unwrap();
    let doc = json(&out, "doctor --json");
    let expect = if doc["ok"] == true { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(expect), "{doc}");
}

#[test]
fn install_puts_everything_in_place_and_uninstall_removes_it() {
    let env = require_env!();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install");
    // A prefix the test user can read, made by root (the runner), which
    // installs as a packager would.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let prefix = tmp.path().join("prefix");
    let install = |extra: &[&str]| {
        std::process::Command::new("bash")
            .arg(&script)
            .arg("--prefix")
            .arg(&prefix)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = install(&["--from", env.bin.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bin = prefix.join("bin/lazaret");
    let sh = |script: &str| env.sh(script);
    let out = sh(&format!("'{}' --version", bin.display()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("lazaret "),
        "{}",
        text(&out.stdout)
    );
    // The installed lazaret finds its helpers.
    let out = sh(&format!("'{}' doctor --json", bin.display()));
    let doc = json(&out, "installed doctor --json");
    let helpers = doctor_check(&doc, "Lazaret's helper binaries");
    assert_eq!(helpers["status"], "ok", "{helpers}");
    assert!(
        helpers["detail"]
            .as_str()
            .unwrap()
            .contains("libexec/lazaret"),
        "{helpers}"
    );
    for f in [
        "share/bash-completion/completions/lazaret",
        "share/zsh/site-functions/_lazaret",
        "share/fish/vendor_completions.d/lazaret.fish",
        "share/man/man1/lazaret.1",
        "share/man/man1/lazaret-run.1",
        "libexec/lazaret/lazaret-escalate",
    ] {
        assert!(prefix.join(f).is_file(), "{f} is not installed");
    }
    // Uninstall removes everything it installed (the prefix it made too),
    // and nothing else.
    let keep = tmp.path().join("keep");
    std::fs::write(&keep, "mine").unwrap();
    let out = install(&["--uninstall"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!prefix.exists(), "left behind: {:?}", walk(&prefix));
    assert!(keep.exists());
    // Into a prefix that holds other things: those stay.
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::write(prefix.join("bin/other"), "x").unwrap();
    assert!(install(&["--from", env.bin.to_str().unwrap()])
        .status
        .success());
    assert!(install(&["--uninstall"]).status.success());
    assert_eq!(
        walk(&prefix),
        vec![prefix.join("bin"), prefix.join("bin/other")]
    );
    assert_refused_uninstall(&install(&["--uninstall"]));
}

fn assert_refused_uninstall(out: &Output) {
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no Lazaret installed"),
        "{}",
        text(&out.stderr)
    );
}

/// Every path beneath `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            out.push(e.path());
            out.extend(walk(&e.path()));
        }
    }
    out.sort();
    out
}

/// Issue 29: as root, `run` refuses and says to run Lazaret as the
/// ordinary user; doctor says so too and never advises giving root
/// subordinate IDs; a broken configuration is a failing doctor check, and
/// `ps` and `stop --all` still work with it.
#[test]
fn root_is_told_to_run_as_the_user_and_a_broken_config_blocks_nothing_needed() {
    let env = require_env!();
    let ws = env.workspace("asroot");
    if rustix::process::geteuid().is_root() {
        let lazaret = env.bin.join("lazaret");
        let out = std::process::Command::new(&lazaret)
            .args(["run", "true"])
            .current_dir(&ws.path)
            .output()
            .unwrap();
        assert_refused_125(&out, "without sudo");
        let out = std::process::Command::new(&lazaret)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let doc = json(&out, "doctor --json as root");
        let check = |name: &str| doctor_check(&doc, name);
        assert_eq!(check("user")["status"], "fail", "{doc}");
        let sub = check("subordinate uids");
        assert!(
            !sub["fix"].as_str().unwrap_or("").contains("usermod"),
            "doctor advised root to take subordinate IDs: {sub}"
        );
    }
    // A running Domain, then a broken configuration.
    let mut session = ws
        .lazaret(&["run", "--", "sleep", "120"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = ws.domain_id("default");
    // Running, its session in: a Domain still starting is only waited for.
    assert!(lazaret_tests::eventually(
        std::time::Duration::from_secs(60),
        || {
            let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v.as_array().is_some_and(|a| {
                a.iter()
                    .any(|d| d["domain_id"] == id.as_str() && d["session_count"] == 1)
            })
        }
    ));
    ws.write_config("[profiles.default]\nnetwork = 7\n");
    let out = ws.lazaret(&["doctor", "--json"]).output().unwrap();
    let doc = json(&out, "doctor --json");
    let config = doctor_check(&doc, "configuration");
    assert_eq!(config["status"], "fail", "{config}");
    assert!(
        config["detail"]
            .as_str()
            .unwrap()
            .contains("config.toml:2:"),
        "{config}"
    );
    assert_eq!(out.status.code(), Some(1));
    let out = ws.lazaret(&["ps"]).output().unwrap();
    assert!(out.status.success(), "ps: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&id[..12]),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
    // By ID (`stop --all` goes the same way, but would stop the Domains
    // of the tests running beside this one).
    let out = ws.lazaret(&["stop", &id]).output().unwrap();
    assert!(out.status.success(), "stop: {}", text(&out.stderr));
    let _ = session.wait();
    assert_domain_gone(&id);
}
