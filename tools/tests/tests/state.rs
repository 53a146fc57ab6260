//! State Anchors end to end: persistence across restarts, `lazaret state`
//! list/inspect/verify/reset, crash consistency of reset, confinement.

use lazaret_tests::{assert_domain_gone, require_env, text, Workspace};

const TOOL: &str = "printf '#!/bin/sh\\necho tool-ok\\n' > /usr/local/bin/lz-tool && chmod +x /usr/local/bin/lz-tool && echo kept > /root/lz-file";
const PROBE: &str = "{ command -v lz-tool >/dev/null && echo tool=yes || echo tool=no; } ; { test -f /root/lz-file && echo file=yes || echo file=no; }";

fn run(ws: &Workspace, script: &str) -> String {
    let out = ws.run_sh(script);
    assert!(out.status.success(), "{script}: {}", text(&out.stderr));
    // The Domain must stop between runs, or the next one joins it.
    assert_domain_gone(&ws.domain_id("default"));
    text(&out.stdout)
}

fn state(ws: &Workspace, args: &[&str]) -> std::process::Output {
    let mut all = vec!["state"];
    all.extend_from_slice(args);
    ws.lazaret(&all).output().unwrap()
}

#[test]
fn installed_tools_and_packages_persist_and_reset_discards_them() {
    let env = require_env!();
    let ws = env.workspace("anchor");
    run(&ws, TOOL);
    // A package installed with dpkg, built here: no network needed.
    run(
        &ws,
        "set -e; d=$(mktemp -d); mkdir -p $d/pkg/DEBIAN $d/pkg/usr/share/lz-pkg; echo payload > $d/pkg/usr/share/lz-pkg/data; \
         printf 'Package: lz-pkg\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@t>\\nDescription: test\\n' > $d/pkg/DEBIAN/control; \
         dpkg-deb --build $d/pkg $d/lz-pkg.deb >/dev/null; dpkg -i $d/lz-pkg.deb >/dev/null",
    );
    // The anchors' roots keep the image's owner and mode.
    assert_eq!(
        run(&ws, "stat -c '%a %U' /etc /usr /var /usr/local/bin"),
        "755 root\n755 root\n755 root\n755 root\n"
    );
    let out = run(&ws, &format!("{PROBE}; lz-tool; dpkg-query -W -f '${{Status}}\\n' lz-pkg; cat /usr/share/lz-pkg/data"));
    assert_eq!(
        out,
        "tool=yes\nfile=yes\ntool-ok\ninstall ok installed\npayload\n"
    );

    // reset /usr: the tool and the package files go, /root stays.
    let before = std::fs::read(ws.path.join("README")).unwrap();
    let r = state(&ws, &["reset", "/usr", "--yes"]);
    assert!(r.status.success(), "{}{}", text(&r.stdout), text(&r.stderr));
    assert!(
        text(&r.stdout).contains(&ws.domain_id("default")),
        "reset does not show its Domain"
    );
    assert_eq!(run(&ws, PROBE), "tool=no\nfile=yes\n");
    // reset --all: everything goes; the workspace is untouched.
    let r = state(&ws, &["reset", "--all", "--yes"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(run(&ws, PROBE), "tool=no\nfile=no\n");
    assert_eq!(std::fs::read(ws.path.join("README")).unwrap(), before);
    let v = state(&ws, &["verify"]);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}{}",
        text(&v.stdout),
        text(&v.stderr)
    );
}

#[test]
fn reset_and_verify_are_refused_while_a_session_is_active() {
    let env = require_env!();
    let ws = env.workspace("anchor-busy");
    let mut session = ws.lazaret(&["run", "--", "sleep", "60"]).spawn().unwrap();
    let id = ws.domain_id("default");
    assert!(lazaret_tests::eventually(
        std::time::Duration::from_secs(60),
        || {
            lazaret_tests::processes_mentioning(&id)
                .iter()
                .any(|(_, c)| c.contains(" exec "))
        }
    ));
    for args in [&["reset", "--all", "--yes"][..], &["verify"][..]] {
        let r = state(&ws, args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r.stderr));
        assert!(
            text(&r.stderr).contains("lazaret-coordinator"),
            "{}",
            text(&r.stderr)
        );
    }
    let _ = session.kill();
    let _ = session.wait();
    assert_domain_gone(&id);
}

#[test]
fn killed_reset_recovers_to_prior_or_new_empty_generation() {
    let env = require_env!();
    let ws = env.workspace("anchor-crash");
    run(&ws, TOOL);
    // (fault point, whether the tool survives: rolled back or forward)
    for (point, tool_kept) in [
        ("reset-intent", true),
        ("reset-mkdir", true),
        ("reset-rename", false),
        ("reset-switch", false),
    ] {
        if !tool_kept {
            // Put the tool back for the next round.
            run(&ws, TOOL);
        }
        let r = ws
            .lazaret(&["state", "reset", "/usr", "--yes"])
            .env("LAZARET_FAULT_POINT", point)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            r.status.signal(),
            Some(9),
            "{point}: the fault point did not fire: {}",
            text(&r.stderr)
        );
        let out = run(&ws, PROBE);
        let want = if tool_kept {
            "tool=yes\nfile=yes\n"
        } else {
            "tool=no\nfile=yes\n"
        };
        assert_eq!(out, want, "after a reset killed at {point}");
        let v = state(&ws, &["verify"]);
        assert_eq!(
            v.status.code(),
            Some(0),
            "{point}: {}{}",
            text(&v.stdout),
            text(&v.stderr)
        );
    }
}

#[test]
fn planted_symlinks_are_never_followed() {
    let env = require_env!();
    let ws = env.workspace("anchor-link");
    let outside = ws.base.join("outside");
    assert!(env
        .sh(&format!(
            "mkdir -p '{o}' && echo precious > '{o}/marker'",
            o = outside.display()
        ))
        .status
        .success());
    // The sandbox plants a link in its upper, pointing at a host path.
    run(
        &ws,
        &format!(
            "ln -s '{}' /root/evil && ln -s '{}/marker' /root/evil-file",
            outside.display(),
            outside.display()
        ),
    );
    let r = state(&ws, &["reset", "/root", "--yes"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(
        std::fs::read_to_string(outside.join("marker")).unwrap(),
        "precious\n"
    );
    // A link planted in the Domain Root itself, in place of an anchor.
    let opt = ws.domain_root("default").join("state/anchors/opt");
    assert!(env
        .sh(&format!(
            "rm -rf '{a}' && ln -s '{o}' '{a}'",
            a = opt.display(),
            o = outside.display()
        ))
        .status
        .success());
    let v = state(&ws, &["verify"]);
    assert_eq!(
        v.status.code(),
        Some(1),
        "verify did not report the link: {}",
        text(&v.stdout)
    );
    let r = state(&ws, &["reset", "--all", "--yes"]);
    assert!(!r.status.success(), "reset went through a planted link");
    assert_eq!(
        std::fs::read_to_string(outside.join("marker")).unwrap(),
        "precious\n"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "something was written outside"
    );
}

#[test]
fn list_and_inspect_print_json_without_contents() {
    let env = require_env!();
    let ws = env.workspace("anchor-json");
    run(
        &ws,
        "echo very-secret-content-4711 > /root/notes.txt && rm -rf /usr/share/doc/bash",
    );
    let id = ws.domain_id("default");
    let l = state(&ws, &["list", "--json"]);
    assert!(l.status.success(), "{}", text(&l.stderr));
    let list: serde_json::Value = serde_json::from_slice(&l.stdout).expect("list --json is JSON");
    let me = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["domain_id"] == id.as_str())
        .expect("the Domain is listed");
    assert_eq!(me["workspace"], ws.path.display().to_string());
    let i = state(&ws, &["inspect", "--json"]);
    assert!(i.status.success(), "{}", text(&i.stderr));
    let s = text(&i.stdout);
    let v: serde_json::Value = serde_json::from_str(&s).expect("inspect --json is JSON");
    let root = v["anchors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "/root")
        .unwrap();
    assert!(root["changes"]["added"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "/root/notes.txt"));
    let usr = v["anchors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "/usr")
        .unwrap();
    assert!(
        usr["changes"]["deleted_count"].as_u64().unwrap() > 0
            || !usr["changes"]["opaque"].as_array().unwrap().is_empty()
    );
    assert!(
        !s.contains("very-secret-content-4711"),
        "inspect printed a file's content"
    );
    let human = state(&ws, &["inspect", "--paths"]);
    assert!(!text(&human.stdout).contains("very-secret-content-4711"));
}

/// Bytes a terminal shows as text only: valid UTF-8, no control
/// character but the line feed, no C1 control.
fn assert_terminal_safe(what: &str, out: &[u8]) {
    let s = std::str::from_utf8(out).unwrap_or_else(|e| panic!("{what}: not UTF-8 ({e}): {out:?}"));
    for c in s.chars() {
        assert!(
            c == '\n' || !c.is_control(),
            "{what}: {c:?} reached the terminal: {s:?}"
        );
    }
}

#[test]
fn sandbox_chosen_names_reach_the_terminal_escaped() {
    use lazaret_protocol::display::unescape;
    let env = require_env!();
    let ws = env.workspace("anchor-names");
    // From inside: file names in a State Anchor, and a mailbox entry, made
    // of terminal control sequences and bytes that are not UTF-8.
    run(
        &ws,
        r#"for n in '\033]0;pwned\007' 'c1-\302\233K' 'bad-\377' 'bs\\x1b'; do
             : > "/root/$(printf "$n")"
           done
           e="/.lazaret/mailbox/requests/$(printf '\033[2J\377')"
           echo junk > "$e"
           i=0; while [ -e "$e" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
           test ! -e "$e""#,
    );
    let names: [(&str, &[u8]); 4] = [
        ("/root/\\x1b]0;pwned\\x07", b"/root/\x1b]0;pwned\x07"),
        ("/root/c1-\\u{9b}K", "/root/c1-\u{9b}K".as_bytes()),
        ("/root/bad-\\xff", b"/root/bad-\xff"),
        ("/root/bs\\\\x1b", b"/root/bs\\x1b"),
    ];

    let human = state(&ws, &["inspect", "--paths"]);
    assert!(human.status.success(), "{}", text(&human.stderr));
    assert_terminal_safe("state inspect", &human.stdout);
    for (shown, _) in names {
        assert!(
            text(&human.stdout).contains(&format!("+ {shown}\n")),
            "{shown} not in {}",
            text(&human.stdout)
        );
    }
    // JSON: the escaped form, from which the exact bytes come back.
    let json = state(&ws, &["inspect", "--json"]);
    assert_terminal_safe("state inspect --json", &json.stdout);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let added: Vec<&str> = v["anchors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "/root")
        .unwrap()["changes"]["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for (shown, exact) in names {
        assert!(added.contains(&shown), "{shown} not in {added:?}");
        assert_eq!(unescape(shown).as_deref(), Some(exact));
    }

    let esc = ws.lazaret(&["escalations"]).output().unwrap();
    assert!(esc.status.success(), "{}", text(&esc.stderr));
    assert_terminal_safe("escalations", &esc.stdout);
    assert!(
        text(&esc.stdout).contains("refused mailbox entry \\x1b[2J\\xff: "),
        "{}",
        text(&esc.stdout)
    );
    let esc = ws.lazaret(&["escalations", "--json"]).output().unwrap();
    assert_terminal_safe("escalations --json", &esc.stdout);
    let records: serde_json::Value = serde_json::from_slice(&esc.stdout).unwrap();
    let entry = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["event"] == "refused")
        .expect("the refused entry is recorded")["entry"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(unescape(&entry).as_deref(), Some(&b"\x1b[2J\xff"[..]));
}

/// Issue 29, item 1: `lazaret df` counts what Lazaret keeps by allocated
/// blocks, reading the files the sandbox's subordinate IDs own (which `du`
/// as the developer cannot), a sparse file by its data.
#[test]
fn df_counts_images_anchors_and_ignored_state_by_allocated_blocks() {
    let env = require_env!();
    let ws = env.workspace("df");
    let out = ws.host_sh("echo 'big/' > .gitignore");
    assert!(out.status.success(), "{}", text(&out.stderr));
    run(
        &ws,
        "mkdir -p /workspace/big && head -c 3000000 /dev/urandom > /workspace/big/f \
         && truncate -s 10G /workspace/big/sparse \
         && mkdir -p /opt/df && head -c 2000000 /dev/urandom > /opt/df/blob \
         && chmod 000 /opt/df/blob && echo ok",
    );
    let out = ws.lazaret(&["df", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = ws.domain_id("default");
    let d = v["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["domain_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no Domain {id} in {v}"));
    let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k} in {d}"));
    let ignored = n("ignored_bytes");
    assert!(
        (3_000_000..8_000_000).contains(&ignored),
        "Ignored Workspace State counted {ignored} bytes for 3 MB of data and a 10 GiB sparse file"
    );
    let anchors = n("anchors_bytes");
    assert!(
        (2_000_000..50_000_000).contains(&anchors),
        "State Anchors counted {anchors} bytes for a 2 MB file (mode 000, owned inside)"
    );
    assert!(n("total_bytes") >= ignored + anchors, "{d}");
    assert_eq!(d["profile"], "default");
    let images = v["images"].as_array().unwrap();
    assert!(
        images
            .iter()
            .any(|i| i["bytes"].as_u64().unwrap_or(0) > 1_000_000),
        "{v}"
    );
    assert!(v["total_bytes"].as_u64().unwrap() >= n("total_bytes"));
    // The text form names each part.
    let out = ws.lazaret(&["df"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    for word in [
        "images",
        "Domains",
        "State Anchors",
        "Ignored Workspace State",
        "shared paths",
        "total",
    ] {
        assert!(t.contains(word), "{word}: {t}");
    }
    assert_domain_gone(&id);
}

/// Issue 29, item 4: resetting /usr after a package was installed resets
/// /etc and /var with it, so dpkg's database never lists files that are
/// gone (and apt installs the package again); `--only` resets /usr alone,
/// with a warning.
#[test]
fn reset_keeps_the_package_database_consistent() {
    let env = require_env!();
    let ws = env.workspace("pkgset");
    // A real package, installed by dpkg inside (no network needed).
    const INSTALL: &str = "set -e; d=$(mktemp -d); mkdir -p $d/DEBIAN $d/usr/bin; \
        printf 'Package: lzhello\\nVersion: 1\\nArchitecture: all\\nMaintainer: t <t@t>\\nDescription: t\\n' > $d/DEBIAN/control; \
        printf '#!/bin/sh\\necho hello\\n' > $d/usr/bin/lzhello; chmod 755 $d/usr/bin/lzhello; \
        dpkg-deb --build $d /tmp/lzhello.deb >/dev/null; dpkg -i /tmp/lzhello.deb >/dev/null; lzhello";
    const PROBE: &str = "dpkg -s lzhello >/dev/null 2>&1 && echo db=yes || echo db=no; \
        test -x /usr/bin/lzhello && echo file=yes || echo file=no";
    assert_eq!(run(&ws, INSTALL), "hello\n");
    let out = state(&ws, &["reset", "/usr", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("also reset /etc /var"), "{said}");
    assert_eq!(run(&ws, PROBE), "db=no\nfile=no\n");
    // Installed again without complaint, then reset alone on request.
    assert_eq!(run(&ws, INSTALL), "hello\n");
    let out = state(&ws, &["reset", "/usr", "--only", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("warning: a package was installed"), "{said}");
    assert!(!said.contains("also reset"), "{said}");
    assert_eq!(run(&ws, PROBE), "db=yes\nfile=no\n");
    // Nothing installed: /usr alone, no word of packages.
    let clean = env.workspace("pkgset-clean");
    run(&clean, "echo x > /usr/local/lz-file");
    let out = state(&clean, &["reset", "/usr", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("also reset"),
        "{}",
        text(&out.stdout)
    );
}
