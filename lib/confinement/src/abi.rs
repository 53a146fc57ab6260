//! The Landlock ABI this process may use: the running kernel's, lowered
//! by the test-only cap [`TEST_CAP_ENV`].
//!
//! Each binary's ruleset ([`crate::ruleset::Landlock`]) is written for
//! the newest ABI whose rights it handles and is cut down to the ABI
//! found here, feature by feature ([`Feature`]); what is cut is said by
//! the binary's `--print-confinement` and by `lazaret doctor`. Without
//! any Landlock (ABI 0) every confined binary refuses to run.

use std::fmt;

/// Test-only: `LAZARET_TEST_LANDLOCK_ABI=N` makes every binary behave as
/// if the kernel offered Landlock ABI N at most (0: none). It only lowers:
/// a value above the kernel's changes nothing. The CLI passes it from the
/// developer's environment to the coordinator, which passes it on to the
/// supervisor (and so to every helper) and the mailbox reader; nothing the
/// sandbox writes reaches any host process's environment.
pub const TEST_CAP_ENV: &str = "LAZARET_TEST_LANDLOCK_ABI";

/// The newest ABI whose features the suite uses.
pub const NEWEST_USED: i32 = 6;

/// A Landlock feature newer than ABI 1, which a ruleset uses only when the
/// ABI offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `refer` (ABI 2): renaming and linking across directories.
    Refer,
    /// `truncate` (ABI 3).
    Truncate,
    /// TCP `bind_tcp`, `connect_tcp` (ABI 4).
    Tcp,
    /// `ioctl_dev` (ABI 5).
    IoctlDev,
    /// Scoping of abstract unix sockets and signals (ABI 6).
    Scopes,
}

impl Feature {
    pub const ALL: [Feature; 5] = [
        Feature::Refer,
        Feature::Truncate,
        Feature::Tcp,
        Feature::IoctlDev,
        Feature::Scopes,
    ];

    /// The ABI that brought it.
    pub fn abi(self) -> i32 {
        match self {
            Feature::Refer => 2,
            Feature::Truncate => 3,
            Feature::Tcp => 4,
            Feature::IoctlDev => 5,
            Feature::Scopes => 6,
        }
    }

    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Refer => "renaming and linking across directories (refer)",
            Feature::Truncate => "truncate restriction",
            Feature::Tcp => "network connect and bind restriction (TCP)",
            Feature::IoctlDev => "device ioctl restriction (ioctl_dev)",
            Feature::Scopes => "abstract unix socket and signal scoping",
        }
    }

    /// A short name, for the authority table.
    pub fn short(self) -> &'static str {
        match self {
            Feature::Refer => "refer",
            Feature::Truncate => "truncate",
            Feature::Tcp => "TCP",
            Feature::IoctlDev => "device ioctls",
            Feature::Scopes => "scopes",
        }
    }
}

/// What `landlock_create_ruleset(NULL, 0, VERSION)` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Abi(i32),
    /// EOPNOTSUPP: built in, not in the `lsm=` boot list.
    Disabled,
    /// ENOSYS: not built in (or Linux before 5.13).
    Missing,
    /// Any other errno.
    Error(i32),
}

impl Kernel {
    /// The running kernel's.
    pub fn detect() -> Kernel {
        const VERSION: libc::c_ulong = 1;
        // SAFETY: with a NULL attribute pointer, size 0 and only the
        // VERSION flag, landlock_create_ruleset reads and writes no
        // memory: it returns the ABI version (or fails).
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0 as libc::size_t,
                VERSION,
            )
        };
        if r >= 0 {
            return Kernel::Abi(i32::try_from(r).unwrap_or(i32::MAX));
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => Kernel::Disabled,
            Some(libc::ENOSYS) => Kernel::Missing,
            e => Kernel::Error(e.unwrap_or(0)),
        }
    }

    pub fn abi(self) -> i32 {
        match self {
            Kernel::Abi(v) => v.max(0),
            _ => 0,
        }
    }
}

/// The ABI this process may use, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Available {
    pub kernel: Kernel,
    /// [`TEST_CAP_ENV`], when set.
    pub cap: Option<i32>,
}

/// A [`TEST_CAP_ENV`] value that is not a number.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{TEST_CAP_ENV}={0:?} is not a Landlock ABI number (0, 1, 2, ...); it is a test-only setting: unset it")]
pub struct BadCap(pub String);

impl Available {
    /// The kernel's ABI, capped by the environment's [`TEST_CAP_ENV`].
    pub fn detect() -> Result<Available, BadCap> {
        Ok(Available {
            kernel: Kernel::detect(),
            cap: cap_from(std::env::var_os(TEST_CAP_ENV))?,
        })
    }

    /// The ABI rulesets are cut down to (0: no Landlock).
    pub fn effective(&self) -> i32 {
        let k = self.kernel.abi();
        self.cap.map_or(k, |c| c.min(k))
    }

    /// Whether `f` is enforced here.
    pub fn has(&self, f: Feature) -> bool {
        self.effective() >= f.abi()
    }

    /// Why there is no Landlock at all, when there is none.
    pub fn missing(&self) -> Option<String> {
        if self.effective() >= 1 {
            return None;
        }
        Some(match (self.kernel, self.cap) {
            (Kernel::Abi(v), Some(c)) if v >= 1 => {
                format!("{TEST_CAP_ENV}={c} (test-only) hides the kernel's Landlock ABI {v}")
            }
            (Kernel::Disabled, _) => {
                "Landlock is built into this kernel but disabled at boot (EOPNOTSUPP): add landlock to the `lsm=` kernel parameter".into()
            }
            (Kernel::Missing, _) => {
                "this kernel has no Landlock (ENOSYS): Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK=y".into()
            }
            (Kernel::Error(e), _) => format!(
                "landlock_create_ruleset failed: {}",
                std::io::Error::from_raw_os_error(e)
            ),
            (Kernel::Abi(v), _) => format!("the kernel reports Landlock ABI {v}"),
        })
    }

    /// Whether the cap lowers the kernel's ABI.
    pub fn capped(&self) -> bool {
        self.cap.is_some_and(|c| c < self.kernel.abi())
    }
}

impl fmt::Display for Available {
    /// "Landlock ABI 2", or "Landlock ABI 2 (the kernel's 7, capped by
    /// LAZARET_TEST_LANDLOCK_ABI, test-only)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.missing() {
            Some(why) => write!(f, "no Landlock: {why}"),
            None if self.capped() => write!(
                f,
                "Landlock ABI {} (the kernel's is {}, capped by {TEST_CAP_ENV}, test-only)",
                self.effective(),
                self.kernel.abi()
            ),
            None => write!(f, "Landlock ABI {}", self.effective()),
        }
    }
}

fn cap_from(v: Option<std::ffi::OsString>) -> Result<Option<i32>, BadCap> {
    let Some(v) = v else { return Ok(None) };
    let s = v.to_string_lossy();
    match s.trim().parse::<u8>() {
        Ok(n) => Ok(Some(i32::from(n))),
        Err(_) => Err(BadCap(s.into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_only_lowers() {
        let a = |k, c| Available {
            kernel: Kernel::Abi(k),
            cap: c,
        };
        assert_eq!(a(7, None).effective(), 7);
        assert_eq!(a(7, Some(2)).effective(), 2);
        assert_eq!(a(2, Some(6)).effective(), 2);
        assert!(!a(2, Some(6)).capped());
        assert!(a(7, Some(0)).missing().unwrap().contains(TEST_CAP_ENV));
        assert!(a(7, Some(4)).to_string().contains("capped"));
        assert_eq!(a(4, None).to_string(), "Landlock ABI 4");
        let none = Available {
            kernel: Kernel::Disabled,
            cap: Some(9),
        };
        assert_eq!(none.effective(), 0);
        assert!(none.missing().unwrap().contains("lsm="));
        assert!(!a(3, None).has(Feature::Tcp) && a(3, None).has(Feature::Truncate));
    }

    #[test]
    fn a_bad_cap_is_an_error() {
        assert_eq!(cap_from(None).unwrap(), None);
        assert_eq!(cap_from(Some("3".into())).unwrap(), Some(3));
        assert!(cap_from(Some("x".into())).is_err());
        assert!(cap_from(Some("-1".into())).is_err());
    }
}
