//! The Host Escalation prompt at the requesting session's terminal (DX-4).
//!
//! While it is shown, the coordinator has paused the session's sandbox
//! output, and this CLI routes keystrokes to the prompt instead of the
//! sandbox, so nothing of the session mixes in.
//!
//! Which process asked is the request's claim, shown as such: every
//! process inside is root and can read every session's Session Anchor, so
//! neither the session nor the process is proven (see the security
//! model); the prompt never says "this terminal" asked.
//!
//! **Nothing printed before can disguise it (SR-7).** Until the prompt,
//! the sandbox's output owned the terminal and may have left it in any
//! state: a scroll region of a few rows, origin mode, margins, insert mode,
//! another character set, invisible or reversed text, default colours
//! changed to match, the alternate screen, a hidden or moved cursor, an
//! unfinished escape sequence that would swallow what comes next, a
//! synchronized update that stops the terminal drawing, keys sent as
//! escape codes. So, in order:
//!
//! 1. [`RESET`] puts every mode that changes where or how text appears, or
//!    what a key sends, in a state Lazaret chose: DECSTR (the soft reset
//!    of the drawing state: scroll region, origin, insert, autowrap,
//!    character sets and shifts, attributes, cursor), then, explicitly,
//!    what DECSTR leaves or not every terminal implements, each step with
//!    its reason. RIS (`ESC c`) would reset more in one step, but most
//!    terminals (VTE, kitty, Alacritty, foot, xterm) erase the scrollback
//!    with it: the developer would lose the session's history at every
//!    request. Tab stops are left as they are: the prompt prints no tab
//!    (the sandbox's tabs are escaped as `\t`).
//! 2. The prompt is drawn on a clear screen: line feeds from the bottom row
//!    push the whole screen into the scrollback (nothing is lost), then it
//!    is erased from the top, so no row of the sandbox's output, a fake
//!    prompt included, is on the screen beside it.
//! 3. Every field the sandbox supplied (the process it claims asked, its
//!    directory, the justification, the argument vector) goes through
//!    [`lazaret_protocol::display`] in [`Charset::Ascii`]: no control byte
//!    reaches the terminal, nothing is invisible, no field can span rows,
//!    and every non-ASCII character is escaped, so a homoglyph cannot pass
//!    for ASCII and each row's width is exactly its length. Each row fits
//!    the terminal's width; the claimed process, the justification and the
//!    directories are cut to one row with a count of what was cut, the
//!    command is wrapped over rows of its own and cut the same way past
//!    [`MAX_COMMAND_ROWS`] or the screen's height. The question line itself
//!    carries the command (`Run "git" "fetch" on the host? ...`), cut to
//!    the width with the count.
//! 4. Only a deliberate key typed after the prompt was drawn answers: once
//!    the terminal has the prompt (`tcdrain`), input pending until then is
//!    discarded (`tcflush`, and what the relay already read), and so is
//!    everything up to the terminal's answer to a status request sent
//!    right before the question ([`SYNC`]), which a terminal sends once it
//!    has drawn all before it (at most [`SYNC_WAIT`]; what follows that
//!    answer in the same read was typed after it, and is read on its
//!    own). Input is parsed
//!    ([`crate::vt`]): an escape sequence or a terminal report (a cursor
//!    position, DECRQSS, a title the sandbox's output asked for, even one
//!    split over reads) is one unit and never answers, and a read holding
//!    more than one unit (a paste) is not an answer.
//!
//! Afterwards the session's program gets back what the prompt took:
//! its input modes and screen ([`crate::vt::Modes`], after the decision,
//! never before), and a full-screen program is made to redraw (by the
//! caller). An edit is parsed with shell quoting rules (`shlex`), and what
//! is approved is the exact vector shown last.

use crate::terminal;
use crate::vt::{self, Unit};
use lazaret_helpers::sync::lock;
use lazaret_protocol::display::{self, Charset};
use lazaret_protocol::escalation::Requester;
use lazaret_protocol::session::{EscalationPrompt, ServerMsg};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where keystrokes go: to the sandbox (`None`) or to the prompt.
pub type KeyRoute = Arc<Mutex<Option<Sender<Vec<u8>>>>>;

/// A record from the coordinator, or why the connection ended.
pub type Event = Result<ServerMsg, Lost>;

/// Why no more records come from the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    #[error(transparent)]
    Frame(#[from] lazaret_protocol::frame::FrameError),
    /// The thread that reads them is gone.
    #[error("closed")]
    ReaderGone,
}

fn write_raw(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

fn out(s: &str) {
    write_raw(&s.replace('\n', "\r\n"));
}

/// An argument vector as listings show it (any printable script).
pub fn show_argv(argv: &[String]) -> String {
    display::argv(argv)
}

/// Lazaret's own sequence before the prompt, in order, each step with
/// what it undoes of the state the sandbox's output may have left.
pub const RESET: &[(&str, &str)] = &[
    ("\x18", "CAN: abandon an escape or control sequence left unfinished"),
    ("\x1b\\", "ST: end a control string (OSC, DCS, APC, PM, SOS) left open"),
    ("\x1b<", "leave VT52 mode (DECANM), where nothing below would parse"),
    ("\x1b F", "7-bit C1 controls in replies (S7C1T)"),
    ("\x1b%G", "UTF-8 (a non-UTF-8 mode reads continuation bytes as C1 controls)"),
    ("\x1b[!p", "DECSTR: the soft reset of the drawing state"),
    ("\x1b[?2026l", "end a synchronized update, so the terminal draws again"),
    ("\x1b[0$}", "write to the main display, not the status line (DECSASD)"),
    ("\x1b[?1049l\x1b[?1047l\x1b[?47l", "the main screen, not the alternate one"),
    ("\x1b[r", "no scroll region (DECSTBM)"),
    ("\x1b[?69l", "no left and right margins (DECLRMM)"),
    ("\x1b[?6l", "absolute cursor positions (origin mode off, DECOM)"),
    ("\x1b[4l\x1b[20l", "replace, not insert (IRM); line feed without return (LNM)"),
    ("\x1b[?7h\x1b[?45l", "autowrap on (DECAWM), reverse wraparound off"),
    ("\x1b[?5l", "normal video for the screen (DECSCNM)"),
    ("\x1b[?25h", "the cursor visible (DECTCEM)"),
    ("\x1b[?2501l\x1b[1 k", "left to right, whatever the text (VTE's BiDi modes, SCP)"),
    ("\x1b(B\x1b)B\x1b*B\x1b+B\x0f", "ASCII in G0..G3, G0 shifted in (no line drawing)"),
    ("\x1b]104\x1b\\\x1b]110\x1b\\\x1b]111\x1b\\", "default palette, foreground and background colours"),
    ("\x1b[?1l\x1b>\x1b[?66l", "normal cursor keys and numeric keypad (DECCKM, DECKPNM, DECNKM)"),
    (
        "\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l\x1b[?1007l",
        "no mouse reports, no wheel as arrow keys",
    ),
    ("\x1b[?1004l\x1b[?2004l", "no focus reports, no bracketed paste"),
    ("\x1b[?9001l\x1b[>4;0m\x1b[>0u", "keys as plain characters: no win32 input mode, no modifyOtherKeys, kitty keyboard flags 0 (pushed, popped afterwards)"),
    ("\x1b[0m", "no attributes: not invisible, reversed, coloured (SGR 0)"),
];

/// The status request sent right before the question: a terminal answers
/// `CSI 0 n` once it has drawn everything before it.
pub const SYNC: &str = "\x1b[5n";

/// How long the prompt waits for that answer before it takes keys
/// anyway (a terminal that does not answer).
pub const SYNC_WAIT: Duration = Duration::from_secs(2);

/// Columns of a field's label (`  justification: `).
pub const LABEL: usize = 17;

/// The narrowest layout (room for a cut marker and some text in every
/// field and in the question): a terminal narrower than this wraps the
/// rows.
pub const MIN_WIDTH: usize = 72;

/// At most this many rows show the command; more is cut with a count.
pub const MAX_COMMAND_ROWS: usize = 20;

/// Rows of the prompt other than the command's: the title, six fields,
/// the question.
const FIXED_ROWS: usize = 9;

const ASKING: &str = " on the host? [a]pprove [d]eny [e]dit: ";

/// The prompt's first row: Lazaret's own words, the only ones it colours
/// (never a field: those are the sandbox's).
pub const HEADER: &str = "-- lazaret: Host Escalation request --";

/// The whole of [`RESET`].
pub fn reset_sequence() -> String {
    RESET.iter().map(|(s, _)| *s).collect()
}

/// What the prompt shows of the host side, as this CLI will run the
/// command (see [`crate::host_dir`]): the directory, why it is not the
/// sandbox's when it is not, and the names of the variables it is given.
#[derive(Debug, Clone)]
pub struct HostSide {
    pub dir: String,
    pub note: Option<String>,
    pub env: String,
}

impl HostSide {
    pub fn of(setting: &crate::host_dir::Setting, cwd: &str) -> Self {
        let place = setting.place(cwd);
        HostSide {
            dir: place.shown.to_string_lossy().into_owned(),
            note: place.note,
            env: setting.shown_env(&|k| std::env::var_os(k)),
        }
    }
}

/// The prompt as laid out for a terminal: its rows, then the question.
#[derive(Debug)]
pub struct Layout {
    pub rows: Vec<String>,
    pub question: String,
}

/// The prompt's fixed layout for a terminal of `size` (rows, columns):
/// the title, the coordinator's fields, the sandbox's bounded ones, the
/// host directory, then the command, and the question carrying it.
/// Warnings about the request belong between the host directory and the
/// command.
pub fn render(
    p: &EscalationPrompt,
    host: &HostSide,
    size: (u16, u16),
    changed: &[Vec<u8>],
) -> Layout {
    let width = usize::from(size.1).max(MIN_WIDTH);
    let room = width - LABEL;
    let ascii = |s: &str| display::bounded_in(s, room, Charset::Ascii);
    let session: String = p.session_id.chars().take(12).collect();
    let mut rows = vec![
        HEADER.to_string(),
        format!("  profile:       {}", ascii(&p.profile)),
        format!(
            "  session:       {}",
            display::bounded_in(
                format!("{session} (as the request names it)"),
                room,
                Charset::Ascii
            )
        ),
        format!("  asked by:      {}", claimed(&p.requester, room)),
        format!("  justification: {}", ascii(&p.justification)),
        format!("  sandbox cwd:   {}", ascii(&p.cwd)),
        format!(
            "  runs on host:  in {}",
            display::bounded_in(&host.dir, room - 3, Charset::Ascii)
        ),
        format!("  host env:      {}", ascii(&host.env)),
    ];
    let mut warned = 0;
    if let Some(note) = &host.note {
        rows.push(format!(
            "{:<LABEL$}{}",
            "  ! dir:",
            display::bounded_in(note, room, Charset::Ascii)
        ));
        warned += 1;
    }
    // What the command will read that the sandbox changed, right above
    // the command (the paths are the sandbox's bytes: escaped).
    if !changed.is_empty() {
        let list = changed.join(&b", "[..]);
        rows.push(format!(
            "{:<LABEL$}{}",
            "  ! reads:",
            display::bounded_in(&list, room, Charset::Ascii)
        ));
        rows.push(format!(
            "{:<LABEL$}{}",
            "",
            display::bounded_in(
                "(files the sandbox changed since the Domain started: `lazaret changes`)",
                room,
                Charset::Ascii
            )
        ));
        warned += 2;
    }
    let screen = usize::from(size.0).saturating_sub(FIXED_ROWS + warned);
    rows.extend(command_rows(
        &p.argv,
        width,
        screen.clamp(1, MAX_COMMAND_ROWS),
    ));
    Layout {
        rows,
        question: question(&p.argv, width),
    }
}

/// The process the request claims asked: `(claimed) pid N "arg" ...`, in
/// one row of `room` columns.
pub fn claimed(r: &Requester, room: usize) -> String {
    let head = format!("(claimed) pid {} ", r.pid);
    let rest = room.saturating_sub(head.len());
    format!(
        "{head}{}",
        display::bounded_argv_in(&r.cmdline, rest, Charset::Ascii)
    )
}

/// `  command:       "a" "b"`, continued on rows indented to the same
/// column, at most `max_rows` rows.
fn command_rows(argv: &[String], width: usize, max_rows: usize) -> Vec<String> {
    display::wrap_argv(argv, width - LABEL, max_rows, Charset::Ascii)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let label = if i == 0 { "  command:" } else { "" };
            format!("{label:<LABEL$}{r}")
        })
        .collect()
}

/// The question, carrying the command: `Run "a" "b" on the host? ...`,
/// the command cut to fit the width.
pub fn question(argv: &[String], width: usize) -> String {
    let room = width.saturating_sub(4 + ASKING.len());
    format!(
        "Run {}{ASKING}",
        display::bounded_argv_in(argv, room, Charset::Ascii)
    )
}

/// What is written to the terminal: [`RESET`], the clear screen, the
/// rows (the question follows separately: [`question_line`]); with
/// `colour`, the [`HEADER`] in bold yellow (the default palette's: the
/// reset restored it), every attribute off again after it.
pub fn drawing(layout: &Layout, screen_rows: u16, colour: bool) -> String {
    let rows = screen_rows.max(1);
    let mut s = reset_sequence();
    // The whole screen as the scroll region, by number too: not every
    // terminal resets the bottom margin on an empty DECSTBM.
    s.push_str(&format!("\x1b[1;{rows}r"));
    // Line feeds from the bottom row scroll the screen into the
    // scrollback; then the screen is erased from the top.
    s.push_str(&format!("\x1b[{rows};1H"));
    s.push_str(&"\n".repeat(usize::from(rows)));
    s.push_str("\x1b[H\x1b[J");
    for (i, row) in layout.rows.iter().enumerate() {
        if i == 0 && row == HEADER {
            s.push_str(&crate::colour::paint(
                HEADER,
                crate::colour::Colour::BoldYellow,
                colour,
            ));
        } else {
            s.push_str(row);
        }
        s.push_str("\r\n");
    }
    s
}

/// [`SYNC`] and the question: written only once pending input was
/// discarded (see `Input::settle`), so the terminal's answer to [`SYNC`]
/// cannot be discarded with it.
pub fn question_line(layout: &Layout) -> String {
    format!("{SYNC}{}", layout.question)
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

/// What the developer answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Approve,
    Deny,
    Edit,
}

/// What one read of the developer's input is to the prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    Answer(Answer),
    /// Escape sequences and reports only: never an answer, and nothing
    /// to say.
    Sequences,
    /// One key that is no answer.
    Unknown,
    /// More than one key at once: a paste, or typing ahead.
    Many,
}

/// One read's units, judged: only a read of exactly one unit, a key, can
/// answer.
pub fn classify(units: &[Unit]) -> Reading {
    if units.iter().all(|u| !u.is_key()) {
        return Reading::Sequences;
    }
    match units {
        [Unit::Char('a' | 'A')] => Reading::Answer(Answer::Approve),
        [Unit::Char('d' | 'D' | 'n' | 'N') | Unit::Control(3 | 4)] => Reading::Answer(Answer::Deny),
        [Unit::Char('e' | 'E')] => Reading::Answer(Answer::Edit),
        [_] => Reading::Unknown,
        _ => Reading::Many,
    }
}

/// What follows the terminal's answer to [`SYNC`] in `units`, when they
/// hold it: typed after the terminal drew the prompt, so it is read on
/// its own.
fn after_sync(units: &[Unit]) -> Option<&[Unit]> {
    let at = units.iter().position(|u| {
        matches!(u, Unit::Csi(c) if c.marker.is_none()
            && c.intermediates.is_empty()
            && c.final_byte == b'n'
            && c.params == [0])
    })?;
    Some(&units[at + 1..])
}

enum Key {
    Bytes(Vec<u8>),
    Withdrawn,
    Timeout,
}

struct Input<'a> {
    keys: Receiver<Vec<u8>>,
    events: &'a Receiver<Event>,
    backlog: &'a mut VecDeque<Event>,
    request_id: &'a str,
    vt: vt::Parser,
    /// Units read with the terminal's answer to [`SYNC`], after it.
    early: Option<Vec<Unit>>,
}

impl Input<'_> {
    /// The next read of the developer's input, until `deadline`.
    fn next(&mut self, deadline: Option<Instant>) -> Key {
        loop {
            let mut wait = Duration::from_millis(30);
            if let Some(d) = deadline {
                match d.checked_duration_since(Instant::now()) {
                    Some(left) => wait = wait.min(left),
                    None => return Key::Timeout,
                }
            }
            match self.keys.recv_timeout(wait) {
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

    /// The units of the next read; `None` when the request was withdrawn.
    fn read(&mut self) -> Option<Vec<Unit>> {
        if let Some(early) = self.early.take() {
            return Some(early);
        }
        match self.next(None) {
            Key::Bytes(b) => Some(self.vt.units(&b)),
            Key::Withdrawn | Key::Timeout => None,
        }
    }

    /// Discards what was typed or reported before the terminal drew the
    /// prompt (step 4 of the module's list); `false` when the request was
    /// withdrawn meanwhile.
    fn settle(&mut self, question: &str) -> bool {
        let _ = rustix::termios::tcdrain(std::io::stdout());
        let _ = rustix::termios::tcflush(std::io::stdin(), rustix::termios::QueueSelector::IFlush);
        while self.keys.try_recv().is_ok() {}
        // Asked only now: an answer that came before the flush would have
        // been thrown away with what the session had left pending.
        write_raw(question);
        let deadline = Instant::now() + SYNC_WAIT;
        loop {
            match self.next(Some(deadline)) {
                Key::Bytes(b) => {
                    let units = self.vt.units(&b);
                    if let Some(rest) = after_sync(&units) {
                        self.early = (!rest.is_empty()).then(|| rest.to_vec());
                        return true;
                    }
                }
                Key::Timeout => return true,
                Key::Withdrawn => return false,
            }
        }
    }

    /// The next answer; `question` is asked again after a key that is
    /// none. `None`: the request was withdrawn.
    fn answer(&mut self, question: &str) -> Option<Answer> {
        loop {
            let units = self.read()?;
            match classify(&units) {
                Reading::Answer(a) => return Some(a),
                Reading::Sequences => {}
                Reading::Unknown => write_raw(&format!("\r\n{question}")),
                Reading::Many => write_raw(&format!(
                    "\r\n(more than one key at once is no answer: press one key)\r\n{question}"
                )),
            }
        }
    }

    /// A line, edited in place (the terminal is raw); escape sequences
    /// (arrow keys) and invisible characters are not taken.
    fn line(&mut self, initial: &str) -> Option<String> {
        let mut buf: Vec<char> = initial.chars().collect();
        out(initial);
        loop {
            for u in self.read()? {
                match u {
                    Unit::Control(b'\r' | b'\n') => {
                        out("\n");
                        return Some(buf.into_iter().collect());
                    }
                    Unit::Control(3) => {
                        out("\n");
                        return None;
                    }
                    Unit::Control(0x7f | 0x08) if !buf.is_empty() => {
                        buf.pop();
                        out("\u{8} \u{8}");
                    }
                    Unit::Control(0x15) => {
                        for _ in 0..buf.len() {
                            out("\u{8} \u{8}");
                        }
                        buf.clear();
                    }
                    Unit::Char(c) if !display::hidden(c) => {
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
    host: &HostSide,
    changed: &[Vec<u8>],
    route: &KeyRoute,
    events: &Receiver<Event>,
    backlog: &mut VecDeque<Event>,
) -> Option<Option<Vec<String>>> {
    let (tx, rx) = std::sync::mpsc::channel();
    *lock(route) = Some(tx);
    let mut input = Input {
        keys: rx,
        events,
        backlog,
        request_id: &p.request_id,
        vt: vt::Parser::input(),
        early: None,
    };
    let (rows, cols) = terminal::size();
    let layout = render(p, host, (rows, cols), changed);
    write_raw(&drawing(&layout, rows, crate::colour::stdout()));
    let width = usize::from(cols).max(MIN_WIDTH);
    let decision = if input.settle(&question_line(&layout)) {
        decide(p, host, &mut input, width)
    } else {
        None
    };
    if decision.is_none() {
        out("\nwithdrawn: the request was cancelled\n");
    }
    *lock(route) = None;
    decision
}

/// The answer loop: approve, deny, or edit and ask again.
fn decide(
    p: &EscalationPrompt,
    host: &HostSide,
    input: &mut Input,
    width: usize,
) -> Option<Option<Vec<String>>> {
    let mut argv = p.argv.clone();
    loop {
        match input.answer(&question(&argv, width))? {
            Answer::Approve => {
                out(&format!(
                    "a\napproved: running {} on the host\n",
                    display::bounded_argv_in(&argv, width.saturating_sub(30), Charset::Ascii)
                ));
                return Some(Some(argv));
            }
            Answer::Deny => {
                out("d\ndenied\n");
                return Some(None);
            }
            Answer::Edit => {
                out("e\nedit the command (shell quoting; Enter to accept, Ctrl-C to keep it):\n");
                let initial = edit_initial(&argv).unwrap_or_else(|| {
                    out("(it holds control or invisible characters: type the command anew)\n");
                    String::new()
                });
                out("> ");
                match input.line(&initial) {
                    Some(line) => match shlex::split(&line) {
                        Some(v) if !v.is_empty() => argv = v,
                        _ => out("cannot read that as a command; unchanged\n"),
                    },
                    None => out("unchanged\n"),
                }
                let mut again = format!(
                    "  runs on host:  in {}\r\n",
                    display::bounded_in(&host.dir, width - LABEL - 3, Charset::Ascii)
                );
                for row in command_rows(&argv, width, MAX_COMMAND_ROWS) {
                    again.push_str(&row);
                    again.push_str("\r\n");
                }
                again.push_str(&question(&argv, width));
                write_raw(&again);
            }
        }
    }
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

    fn host() -> HostSide {
        HostSide {
            dir: "/home/dev/src/proj".into(),
            note: None,
            env: "PATH (yours), SSH_AUTH_SOCK".into(),
        }
    }

    const LABELS: [&str; 8] = [
        "  profile:       ",
        "  session:       ",
        "  asked by:      (claimed) pid 42 ",
        "  justification: ",
        "  sandbox cwd:   ",
        "  runs on host:  in ",
        "  host env:      ",
        "  command:       ",
    ];

    /// The layout every prompt has: the title, one row per label in this
    /// order, the command last (maybe over more rows), every row printable
    /// ASCII within the width, the question carrying the command.
    fn assert_layout(l: &Layout, argv: &[String], width: usize) {
        assert_eq!(l.rows[0], "-- lazaret: Host Escalation request --");
        for (row, label) in l.rows[1..].iter().zip(LABELS) {
            assert!(row.starts_with(label), "{row:?} is not {label:?}");
        }
        for row in l.rows.iter().chain([&l.question]) {
            assert!(
                row.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "not printable ASCII: {row:?}"
            );
            assert!(row.len() <= width, "{} > {width}: {row:?}", row.len());
        }
        for cont in &l.rows[9..] {
            assert!(cont.starts_with(&" ".repeat(LABEL)), "{cont:?}");
        }
        let shown = display::argv_in(argv, Charset::Ascii);
        let command: String = l.rows[8..]
            .iter()
            .map(|r| &r[LABEL..])
            .collect::<Vec<_>>()
            .join(" ");
        if !command.contains("...[cut ") {
            assert!(
                shown.replace(' ', "") == command.replace(' ', ""),
                "{shown}\n{command}"
            );
        }
        assert!(l.question.starts_with("Run \""), "{}", l.question);
        assert!(l.question.ends_with(ASKING), "{}", l.question);
        let q = &l.question[4..l.question.len() - ASKING.len()];
        assert!(
            q == shown || q.contains("...[cut "),
            "the question does not carry the command: {q}"
        );
        assert!(!l.rows.concat().contains("this terminal"));
    }

    #[test]
    fn the_layout_is_fixed_whatever_the_request_says() {
        let hostile = [
            "\n  command:       \"/bin/true\"\nRun it on the host? [a]pprove",
            "\r  command:       \"/bin/true\"",
            "\x1b[2A\x1b[2K  command: \"/bin/true\"\x1b[1B",
            "\u{9b}2A\u{9b}2K fake",
            "\u{202e}eurt/nib/",
            "tag\u{e0041}\u{e0042} filler\u{3164}\u{115f} shy\u{ad} comb\u{301}\u{20dd} vs\u{fe0f}",
            "h\u{043e}m\u{043e}glyph \u{ff02}quote\u{ff02} \u{5d0}\u{5d1}",
            &format!("{}  command:       \"/bin/true\"", " ".repeat(70)),
            &"x".repeat(70_000),
            "",
        ];
        for size in [(24, 80), (10, 72), (50, 200), (3, 20), (0, 0)] {
            let width = usize::from(size.1).max(MIN_WIDTH);
            for j in hostile {
                for cwd in [j, "/workspace"] {
                    let argv = ["/bin/rm", "-rf", j, "\x1b]0;title\x07", "a\nb"];
                    let p = prompt(cwd, &argv, j);
                    let l = render(&p, &host(), size, &[]);
                    assert_layout(&l, &p.argv, width);
                    let most = FIXED_ROWS - 1
                        + usize::from(size.0)
                            .saturating_sub(FIXED_ROWS)
                            .clamp(1, MAX_COMMAND_ROWS);
                    assert!(l.rows.len() <= most, "{} rows", l.rows.len());
                }
            }
        }
    }

    #[test]
    fn the_host_side_shows_the_directory_its_note_and_the_names_passed() {
        let p = prompt("/workspace/out", &["git", "push"], "");
        let mut h = host();
        h.note = Some("the sandbox's directory is not used: it does not resolve".into());
        let l = render(&p, &h, (24, 80), &[]);
        assert_eq!(l.rows[6], "  runs on host:  in /home/dev/src/proj");
        assert_eq!(l.rows[7], "  host env:      PATH (yours), SSH_AUTH_SOCK");
        assert_eq!(
            l.rows[8],
            format!(
                "{:<LABEL$}the sandbox's directory is not used: it does not resolve",
                "  ! dir:"
            )
        );
        assert_eq!(l.rows[9], "  command:       \"git\" \"push\"");
        let huge = "z".repeat(60_000);
        let p = prompt("/workspace", &["sh", "-c", &huge], "");
        assert_eq!(render(&p, &h, (24, 80), &[]).rows.len(), 23);
    }

    #[test]
    fn invisible_and_non_ascii_characters_are_shown_escaped() {
        let p = prompt(
            "/workspace/a\u{ad}b\u{3164}",
            &["echo", "x\u{e0041}\u{e0042}", "c\u{301}", "p\u{430}ypal"],
            "why\u{115f}\u{fe0f}",
        );
        let l = render(&p, &host(), (24, 80), &[]);
        let all = l.rows.join("\n");
        for want in [
            "  justification: why\\u{115f}\\u{fe0f}",
            "  sandbox cwd:   /workspace/a\\u{ad}b\\u{3164}",
            r#"  command:       "echo" "x\u{e0041}\u{e0042}" "c\u{301}" "p\u{430}ypal""#,
        ] {
            assert!(all.contains(want), "{want}\n{all}");
        }
        assert!(
            l.question.starts_with(r#"Run "echo" "x\u{e0041}"#),
            "{}",
            l.question
        );
    }

    #[test]
    fn long_fields_are_cut_with_a_count_and_the_command_wraps() {
        let long_arg = "y".repeat(300);
        let p = prompt("/workspace", &["sh", "-c", &long_arg], &"why ".repeat(100));
        let l = render(&p, &host(), (24, 80), &[]);
        let j = l
            .rows
            .iter()
            .find(|r| r.starts_with("  justification:"))
            .unwrap();
        assert!(j.contains("...[cut ") && j.len() <= 80, "{j}");
        assert!(l
            .rows
            .contains(&"  runs on host:  in /home/dev/src/proj".to_string()));
        // The command wraps over rows of its own, whole.
        let command: String = l.rows[8..].iter().map(|r| &r[LABEL..]).collect();
        assert_eq!(command, format!(r#""sh" "-c" "{long_arg}""#));
        assert!(l.rows.len() > 10);
        // The question carries it, cut with a count.
        assert!(
            l.question.starts_with(r#"Run "sh" "-c" "yyy"#) && l.question.contains("...[cut "),
            "{}",
            l.question
        );
        assert!(l.question.len() <= 80);
        // Far longer than the screen: cut on the last row it may use.
        let huge = "z".repeat(60_000);
        let p = prompt("/workspace", &["sh", "-c", &huge], "");
        let l = render(&p, &host(), (24, 80), &[]);
        assert_eq!(l.rows.len(), 8 + 15);
        assert!(
            l.rows.last().unwrap().contains("...[cut "),
            "{:?}",
            l.rows.last()
        );
    }

    #[test]
    fn the_drawing_resets_clears_and_asks_last() {
        let p = prompt(
            "/workspace",
            &["git", "fetch", "origin"],
            "needs the network",
        );
        let l = render(&p, &host(), (24, 80), &[]);
        let d = drawing(&l, 24, false);
        assert!(d.starts_with("\x18\x1b\\\x1b<"), "{d:?}");
        // In colour, only the header changes, and every attribute is off
        // again before the first field.
        let coloured = drawing(&l, 24, true);
        assert_eq!(
            coloured,
            d.replace(
                &format!("{HEADER}\r\n"),
                &format!("\x1b[1;33m{HEADER}\x1b[0m\r\n")
            )
        );
        assert_ne!(coloured, d);
        let body = d.strip_prefix(&reset_sequence()).unwrap();
        assert!(body.starts_with(&format!(
            "\x1b[1;24r\x1b[24;1H{}\x1b[H\x1b[J",
            "\n".repeat(24)
        )));
        assert!(d.ends_with("  command:       \"git\" \"fetch\" \"origin\"\r\n"));
        assert_eq!(
            question_line(&l),
            format!(
                "{SYNC}Run \"git\" \"fetch\" \"origin\" on the host? [a]pprove [d]eny [e]dit: "
            )
        );
        // Each mode the sandbox's output may set is reset.
        for seq in [
            "\x1b[!p",
            "\x1b[r",
            "\x1b[?6l",
            "\x1b[?69l",
            "\x1b[4l",
            "\x1b[?1049l",
            "\x1b(B",
            "\x0f",
            "\x1b[0m",
            "\x1b[?25h",
            "\x1b[?2004l",
            "\x1b[?1l",
            "\x1b>",
            "\x1b[?1000l",
            "\x1b[>0u",
            "\x1b[?2026l",
            "\x1b]110\x1b\\",
            "\x1b]111\x1b\\",
            "\x1b[?5l",
        ] {
            assert!(reset_sequence().contains(seq), "{seq:?} is not reset");
        }
        // SGR 0 last, so nothing after it sets an attribute.
        assert!(reset_sequence().ends_with("\x1b[0m"));
    }

    #[test]
    fn only_one_deliberate_key_answers() {
        let mut vt = vt::Parser::input();
        let mut read = |b: &[u8]| classify(&vt.units(b));
        assert_eq!(read(b"a"), Reading::Answer(Answer::Approve));
        assert_eq!(read(b"A"), Reading::Answer(Answer::Approve));
        assert_eq!(read(b"d"), Reading::Answer(Answer::Deny));
        assert_eq!(read(b"\x03"), Reading::Answer(Answer::Deny));
        assert_eq!(read(b"e"), Reading::Answer(Answer::Edit));
        // 'y' is no answer any more: the prompt asks for [a]pprove.
        assert_eq!(read(b"y"), Reading::Unknown);
        assert_eq!(read(b"\r"), Reading::Unknown);
        // A paste, or keys typed ahead, is not an answer.
        assert_eq!(read(b"add"), Reading::Many);
        assert_eq!(read(b"a\r"), Reading::Many);
        // Reports and sequences never answer, whole or split.
        for b in [
            &b"\x1b[24;1R"[..],
            b"\x1bP1$r0;7m\x1b\\",
            b"\x1b]lapprove\x1b\\",
            b"\x1b[200~a\x1b[201~",
            b"\x1b[97u",
            b"\x1ba",
            b"\x1b[I",
            b"\x1b[<0;3;4M",
        ] {
            let r = read(b);
            assert!(
                matches!(r, Reading::Sequences | Reading::Many),
                "{b:?}: {r:?}"
            );
        }
        assert_eq!(read(b"\x1b]l"), Reading::Sequences);
        assert_eq!(read(b"a"), Reading::Sequences, "inside a title report");
        assert_eq!(read(b"\x1b\\"), Reading::Sequences);
        assert_eq!(read(b"\x1b"), Reading::Sequences);
        assert_eq!(read(b"a"), Reading::Sequences, "Alt-a");
        assert_eq!(read(b"\x1b["), Reading::Sequences);
        assert_eq!(
            read(b"\x03"),
            Reading::Answer(Answer::Deny),
            "Ctrl-C gets out"
        );
    }

    #[test]
    fn the_terminal_s_status_answer_is_recognised() {
        let mut vt = vt::Parser::input();
        assert_eq!(after_sync(&vt.units(b"xx\x1b[0n")), Some(&[][..]));
        let units = vt.units(b"x\x1b[0na");
        assert_eq!(after_sync(&units), Some(&[Unit::Char('a')][..]));
        assert_eq!(after_sync(&vt.units(b"\x1b[0;1n\x1b[3n\x1b[?0n")), None);
    }

    #[test]
    fn vectors_with_control_characters_are_not_put_on_the_edit_line() {
        assert_eq!(
            edit_initial(&["echo".into(), "a b".into()]).as_deref(),
            Some("echo 'a b'")
        );
        assert_eq!(edit_initial(&["echo".into(), "\x1b[2J".into()]), None);
        assert_eq!(edit_initial(&["echo".into(), "\u{9b}J".into()]), None);
        assert_eq!(edit_initial(&["echo".into(), "a\u{e0041}".into()]), None);
    }

    #[test]
    fn the_asking_process_is_shown_as_claimed_escaped_and_bounded() {
        let r = Requester {
            pid: 7,
            cmdline: vec!["bash".into(), "-c".into(), "\x1b[2J".repeat(40)],
        };
        let c = claimed(&r, 63);
        assert!(
            c.starts_with(r#"(claimed) pid 7 "bash" "-c" "\x1b[2J"#),
            "{c}"
        );
        assert!(c.contains("...[cut "), "{c}");
        assert!(c.len() <= 63 && c.is_ascii(), "{c}");
        let empty = claimed(&Requester::default(), 63);
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
