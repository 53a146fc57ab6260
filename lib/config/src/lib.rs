//! `lazaret-config`: the trusted host configuration loader.
//!
//! The host config says which image an Agent Profile runs, what it may
//! mount, keep, reach on the network and run on the host without asking.
//! Whoever can write it controls the sandbox, so loading is deliberately
//! strict: the file must be a regular file owned by the user (or root) and
//! not writable by others ([`load`]), every key must be known, values are
//! validated, and at run time the file must not lie inside anything mounted
//! into the sandbox ([`check_not_mounted`]).
//!
//! Without a config file the built-in default applies: a single `default`
//! Agent Profile, Storage Root under the XDG data directory
//! ([`storage_root`]).

mod env;
mod error;
mod file;
mod limits;
mod load;
mod overlap;
mod parse;
mod placement;
mod ports;
mod schema;
mod spans;
mod validate;
pub use validate::{env_name, git_identity_value};

pub use env::{config_path, storage_root, EnvVars};
pub use error::{ConfigError, Invalid};
pub use file::MAX_CONFIG_BYTES;
pub use limits::{format_size, parse_size, Limits};
pub use load::{load, storage_root_despite_errors, Loaded, BUILTIN_FINGERPRINT_MARKER};
pub use overlap::{check_host_overlap, HostPlaces};
pub use placement::check_not_mounted;
pub use ports::{clashes, parse_port, parse_ports, PortSpec, MAX_PORTS};
pub use schema::{
    AutoApprove, Config, Escalation, GitIdentity, Network, NetworkDefault, NetworkMode, Profile,
    Runtime, Storage, Volume, DEFAULT_IMAGE, DEFAULT_PERSISTENT_PATHS, DEFAULT_PROFILE,
};

#[cfg(test)]
mod tests;
