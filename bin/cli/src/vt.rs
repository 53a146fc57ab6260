//! A small parser of the byte stream between a program and a terminal
//! (ECMA-48 and DEC's VT500 parser, simplified), used on both sides of the
//! developer's terminal while a session runs:
//!
//! - on the session's output ([`Modes`]), to know which of the terminal's
//!   input modes and screens the session's program set, so that they can be
//!   given back once a Host Escalation prompt, which resets them, is over;
//! - on the developer's input while a prompt waits ([`Parser::input`]), to
//!   tell one key apart from a sequence the terminal sent: a key with
//!   modifiers, a mouse or focus report, or the answer to a query the
//!   session's output made (a cursor position report, DECRQSS, a title).
//!
//! It only observes: no byte of the session's output is changed or held.
//! The parse follows the terminal's: UTF-8 first (C1 controls as U+0080..
//! U+009F count as their ESC forms), then ESC, CSI, and the control strings
//! (OSC ends with BEL or ST; DCS, SOS, PM and APC with ST); CAN and SUB
//! abandon a sequence.

use std::collections::BTreeMap;

/// A control sequence: `CSI [marker] params [intermediates] final`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csi {
    /// `<`, `=`, `>` or `?` right after the introducer.
    pub marker: Option<u8>,
    pub params: Vec<u32>,
    pub intermediates: Vec<u8>,
    pub final_byte: u8,
}

/// One complete unit of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A printable character.
    Char(char),
    /// A C0 control or DEL.
    Control(u8),
    Csi(Csi),
    /// `ESC [intermediates] final` (in input, also `ESC O x` and `ESC N x`
    /// with the character they shift).
    Esc {
        intermediates: Vec<u8>,
        final_byte: u8,
    },
    /// A control string (OSC, DCS, SOS, PM, APC); its content is dropped.
    Str,
    /// A byte that is not UTF-8, or a character a sequence cannot hold.
    Other,
}

impl Unit {
    /// Whether the unit is something a terminal sends for one key press
    /// of a printable character or a control (not a sequence).
    pub fn is_key(&self) -> bool {
        matches!(self, Unit::Char(_) | Unit::Control(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    /// `ESC` and intermediates, waiting for the final byte.
    EscInter,
    Csi,
    /// A control string; `esc` after its ESC (maybe the start of ST).
    Str {
        osc: bool,
        esc: bool,
    },
    /// Input only: `ESC O` or `ESC N`, waiting for the shifted character.
    Shift(u8),
}

/// At most this many parameters and intermediates are kept of one
/// sequence (the rest are dropped); parameters saturate.
const MAX_PARAMS: usize = 32;
const MAX_INTERMEDIATES: usize = 4;

/// The parser's state between two reads: a sequence may span them.
#[derive(Clone, Debug)]
pub struct Parser {
    /// Parsing what the terminal sends (keys, reports) rather than what it
    /// is sent.
    input: bool,
    state: State,
    /// A UTF-8 sequence begun in an earlier read.
    utf8: Vec<u8>,
    csi: Csi,
    /// Whether the current CSI parameter has a digit (else it is 0).
    param_open: bool,
    intermediates: Vec<u8>,
}

impl Parser {
    /// A parser of what a program sends to the terminal.
    pub fn output() -> Self {
        Parser::new(false)
    }

    /// A parser of what the terminal sends: keys and reports. Here a C0
    /// control inside a sequence abandons it (a terminal never sends one
    /// there, a developer typing Ctrl-C after a stray Escape does).
    pub fn input() -> Self {
        Parser::new(true)
    }

    fn new(input: bool) -> Self {
        Parser {
            input,
            state: State::Ground,
            utf8: Vec::new(),
            csi: Csi::default(),
            param_open: false,
            intermediates: Vec::new(),
        }
    }

    /// Parses `bytes`, calling `unit` for each unit they complete.
    pub fn feed(&mut self, bytes: &[u8], unit: &mut dyn FnMut(Unit)) {
        for &b in bytes {
            self.byte(b, unit);
        }
    }

    /// The units `bytes` complete, in order.
    pub fn units(&mut self, bytes: &[u8]) -> Vec<Unit> {
        let mut out = Vec::new();
        self.feed(bytes, &mut |u| out.push(u));
        out
    }

    /// UTF-8 decoding: a character, or `Other` for bytes that are not.
    fn byte(&mut self, b: u8, unit: &mut dyn FnMut(Unit)) {
        if !self.utf8.is_empty() {
            if (0x80..0xc0).contains(&b) {
                self.utf8.push(b);
                let need = match self.utf8[0] {
                    0xc2..=0xdf => 2,
                    0xe0..=0xef => 3,
                    _ => 4,
                };
                if self.utf8.len() == need {
                    let done = std::mem::take(&mut self.utf8);
                    match std::str::from_utf8(&done)
                        .ok()
                        .and_then(|s| s.chars().next())
                    {
                        Some(c) => self.char(c, unit),
                        None => self.invalid(unit),
                    }
                }
                return;
            }
            self.utf8.clear();
            self.invalid(unit);
        }
        match b {
            0..=0x7f => self.char(char::from(b), unit),
            0xc2..=0xf4 => self.utf8.push(b),
            _ => self.invalid(unit),
        }
    }

    fn invalid(&mut self, unit: &mut dyn FnMut(Unit)) {
        if !matches!(self.state, State::Str { .. }) {
            self.state = State::Ground;
            unit(Unit::Other);
        }
    }

    fn char(&mut self, c: char, unit: &mut dyn FnMut(Unit)) {
        let u = u32::from(c);
        match (self.state, u) {
            // CAN and SUB abandon any sequence.
            (State::Ground, 0x18 | 0x1a) => unit(Unit::Control(u as u8)),
            (_, 0x18 | 0x1a) => self.state = State::Ground,
            (State::Str { .. }, 0x9c) => self.end_str(unit),
            (State::Str { osc, .. }, 0x1b) => self.state = State::Str { osc, esc: true },
            (_, 0x1b) => self.escape(),
            // A C1 control is its ESC form.
            (_, 0x80..=0x9f) => {
                self.escape();
                self.char(char::from((u - 0x40) as u8), unit);
            }
            (State::Ground, _) => unit(if u < 0x20 || u == 0x7f {
                Unit::Control(u as u8)
            } else {
                Unit::Char(c)
            }),
            (State::Str { osc, esc }, _) => self.in_str(osc, esc, c, unit),
            (_, 0..=0x1f) if self.input => {
                self.state = State::Ground;
                unit(Unit::Control(u as u8));
            }
            // Executed where they stand, the sequence goes on.
            (_, 0..=0x1f) => unit(Unit::Control(u as u8)),
            (State::Escape, _) => self.in_escape(c, unit),
            (State::EscInter, _) => self.in_esc_inter(c, unit),
            (State::Csi, _) => self.in_csi(c, unit),
            (State::Shift(f), _) => {
                self.state = State::Ground;
                unit(Unit::Esc {
                    intermediates: vec![f],
                    final_byte: if c.is_ascii() { c as u8 } else { 0 },
                });
            }
        }
    }

    fn escape(&mut self) {
        self.state = State::Escape;
        self.intermediates.clear();
    }

    fn in_escape(&mut self, c: char, unit: &mut dyn FnMut(Unit)) {
        self.state = State::Ground;
        match c {
            '\x20'..='\x2f' => {
                self.intermediates.push(c as u8);
                self.state = State::EscInter;
            }
            '[' => {
                self.csi = Csi::default();
                self.param_open = false;
                self.state = State::Csi;
            }
            ']' => {
                self.state = State::Str {
                    osc: true,
                    esc: false,
                }
            }
            'P' | 'X' | '^' | '_' => {
                self.state = State::Str {
                    osc: false,
                    esc: false,
                }
            }
            'O' | 'N' if self.input => self.state = State::Shift(c as u8),
            '\x30'..='\x7e' => unit(Unit::Esc {
                intermediates: Vec::new(),
                final_byte: c as u8,
            }),
            _ => unit(Unit::Other),
        }
    }

    fn in_esc_inter(&mut self, c: char, unit: &mut dyn FnMut(Unit)) {
        match c {
            '\x20'..='\x2f' => {
                if self.intermediates.len() < MAX_INTERMEDIATES {
                    self.intermediates.push(c as u8);
                }
            }
            '\x30'..='\x7e' => {
                self.state = State::Ground;
                unit(Unit::Esc {
                    intermediates: std::mem::take(&mut self.intermediates),
                    final_byte: c as u8,
                });
            }
            _ => {
                self.state = State::Ground;
                unit(Unit::Other);
            }
        }
    }

    fn in_csi(&mut self, c: char, unit: &mut dyn FnMut(Unit)) {
        let csi = &mut self.csi;
        match c {
            '<'..='?' if csi.marker.is_none() && csi.params.is_empty() && !self.param_open => {
                csi.marker = Some(c as u8);
            }
            '0'..='9' if csi.intermediates.is_empty() => {
                if !self.param_open {
                    self.param_open = true;
                    if csi.params.len() < MAX_PARAMS {
                        csi.params.push(0);
                    }
                }
                if let Some(p) = csi.params.last_mut() {
                    *p = p
                        .saturating_mul(10)
                        .saturating_add(c as u32 - u32::from(b'0'));
                }
            }
            ';' | ':' if csi.intermediates.is_empty() => {
                if !self.param_open && csi.params.len() < MAX_PARAMS {
                    csi.params.push(0);
                }
                self.param_open = false;
            }
            '\x20'..='\x2f' => {
                if csi.intermediates.len() < MAX_INTERMEDIATES {
                    csi.intermediates.push(c as u8);
                }
            }
            '\x40'..='\x7e' => {
                self.state = State::Ground;
                let mut done = std::mem::take(&mut self.csi);
                done.final_byte = c as u8;
                unit(Unit::Csi(done));
            }
            // A private marker too late, or a character no sequence holds.
            _ => {
                self.state = State::Ground;
                unit(Unit::Other);
            }
        }
    }

    fn in_str(&mut self, osc: bool, esc: bool, c: char, unit: &mut dyn FnMut(Unit)) {
        if esc {
            // ST ends the string; any other ESC sequence ends it too and
            // starts anew.
            self.end_str(unit);
            if c != '\\' {
                self.escape();
                self.char(c, unit);
            }
        } else if osc && c == '\x07' {
            self.end_str(unit);
        } else if self.input && u32::from(c) < 0x20 {
            self.state = State::Ground;
            unit(Unit::Control(c as u8));
        }
    }

    fn end_str(&mut self, unit: &mut dyn FnMut(Unit)) {
        self.state = State::Ground;
        unit(Unit::Str);
    }
}

/// The terminal's modes that a program sets for itself and the prompt
/// resets (DEC private mode number, the prompt's value): what keys send
/// (cursor keys, numeric keypad, the win32 input mode), which reports the
/// terminal makes (mouse, focus, bracketed paste, the mouse wheel as
/// arrow keys), the alternate screen, and the cursor's visibility and
/// autowrap.
const TRACKED: &[(u32, bool)] = &[
    (1, false),
    (7, true),
    (9, false),
    (25, true),
    (47, false),
    (66, false),
    (1000, false),
    (1001, false),
    (1002, false),
    (1003, false),
    (1004, false),
    (1005, false),
    (1006, false),
    (1007, false),
    (1015, false),
    (1016, false),
    (1047, false),
    (1049, false),
    (2004, false),
    (9001, false),
];

/// The alternate screen modes, in the order a program would use them.
const ALTERNATE: [u32; 3] = [1049, 1047, 47];

/// What the session's output last set of the tracked modes: only what
/// differs from the terminal's defaults is remembered.
#[derive(Debug)]
pub struct Modes {
    parser: Parser,
    dec: BTreeMap<u32, bool>,
    /// The application keypad (`ESC =`), set since the last `ESC >`.
    keypad: bool,
    /// xterm's modifyOtherKeys level (`CSI > 4 ; N m`).
    other_keys: u32,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            parser: Parser::output(),
            dec: BTreeMap::new(),
            keypad: false,
            other_keys: 0,
        }
    }
}

impl Modes {
    /// Follows the session's output on its way to the terminal.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut seen = Vec::new();
        self.parser.feed(bytes, &mut |u| {
            if matches!(u, Unit::Csi(_) | Unit::Esc { .. }) {
                seen.push(u);
            }
        });
        for u in seen {
            self.apply(&u);
        }
    }

    fn apply(&mut self, u: &Unit) {
        match u {
            Unit::Csi(Csi {
                marker: Some(b'?'),
                params,
                intermediates,
                final_byte: f @ (b'h' | b'l'),
            }) if intermediates.is_empty() => {
                for p in params {
                    if TRACKED.iter().any(|(m, _)| m == p) {
                        self.dec.insert(*p, *f == b'h');
                    }
                }
            }
            Unit::Csi(Csi {
                marker: Some(b'>'),
                params,
                intermediates,
                final_byte: b'm',
            }) if intermediates.is_empty() && params.first() == Some(&4) => {
                self.other_keys = params.get(1).copied().unwrap_or(0);
            }
            Unit::Esc {
                intermediates,
                final_byte,
            } if intermediates.is_empty() => match final_byte {
                b'=' => self.keypad = true,
                b'>' => self.keypad = false,
                // RIS: the terminal's defaults again.
                b'c' => {
                    self.dec.clear();
                    self.keypad = false;
                    self.other_keys = 0;
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Whether the session's program is on the alternate screen (a
    /// full-screen program, which must redraw after the prompt).
    pub fn alternate_screen(&self) -> bool {
        ALTERNATE
            .iter()
            .any(|m| self.dec.get(m).copied().unwrap_or(false))
    }

    /// What gives the session's program its modes back after the prompt:
    /// its screen first, then each tracked mode that differs from the
    /// prompt's value, its keypad, its modifyOtherKeys level, and the
    /// kitty keyboard flags the prompt pushed are popped. The terminal's
    /// own parse was reset by the prompt, and so is this one.
    pub fn restore(&mut self) -> String {
        self.parser = Parser::output();
        let mut out = String::new();
        let screen = ALTERNATE
            .iter()
            .find(|m| self.dec.get(m).copied().unwrap_or(false));
        if let Some(m) = screen {
            out.push_str(&format!("\x1b[?{m}h"));
        }
        for (mode, reset) in TRACKED {
            if ALTERNATE.contains(mode) {
                continue;
            }
            if let Some(&on) = self.dec.get(mode) {
                if on != *reset {
                    out.push_str(&format!("\x1b[?{mode}{}", if on { 'h' } else { 'l' }));
                }
            }
        }
        if self.keypad {
            out.push_str("\x1b=");
        }
        if self.other_keys != 0 {
            out.push_str(&format!("\x1b[>4;{}m", self.other_keys));
        }
        out.push_str("\x1b[<u");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csi(marker: Option<u8>, params: &[u32], final_byte: u8) -> Unit {
        Unit::Csi(Csi {
            marker,
            params: params.to_vec(),
            intermediates: Vec::new(),
            final_byte,
        })
    }

    #[test]
    fn keys_and_reports_are_told_apart() {
        let mut p = Parser::input();
        assert_eq!(p.units(b"a"), vec![Unit::Char('a')]);
        assert_eq!(p.units(b"\x03"), vec![Unit::Control(3)]);
        assert_eq!(p.units("é".as_bytes()), vec![Unit::Char('é')]);
        // A cursor position report, DECRQSS, a title report, an arrow
        // key in application mode, Alt-a, a kitty key: one unit each.
        assert_eq!(p.units(b"\x1b[24;80R"), vec![csi(None, &[24, 80], b'R')]);
        assert_eq!(p.units(b"\x1bP1$r0m\x1b\\"), vec![Unit::Str]);
        assert_eq!(p.units(b"\x1b]lapprove\x1b\\"), vec![Unit::Str]);
        assert_eq!(p.units(b"\x1b]la\x07"), vec![Unit::Str]);
        assert_eq!(p.units(b"\x1bOA").len(), 1);
        assert_eq!(p.units(b"\x1ba").len(), 1);
        assert_eq!(p.units(b"\x1b[97u"), vec![csi(None, &[97], b'u')]);
        assert_eq!(p.units(b"\x1b[?1;2c"), vec![csi(Some(b'?'), &[1, 2], b'c')]);
        // C1 forms, raw and in UTF-8.
        assert_eq!(p.units("\u{9b}0n".as_bytes()), vec![csi(None, &[0], b'n')]);
        assert_eq!(p.units(b"\x9b"), vec![Unit::Other]);
        // A paste is many keys.
        assert_eq!(p.units(b"ad").len(), 2);
    }

    #[test]
    fn a_sequence_split_across_reads_stays_one_unit() {
        let mut p = Parser::input();
        for (read, want) in [
            (&b"\x1b[2"[..], 0),
            (b"4;1", 0),
            (b"R", 1),
            (b"\x1b]l", 0),
            (b"a", 0),
            (b"\x1b", 0),
            (b"\\", 1),
            (b"\x1b", 0),
            (b"a", 1),
            (&"é".as_bytes()[..1], 0),
            (&"é".as_bytes()[1..], 1),
        ] {
            let units = p.units(read);
            assert_eq!(units.len(), want, "{read:?}: {units:?}");
            assert!(!units.contains(&Unit::Char('a')), "{read:?}");
        }
    }

    #[test]
    fn controls_get_out_of_a_stray_sequence_in_input_only() {
        let mut p = Parser::input();
        assert!(p.units(b"\x1bP").is_empty());
        assert_eq!(p.units(b"\x03"), vec![Unit::Control(3)]);
        assert!(p.units(b"\x1b[1;").is_empty());
        assert_eq!(p.units(b"\x04"), vec![Unit::Control(4)]);
        assert!(p.units(b"\x1b[1\x18").is_empty(), "CAN abandons");
        assert_eq!(p.units(b"a"), vec![Unit::Char('a')]);
        // Output: a control inside CSI is executed, the sequence goes on.
        let mut o = Parser::output();
        assert_eq!(
            o.units(b"\x1b[1\r;2H"),
            vec![Unit::Control(b'\r'), csi(None, &[1, 2], b'H')]
        );
    }

    #[test]
    fn modes_follow_the_output_and_are_given_back() {
        let mut m = Modes::default();
        assert_eq!(m.restore(), "\x1b[<u");
        assert!(!m.alternate_screen());
        // A full-screen program, split across writes.
        m.feed(b"\x1b[?104");
        m.feed(b"9h\x1b[?1h\x1b=\x1b[?25l\x1b[?1000;1006h\x1b[?2004h\x1b[>4;2m");
        assert!(m.alternate_screen());
        assert_eq!(
            m.restore(),
            "\x1b[?1049h\x1b[?1h\x1b[?25l\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b=\x1b[>4;2m\x1b[<u"
        );
        // It leaves its screen and modes again.
        m.feed(b"\x1b[?1049l\x1b[?25h\x1b>\x1b[?1l\x1b[?1000;1006l\x1b[?2004l\x1b[>4m");
        assert_eq!(m.restore(), "\x1b[<u");
        // Inside a string, nothing counts; RIS forgets everything.
        m.feed(b"\x1bP[?1049h\x1b\\\x1b]0;[?1049h\x07");
        assert!(!m.alternate_screen());
        m.feed(b"\x1b[?1049h\x1bc");
        assert!(!m.alternate_screen());
    }
}
