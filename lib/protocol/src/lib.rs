//! The shared vocabulary of Lazaret's processes.
//!
//! Every record that crosses a process boundary is defined here and encoded
//! with postcard. File descriptors never travel inside payloads: they are
//! inherited at fixed numbers ([`fdno`]) or passed out of band.

pub mod changes;
pub mod display;
pub mod domain;
pub mod escalation;
pub mod fdno;
pub mod frame;
pub mod lifecycle;
pub mod logs;
pub mod mailbox;
pub mod memfd;
#[cfg(feature = "netpolicy")]
pub mod netpolicy;
pub mod netreport;
pub mod plan;
pub mod readiness;
pub mod session;
pub mod supervisor;
pub mod trust;

pub use domain::DomainIdV1;

/// One line on stderr, as `eprintln!`, except that a failed write is
/// ignored instead of panicking. The Domain's long-running processes
/// write their stderr to `coordinator.log` and `helpers.log` in the
/// Domain Root: a full or read-only Storage Root must cost them their log
/// lines, not their lives (and the Domain with them).
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}
