//! What `lazaret-port-relay` may do, inside the sandbox: no confinement
//! of its own (see the reason); the data it prints (`--print-confinement`).

use lazaret_seccomp::Confinement;

pub fn port_relay() -> Confinement {
    Confinement::inside_sandbox(
        "lazaret-port-relay",
        "root inside the Agent Sandbox (gVisor), started by the sandbox's init when the Domain publishes ports",
        "it holds nothing of the host's and only connects within the sandbox: root inside can stop or replace it, breaking only its own published ports; gVisor confines the whole sandbox, and the host side only ever connects towards it",
    )
}
