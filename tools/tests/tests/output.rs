//! Output for people and for programs (issue 29, item 5): `lazaret logs
//! --json` and the session events of `coordinator.log` (what each session
//! ran, never its environment; why it ended), every log time in one
//! width; the compact `state list` and its `--profile` and `--workspace`
//! filters.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text, Workspace};
use std::process::Stdio;
use std::time::Duration;

/// `lazaret logs --json` of the workspace's default Domain.
fn log_records(ws: &Workspace<'_>) -> Vec<serde_json::Value> {
    let out = ws.lazaret(&["logs", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    v.as_array().unwrap().clone()
}

/// The session events of `records`, by kind.
fn events<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records
        .iter()
        .filter_map(|r| r.get("event"))
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[test]
fn logs_say_what_each_session_ran_and_why_it_ended_never_its_environment() {
    let env = require_env!();
    let ws = env.workspace("out-logs");
    let id = ws.domain_id("default");
    // A command with a terminal escape and a quote in its arguments, and a
    // session variable whose name and value must never reach the log.
    let evil = "a\u{1b}]0;owned\u{7}\"b\nc";
    let out = ws
        .lazaret(&[
            "run",
            "-e",
            "E2E_TEST_SECRET=s3cr3t-value",
            "--",
            "sh",
            "-c",
            "exit 3",
            evil,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_domain_gone(&id);

    // A session whose client goes away, one the Domain's stop ends.
    let mut hung = ws
        .lazaret(&["run", "--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stopped = ws
        .lazaret(&["run", "--", "sleep", "301"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(60), || {
        events(&log_records(&ws), "ran")
            .iter()
            .filter(|e| e["argv"][0] == "sleep")
            .count()
            == 2
    }));
    // `setpriv` execs `lazaret`: this is the client itself.
    hung.kill().unwrap();
    let _ = hung.wait();
    assert!(eventually(Duration::from_secs(30), || {
        events(&log_records(&ws), "ended")
            .iter()
            .any(|e| e["why"] == "hung_up")
    }));
    let out = ws.lazaret(&["stop"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(stopped.wait().unwrap().code(), Some(137));

    let records = log_records(&ws);
    let ran = events(&records, "ran");
    let first = ran
        .iter()
        .find(|e| e["argv"][0] == "sh")
        .unwrap_or_else(|| panic!("{records:#?}"));
    // The exact arguments come back from the JSON.
    assert_eq!(
        first["argv"],
        serde_json::json!(["sh", "-c", "exit 3", evil])
    );
    assert_eq!(first["workdir"], "/workspace");
    assert_eq!(first["terminal"], false);
    let session = |e: &serde_json::Value| e["session"].as_str().unwrap().to_string();
    let sleeper = |arg: &str| {
        ran.iter()
            .find(|e| e["argv"][1] == arg)
            .map(|e| session(e))
            .unwrap()
    };
    let ended = events(&records, "ended");
    let end_of = |sid: String| {
        ended
            .iter()
            .find(|e| e["session"] == sid.as_str())
            .map(|e| (*e).clone())
            .unwrap_or_else(|| panic!("no end of {sid}: {records:#?}"))
    };
    let e = end_of(session(first));
    assert_eq!(
        (e["why"].as_str(), e["status"].as_i64()),
        (Some("exited"), Some(3))
    );
    let e = end_of(sleeper("300"));
    assert_eq!(e["why"], "hung_up", "{e}");
    let e = end_of(sleeper("301"));
    assert_eq!(
        (e["why"].as_str(), e["status"].as_i64()),
        (Some("domain_stopped"), Some(137))
    );
    // Every record has its time in milliseconds and the coordinator's PID.
    for r in &records {
        assert!(
            r["time_unix_ms"].as_i64().unwrap() > 1_700_000_000_000,
            "{r}"
        );
        assert!(r["pid"].as_u64().is_some(), "{r}");
    }

    // The text: one width for every time; the escape and the quote shown
    // escaped; the environment nowhere (not in the files either).
    let out = ws.lazaret(&["logs"]).output().unwrap();
    let log = text(&out.stdout);
    for line in log.lines() {
        assert_eq!(
            line.find(" lazaret-coordinator["),
            Some("2026-12-02T16:31:05.120Z".len()),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "{line}");
    }
    assert!(
        log.contains(&format!(
            "session {} ran \"sh\" \"-c\" \"exit 3\" \"a\\x1b]0;owned\\x07\\\"b\\nc\" in \"/workspace\" without a terminal",
            session(first)
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("session {} ended: status 3", session(first))),
        "{log}"
    );
    let files = env.sh(&format!(
        "cat '{}'/coordinator.log* '{}'/helpers.log*",
        ws.domain_root("default").display(),
        ws.domain_root("default").display()
    ));
    let all = text(&files.stdout);
    assert!(all.contains("ended: status 3"), "{all}");
    assert!(!all.contains("s3cr3t-value") && !all.contains("E2E_TEST_SECRET"));

    // Following a stopped Domain: one record per line.
    let out = ws
        .lazaret(&["logs", "--json", "--follow"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), records.len());
}

/// The compact `state list`'s row of Domain `id`.
fn row_of(list: &str, id: &str) -> Option<String> {
    list.lines()
        .find(|l| l.starts_with(&id[..12]))
        .map(str::to_string)
}

#[test]
fn state_list_has_a_line_per_domain_and_filters_by_profile_and_workspace() {
    let env = require_env!();
    let one = env.workspace("out-list-a");
    let two = env.workspace("out-list-b");
    for ws in [&one, &two] {
        ws.write_config("[profiles.agent]\n");
    }
    for (ws, profile) in [(&one, "default"), (&one, "agent"), (&two, "agent")] {
        let out = ws
            .lazaret(&["--profile", profile, "run", "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let ids = [
        one.domain_id("default"),
        one.domain_id("agent"),
        two.domain_id("agent"),
    ];
    for id in &ids {
        assert_domain_gone(id);
    }
    let list = |args: &[&str]| {
        let out = one.lazaret(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    // Every Domain of the user: one line each, after a header.
    let all = list(&["state", "list"]);
    assert!(all.starts_with("DOMAIN "), "{all}");
    for (id, ws, profile) in [
        (&ids[0], &one, "default"),
        (&ids[1], &one, "agent"),
        (&ids[2], &two, "agent"),
    ] {
        let row = row_of(&all, id).unwrap_or_else(|| panic!("{id}: {all}"));
        assert!(row.contains(&format!("  {profile} ")), "{row}");
        assert!(row.contains("inactive") && row.contains(" each "), "{row}");
        assert!(row.ends_with(ws.path.to_str().unwrap()), "{row}");
        assert_eq!(all.matches(&id[..12]).count(), 1, "{all}");
    }
    // Filters: the profile, the workspace (canonicalised as every command
    // does: a relative path, a symbolic link), and both.
    let link = one.base.join("link");
    assert!(one.host_sh("ln -s \"$PWD\" ../link").status.success());
    let rows = |s: &str| {
        ids.iter()
            .map(|id| row_of(s, id).is_some())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&list(&["--profile", "agent", "state", "list"])),
        [false, true, true]
    );
    assert_eq!(
        rows(&list(&["state", "list", "--workspace", "."])),
        [true, true, false]
    );
    assert_eq!(
        rows(&list(&[
            "state",
            "list",
            "--workspace",
            link.to_str().unwrap(),
            "--profile",
            "agent"
        ])),
        [false, true, false]
    );
    let none = list(&["--profile", "nosuch", "state", "list"]);
    assert!(none.contains("matches --profile nosuch"), "{none}");
    // JSON: the full records, filtered.
    let out = one
        .lazaret(&["state", "list", "--json", "--profile", "agent"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain_id"].as_str().unwrap())
        .collect();
    assert!(got.contains(&ids[1].as_str()) && got.contains(&ids[2].as_str()));
    assert!(!got.contains(&ids[0].as_str()));
    assert!(v[0]["limits"]["anchor_size"].is_string(), "{v}");
    assert!(v[0]["anchors"].is_array(), "{v}");
    // --long: the detailed form.
    let long = list(&["state", "list", "--long", "--workspace", "."]);
    assert!(
        long.contains(&format!("Domain {}  profile default", ids[0])),
        "{long}"
    );
    assert!(long.contains("  limits: memory "), "{long}");
    // A workspace that no longer exists is compared as its absolute path:
    // nothing matches, and the filter is named.
    let out = one
        .lazaret(&["state", "list", "--workspace", "no/such/dir"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("matches --workspace"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn doctor_is_not_coloured_when_its_output_is_not_a_terminal() {
    let env = require_env!();
    let ws = env.workspace("out-doctor");
    let out = ws.lazaret(&["doctor"]).output().unwrap();
    let s = text(&out.stdout);
    assert!(s.lines().any(|l| l.starts_with("ok   ")), "{s}");
    assert!(!s.contains('\u{1b}'), "{s:?}");
}
