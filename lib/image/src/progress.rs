//! How preparation reports progress: human-readable lines, and phases with
//! a byte count for a progress bar. The caller decides how to show them
//! (an `indicatif` bar on a terminal, plain lines otherwise).

/// Receives the progress of a preparation.
pub trait Progress {
    /// One human-readable line (without context; the caller adds it).
    fn line(&mut self, line: &str);

    /// A phase starts (`"copying"`, `"unpacking"`); `total` is its size in
    /// bytes when known. By default, reported as a line.
    fn phase(&mut self, name: &str, total: Option<u64>) {
        let _ = total;
        self.line(name);
    }

    /// `bytes` more bytes of the current phase are done.
    fn advance(&mut self, bytes: u64) {
        let _ = bytes;
    }
}

/// Adapts a line callback (`FnMut(&str)`) to [`Progress`].
pub struct Lines<F>(pub F);

impl<F: FnMut(&str)> Progress for Lines<F> {
    fn line(&mut self, line: &str) {
        (self.0)(line)
    }
}

/// Drops everything.
pub struct Silent;

impl Progress for Silent {
    fn line(&mut self, _line: &str) {}
}
