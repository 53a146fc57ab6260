//! The Host Escalation prompt at the requesting session's terminal (DX-4).
//!
//! While it is shown, the coordinator has paused the session's sandbox
//! output, and this CLI routes keystrokes to the prompt instead of the
//! sandbox, so nothing of the session mixes in.
//!
//! Which process asked is the request's claim, shown as such: every
//! process inside is root and can read every session's Session Anchor, so
//! neither the session nor the process is proven (see the README's
//! security model); the prompt never says "this terminal" asked.
//!
//! The layout is fixed ([`render`]) and the request cannot imitate it
//! (SR-7): every field the sandbox supplied (the process it claims asked,
//! its directory, the justification, the argument vector) goes through
//! [`lazaret_protocol::display`], so no control byte reaches the terminal
//! and no field can span lines; the claimed process, the justification
//! and the sandbox directory are bounded to one terminal row each, cut with a marker; the
//! host directory the command runs in is shown; the argument vector, every
//! argument quoted, is the last line, immediately before the question. An
//! edit is parsed with shell quoting rules (`shlex`), and what is approved
//! is the exact vector shown last.

use lazaret_protocol::display;
use lazaret_protocol::escalation::Requester;
use lazaret_protocol::session::{EscalationPrompt, ServerMsg};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where keystrokes go: to the sandbox (`None`) or to the prompt.
pub type KeyRoute = Arc<Mutex<Option<Sender<Vec<u8>>>>>;

pub type Event = Result<ServerMsg, String>;

fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.replace('\n', "\r\n").as_bytes());
    let _ = o.flush();
}

pub fn show_argv(argv: &[String]) -> String {
    display::argv(argv)
}

/// Columns of a bounded field after its 17-column label: one row of an
/// 80-column terminal.
pub const FIELD_COLUMNS: usize = 60;

/// The question, always the line right after the command.
pub const QUESTION: &str = "Run it on the host? [a]pprove [d]eny [e]dit: ";

/// Lazaret's own sequence before the prompt: the sandbox's output, shown
/// raw until the coordinator paused it, may have left the terminal drawing
/// invisible or recoloured text, in the line-drawing character set, or in
/// insert mode. Attributes reset (SGR 0), G0 ASCII and selected, insert
/// mode off, autowrap and the cursor on: the prompt is shown as written.
pub const SANE: &str = "\x1b[0m\x1b(B\x0f\x1b[4l\x1b[?7h\x1b[?25h";

/// The prompt's fixed layout: the coordinator's fields first, then the
/// sandbox's bounded ones, then the command last. The question follows it
/// at once.
pub fn render(p: &EscalationPrompt) -> String {
    format!(
        "{SANE}\n── lazaret: Host Escalation request ──\n  profile:       {}\n  session:       {} (as the request names it)\n  asked by:      {}\n  justification: {}\n  sandbox cwd:   {}\n  runs on host:  in {}\n  command:       {}\n",
        display::escape(&p.profile),
        display::escape(&p.session_id[..p.session_id.len().min(12)]),
        claimed(&p.requester),
        display::bounded(&p.justification, FIELD_COLUMNS),
        display::bounded(&p.cwd, FIELD_COLUMNS),
        display::escape(&p.host_dir),
        show_argv(&p.argv),
    )
}

/// The process the request claims asked: `(claimed) pid N "arg" ...`, in
/// one bounded row.
pub fn claimed(r: &Requester) -> String {
    let head = format!("(claimed) pid {} ", r.pid);
    let room = FIELD_COLUMNS.saturating_sub(head.len());
    format!("{head}{}", display::bounded_argv(&r.cmdline, room))
}

/// The edit line's starting text: the vector in shell quoting, unless an
/// argument holds a character that would reach the terminal raw (then the
/// developer types the command afresh).
fn edit_initial(argv: &[String]) -> Option<String> {
    if argv.iter().all(|a| display::is_plain(a)) {
        shlex::try_join(argv.iter().map(String::as_str)).ok()
    } else {
        None
    }
}

enum Key {
    Bytes(Vec<u8>),
    Withdrawn,
}

struct Input<'a> {
    keys: Receiver<Vec<u8>>,
    events: &'a Receiver<Event>,
    backlog: &'a mut VecDeque<Event>,
    request_id: &'a str,
}

impl Input<'_> {
    fn next(&mut self) -> Key {
        loop {
            match self.keys.recv_timeout(Duration::from_millis(30)) {
                Ok(b) => return Key::Bytes(b),
                Err(RecvTimeoutError::Disconnected) => return Key::Withdrawn,
                Err(RecvTimeoutError::Timeout) => {}
            }
            while let Ok(ev) = self.events.try_recv() {
                match ev {
                    Ok(ServerMsg::PromptWithdrawn { request_id })
                        if request_id == self.request_id =>
                    {
                        return Key::Withdrawn
                    }
                    Err(e) => {
                        self.backlog.push_back(Err(e));
                        return Key::Withdrawn;
                    }
                    other => self.backlog.push_back(other),
                }
            }
        }
    }

    /// A line, edited in place (the terminal is raw).
    fn line(&mut self, initial: &str) -> Option<String> {
        let mut buf: Vec<char> = initial.chars().collect();
        out(initial);
        loop {
            let Key::Bytes(bytes) = self.next() else {
                return None;
            };
            for ch in String::from_utf8_lossy(&bytes).chars() {
                match ch {
                    '\r' | '\n' => {
                        out("\n");
                        return Some(buf.into_iter().collect());
                    }
                    '\u{3}' => {
                        out("\n");
                        return None;
                    }
                    '\u{7f}' | '\u{8}' if !buf.is_empty() => {
                        buf.pop();
                        out("\u{8} \u{8}");
                    }
                    '\u{15}' => {
                        for _ in 0..buf.len() {
                            out("\u{8} \u{8}");
                        }
                        buf.clear();
                    }
                    c if !c.is_control() => {
                        buf.push(c);
                        let mut s = [0u8; 4];
                        out(c.encode_utf8(&mut s));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Asks the developer. `Some(Some(argv))`: approved (maybe edited);
/// `Some(None)`: denied; `None`: the request was withdrawn meanwhile.
pub fn ask(
    p: &EscalationPrompt,
    route: &KeyRoute,
    events: &Receiver<Event>,
    backlog: &mut VecDeque<Event>,
) -> Option<Option<Vec<String>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    *route.lock().unwrap() = Some(tx);
    let mut input = Input {
        keys: rx,
        events,
        backlog,
        request_id: &p.request_id,
    };
    out(&render(p));
    let mut argv = p.argv.clone();
    let decision = loop {
        out(QUESTION);
        let Key::Bytes(k) = input.next() else {
            out("\nwithdrawn: the request was cancelled\n");
            break None;
        };
        match k.first().map(|b| b.to_ascii_lowercase()) {
            Some(b'a') | Some(b'y') => {
                out(&format!(
                    "a\napproved: running {} on the host\n",
                    show_argv(&argv)
                ));
                break Some(Some(argv));
            }
            Some(b'd') | Some(b'n') | Some(3) | Some(4) => {
                out("d\ndenied\n");
                break Some(None);
            }
            Some(b'e') => {
                out("e\nedit the command (shell quoting; Enter to accept, Ctrl-C to keep it):\n");
                let initial = edit_initial(&argv).unwrap_or_else(|| {
                    out("(it holds control characters: type the command anew)\n");
                    String::new()
                });
                out("> ");
                match input.line(&initial) {
                    Some(line) => match shlex::split(&line) {
                        Some(v) if !v.is_empty() => {
                            argv = v;
                            out(&format!(
                                "  runs on host:  in {}\n  command:       {}\n",
                                display::escape(&p.host_dir),
                                show_argv(&argv)
                            ));
                        }
                        _ => out("cannot read that as a command; unchanged\n"),
                    },
                    None => out("unchanged\n"),
                }
            }
            _ => out("\n"),
        }
    };
    *route.lock().unwrap() = None;
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(cwd: &str, argv: &[&str], justification: &str) -> EscalationPrompt {
        EscalationPrompt {
            request_id: "r".into(),
            profile: "default".into(),
            session_id: "0123456789abcdef".into(),
            cwd: cwd.into(),
            host_dir: "/home/dev/src/proj".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            justification: justification.into(),
            requester: Requester {
                pid: 42,
                cmdline: argv.iter().rev().map(|s| s.to_string()).collect(),
            },
        }
    }

    const LABELS: [&str; 7] = [
        "  profile:       ",
        "  session:       ",
        "  asked by:      (claimed) pid 42 ",
        "  justification: ",
        "  sandbox cwd:   ",
        "  runs on host:  in ",
        "  command:       ",
    ];

    /// The layout every prompt has: a blank line, the title, one line per
    /// label in this order, the command last.
    fn assert_layout(text: &str, argv: &[String]) {
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines.len(), 10, "{text}");
        assert_eq!(lines[0], SANE, "the terminal's state is reset first");
        assert_eq!(lines[1], "── lazaret: Host Escalation request ──");
        for (line, label) in lines[2..9].iter().zip(LABELS) {
            assert!(line.starts_with(label), "{line:?} is not {label:?}");
            assert!(
                !line.chars().any(|c| c.is_control()),
                "a control character reached the terminal: {line:?}"
            );
        }
        assert_eq!(lines[8], format!("  command:       {}", show_argv(argv)));
        assert_eq!(lines[9], "", "nothing between the command and the question");
        assert!(!text.contains("this terminal"), "{text}");
        for l in &lines[2..7] {
            assert!(l.chars().count() <= 17 + FIELD_COLUMNS, "{l}");
        }
    }

    #[test]
    fn the_layout_is_fixed_whatever_the_request_says() {
        let hostile = [
            "\n  command:       \"/bin/true\"\nRun it on the host? [a]pprove",
            "\r  command:       \"/bin/true\"",
            "\x1b[2A\x1b[2K  command: \"/bin/true\"\x1b[1B",
            "\u{9b}2A\u{9b}2K fake",
            "\u{202e}eurt/nib/",
            &format!("{}  command:       \"/bin/true\"", " ".repeat(70)),
            &"x".repeat(70_000),
            "",
        ];
        for j in hostile {
            for cwd in [j, "/workspace"] {
                let argv = ["/bin/rm", "-rf", j, "\x1b]0;title\x07", "a\nb"];
                let p = prompt(cwd, &argv, j);
                assert_layout(&render(&p), &p.argv);
            }
        }
    }

    #[test]
    fn long_justifications_are_cut_with_a_marker() {
        let p = prompt("/workspace", &["true"], &"why ".repeat(100));
        let r = render(&p);
        let line = r
            .lines()
            .find(|l| l.starts_with("  justification:"))
            .unwrap();
        assert!(line.contains("…[cut "), "{line}");
        assert!(r.contains("  runs on host:  in /home/dev/src/proj\n"));
    }

    #[test]
    fn vectors_with_control_characters_are_not_put_on_the_edit_line() {
        assert_eq!(
            edit_initial(&["echo".into(), "a b".into()]).as_deref(),
            Some("echo 'a b'")
        );
        assert_eq!(edit_initial(&["echo".into(), "\x1b[2J".into()]), None);
        assert_eq!(edit_initial(&["echo".into(), "\u{9b}J".into()]), None);
    }

    #[test]
    fn the_asking_process_is_shown_as_claimed_escaped_and_bounded() {
        let r = Requester {
            pid: 7,
            cmdline: vec!["bash".into(), "-c".into(), "\x1b[2J".repeat(40)],
        };
        let c = claimed(&r);
        assert!(
            c.starts_with(r#"(claimed) pid 7 "bash" "-c" "\x1b[2J"#),
            "{c}"
        );
        assert!(c.contains("…[cut "), "{c}");
        assert!(c.chars().count() <= FIELD_COLUMNS, "{c}");
        assert!(!c.chars().any(|ch| ch.is_control()), "{c}");
        let empty = claimed(&Requester::default());
        assert_eq!(empty, "(claimed) pid 0 ");
    }

    #[test]
    fn arguments_are_shown_quoted_with_controls_visible() {
        let v = vec![
            "rm".to_string(),
            "a b".into(),
            "x\ny".into(),
            "\u{1b}[2J".into(),
        ];
        assert_eq!(show_argv(&v), r#""rm" "a b" "x\ny" "\x1b[2J""#);
    }
}
