//! Host Escalation end to end: `lazaret-escalate` in the real sandbox, the
//! signed Escalation Mailbox, auto-approval rules, the prompt at the
//! requesting terminal, and the mailbox's defences.

use lazaret_tests::pty::{wait, Pty};
use lazaret_tests::{assert_domain_gone, eventually, require_env, text, Workspace};
use std::time::Duration;

fn rules(ws: &Workspace, extra: &str) {
    ws.write_config(&format!(
        r#"[[profiles.default.escalation.auto_approve]]
argv = ["/bin/echo", "hi"]
[[profiles.default.escalation.auto_approve]]
argv = ["/bin/sh", "-c", "echo oops >&2; exit 3"]
[[profiles.default.escalation.auto_approve]]
argv = ["/usr/bin/printf", "%s|"]
trailing_args = true
{extra}"#
    ));
}

/// The Domain's escalation record, across its rotations, oldest first.
fn log(ws: &Workspace) -> String {
    lazaret_protocol::escalation::log_files(&ws.domain_root("default"))
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

#[test]
fn auto_approved_commands_run_on_the_host_and_results_come_back() {
    let env = require_env!();
    let ws = env.workspace("esc-auto");
    let marker = ws.base.join("ran-on-host");
    rules(
        &ws,
        &format!(
            "[[profiles.default.escalation.auto_approve]]\nargv = [\"/usr/bin/touch\", \"{}\"]\n",
            marker.display()
        ),
    );
    let out = ws.run_sh("lazaret-escalate -- /bin/echo hi");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\n");
    let out = ws.run_sh("lazaret-escalate -- /bin/sh -c 'echo oops >&2; exit 3'");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("oops"), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    // No shell on the host: every argument arrives as one literal.
    let out = ws.run_sh("lazaret-escalate -- /usr/bin/printf '%s|' 'a;b' '$(id)' 'x\ny' '`id`'");
    assert_eq!(
        text(&out.stdout),
        "a;b|$(id)|x\ny|`id`|",
        "{}",
        text(&out.stderr)
    );
    // It ran on the host: the marker is outside anything the sandbox sees.
    let out = ws.run_sh(&format!(
        "lazaret-escalate -- /usr/bin/touch '{m}' && ! test -e '{m}'",
        m = marker.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists(), "the command did not run on the host");
    let esc = ws.lazaret(&["escalations", "--json"]).output().unwrap();
    let records: serde_json::Value = serde_json::from_slice(&esc.stdout).unwrap();
    assert!(
        records
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["decided_by"] == "auto-approval rule 1"
                && r["result"] == "completed, status 0")
    );
}

#[test]
fn vectors_that_differ_from_a_rule_are_not_auto_approved() {
    let env = require_env!();
    let ws = env.workspace("esc-strict");
    rules(&ws, "");
    for cmd in [
        "lazaret-escalate -- /bin/echo ho",
        "lazaret-escalate -- /bin/echo hi extra",
        "lazaret-escalate -- /bin/echo",
        "lazaret-escalate -- /bin/sh -c 'echo oops >&2; exit 3' extra",
    ] {
        let out = ws.run_sh(cmd);
        assert_eq!(out.status.code(), Some(77), "{cmd}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("denied"),
            "{cmd}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "", "{cmd} ran");
    }
}

#[test]
fn prompt_approve_deny_and_edit_at_the_requesting_terminal() {
    let env = require_env!();
    let ws = env.workspace("esc-prompt");
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(15);
    let mut at = pty.expect(0, "/workspace#", long);

    pty.send("lazaret-escalate --justification 'needs the host' -- /bin/echo one; echo rc=$?\r");
    at = pty.expect(at, "Host Escalation request", short);
    at = pty.expect(at, "session:", short);
    at = pty.expect(at, "justification: needs the host\r\n", short);
    at = pty.expect(
        at,
        "Run \"/bin/echo\" \"one\" on the host? [a]pprove",
        short,
    );
    pty.send("a");
    at = pty.expect(
        at,
        "approved: running \"/bin/echo\" \"one\" on the host\r\n",
        short,
    );
    at = pty.expect(at, "one\r\nrc=0", short);

    pty.send("lazaret-escalate -- /bin/echo two; echo rc=$?\r");
    at = pty.expect(at, "[a]pprove", short);
    pty.send("d");
    at = pty.expect(at, "rc=77", short);

    pty.send("lazaret-escalate -- /bin/echo three; echo rc=$?\r");
    at = pty.expect(at, "[a]pprove", short);
    pty.send("e");
    at = pty.expect(at, "> ", short);
    // Clear the line, type another vector, approve what is shown.
    pty.send("\u{15}/bin/echo 'edited vector'\r");
    at = pty.expect(at, "\"/bin/echo\" \"edited vector\"", short);
    pty.send("a");
    at = pty.expect(at, "edited vector\r\nrc=0", short);
    assert!(!text(&pty.seen.lock().unwrap()[at..]).contains("three"));

    pty.send("exit\r");
    assert_eq!(wait(&mut child, short), Some(0));
    let log = log(&ws);
    assert!(
        log.contains("\"ran_argv\":[\"/bin/echo\",\"edited vector\"]"),
        "{log}"
    );
    assert!(log.contains("\"argv\":[\"/bin/echo\",\"three\"]"), "{log}");
}

/// The prompt's bytes as the terminal got them: from its title to the
/// question (inclusive).
fn prompt_region(seen: &[u8], from: usize) -> Vec<u8> {
    let hay = &seen[from..];
    let find = |n: &[u8]| hay.windows(n.len()).position(|w| w == n);
    let start = find("Host Escalation request".as_bytes()).expect("title");
    let q = b" on the host? [a]pprove [d]eny [e]dit: ";
    let end = find(q).expect("question") + q.len();
    hay[start..end].to_vec()
}

#[test]
fn hostile_request_fields_cannot_reach_the_terminal_or_imitate_the_layout() {
    let env = require_env!();
    let ws = env.workspace("esc-spoof");
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(15);
    let mut at = pty.expect(0, "/workspace#", long);

    // From inside: a directory, a justification and arguments made of
    // terminal control sequences and fake prompt lines, after output that
    // leaves the terminal drawing invisible text in the line-drawing set.
    // The subshell keeps bash's own prompt (which shows the directory) out
    // of it.
    pty.send(concat!(
        r#"(printf '\033[8m\033(0'; d="$(printf '/tmp/\033[31mred\302\233K')"; mkdir -p "$d" && cd "$d" && "#,
        r#"lazaret-escalate --justification "$(printf 'harmless\n  command:       "/bin/true"\nRun it on the host? [a]pprove [d]eny [e]dit: \033[2A\033[2K%0200d' 0)" "#,
        r#"-- /bin/echo "$(printf '\033]0;pwned\007\033[1A')" "$(printf 'x\r  command:       "/bin/true"')"); echo rc=$?"#,
        "\r"
    ));
    let before = pty.expect(at, "Host Escalation request", short) - "Host Escalation request".len();
    at = pty.expect(before, "[a]pprove [d]eny [e]dit: ", short);
    let mut region = prompt_region(&pty.seen.lock().unwrap(), before);
    // Lazaret's own reset comes first (DECSTR and the rest, SGR 0 last),
    // then the screen is cleared: line feeds from the bottom row, erase.
    let seen = text(&pty.seen.lock().unwrap()[..before]);
    let reset_at = seen.rfind("\x18\x1b\\\x1b<").expect("the reset");
    let reset = &seen[reset_at..];
    for mode in [
        "\x1b[!p",
        "\x1b[r",
        "\x1b[?6l",
        "\x1b[4l",
        "\x1b[?1049l",
        "\x1b(B",
        "\x0f",
        "\x1b[?25h",
    ] {
        assert!(reset.contains(mode), "{mode:?} is not reset: {reset:?}");
    }
    // The header line may be painted (bold yellow on a terminal, unless
    // NO_COLOR): only Lazaret's own constant colour.
    let cleared = format!("\x1b[0m\x1b[1;24r\x1b[24;1H{}\x1b[H\x1b[J", "\n".repeat(24));
    assert!(
        reset.ends_with(&format!("{cleared}-- lazaret: "))
            || reset.ends_with(&format!("{cleared}\x1b[1;33m-- lazaret: ")),
        "the prompt does not reset and clear the terminal first: {reset:?}"
    );
    // The header's colour ends with the header (SGR 0): Lazaret's own.
    let painted_end = b"Host Escalation request --\x1b[0m\r\n";
    if region.starts_with(painted_end) {
        let at = "Host Escalation request --".len();
        region.drain(at..at + 4);
    }
    // Lazaret's status request, right before the question, is its own.
    let before_question = b"\r\n\x1b[5nRun ";
    let sync = region
        .windows(before_question.len())
        .position(|w| w == before_question)
        .expect("the status request before the question");
    region.drain(sync + 2..sync + 6);
    let shown = text(&region);
    for (i, b) in region.iter().enumerate() {
        assert!(
            !matches!(b, 0..=0x09 | 0x0b | 0x0c | 0x0e..=0x1f | 0x7f),
            "control byte {b:#04x} at {i} reached the terminal: {shown:?}"
        );
    }
    assert!(
        !shown.contains('\u{9b}') && shown.is_ascii(),
        "a C1 control or another non-ASCII character reached the terminal: {shown:?}"
    );
    let lines: Vec<&str> = shown.split("\r\n").collect();
    // Title, seven fields, the command (over two rows, broken between
    // arguments), the question carrying it: nothing else, in this order.
    let labels = [
        "Host Escalation request --",
        "  profile:       default",
        "  session:       ",
        "  asked by:      (claimed) pid ",
        "  justification: harmless\\n  command:       \"/bin/true\"\\nRun",
        "  sandbox cwd:   /tmp/\\x1b[31mred\\u{9b}K",
        "  runs on host:  in /",
        "  host env:      PATH (yours)",
        "  command:       \"/bin/echo\" \"\\x1b]0;pwned\\x07\\x1b[1A\"",
        "                 \"x\\r  command:       \\\"/bin/true\\\"\"",
        "Run \"/bin/echo\" \"\\x1b]0;",
    ];
    assert_eq!(lines.len(), labels.len(), "{shown}");
    for (line, want) in lines.iter().zip(labels) {
        assert!(
            line.starts_with(want),
            "{line:?} should start with {want:?}\n{shown}"
        );
        assert!(line.len() <= 80, "{line:?}");
    }
    assert!(
        lines[4].ends_with(" bytes]") && lines[4].contains("...[cut "),
        "{}",
        lines[4]
    );
    // The host directory, whole or cut with a count.
    let host = ws.path.display().to_string();
    let dir = &lines[6]["  runs on host:  in ".len()..];
    match dir.split_once("...[cut ") {
        Some((kept, _)) => assert!(host.starts_with(kept) && dir.ends_with(" bytes]"), "{dir}"),
        None => assert_eq!(dir, host),
    }
    assert_eq!(
        lines[8],
        "  command:       \"/bin/echo\" \"\\x1b]0;pwned\\x07\\x1b[1A\""
    );
    assert_eq!(
        lines[9],
        "                 \"x\\r  command:       \\\"/bin/true\\\"\""
    );
    assert!(
        lines[10].contains("...[cut ")
            && lines[10].ends_with(" bytes] on the host? [a]pprove [d]eny [e]dit: "),
        "{}",
        lines[10]
    );

    pty.send("d");
    pty.expect(at, "rc=77", short);
    pty.send("exit\r");
    assert_eq!(wait(&mut child, short), Some(0));
}

#[test]
fn two_sessions_each_get_only_their_own_prompt_and_result() {
    let env = require_env!();
    let ws = env.workspace("esc-two");
    let short = Duration::from_secs(20);
    let mut a = Pty::new();
    let mut b = Pty::new();
    let mut ca = a.spawn(&ws, &["run"]);
    let at_a = a.expect(0, "/workspace#", Duration::from_secs(60));
    let mut cb = b.spawn(&ws, &["run"]);
    let at_b = b.expect(0, "/workspace#", Duration::from_secs(60));
    a.send("lazaret-escalate --justification just-AAA -- /bin/echo result-$((1+1))AAA\r");
    b.send("lazaret-escalate --justification just-BBB -- /bin/echo result-$((1+1))BBB\r");
    // The typed command line holds the justification too: wait for the
    // prompt itself.
    let at_a = a.expect(at_a, "justification: just-AAA\r\n", short);
    let at_b = b.expect(at_b, "justification: just-BBB\r\n", short);
    let at_a = a.expect(at_a, "[a]pprove", short);
    let at_b = b.expect(at_b, "[a]pprove", short);
    a.send("a");
    b.send("a");
    a.expect(at_a, "result-2AAA\r\n", short);
    b.expect(at_b, "result-2BBB\r\n", short);
    let sa = text(&a.seen.lock().unwrap());
    let sb = text(&b.seen.lock().unwrap());
    assert!(
        !sa.contains("BBB"),
        "session B's prompt or result reached A: {sa}"
    );
    assert!(
        !sb.contains("AAA"),
        "session A's prompt or result reached B: {sb}"
    );
    a.send("exit\r");
    b.send("exit\r");
    assert_eq!(wait(&mut ca, short), Some(0));
    assert_eq!(wait(&mut cb, short), Some(0));
}

#[test]
fn forged_and_malformed_requests_are_refused_and_run_nothing() {
    let env = require_env!();
    let ws = env.workspace("esc-forged");
    let count = ws.base.join("count");
    let rule_cmd = format!("echo x >> {}", count.display());
    rules(
        &ws,
        &format!("[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/sh\", \"-c\", \"{rule_cmd}\"]\n"),
    );
    let req = |out: &str, env_prefix: &str| {
        format!("{env_prefix} lazaret-escalate --write-request-to {out} -- /bin/sh -c '{rule_cmd}'")
    };
    // A valid request saved to the workspace, for the stale-generation case.
    let out = ws.run_sh(&req("/workspace/stale.req", ""));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));

    let script = format!(
        "set -e; R=/.lazaret/mailbox/requests; cd /tmp
         put() {{ cp \"$1\" $R/.tmp-$2; mv $R/.tmp-$2 $R/$2; }}
         {good}
         {anchor}
         {session}
         put /tmp/good accepted.req; sleep 1
         put /tmp/good replayed.req
         put /tmp/badanchor anchor.req
         put /tmp/badsession session.req
         cp /tmp/good /tmp/badsig; printf '\\001' | dd of=/tmp/badsig bs=1 seek=5 conv=notrunc 2>/dev/null; put /tmp/badsig sig.req
         put /workspace/stale.req stale.req
         ln -s /tmp/good $R/link.req
         mkfifo $R/fifo.req
         head -c 100000 /dev/zero > /tmp/big; put /tmp/big big.req
         head -c 80 /tmp/good > /tmp/trunc; put /tmp/trunc trunc.req
         echo garbage > /tmp/garbage; put /tmp/garbage garbage.req
         sleep 2; ls -A $R",
        good = req("/tmp/good", ""),
        anchor = req("/tmp/badanchor", &format!("LAZARET_SESSION_ANCHOR={}", "0".repeat(64))),
        session = req("/tmp/badsession", &format!("LAZARET_SESSION_ID={}", "f".repeat(32))),
    );
    let out = ws.run_sh(&script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // gVisor keeps a FIFO made inside in the sandbox: it never reaches the
    // host's mailbox (the coordinator's refusal of host-side FIFOs is unit
    // tested). Everything else must have been taken.
    let left: Vec<_> = text(&out.stdout)
        .lines()
        .filter(|l| *l != "fifo.req")
        .map(str::to_string)
        .collect();
    assert!(left.is_empty(), "the mailbox was not emptied: {left:?}");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap_or_default(),
        "x\n",
        "exactly the one valid request may run"
    );
    let log = log(&ws);
    for (entry, why) in [
        ("replayed.req", "replayed"),
        ("anchor.req", "Session Anchor"),
        ("session.req", "no such Client Session"),
        ("sig.req", "signature"),
        ("stale.req", "signature"),
        ("link.req", "symbolic link"),
        ("big.req", "over the limit"),
        ("trunc.req", "signature"),
        ("garbage.req", "shorter"),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("\"entry\":\"{entry}\"")) && l.contains(why)),
            "{entry} was not refused for {why:?}: {log}"
        );
    }
}

#[test]
fn cancellation_and_session_loss_stop_the_host_command() {
    let env = require_env!();
    let ws = env.workspace("esc-cancel");
    let pidfile = ws.base.join("pid");
    let cmd = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    rules(
        &ws,
        &format!("[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/sh\", \"-c\", \"{cmd}\"]\n"),
    );
    let host_alive = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .map(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    // Ctrl-C (SIGINT) in lazaret-escalate.
    let out = ws.run_sh(&format!(
        "lazaret-escalate -- /bin/sh -c '{cmd}' & p=$!; \
         sleep 2; kill -INT $p; wait $p; echo rc=$?"
    ));
    assert!(
        text(&out.stdout).contains("rc=130"),
        "{} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        eventually(Duration::from_secs(10), || host_alive(&pidfile)
            == Some(false)),
        "the host command outlived its cancelled request"
    );
    assert_domain_gone(&ws.domain_id("default"));
    // The session ends while the command runs.
    std::fs::remove_file(&pidfile).unwrap();
    let out = ws.run_sh(&format!(
        "lazaret-escalate -- /bin/sh -c '{cmd}' >/dev/null 2>&1 & sleep 2; exit 0"
    ));
    assert!(out.status.success());
    assert!(host_alive(&pidfile).is_some(), "the command never started");
    assert!(
        eventually(Duration::from_secs(10), || host_alive(&pidfile)
            == Some(false)),
        "the host command outlived its session"
    );
    assert_domain_gone(&ws.domain_id("default"));
    // Cancelled, then ended with its session: as the lifecycle model allows.
    lazaret_tests::assert_lifecycle_replays(&ws.domain_root("default"));
}

#[test]
fn lazaret_escalate_runs_in_a_busybox_only_image() {
    let env = require_env!();
    let ws = env.workspace("esc-busybox");
    // A busybox-static rootfs and nothing else: no C library, no loader.
    let out = env.sh(&format!(
        "cd '{b}' && cat > mkoci.py <<'LAZARET_MKOCI_EOF'\n{m}\nLAZARET_MKOCI_EOF\npython3 mkoci.py layout bb",
        b = ws.base.display(),
        m = include_str!("mkoci.py")
    ));
    assert!(out.status.success(), "mkoci.py: {}", text(&out.stderr));
    ws.write_config(&format!(
        "[profiles.default]\nimage = \"oci:{}/layout:bb\"\n\n\
         [[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/echo\", \"hi from the host\"]\n",
        ws.base.display()
    ));
    let out = ws.run_sh(
        "ls /lib /lib64 /usr/lib 2>/dev/null | grep -c 'ld-linux\\|libc\\.' ; \
         lazaret-escalate -- /bin/echo 'hi from the host'; echo rc=$?",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "0\nhi from the host\nrc=0\n",
        "stderr: {}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));
}

#[test]
fn requests_are_asked_only_at_their_own_sessions_terminal_with_the_claimed_asker() {
    let env = require_env!();
    let ws = env.workspace("esc-bind");
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(20);
    let mut a = Pty::new();
    let mut ca = a.spawn(&ws, &["run"]);
    let mut at = a.expect(0, "/workspace#", long);
    // The limit the README states: from inside, root reads every
    // session's environment, Session Anchors included (A's and its own).
    let out = ws.run_sh(
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep '^LAZARET_SESSION_ANCHOR=' | sort -u | wc -l",
    );
    assert_eq!(text(&out.stdout).trim(), "2", "{}", text(&out.stderr));
    // A session that ends, leaving its Session ID and Session Anchor
    // behind (any process inside could read them from its environment).
    let out = ws.run_sh("echo \"$LAZARET_SESSION_ID $LAZARET_SESSION_ANCHOR\" > /tmp/ended");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A session without a terminal asks, then asks in the ended session's
    // name: nobody is asked, each gets a result at once (on a hang,
    // `timeout` ends it with 124).
    let out = ws.run_sh(
        "lazaret-escalate -- /bin/echo from-notty; echo rc=$?; \
         read id anchor < /tmp/ended; \
         LAZARET_SESSION_ID=$id LAZARET_SESSION_ANCHOR=$anchor timeout 60 lazaret-escalate -- /bin/echo from-ended; echo rc=$?",
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "rc=77\nrc=77\n", "{err}");
    assert!(err.contains("has no terminal"), "{err}");
    assert!(err.contains("no such Client Session"), "{err}");
    assert!(
        err.contains("another session's terminal is never asked"),
        "{err}"
    );
    // Session A's terminal never showed either request.
    a.send("echo marker-$((6*7))\r");
    at = a.expect(at, "marker-42", short);
    let seen = text(&a.seen.lock().unwrap());
    assert!(!seen.contains("Host Escalation request"), "{seen}");
    assert!(
        !seen.contains("from-notty") && !seen.contains("from-ended"),
        "{seen}"
    );
    let log = log(&ws);
    assert!(
        log.lines()
            .any(|l| l.contains("no such Client Session") && l.contains("\"event\":\"refused\"")),
        "{log}"
    );

    // At A's own terminal: the asking process as the request claims it,
    // never "this terminal".
    a.send("printf 'lazaret-escalate -- /bin/echo one\\necho done-$?\\n' > /tmp/ask.sh; sh /tmp/ask.sh claimed-AAA\r");
    at = a.expect(at, "Host Escalation request", short);
    at = a.expect(at, " (as the request names it)\r\n", short);
    at = a.expect(at, "  asked by:      (claimed) pid ", short);
    at = a.expect(at, " \"sh\" \"/tmp/ask.sh\" \"claimed-AAA\"\r\n", short);
    at = a.expect(at, "[a]pprove", short);
    a.send("a");
    a.expect(at, "one\r\ndone-0", short);
    assert!(!text(&a.seen.lock().unwrap()).contains("this terminal"));
    a.send("exit\r");
    assert_eq!(wait(&mut ca, short), Some(0));
    let log = self::log(&ws);
    assert!(
        log.contains("\"requester_cmdline\":[\"sh\",\"/tmp/ask.sh\",\"claimed-AAA\"]"),
        "{log}"
    );
}

/// Threads and resident memory (KiB) of a process, from /proc.
fn threads_and_rss(pid: i32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("Threads:")?, field("VmRSS:")?))
}

/// The Domain's process whose command line names `binary`.
fn domain_process(domain_id: &str, binary: &str) -> Option<i32> {
    lazaret_tests::processes_mentioning(domain_id)
        .into_iter()
        .find(|(_, c)| c.split(' ').next().is_some_and(|p| p.ends_with(binary)))
        .map(|(p, _)| p)
}

/// The coordinator's threads: a few of its own, a few per Client Session
/// (two here), and at most three per pending Escalation Request.
const COORDINATOR_THREADS: u64 = 16 + 6 * 2 + 3 * 64;
/// The router's threads: its FUSE workers (2) and a few of its own.
const ROUTER_THREADS: u64 = 8;
/// Resident memory bounds asserted for each, in KiB.
const COORDINATOR_RSS_KIB: u64 = 128 * 1024;
const ROUTER_RSS_KIB: u64 = 128 * 1024;
/// `lazaret_protocol::escalation::bounds::MAX_PENDING_PER_SESSION`.
const PENDING_PER_SESSION: usize = 16;

#[test]
fn a_flood_from_inside_stays_within_the_bounds_and_others_keep_working() {
    let env = require_env!();
    let ws = env.workspace("esc-flood");
    // A tracked directory whose rules the flood makes too large.
    let out = ws
        .host_sh("mkdir deep && echo host > deep/kept.txt && git add deep && git commit -qm deep");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A marker no other test's command has.
    rules(
        &ws,
        "[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/sleep\", \"29.123\"]\n",
    );
    let domain = ws.domain_id("default");
    let flood = r#"
        set -u
        # Huge rules files: one over the per-file bound, many near it.
        seq 1 400000 | sed 's/^/x/' > /workspace/deep/.gitignore
        test -e /workspace/deep/kept.txt && echo deep-visible || echo deep-hidden
        for i in $(seq 30); do
            mkdir -p /workspace/r$i && seq 1 19000 | sed 's/^/y/' > /workspace/r$i/.gitignore
            ls /workspace/r$i/ > /dev/null
        done
        # Thousands of signed requests, each published by rename, from
        # four writers at once.
        R=/.lazaret/mailbox/requests
        for j in 1 2 3 4; do
            for i in $(seq $j 4 2000); do
                lazaret-escalate --write-request-to $R/.f$i -- /bin/sleep 29.123 \
                    && mv $R/.f$i $R/f$i || echo write-failed
            done &
        done
        wait
        # Hundreds of concurrent clients.
        for i in $(seq 300); do
            (lazaret-escalate -- /bin/sleep 29.123 > /dev/null 2>&1; echo $? >> /tmp/codes) &
        done
        wait
        sort /tmp/codes | uniq -c | while read n code; do echo "code $code x $n"; done
    "#;
    let mut a = ws
        .lazaret(&["run", "--", "sh", "-c", flood])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // Sample the coordinator, the router and the host commands while the
    // flood runs.
    let (mut coord_max, mut router_max) = ((0u64, 0u64), (0u64, 0u64));
    let mut sleeps_max = 0usize;
    let mut other_session: Option<std::process::Output> = None;
    while a.try_wait().unwrap().is_none() {
        if let Some((t, r)) =
            domain_process(&domain, "lazaret-coordinator").and_then(threads_and_rss)
        {
            coord_max = (coord_max.0.max(t), coord_max.1.max(r));
        }
        if let Some((t, r)) =
            domain_process(&domain, "lazaret-mount-router").and_then(threads_and_rss)
        {
            router_max = (router_max.0.max(t), router_max.1.max(r));
        }
        let sleeps = lazaret_tests::processes_mentioning("sleep 29.123")
            .iter()
            .filter(|(_, c)| c.starts_with("/bin/sleep"))
            .count();
        sleeps_max = sleeps_max.max(sleeps);
        // While requests are pending, another session runs and escalates.
        if sleeps > 0 && other_session.is_none() {
            other_session = Some(ws.run_sh("lazaret-escalate -- /bin/echo hi; echo rc=$?"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = a.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    eprintln!(
        "flood: coordinator max {} threads, {} KiB; router max {} threads, {} KiB; {} host commands at once\n{stdout}",
        coord_max.0, coord_max.1, router_max.0, router_max.1, sleeps_max
    );
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        coord_max.0 > 0 && router_max.0 > 0,
        "the processes were not found"
    );
    assert!(
        coord_max.0 <= COORDINATOR_THREADS,
        "coordinator threads: {}",
        coord_max.0
    );
    assert!(
        coord_max.1 <= COORDINATOR_RSS_KIB,
        "coordinator RSS: {} KiB",
        coord_max.1
    );
    assert!(
        router_max.0 <= ROUTER_THREADS,
        "router threads: {}",
        router_max.0
    );
    assert!(
        router_max.1 <= ROUTER_RSS_KIB,
        "router RSS: {} KiB",
        router_max.1
    );
    assert!(
        sleeps_max <= PENDING_PER_SESSION,
        "{sleeps_max} host commands of one session at once"
    );
    // The rules file over its bound hides its directory, and says so once.
    assert!(stdout.contains("deep-hidden"), "{stdout}");
    let clog =
        std::fs::read_to_string(ws.domain_root("default").join("helpers.log")).unwrap_or_default();
    assert_eq!(
        clog.lines()
            .filter(|l| l.contains("\"deep/.gitignore\""))
            .count(),
        1,
        "{clog}"
    );
    // The excess was refused (75) at once, never run, never hung.
    assert!(!stdout.contains("write-failed"), "{stdout}");
    let codes: Vec<&str> = stdout.lines().filter(|l| l.starts_with("code ")).collect();
    assert!(
        codes
            .iter()
            .all(|l| l.starts_with("code 0 ") || l.starts_with("code 75 ")),
        "{codes:?}"
    );
    assert!(codes.iter().any(|l| l.starts_with("code 75 ")), "{codes:?}");
    let log = log(&ws);
    assert!(
        log.lines()
            .any(|l| l.contains("\"event\":\"refused\"") && l.contains("are pending")),
        "no refusal for the pending bound"
    );
    // Another session worked during the flood, and the Domain is alive.
    let other = other_session.expect("requests were never pending");
    assert_eq!(text(&other.stdout), "hi\nrc=0\n", "{}", text(&other.stderr));
    let out = ws.run_sh("lazaret-escalate -- /bin/echo hi; echo rc=$?");
    assert_eq!(text(&out.stdout), "hi\nrc=0\n", "{}", text(&out.stderr));
}

/// Issue 26, item 6: an auto-approval rule with trailing arguments (the
/// README's own `git fetch`) never lets the sandbox add an option the rule
/// does not list. `--upload-pack=CMD` makes `git fetch` run CMD on the
/// host; added after the rule's vector, anywhere, it is not auto-approved:
/// without a terminal nobody is asked (denied), at a terminal the prompt
/// asks. Plain arguments and the options the rule lists still run unasked.
/// On the code before, the first request ran CMD with no prompt.
#[test]
fn trailing_arguments_never_let_the_sandbox_add_options() {
    let env = require_env!();
    let ws = env.workspace("esc-trailing");
    let marker = ws.base.join("PWNED");
    let m = marker.display().to_string();
    // The README's example, as written.
    let readme =
        "[[profiles.default.escalation.auto_approve]]\nargv = [\"git\", \"fetch\"]\ntrailing_args = true\n";
    ws.write_config(readme);
    let cmd = format!("lazaret-escalate -- git fetch --upload-pack='touch {m}; git-upload-pack' .");
    let out = ws.run_sh(&cmd);
    assert!(!marker.exists(), "{cmd} ran on the host with no prompt");
    assert_eq!(out.status.code(), Some(77), "{cmd}: {}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));
    // With options the rule lists.
    ws.write_config(&format!("{readme}trailing_options = [\"--quiet\"]\n"));
    for cmd in [
        format!("lazaret-escalate -- git fetch --upload-pack='touch {m}; git-upload-pack' ."),
        format!("lazaret-escalate -- git fetch . --upload-pack='touch {m}; git-upload-pack'"),
        format!("lazaret-escalate -- git fetch --quiet -u 'touch {m}; git-upload-pack' ."),
    ] {
        let out = ws.run_sh(&cmd);
        assert_eq!(out.status.code(), Some(77), "{cmd}: {}", text(&out.stderr));
        assert!(!marker.exists(), "{cmd} ran on the host with no prompt");
    }
    let log = std::fs::read_to_string(ws.domain_root("default").join("coordinator.log")).unwrap();
    assert!(
        log.contains(
            "auto-approval rule 1 does not apply: the sandbox added `--upload-pack=touch "
        ),
        "{log}"
    );
    // What the rule allows still runs unasked.
    for cmd in [
        "lazaret-escalate -- git fetch .",
        "lazaret-escalate -- git fetch --quiet . HEAD",
    ] {
        let out = ws.run_sh(cmd);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", text(&out.stderr));
    }

    // At a terminal, the request is asked about, like one no rule matches.
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(15);
    let mut at = pty.expect(0, "/workspace#", long);
    pty.send(&format!(
        "lazaret-escalate -- git fetch --upload-pack='touch {m}; git-upload-pack' .; echo rc=$?\r"
    ));
    at = pty.expect(at, "[a]pprove", short);
    pty.send("d");
    at = pty.expect(at, "rc=77", short);
    pty.send("exit\r");
    let _ = at;
    assert_eq!(wait(&mut child, short), Some(0));
    assert!(!marker.exists(), "the denied request ran");
}
