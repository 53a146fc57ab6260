//! `scripts/egress-image` (run by `scripts/release`): the egress image as
//! an OCI layout, deterministic, every blob named by its digest, the
//! config's diff_id that of the uncompressed layer, the binary its
//! entrypoint. When umoci is installed, it unpacks the image too (it
//! checks every digest itself).

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/egress-image")
}

fn build(binary: &Path, out: &Path) -> Vec<u8> {
    let status = Command::new("bash")
        .arg(script())
        .args(["--binary".as_ref(), binary.as_os_str()])
        .args(["--version", "9.9.9", "--out"])
        .arg(out)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(out.join("lazaret-egress-9.9.9-oci.tar")).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_egress_image_is_a_deterministic_oci_layout() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("lazaret-egress");
    std::fs::write(&binary, "#!/bin/sh\necho egress\n").unwrap();
    std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert_eq!(build(&binary, &a), build(&binary, &b), "not deterministic");

    let layout = a.join("lazaret-egress-9.9.9-oci");
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let blobs = layout.join("blobs/sha256");
    for e in std::fs::read_dir(&blobs).unwrap() {
        let e = e.unwrap();
        let bytes = std::fs::read(e.path()).unwrap();
        assert_eq!(
            sha256(&bytes),
            e.file_name().to_string_lossy(),
            "blob digest"
        );
    }
    let blob =
        |d: &Value| -> PathBuf { blobs.join(d.as_str().unwrap().strip_prefix("sha256:").unwrap()) };
    let index = json(&layout.join("index.json"));
    let m = &index["manifests"][0];
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        "9.9.9"
    );
    let manifest_path = blob(&m["digest"]);
    assert_eq!(
        m["size"].as_u64().unwrap(),
        std::fs::metadata(&manifest_path).unwrap().len()
    );
    let manifest = json(&manifest_path);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = json(&blob(&manifest["config"]["digest"]));
    assert_eq!(config["config"]["Entrypoint"][0], "/lazaret-egress");
    assert_eq!(config["config"]["User"], "65532:65532");
    let layer = blob(&manifest["layers"][0]["digest"]);
    let tar = Command::new("gzip")
        .arg("-dc")
        .arg(&layer)
        .output()
        .unwrap();
    assert!(tar.status.success());
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{}", sha256(&tar.stdout))
    );
    let list = Command::new("tar")
        .arg("-tvzf")
        .arg(&layer)
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    assert!(list.starts_with("-rwxr-xr-x 0/0"), "{list}");
    assert!(list.trim_end().ends_with(" lazaret-egress"), "{list}");

    if Command::new("umoci").arg("--version").output().is_ok() {
        let bundle = dir.path().join("bundle");
        let status = Command::new("umoci")
            .args(["unpack", "--rootless", "--image"])
            .arg(format!("{}:9.9.9", layout.display()))
            .arg(&bundle)
            .status()
            .unwrap();
        assert!(status.success(), "umoci refused the layout");
        let unpacked = std::fs::read_to_string(bundle.join("rootfs/lazaret-egress")).unwrap();
        assert_eq!(unpacked, "#!/bin/sh\necho egress\n");
    }
}
