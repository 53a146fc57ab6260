//! Colour in Lazaret's own words (doctor's status words, the Host
//! Escalation prompt's header), never in text the sandbox controls: every
//! coloured string here is a constant of this crate. Off when `NO_COLOR`
//! is in the environment (whatever its value: <https://no-color.org>),
//! when `TERM` is `dumb`, or when the output is not a terminal.

use std::ffi::OsStr;

/// Whether output to a terminal (`is_terminal`) may be coloured, given
/// `NO_COLOR` and `TERM` as the environment has them (a pure decision).
pub fn decide(is_terminal: bool, no_color: Option<&OsStr>, term: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none() && term != Some(OsStr::new("dumb"))
}

/// Whether stdout may be coloured now.
pub fn stdout() -> bool {
    decide(
        rustix::termios::isatty(std::io::stdout()),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

/// The colours Lazaret uses (SGR parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    Green,
    Yellow,
    BoldRed,
    BoldYellow,
}

impl Colour {
    fn sgr(self) -> &'static str {
        match self {
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::BoldRed => "1;31",
            Colour::BoldYellow => "1;33",
        }
    }
}

/// `word` in `colour` when `on`, then every attribute off again; `word`
/// as it is otherwise. Only Lazaret's own constants are passed here.
pub fn paint(word: &'static str, colour: Colour, on: bool) -> String {
    if on {
        format!("\x1b[{}m{word}\x1b[0m", colour.sgr())
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_of_any_value_a_dumb_terminal_or_no_terminal_turn_it_off() {
        let o = |s: &'static str| Some(OsStr::new(s));
        assert!(decide(true, None, o("xterm-256color")));
        assert!(decide(true, None, None));
        assert!(!decide(false, None, o("xterm")));
        for v in ["1", "0", "", "false"] {
            assert!(!decide(true, o(v), o("xterm")), "NO_COLOR={v:?}");
        }
        assert!(!decide(true, None, o("dumb")));
    }

    #[test]
    fn paint_resets_after_the_word() {
        assert_eq!(paint("ok", Colour::Green, true), "\x1b[32mok\x1b[0m");
        assert_eq!(paint("ok", Colour::Green, false), "ok");
    }
}
