//! `lazaret-mount-router`: see the library's documentation for the
//! interface, the routing semantics and the confinement.

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let args = match lazaret_mount_router::Args::parse_from(&argv) {
        Ok(a) => a,
        Err((text, 0)) => {
            println!("{text}");
            std::process::exit(0);
        }
        Err((text, code)) => {
            lazaret_protocol::log_line!("lazaret-mount-router: error: {}", text.trim_end());
            lazaret_protocol::log_line!("See lazaret-mount-router --help.");
            std::process::exit(code);
        }
    };
    match lazaret_mount_router::run(args) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-mount-router: error: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
