//! `lazaret run` under a real pseudo-terminal.

use lazaret_tests::pty::{wait, Pty};
use lazaret_tests::{require_env, text};
use std::time::{Duration, Instant};

fn same_modes(a: &nix::sys::termios::Termios, b: &nix::sys::termios::Termios) -> bool {
    a.input_flags == b.input_flags
        && a.output_flags == b.output_flags
        && a.control_flags == b.control_flags
        && a.local_flags == b.local_flags
        && a.control_chars == b.control_chars
}

#[test]
fn interactive_shell_prompt_resize_interrupt_and_restore() {
    let env = require_env!();
    let ws = env.workspace("pty");
    let mut pty = Pty::new();
    let before = pty.modes();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(10);
    let mut at = pty.expect(0, "/workspace#", long);

    pty.send("stty size; echo term=$TERM\r");
    at = pty.expect(at, "24 80", short);
    at = pty.expect(at, "term=xterm", short);
    assert!(
        !same_modes(&before, &pty.modes()),
        "the host terminal was not put in raw mode"
    );

    // A resize of the host terminal reaches the sandbox's PTY.
    rustix::termios::tcsetwinsize(
        &pty.master,
        rustix::termios::Winsize {
            ws_row: 40,
            ws_col: 132,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    pty.send("stty size\r");
    at = pty.expect(at, "40 132", short);

    // Ctrl-C reaches the foreground process group inside.
    pty.send("sleep 30; echo slept-$((40+2))\r");
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    pty.send("\x03");
    // Wait for the prompt: readline drops what is typed while it resets.
    at = pty.expect(at, "^C", short);
    at = pty.expect(at, "/workspace# ", short);
    pty.send("echo rc=$?\r");
    at = pty.expect(at, "rc=130", short);
    assert!(sent.elapsed() < Duration::from_secs(10));
    assert!(!text(&pty.seen.lock().unwrap()).contains("slept-42"));

    // Ctrl-\ quits and Ctrl-Z stops the foreground job inside.
    pty.send("sleep 32\r");
    std::thread::sleep(Duration::from_millis(1500));
    pty.send("\x1c");
    at = pty.expect(at, "Quit", short);
    at = pty.expect(at, "/workspace# ", short);
    pty.send("echo q=$?\r");
    at = pty.expect(at, "q=131", short);
    pty.send("sleep 33\r");
    std::thread::sleep(Duration::from_millis(1500));
    pty.send("\x1a");
    at = pty.expect(at, "Stopped", short);
    at = pty.expect(at, "/workspace# ", short);
    pty.send("jobs -s | wc -l | sed s/^/stopped=/\r");
    at = pty.expect(at, "stopped=1", short);
    pty.send("kill -9 %1; wait %1; echo z=$((1+1))\r");
    at = pty.expect(at, "z=2", short);
    // Let bash notice the job's end, or `exit` says "There are stopped jobs".
    pty.send("jobs; echo j=$((2+2))\r");
    at = pty.expect(at, "j=4", short);

    pty.send("exit 5\r");
    // bash refuses the first `exit` if it still lists a stopped job.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut resent = false;
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if !resent && text(&pty.seen.lock().unwrap()[at..]).contains("stopped jobs") {
            pty.send("exit 5\r");
            resent = true;
        }
        assert!(Instant::now() < deadline, "lazaret did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(5));
    assert!(
        same_modes(&before, &pty.modes()),
        "terminal modes differ after exit"
    );
}

#[test]
fn terminal_is_untouched_when_start_up_fails() {
    let env = require_env!();
    let ws = env.workspace("pty-fail");
    ws.write_config("[profiles.default]\nimage = 5\n");
    let pty = Pty::new();
    let before = pty.modes();
    let mut child = pty.spawn(&ws, &["run"]);
    assert_eq!(wait(&mut child, Duration::from_secs(30)), Some(125));
    pty.expect(0, "error", Duration::from_secs(5));
    assert!(same_modes(&before, &pty.modes()));
}

#[test]
fn a_terminal_type_the_image_has_no_terminfo_for_falls_back_with_a_note() {
    let env = require_env!();
    let ws = env.workspace("pty-term");
    let short = Duration::from_secs(60);
    // kitty's own name: the default image (bookworm's ncurses-term) has
    // `kitty`, not `xterm-kitty`.
    for (term, want, note) in [
        ("xterm-kitty", "xterm-256color", true),
        ("kitty", "kitty", false),
        ("alacritty", "alacritty", false),
    ] {
        let pty = Pty::new();
        let mut child = pty.spawn_term(
            &ws,
            &[
                "run",
                "--",
                "sh",
                "-c",
                "echo term=$TERM cols=$(tput cols) rc=$?",
            ],
            term,
        );
        let at = pty.expect(0, &format!("term={want} cols=80 rc=0"), short);
        assert_eq!(wait(&mut child, short), Some(0));
        let seen = text(&pty.seen.lock().unwrap()[..at]);
        let noted = seen.contains(&format!(
            "lazaret: note: the image has no terminfo for TERM={term}: using TERM=xterm-256color"
        ));
        assert_eq!(noted, note, "{term}: {seen:?}");
        assert!(!seen.contains("unknown terminal"), "{term}: {seen:?}");
    }
}
