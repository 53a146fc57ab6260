//! The Host Escalation prompt at the requesting session's terminal (DX-4).
//!
//! While it is shown, the coordinator has paused the session's sandbox
//! output, and this CLI routes keystrokes to the prompt instead of the
//! sandbox, so nothing of the session mixes in. The argument vector is
//! shown with every argument quoted and escaped, so spaces and control
//! characters are visible; an edit is parsed with shell quoting rules
//! (`shlex`), and what is approved is the exact vector shown last.

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
    argv.iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(" ")
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
    out(&format!(
        "\n── lazaret: Host Escalation request ──\n  profile:       {}\n  session:       {} (this terminal)\n  directory:     {}\n  command:       {}\n  justification: {:?}\n",
        p.profile,
        &p.session_id[..p.session_id.len().min(12)],
        p.cwd,
        show_argv(&p.argv),
        p.justification
    ));
    let mut argv = p.argv.clone();
    let decision = loop {
        out("Run it on the host? [a]pprove [d]eny [e]dit: ");
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
                out("e\nedit the command (shell quoting; Enter to accept, Ctrl-C to keep it):\n> ");
                let initial = shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default();
                match input.line(&initial) {
                    Some(line) => match shlex::split(&line) {
                        Some(v) if !v.is_empty() => {
                            argv = v;
                            out(&format!("  command:       {}\n", show_argv(&argv)));
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

    #[test]
    fn arguments_are_shown_quoted_with_controls_visible() {
        let v = vec![
            "rm".to_string(),
            "a b".into(),
            "x\ny".into(),
            "\u{1b}[2J".into(),
        ];
        assert_eq!(show_argv(&v), r#""rm" "a b" "x\ny" "\u{1b}[2J""#);
    }
}
