//! The profile's `[network]` section, as written: the egress policy's
//! input. It is parsed by `lazaret-config` (which re-exports these types
//! as its own) and read by [`crate::derive`]; its type lives here so that
//! the policy crate, and whatever links it, needs no configuration parser.
//!
//! The types are also sent to other processes with postcard (see
//! `lazaret-config`'s schema): no `flatten`, no untagged enums, no skipped
//! fields.

use serde::{Deserialize, Serialize};

/// `[profiles.NAME.network]`. Stored as written; rules are checked by the
/// network layer, which knows what a valid destination is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub dns: Vec<String>,
    /// Host names (`github.com`, `*.githubusercontent.com`, `host:22`) the
    /// sandbox may resolve and reach, with `default = "deny"`; checked by
    /// the network layer.
    pub allow_hosts: Vec<String>,
    /// Policy for destinations matched by neither list.
    pub default: NetworkDefault,
    /// `"none"` disables networking (`--network=none`); unset or
    /// `"enabled"` installs the policy.
    pub mode: Option<NetworkMode>,
    /// A destination (`IP:PORT`) the readiness probe must reach before the
    /// sandbox starts; unset, the probe contacts nothing but the resolvers.
    pub probe: Option<String>,
}

/// Policy for destinations not listed in `allow` or `deny`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkDefault {
    /// Agents need package registries and model APIs out of the box, so an
    /// unconfigured profile keeps network access.
    #[default]
    Allow,
    Deny,
}

/// Whether the sandbox has a network at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    None,
    Enabled,
}
