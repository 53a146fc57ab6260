//! Lazaret's layer unpacker: applies an image's layers, in order, to a
//! rootfs inside the staging directory, checking every entry first.
//!
//! What it enforces (the README's table says the same):
//!
//! | content | outcome |
//! | --- | --- |
//! | entry or hard-link target with a `..` component, or absolute | refused |
//! | a write through a symlink (`link -> /etc`, then `link/passwd`) | resolved inside the rootfs (`openat2(RESOLVE_IN_ROOT)`), never outside; fails if the target does not exist there |
//! | symlinks themselves | kept as they are: they are only ever resolved inside the sandbox |
//! | hard link to a missing file or to a directory | refused |
//! | character and block devices | skipped (neutralised), listed in the progress |
//! | setuid and setgid bits on non-directories | cleared (neutralised) |
//! | owner beyond the mapped subordinate range | refused |
//! | extended attributes (file capabilities, ACLs) | not applied (neutralised) |
//! | blob larger or smaller than its descriptor, or wrong digest; wrong uncompressed digest (`diff_ids`) | refused |
//! | truncated or corrupt compression or tar stream | refused |
//! | more than [`Limits`] of unpacked bytes or entries | refused |
//! | unknown entry types (sparse files, ...) or layer media types | refused |
//!
//! Every file is created through a directory file descriptor that was
//! resolved with `RESOLVE_IN_ROOT`, with `O_NOFOLLOW | O_EXCL`, so nothing
//! outside the rootfs is ever written. The unpacking runs as the developer;
//! ownership is applied at the end, in the mapped user namespace, to the
//! (few) entries not owned by ID 0, after checking that no path to them
//! goes through a symlink.
//!
//! Whiteouts follow the OCI image spec: `.wh.NAME` removes `NAME` of the
//! layers below, `.wh..wh..opq` removes every entry of its directory that
//! does not come from the same layer.

use crate::progress::Progress;
use crate::store::Store;
use crate::ImageError;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Timestamps};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Bounds on what one image may unpack to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Uncompressed bytes of all layers together.
    pub max_unpacked: u64,
    /// Tar entries of all layers together.
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unpacked: 32 << 30,
            max_entries: 2_000_000,
        }
    }
}

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// One layer, as the manifest describes it.
#[derive(Clone, Debug)]
pub(crate) struct Layer {
    pub blob: PathBuf,
    pub digest: String,
    pub size: u64,
    pub diff_id: String,
    pub compression: Compression,
}

/// A reader that hashes and counts what passes, and fails once more than
/// `limit` bytes came (setting `over`).
struct Hashing<'a, R> {
    inner: R,
    hasher: Sha256,
    n: u64,
    limit: u64,
    over: &'a Cell<bool>,
    progress: Option<&'a mut dyn Progress>,
}

impl<'a, R: Read> Hashing<'a, R> {
    fn new(
        inner: R,
        limit: u64,
        over: &'a Cell<bool>,
        progress: Option<&'a mut dyn Progress>,
    ) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            n: 0,
            limit,
            over,
            progress,
        }
    }

    fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let got = self.inner.read(buf)?;
        self.n += got as u64;
        if self.n > self.limit {
            self.over.set(true);
            return Err(std::io::Error::other("more data than allowed"));
        }
        self.hasher.update(&buf[..got]);
        if let Some(p) = self.progress.as_mut() {
            p.advance(got as u64);
        }
        Ok(got)
    }
}

/// Why a tar path is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadPath {
    #[error("its path contains `..`")]
    ParentDir,
    #[error("its path is absolute")]
    Absolute,
}

/// Splits a tar path into normal components. `Err` says why it is refused.
pub(crate) fn normalize(raw: &Path) -> Result<Vec<OsString>, BadPath> {
    let mut out = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err(BadPath::ParentDir),
            Component::RootDir | Component::Prefix(_) => return Err(BadPath::Absolute),
        }
    }
    Ok(out)
}

fn errno_of(e: &std::io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw_os_error)
}

/// One entry, as its errors name it: its layer, its path as shown, and
/// the rootfs.
struct EntryCx<'a> {
    layer: &'a str,
    shown: &'a str,
    rootfs: PathBuf,
}

impl EntryCx<'_> {
    fn hostile(&self, reason: String) -> ImageError {
        ImageError::HostileEntry {
            layer: self.layer.to_string(),
            entry: self.shown.to_string(),
            reason,
        }
    }

    /// A failure to `what`. A full or read-only Storage Root is no fault
    /// of the image: it is reported as such, never as a hostile entry.
    fn io(&self, what: &str, e: std::io::Error) -> ImageError {
        if lazaret_helpers::storage::is_unwritable(&e) {
            ImageError::Unwritable {
                what: format!(
                    "{what} for entry `{}` (layer {}) in",
                    self.shown, self.layer
                ),
                path: self.rootfs.clone(),
                source: e,
            }
        } else {
            self.hostile(format!("cannot {what}: {e}"))
        }
    }
}

/// What an entry's header says, as applied.
struct EntryMeta {
    kind: tar::EntryType,
    /// Permission bits (`0o7777`).
    mode: u32,
    owner: (u32, u32),
    mtime: Option<u64>,
}

/// Where an entry goes: its parent directory (resolved inside the rootfs)
/// and that directory's path, its name, and its own path.
struct Place<'a> {
    dir: OwnedFd,
    prel: PathBuf,
    name: &'a OsStr,
    rel: PathBuf,
}

/// A link entry's target, as its bytes (empty if it has none).
fn link_target<R: Read>(entry: &tar::Entry<'_, R>) -> Vec<u8> {
    entry
        .link_name_bytes()
        .map(|t| t.into_owned())
        .unwrap_or_default()
}

/// Copies a regular file's content from the tar stream into `f`; the
/// bytes copied, which must be the entry's size.
fn copy_content<R: Read>(
    cx: &EntryCx,
    entry: &mut tar::Entry<'_, R>,
    f: &mut File,
    diff_over: &Cell<bool>,
) -> Result<u64, ImageError> {
    let want = entry.size();
    let mut buf = vec![0u8; 128 << 10];
    let mut got = 0u64;
    loop {
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) if diff_over.get() => return Err(cx.hostile("the image is too large".into())),
            Err(e) => {
                return Err(cx.hostile(format!(
                    "the layer is truncated or corrupt inside this entry ({e})"
                )))
            }
        };
        f.write_all(&buf[..n])
            .map_err(|e| cx.io("write the file", e))?;
        got += n as u64;
    }
    if got != want {
        return Err(cx.hostile(format!(
            "the layer is truncated inside this entry ({got} of {want} bytes)"
        )));
    }
    Ok(got)
}

/// Applies layers to a rootfs. See the module documentation.
pub(crate) struct Unpacker {
    root: OwnedFd,
    root_path: PathBuf,
    max_uid: u64,
    max_gid: u64,
    limits: Limits,
    unpacked: u64,
    entries: u64,
    /// Bytes of regular-file content written.
    pub size: u64,
    /// Final (mode, mtime) of every directory, by resolved path.
    dirs: BTreeMap<PathBuf, (u32, Option<u64>)>,
    /// Entries not owned by (0, 0), by resolved path.
    owners: BTreeMap<PathBuf, (u32, u32)>,
    /// Resolved paths created by the current layer (for opaque dirs).
    this_layer: HashSet<PathBuf>,
    /// Files whose setuid/setgid bits were cleared.
    pub stripped: Vec<String>,
    /// Device nodes skipped.
    pub devices: Vec<String>,
}

const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);
/// Beneath the root, through no symlink (also the commit's walk).
pub(crate) const NO_SYMLINKS: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// `p`, or `.` for the root itself (openat2 takes no empty path).
pub(crate) fn dot(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

impl Unpacker {
    /// An unpacker into the existing, empty directory `root_path`, for a
    /// sandbox mapping IDs `0..=max_uid` and `0..=max_gid`.
    pub(crate) fn new(
        root_path: &Path,
        max_uid: u32,
        max_gid: u32,
        limits: Limits,
    ) -> Result<Unpacker, ImageError> {
        let root_path = root_path
            .canonicalize()
            .map_err(ImageError::io("resolve", root_path))?;
        let root = rustix::fs::open(
            &root_path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(ImageError::io_plain("open", root_path.clone()))?;
        let mut dirs = BTreeMap::new();
        dirs.insert(PathBuf::new(), (0o755, None));
        Ok(Unpacker {
            root,
            root_path,
            max_uid: max_uid.into(),
            max_gid: max_gid.into(),
            limits,
            unpacked: 0,
            entries: 0,
            size: 0,
            dirs,
            owners: BTreeMap::new(),
            this_layer: HashSet::new(),
            stripped: Vec::new(),
            devices: Vec::new(),
        })
    }

    fn open_dir(&self, rel: &Path) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::openat2(
            &self.root,
            dot(rel),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            IN_ROOT,
        )?)
    }

    /// The path of directory `fd` relative to the rootfs.
    fn rel_of(&self, fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
        let p = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        p.strip_prefix(&self.root_path)
            .map(Path::to_path_buf)
            .map_err(|_| std::io::Error::other("it resolves outside the rootfs"))
    }

    /// The directory `comps` (resolved inside the rootfs), created with
    /// its missing ancestors, and its resolved path.
    fn parent(&mut self, comps: &[OsString]) -> std::io::Result<(OwnedFd, PathBuf)> {
        let path: PathBuf = comps.iter().collect();
        match self.open_dir(&path) {
            Ok(fd) => {
                let rel = self.rel_of(fd.as_fd())?;
                return Ok((fd, rel));
            }
            Err(e) if errno_of(&e) == Some(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
        let mut fd = self.open_dir(Path::new(""))?;
        for i in 0..comps.len() {
            let prefix: PathBuf = comps[..=i].iter().collect();
            fd = match self.open_dir(&prefix) {
                Ok(f) => f,
                Err(e) if errno_of(&e) == Some(Errno::NOENT) => {
                    rustix::fs::mkdirat(&fd, comps[i].as_os_str(), Mode::from_raw_mode(0o700))?;
                    let f = self.open_dir(&prefix)?;
                    let rel = self.rel_of(f.as_fd())?;
                    self.dirs.insert(rel.clone(), (0o755, None));
                    self.this_layer.insert(rel);
                    f
                }
                Err(e) => return Err(e),
            };
        }
        let rel = self.rel_of(fd.as_fd())?;
        Ok((fd, rel))
    }

    /// The existing directory `comps`, if it exists.
    fn existing_dir(&self, comps: &[OsString]) -> std::io::Result<Option<(OwnedFd, PathBuf)>> {
        let path: PathBuf = comps.iter().collect();
        match self.open_dir(&path) {
            Ok(fd) => {
                let rel = self.rel_of(fd.as_fd())?;
                Ok(Some((fd, rel)))
            }
            Err(e) if matches!(errno_of(&e), Some(Errno::NOENT | Errno::NOTDIR)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Forgets the records of `rel` and everything beneath it.
    fn forget(&mut self, rel: &Path) {
        for map in [&mut self.dirs as &mut dyn Prune, &mut self.owners] {
            map.prune(rel);
        }
    }

    /// Removes `name` in directory `dir` (at `rel`), whatever it is.
    fn remove_at(&mut self, dir: &OwnedFd, rel: &Path, name: &OsStr) -> std::io::Result<()> {
        let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            // Through the descriptor's magic link: the directory itself,
            // with no symlink left to follow. remove_dir_all does not
            // follow symlinks inside.
            let mut p = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
            p.push(name);
            std::fs::remove_dir_all(&p)?;
        } else {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        }
        self.forget(&rel.join(name));
        Ok(())
    }

    /// Removes every entry of directory `dir` (at `rel`) that the current
    /// layer did not create.
    fn opaque(&mut self, dir: &OwnedFd, rel: &Path) -> std::io::Result<()> {
        let names = crate::commit::names(dir.as_fd())?;
        for n in names {
            if !self.this_layer.contains(&rel.join(&n)) {
                self.remove_at(dir, rel, &n)?;
            }
        }
        Ok(())
    }

    /// Applies one layer. `progress` advances by compressed bytes read.
    pub(crate) fn apply_layer(
        &mut self,
        layer: &Layer,
        progress: &mut dyn Progress,
    ) -> Result<(), ImageError> {
        self.this_layer.clear();
        let file = File::open(&layer.blob).map_err(ImageError::io("open", &layer.blob))?;
        let raw_over = Cell::new(false);
        let diff_over = Cell::new(false);
        let mut raw = Hashing::new(file, layer.size, &raw_over, Some(progress));
        let read = self.read_layer(layer, &mut raw, &diff_over);
        // Whatever happened, hash the rest of the blob: a wrong digest is
        // the most precise report.
        let drained = std::io::copy(&mut raw, &mut std::io::sink());
        let bad = |reason: String| ImageError::BadBlob {
            what: "layer",
            digest: layer.digest.clone(),
            reason,
        };
        if raw_over.get() {
            return Err(bad(format!(
                "the blob is larger than the {} bytes its manifest says",
                layer.size
            )));
        }
        if let Err(e) = drained {
            return Err(bad(format!("cannot read the blob: {e}")));
        }
        if raw.n != layer.size {
            return Err(bad(format!(
                "the blob is {} bytes, its manifest says {}",
                raw.n, layer.size
            )));
        }
        let digest = raw.digest();
        if digest != layer.digest {
            return Err(bad(format!(
                "its content has digest {digest}, not the one its manifest names"
            )));
        }
        let (n, diff) = read?;
        if diff != layer.diff_id {
            return Err(bad(format!(
                "it unpacks to content with digest {diff}, but the image config says {}",
                layer.diff_id
            )));
        }
        self.unpacked += n;
        Ok(())
    }

    /// Reads and applies the tar stream of `layer`; returns the
    /// uncompressed size and digest.
    fn read_layer(
        &mut self,
        layer: &Layer,
        raw: &mut dyn Read,
        diff_over: &Cell<bool>,
    ) -> Result<(u64, String), ImageError> {
        let corrupt = |after: &str, e: std::io::Error| ImageError::HostileEntry {
            layer: layer.digest.clone(),
            entry: after.to_string(),
            reason: format!("the layer is truncated or corrupt after this entry ({e})"),
        };
        let dec: Box<dyn Read + '_> = match layer.compression {
            Compression::None => Box::new(raw),
            Compression::Gzip => Box::new(flate2::read::GzDecoder::new(raw)),
            Compression::Zstd => {
                Box::new(zstd::stream::read::Decoder::new(raw).map_err(|e| corrupt("(start)", e))?)
            }
        };
        let remaining = self.limits.max_unpacked.saturating_sub(self.unpacked);
        let mut diff = Hashing::new(dec, remaining, diff_over, None);
        let max = self.limits.max_unpacked;
        let too_big = || ImageError::BadBlob {
            what: "layer",
            digest: layer.digest.clone(),
            reason: format!("the image unpacks to more than {max} bytes, the limit"),
        };
        let mut last = String::from("(start of the layer)");
        {
            let mut ar = tar::Archive::new(&mut diff);
            let entries = ar.entries().map_err(|e| corrupt(&last, e))?;
            for e in entries {
                let mut e = match e {
                    Ok(e) => e,
                    Err(_) if diff_over.get() => return Err(too_big()),
                    Err(err) => return Err(corrupt(&last, err)),
                };
                last = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                self.apply_entry(&layer.digest, &last, &mut e, diff_over)
                    .map_err(|x| if diff_over.get() { too_big() } else { x })?;
            }
        }
        // The end-of-archive blocks and any padding.
        if let Err(e) = std::io::copy(&mut diff, &mut std::io::sink()) {
            if diff_over.get() {
                return Err(too_big());
            }
            return Err(corrupt(&last, e));
        }
        Ok((diff.n, diff.digest()))
    }

    fn apply_entry<R: Read>(
        &mut self,
        layer: &str,
        shown: &str,
        entry: &mut tar::Entry<'_, R>,
        diff_over: &Cell<bool>,
    ) -> Result<(), ImageError> {
        let cx = EntryCx {
            layer,
            shown,
            rootfs: self.root_path.clone(),
        };
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(cx.hostile(format!(
                "the image has more than {} entries, the limit",
                self.limits.max_entries
            )));
        }
        let raw = entry.path_bytes().into_owned();
        let comps =
            normalize(Path::new(OsStr::from_bytes(&raw))).map_err(|r| cx.hostile(r.to_string()))?;
        let meta = self.entry_meta(&cx, entry.header())?;

        let Some((name, parents)) = comps.split_last() else {
            // The root itself (`./`).
            if !meta.kind.is_dir() {
                return Err(cx.hostile("the rootfs itself must be a directory".into()));
            }
            self.dirs.insert(PathBuf::new(), (meta.mode, meta.mtime));
            self.set_owner(PathBuf::new(), meta.owner);
            return Ok(());
        };
        if let Some(target) = name.as_bytes().strip_prefix(b".wh.") {
            return self.apply_whiteout(&cx, parents, target);
        }

        if matches!(meta.kind, tar::EntryType::Char | tar::EntryType::Block) {
            self.devices.push(format!("{shown} (layer {layer})"));
            return Ok(());
        }
        if matches!(
            meta.kind,
            tar::EntryType::XGlobalHeader
                | tar::EntryType::XHeader
                | tar::EntryType::GNULongName
                | tar::EntryType::GNULongLink
        ) {
            return Ok(());
        }
        let (dir, prel) = self
            .parent(parents)
            .map_err(|e| cx.io("create its parent directory inside the rootfs", e))?;
        let at = Place {
            rel: prel.join(name),
            dir,
            prel,
            name: name.as_os_str(),
        };
        match meta.kind {
            tar::EntryType::Directory => self.make_dir(&cx, &at, &meta)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                self.write_file(&cx, &at, &meta, entry, diff_over)?
            }
            tar::EntryType::Symlink => self.make_symlink(&cx, &at, entry)?,
            tar::EntryType::Link => return self.make_hard_link(&cx, at, entry),
            tar::EntryType::Fifo => self.make_fifo(&cx, &at, meta.mode)?,
            other => return Err(cx.hostile(format!("its entry type {other:?} is not supported"))),
        }
        self.set_owner(at.rel.clone(), meta.owner);
        self.this_layer.insert(at.rel);
        Ok(())
    }

    /// The entry's header as applied: its type, mode, owner (checked
    /// against the mapped ids) and mtime.
    fn entry_meta(&self, cx: &EntryCx, header: &tar::Header) -> Result<EntryMeta, ImageError> {
        let kind = header.entry_type();
        let mode = header.mode().map_err(|e| cx.io("read the mode", e))? & 0o7777;
        let uid = header.uid().map_err(|e| cx.io("read the owner", e))?;
        let gid = header.gid().map_err(|e| cx.io("read the group", e))?;
        let mtime = header.mtime().ok();
        if uid > self.max_uid || gid > self.max_gid {
            return Err(cx.hostile(format!(
                "it is owned by {uid}:{gid}, beyond the ids the sandbox maps (0..={}:0..={})",
                self.max_uid, self.max_gid
            )));
        }
        Ok(EntryMeta {
            kind,
            mode,
            owner: (uid as u32, gid as u32),
            mtime,
        })
    }

    /// A whiteout `.wh.TARGET` in directory `parents`: removes `TARGET`
    /// (or, for `.wh..wh..opq`, what the layers below put there).
    fn apply_whiteout(
        &mut self,
        cx: &EntryCx,
        parents: &[OsString],
        target: &[u8],
    ) -> Result<(), ImageError> {
        let Some((dir, rel)) = self
            .existing_dir(parents)
            .map_err(|e| cx.io("find the whiteout's directory", e))?
        else {
            return Ok(());
        };
        if target == b".wh..opq" {
            return self
                .opaque(&dir, &rel)
                .map_err(|e| cx.io("apply the opaque whiteout", e));
        }
        if target.is_empty() || target.starts_with(b".wh.") {
            return Err(cx.hostile("it is a malformed whiteout".into()));
        }
        self.remove_at(&dir, &rel, OsStr::from_bytes(target))
            .map_err(|e| cx.io("apply the whiteout", e))
    }

    /// A directory entry: an existing directory is kept (its mode and
    /// mtime are applied at the end), anything else there replaced.
    fn make_dir(&mut self, cx: &EntryCx, at: &Place, meta: &EntryMeta) -> Result<(), ImageError> {
        match rustix::fs::statat(&at.dir, at.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
            other => {
                if other.is_ok() {
                    self.remove_at(&at.dir, &at.prel, at.name)
                        .map_err(|e| cx.io("replace what is there", e))?;
                }
                rustix::fs::mkdirat(&at.dir, at.name, Mode::from_raw_mode(0o700))
                    .map_err(|e| cx.io("create the directory", e.into()))?;
            }
        }
        self.dirs.insert(at.rel.clone(), (meta.mode, meta.mtime));
        Ok(())
    }

    /// A regular file: created afresh, its content copied, setuid and
    /// setgid cleared, its mode and mtime set.
    fn write_file<R: Read>(
        &mut self,
        cx: &EntryCx,
        at: &Place,
        meta: &EntryMeta,
        entry: &mut tar::Entry<'_, R>,
        diff_over: &Cell<bool>,
    ) -> Result<(), ImageError> {
        self.remove_at(&at.dir, &at.prel, at.name)
            .map_err(|e| cx.io("replace what is there", e))?;
        let fd = rustix::fs::openat(
            &at.dir,
            at.name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| cx.io("create the file", e.into()))?;
        let mut f = File::from(fd);
        let got = copy_content(cx, entry, &mut f, diff_over)?;
        let mut m = meta.mode;
        if m & 0o6000 != 0 {
            m &= !0o6000;
            self.stripped
                .push(format!("{} (layer {})", cx.shown, cx.layer));
        }
        rustix::fs::fchmod(&f, Mode::from_raw_mode(m))
            .map_err(|e| cx.io("set the mode", e.into()))?;
        if let Some(t) = meta.mtime {
            let ts = rustix::fs::Timespec {
                tv_sec: t as i64,
                tv_nsec: 0,
            };
            let _ = rustix::fs::futimens(
                &f,
                &Timestamps {
                    last_access: ts,
                    last_modification: ts,
                },
            );
        }
        self.size += got;
        Ok(())
    }

    fn make_symlink<R: Read>(
        &mut self,
        cx: &EntryCx,
        at: &Place,
        entry: &tar::Entry<'_, R>,
    ) -> Result<(), ImageError> {
        let target = link_target(entry);
        if target.is_empty() || target.contains(&0) {
            return Err(cx.hostile("its symlink target is empty or invalid".into()));
        }
        self.remove_at(&at.dir, &at.prel, at.name)
            .map_err(|e| cx.io("replace what is there", e))?;
        rustix::fs::symlinkat(OsStr::from_bytes(&target), &at.dir, at.name)
            .map_err(|e| cx.io("create the symlink", e.into()))?;
        Ok(())
    }

    /// A hard link to an existing non-directory of the rootfs; one inode,
    /// so it keeps the target's owner (a link to itself is nothing).
    fn make_hard_link<R: Read>(
        &mut self,
        cx: &EntryCx,
        at: Place,
        entry: &tar::Entry<'_, R>,
    ) -> Result<(), ImageError> {
        let target = link_target(entry);
        let tcomps = normalize(Path::new(OsStr::from_bytes(&target)))
            .map_err(|r| cx.hostile(format!("its hard-link target: {r}")))?;
        let Some((tname, tparents)) = tcomps.split_last() else {
            return Err(cx.hostile("its hard-link target is the rootfs itself".into()));
        };
        let shown_target = String::from_utf8_lossy(&target).into_owned();
        let missing = || {
            cx.hostile(format!(
                "its hard-link target `{shown_target}` does not exist in the rootfs"
            ))
        };
        let (tdir, trel) = self
            .existing_dir(tparents)
            .map_err(|e| cx.io("find the hard-link target", e))?
            .ok_or_else(missing)?;
        let st = rustix::fs::statat(&tdir, tname.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|_| missing())?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(cx.hostile(format!(
                "its hard-link target `{shown_target}` is a directory"
            )));
        }
        let trel = trel.join(tname);
        if trel == at.rel {
            return Ok(());
        }
        self.remove_at(&at.dir, &at.prel, at.name)
            .map_err(|e| cx.io("replace what is there", e))?;
        rustix::fs::linkat(&tdir, tname.as_os_str(), &at.dir, at.name, AtFlags::empty())
            .map_err(|e| cx.io("create the hard link", e.into()))?;
        // One inode: it keeps the target's owner.
        let o = self.owners.get(&trel).copied().unwrap_or((0, 0));
        self.set_owner(at.rel.clone(), o);
        self.this_layer.insert(at.rel);
        Ok(())
    }

    fn make_fifo(&mut self, cx: &EntryCx, at: &Place, mode: u32) -> Result<(), ImageError> {
        self.remove_at(&at.dir, &at.prel, at.name)
            .map_err(|e| cx.io("replace what is there", e))?;
        rustix::fs::mknodat(
            &at.dir,
            at.name,
            FileType::Fifo,
            Mode::from_raw_mode(mode & 0o777),
            0,
        )
        .map_err(|e| cx.io("create the fifo", e.into()))?;
        Ok(())
    }

    fn set_owner(&mut self, rel: PathBuf, owner: (u32, u32)) {
        if owner == (0, 0) {
            self.owners.remove(&rel);
        } else {
            self.owners.insert(rel, owner);
        }
    }

    /// Creates the directory `name` at the top of the rootfs if missing
    /// (mode `mode`, owned by ID 0). Refuses a non-directory there: the
    /// sandbox mounts over these paths.
    pub(crate) fn mount_point(&mut self, name: &str, mode: u32) -> Result<(), ImageError> {
        match rustix::fs::statat(&self.root, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(()),
            Ok(_) => Err(ImageError::BadImage {
                detail: format!("/{name} is not a directory, but the sandbox mounts over it"),
            }),
            Err(Errno::NOENT) => {
                rustix::fs::mkdirat(&self.root, name, Mode::from_raw_mode(0o700)).map_err(|e| {
                    ImageError::from_io("create", self.root_path.join(name), e.into())
                })?;
                self.dirs.insert(PathBuf::from(name), (mode, None));
                Ok(())
            }
            Err(e) => Err(ImageError::io_plain("look at", self.root_path.join(name))(
                e,
            )),
        }
    }

    /// Writes `content` to `dir/name` (a real directory of the rootfs,
    /// reached without symlinks), replacing what is there, owned by ID 0.
    /// `false` when `dir` is missing or reached through a symlink.
    pub(crate) fn install_file(
        &mut self,
        dir: &str,
        name: &str,
        content: &[u8],
        mode: u32,
    ) -> Result<bool, ImageError> {
        let path = self.root_path.join(dir).join(name);
        let err = |e: std::io::Error| ImageError::from_io("install", path.clone(), e);
        let d = match rustix::fs::openat2(
            &self.root,
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            NO_SYMLINKS,
        ) {
            Ok(d) => d,
            Err(_) => return Ok(false),
        };
        let rel = PathBuf::from(dir);
        self.remove_at(&d, &rel, OsStr::new(name)).map_err(err)?;
        let fd = rustix::fs::openat(
            &d,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| err(e.into()))?;
        let mut f = File::from(fd);
        f.write_all(content).map_err(err)?;
        rustix::fs::fchmod(&f, Mode::from_raw_mode(mode)).map_err(|e| err(e.into()))?;
        self.size += content.len() as u64;
        Ok(true)
    }

    /// Sets the final modes and times of the directories (deepest first),
    /// then, in the mapped user namespace, the owners of the entries not
    /// owned by ID 0. `work` is a private scratch directory.
    pub(crate) fn finish(self, store: &Store, work: &Path) -> Result<(), ImageError> {
        for (rel, (mode, mtime)) in self.dirs.iter().rev() {
            let fd = rustix::fs::openat2(
                &self.root,
                dot(rel),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                NO_SYMLINKS,
            )
            .map_err(ImageError::io_plain(
                "set the mode of",
                self.root_path.join(rel),
            ))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode)).map_err(ImageError::io_plain(
                "set the mode of",
                self.root_path.join(rel),
            ))?;
            if let Some(t) = mtime {
                let ts = rustix::fs::Timespec {
                    tv_sec: *t as i64,
                    tv_nsec: 0,
                };
                let _ = rustix::fs::futimens(
                    &fd,
                    &Timestamps {
                        last_access: ts,
                        last_modification: ts,
                    },
                );
            }
        }
        if self.owners.is_empty() {
            return Ok(());
        }
        // One list of paths per owner. Every path is checked to be reached
        // without any symlink, so `chown -h` on it cannot leave the rootfs.
        let mut groups: BTreeMap<(u32, u32), Vec<u8>> = BTreeMap::new();
        for (rel, owner) in &self.owners {
            rustix::fs::openat2(
                &self.root,
                dot(rel),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                NO_SYMLINKS,
            )
            .map_err(|e| ImageError::BadImage {
                detail: format!(
                    "{} cannot be reached without a symlink ({e}) to set its owner",
                    rel.display()
                ),
            })?;
            let list = groups.entry(*owner).or_default();
            list.extend_from_slice(self.root_path.join(rel).as_os_str().as_bytes());
            list.push(0);
        }
        std::fs::create_dir(work).map_err(ImageError::io("create", work))?;
        for ((u, g), list) in &groups {
            let p = work.join(format!("{u}_{g}"));
            std::fs::write(&p, list).map_err(ImageError::io("write", &p))?;
        }
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                "set -e; cd \"$1\"; for f in *; do \
                 xargs -0 -r -a \"$f\" chown -h -- \"${f%_*}:${f#*_}\"; done",
            )
            .arg("sh")
            .arg(work);
        store.run_in_userns("chown", &mut cmd)?;
        std::fs::remove_dir_all(work).map_err(ImageError::io("remove", work))
    }
}

/// Removal of a path and everything beneath it from a map keyed by path.
trait Prune {
    fn prune(&mut self, rel: &Path);
}

impl<V> Prune for BTreeMap<PathBuf, V> {
    fn prune(&mut self, rel: &Path) {
        let doomed: Vec<PathBuf> = self
            .range(rel.to_path_buf()..)
            .take_while(|(k, _)| k.starts_with(rel))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// One tar entry for a test layer; the name is written raw, so hostile
    /// names get through.
    struct E {
        name: &'static str,
        kind: tar::EntryType,
        mode: u32,
        data: &'static [u8],
        link: &'static str,
    }

    fn file(name: &'static str, data: &'static [u8]) -> E {
        E {
            name,
            kind: tar::EntryType::Regular,
            mode: 0o644,
            data,
            link: "",
        }
    }
    fn dir(name: &'static str) -> E {
        E {
            name,
            kind: tar::EntryType::Directory,
            mode: 0o755,
            data: b"",
            link: "",
        }
    }
    fn link(name: &'static str, kind: tar::EntryType, target: &'static str) -> E {
        E {
            name,
            kind,
            mode: 0o777,
            data: b"",
            link: target,
        }
    }

    fn tar_of(entries: &[E]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(e.kind);
            h.set_mode(e.mode);
            h.set_size(e.data.len() as u64);
            h.set_mtime(1_000_000);
            h.set_uid(0);
            h.set_gid(0);
            {
                let old = h.as_old_mut();
                old.name[..e.name.len()].copy_from_slice(e.name.as_bytes());
                old.linkname[..e.link.len()].copy_from_slice(e.link.as_bytes());
            }
            h.set_cksum();
            b.append(&h, e.data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn sha(b: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(b)))
    }

    /// Writes a layer blob (gzip-compressed when `gz`) and describes it.
    fn layer(dir: &Path, entries: &[E], gz: bool) -> Layer {
        let tar = tar_of(entries);
        let blob = if gz {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&tar).unwrap();
            enc.finish().unwrap()
        } else {
            tar.clone()
        };
        let path = dir.join(format!("blob-{}", &sha(&blob)[7..19]));
        std::fs::write(&path, &blob).unwrap();
        Layer {
            blob: path,
            digest: sha(&blob),
            size: blob.len() as u64,
            diff_id: sha(&tar),
            compression: if gz {
                Compression::Gzip
            } else {
                Compression::None
            },
        }
    }

    struct Fx {
        _tmp: tempfile::TempDir,
        base: PathBuf,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fx() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_path_buf();
        let root = base.join("rootfs");
        let outside = base.join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        Fx {
            _tmp: tmp,
            base,
            root,
            outside,
        }
    }

    fn unpacker(f: &Fx) -> Unpacker {
        Unpacker::new(&f.root, 65535, 65535, Limits::default()).unwrap()
    }

    fn store(f: &Fx) -> Store {
        Store::new(
            &f.base,
            lazaret_protocol::plan::IdMap {
                uid: 0,
                gid: 0,
                sub_uid: (100000, 65535),
                sub_gid: (100000, 65535),
            },
        )
    }

    #[test]
    fn layers_whiteouts_opaque_dirs_and_links_apply() {
        let f = fx();
        let mut u = unpacker(&f);
        let l1 = layer(
            &f.base,
            &[
                dir("./"),
                dir("etc/"),
                file("etc/keep", b"keep"),
                file("etc/gone", b"gone"),
                dir("opq/"),
                file("opq/old", b"old"),
                file("bin/tool", b"#!"),
                link("bin/sh", tar::EntryType::Symlink, "/bin/tool"),
                link("bin/hard", tar::EntryType::Link, "bin/tool"),
            ],
            true,
        );
        let l2 = layer(
            &f.base,
            &[
                file("opq/new", b"new"),
                file("opq/.wh..wh..opq", b""),
                file("etc/.wh.gone", b""),
                file("etc/.wh.never-existed", b""),
                dir("usr/lib/"),
            ],
            false,
        );
        u.apply_layer(&l1, &mut crate::progress::Silent).unwrap();
        u.apply_layer(&l2, &mut crate::progress::Silent).unwrap();
        u.finish(&store(&f), &f.base.join("owners")).unwrap();
        let r = &f.root;
        assert_eq!(std::fs::read(r.join("etc/keep")).unwrap(), b"keep");
        assert!(!r.join("etc/gone").exists());
        assert!(!r.join("opq/old").exists());
        assert_eq!(std::fs::read(r.join("opq/new")).unwrap(), b"new");
        assert_eq!(
            std::fs::read_link(r.join("bin/sh")).unwrap(),
            Path::new("/bin/tool")
        );
        assert_eq!(
            std::fs::metadata(r.join("bin/hard")).unwrap().ino(),
            std::fs::metadata(r.join("bin/tool")).unwrap().ino()
        );
        // A parent missing from the layer is created 0755.
        assert!(r.join("usr/lib").is_dir());
        let mode = |p: &str| std::fs::metadata(r.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("usr"), 0o755);
        assert_eq!(mode("etc"), 0o755);
        assert_eq!(mode("etc/keep"), 0o644);
        assert_eq!(
            std::fs::metadata(r.join("etc/keep")).unwrap().mtime(),
            1_000_000
        );
        assert_eq!(u_size(&[4, 4, 3, 2]), 13);
    }

    fn u_size(v: &[u64]) -> u64 {
        v.iter().sum()
    }

    #[test]
    fn setuid_bits_are_cleared_and_devices_skipped() {
        let f = fx();
        let mut u = unpacker(&f);
        let mut su = file("su", b"x");
        su.mode = 0o4755;
        let mut sg = file("sg", b"x");
        sg.mode = 0o2755;
        let mut d = dir("shared/");
        d.mode = 0o2775;
        let null = E {
            name: "dev/null",
            kind: tar::EntryType::Char,
            mode: 0o666,
            data: b"",
            link: "",
        };
        let l = layer(&f.base, &[su, sg, d, null], false);
        u.apply_layer(&l, &mut crate::progress::Silent).unwrap();
        assert_eq!(u.stripped.len(), 2);
        assert_eq!(u.devices.len(), 1);
        assert!(u.devices[0].starts_with("dev/null"), "{:?}", u.devices);
        u.finish(&store(&f), &f.base.join("owners")).unwrap();
        let mode = |p: &str| {
            std::fs::metadata(f.root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("su"), 0o755);
        assert_eq!(mode("sg"), 0o755);
        // Directories keep setgid: it grants nothing.
        assert_eq!(mode("shared"), 0o2775);
        assert!(!f.root.join("dev/null").exists());
    }

    fn refused(f: &Fx, entries: &[E]) -> ImageError {
        let mut u = unpacker(f);
        let l = layer(&f.base, entries, false);
        let e = u.apply_layer(&l, &mut crate::progress::Silent).unwrap_err();
        assert_eq!(
            std::fs::read_dir(&f.outside).unwrap().count(),
            0,
            "wrote outside"
        );
        e
    }

    #[test]
    fn traversal_and_absolute_paths_are_refused() {
        let f = fx();
        for (name, why) in [
            ("../outside/pwned", "`..`"),
            ("a/../../x", "`..`"),
            ("/etc/pwned", "absolute"),
        ] {
            let e = refused(&f, &[file(name, b"x")]);
            let msg = e.to_string();
            assert!(matches!(e, ImageError::HostileEntry { .. }), "{msg}");
            assert!(
                msg.contains(name) && msg.contains(why) && msg.contains("refused layer sha256:"),
                "{msg}"
            );
        }
    }

    #[test]
    fn writes_through_symlinks_stay_inside() {
        let f = fx();
        let abs: &'static str = Box::leak(f.outside.display().to_string().into_boxed_str());
        // An absolute symlink to the host directory: resolved inside the
        // rootfs, where it does not exist.
        let e = refused(
            &f,
            &[
                link("esc", tar::EntryType::Symlink, abs),
                file("esc/pwned", b"x"),
            ],
        );
        assert!(e.to_string().contains("esc/pwned"), "{e}");
        // A relative one that climbs: clamped at the rootfs.
        let f2 = fx();
        let mut u = unpacker(&f2);
        let l = layer(
            &f2.base,
            &[
                link("up", tar::EntryType::Symlink, "../../../../../../.."),
                dir("up/outside/"),
                file("up/outside/pwned", b"x"),
            ],
            false,
        );
        u.apply_layer(&l, &mut crate::progress::Silent).unwrap();
        assert_eq!(std::fs::read_dir(&f2.outside).unwrap().count(), 0);
        assert!(f2.root.join("outside/pwned").is_file());
    }

    #[test]
    fn escaping_hard_links_are_refused() {
        let f = fx();
        let e = refused(&f, &[link("h", tar::EntryType::Link, "../outside/x")]);
        assert!(e.to_string().contains("hard-link target"), "{e}");
        let e = refused(
            &f,
            &[
                link("root", tar::EntryType::Symlink, "/"),
                link("h", tar::EntryType::Link, "root/etc/passwd"),
            ],
        );
        assert!(
            e.to_string().contains("does not exist in the rootfs"),
            "{e}"
        );
        let e = refused(&f, &[dir("d/"), link("h", tar::EntryType::Link, "d")]);
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn owners_beyond_the_map_are_refused() {
        let f = fx();
        let mut u = Unpacker::new(&f.root, 1000, 1000, Limits::default()).unwrap();
        let tar = {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(0);
            h.set_mode(0o644);
            h.set_uid(70000);
            h.set_gid(0);
            h.set_path("f").unwrap();
            h.set_cksum();
            b.append(&h, &b""[..]).unwrap();
            b.into_inner().unwrap()
        };
        let p = f.base.join("l");
        std::fs::write(&p, &tar).unwrap();
        let l = Layer {
            blob: p,
            digest: sha(&tar),
            size: tar.len() as u64,
            diff_id: sha(&tar),
            compression: Compression::None,
        };
        let e = u.apply_layer(&l, &mut crate::progress::Silent).unwrap_err();
        assert!(e.to_string().contains("70000"), "{e}");
    }

    #[test]
    fn damaged_blobs_are_refused() {
        let f = fx();
        let good = layer(&f.base, &[file("a", &[7u8; 4000])], true);
        // Wrong digest.
        let mut l = good.clone();
        l.digest = sha(b"something else");
        let e = unpacker(&f)
            .apply_layer(&l, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(
            e.to_string().contains("not the one its manifest names"),
            "{e}"
        );
        // Larger and smaller than the descriptor.
        let mut l = good.clone();
        l.size -= 1;
        let e = unpacker(&f)
            .apply_layer(&l, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        let mut l = good.clone();
        l.size += 1;
        let e = unpacker(&f)
            .apply_layer(&l, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(e.to_string().contains("its manifest says"), "{e}");
        // Wrong diff_id.
        let mut l = good.clone();
        l.diff_id = sha(b"x");
        let e = unpacker(&f)
            .apply_layer(&l, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(e.to_string().contains("image config says"), "{e}");
        // Truncated, with a matching digest: the stream itself is refused.
        let bytes = std::fs::read(&good.blob).unwrap();
        let cut = &bytes[..bytes.len() / 2];
        let p = f.base.join("cut");
        std::fs::write(&p, cut).unwrap();
        let l = Layer {
            blob: p,
            digest: sha(cut),
            size: cut.len() as u64,
            ..good.clone()
        };
        let e = unpacker(&f)
            .apply_layer(&l, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(matches!(e, ImageError::HostileEntry { .. }), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        // Over the limits.
        let mut u = Unpacker::new(
            &f.root,
            65535,
            65535,
            Limits {
                max_unpacked: 2048,
                max_entries: 10,
            },
        )
        .unwrap();
        let e = u
            .apply_layer(&good, &mut crate::progress::Silent)
            .unwrap_err();
        assert!(e.to_string().contains("more than 2048 bytes"), "{e}");
        let mut u = Unpacker::new(
            &f.root,
            65535,
            65535,
            Limits {
                max_unpacked: 1 << 30,
                max_entries: 1,
            },
        )
        .unwrap();
        let l = layer(&f.base, &[file("x1", b""), file("x2", b"")], false);
        let e = u.apply_layer(&l, &mut crate::progress::Silent).unwrap_err();
        assert!(e.to_string().contains("more than 1 entries"), "{e}");
    }

    #[test]
    fn mount_points_must_be_directories() {
        let f = fx();
        let mut u = unpacker(&f);
        let l = layer(
            &f.base,
            &[link("run", tar::EntryType::Symlink, "/var/run")],
            false,
        );
        u.apply_layer(&l, &mut crate::progress::Silent).unwrap();
        u.mount_point("tmp", 0o1777).unwrap();
        let e = u.mount_point("run", 0o755).unwrap_err();
        assert!(e.to_string().contains("/run is not a directory"), "{e}");
        assert!(!u.install_file("etc", "x", b"y", 0o644).unwrap());
        u.finish(&store(&f), &f.base.join("owners")).unwrap();
        assert_eq!(
            std::fs::metadata(f.root.join("tmp"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o1777
        );
    }
}
