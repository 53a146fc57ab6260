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
mod lifecycle_cmd;
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
    /// Running Domains: profile, workspace, sessions, uptime, memory
    Ps {
        /// Print JSON (one array of records)
        #[arg(long)]
        json: bool,
        /// Config file (for the Storage Root)
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// End a running Domain's sessions, tear it down, and wait until it is down
    Stop {
        /// Every running Domain
        #[arg(long, conflicts_with_all = ["domain", "workspace"])]
        all: bool,
        #[command(flatten)]
        which: state_cmd::Which,
    },
    /// A Domain's timestamped coordinator events (or its helpers' output)
    Logs {
        /// Keep printing what is added until the Domain stops
        #[arg(short, long)]
        follow: bool,
        /// What the helpers said (supervisor, runsc, routers, slirp4netns)
        #[arg(long)]
        helpers: bool,
        #[command(flatten)]
        which: state_cmd::Which,
    },
}

/// The exit status of a command's result, reporting an error.
fn report(r: Result<i32, error::CliError>) -> i32 {
    r.unwrap_or_else(|e| {
        error::report(&e);
        error::LAZARET_FAILED
    })
}

fn main() {
    // Not a subcommand: every binary of the suite answers it the same way.
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        lazaret_seccomp::binaries::print_and_exit("lazaret");
    }
    terminal::install_panic_restore();
    let cli = Cli::parse();
    if !matches!(cli.command, Cmd::Run(_)) {
        // Printing commands end quietly when their reader goes away
        // (`lazaret state list | head`), as other Unix tools do. `run`
        // keeps SIGPIPE ignored: a closed session socket must not kill it
        // before it restores the terminal.
        // SAFETY: no other thread exists yet; SIG_DFL is a valid action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
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
        Cmd::Ps { json, config } => report(lifecycle_cmd::ps(config, json)),
        Cmd::Stop { all, which } => report(lifecycle_cmd::stop(&which, all)),
        Cmd::Logs {
            follow,
            helpers,
            which,
        } => report(lifecycle_cmd::logs(&which, follow, helpers)),
    };
    terminal::restore();
    std::process::exit(code);
}
