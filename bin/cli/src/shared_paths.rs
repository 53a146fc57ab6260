//! A profile's shared paths (`shared_paths`): one host directory per
//! (Agent Profile, sandbox path), mounted read-write into every Domain of
//! that profile, so that what an agent keeps there (its login, its
//! settings) follows it from workspace to workspace.
//!
//! This breaks Domain isolation for those paths by design: one Domain's
//! sandbox writes what another Domain of the same profile later reads, and
//! an agent's settings can name commands the agent runs. Different
//! profiles never share: the profile name is part of the host path.
//!
//! The host directories live beneath the Storage Root, in
//! `profiles/<profile>/shared/<escaped path>`. Every directory down to
//! `shared` is Lazaret's (0700, the developer's, never visible inside); the
//! leaf is the mount's root, so the sandbox may change its mode or owner
//! and fill it with anything, links included. No host process reads or runs
//! what is in it: the CLI only makes the leaf and checks that it is a
//! directory, and the supervisor binds it by a descriptor opened without
//! following any link ([`lazaret_helpers::hostpath::open_volume`]).

use crate::error::CliError;
use lazaret_helpers::hostpath::{check_private_dir, open_volume};
use lazaret_protocol::plan::SharedPathSpec;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// `<storage_root>/profiles/<profile>/shared`: where `profile`'s shared
/// directories are. The profile name is validated to a file-name-safe
/// alphabet by the config.
pub fn profile_dir(storage_root: &Path, profile: &str) -> PathBuf {
    storage_root.join("profiles").join(profile).join("shared")
}

/// The host directory name of the sandbox path `sandbox`: flat and
/// distinct for distinct paths (as a State Anchor's directory).
pub fn dir_name(sandbox: &str) -> String {
    lazaret_state::layout::anchor_dir_name(sandbox)
}

/// Makes (0700, on first use) and checks the host directory of each of
/// `profile`'s shared paths and returns where each one is. The directories
/// above the leaves are checked private like the Domain Root; the path
/// handed on is canonical up to `shared` (a Storage Root behind a link is
/// the user's choice), so the supervisor can open it with no link in any
/// component.
pub fn prepare(
    storage_root: &Path,
    profile: &str,
    paths: &[String],
    uid: u32,
) -> Result<Vec<SharedPathSpec>, CliError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let profiles = storage_root.join("profiles");
    let shared = profile_dir(storage_root, profile);
    for dir in [&profiles, &profiles.join(profile), &shared] {
        mkdir(dir, true)?;
        check_private_dir("Storage Root", dir, uid)?;
    }
    let shared = shared.canonicalize().map_err(CliError::storage(&shared))?;
    paths
        .iter()
        .map(|sandbox| {
            let host = shared.join(dir_name(sandbox));
            mkdir(&host, false)?;
            let fd = open_volume(&host)?;
            let st = rustix::fs::fstat(&fd).map_err(|e| CliError::Storage {
                path: host.display().to_string(),
                source: e.into(),
            })?;
            if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
                return Err(CliError::Placement(format!(
                    "the host directory of shared path {sandbox}, {}, is not a directory: remove it (Lazaret makes it anew)",
                    host.display()
                )));
            }
            Ok(SharedPathSpec {
                sandbox: sandbox.clone(),
                host,
            })
        })
        .collect()
}

/// `mkdir` with mode 0700; an existing entry is left to the checks that
/// follow (a leaf the sandbox replaced by a link is refused there, never
/// followed here: `mkdir` does not follow a final link).
fn mkdir(dir: &Path, recursive: bool) -> Result<(), CliError> {
    match std::fs::DirBuilder::new()
        .recursive(recursive)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CliError::Storage {
            path: dir.display().to_string(),
            source,
        }),
    }
}

/// The one line `lazaret run` says at start when the profile shares paths,
/// so that sharing is never a surprise.
pub fn notice(profile: &str, paths: &[String]) -> Option<String> {
    if paths.is_empty() {
        return None;
    }
    let list: Vec<String> = paths
        .iter()
        .map(|p| lazaret_protocol::display::message(p))
        .collect();
    Some(format!(
        "lazaret: note: shared with every workspace of profile {profile} (what one sandbox writes there, the others read): {}",
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn uid() -> u32 {
        rustix::process::getuid().as_raw()
    }

    #[test]
    fn host_directories_are_per_profile_and_path_and_private() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let paths = vec!["/root/.claude".to_owned(), "/home/u/.config/x".to_owned()];
        let a = prepare(&root, "claude-code", &paths, uid()).unwrap();
        let b = prepare(&root, "codex", &paths, uid()).unwrap();
        assert_eq!(
            a[0].host,
            root.join("profiles/claude-code/shared/root%2F.claude")
        );
        assert_eq!(
            a[1].host,
            root.join("profiles/claude-code/shared/home%2Fu%2F.config%2Fx")
        );
        assert_ne!(a[0].host, b[0].host, "two profiles share a directory");
        for p in [
            "profiles",
            "profiles/claude-code",
            "profiles/claude-code/shared",
            "profiles/claude-code/shared/root%2F.claude",
        ] {
            let md = std::fs::metadata(root.join(p)).unwrap();
            assert_eq!(md.mode() & 0o7777, 0o700, "{p}");
        }
        // Again: the same directories, what is in them kept.
        std::fs::write(a[0].host.join("f"), "kept").unwrap();
        assert_eq!(prepare(&root, "claude-code", &paths, uid()).unwrap(), a);
        assert_eq!(
            std::fs::read_to_string(a[0].host.join("f")).unwrap(),
            "kept"
        );
        assert!(prepare(&root, "none", &[], uid()).unwrap().is_empty());
        assert!(!root.join("profiles/none").exists());
    }

    #[test]
    fn a_leaf_replaced_by_a_link_is_refused_and_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let paths = vec!["/root/.claude".to_owned()];
        let leaf = prepare(&root, "p", &paths, uid()).unwrap()[0].host.clone();
        std::fs::remove_dir(&leaf).unwrap();
        let target = root.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &leaf).unwrap();
        let err = prepare(&root, "p", &paths, uid()).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        std::fs::remove_file(&leaf).unwrap();
        std::fs::write(&leaf, "").unwrap();
        let err = prepare(&root, "p", &paths, uid()).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }

    #[test]
    fn a_storage_root_behind_a_link_is_resolved_once() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let got = prepare(&link, "p", &["/x".to_owned()], uid()).unwrap();
        assert_eq!(got[0].host, real.join("profiles/p/shared/x"));
    }

    #[test]
    fn the_notice_names_every_path_escaped() {
        assert_eq!(notice("p", &[]), None);
        let line = notice("p", &["/root/.claude".into(), "/a\x1b[2J".into()]).unwrap();
        assert!(line.contains("profile p"), "{line}");
        assert!(line.ends_with(": /root/.claude, /a\\x1b[2J"), "{line}");
    }
}
