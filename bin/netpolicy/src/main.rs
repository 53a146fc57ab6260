//! `lazaret-netpolicy`: installs, attests and probes a Domain's network
//! policy. Started by the supervisor in the enforcement network namespace
//! as root of the Domain user namespace, with the policy memfd on fd 3 and
//! the sandbox network namespace on fd 4. Prints one JSON document on
//! stdout; exit codes in [`lazaret_netpolicy_helper::helper::exit`]. See
//! `--print-confinement` for what it may do.
//!
//! ```text
//! lazaret-netpolicy install --digest HEX [--policy-fd N] [--sandbox-netns-fd N]
//! lazaret-netpolicy probe --digest HEX --fingerprint HEX [--policy-fd N] [--sandbox-netns-fd N]
//! lazaret-netpolicy watch --digest HEX [--policy-fd N] [--host-netlink-fd N] [--log-fd N]
//! lazaret-netpolicy --print-confinement [watch]
//! ```
//!
//! `watch` prints `ready` once the host's addresses are denied, then runs
//! for the Domain's life (see [`lazaret_netpolicy_helper::watch`]); it
//! exits only on a failure, with its code (7 while serving) and a
//! message on stderr.

use argh::FromArgs;
use lazaret_netpolicy_helper::helper::{self, exit, Mode, NetMode, Report, Request};
use lazaret_protocol::fdno::{netpolicy, netpolicy_watch};

/// Install, attest and probe a Lazaret network policy.
#[derive(FromArgs)]
struct Cli {
    #[argh(subcommand)]
    cmd: Cmd,
}

#[derive(FromArgs)]
#[argh(subcommand)]
enum Cmd {
    Install(Install),
    Probe(Probe),
    Watch(Watch),
}

/// Deny, for the Domain's life, every address the host gains that the
/// policy does not decide; prints `ready` after the first pass.
#[derive(FromArgs)]
#[argh(subcommand, name = "watch")]
struct Watch {
    /// SHA-256 (hex) of the policy bytes in the memfd
    #[argh(option)]
    digest: String,
    /// the policy memfd
    #[argh(option, default = "netpolicy_watch::POLICY")]
    policy_fd: i32,
    /// a NETLINK_ROUTE socket of the host's network namespace, bound to
    /// its IPv4 address notifications
    #[argh(option, default = "netpolicy_watch::HOST_NETLINK")]
    host_netlink_fd: i32,
    /// the log (opened for appending)
    #[argh(option, default = "netpolicy_watch::LOG")]
    log_fd: i32,
}

/// Install the policy in this (the enforcement) namespace, disable IPv6 in
/// both namespaces, and print the attestation.
#[derive(FromArgs)]
#[argh(subcommand, name = "install")]
struct Install {
    /// SHA-256 (hex) of the policy bytes in the memfd
    #[argh(option)]
    digest: String,
    /// the policy memfd
    #[argh(option, default = "netpolicy::POLICY")]
    policy_fd: i32,
    /// the sandbox network namespace
    #[argh(option, default = "netpolicy::SANDBOX_NETNS")]
    sandbox_netns_fd: i32,
}

/// Verify the installed state against the fingerprint, then probe from the
/// sandbox namespace.
#[derive(FromArgs)]
#[argh(subcommand, name = "probe")]
struct Probe {
    /// SHA-256 (hex) of the policy bytes in the memfd
    #[argh(option)]
    digest: String,
    /// the fingerprint `install` printed
    #[argh(option)]
    fingerprint: String,
    /// the policy memfd
    #[argh(option, default = "netpolicy::POLICY")]
    policy_fd: i32,
    /// the sandbox network namespace
    #[argh(option, default = "netpolicy::SANDBOX_NETNS")]
    sandbox_netns_fd: i32,
}

/// The command line (after `--print-confinement` was ruled out): `--help`
/// exits 0, bad arguments exit [`exit::BAD_INPUT`].
fn parse_cli(args: &[String]) -> Cli {
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    match Cli::from_args(&["lazaret-netpolicy"], &rest) {
        Ok(c) => c,
        Err(early) => match early.status {
            Ok(()) => {
                println!("{}", early.output);
                println!("Or: lazaret-netpolicy --print-confinement");
                std::process::exit(exit::OK);
            }
            Err(()) => {
                eprintln!("lazaret-netpolicy: {}", early.output.trim_end());
                eprintln!("See lazaret-netpolicy --help.");
                std::process::exit(exit::BAD_INPUT);
            }
        },
    }
}

/// The request of `install` or `probe`; `watch` runs here, and only ends
/// the process.
fn request(cli: Cli) -> Request {
    match cli.cmd {
        Cmd::Watch(c) => {
            let f = lazaret_netpolicy_helper::watch::run(
                &lazaret_netpolicy_helper::watch::WatchRequest {
                    digest: c.digest,
                    policy_fd: c.policy_fd,
                    host_fd: c.host_netlink_fd,
                    log_fd: c.log_fd,
                },
            );
            eprintln!("lazaret-netpolicy watch: {} failed: {}", f.stage, f.message);
            std::process::exit(f.code);
        }
        Cmd::Install(c) => Request {
            mode: Mode::Install,
            digest: c.digest,
            policy_fd: c.policy_fd,
            sandbox_netns_fd: c.sandbox_netns_fd,
        },
        Cmd::Probe(c) => Request {
            mode: Mode::Probe {
                fingerprint: c.fingerprint,
            },
            digest: c.digest,
            policy_fd: c.policy_fd,
            sandbox_netns_fd: c.sandbox_netns_fd,
        },
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--print-confinement") {
        // `watch` runs under a narrower confinement of its own.
        use lazaret_netpolicy_helper::confinement;
        match args.get(2).map(String::as_str) {
            Some("watch") => confinement::netpolicy_watch().print_and_exit(),
            _ => confinement::netpolicy().print_and_exit(),
        }
    }
    let req = request(parse_cli(&args));
    let mode = match req.mode {
        Mode::Install => NetMode::Install,
        Mode::Probe { .. } => NetMode::Probe,
    };
    // Test-only (lazaret_helpers::fault): the fault matrix kills this
    // process while it stands here.
    lazaret_helpers::fault::point(match mode {
        NetMode::Install => "netpolicy:install",
        NetMode::Probe => "netpolicy:probe",
    });
    let (code, report) = match helper::run(&req) {
        Ok(r) => (exit::OK, r),
        Err(f) => {
            eprintln!("lazaret-netpolicy: {} failed: {}", f.stage, f.message);
            (
                f.code,
                Report {
                    ok: false,
                    mode,
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
