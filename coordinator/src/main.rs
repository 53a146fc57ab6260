//! `lazaret-coordinator`: started by the `lazaret` CLI that leads a
//! Domain's start-up, with its input on fd 3 and a readiness pipe on fd 4.

fn main() {
    std::process::exit(lazaret_coordinator::lifecycle::main());
}
