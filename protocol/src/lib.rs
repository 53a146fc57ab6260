//! The shared vocabulary of Lazaret's processes.
//!
//! Every record that crosses a process boundary is defined here and encoded
//! with postcard. File descriptors never travel inside payloads: they are
//! inherited at fixed numbers or passed out of band.

pub mod display;
pub mod domain;
pub mod escalation;
pub mod frame;
pub mod lifecycle;
pub mod mailbox;
pub mod netreport;
pub mod plan;
pub mod session;
pub mod supervisor;

pub use domain::DomainIdV1;
