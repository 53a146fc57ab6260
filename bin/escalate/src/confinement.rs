//! What `lazaret-escalate` may do, inside the sandbox: no confinement of
//! its own (see the reason); the data it prints (`--print-confinement`).

use lazaret_seccomp::{Capabilities, Confinement, Status};

pub fn escalate() -> Confinement {
    Confinement {
        binary: "lazaret-escalate",
        runs_as: "a sandbox process's uid, inside the Agent Sandbox (gVisor)",
        status: Status::Unconfined {
            reason: "it holds only what the sandbox process that runs it holds (the request-signing key and the Session Anchor are that process's to read): a filter it put on itself would not bind that process, which can write the Escalation Mailbox directly; gVisor confines the whole sandbox, and the host trusts nothing it says beyond what it signed",
        },
        namespaces: "the sandbox's (gVisor)",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged("the sandbox process's, inside gVisor"),
        landlock: None,
        seccomp: None,
        notes: vec![],
    }
}
