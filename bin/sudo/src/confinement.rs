//! What `lazaret-sudo` may do, inside the sandbox: no confinement of its
//! own (see the reason); the data it prints (`--print-confinement`).

use lazaret_seccomp::Confinement;

pub fn sudo() -> Confinement {
    Confinement::inside_sandbox(
        "lazaret-sudo",
        "root inside the Agent Sandbox (gVisor), its service started by the sandbox's init when the profile has a `user`",
        "it gives root inside to any process inside that asks, which has no more than a root session has; it holds nothing of the host's and never talks to the host; gVisor confines the whole sandbox",
    )
}
