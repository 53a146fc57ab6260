//! `lazaret-coordinator`: started by the `lazaret` CLI that leads a
//! Domain's start-up, with its input on fd 3 and a readiness pipe on fd 4
//! (`lazaret_protocol::fdno::coordinator`).
//! `--print-confinement` prints what it may do once started.

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        lazaret_coordinator::confinement::coordinator().print_and_exit();
    }
    std::process::exit(lazaret_coordinator::lifecycle::main());
}
