//! `lazaret-mailbox`: the Escalation Mailbox reader, as a confined helper.
//!
//! The coordinator starts it with the request directory, a socketpair and
//! a sealed input; it reads, bounds, verifies and decodes every entry the
//! sandbox writes, and hands back only typed records
//! ([`lazaret_protocol::mailbox::FromReader`]). See [`confine`] for what
//! it may do, [`reader`] for what it checks, [`watch`] for what wakes it, [`run`]
//! for the order.

pub mod confine;
pub mod confinement;
pub mod reader;
pub mod run;
pub mod watch;

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
