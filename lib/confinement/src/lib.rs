//! Confinement of the Lazaret binaries: the mechanism, and the suite.
//!
//! - [`Confinement`]: what one binary may do, which applies itself
//!   ([`Confinement::apply`]) and prints itself ([`Confinement::print`],
//!   the output of every binary's `--print-confinement`). Each binary's
//!   own is in its crate, `bin/<crate>/src/confinement.rs`, beside its
//!   reviewed seccomp policy (`<binary>.json`), which that crate's
//!   `build.rs` compiles to BPF (`compile.rs` here): [`Policy`],
//!   [`filters`], [`install`].
//! - [`ruleset`]: landlock rulesets from typed rules, each naming a place
//!   ("the workspace") that the caller binds to a handle at run time.
//! - [`caps`], [`process`]: capability sets, `no_new_privs`, not dumpable,
//!   closing inherited descriptors.
//! - [`suite`]: every binary's confinement together (the same files,
//!   compiled here a second time), for `lazaret doctor` and the
//!   confinement tests; [`table`] turns their printed forms into the
//!   authority table.

// The binaries' `confinement.rs`, compiled into [`suite`], name this
// crate as their dependency does.
extern crate self as lazaret_seccomp;

pub mod abi;
pub mod caps;
mod describe;
pub mod process;
pub mod ruleset;
pub mod suite;
pub mod table;

pub use describe::{Capabilities, Confinement, PolicySource, Status, Uncovered};
/// The landlock types the binaries' `confinement.rs` name.
pub use landlock;
pub use seccompiler::BpfProgram;

/// One binary's compiled policy, as its crate's `build.rs` writes it
/// (`OUT_DIR/policies.rs`, see `compile.rs`).
pub struct Policy {
    /// The binary's name, which is the policy file's stem.
    pub binary: &'static str,
    /// The compiled filters in installation order (the allow-list last);
    /// empty on an architecture without seccomp support here.
    pub filters: &'static [Filter],
}

/// `pub mod policies`: the invoking crate's compiled seccomp policies
/// (`POLICIES`, which its `build.rs` writes to `OUT_DIR/policies.rs`
/// through `compile.rs`), with the test, run in that crate, that each one
/// compiles on x86_64, where the policies are reviewed. One line in each
/// confined binary's `lib.rs` rather than the same module six times.
#[macro_export]
macro_rules! compiled_policies {
    () => {
        /// This crate's compiled seccomp policies (`build.rs`).
        pub mod policies {
            include!(concat!(env!("OUT_DIR"), "/policies.rs"));

            /// The policies are reviewed for x86_64: there each one compiles.
            #[cfg(all(test, target_arch = "x86_64"))]
            #[test]
            fn every_policy_is_compiled() {
                assert!(!POLICIES.is_empty());
                for p in POLICIES {
                    let prog = $crate::program(POLICIES, p.binary);
                    assert!(prog.is_some_and(|f| !f.is_empty()), "{}", p.binary);
                }
            }
        }
    };
}

/// One compiled filter of a [`Policy`].
pub struct Filter {
    pub name: &'static str,
    /// `sock_filter`s, little endian, 8 bytes each.
    pub bpf: &'static [u8],
}

/// Why confinement could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot {what}: {source}")]
    Sys {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot drop capabilities: {0}")]
    Caps(std::io::Error),
    #[error("landlock (at ABI {abi}): {detail}")]
    Landlock { abi: i32, detail: String },
    #[error("refusing to run without Landlock: {0}")]
    NoLandlock(String),
    #[error(transparent)]
    BadCap(#[from] abi::BadCap),
    #[error("landlock: no handle for {0:?}, which this binary's rules require")]
    MissingPlace(&'static str),
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("no seccomp policy for {binary} on {arch}; the policies are compiled into this binary at build time (its crate's build.rs)")]
    NoPolicy {
        binary: &'static str,
        arch: &'static str,
    },
}

fn decode(bpf: &[u8]) -> BpfProgram {
    bpf.chunks_exact(8)
        .map(|c| seccompiler::sock_filter {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

/// `binary`'s allow-list (the filter named after it) among `policies`,
/// compiled for this architecture.
pub fn program(policies: &[Policy], binary: &str) -> Option<BpfProgram> {
    let p = policies.iter().find(|p| p.binary == binary)?;
    p.filters
        .iter()
        .find(|f| f.name == p.binary)
        .map(|f| decode(f.bpf))
}

/// All of `binary`'s filters among `policies` (its crate's `POLICIES`)
/// in installation order, by name. Decode them before confining: the
/// allow-lists need not allow what decoding does.
pub fn filters(
    policies: &'static [Policy],
    binary: &'static str,
) -> Result<Vec<(&'static str, BpfProgram)>, ConfineError> {
    let no = || ConfineError::NoPolicy {
        binary,
        arch: std::env::consts::ARCH,
    };
    let p = policies
        .iter()
        .find(|p| p.binary == binary)
        .ok_or_else(no)?;
    if p.filters.is_empty() {
        return Err(no());
    }
    Ok(p.filters.iter().map(|f| (f.name, decode(f.bpf))).collect())
}

/// Installs `filters` in order (this thread, inherited by what it starts).
pub fn install(filters: &[(&'static str, BpfProgram)]) -> Result<(), ConfineError> {
    for (name, f) in filters {
        seccompiler::apply_filter(f)
            .map_err(|e| ConfineError::Seccomp(format!("cannot install filter {name}: {e}")))?;
    }
    Ok(())
}
