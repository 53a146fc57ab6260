//! Confinement of the Lazaret binaries, as data.
//!
//! - [`POLICIES`]: one reviewed seccomp policy per binary
//!   (`lib/confinement/policies/<binary>.json`), compiled to BPF by `build.rs` when
//!   this crate is built; [`program`], [`filters`] and [`policy_json`] look
//!   them up by binary name.
//! - [`ruleset`]: landlock rulesets from typed rules, each naming a place
//!   ("the workspace") that the caller binds to a handle at run time.
//! - [`caps`], [`process`]: capability sets, `no_new_privs`, not dumpable,
//!   closing inherited descriptors.
//! - [`Confinement`]: what one binary may do, which applies itself
//!   ([`Confinement::apply`]) and prints itself ([`Confinement::print`],
//!   the output of every binary's `--print-confinement`); [`binaries`]
//!   holds the suite's, [`table`] turns their printed forms into the
//!   README's authority table.

pub mod abi;
pub mod binaries;
pub mod caps;
mod describe;
pub mod process;
pub mod ruleset;
pub mod table;

pub use describe::{Capabilities, Confinement, Status};
pub use seccompiler::BpfProgram;

/// One binary's compiled policy.
pub struct Policy {
    /// The binary's name, which is the policy file's stem.
    pub binary: &'static str,
    /// The policy file, relative to the workspace (for printing).
    pub file: &'static str,
    /// The reviewed source.
    pub json: &'static str,
    /// The compiled filters in installation order (the allow-list last);
    /// empty on an architecture without seccomp support here.
    filters: &'static [Filter],
}

struct Filter {
    name: &'static str,
    /// `sock_filter`s, little endian, 8 bytes each.
    bpf: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/policies.rs"));

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
    #[error("no seccomp policy for {binary} on {arch}; the policies are compiled into this binary at build time (lib/confinement/policies/)")]
    NoPolicy {
        binary: &'static str,
        arch: &'static str,
    },
}

/// The policy of `binary`, if it has one.
pub fn policy(binary: &str) -> Option<&'static Policy> {
    POLICIES.iter().find(|p| p.binary == binary)
}

/// The reviewed JSON source of `binary`'s policy.
pub fn policy_json(binary: &str) -> Option<&'static str> {
    policy(binary).map(|p| p.json)
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

/// `binary`'s allow-list (the filter named after it), compiled for this
/// architecture.
pub fn program(binary: &str) -> Option<BpfProgram> {
    let p = policy(binary)?;
    p.filters
        .iter()
        .find(|f| f.name == p.binary)
        .map(|f| decode(f.bpf))
}

/// All of `binary`'s filters in installation order, by name. Decode them
/// before confining: the allow-lists need not allow what decoding does.
pub fn filters(binary: &'static str) -> Result<Vec<(&'static str, BpfProgram)>, ConfineError> {
    let no = || ConfineError::NoPolicy {
        binary,
        arch: std::env::consts::ARCH,
    };
    let p = policy(binary).ok_or_else(no)?;
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
