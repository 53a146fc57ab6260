//! What `lazaret` may do: it is unconfined by design (see the reason);
//! the data it prints (`--print-confinement`).

use lazaret_seccomp::{Capabilities, Confinement, Status};

pub fn cli() -> Confinement {
    Confinement {
        binary: "lazaret",
        runs_as: "the developer, at the terminal",
        status: Status::Unconfined {
            reason: "unconfined by design: it runs as the developer, owns the terminal (the Client Session's PTY, the Host Escalation prompt), starts the coordinator, and runs the host commands the developer approves, which need the developer's authority; it reads sandbox-controlled bytes only as escaped text to print",
        },
        namespaces: "the developer's",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged("the developer's (none for an ordinary user)"),
        landlock: None,
        seccomp: None,
        notes: vec![],
    }
}
