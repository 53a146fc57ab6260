//! What both of the Network Sidecar's network helpers (`lazaret-netpolicy`
//! and `lazaret-dns-filter`) use to reach the kernel: [`rtnl`], a small
//! synchronous rtnetlink client (dump links, addresses, routes and rules;
//! add and delete routes and rules), and the normal form of what it reads
//! back.
//!
//! The filtering resolver's own routes and rules are its crate's
//! (`bin/dns-filter/src/routes.rs`), written through [`Rtnl::request`].
//! The bounded logs both helpers write are `lazaret_protocol::netpolicy::log`.

pub mod rtnl;

pub use rtnl::{NetlinkError, Rtnl};
