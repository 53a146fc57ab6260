//! Shell completions and man pages, generated from the clap definitions
//! so they never drift from the parser: `lazaret completions SHELL` prints
//! a script, the hidden `lazaret man DIR` writes one page per command
//! (`lazaret.1`, `lazaret-run.1`, `lazaret-state-reset.1`, ...), which
//! `scripts/install` puts in `share/man/man1`; each page ends with the
//! EXAMPLES and EXIT STATUS sections of [`crate::man`].

use crate::error::CliError;
use clap::CommandFactory;
use std::io::Write;
use std::path::Path;

/// Prints the completion script for `shell` on stdout.
pub fn print(shell: clap_complete::Shell) -> Result<i32, CliError> {
    let mut cmd = crate::Cli::command();
    // Into memory first: clap_complete panics when its writer fails.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "lazaret", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => Ok(0),
        // `lazaret completions bash | head`: the reader had enough.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(CliError::Usage(format!("cannot write the script: {e}"))),
    }
}

/// Writes a man page for `lazaret` and for each visible subcommand,
/// nested ones included, into `dir` (created if missing).
pub fn man_pages(dir: &Path) -> Result<i32, CliError> {
    let io = |e: std::io::Error| CliError::Storage {
        path: dir.display().to_string(),
        source: e,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut cmd = crate::Cli::command();
    cmd.build();
    write_page(&cmd, dir)?;
    Ok(0)
}

fn write_page(cmd: &clap::Command, dir: &Path) -> Result<(), CliError> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .and_then(|()| {
            page.extend_from_slice(crate::man::extra_sections(&name).as_bytes());
            std::fs::write(&path, page)
        })
        .map_err(CliError::storage(&path))?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        write_page(sub, dir)?;
    }
    Ok(())
}
