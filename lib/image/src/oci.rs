//! The OCI preparer: `skopeo copy` of any supported reference into an OCI
//! layout in the staging directory, then Lazaret's own checked unpacker
//! (see `unpack.rs`), then an atomic publication under `lowers/<id>`.

use crate::progress::Progress;
use crate::reference::Reference;
use crate::store::{output_pipe, spawn_tool, tail_lines, Store};
use crate::unpack::{Compression, Layer, Limits, Unpacker};
use crate::{ImageError, PrepareOptions, PreparedImage};
use lazaret_catalog::{now, ArtifactRecord};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Bump when the way OCI images are unpacked changes, so that existing
/// artifacts are not reused.
pub const OCI_PREPARER: &str = "lazaret-image/oci/1";

/// The tag the staging layout gets.
const STAGING_TAG: &str = "lazaret";
/// JSON documents (index, manifest, config) larger than this are refused.
const MAX_JSON: u64 = 4 << 20;
/// How long skopeo may try to reach a registry.
const REGISTRY_TIMEOUT: &str = "20s";

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize, Clone, Debug)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ImageConfig {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
    #[serde(default)]
    variant: Option<String>,
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// An image read from a staging layout, its blobs not yet checked.
pub(crate) struct Image {
    pub manifest_digest: String,
    pub platform: String,
    pub layers: Vec<Layer>,
}

/// The hex part of a `sha256:` digest, checked (it becomes a file name).
fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(hex)
}

/// The platform of this machine, in OCI terms.
pub(crate) fn host_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        a => a,
    };
    format!("linux/{arch}")
}

/// The prepared-artifact ID of an image: SHA-256 over its manifest
/// digest, its platform, the preparer's version and the options.
pub fn oci_artifact_id(manifest_digest: &str, platform: &str, opts: &PrepareOptions) -> String {
    let mut s = format!(
        "lazaret-prepared-artifact/v1\nmanifest={manifest_digest}\nplatform={platform}\npreparer={OCI_PREPARER}\nstatx_shim={}\n",
        opts.statx_shim
    );
    if opts.statx_shim {
        s.push_str(&format!(
            "statx_shim_source={}\n",
            hex::encode(Sha256::digest(crate::STATX_SHIM_SOURCE.as_bytes()))
        ));
    }
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn blob_path(layout: &Path, digest: &str) -> Option<PathBuf> {
    sha256_hex(digest).map(|h| layout.join("blobs/sha256").join(h))
}

/// Reads a small JSON blob, checking its size and digest.
fn read_json_blob<T: for<'a> Deserialize<'a>>(
    layout: &Path,
    desc: &Descriptor,
    what: &'static str,
) -> Result<T, ImageError> {
    let bad = |reason: String| ImageError::BadBlob {
        what,
        digest: desc.digest.clone(),
        reason,
    };
    let path = blob_path(layout, &desc.digest)
        .ok_or_else(|| bad("its digest is not a sha256 digest".into()))?;
    if desc.size > MAX_JSON {
        return Err(bad(format!("it is larger than {MAX_JSON} bytes")));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_JSON + 1).read_to_end(&mut bytes))
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 != desc.size {
        return Err(bad(format!(
            "it is {} bytes, its descriptor says {}",
            bytes.len(),
            desc.size
        )));
    }
    let got = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if got != desc.digest {
        return Err(bad(format!("its content has digest {got}")));
    }
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("it is not valid: {e}")))
}

/// Reads the image tagged [`STAGING_TAG`] in `layout`, checking the
/// index, manifest and config (sizes, digests, platform).
pub(crate) fn read_layout(layout: &Path, reference: &str) -> Result<Image, ImageError> {
    let bad = |detail: String| ImageError::BadLayout {
        reference: reference.to_string(),
        detail,
    };
    let index_path = layout.join("index.json");
    let mut bytes = Vec::new();
    std::fs::File::open(&index_path)
        .and_then(|f| f.take(MAX_JSON + 1).read_to_end(&mut bytes))
        .map_err(ImageError::io("read", &index_path))?;
    if bytes.len() as u64 > MAX_JSON {
        return Err(bad("its index.json is too large".into()));
    }
    let index: Index =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("bad index.json: {e}")))?;
    let desc = index
        .manifests
        .iter()
        .find(|d| {
            d.annotations
                .get("org.opencontainers.image.ref.name")
                .map(String::as_str)
                == Some(STAGING_TAG)
        })
        .ok_or_else(|| bad("skopeo wrote no manifest".into()))?;
    if desc.media_type.contains("index") || desc.media_type.contains("manifest.list") {
        return Err(bad(
            "the reference names a multi-platform index, not an image".into(),
        ));
    }
    let manifest: Manifest = read_json_blob(layout, desc, "manifest")?;
    if manifest.media_type.contains("index") {
        return Err(bad("the manifest is an index, not an image".into()));
    }
    let config: ImageConfig = read_json_blob(layout, &manifest.config, "image config")?;
    let platform = checked_platform(&config, reference)?;
    if manifest.layers.len() != config.rootfs.diff_ids.len() {
        return Err(bad(format!(
            "the manifest has {} layers but the config {} diff_ids",
            manifest.layers.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    let mut layers = Vec::new();
    for (d, diff_id) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        layers.push(layer_of(layout, d, diff_id)?);
    }
    Ok(Image {
        manifest_digest: desc.digest.clone(),
        platform,
        layers,
    })
}

/// The image's platform (`OS/ARCH[/VARIANT]`), which must be this host's.
fn checked_platform(config: &ImageConfig, reference: &str) -> Result<String, ImageError> {
    let mut platform = format!("{}/{}", config.os, config.architecture);
    if let Some(v) = config.variant.as_deref().filter(|v| !v.is_empty()) {
        platform.push('/');
        platform.push_str(v);
    }
    let host = host_platform();
    if config.os != "linux" || !platform.starts_with(&host) {
        return Err(ImageError::Platform {
            reference: reference.to_string(),
            found: platform,
            expected: host,
        });
    }
    Ok(platform)
}

/// The layer descriptor `d` (uncompressed digest `diff_id`): its blob in
/// `layout`, and its compression, from a tar layer's media type.
fn layer_of(layout: &Path, d: &Descriptor, diff_id: &str) -> Result<Layer, ImageError> {
    let blob = blob_path(layout, &d.digest).ok_or_else(|| ImageError::BadBlob {
        what: "layer",
        digest: d.digest.clone(),
        reason: "its digest is not a sha256 digest".into(),
    })?;
    let mt = d.media_type.as_str();
    let compression = if mt.ends_with(".tar") || mt.ends_with("diff.tar") {
        Compression::None
    } else if mt.ends_with("+gzip") || mt.ends_with(".tar.gzip") {
        Compression::Gzip
    } else if mt.ends_with("+zstd") {
        Compression::Zstd
    } else {
        return Err(ImageError::BadBlob {
            what: "layer",
            digest: d.digest.clone(),
            reason: format!("its media type `{mt}` is not a tar layer"),
        });
    };
    Ok(Layer {
        blob,
        digest: d.digest.clone(),
        size: d.size,
        diff_id: diff_id.to_string(),
        compression,
    })
}

/// Copies `r` into an OCI layout at `layout` with skopeo, streaming its
/// output to `progress`.
fn skopeo_copy(
    reference: &str,
    r: &Reference,
    staging: &Path,
    layout: &Path,
    progress: &mut dyn Progress,
) -> Result<(), ImageError> {
    let policy = staging.join("policy.json");
    // Blob digests are verified by skopeo and again by the unpacker; there
    // are no signatures to check for local archives.
    std::fs::write(
        &policy,
        r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .map_err(ImageError::io("write", &policy))?;
    let tmp = staging.join("tmp");
    std::fs::create_dir(&tmp).map_err(ImageError::io("create", &tmp))?;
    let (read, write, write2) = output_pipe("create a pipe in", staging)?;
    let mut cmd = Command::new("skopeo");
    cmd.env("TMPDIR", &tmp).arg("--policy").arg(&policy);
    if r.is_remote() {
        cmd.arg("--command-timeout").arg(REGISTRY_TIMEOUT);
    }
    cmd.arg("copy")
        .arg(r.skopeo_source())
        .arg(format!("oci:{}:{STAGING_TAG}", layout.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(write2));
    // skopeo dies with us and never writes into a staging directory that
    // a later run cleans up.
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::DIE_WITH_PARENT,
    );
    let mut child = spawn_tool(cmd, ImageError::SkopeoMissing, "run skopeo in", staging)?;
    let tail = tail_lines(BufReader::new(std::fs::File::from(read)), &mut |l| {
        progress.line(l)
    });
    let status = child
        .wait()
        .map_err(ImageError::io("wait for skopeo in", staging))?;
    if status.success() {
        return Ok(());
    }
    Err(skopeo_failure(reference, r, staging, status, &tail))
}

/// Why skopeo failed (`status`, its last lines `tail`): a full or
/// read-only destination, an unreachable registry, or its own words.
fn skopeo_failure(
    reference: &str,
    r: &Reference,
    staging: &Path,
    status: std::process::ExitStatus,
    tail: &[String],
) -> ImageError {
    let output = tail.join("\n");
    // skopeo reports a full or read-only destination only in its text.
    let lower = output.to_ascii_lowercase();
    for (text, errno) in [
        ("no space left on device", libc::ENOSPC),
        ("disk quota exceeded", libc::EDQUOT),
        ("read-only file system", libc::EROFS),
    ] {
        if lower.contains(text) {
            return ImageError::Unwritable {
                what: format!("copy `{reference}` into"),
                path: staging.to_path_buf(),
                source: std::io::Error::from_raw_os_error(errno),
            };
        }
    }
    if r.is_remote() {
        let detail = tail
            .last()
            .map(|l| {
                let l = l.rsplit("msg=").next().unwrap_or(l);
                l.trim_matches('"').chars().take(300).collect::<String>()
            })
            .unwrap_or_else(|| status.to_string());
        return ImageError::RegistryUnreachable {
            reference: reference.to_string(),
            detail,
        };
    }
    ImageError::Copy {
        reference: reference.to_string(),
        status: status.to_string(),
        output,
    }
}

/// Prepares an OCI image reference. See the crate documentation.
pub(crate) fn prepare_oci(
    store: &Store,
    reference: &str,
    r: &Reference,
    opts: &PrepareOptions,
    limits: Limits,
    progress: &mut dyn Progress,
) -> Result<PreparedImage, ImageError> {
    let source = r.skopeo_source();
    let stamp = r.stamp(reference)?;
    let catalog = store.catalog();
    let fast = |progress: &mut dyn Progress| -> Result<Option<PreparedImage>, ImageError> {
        let _ = progress;
        let Some(stamp) = stamp.as_deref() else {
            return Ok(None);
        };
        let Some(rec) = catalog.lookup_source(&source, stamp)? else {
            return Ok(None);
        };
        if rec.preparer != OCI_PREPARER
            || rec.id != oci_artifact_id(&rec.manifest_digest, &rec.platform, opts)
        {
            return Ok(None);
        }
        Ok(store.ready(&rec.id, reference))
    };
    if let Some(img) = fast(progress)? {
        return Ok(img);
    }
    store.ensure_lowers()?;
    let _lock = store.lock(reference, &mut |l| progress.line(l))?;
    if let Some(img) = fast(progress)? {
        return Ok(img);
    }
    store.remove_leftovers_locked(&mut |l| progress.line(l))?;

    let staging = store.new_staging()?;
    let result = prepare_in(
        store,
        reference,
        r,
        opts,
        limits,
        &staging,
        stamp.as_deref(),
        progress,
    );
    match result {
        Ok(img) => Ok(img),
        Err(e) => {
            // Best effort: the next preparation removes what is left.
            let _ = store.remove_tree(&staging);
            Err(e)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn prepare_in(
    store: &Store,
    reference: &str,
    r: &Reference,
    opts: &PrepareOptions,
    limits: Limits,
    staging: &Path,
    stamp: Option<&str>,
    progress: &mut dyn Progress,
) -> Result<PreparedImage, ImageError> {
    let layout = staging.join("layout");
    progress.phase(&format!("copying {reference}"), None);
    skopeo_copy(reference, r, staging, &layout, progress)?;
    let image = read_layout(&layout, reference)?;
    let id = oci_artifact_id(&image.manifest_digest, &image.platform, opts);
    let mut record = ArtifactRecord {
        id: id.clone(),
        reference: reference.to_string(),
        source: r.skopeo_source(),
        manifest_digest: image.manifest_digest.clone(),
        platform: image.platform.clone(),
        preparer: OCI_PREPARER.to_string(),
        size: 0,
        created: now(),
    };
    let catalog = store.catalog();
    if store.ready(&id, reference).is_some() {
        // Prepared before, from another reference or an older copy.
        if let Some(old) = catalog.artifact(&id)? {
            record.size = old.size;
        } else {
            record.size = crate::tree_size(&store.artifact_dir(&id).join("rootfs"));
        }
        catalog.record_artifact(&record, stamp, || store.ready(&id, reference).is_some())?;
        store.remove_tree(staging)?;
        return store
            .ready(&id, reference)
            .ok_or_else(|| vanished(store, &id));
    }
    if store.remove_incomplete(&id)? {
        progress.line("removed an incompletely published copy of the image");
    }

    record.size = unpack(store, reference, &image, opts, limits, staging, progress)?;
    for extra in ["layout", "tmp"] {
        let p = staging.join(extra);
        std::fs::remove_dir_all(&p).map_err(ImageError::io("remove", &p))?;
    }
    let p = staging.join("policy.json");
    std::fs::remove_file(&p).map_err(ImageError::io("remove", &p))?;
    let recipe = format!(
        "preparer={OCI_PREPARER}\nreference={reference}\nsource={}\nmanifest={}\nplatform={}\nstatx_shim={}\n",
        record.source, record.manifest_digest, record.platform, opts.statx_shim
    );
    store.publish(staging, &id, &recipe)?;
    catalog.record_artifact(&record, stamp, || store.ready(&id, reference).is_some())?;
    progress.line(&format!("prepared {reference} as {id}"));
    store
        .ready(&id, reference)
        .ok_or_else(|| vanished(store, &id))
}

/// Unpacks `image` into `rootfs` of `staging`, with Lazaret's mount
/// points (and, if asked, the statx shim), its ownership applied; the
/// bytes of file content written.
fn unpack(
    store: &Store,
    reference: &str,
    image: &Image,
    opts: &PrepareOptions,
    limits: Limits,
    staging: &Path,
    progress: &mut dyn Progress,
) -> Result<u64, ImageError> {
    let rootfs = staging.join("rootfs");
    std::fs::DirBuilder::new()
        .create(&rootfs)
        .map_err(ImageError::io("create", &rootfs))?;
    let map = store.id_map();
    let mut unpacker = Unpacker::new(&rootfs, map.sub_uid.1, map.sub_gid.1, limits)?;
    let total: u64 = image.layers.iter().map(|l| l.size).sum();
    progress.phase(
        &format!("unpacking {} layer(s) of {reference}", image.layers.len()),
        Some(total),
    );
    for layer in &image.layers {
        unpacker.apply_layer(layer, progress)?;
    }
    for d in &unpacker.devices {
        progress.line(&format!("skipped device node {d}"));
    }
    for f in &unpacker.stripped {
        progress.line(&format!("cleared the setuid/setgid bits of {f}"));
    }
    for name in crate::debian::MOUNT_POINTS {
        unpacker.mount_point(name, 0o755)?;
    }
    unpacker.mount_point("tmp", 0o1777)?;
    if opts.statx_shim {
        let so = crate::debian::SHIM_PATH;
        let (dir, name) = so.rsplit_once('/').unwrap_or(("", so));
        if unpacker.install_file(dir, name, crate::debian::STATX_SHIM, 0o644)? {
            let preload = format!("/{so}\n");
            unpacker.install_file("etc", "ld.so.preload", preload.as_bytes(), 0o644)?;
        } else {
            progress.line("the image has no /usr/lib directory: the statx shim is not installed");
        }
    }
    let size = unpacker.size;
    unpacker.finish(store, &staging.join("owners"))?;
    Ok(size)
}

fn vanished(store: &Store, id: &str) -> ImageError {
    ImageError::BadImage {
        detail: format!(
            "{} vanished right after it was published",
            store.artifact_dir(id).display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_must_be_plain_sha256() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert!(sha256_hex(&good).is_some());
        for bad in [
            "sha256:../../etc/passwd".to_string(),
            format!("sha256:{}", "A".repeat(64)),
            format!("sha512:{}", "a".repeat(64)),
            format!("sha256:{}/", "a".repeat(63)),
        ] {
            assert!(sha256_hex(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn artifact_id_covers_digest_platform_and_options() {
        let off = PrepareOptions { statx_shim: false };
        let on = PrepareOptions { statx_shim: true };
        let a = oci_artifact_id("sha256:1", "linux/amd64", &off);
        assert_eq!(a.len(), 64);
        assert_eq!(a, oci_artifact_id("sha256:1", "linux/amd64", &off));
        assert_ne!(a, oci_artifact_id("sha256:2", "linux/amd64", &off));
        assert_ne!(a, oci_artifact_id("sha256:1", "linux/arm64", &off));
        assert_ne!(a, oci_artifact_id("sha256:1", "linux/amd64", &on));
    }
}
