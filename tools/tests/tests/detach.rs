//! Sessions that outlive their terminal (issue 28, item 4): `lazaret run
//! -d`, `lazaret attach`, `lazaret ps`'s sessions, the Domain's life with
//! only a detached session, `keep_alive`, and what the sandbox cannot do
//! through the attach path.

use lazaret_tests::pty::{wait, Pty};
use lazaret_tests::{assert_domain_gone, eventually, require_env, text, Workspace};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_secs(15);

/// `lazaret run -d ARGS`: its exit status and the Session ID it printed.
fn run_detached(ws: &Workspace, args: &[&str]) -> String {
    let mut all = vec!["run", "-d", "--"];
    all.extend_from_slice(args);
    let out = ws.lazaret(&all).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 32, "a Session ID: {id:?}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id:?}");
    id
}

/// This workspace's Domain's row of `lazaret ps --json`, if it runs.
fn ps_row(ws: &Workspace) -> Option<serde_json::Value> {
    let id = ws.domain_id("default");
    let out = ws.lazaret(&["ps", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?
        .iter()
        .find(|d| d["domain_id"] == id.as_str())
        .cloned()
}

#[test]
fn run_d_detaches_attach_replays_and_types_one_terminal_at_a_time() {
    let env = require_env!();
    let ws = env.workspace("detach");
    let domain = ws.domain_id("default");
    let sid = run_detached(
        &ws,
        &["sh", "-c", "echo produced-$((6*7)); exec bash --norc -i"],
    );

    // No client: the Domain keeps running for it, and ps says so.
    assert!(eventually(LONG, || ps_row(&ws)
        .is_some_and(|r| r["sessions"]
            .as_array()
            .is_some_and(|s| s.len() == 1))));
    let row = ps_row(&ws).unwrap();
    let s = &row["sessions"][0];
    assert_eq!(s["id"], sid.as_str(), "{row}");
    assert_eq!(s["attached"], false, "{row}");
    assert_eq!(s["state"], "running", "{row}");
    assert!(s["command"].as_str().unwrap().contains("produced"), "{row}");
    assert!(s["since_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    let table = text(&ws.lazaret(&["ps"]).output().unwrap().stdout);
    assert!(
        table.contains(&sid[..12]) && table.contains("detached"),
        "{table}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        ps_row(&ws).is_some(),
        "the Domain stopped with a detached session"
    );

    // Attach (the only detached session): what came out meanwhile is
    // replayed, and typing reaches it.
    let mut pty = Pty::new();
    let mut first = pty.spawn(&ws, &["attach"]);
    let mut at = pty.expect(0, "produced-42", LONG);
    pty.send("echo typed-$((2+3))\r");
    at = pty.expect(at, "typed-5", SHORT);
    pty.send("stty size\r");
    at = pty.expect(at, "24 80", SHORT);
    assert!(eventually(SHORT, || ps_row(&ws)
        .is_some_and(|r| r["sessions"][0]["attached"] == true)));

    // A second terminal is refused while one is attached.
    let other = Pty::new();
    let mut refused = other.spawn(&ws, &["attach", &sid[..8]]);
    assert_ne!(wait(&mut refused, LONG), Some(0));
    other.expect(0, "attached to another terminal", SHORT);
    drop(other);
    pty.send("echo still-$((4+4))\r");
    at = pty.expect(at, "still-8", SHORT);

    // ctrl-p ctrl-q detaches; the session goes on and keeps its output.
    pty.send("\x10\x11");
    assert_eq!(wait(&mut first, SHORT), Some(0));
    pty.expect(at, "detached from session", SHORT);
    assert!(eventually(SHORT, || ps_row(&ws)
        .is_some_and(|r| r["sessions"][0]["attached"] == false)));

    // Closing the terminal (a hang-up) leaves it running too.
    let mut pty = Pty::new();
    let mut second = pty.spawn(&ws, &["attach", &sid]);
    // (What it showed while attached is not replayed: only what came out
    // while detached.)
    pty.send("echo again-$((3+4))\r");
    pty.expect(0, "again-7", LONG);
    second.kill().unwrap();
    let _ = second.wait();
    drop(pty);
    assert!(eventually(SHORT, || ps_row(&ws)
        .is_some_and(|r| r["sessions"][0]["attached"] == false)));

    // Its end reaches the attached terminal as the status; the Domain
    // stops, its last session gone.
    let mut pty = Pty::new();
    let mut third = pty.spawn(&ws, &["attach"]);
    pty.send("exit 7\r");
    assert_eq!(wait(&mut third, LONG), Some(7));
    assert_domain_gone(&domain);
}

#[test]
fn attach_refuses_with_no_or_several_detached_sessions() {
    let env = require_env!();
    let ws = env.workspace("detach-many");
    let domain = ws.domain_id("default");
    let out = ws.lazaret(&["attach"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    // Not a terminal here: refused before anything is asked.
    assert!(
        text(&out.stderr).contains("needs a terminal"),
        "{}",
        text(&out.stderr)
    );
    let pty = Pty::new();
    let mut none = pty.spawn(&ws, &["attach"]);
    assert_ne!(wait(&mut none, SHORT), Some(0));
    pty.expect(0, "no Domain is running", SHORT);

    let a = run_detached(&ws, &["sleep", "300"]);
    let b = run_detached(&ws, &["sleep", "301"]);
    let pty = Pty::new();
    let mut two = pty.spawn(&ws, &["attach"]);
    assert_ne!(wait(&mut two, LONG), Some(0));
    let at = pty.expect(0, "2 detached sessions", SHORT);
    pty.expect(at, &a[..8], SHORT);
    pty.expect(at, &b[..8], SHORT);
    let out = ws.lazaret(&["stop"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&domain);
}

/// An attacker inside: the detach keys and terminal replies written as
/// output do not detach the terminal or reach another session's; a Host
/// Escalation of the detached session is asked on no terminal but the one
/// that attaches to it, and denied with the reason when none does.
#[test]
fn the_sandbox_cannot_detach_redirect_or_prompt_through_the_attach_path() {
    let env = require_env!();
    let ws = env.workspace("detach-attacker");
    let domain = ws.domain_id("default");
    // Session B: an ordinary attached session, whose terminal must see
    // nothing of A's.
    let mut pty_b = Pty::new();
    let mut b = pty_b.spawn(&ws, &["run", "--", "bash", "--norc", "-i"]);
    pty_b.expect(0, "#", LONG);
    // Session A, detached: it asks for a host command with nobody there,
    // then writes the detach keys (and a fake notice) as its output, to
    // every terminal inside it can open.
    let script = "lazaret-escalate --timeout 3 -- /bin/echo host-ran; echo esc-rc=$?; \
                  for t in /dev/tty /proc/[0-9]*/fd/[012]; do printf 'A-WAS-HERE\\020\\021' > $t 2>/dev/null; done; \
                  echo attacker-done; exec bash --norc -i";
    let sid = run_detached(&ws, &["sh", "-c", script]);
    std::thread::sleep(Duration::from_secs(6));

    let mut pty = Pty::new();
    let mut att = pty.spawn(&ws, &["attach", &sid]);
    let at = pty.expect(0, "attacker-done", LONG);
    let seen = text(&pty.seen.lock().unwrap());
    assert!(
        seen.contains("runs detached"),
        "the denial says why: {seen}"
    );
    assert!(!seen.contains("host-ran"), "{seen}");
    assert!(!seen.contains("esc-rc=0"), "{seen}");
    // Still attached after the keys came as output: typing reaches it.
    pty.send("echo still-$((8+1))\r");
    pty.expect(at, "still-9", SHORT);
    assert!(att.try_wait().unwrap().is_none());
    // B's terminal was never asked, and B still works.
    let b_seen = text(&pty_b.seen.lock().unwrap());
    assert!(
        !b_seen.contains("host-ran") && !b_seen.contains("/bin/echo"),
        "{b_seen}"
    );
    pty_b.send("echo b-ok-$((1+1))\r");
    pty_b.expect(0, "b-ok-2", SHORT);
    pty_b.send("exit\r");
    assert_eq!(wait(&mut b, SHORT), Some(0));
    pty.send("exit\r");
    assert_eq!(wait(&mut att, SHORT), Some(0));
    assert_domain_gone(&domain);
}

/// `keep_alive`: the Domain stays up after its last session ended, and a
/// detached session that exited meanwhile is reported with its status;
/// then the Domain stops by itself.
#[test]
fn keep_alive_keeps_the_domain_up_then_stops_it_and_keeps_a_detached_status() {
    let env = require_env!();
    let ws = env.workspace("keep-alive");
    let domain = ws.domain_id("default");
    ws.write_config("[profiles.default]\nkeep_alive = \"20s\"\n");
    let out = ws.lazaret(&["run", "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Its only session ended, yet it runs.
    let row = ps_row(&ws).expect("the Domain stopped despite keep_alive");
    assert_eq!(row["session_count"], 0, "{row}");

    // A detached session that ends: its status is kept for ps.
    let sid = run_detached(&ws, &["sh", "-c", "echo bye; exit 3"]);
    assert!(eventually(LONG, || ps_row(&ws).is_some_and(|r| r
        ["sessions"]
        .as_array()
        .is_some_and(|s| s.iter().any(
            |s| s["id"] == sid.as_str() && s["state"] == "exited 3"
        )))));
    // attach collects it: its output and its status.
    let pty = Pty::new();
    let mut att = pty.spawn(&ws, &["attach"]);
    assert_eq!(wait(&mut att, LONG), Some(3));
    pty.expect(0, "bye", SHORT);
    assert!(ps_row(&ws).is_some_and(|r| r["sessions"].as_array().is_some_and(|s| s.is_empty())));

    // Then, with nothing left, it stops by itself.
    assert!(
        eventually(Duration::from_secs(120), || ps_row(&ws).is_none()),
        "keep_alive never let the Domain stop"
    );
    assert_domain_gone(&domain);
}

/// `detach_on_hangup`: a `lazaret run` whose terminal goes keeps running
/// detached, and `lazaret attach` finds it.
#[test]
fn detach_on_hangup_keeps_a_session_whose_terminal_closed() {
    let env = require_env!();
    let ws = env.workspace("hangup");
    let domain = ws.domain_id("default");
    ws.write_config("[profiles.default]\ndetach_on_hangup = true\n");
    let mut pty = Pty::new();
    let mut run = pty.spawn(&ws, &["run", "--", "bash", "--norc", "-i"]);
    pty.send("echo up-$((1+2))\r");
    pty.expect(0, "up-3", LONG);
    run.kill().unwrap();
    let _ = run.wait();
    drop(pty);
    assert!(eventually(LONG, || ps_row(&ws)
        .is_some_and(|r| r["sessions"][0]["attached"] == false)));
    let mut pty = Pty::new();
    let mut att = pty.spawn(&ws, &["attach"]);
    pty.send("echo back-$((2+2)); exit 5\r");
    pty.expect(0, "back-4", LONG);
    assert_eq!(wait(&mut att, SHORT), Some(5));
    assert_domain_gone(&domain);
}
