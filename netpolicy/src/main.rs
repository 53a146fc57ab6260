//! `lazaret-netpolicy`: installs, attests and probes a Domain's network
//! policy. Started by the supervisor in the enforcement network namespace
//! as root of the Domain user namespace, with the policy memfd on fd 3 and
//! the sandbox network namespace on fd 4. Prints one JSON document on
//! stdout; exit codes in [`lazaret_netpolicy::helper::exit`]. See
//! `--print-confinement` for what it may do.

use clap::{Parser, Subcommand};
use lazaret_netpolicy::helper::{self, exit, Mode, Report, Request};
use lazaret_netpolicy::{confine, fdno};

#[derive(Parser)]
#[command(
    name = "lazaret-netpolicy",
    version,
    about = "Install, attest and probe a Lazaret network policy"
)]
struct Cli {
    /// Print the helper's confinement (capabilities, landlock, seccomp) and exit.
    #[arg(long)]
    print_confinement: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the policy in this (the enforcement) namespace, disable IPv6 in
    /// both namespaces, and print the attestation.
    Install {
        #[command(flatten)]
        common: Common,
    },
    /// Verify the installed state against the fingerprint, then probe from the
    /// sandbox namespace.
    Probe {
        #[command(flatten)]
        common: Common,
        /// The fingerprint `install` printed.
        #[arg(long)]
        fingerprint: String,
    },
}

#[derive(clap::Args)]
struct Common {
    /// SHA-256 (hex) of the policy bytes in the memfd.
    #[arg(long)]
    digest: String,
    #[arg(long, default_value_t = fdno::POLICY)]
    policy_fd: i32,
    #[arg(long, default_value_t = fdno::SANDBOX_NETNS)]
    sandbox_netns_fd: i32,
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::OK
            });
        }
    };
    if cli.print_confinement {
        print!("{}", confine::describe());
        std::process::exit(exit::OK);
    }
    let req = match cli.cmd {
        Some(Cmd::Install { common }) => Request {
            mode: Mode::Install,
            digest: common.digest,
            policy_fd: common.policy_fd,
            sandbox_netns_fd: common.sandbox_netns_fd,
        },
        Some(Cmd::Probe {
            common,
            fingerprint,
        }) => Request {
            mode: Mode::Probe { fingerprint },
            digest: common.digest,
            policy_fd: common.policy_fd,
            sandbox_netns_fd: common.sandbox_netns_fd,
        },
        None => {
            eprintln!("lazaret-netpolicy: name a subcommand (install, probe) or --print-confinement; see --help");
            std::process::exit(exit::BAD_INPUT);
        }
    };
    let mode = match req.mode {
        Mode::Install => "install",
        Mode::Probe { .. } => "probe",
    };
    let (code, report) = match helper::run(&req) {
        Ok(r) => (exit::OK, r),
        Err(f) => {
            eprintln!("lazaret-netpolicy: {} failed: {}", f.stage, f.message);
            (
                f.code,
                Report {
                    ok: false,
                    mode: mode.into(),
                    attestation: None,
                    probe: None,
                    confinement: None,
                    failed_stage: Some(f.stage.into()),
                    error: Some(f.message),
                },
            )
        }
    };
    match serde_json::to_string(&report) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("lazaret-netpolicy: cannot encode the report: {e}"),
    }
    std::process::exit(code);
}
