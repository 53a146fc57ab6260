//! The Domain's resource limits, applied to the sandbox by what this runsc
//! and kernel allow without root.
//!
//! What holds, as measured with runsc 20221219 on kernel 6.18 (cgroup v1,
//! no delegation; `--ignore-cgroups` is mandatory, so the OCI
//! `linux.resources` are never applied and gVisor reports the host's RAM):
//!
//! * **Memory.** gVisor keeps every byte of the sandbox's memory (process
//!   memory, tmpfs mounts such as `/tmp` and `/dev/shm`, its page cache of
//!   host files) in one memory file, a memfd the Sentry grows in 1 GiB
//!   steps with `ftruncate`. `RLIMIT_FSIZE` on the Sentry bounds that file:
//!   past it, the allocation inside fails (a process touching new memory
//!   gets `SIGSEGV`, a write to tmpfs `EFBIG`) and the sandbox goes on. The
//!   bound is effectively rounded down to whole GiB. `RLIMIT_DATA` with the
//!   same value bounds the Sentry's own heap (its kernel objects); going
//!   past that one ends the sandbox, not the host. The kernel sends the
//!   Sentry `SIGXFSZ` with each refused growth and the Sentry forwards it
//!   to the sandbox's init, which therefore ignores it ([`crate::bundle`]).
//!   The same limit caps each host file the Sentry writes (gVisor writes
//!   through descriptors the gofer donates): no file written inside can
//!   grow past the memory bound (`EFBIG`, or `SIGXFSZ` for the writer).
//! * **Processes.** `RLIMIT_NPROC` in the OCI `process.rlimits` of init and
//!   of every `runsc exec`: gVisor enforces it itself (`fork` fails with
//!   `EAGAIN`), per user ID inside the sandbox, and without
//!   `CAP_SYS_RESOURCE` no process inside can raise it. Root inside can
//!   switch to other user IDs (`CAP_SETUID`) and gets the bound again for
//!   each: the memory bound is what holds the total.
//!
//! Both host limits are set as hard limits on the Sentry after `runsc run`
//! reports the sandbox running and before any session starts, so nothing
//! chosen by the sandbox has run yet; a hard limit cannot be raised again
//! without `CAP_SYS_RESOURCE` over the Sentry's user namespace, which only
//! the Domain's own user namespace root (this process) holds.

use rustix::process::{prlimit, Pid, Resource, Rlimit};

use lazaret_protocol::plan::SandboxLimits;

#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("runsc reported no Sentry process for the sandbox")]
    NoSentry,
    #[error("process {pid} is not the sandbox's Sentry (its command line is {cmdline:?})")]
    NotSentry { pid: i32, cmdline: String },
    #[error("cannot set {resource} on the Sentry (pid {pid}): {source}")]
    Set {
        resource: &'static str,
        pid: i32,
        source: std::io::Error,
    },
}

/// One host limit to set on the Sentry: (name, resource, bytes).
pub type SentryLimit = (&'static str, Resource, u64);

/// The host rlimits the Sentry gets for `limits` (a pure decision).
pub fn sentry_limits(limits: &SandboxLimits) -> Vec<SentryLimit> {
    match limits.memory {
        Some(bytes) => vec![
            ("RLIMIT_FSIZE", Resource::Fsize, bytes),
            ("RLIMIT_DATA", Resource::Data, bytes),
        ],
        None => Vec::new(),
    }
}

/// The OCI `process.rlimits` of every sandbox process.
pub fn oci_rlimits(limits: &SandboxLimits) -> serde_json::Value {
    let mut v = Vec::new();
    if let Some(n) = limits.processes {
        v.push(serde_json::json!({"type": "RLIMIT_NPROC", "hard": n, "soft": n}));
    }
    serde_json::Value::Array(v)
}

/// Sets the Sentry's host limits. `pid` is the sandbox process runsc
/// reported; it is checked to be a `runsc ... boot ... SANDBOX_ID` first.
pub fn apply_to_sentry(
    pid: i32,
    sandbox_id: &str,
    limits: &SandboxLimits,
) -> Result<(), LimitsError> {
    let wanted = sentry_limits(limits);
    if wanted.is_empty() {
        return Ok(());
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let is_sentry = args.iter().any(|a| *a == b"boot")
        && args.last().is_some_and(|a| a.is_empty())
        && args.iter().rev().nth(1) == Some(&sandbox_id.as_bytes());
    if !is_sentry {
        return Err(LimitsError::NotSentry {
            pid,
            cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
        });
    }
    let target = Pid::from_raw(pid).ok_or(LimitsError::NoSentry)?;
    for (resource, which, bytes) in wanted {
        let lim = Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        };
        prlimit(Some(target), which, lim).map_err(|e| LimitsError::Set {
            resource,
            pid,
            source: e.into(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bounds_the_memory_file_and_the_heap() {
        let l = SandboxLimits {
            memory: Some(4 << 30),
            ..Default::default()
        };
        let names: Vec<_> = sentry_limits(&l).iter().map(|x| (x.0, x.2)).collect();
        assert_eq!(names, [("RLIMIT_FSIZE", 4 << 30), ("RLIMIT_DATA", 4 << 30)]);
        assert!(sentry_limits(&SandboxLimits::default()).is_empty());
    }

    #[test]
    fn processes_become_nproc_for_every_process() {
        let l = SandboxLimits {
            processes: Some(64),
            ..Default::default()
        };
        assert_eq!(
            oci_rlimits(&l),
            serde_json::json!([{"type": "RLIMIT_NPROC", "hard": 64, "soft": 64}])
        );
        assert_eq!(
            oci_rlimits(&SandboxLimits::default()),
            serde_json::json!([])
        );
    }

    #[test]
    fn only_the_sentry_is_limited() {
        let l = SandboxLimits {
            memory: Some(1 << 30),
            ..Default::default()
        };
        let me = std::process::id() as i32;
        assert!(matches!(
            apply_to_sentry(me, "s1", &l),
            Err(LimitsError::NotSentry { .. })
        ));
    }
}
