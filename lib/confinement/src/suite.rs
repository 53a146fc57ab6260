//! Every binary's [`Confinement`] together: the same `confinement.rs`
//! each binary's crate compiles (`bin/<crate>/src/confinement.rs`),
//! compiled here a second time, for what needs them all: `lazaret
//! doctor` (which of the helpers' landlock rules this kernel enforces),
//! the authority table's checks and the confinement tests. A binary
//! applies and prints only its own; none links another's.

use crate::describe::Confinement;

#[path = "../../../bin/cli/src/confinement.rs"]
pub mod cli;
#[path = "../../../bin/coordinator/src/confinement.rs"]
pub mod coordinator;
#[path = "../../../bin/dns-filter/src/confinement.rs"]
pub mod dns_filter;
#[path = "../../../bin/escalate/src/confinement.rs"]
pub mod escalate;
#[path = "../../../bin/exec-bridge/src/confinement.rs"]
pub mod exec_bridge;
#[path = "../../../bin/mailbox/src/confinement.rs"]
pub mod mailbox;
#[path = "../../../bin/mount-router/src/confinement.rs"]
pub mod mount_router;
#[path = "../../../bin/netpolicy/src/confinement.rs"]
pub mod netpolicy;
#[path = "../../../bin/port-relay/src/confinement.rs"]
pub mod port_relay;
#[path = "../../../bin/sudo/src/confinement.rs"]
pub mod sudo;
#[path = "../../../bin/supervisor/src/confinement.rs"]
pub mod supervisor;

/// Every binary of the suite, in the order of the authority table.
/// Adding a binary to the table is adding its name here (the binary must
/// answer `--print-confinement`).
pub const SUITE: &[&str] = &[
    "lazaret",
    "lazaret-coordinator",
    "lazaret-mailbox",
    "lazaret-supervisor",
    "lazaret-exec-bridge",
    "lazaret-mount-router",
    "lazaret-netpolicy",
    "lazaret-dns-filter",
    "lazaret-escalate",
    "lazaret-port-relay",
    "lazaret-sudo",
];

/// `binary`'s confinement, for the binaries described here.
pub fn get(binary: &str) -> Option<Confinement> {
    Some(match binary {
        "lazaret" => cli::cli(),
        "lazaret-coordinator" => coordinator::coordinator(),
        "lazaret-mailbox" => mailbox::mailbox(),
        "lazaret-supervisor-scan" => supervisor::supervisor_scan(),
        "lazaret-supervisor" => supervisor::supervisor(),
        "lazaret-exec-bridge" => exec_bridge::exec_bridge(),
        "lazaret-mount-router" => mount_router::mount_router(),
        "lazaret-netpolicy" => netpolicy::netpolicy(),
        "lazaret-netpolicy-watch" => netpolicy::netpolicy_watch(),
        "lazaret-dns-filter" => dns_filter::dns_filter(),
        "lazaret-escalate" => escalate::escalate(),
        "lazaret-port-relay" => port_relay::port_relay(),
        "lazaret-sudo" => sudo::sudo(),
        _ => return None,
    })
}

/// Every confinement with a landlock layer: the suite's binaries and the
/// two described by name only (`lazaret-supervisor-scan`,
/// `lazaret-netpolicy-watch`). `lazaret doctor` reports them all.
pub fn landlocked() -> Vec<Confinement> {
    SUITE
        .iter()
        .chain(&["lazaret-supervisor-scan", "lazaret-netpolicy-watch"])
        .filter_map(|b| get(b))
        .filter(|c| c.landlock.is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{Available, Feature, Kernel};

    /// Where seccomp does not cover a feature an older kernel lacks, the
    /// description says what is lost and why the binary still runs.
    #[test]
    fn every_uncovered_feature_is_explained() {
        for c in landlocked() {
            let l = c.landlock.as_ref().unwrap();
            for f in l.features() {
                let hand = l.below.iter().any(|(g, _)| *g == f);
                assert!(
                    c.below(f).is_ok() || hand,
                    "{}: {f:?} below ABI {} is neither covered by seccomp nor explained",
                    c.binary,
                    f.abi()
                );
            }
            for (f, _) in &l.below {
                assert!(
                    l.features().contains(f),
                    "{}: a note on {f:?}, which it does not use",
                    c.binary
                );
            }
            assert!(!c.print().contains("UNEXPLAINED"), "{}", c.print());
        }
    }

    /// The report at each capped ABI names exactly the features the ABI
    /// lacks, with the ABI each needs; at 0 the binary refuses.
    #[test]
    fn the_report_at_each_abi_names_what_is_not_enforced() {
        for cap in 0..=7 {
            let a = Available {
                kernel: Kernel::Abi(7),
                cap: Some(cap),
            };
            for c in landlocked() {
                let r = c.on_kernel(&a).unwrap();
                if cap == 0 {
                    assert!(r.contains("this binary refuses to run"), "{r}");
                    continue;
                }
                assert!(
                    r.starts_with(&format!("landlock on this kernel: Landlock ABI {cap}")),
                    "{r}"
                );
                for f in c.landlock.as_ref().unwrap().features() {
                    let line = format!(
                        "{}: {} (kernel Landlock ABI {cap}{}, needs {})",
                        f.name(),
                        if f == Feature::Refer {
                            "unavailable"
                        } else {
                            "not enforced"
                        },
                        if cap < 7 { " as capped" } else { "" },
                        f.abi()
                    );
                    assert_eq!(
                        r.contains(&line),
                        cap < f.abi(),
                        "{}: {line}\n{r}",
                        c.binary
                    );
                }
                assert!(!r.contains("UNEXPLAINED"), "{r}");
            }
        }
        // The brief's example: Debian 12's 6.1 (ABI 2).
        let deb12 = Available {
            kernel: Kernel::Abi(2),
            cap: None,
        };
        let r = netpolicy::netpolicy().on_kernel(&deb12).unwrap();
        assert!(
            r.contains("network connect and bind restriction (TCP): not enforced (kernel Landlock ABI 2, needs 4)"),
            "{r}"
        );
    }

    /// Each `PolicySource` names the file its text was included from (the
    /// printed path is the reviewed file, and `build.rs` compiles it).
    #[test]
    fn every_policy_source_names_its_file() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut n = 0;
        for b in SUITE
            .iter()
            .chain(&["lazaret-supervisor-scan", "lazaret-netpolicy-watch"])
        {
            let Some(p) = get(b).expect("described").seccomp else {
                continue;
            };
            let text = std::fs::read_to_string(root.join(p.file)).expect(p.file);
            assert_eq!(text, p.json, "{b}: {}", p.file);
            assert!(p.file.ends_with(&format!("/{b}.json")), "{b}: {}", p.file);
            n += 1;
        }
        assert_eq!(n, 7);
    }
}
