//! The builder of `lazaret:default`: Debian bookworm built by `mmdebstrap
//! --mode=unshare`, unpacked inside the mapped user namespace.

use crate::store::{output_pipe, spawn_tool, tail_lines, Store};
use crate::{
    default_artifact_id, default_recipe, ImageError, PrepareOptions, PreparedImage,
    BUILDER_VERSION, DEFAULT_REFERENCE,
};
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) const SUITE: &str = "bookworm";
pub(crate) const VARIANT: &str = "apt";
pub(crate) const PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "git",
    "ca-certificates",
    "curl",
    "procps",
    "less",
    "python3",
    // What agents and developers reach for first.
    "make",
    "openssh-client",
    "ripgrep",
    "jq",
    "vim-tiny",
    // The profile's `user` takes root with it (passwordless).
    "sudo",
    // Terminfo for kitty, alacritty, foot, wezterm and others.
    "ncurses-term",
];

/// Directories the sandbox mounts over, which must exist in the read-only
/// rootfs. `tmp` is handled apart (mode 1777).
pub(crate) const MOUNT_POINTS: &[&str] = &["workspace", "proc", "dev", "sys", "run", ".lazaret"];

/// The statx LD_PRELOAD shim, compiled by `build.rs` from
/// `shim/statx-shim.c`.
pub(crate) static STATX_SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/statx-shim.so"));
/// Where the shim goes in the image.
pub(crate) const SHIM_PATH: &str = "usr/lib/lazaret-statx-shim.so";

/// Prepares `lazaret:default`: returns the published tree, or builds and
/// publishes it under the build lock.
pub(crate) fn prepare_default(
    store: &Store,
    opts: &PrepareOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<PreparedImage, ImageError> {
    let id = default_artifact_id(opts);
    if let Some(img) = store.ready(&id, DEFAULT_REFERENCE) {
        record(store, &id)?;
        return Ok(img);
    }
    store.ensure_lowers()?;
    let _lock = store.lock(DEFAULT_REFERENCE, progress)?;
    if let Some(img) = store.ready(&id, DEFAULT_REFERENCE) {
        record(store, &id)?;
        return Ok(img);
    }
    store.remove_leftovers_locked(progress)?;
    if store.remove_incomplete(&id)? {
        progress("removed an incompletely published copy of the image");
    }

    let staging = store.new_staging()?;
    if let Err(e) = build_into(store, &staging, opts, progress) {
        // Best effort: the next build removes what is left.
        let _ = store.remove_tree(&staging);
        return Err(e);
    }
    store.publish(&staging, &id, &default_recipe(opts))?;
    record(store, &id)?;
    store
        .ready(&id, DEFAULT_REFERENCE)
        .ok_or_else(|| ImageError::BadImage {
            detail: format!(
                "{} vanished right after it was published",
                store.artifact_dir(&id).display()
            ),
        })
}

/// Records the published default image in the Storage Catalog, unless it
/// is there already (so the fast path costs one small transaction).
fn record(store: &Store, id: &str) -> Result<(), ImageError> {
    let catalog = store.catalog();
    if catalog.artifact(id)?.is_some() {
        return Ok(());
    }
    let rec = store.local_record(id, DEFAULT_REFERENCE, BUILDER_VERSION);
    catalog.record_artifact(&rec, None, || store.ready(id, DEFAULT_REFERENCE).is_some())?;
    Ok(())
}

/// Builds the rootfs into `<staging>/rootfs`.
fn build_into(
    store: &Store,
    staging: &Path,
    opts: &PrepareOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    let tar = staging.join("rootfs.tar");
    progress(&format!(
        "building {DEFAULT_REFERENCE} from Debian {SUITE} packages with mmdebstrap (this takes about a minute, once)"
    ));
    run_mmdebstrap(&tar, progress)?;

    progress("unpacking the image");
    let rootfs = staging.join("rootfs");
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&rootfs)
        .map_err(ImageError::io("create", &rootfs))?;
    let mut cmd = Command::new("tar");
    cmd.args(["--numeric-owner", "-xpf"])
        .arg(&tar)
        .arg("-C")
        .arg(&rootfs)
        .arg("--exclude=./dev/*");
    store.run_in_userns("tar -x", &mut cmd)?;
    std::fs::remove_file(&tar).map_err(ImageError::io("remove", &tar))?;

    make_mount_points(store, &rootfs)?;
    if opts.statx_shim {
        progress("installing the statx shim and apt's settings for this runsc");
        install_statx_shim(store, staging, &rootfs)?;
    }
    Ok(())
}

/// Runs mmdebstrap, streaming its output lines to `progress`.
fn run_mmdebstrap(tar: &Path, progress: &mut dyn FnMut(&str)) -> Result<(), ImageError> {
    let (read, write, write2) = output_pipe("create a pipe for mmdebstrap writing", tar)?;
    let mut cmd = Command::new("mmdebstrap");
    if let Some(dir) = mmdebstrap_tmpdir(progress) {
        cmd.env("TMPDIR", dir);
    }
    cmd.arg("--mode=unshare")
        .arg(format!("--variant={VARIANT}"))
        .arg(format!("--include={}", PACKAGES.join(",")))
        .arg(SUITE)
        .arg(tar)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(write2));
    let mut child = spawn_tool(
        cmd,
        ImageError::MmdebstrapMissing,
        "run mmdebstrap to write",
        tar,
    )?;
    let tail = tail_lines(BufReader::new(File::from(read)), progress);
    let status = child
        .wait()
        .map_err(ImageError::io("wait for mmdebstrap writing", tar))?;
    if !status.success() {
        return Err(ImageError::Mmdebstrap {
            status: status.to_string(),
            output: tail.join("\n"),
        });
    }
    Ok(())
}

/// The directory mmdebstrap should create its temporary chroot in, when
/// `$TMPDIR` does not fit. mmdebstrap fills the chroot as the first
/// subordinate ID, so every directory above it must be searchable by
/// others, which a private `$TMPDIR` (0700) is not.
fn mmdebstrap_tmpdir(progress: &mut dyn FnMut(&str)) -> Option<PathBuf> {
    let env = std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match env {
        Some(ref d) if !usable_tmpdir(d) => {}
        _ => return None,
    }
    let fallback = ["/tmp", "/var/tmp"]
        .into_iter()
        .map(PathBuf::from)
        .find(|d| usable_tmpdir(d))?;
    progress(&format!(
        "TMPDIR is not searchable by your subordinate ids: mmdebstrap uses {} instead",
        fallback.display()
    ));
    Some(fallback)
}

/// `dir` is writable by the developer and searchable by anyone, and so are
/// (searchable) all its ancestors.
fn usable_tmpdir(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.is_absolute()
        && rustix::fs::access(
            dir,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        )
        .is_ok()
        && dir.ancestors().all(|a| {
            std::fs::metadata(a).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0)
        })
}

/// Creates the mount points at the top of `rootfs`, inside the user
/// namespace (subdirectories may belong to subordinate IDs).
fn make_mount_points(store: &Store, rootfs: &Path) -> Result<(), ImageError> {
    // Refuse symlinks or files there: the commands below run on host paths
    // and must not follow a link out of the tree.
    for name in MOUNT_POINTS.iter().chain(&["tmp"]) {
        let path = rootfs.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.is_dir() => {
                return Err(ImageError::BadImage {
                    detail: format!("/{name} is not a directory"),
                })
            }
            _ => {}
        }
    }
    let mut mkdir = Command::new("mkdir");
    mkdir.args(["-p", "-m", "0755", "--"]);
    for name in MOUNT_POINTS {
        mkdir.arg(rootfs.join(name));
    }
    store.run_in_userns("mkdir", &mut mkdir)?;
    let tmp = rootfs.join("tmp");
    store.run_in_userns("mkdir", Command::new("mkdir").arg("-p").arg("--").arg(&tmp))?;
    store.run_in_userns(
        "chmod",
        Command::new("chmod").arg("1777").arg("--").arg(&tmp),
    )
}

/// Installs the statx shim and lists it in `etc/ld.so.preload`, owned by
/// ID 0 of the namespace. The sources are first written into `staging`.
fn install_statx_shim(store: &Store, staging: &Path, rootfs: &Path) -> Result<(), ImageError> {
    for name in ["usr/lib", "etc", "etc/apt/apt.conf.d"] {
        match std::fs::symlink_metadata(rootfs.join(name)) {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(ImageError::BadImage {
                    detail: format!("/{name} is not a directory"),
                })
            }
        }
    }
    let preload = format!("/{SHIM_PATH}\n");
    for (src, content, dst) in [
        ("statx-shim.so", STATX_SHIM, SHIM_PATH),
        ("ld.so.preload", preload.as_bytes(), "etc/ld.so.preload"),
        (
            "apt-no-pty",
            crate::APT_NO_PTY.as_bytes(),
            "etc/apt/apt.conf.d/90lazaret-no-pty",
        ),
    ] {
        let src = staging.join(src);
        write_new(&src, content)?;
        let mut install = Command::new("install");
        install
            .args(["-m", "0644", "-o", "0", "-g", "0", "-T", "--"])
            .arg(&src)
            .arg(rootfs.join(dst));
        store.run_in_userns("install", &mut install)?;
        std::fs::remove_file(&src).map_err(ImageError::io("remove", &src))?;
    }
    Ok(())
}

fn write_new(path: &Path, content: &[u8]) -> Result<(), ImageError> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .and_then(|mut f| f.write_all(content))
        .map_err(ImageError::io("write", path))
}
