//! Asking before something is removed: `[y/N]` at a terminal, `--yes`
//! without one. No terminal and no `--yes` is a refusal (exit 2), never a
//! default.

use std::io::{BufRead, IsTerminal, Write};

/// What the developer answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    /// They said no (or nothing).
    No,
    /// Standard input is not a terminal and `--yes` was not given.
    NoTerminal,
}

/// Asks `question` (`[y/N]` is added) unless `yes`.
pub fn ask(question: &str, yes: bool) -> Answer {
    if yes {
        return Answer::Yes;
    }
    if !std::io::stdin().is_terminal() {
        return Answer::NoTerminal;
    }
    print!("{question} [y/N] ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    if matches!(line.trim(), "y" | "Y" | "yes") {
        Answer::Yes
    } else {
        Answer::No
    }
}
