//! `lazaret`: the developer's command.
//!
//! Exit codes, one table for every command (README "Exit codes"): 0
//! success; 1 `doctor` found a failing check, `state verify` found
//! problems; 2 refused (`state reset` not confirmed, the Domain active or
//! in use); 125 Lazaret itself failed, a bad command line included (as
//! podman); and for `run`, the command's own status, 126 when it cannot be
//! invoked, 127 when it is not found, 128+N when signal N killed it.

mod changes_cmd;
mod colour;
mod completions;
mod confinement;
mod confirm;
mod df_cmd;
mod doctor;
mod error;
mod export_cmd;
mod global;
mod host_ca;
mod host_command;
mod host_dir;
mod human;
mod ignore_check;
mod image_cmd;
mod json;
mod leader;
mod lifecycle_cmd;
mod man;
mod net_cmd;
mod ports;
mod prompt;
mod run;
mod session_env;
mod shared_paths;
mod state_cmd;
mod terminal;
mod vt;

use clap::{Parser, Subcommand};
use global::{Global, Uses};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "lazaret",
    version,
    about = "Run an AI coding agent in a rootless gVisor sandbox over the current workspace"
)]
pub(crate) struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Open a shell (or run CMD) in the Domain's sandbox, starting it if needed
    Run(run::RunArgs),
    /// Reattach this terminal to a session started with `run -d` (detach
    /// again with ctrl-p ctrl-q)
    Attach {
        /// A Session ID or a unique prefix, as `lazaret ps` shows it
        /// (default: the Domain's only detached session)
        #[arg(value_name = "SESSION")]
        session: Option<String>,
    },
    /// Prepare, list and remove images (prepared read-only lowers)
    Image(image_cmd::ImageArgs),
    /// List, inspect, verify and reset the Domains' persistent state
    #[command(subcommand)]
    State(state_cmd::StateCmd),
    /// The Domain's record of Host Escalation decisions
    Escalations {
        #[command(flatten)]
        which: state_cmd::Which,
        /// One JSON array of records instead of text
        #[arg(long)]
        json: bool,
    },
    /// What the sandbox created, modified, renamed or deleted in the workspace
    Changes(changes_cmd::ChangesArgs),
    /// The Domain's network policy, readiness fingerprint and probe evidence
    #[command(subcommand)]
    Net(net_cmd::NetCmd),
    /// What Lazaret keeps on disk: images, each Domain's State Anchors and
    /// Ignored Workspace State, shared paths (allocated blocks)
    Df {
        /// One JSON document instead of text
        #[arg(long)]
        json: bool,
    },
    /// Write the profile as manifests for another platform (Kubernetes)
    #[command(subcommand)]
    Export(export_cmd::ExportCmd),
    /// Check this machine's prerequisites, one line each
    Doctor {
        /// One JSON document with every check, its status and its fix
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions { shell: clap_complete::Shell },
    /// Write the man pages (lazaret.1, lazaret-run.1, ...) into DIR
    #[command(hide = true)]
    Man { dir: PathBuf },
    /// Running Domains: profile, workspace, sessions, uptime, memory
    Ps {
        /// Print JSON (one array of records)
        #[arg(long)]
        json: bool,
    },
    /// End a running Domain's sessions, tear it down, and wait until it is down
    Stop {
        /// Domain IDs, as `lazaret ps` shows them (default: the Domain of
        /// --profile and --workspace)
        #[arg(value_name = "DOMAIN", conflicts_with_all = ["all", "domain"])]
        ids: Vec<String>,
        /// Every running Domain
        #[arg(long, conflicts_with = "domain")]
        all: bool,
        #[command(flatten)]
        which: state_cmd::Which,
    },
    /// A Domain's timestamped coordinator events (or its helpers' output)
    Logs {
        /// A Domain ID, as `lazaret ps` shows it (default: the Domain of
        /// --profile and --workspace)
        #[arg(value_name = "DOMAIN", conflicts_with = "domain")]
        id: Option<String>,
        /// Keep printing what is added until the Domain stops
        #[arg(short, long)]
        follow: bool,
        /// What the helpers said (supervisor, runsc, routers, slirp4netns)
        #[arg(long)]
        helpers: bool,
        /// One JSON array of records (time_unix_ms, pid, message, event)
        /// instead of text; with --follow, one record per line
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        which: state_cmd::Which,
    },
}

/// A command's outcome, reported once.
fn report(r: Result<i32, error::CliError>) -> i32 {
    match r {
        Ok(code) => code,
        Err(e) => {
            terminal::restore();
            error::report(&e);
            e.exit_code()
        }
    }
}

/// The command line, parsed; exits when it cannot be (or asked for help
/// or the version).
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are not errors; a bad command line
            // is Lazaret's own error (125, as podman), never a status the
            // command in the sandbox could have returned.
            let _ = e.print();
            std::process::exit(if e.use_stderr() {
                error::LAZARET_FAILED
            } else {
                0
            });
        }
    }
}

/// `lazaret doctor`: its checks, with the configuration when it loads
/// (and why not when it does not).
fn run_doctor(g: &Global, json: bool) -> i32 {
    let env = lazaret_config::EnvVars::from_process();
    let loaded = lazaret_config::load(g.config(), &env, rustix::process::getuid().as_raw());
    let status = match &loaded {
        Ok(l) => Ok(l.path.as_ref().map(|p| p.display().to_string())),
        Err(e) => Err(e.to_string()),
    };
    let config = loaded.as_ref().ok().map(|l| &l.config);
    let runsc = config.and_then(|c| c.runtime.runsc.clone());
    doctor::run(runsc.as_deref(), config, status, json)
}

/// `lazaret stop`: every running Domain (`--all`), the named ones, or the
/// selected one.
fn stop(
    g: &Global,
    ids: Vec<String>,
    all: bool,
    which: state_cmd::Which,
) -> Result<i32, error::CliError> {
    if all {
        g.check("stop --all", Uses::Config)
            .and_then(|()| which.with(g))
            .and_then(|which| lifecycle_cmd::stop(&which, true))
    } else if !ids.is_empty() {
        // Each named Domain in turn; the worst outcome is the status.
        ids.into_iter().try_fold(0, |code, id| {
            state_cmd::Which::new(Some(id), g)
                .and_then(|which| lifecycle_cmd::stop(&which.despite_config(), false))
                .map(|c| code.max(c))
        })
    } else {
        which
            .with(g)
            .and_then(|which| lifecycle_cmd::stop(&which, false))
    }
}

fn main() {
    // Not a subcommand: every binary of the suite answers it the same way.
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        confinement::cli().print_and_exit();
    }
    terminal::install_panic_restore();
    let cli = parse();
    if !matches!(cli.command, Cmd::Run(_) | Cmd::Attach { .. }) {
        // Printing commands end quietly when their reader goes away
        // (`lazaret state list | head`), as other Unix tools do. `run`
        // keeps SIGPIPE ignored: a closed session socket must not kill it
        // before it restores the terminal.
        // SAFETY: no other thread exists yet; SIG_DFL is a valid action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let g = cli.global;
    let code = match cli.command {
        Cmd::Run(args) => {
            // The coordinator this session may start inherits it too.
            lazaret_helpers::limits::raise_nofile();
            report(run::run(args, &g))
        }
        Cmd::Attach { session } => report(run::attach(session, &g)),
        Cmd::Image(args) => image_cmd::run(args, &g),
        Cmd::State(cmd) => report(state_cmd::run(cmd, &g)),
        Cmd::Escalations { which, json } => report(state_cmd::escalations(which, &g, json)),
        Cmd::Changes(args) => report(changes_cmd::run(args, &g)),
        Cmd::Net(cmd) => report(net_cmd::run(cmd, &g)),
        Cmd::Export(cmd) => report(export_cmd::run(cmd, &g)),
        Cmd::Doctor { json } => report(
            g.check("doctor", Uses::Config)
                .map(|()| run_doctor(&g, json)),
        ),
        Cmd::Df { json } => report(
            g.check("df", Uses::Config)
                .and_then(|()| df_cmd::run(g.config.clone(), json)),
        ),
        Cmd::Completions { shell } => report(
            g.check("completions", Uses::Nothing)
                .and_then(|()| completions::print(shell)),
        ),
        Cmd::Man { dir } => report(
            g.check("man", Uses::Nothing)
                .and_then(|()| completions::man_pages(&dir)),
        ),
        Cmd::Ps { json } => report(
            g.check("ps", Uses::Config)
                .and_then(|()| lifecycle_cmd::ps(g.config.clone(), json)),
        ),
        Cmd::Stop { ids, all, which } => report(stop(&g, ids, all, which)),
        Cmd::Logs {
            id,
            follow,
            helpers,
            json,
            which,
        } => report(
            match id {
                Some(id) => state_cmd::Which::new(Some(id), &g),
                None => which.with(&g),
            }
            .and_then(|which| lifecycle_cmd::logs(&which, follow, helpers, json)),
        ),
    };
    terminal::restore();
    std::process::exit(code);
}
