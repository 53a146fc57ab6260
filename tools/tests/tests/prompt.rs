//! The Host Escalation prompt against the terminal state the sandbox's
//! output leaves: a process inside first sets every mode that changes
//! where or how text appears or what a key sends, draws a fake prompt
//! with a harmless command, asks the terminal for reports, leaves a
//! sequence unfinished, and only then asks for the real command. What the
//! developer sees is checked on two terminal emulators: pyte fed the exact
//! bytes the test's terminal received, and a live tmux session.

use lazaret_tests::pty::{wait, Pty};
use lazaret_tests::{eventually, require_env, skip, text, Workspace};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The command the sandbox really asks for, and the harmless one its fake
/// prompt shows.
const REAL: &str = r#""/usr/bin/touch" "real-ran""#;
const FAKE: &str = "/bin/true";

/// The question the real prompt must ask.
fn real_question() -> String {
    format!("Run {REAL} on the host? [a]pprove [d]eny [e]dit:")
}

/// The attacker's script, run by `sh` inside from the workspace.
const ATTACK: &str = r#"#!/bin/sh
# A full-screen program redraws when its size changes.
trap 'echo redraw-asked-$((6*7))' WINCH
# A fake prompt with a harmless command, on the alternate screen.
printf '\033[?1049h\033[2J\033[H'
printf -- '-- lazaret: Host Escalation request --\r\n'
printf '  profile:       default\r\n  session:       0123456789ab (as the request names it)\r\n'
printf '  asked by:      (claimed) pid 1 "sh"\r\n  justification: routine\r\n'
printf '  sandbox cwd:   /workspace\r\n  runs on host:  in /home\r\n'
printf '  command:       "/bin/true"\r\n'
printf 'Run "/bin/true" on the host? [a]pprove [d]eny [e]dit: \r\n'
printf '%s\r\n' 'Run it on the host? [a]pprove [d]eny [e]dit: ("/bin/true")'
# Where text goes: a scroll region of three rows, origin mode, left and
# right margins, insert mode, the cursor moved and hidden, no autowrap,
# one tab stop.
printf '\033[3;5r\033[?6h\033[?69h\033[30;60s\033[4h\033[2;3H\033[?25l\033[?7l'
printf '\033[3g\033[1;9H\033H\033[2;3H'
# How it looks: DEC line drawing in G0 and G1 (shifted in), invisible,
# reversed, black on black, default colours the same, reverse video.
printf '\033(0\033)0\016\033[8;7;30;40m\033]10;#000000\007\033]11;#000000\007\033[?5h'
# What keys send: bracketed paste, application cursor keys and keypad,
# mouse reports, kitty keyboard flags, modifyOtherKeys.
printf '\033[?2004h\033[?1h\033=\033[?1000h\033[?1006h\033[>1u\033[>4;2m'
# Reports the terminal will send back: cursor position, status,
# DECRQSS, title, device attributes, background colour.
printf '\033[6n\033[5n\033P$qm\033\\\033[21t\033[c\033[>c\033]11;?\007'
# A synchronized update begun, and a sequence left unfinished.
printf '\033[?2026h\033[1;'
lazaret-escalate --justification routine -- /usr/bin/touch real-ran
rc=$?
sleep 1
exit $rc
"#;

fn write_attack(ws: &Workspace) {
    let out = ws.host_sh(&format!(
        "cat > attack.sh <<'LAZARET_EOF'\n{ATTACK}LAZARET_EOF\n"
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `/usr/bin/python3` with Debian's python3-pyte, or a skip (a failure
/// under `LAZARET_TESTS_MUST_RUN=1`).
fn pyte() -> Option<&'static str> {
    let py = "/usr/bin/python3";
    let ok = Command::new(py)
        .args(["-c", "import pyte"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    skip("python3-pyte is not installed (scripts/test installs it)");
    None
}

/// Feeds `bytes` to a pyte screen of 24 by 80 and returns its rows
/// (right-trimmed), then one line of what else it knows: the cursor, its
/// modes, and the cells of the prompt's rows that are not drawn plain.
const PYTE: &str = r#"
import sys, pyte
from pyte import modes
screen = pyte.Screen(80, 24)
pyte.ByteStream(screen).feed(sys.stdin.buffer.read())
for row in screen.display:
    print(row.rstrip())
odd = []
header = set()
for y in range(24):
    for x in range(80):
        c = screen.buffer[y][x]
        style = f"{c.fg}/{c.bg}/bold={c.bold}/reverse={c.reverse}"
        if y == 0 and c.data != " ":
            header.add(style)
        elif c.data != " " and (c.reverse or c.fg != "default" or c.bg != "default"):
            odd.append(f"{x},{y}")
flags = {"DECSCNM": modes.DECSCNM, "DECOM": modes.DECOM, "IRM": modes.IRM, "DECTCEM": modes.DECTCEM, "DECAWM": modes.DECAWM}
on = [k for k, v in flags.items() if v in screen.mode]
print(f"cursor={screen.cursor.x},{screen.cursor.y} hidden={screen.cursor.hidden} margins={screen.margins} charset={screen.charset} modes={','.join(sorted(on))} header={' '.join(sorted(header))} odd={' '.join(odd[:20])}")
"#;

fn pyte_screen(py: &str, bytes: &[u8]) -> (Vec<String>, String) {
    use std::io::Write;
    let mut child = Command::new(py)
        .args(["-c", PYTE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pyte: {}", text(&out.stderr));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let state = lines.pop().unwrap();
    (lines, state)
}

/// What the developer must see, whatever was printed before: the prompt
/// from the top row, in its order, with the real command on the command
/// row and on the question row right after it, and nothing else on the
/// screen. Returns the question's row.
fn assert_screen(screen: &[String], what: &str) -> usize {
    let all = screen.join("\n");
    assert!(
        !all.contains(FAKE),
        "{what}: the fake command is on the screen:\n{all}"
    );
    let labels = [
        "-- lazaret: Host Escalation request --",
        "  profile:       default",
        "  session:       ",
        "  asked by:      (claimed) pid ",
        "  justification: routine",
        "  sandbox cwd:   /workspace",
        "  runs on host:  in /",
        "  host env:      PATH (yours)",
    ];
    for (i, label) in labels.iter().enumerate() {
        assert!(
            screen[i].starts_with(label),
            "{what}: row {i} should start with {label:?}:\n{all}"
        );
    }
    assert_eq!(
        screen[8],
        format!("  command:       {REAL}"),
        "{what}: the command row:\n{all}"
    );
    assert_eq!(
        screen[9].trim_end(),
        real_question(),
        "{what}: the question row:\n{all}"
    );
    for (i, row) in screen.iter().enumerate().skip(10) {
        assert!(
            row.trim().is_empty(),
            "{what}: row {i} is not blank:\n{all}"
        );
    }
    9
}

#[test]
fn a_prompt_after_hostile_output_shows_the_real_command() {
    let env = require_env!();
    let Some(py) = pyte() else { return };
    let ws = env.workspace("prompt-attack");
    write_attack(&ws);
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(20);
    let mut at = pty.expect(0, "/workspace#", long);
    pty.send("sh attack.sh; echo rc=$?\r");
    // The fake prompt's question, then the real prompt's.
    at = pty.expect(at, "[a]pprove [d]eny [e]dit: \r", short);
    at = pty.expect(at, "[a]pprove [d]eny [e]dit: ", short);
    at = pty.expect(at, "[a]pprove [d]eny [e]dit: ", short);
    // Whatever else is on its way (nothing is, the prompt is waiting).
    std::thread::sleep(Duration::from_millis(500));
    let seen = pty.seen.lock().unwrap().clone();
    let (screen, state) = pyte_screen(py, &seen);
    let row = assert_screen(&screen, "pyte");
    // The cursor right after the question, the whole screen as the
    // scroll region, ASCII, autowrap and the cursor on, no insert, origin
    // or reverse-video mode, the header in Lazaret's one colour (bold
    // yellow: the terminal is one, NO_COLOR unset) and every other cell
    // drawn plain.
    let at_question = format!("cursor={},{row} hidden=False", real_question().len() + 1);
    let plain = "charset=0 modes=DECAWM,DECTCEM header=brown/default/bold=True/reverse=False odd=";
    assert!(
        [
            format!("{at_question} margins=None {plain}"),
            format!("{at_question} margins=Margins(top=0, bottom=23) {plain}"),
        ]
        .contains(&state),
        "pyte's state while the prompt waits: {state}"
    );
    assert!(!ws.path.join("real-ran").exists());

    pty.send("a");
    // The program on the alternate screen gets it back, and is made to
    // redraw.
    at = pty.expect(at, "\x1b[?1049h", short);
    at = pty.expect(at, "redraw-asked-42", short);
    at = pty.expect(at, "rc=0", short);
    assert!(
        ws.path.join("real-ran").exists(),
        "the approved command did not run"
    );
    let _ = at;
    // What the terminal answered to the script's requests may still wait
    // in the shell's line: Ctrl-U clears it.
    pty.send("\x15exit\r");
    assert_eq!(wait(&mut child, short), Some(0));
}

/// A tmux server of its own, ended with the test.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap()
    }

    fn capture(&self) -> Vec<String> {
        let out = self.cmd(&["capture-pane", "-p", "-t", "lz"]);
        text(&out.stdout)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    fn format(&self, f: &str) -> String {
        text(&self.cmd(&["display-message", "-p", "-t", "lz", f]).stdout)
            .trim()
            .to_string()
    }

    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let mut last = Vec::new();
        let ok = eventually(timeout, || {
            last = self.capture();
            f(&last)
        });
        assert!(ok, "tmux never showed {what}:\n{}", last.join("\n"));
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// `lazaret run` in the workspace, as the test user would start it by
/// hand, for a shell command line.
fn shell_line(ws: &Workspace) -> String {
    let cmd = ws.lazaret(&["run"]);
    let q = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
    let mut line = format!("cd {} && exec env -i", q(ws.path.as_os_str()));
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            line.push_str(&format!(" {}={}", k.to_string_lossy(), q(v)));
        }
    }
    line.push(' ');
    line.push_str(&q(cmd.get_program()));
    for a in cmd.get_args() {
        line.push(' ');
        line.push_str(&q(a));
    }
    line
}

#[test]
fn a_prompt_after_hostile_output_shows_the_real_command_in_tmux() {
    let env = require_env!();
    if Command::new("tmux").arg("-V").output().is_err() {
        skip("tmux is not installed (scripts/setup-host installs it)");
        return;
    }
    let ws = env.workspace("prompt-tmux");
    write_attack(&ws);
    let tmux = Tmux {
        socket: ws.base.join("tmux.sock"),
    };
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "lz",
        "-x",
        "80",
        "-y",
        "24",
        &shell_line(&ws),
    ]);
    assert!(out.status.success(), "tmux: {}", text(&out.stderr));
    let long = Duration::from_secs(90);
    let short = Duration::from_secs(30);
    tmux.wait_for("the shell's prompt", long, |s| {
        s.iter().any(|l| l.contains("/workspace#"))
    });
    tmux.cmd(&["send-keys", "-t", "lz", "sh attack.sh; echo rc=$?", "Enter"]);
    let q = real_question();
    let screen = tmux.wait_for("the real question", short, |s| {
        s.iter().any(|l| l.contains("[a]pprove")) && !s.iter().any(|l| l.contains(FAKE))
            || s.iter().any(|l| l.starts_with(&q))
    });
    let row = assert_screen(&screen, "tmux");
    let flags = tmux.format(
        "alt=#{alternate_on} insert=#{insert_flag} origin=#{origin_flag} region=#{scroll_region_upper},#{scroll_region_lower} cursor=#{cursor_flag} wrap=#{wrap_flag} keys=#{keypad_cursor_flag},#{keypad_flag} mouse=#{mouse_any_flag} at=#{cursor_x},#{cursor_y}",
    );
    assert_eq!(
        flags,
        format!(
            "alt=0 insert=0 origin=0 region=0,23 cursor=1 wrap=1 keys=0,0 mouse=0 at={},{row}",
            q.len() + 1
        ),
        "tmux's state while the prompt waits"
    );
    assert!(!ws.path.join("real-ran").exists());
    tmux.cmd(&["send-keys", "-t", "lz", "a"]);
    assert!(
        eventually(short, || ws.path.join("real-ran").exists()),
        "the approved command did not run:\n{}",
        tmux.capture().join("\n")
    );
    // The session's program gets its screen and modes back.
    tmux.wait_for("rc=0", short, |s| s.iter().any(|l| l.contains("rc=0")));
    assert_eq!(
        tmux.format("#{alternate_on} #{keypad_cursor_flag} #{mouse_any_flag}"),
        "1 1 1"
    );
    tmux.cmd(&["send-keys", "-t", "lz", "C-u", "exit", "Enter"]);
}

#[test]
fn invisible_characters_in_the_request_are_shown_escaped() {
    let env = require_env!();
    let ws = env.workspace("prompt-invisible");
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(20);
    let mut at = pty.expect(0, "/workspace#", long);
    // From inside: a directory, a justification and arguments holding tag
    // characters, Hangul fillers, a soft hyphen, a combining mark, a
    // variation selector, a no-break space and a Cyrillic homoglyph.
    pty.send(concat!(
        r#"(d="$(printf '/tmp/d\302\255\343\205\244x')"; mkdir -p "$d" && cd "$d" && "#,
        r#"lazaret-escalate --justification "$(printf 'ok\363\240\201\201\363\240\201\202\314\201 p\320\260y')" "#,
        r#"-- echo "$(printf 'a\357\270\217\302\240b\341\205\237')"); echo rc=$?"#,
        "\r"
    ));
    let from = pty.expect(at, "Host Escalation request", short);
    at = pty.expect(from, "[a]pprove [d]eny [e]dit: ", short);
    let shown = text(&pty.seen.lock().unwrap()[from..at]);
    for want in [
        "  justification: ok\\u{e0041}\\u{e0042}\\u{301} p\\u{430}y\r\n",
        "  sandbox cwd:   /tmp/d\\u{ad}\\u{3164}x\r\n",
        "  command:       \"echo\" \"a\\u{fe0f}\\u{a0}b\\u{115f}\"\r\n",
        "Run \"echo\" \"a\\u{fe0f}\\u{a0}b\\u{115f}\" on the host? [a]pprove [d]eny [e]dit: ",
    ] {
        assert!(
            shown.contains(want),
            "{want:?} is not in the prompt: {shown:?}"
        );
    }
    for c in [
        '\u{e0041}',
        '\u{3164}',
        '\u{ad}',
        '\u{301}',
        '\u{fe0f}',
        '\u{a0}',
        '\u{115f}',
        '\u{430}',
    ] {
        assert!(
            !shown.contains(c),
            "{c:?} reached the terminal raw: {shown:?}"
        );
    }
    pty.send("d");
    pty.expect(at, "rc=77", short);
    pty.send("exit\r");
    assert_eq!(wait(&mut child, short), Some(0));
}
