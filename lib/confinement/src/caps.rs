//! Capability sets: what a binary keeps, everything else leaves every set.

use crate::ConfineError;
use rustix::thread::{CapabilitySet, CapabilitySets};

/// One capability, with the name printed for it.
#[derive(Debug, Clone, Copy)]
pub struct Capability {
    pub name: &'static str,
    pub set: CapabilitySet,
}

/// `pub const NAME: Capability`, printed `CAP_NAME`, for each name.
macro_rules! capabilities {
    ($($cap:ident),* $(,)?) => {
        $(
            #[doc = concat!("`CAP_", stringify!($cap), "`.")]
            pub const $cap: Capability = Capability {
                name: concat!("CAP_", stringify!($cap)),
                set: CapabilitySet::$cap,
            };
        )*
    };
}

capabilities!(
    CHOWN,
    DAC_OVERRIDE,
    DAC_READ_SEARCH,
    FOWNER,
    FSETID,
    NET_ADMIN,
    SYS_ADMIN,
);

/// The union of `caps`.
pub fn set_of(caps: &[Capability]) -> CapabilitySet {
    caps.iter().fold(CapabilitySet::empty(), |a, c| a | c.set)
}

/// Keeps only `keep`: every other capability leaves the bounding set
/// (first, while `CAP_SETPCAP` is still effective), the ambient set, and
/// the effective, permitted and inheritable sets; inheritable ends empty.
///
/// A bounding-set drop that fails with `EPERM` is an error only if the
/// capability is still in the bounding set afterwards (a process without
/// `CAP_SETPCAP` may already lack it). A process that never had
/// `CAP_SETPCAP` (the developer's own processes) cannot change its
/// bounding set at all: it leaves it as it is, which `no_new_privs` and
/// the absence of exec make moot.
pub fn keep_only(keep: &[Capability]) -> Result<(), ConfineError> {
    let keep = set_of(keep);
    let may_drop_bounding = rustix::thread::capabilities(None)
        .map(|c| c.effective.contains(CapabilitySet::SETPCAP))
        .unwrap_or(false);
    for bit in 0..64u32 {
        if !may_drop_bounding {
            break;
        }
        let set = CapabilitySet::from_bits_retain(1u64 << bit);
        if keep.contains(set) {
            continue;
        }
        match rustix::thread::remove_capability_from_bounding_set(set) {
            Ok(()) => {}
            // Past the last capability the kernel knows.
            Err(rustix::io::Errno::INVAL) => break,
            Err(rustix::io::Errno::PERM)
                if !rustix::thread::capability_is_in_bounding_set(set).unwrap_or(true) => {}
            Err(e) => return Err(ConfineError::Caps(e.into())),
        }
    }
    let _ = rustix::thread::clear_ambient_capability_set();
    let cur = rustix::thread::capabilities(None).map_err(|e| ConfineError::Caps(e.into()))?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: cur.permitted & keep,
            permitted: cur.permitted & keep,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| ConfineError::Caps(e.into()))
}
