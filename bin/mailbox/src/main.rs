//! `lazaret-mailbox --input-digest HEX`: the Escalation Mailbox reader.
//! Started by the coordinator with its sealed input on fd 3, the request
//! directory on fd 4 and its end of a socketpair on fd 5; exit codes in
//! [`lazaret_mailbox::run::exit`]. See `--print-confinement` for what it
//! may do.

use lazaret_mailbox::run::{self, exit};

const USAGE: &str = "usage: lazaret-mailbox --input-digest SHA256-HEX | --print-confinement";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let digest = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--print-confinement"] => {
            lazaret_mailbox::confinement::mailbox().print_and_exit();
        }
        ["--input-digest", d] if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) => {
            d.to_string()
        }
        _ => {
            lazaret_protocol::log_line!("lazaret-mailbox: {USAGE}");
            std::process::exit(exit::BAD_INPUT);
        }
    };
    if let Err(e) = run::run(&digest) {
        lazaret_protocol::log_line!("lazaret-mailbox: error: {e}");
        std::process::exit(e.code());
    }
}
