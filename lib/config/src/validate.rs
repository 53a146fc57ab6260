//! Semantic checks on a parsed config: things TOML types cannot express.
//!
//! Returns the first problem with the key path it concerns; the caller turns
//! that into a line number. Network rules are left to the network layer.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::error::Invalid;
use crate::schema::{Config, Profile};
use crate::spans::{key_path, KeyPath};

/// Sandbox paths a volume must not cover: the workspace mount, kernel
/// filesystems, and lazaret's own control directory.
const VOLUME_RESERVED: [&str; 5] = ["/workspace", "/proc", "/sys", "/dev", "/.lazaret"];

/// Persistent paths additionally exclude `/tmp`, which is scratch by design.
const PERSISTENT_RESERVED: [&str; 6] = ["/workspace", "/proc", "/sys", "/dev", "/tmp", "/.lazaret"];

/// Shared paths exclude what persistent paths exclude, `/tmp` included:
/// it is the sandbox's memory-bounded scratch space, and sharing a part of
/// it would move scratch files (sockets, locks, build output) onto
/// unbounded host disk and into every other workspace of the profile.
const SHARED_RESERVED: [&str; 6] = PERSISTENT_RESERVED;

const MAX_PROFILE_NAME: usize = 64;

pub(crate) type Failure = (KeyPath, Invalid);

pub(crate) fn validate(config: &Config) -> Result<(), Failure> {
    if let Some(root) = &config.storage.data_root {
        host_path(root).map_err(|e| (key_path!["storage", "data_root"], e))?;
    }
    if let Some(runsc) = &config.runtime.runsc {
        host_path(runsc).map_err(|e| (key_path!["runtime", "runsc"], e))?;
    }
    for (name, profile) in &config.profiles {
        let at = key_path!["profiles", name.as_str()];
        profile_name(name).map_err(|e| (at.clone(), e))?;
        validate_profile(profile, &at)?;
    }
    Ok(())
}

fn validate_profile(profile: &Profile, at: &KeyPath) -> Result<(), Failure> {
    if profile.image.is_empty() {
        return Err((at.key("image"), Invalid::EmptyImage));
    }
    no_nul(&profile.image).map_err(|e| (at.key("image"), e))?;

    if let Some(k) = &profile.keep_alive {
        crate::limits::parse_duration_ms(k).map_err(|e| (at.key("keep_alive"), e))?;
    }

    for (i, persistent) in profile.persistent_paths.iter().enumerate() {
        sandbox_path(persistent, &PERSISTENT_RESERVED)
            .map_err(|e| (at.key("persistent_paths").index(i), e))?;
    }

    for (i, rel) in profile.protected_paths.iter().enumerate() {
        workspace_path(rel).map_err(|e| (at.key("protected_paths").index(i), e))?;
    }

    for (key, value) in [
        ("name", &profile.git_identity.name),
        ("email", &profile.git_identity.email),
    ] {
        if let Some(v) = value {
            git_identity_value(v).map_err(|e| (at.key("git_identity").key(key), e))?;
        }
    }

    for (key, value) in &profile.env {
        let key_at = at.key("env").key(key);
        env_name(key).map_err(|e| (key_at.clone(), e))?;
        no_nul(value).map_err(|e| (key_at, e))?;
    }
    if let Some(f) = &profile.host_ca_file {
        host_path(f).map_err(|e| (at.key("host_ca_file"), e))?;
    }
    for (i, name) in profile.pass_env.iter().enumerate() {
        env_name(name).map_err(|e| (at.key("pass_env").index(i), e))?;
    }

    volumes(profile, at)?;
    shared_paths(profile, at)?;
    if let Some(u) = &profile.user {
        user_name(u).map_err(|e| (at.key("user"), e))?;
    }
    crate::ports::parse_ports(&profile.ports).map_err(|(i, e)| (at.key("ports").index(i), e))?;
    if !profile.ports.is_empty() && profile.network.mode == Some(crate::schema::NetworkMode::None) {
        return Err((at.key("ports"), Invalid::PortsWithoutNetwork));
    }

    profile
        .limits
        .check()
        .map_err(|(key, e)| (at.key("limits").key(key), e))?;

    escalation(profile, at)
}

/// `volumes`: host paths, and sandbox paths each used once.
fn volumes(profile: &Profile, at: &KeyPath) -> Result<(), Failure> {
    // Mount point -> index of the first volume using it.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, volume) in profile.volumes.iter().enumerate() {
        let vol_at = at.key("volumes").index(i);
        host_path(&volume.host).map_err(|e| (vol_at.key("host"), e))?;
        sandbox_path(&volume.sandbox, &VOLUME_RESERVED).map_err(|e| (vol_at.key("sandbox"), e))?;
        if let Some(&first) = seen.get(volume.sandbox.as_str()) {
            return Err((
                vol_at.key("sandbox"),
                Invalid::DuplicateSandbox {
                    path: volume.sandbox.clone(),
                    first,
                },
            ));
        }
        seen.insert(&volume.sandbox, i);
    }
    Ok(())
}

/// `[escalation]`: environment names outside `LAZARET_`, and auto-approve
/// rules with a program and well-formed arguments and trailing options.
fn escalation(profile: &Profile, at: &KeyPath) -> Result<(), Failure> {
    for (i, name) in profile.escalation.pass_env.iter().enumerate() {
        let name_at = at.key("escalation").key("pass_env").index(i);
        env_name(name).map_err(|e| (name_at.clone(), e))?;
        if name.starts_with("LAZARET_") {
            return Err((name_at, Invalid::LazaretEnvName(name.clone())));
        }
    }
    for (i, rule) in profile.escalation.auto_approve.iter().enumerate() {
        let argv_at = at
            .key("escalation")
            .key("auto_approve")
            .index(i)
            .key("argv");
        match rule.argv.first() {
            None => return Err((argv_at, Invalid::EmptyArgv)),
            Some(program) if program.is_empty() => return Err((argv_at, Invalid::EmptyProgram)),
            Some(_) => {}
        }
        for (j, arg) in rule.argv.iter().enumerate() {
            no_nul(arg).map_err(|e| (argv_at.index(j), e))?;
        }
        let options_at = at
            .key("escalation")
            .key("auto_approve")
            .index(i)
            .key("trailing_options");
        if !rule.trailing_args && !rule.trailing_options.is_empty() {
            return Err((options_at, Invalid::OptionsWithoutTrailing));
        }
        for (j, option) in rule.trailing_options.iter().enumerate() {
            if option.is_empty() {
                return Err((options_at.index(j), Invalid::EmptyOption));
            }
            no_nul(option).map_err(|e| (options_at.index(j), e))?;
        }
    }
    Ok(())
}

/// `shared_paths`: sandbox paths, none at or beneath another one or a
/// volume's mount point. Volumes are mounted first: a shared path beneath
/// one would need its mount point made inside a host directory (refused
/// by a read-only volume, an empty directory left in a writable one), and
/// one above a volume would hide it.
fn shared_paths(profile: &Profile, at: &KeyPath) -> Result<(), Failure> {
    for (i, path) in profile.shared_paths.iter().enumerate() {
        let here = at.key("shared_paths").index(i);
        sandbox_path(path, &SHARED_RESERVED).map_err(|e| (here.clone(), e))?;
        for (first, earlier) in profile.shared_paths[..i].iter().enumerate() {
            let why = if earlier == path {
                Invalid::DuplicateShared {
                    path: path.clone(),
                    first,
                }
            } else if is_at_or_beneath(path, earlier) || is_at_or_beneath(earlier, path) {
                Invalid::NestedShared {
                    path: path.clone(),
                    first,
                }
            } else {
                continue;
            };
            return Err((here, why));
        }
        for (volume, v) in profile.volumes.iter().enumerate() {
            if is_at_or_beneath(path, &v.sandbox) || is_at_or_beneath(&v.sandbox, path) {
                return Err((
                    here,
                    Invalid::SharedOverVolume {
                        path: path.clone(),
                        volume,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// Profile names end up in file names and CLI arguments, so they are kept
/// to a portable, option-safe alphabet.
/// A path relative to the workspace: no leading `/`, no `..`, `.` or
/// empty component, no NUL.
fn workspace_path(p: &str) -> Result<(), Invalid> {
    no_nul(p)?;
    if p.starts_with('/') {
        return Err(Invalid::NotRelative(p.to_owned()));
    }
    for c in p.split('/') {
        match c {
            ".." => return Err(Invalid::ParentComponent(p.to_owned())),
            "" | "." => return Err(Invalid::NotNormalized(p.to_owned())),
            _ => {}
        }
    }
    Ok(())
}

fn profile_name(name: &str) -> Result<(), Invalid> {
    let ok = (1..=MAX_PROFILE_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !name.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(Invalid::ProfileName(name.to_owned()))
    }
}

/// A host path: absolute, and without `..` so that what a reader sees is
/// what gets used (no `/safe/../etc` surprises).
fn host_path(path: &Path) -> Result<(), Invalid> {
    let shown = || path.display().to_string();
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(Invalid::Nul);
    }
    if !path.is_absolute() {
        return Err(Invalid::NotAbsolute(shown()));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(Invalid::ParentComponent(shown()));
    }
    Ok(())
}

/// A path inside the sandbox: absolute, normalized (so string comparison is
/// path comparison), not `/`, and clear of the `reserved` trees.
fn sandbox_path(path: &str, reserved: &[&'static str]) -> Result<(), Invalid> {
    no_nul(path)?;
    let Some(rest) = path.strip_prefix('/') else {
        return Err(Invalid::NotAbsolute(path.to_owned()));
    };
    if rest.is_empty() {
        return Err(Invalid::RootPath);
    }
    for segment in rest.split('/') {
        match segment {
            ".." => return Err(Invalid::ParentComponent(path.to_owned())),
            "" | "." => return Err(Invalid::NotNormalized(path.to_owned())),
            _ => {}
        }
    }
    if let Some(&hit) = reserved.iter().find(|r| is_at_or_beneath(path, r)) {
        return Err(Invalid::Reserved {
            path: path.to_owned(),
            reserved: hit,
        });
    }
    Ok(())
}

/// `path` equals `root` or lies beneath it, by whole components
/// (`/workspace2` is not beneath `/workspace`). Both must be normalized.
fn is_at_or_beneath(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Names the kernel and shells accept in an environment block.
pub fn env_name(name: &str) -> Result<(), Invalid> {
    if name.is_empty() {
        return Err(Invalid::EmptyEnvName);
    }
    no_nul(name)?;
    if name.contains('=') {
        return Err(Invalid::EnvNameEquals(name.to_owned()));
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(Invalid::EnvNameDigit(name.to_owned()));
    }
    Ok(())
}

/// NUL would silently truncate the string once it reaches a C API.
/// One line Git can store and show: no control characters, bounded.
pub fn git_identity_value(value: &str) -> Result<(), Invalid> {
    if value.len() > 256 || value.chars().any(char::is_control) {
        Err(Invalid::GitIdentity)
    } else {
        Ok(())
    }
}

fn no_nul(value: &str) -> Result<(), Invalid> {
    if value.contains('\0') {
        Err(Invalid::Nul)
    } else {
        Ok(())
    }
}

/// A profile's `user`: a portable POSIX user name (lower case, as
/// `useradd` takes by default), at most 32 bytes, not `root`.
fn user_name(u: &str) -> Result<(), Invalid> {
    let b = u.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if !ok {
        return Err(Invalid::UserName(u.to_owned()));
    }
    if u == "root" {
        return Err(Invalid::UserRoot);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names() {
        for ok in ["default", "a", "A.b_c-9", &"x".repeat(64)] {
            assert!(profile_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".hidden", "-opt", "a b", "a/b", "é", &"x".repeat(65)] {
            assert_eq!(
                profile_name(bad),
                Err(Invalid::ProfileName(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn host_paths() {
        assert!(host_path(Path::new("/srv/data")).is_ok());
        assert_eq!(
            host_path(Path::new("srv")),
            Err(Invalid::NotAbsolute("srv".into()))
        );
        assert_eq!(
            host_path(Path::new("/a/../etc")),
            Err(Invalid::ParentComponent("/a/../etc".into()))
        );
        assert_eq!(host_path(Path::new("/a\0b")), Err(Invalid::Nul));
    }

    #[test]
    fn sandbox_paths() {
        let r = &VOLUME_RESERVED;
        assert!(sandbox_path("/data", r).is_ok());
        assert!(sandbox_path("/workspace2", r).is_ok());
        assert!(sandbox_path("/tmp/x", r).is_ok());
        assert_eq!(sandbox_path("/", r), Err(Invalid::RootPath));
        assert_eq!(
            sandbox_path("data", r),
            Err(Invalid::NotAbsolute("data".into()))
        );
        for bad in ["/a//b", "/a/./b", "/a/"] {
            assert_eq!(
                sandbox_path(bad, r),
                Err(Invalid::NotNormalized(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            sandbox_path("/a/../b", r),
            Err(Invalid::ParentComponent("/a/../b".into()))
        );
        for (bad, reserved) in [
            ("/workspace", "/workspace"),
            ("/workspace/x", "/workspace"),
            ("/proc/1", "/proc"),
            ("/sys", "/sys"),
            ("/dev/shm", "/dev"),
            ("/.lazaret/ctl", "/.lazaret"),
        ] {
            assert_eq!(
                sandbox_path(bad, r),
                Err(Invalid::Reserved {
                    path: bad.into(),
                    reserved
                }),
                "{bad}"
            );
        }
        assert_eq!(
            sandbox_path("/tmp/x", &PERSISTENT_RESERVED),
            Err(Invalid::Reserved {
                path: "/tmp/x".into(),
                reserved: "/tmp"
            })
        );
    }

    #[test]
    fn env_names() {
        assert!(env_name("PATH").is_ok());
        assert!(env_name("_X1").is_ok());
        assert_eq!(env_name(""), Err(Invalid::EmptyEnvName));
        assert_eq!(env_name("A=B"), Err(Invalid::EnvNameEquals("A=B".into())));
        assert_eq!(env_name("1X"), Err(Invalid::EnvNameDigit("1X".into())));
        assert_eq!(env_name("A\0"), Err(Invalid::Nul));
    }

    fn shared(paths: &[&str], volumes: &[&str]) -> Result<(), (String, Invalid)> {
        let mut config = Config::builtin();
        let profile = config.profiles.get_mut("default").unwrap();
        profile.shared_paths = paths.iter().map(|p| (*p).to_owned()).collect();
        profile.volumes = volumes
            .iter()
            .map(|v| crate::schema::Volume {
                host: "/srv/v".into(),
                sandbox: (*v).to_owned(),
                read_only: true,
                git_sentry: true,
            })
            .collect();
        validate(&config).map_err(|(at, why)| (at.to_string(), why))
    }

    #[test]
    fn shared_paths_inside_state_anchors_are_the_normal_case() {
        assert_eq!(shared(&["/root/.claude", "/root/.codex"], &[]), Ok(()));
        assert_eq!(shared(&["/root/.claude", "/root/.claude2"], &[]), Ok(()));
        assert_eq!(shared(&["/home/u/.config/x"], &["/data"]), Ok(()));
        assert_eq!(shared(&["/root"], &[]), Ok(()), "a whole anchor");
    }

    #[test]
    fn shared_paths_are_refused_with_their_index() {
        let at = |i: usize| format!("profiles.default.shared_paths[{i}]");
        for (paths, volumes, index, why) in [
            (
                &["root/.claude"][..],
                &[][..],
                0,
                Invalid::NotAbsolute("root/.claude".into()),
            ),
            (&["/"], &[], 0, Invalid::RootPath),
            (
                &["/root/.claude/"],
                &[],
                0,
                Invalid::NotNormalized("/root/.claude/".into()),
            ),
            (
                &["/root//.claude"],
                &[],
                0,
                Invalid::NotNormalized("/root//.claude".into()),
            ),
            (
                &["/root/./.claude"],
                &[],
                0,
                Invalid::NotNormalized("/root/./.claude".into()),
            ),
            (
                &["/root/../etc"],
                &[],
                0,
                Invalid::ParentComponent("/root/../etc".into()),
            ),
            (&["/a\0b"], &[], 0, Invalid::Nul),
            (
                &["/root/.claude", "/root/.claude"],
                &[],
                1,
                Invalid::DuplicateShared {
                    path: "/root/.claude".into(),
                    first: 0,
                },
            ),
            (
                &["/root/.claude", "/root/.claude/x"],
                &[],
                1,
                Invalid::NestedShared {
                    path: "/root/.claude/x".into(),
                    first: 0,
                },
            ),
            (
                &["/opt", "/root/.claude/x", "/root/.claude"],
                &[],
                2,
                Invalid::NestedShared {
                    path: "/root/.claude".into(),
                    first: 1,
                },
            ),
            (
                &["/data/x"],
                &["/data"],
                0,
                Invalid::SharedOverVolume {
                    path: "/data/x".into(),
                    volume: 0,
                },
            ),
            (
                &["/srv"],
                &["/data", "/srv/cache"],
                0,
                Invalid::SharedOverVolume {
                    path: "/srv".into(),
                    volume: 1,
                },
            ),
            (
                &["/data"],
                &["/data"],
                0,
                Invalid::SharedOverVolume {
                    path: "/data".into(),
                    volume: 0,
                },
            ),
        ] {
            assert_eq!(shared(paths, volumes), Err((at(index), why)), "{paths:?}");
        }
        for reserved in ["/workspace", "/.lazaret", "/proc", "/sys", "/dev", "/tmp"] {
            for path in [reserved.to_owned(), format!("{reserved}/x")] {
                assert_eq!(
                    shared(&[&path], &[]),
                    Err((
                        at(0),
                        Invalid::Reserved {
                            path: path.clone(),
                            reserved
                        }
                    )),
                );
            }
        }
        assert_eq!(shared(&["/workspace2", "/tmpx"], &[]), Ok(()));
    }

    #[test]
    fn builtin_config_is_valid() {
        assert_eq!(validate(&Config::builtin()), Ok(()));
    }

    #[test]
    fn escalation_argv_must_name_a_program() {
        let mut config = Config::builtin();
        let profile = config.profiles.get_mut("default").unwrap();
        profile
            .escalation
            .auto_approve
            .push(crate::schema::AutoApprove {
                argv: vec![],
                trailing_args: false,
                trailing_options: vec![],
            });
        let (at, why) = validate(&config).unwrap_err();
        assert_eq!(
            at.to_string(),
            "profiles.default.escalation.auto_approve[0].argv"
        );
        assert_eq!(why, Invalid::EmptyArgv);

        let profile = config.profiles.get_mut("default").unwrap();
        profile.escalation.auto_approve[0].argv = vec!["git".into(), "a\0".into()];
        let (at, why) = validate(&config).unwrap_err();
        assert_eq!(
            at.to_string(),
            "profiles.default.escalation.auto_approve[0].argv[1]"
        );
        assert_eq!(why, Invalid::Nul);
    }
}
