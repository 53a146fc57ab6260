//! The `lowers/` directory of the Storage Root: lookup, locking, staging,
//! publication and cleanup of prepared artifacts.

use crate::{ArtifactRecord, ImageError, PreparedImage};
use lazaret_helpers::userns::run_mapped;
use lazaret_protocol::plan::IdMap;
use rustix::fs::FlockOperation;
use std::collections::VecDeque;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const LOCK_FILE: &str = ".build.lock";
const STAGING_PREFIX: &str = ".staging-";
pub(crate) const TRASH_PREFIX: &str = ".trash-";
const ROOTFS: &str = "rootfs";
const COMPLETE: &str = "complete";
/// How many lines of a failed command's output go into its error.
pub(crate) const TAIL_LINES: usize = 20;

/// The prepared artifacts under `<storage_root>/lowers`, and the ID map used
/// to unpack and remove them.
#[derive(Clone, Debug)]
pub struct Store {
    lowers: PathBuf,
    id_map: IdMap,
}

/// An exclusive lock on `lowers/.build.lock`, released on drop.
pub(crate) struct BuildLock {
    _file: File,
}

impl Store {
    /// A store in `<storage_root>/lowers`. Creates nothing until an image is
    /// built.
    pub fn new(storage_root: &Path, id_map: IdMap) -> Self {
        Store {
            lowers: storage_root.join("lowers"),
            id_map,
        }
    }

    /// The Storage Root.
    pub fn storage_root(&self) -> &Path {
        self.lowers.parent().unwrap_or(Path::new("/"))
    }

    /// The Storage Catalog of this Storage Root.
    pub fn catalog(&self) -> crate::Catalog {
        crate::Catalog::open(self.storage_root())
    }

    /// `<storage_root>/lowers`.
    pub fn lowers_dir(&self) -> &Path {
        &self.lowers
    }

    /// `<storage_root>/lowers/<id>`, the directory of a published artifact.
    pub fn artifact_dir(&self, id: &str) -> PathBuf {
        self.lowers.join(id)
    }

    /// The catalog record of the published artifact `id` built here (the
    /// default image, a committed one) rather than copied from a source:
    /// its ID is the SHA-256 of its recipe, its source its `reference`.
    pub(crate) fn local_record(&self, id: &str, reference: &str, preparer: &str) -> ArtifactRecord {
        ArtifactRecord {
            id: id.to_string(),
            reference: reference.to_string(),
            source: reference.to_string(),
            manifest_digest: format!("sha256:{id}"),
            platform: crate::oci::host_platform(),
            preparer: preparer.to_string(),
            size: crate::tree_size(&self.artifact_dir(id).join("rootfs")),
            created: lazaret_catalog::now(),
        }
    }

    /// The ID map used to unpack and remove trees.
    pub fn id_map(&self) -> &IdMap {
        &self.id_map
    }

    /// The published artifact `id`, if its rootfs and its `complete`
    /// marker exist. Only looks; takes no lock and runs nothing.
    pub(crate) fn ready(&self, id: &str, reference: &str) -> Option<PreparedImage> {
        let dir = self.artifact_dir(id);
        let rootfs = dir.join(ROOTFS);
        (rootfs.is_dir() && dir.join(COMPLETE).is_file()).then(|| PreparedImage {
            id: id.to_string(),
            rootfs,
            reference: reference.to_string(),
        })
    }

    /// Creates `lowers/` (and the Storage Root) with mode 0700 if missing.
    pub(crate) fn ensure_lowers(&self) -> Result<(), ImageError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.lowers)
            .map_err(ImageError::io("create", &self.lowers))
    }

    fn open_lock(&self) -> Result<File, ImageError> {
        let path = self.lowers.join(LOCK_FILE);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(ImageError::io("open the build lock", &path))
    }

    /// Takes the build lock without waiting; `None` if another process
    /// holds it.
    pub(crate) fn try_lock(&self) -> Result<Option<BuildLock>, ImageError> {
        let file = self.open_lock()?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(BuildLock { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(ImageError::io_plain("lock", self.lowers.join(LOCK_FILE))(e)),
        }
    }

    /// Takes the build lock, waiting for another build if needed (and
    /// saying so through `progress`, naming `reference`).
    pub(crate) fn lock(
        &self,
        reference: &str,
        progress: &mut dyn FnMut(&str),
    ) -> Result<BuildLock, ImageError> {
        if let Some(lock) = self.try_lock()? {
            return Ok(lock);
        }
        progress(&format!("waiting for another build of {reference}"));
        let file = self.open_lock()?;
        loop {
            match rustix::fs::flock(&file, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(BuildLock { _file: file }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(ImageError::io_plain("lock", self.lowers.join(LOCK_FILE))(e)),
            }
        }
    }

    /// Creates a fresh staging directory `lowers/.staging-<random>` (0700).
    pub(crate) fn new_staging(&self) -> Result<PathBuf, ImageError> {
        let dir = tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .rand_bytes(12)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&self.lowers)
            .map_err(ImageError::io(
                "create a staging directory in",
                &self.lowers,
            ))?;
        Ok(dir.keep())
    }

    /// Removes stale staging directories left by interrupted builds. Does
    /// nothing while a build holds the lock: that build removed the stale
    /// ones when it started, and its own staging directory is not stale.
    pub fn remove_leftovers(&self) -> Result<(), ImageError> {
        if !self.lowers.is_dir() {
            return Ok(());
        }
        match self.try_lock()? {
            Some(_lock) => self.remove_leftovers_locked(&mut |_| {}),
            None => Ok(()),
        }
    }

    /// Removes stale staging directories; the caller holds the build lock.
    pub(crate) fn remove_leftovers_locked(
        &self,
        progress: &mut dyn FnMut(&str),
    ) -> Result<(), ImageError> {
        for dir in find_leftovers(&self.lowers)? {
            progress(&format!(
                "removing {}, left over by an interrupted build",
                dir.display()
            ));
            self.remove_tree(&dir)?;
        }
        Ok(())
    }

    /// Removes `path` recursively as ID 0 of the mapped user namespace, so
    /// files owned by subordinate IDs go too. Falls back to a plain removal
    /// when the namespace cannot be created and the tree is the developer's
    /// alone.
    pub(crate) fn remove_tree(&self, path: &Path) -> Result<(), ImageError> {
        // A tree of the developer's own files (a staging directory killed
        // before its ownership pass, or any tree when run as root) goes
        // without a user namespace.
        if std::fs::remove_dir_all(path).is_ok() {
            return Ok(());
        }
        let mut rm = Command::new("rm");
        rm.arg("-rf").arg("--").arg(path);
        match self.run_in_userns("rm -rf", &mut rm) {
            Ok(()) => {}
            Err(e @ ImageError::Userns { .. }) => {
                if std::fs::remove_dir_all(path).is_err() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(ImageError::io_plain("remove", path)(std::io::Error::other(
                "it still exists after `rm -rf`",
            ))),
        }
    }

    /// Runs `cmd` as ID 0 of a fresh user namespace mapped with the store's
    /// ID map. Its output goes to an anonymous file whose last lines end up
    /// in the error if it fails. `what` names the command in errors.
    pub(crate) fn run_in_userns(&self, what: &str, cmd: &mut Command) -> Result<(), ImageError> {
        let log = tempfile::tempfile_in(&self.lowers)
            .map_err(ImageError::io("create a log file in", &self.lowers))?;
        let out = log
            .try_clone()
            .map_err(ImageError::io("duplicate a log file in", &self.lowers))?;
        let err = log
            .try_clone()
            .map_err(ImageError::io("duplicate a log file in", &self.lowers))?;
        // Only redirections to existing fds and no environment changes: the
        // child of `run_mapped` must not allocate before it execs.
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let status = run_mapped(&self.id_map, cmd).map_err(|source| ImageError::Userns {
            what: what.to_string(),
            source,
        })?;
        if status.success() {
            return Ok(());
        }
        let mut log = log;
        let output = log
            .rewind()
            .map(|()| tail_lines(BufReader::new(log), &mut |_| {}).join("\n"))
            .unwrap_or_default();
        Err(ImageError::Command {
            what: what.to_string(),
            status: status.to_string(),
            output,
        })
    }

    /// Publishes a finished staging directory as artifact `id`: flushes it,
    /// renames it to `lowers/<id>`, writes the `complete` marker (holding
    /// `recipe`) last, then makes the artifact directory 0555.
    pub(crate) fn publish(
        &self,
        staging: &Path,
        id: &str,
        recipe: &str,
    ) -> Result<PathBuf, ImageError> {
        lazaret_helpers::fault::point("image:publish-staged");
        let staging_dir = File::open(staging).map_err(ImageError::io("open", staging))?;
        rustix::fs::syncfs(&staging_dir).map_err(|e| {
            ImageError::from_io("flush the file system of", staging.to_path_buf(), e.into())
        })?;
        drop(staging_dir);
        let dir = self.artifact_dir(id);
        std::fs::rename(staging, &dir).map_err(ImageError::io("publish the image as", &dir))?;
        lazaret_helpers::fault::point("image:publish-renamed");
        // Past the rename a failure (the marker is a new file: a full
        // file system refuses it) leaves no artifact directory without its
        // marker behind; the next preparation would remove it anyway, but
        // `image list` and a look at `lowers/` should not find it first.
        self.mark_complete(&dir, recipe).inspect_err(|_| {
            let _ = self.remove_incomplete(id);
        })?;
        Ok(dir)
    }

    /// Writes the `complete` marker of the just-renamed artifact `dir`,
    /// then makes it read-only: the last steps of [`Store::publish`].
    fn mark_complete(&self, dir: &Path, recipe: &str) -> Result<(), ImageError> {
        let marker = dir.join(COMPLETE);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(&marker)
            .map_err(ImageError::io("create", &marker))?;
        f.write_all(recipe.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(ImageError::io("write", &marker))?;
        sync_dir(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555))
            .map_err(ImageError::io("make read-only", dir))?;
        sync_dir(&self.lowers)
    }

    /// Removes a published but incomplete artifact directory (no marker).
    pub(crate) fn remove_incomplete(&self, id: &str) -> Result<bool, ImageError> {
        let dir = self.artifact_dir(id);
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(false);
        }
        // Make it writable again first, in case it was made 0555.
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        self.remove_tree(&dir)?;
        Ok(true)
    }
}

fn sync_dir(dir: &Path) -> Result<(), ImageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ImageError::io("flush", dir))
}

/// The staging directories in `lowers`.
pub(crate) fn find_leftovers(lowers: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let entries = match std::fs::read_dir(lowers) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ImageError::io("list", lowers)(e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(ImageError::io("list", lowers))?;
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        if name.starts_with(STAGING_PREFIX.as_bytes()) || name.starts_with(TRASH_PREFIX.as_bytes())
        {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

/// Reads `reader` to the end, split at `\n` and `\r`, passing each non-empty
/// line to `each`; returns the last [`TAIL_LINES`] lines.
pub(crate) fn tail_lines(mut reader: impl BufRead, each: &mut dyn FnMut(&str)) -> Vec<String> {
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&buf);
        for line in text.split(['\n', '\r']) {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            each(line);
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
    }
    tail.into()
}

/// A pipe, both ends close-on-exec; a failure is "cannot `what` `path`".
pub(crate) fn pipe(what: &'static str, path: &Path) -> Result<(OwnedFd, OwnedFd), ImageError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(ImageError::io_plain(what, path))
}

/// A [`pipe`] for a tool's standard output and error together: its read
/// end, and the write end twice.
pub(crate) fn output_pipe(
    what: &'static str,
    path: &Path,
) -> Result<(OwnedFd, OwnedFd, OwnedFd), ImageError> {
    let (read, write) = pipe(what, path)?;
    let write2 = rustix::io::dup(&write).map_err(ImageError::io_plain(what, path))?;
    Ok((read, write, write2))
}

/// Spawns `cmd`, a tool the preparation runs (skopeo, mmdebstrap), then
/// drops it, closing our copies of the write ends it was given so that
/// the reader sees EOF when the tool exits. `missing` when the tool is
/// not installed; another failure is "cannot `what` `path`".
pub(crate) fn spawn_tool(
    mut cmd: Command,
    missing: ImageError,
    what: &'static str,
    path: &Path,
) -> Result<Child, ImageError> {
    let spawned = cmd.spawn();
    drop(cmd);
    match spawned {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing),
        Err(e) => Err(ImageError::io(what, path)(e)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{default_artifact_id, PrepareOptions, Preparer};
    use std::os::unix::fs::MetadataExt;

    fn dummy_map() -> IdMap {
        IdMap {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            sub_uid: (100000, 65535),
            sub_gid: (100000, 65535),
        }
    }

    #[test]
    fn unsupported_reference_is_rejected() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(root.path(), dummy_map());
        let err = store
            .prepare(
                "docker.io/library/ubuntu:24.04",
                &PrepareOptions::default(),
                &mut |_| {},
            )
            .unwrap_err();
        assert!(
            matches!(err, ImageError::UnsupportedReference { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("docker.io/library/ubuntu:24.04"), "{msg}");
        assert!(msg.contains("use one of `lazaret:default`"), "{msg}");
        // Nothing was created.
        assert!(!store.lowers_dir().exists());
    }

    #[test]
    fn fast_path_returns_a_published_tree_without_building() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(root.path(), dummy_map());
        let opts = PrepareOptions { statx_shim: true };
        let id = default_artifact_id(&opts);
        let dir = store.artifact_dir(&id);
        std::fs::create_dir_all(dir.join("rootfs/usr/bin")).unwrap();

        // Without the marker the tree is not ready.
        assert!(store.ready(&id, "lazaret:default").is_none());
        std::fs::write(dir.join("complete"), "x").unwrap();

        let mut lines = Vec::new();
        let img = store
            .prepare("lazaret:default", &opts, &mut |l| lines.push(l.to_string()))
            .unwrap();
        assert_eq!(img.id, id);
        assert_eq!(img.rootfs, dir.join("rootfs"));
        assert_eq!(img.reference, "lazaret:default");
        assert!(lines.is_empty(), "{lines:?}");
        // No lock, no staging: nothing was built.
        assert!(!store.lowers_dir().join(LOCK_FILE).exists());
        assert_eq!(std::fs::read_dir(store.lowers_dir()).unwrap().count(), 1);
        // The other option set is a different artifact.
        assert!(store
            .ready(
                &default_artifact_id(&PrepareOptions { statx_shim: false }),
                "lazaret:default"
            )
            .is_none());
    }

    /// Tests that clone into user namespaces run one at a time: a child
    /// cloned by one test thread inherits the other's pipe ends until it
    /// execs, and a failed mapping then waits for an EOF that never comes.
    pub(crate) static USERNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn staging_leftovers_are_found_and_removed() {
        let _serial = USERNS.lock().unwrap_or_else(|e| e.into_inner());
        let root = tempfile::tempdir().unwrap();
        let map = lazaret_helpers::userns::current_id_map().ok();
        let store = Store::new(root.path(), map.clone().unwrap_or_else(dummy_map));
        store.ensure_lowers().unwrap();
        let lowers = store.lowers_dir().to_path_buf();
        assert_eq!(
            std::fs::metadata(&lowers).unwrap().permissions().mode() & 0o7777,
            0o700
        );
        let a = lowers.join(".staging-aaaa");
        let b = lowers.join(".staging-bbbb");
        std::fs::create_dir_all(a.join("rootfs/etc")).unwrap();
        std::fs::write(a.join("rootfs/etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        // A read-only directory, as in a real tree.
        std::fs::create_dir_all(b.join("rootfs/proc")).unwrap();
        std::fs::set_permissions(b.join("rootfs"), std::fs::Permissions::from_mode(0o555)).unwrap();
        let published = lowers.join("0123abcd");
        std::fs::create_dir_all(published.join("rootfs")).unwrap();
        std::fs::write(lowers.join(LOCK_FILE), "").unwrap();

        assert_eq!(find_leftovers(&lowers).unwrap(), vec![a.clone(), b.clone()]);
        // A fresh staging directory is found too, and is 0700.
        let s = store.new_staging().unwrap();
        assert!(s
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(".staging-"));
        assert_eq!(
            std::fs::metadata(&s).unwrap().permissions().mode() & 0o7777,
            0o700
        );
        assert_eq!(find_leftovers(&lowers).unwrap().len(), 3);

        if map.is_none() {
            eprintln!("no subordinate ids for this user: only the detection was tested");
            return;
        }
        // Give part of the tree to subordinate ids, as in a real image, so
        // that only a removal inside the user namespace succeeds.
        store
            .run_in_userns(
                "chown",
                Command::new("chown")
                    .args(["-R", "1:1", "--"])
                    .arg(a.join("rootfs")),
            )
            .unwrap();
        let sub = std::fs::metadata(a.join("rootfs/etc/passwd"))
            .unwrap()
            .uid();
        assert_eq!(sub, map.as_ref().unwrap().sub_uid.0);
        assert!(std::fs::remove_dir_all(&a).is_err());
        // While another build holds the lock, nothing is removed.
        let held = store.try_lock().unwrap().expect("lock is free");
        assert!(store.try_lock().unwrap().is_none());
        store.remove_leftovers().unwrap();
        assert_eq!(find_leftovers(&lowers).unwrap().len(), 3);
        drop(held);

        store.remove_leftovers().unwrap();
        assert!(find_leftovers(&lowers).unwrap().is_empty());
        assert!(published.join("rootfs").is_dir());
        assert!(lowers.join(LOCK_FILE).exists());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let text: String = (0..30).map(|i| format!("line {i}\r\n")).collect::<String>() + "\rlast";
        let mut seen = 0;
        let tail = tail_lines(text.as_bytes(), &mut |_| seen += 1);
        assert_eq!(seen, 31);
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail[0], "line 11");
        assert_eq!(tail.last().unwrap(), "last");
    }
}
