//! `lazaret-mount-router`: see the library's documentation for the
//! interface, the routing semantics and the confinement.

use clap::Parser;

fn main() {
    let args = lazaret_mount_router::Args::parse();
    match lazaret_mount_router::run(args) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("lazaret-mount-router: error: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
