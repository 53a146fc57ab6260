//! The developer's terminal: raw mode while a PTY session runs, and its
//! restoration on every exit path (DX-5), panics included.

use lazaret_helpers::sync::lock;
use rustix::termios::{self, OptionalActions, Termios};
use std::sync::Mutex;

static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// Puts stdin's terminal in raw mode, remembering the modes to restore.
pub fn enter_raw() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let saved = termios::tcgetattr(&stdin)?;
    let mut raw = saved.clone();
    raw.make_raw();
    *lock(&SAVED) = Some(saved);
    termios::tcsetattr(&stdin, OptionalActions::Drain, &raw)?;
    Ok(())
}

/// Restores the saved modes, if any. Idempotent.
pub fn restore() {
    let saved = lock(&SAVED).take();
    if let Some(t) = saved {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Drain, &t);
    }
}

pub fn install_panic_restore() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        prev(info);
    }));
}

pub fn is_tty() -> bool {
    termios::isatty(std::io::stdin()) && termios::isatty(std::io::stdout())
}

pub fn size() -> (u16, u16) {
    match termios::tcgetwinsize(std::io::stdout()) {
        Ok(ws) if ws.ws_row > 0 && ws.ws_col > 0 => (ws.ws_row, ws.ws_col),
        _ => (24, 80),
    }
}
