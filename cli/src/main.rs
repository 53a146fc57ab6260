//! `lazaret`: the developer's command.
//!
//! Exit codes (as podman's `run`): the command's own status; 125 when
//! Lazaret itself fails; 126 when the command cannot be invoked; 127 when
//! it is not found. `lazaret doctor` exits 0 only when every check passes.

mod doctor;
mod error;
mod host_command;
mod image_cmd;
mod leader;
mod net_cmd;
mod prompt;
mod run;
mod session_env;
mod shared_paths;
mod state_cmd;
mod terminal;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "lazaret",
    version,
    about = "Run an AI coding agent in a rootless gVisor sandbox over the current workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open a shell (or run CMD) in the Domain's sandbox, starting it if needed
    Run(run::RunArgs),
    /// Prepare, list and remove images (prepared read-only lowers)
    Image(image_cmd::ImageArgs),
    /// List, inspect, verify and reset the Domains' persistent state
    #[command(subcommand)]
    State(state_cmd::StateCmd),
    /// The Domain's record of Host Escalation decisions
    Escalations {
        #[command(flatten)]
        which: state_cmd::Which,
        #[arg(long)]
        json: bool,
    },
    /// The Domain's network policy, readiness fingerprint and probe evidence
    #[command(subcommand)]
    Net(net_cmd::NetCmd),
    /// Check this machine's prerequisites, one line each
    Doctor {
        /// Config file (default: $XDG_CONFIG_HOME/lazaret/config.toml)
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn main() {
    // Not a subcommand: every binary of the suite answers it the same way.
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        lazaret_seccomp::binaries::print_and_exit("lazaret");
    }
    terminal::install_panic_restore();
    let cli = Cli::parse();
    let code = match cli.command {
        Cmd::Run(args) => {
            // The coordinator this session may start inherits it too.
            lazaret_helpers::limits::raise_nofile();
            match run::run(args) {
                Ok(code) => code,
                Err(e) => {
                    terminal::restore();
                    error::report(&e);
                    error::LAZARET_FAILED
                }
            }
        }
        Cmd::Image(args) => image_cmd::run(args),
        Cmd::State(cmd) => match state_cmd::run(cmd) {
            Ok(code) => code,
            Err(e) => {
                error::report(&e);
                error::LAZARET_FAILED
            }
        },
        Cmd::Escalations { which, json } => match state_cmd::escalations(&which, json) {
            Ok(code) => code,
            Err(e) => {
                error::report(&e);
                error::LAZARET_FAILED
            }
        },
        Cmd::Net(cmd) => match net_cmd::run(cmd) {
            Ok(code) => code,
            Err(e) => {
                error::report(&e);
                error::LAZARET_FAILED
            }
        },
        Cmd::Doctor { config } => {
            let env = lazaret_config::EnvVars::from_process();
            let runsc =
                lazaret_config::load(config.as_deref(), &env, rustix::process::getuid().as_raw())
                    .ok()
                    .and_then(|l| l.config.runtime.runsc.clone());
            doctor::run(runsc.as_deref())
        }
    };
    terminal::restore();
    std::process::exit(code);
}
