//! What `lazaret-exec-bridge` may do: it cannot confine itself (see the
//! reason) and drops only its inherited descriptors; the data it prints
//! (`--print-confinement`).

use lazaret_seccomp::{Capabilities, Confinement, Status};

pub fn exec_bridge() -> Confinement {
    Confinement {
        binary: "lazaret-exec-bridge",
        runs_as: "the developer, started by lazaret-supervisor on the coordinator's request, one per Client Session, with the PTY slave (or pipes) as 0-2, the holder's pidfd on fd 3 and the session's process specification (a sealed memfd, read by runsc exec) on fd 4",
        status: Status::Unconfined {
            reason: "runsc exec is its child and would inherit landlock and seccomp; runsc needs root's capabilities in the Domain user namespace it joins, its state directory and the sandbox's control socket, which no policy here describes yet; so it drops only its inherited descriptors, and holds no capability on the host",
        },
        namespaces: "joins the holder's user, mount, network and PID namespaces through the pidfd (never a PID), then runs runsc exec",
        closes_fds: Some("0, 1, 2, the holder's pidfd (fd 3) and the process memfd (fd 4), before joining"),
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged(
            "none on the host; root's in the Domain user namespace once joined, for runsc exec",
        ),
        landlock: None,
        seccomp: None,
        notes: vec![],
    }
}
