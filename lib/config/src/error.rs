//! Error types of the configuration loader.
//!
//! Every refusal is its own variant so callers (and tests) can tell them
//! apart, and every message names the file and says what to do about it:
//! the person reading it is at a terminal, not in a debugger.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Anything that can go wrong while locating, reading, parsing or using the
/// host configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config` named a file that does not exist.
    #[error("config file {} does not exist (given with --config): create it or drop the option", .path.display())]
    ExplicitNotFound { path: PathBuf },

    /// The file (or a directory on its path) could not be inspected.
    #[error("cannot inspect config file {}: {source}", .path.display())]
    Stat { path: PathBuf, source: io::Error },

    /// Resolving symlinks (canonicalizing) the path failed.
    #[error("cannot resolve config file path {}: {source}", .path.display())]
    Resolve { path: PathBuf, source: io::Error },

    /// Opening the canonical path failed. ELOOP here means the path was
    /// swapped for a symlink after it was resolved.
    #[error("cannot open config file {}: {source}", .path.display())]
    Open { path: PathBuf, source: io::Error },

    /// Reading the opened file failed.
    #[error("cannot read config file {}: {source}", .path.display())]
    Read { path: PathBuf, source: io::Error },

    /// The path names a directory, FIFO, device or socket.
    #[error("config file {} is not a regular file (it is a {kind}): point at a regular file", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },

    /// The file is larger than [`crate::MAX_CONFIG_BYTES`].
    #[error("config file {} is larger than {limit} bytes (at least {size} bytes): shrink it", .path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },

    /// The file belongs to neither the invoking user nor root, so somebody
    /// else could change what the sandbox is allowed to do.
    #[error(
        "config file {} is owned by uid {owner}, not by you (uid {uid}) or root: run `chown {uid} {}` or use a file you own",
        .path.display(), shell_quote(.path)
    )]
    BadOwner { path: PathBuf, owner: u32, uid: u32 },

    /// Group or other users may write the file.
    #[error(
        "config file {} is group- or world-writable (mode {mode:04o}): run `chmod go-w {}`",
        .path.display(), shell_quote(.path)
    )]
    Writable { path: PathBuf, mode: u32 },

    /// The file is not valid UTF-8 (TOML must be).
    #[error("config {}:{line}: not valid UTF-8: save the file as UTF-8", .path.display())]
    NotUtf8 { path: PathBuf, line: usize },

    /// TOML syntax error, unknown key, wrong type or missing field.
    #[error("config {}: {message}{}", Location::new(.path, *.line), key_suffix(.key.as_deref()))]
    Parse {
        path: PathBuf,
        /// 1-based line, when the parser reported a position.
        line: Option<usize>,
        /// Dotted key path the error belongs to, when it could be found.
        key: Option<String>,
        /// The TOML parser's own description.
        message: String,
    },

    /// The file parsed but a value is not acceptable.
    #[error("config {}: {reason} for key `{key}`", Location::new(.path, *.line))]
    Invalid {
        path: PathBuf,
        /// 1-based line of the offending key, when it could be found.
        line: Option<usize>,
        /// Dotted key path, e.g. `profiles.default.volumes[0].sandbox`.
        key: String,
        reason: Invalid,
    },

    /// [`crate::Config::profile`] was asked for a name that is not defined.
    #[error("no Agent Profile named `{name}`: available profiles are {}", .available.join(", "))]
    UnknownProfile {
        name: String,
        available: Vec<String>,
    },

    /// Neither `storage.data_root` nor `XDG_DATA_HOME` nor `HOME` is usable.
    #[error("cannot determine the Storage Root: set `storage.data_root` in the config, or set XDG_DATA_HOME or HOME to an absolute path")]
    NoStorageRoot,

    /// The workspace given to [`crate::check_not_mounted`] cannot be resolved.
    #[error("cannot resolve workspace {}: {source}", .path.display())]
    Workspace { path: PathBuf, source: io::Error },

    /// SR-2: the config lies inside the workspace, so the agent could edit it.
    #[error(
        "config file {} lies beneath the workspace {}, which is mounted into the sandbox: {hint}",
        .config.display(), .workspace.display()
    )]
    BeneathWorkspace {
        config: PathBuf,
        workspace: PathBuf,
        /// What to do, for where the config is (see `placement`).
        hint: String,
    },

    /// SR-2: the config lies inside a volume's host path.
    #[error(
        "config file {} lies beneath the volume host path {}, which is mounted into the sandbox at {sandbox}: {hint}",
        .config.display(), .host.display()
    )]
    BeneathVolume {
        config: PathBuf,
        host: PathBuf,
        sandbox: String,
        hint: String,
    },
}

/// Why a parsed value was refused by semantic validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("invalid Agent Profile name `{0}`: use 1-64 characters from A-Z a-z 0-9 _ . - not starting with `.` or `-`")]
    ProfileName(String),
    #[error("path `{0}` is not absolute")]
    NotAbsolute(String),
    #[error("path `{0}` is absolute: give it relative to the workspace (for example `.husky`)")]
    NotRelative(String),
    #[error("path `{0}` contains a `..` component")]
    ParentComponent(String),
    #[error("value contains a NUL byte")]
    Nul,
    #[error("path `{0}` is not normalized (empty or `.` component, or trailing `/`)")]
    NotNormalized(String),
    #[error("path `/` is not allowed")]
    RootPath,
    #[error("path `{path}` is `{reserved}` or beneath it, which lazaret reserves")]
    Reserved {
        path: String,
        reserved: &'static str,
    },
    #[error("sandbox path `{path}` is already used by volume {first}")]
    DuplicateSandbox { path: String, first: usize },
    #[error("shared path `{path}` is already listed at shared_paths[{first}]")]
    DuplicateShared { path: String, first: usize },
    #[error("shared path `{path}` lies beneath or above shared_paths[{first}]: share only the outer one")]
    NestedShared { path: String, first: usize },
    #[error("shared path `{path}` lies at, beneath or above the mount point of volume {volume}: keep one of them")]
    SharedOverVolume { path: String, volume: usize },
    /// `overlap`: how it relates to which place (`contains the workspace
    /// /w`), then what the sandbox would get and what to do.
    #[error("volume host path `{host}` {overlap}")]
    VolumeOverlap { host: String, overlap: String },
    #[error("read-only volume host path `{host}` is or lies inside the host path of volumes[{other}], which is writable: it would be writable there; make volumes[{other}] read-only, or drop this one")]
    ReadOnlyInWritable { host: String, other: usize },
    /// `place`: how it relates to which place (`lies inside the workspace /w`).
    #[error("host_ca_file `{path}` {place}, which a sandbox can write: it could put another host file (a private key) in its place; keep the bundle outside (for example beside the configuration file)")]
    HostCaPlace { path: String, place: String },
    #[error("trailing_options without trailing_args = true: the rule takes no further arguments, so list none")]
    OptionsWithoutTrailing,
    #[error("trailing option is empty")]
    EmptyOption,
    #[error("environment variable name is empty")]
    EmptyEnvName,
    #[error("`{0}`: LAZARET_ variables are Lazaret's own")]
    LazaretEnvName(String),
    #[error("environment variable name `{0}` contains `=`")]
    EnvNameEquals(String),
    #[error("environment variable name `{0}` starts with a digit")]
    EnvNameDigit(String),
    #[error("argv is empty")]
    EmptyArgv,
    #[error("argv[0] (the program) is empty")]
    EmptyProgram,
    #[error("image is empty")]
    EmptyImage,
    #[error("a Git identity must be one line of at most 256 bytes")]
    GitIdentity,
    #[error("size `{0}` is not a number with a unit (B, KiB, MiB, GiB, TiB; for example \"4GiB\") or \"unlimited\"")]
    Size(String),
    #[error("size `{value}` is below the smallest bound Lazaret can keep, {min}")]
    SizeTooSmall { value: String, min: String },
    #[error("process count {value} is outside {min}..={max}")]
    ProcessCount { value: u64, min: u64, max: u64 },
    #[error("published port `{spec}`: {why}")]
    Port { spec: String, why: String },
    #[error("published port `{spec}` binds a host port already bound by ports[{first}]")]
    PortTwice { spec: String, first: usize },
    #[error("more than {0} published ports")]
    TooManyPorts(usize),
    #[error("ports are published through the network, and network.mode = \"none\" has none: drop `ports` or the mode")]
    PortsWithoutNetwork,
    #[error(
        "duration `{0}` is not a number with a unit (s, m, h; for example \"10m\"), at most 7 days"
    )]
    Duration(String),
    #[error("user `{0}` is not a POSIX user name (1 to 32 of a-z, 0-9, `_`, `-`, not starting with a digit or `-`)")]
    UserName(String),
    #[error(
        "user \"root\" is what sessions run as without the key: drop `user` or name another user"
    )]
    UserRoot,
}

/// `FILE` or `FILE:LINE`, the usual compiler-style location.
struct Location<'a> {
    path: &'a Path,
    line: Option<usize>,
}

impl<'a> Location<'a> {
    fn new(path: &'a Path, line: Option<usize>) -> Self {
        Self { path, line }
    }
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

fn key_suffix(key: Option<&str>) -> String {
    key.map(|k| format!(" for key `{k}`")).unwrap_or_default()
}

/// Quote a path for the suggested shell command, so copy-pasting it is safe
/// even for paths with spaces or quotes.
fn shell_quote(path: &Path) -> String {
    let s = path.to_string_lossy();
    let plain = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b));
    if plain && !s.is_empty() {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_paths_alone_and_quotes_others() {
        assert_eq!(shell_quote(Path::new("/a/b.toml")), "/a/b.toml");
        assert_eq!(shell_quote(Path::new("/a b/c")), "'/a b/c'");
        assert_eq!(shell_quote(Path::new("/it's")), r"'/it'\''s'");
    }

    #[test]
    fn location_omits_missing_line() {
        let p = Path::new("/x.toml");
        assert_eq!(Location::new(p, Some(3)).to_string(), "/x.toml:3");
        assert_eq!(Location::new(p, None).to_string(), "/x.toml");
    }
}
