//! Really builds `lazaret:default` (needs mmdebstrap, uidmap, subordinate
//! IDs for the current user, network access to the Debian mirror, and about
//! a minute). Run as an unprivileged user with subordinate IDs:
//!
//! ```sh
//! cargo test -p lazaret-image --test build_default -- --ignored --nocapture
//! ```
//!
//! With `LAZARET_IMAGE_TEST_KEEP=DIR`, the image is built in the Storage
//! Root `DIR` and kept there (to try it under runsc by hand).

use lazaret_helpers::userns::{current_id_map, run_mapped};
use lazaret_image::{default_artifact_id, PrepareOptions, Preparer, Store};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
#[ignore = "builds the real image: needs mmdebstrap, subordinate ids and the Debian mirror"]
fn builds_the_default_image() {
    let map = current_id_map().expect("the current user needs subordinate ids");
    let keep = std::env::var_os("LAZARET_IMAGE_TEST_KEEP").map(std::path::PathBuf::from);
    let root = tempfile::tempdir().unwrap();
    let store = Store::new(keep.as_deref().unwrap_or(root.path()), map.clone());
    let opts = PrepareOptions { statx_shim: true };

    // Two concurrent preparations: one builds, the other waits and reuses it.
    let started = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let first =
            s.spawn(|| store.prepare("lazaret:default", &opts, &mut |l| eprintln!("[build] {l}")));
        std::thread::sleep(std::time::Duration::from_millis(500));
        let mut waited = false;
        let second = store.prepare("lazaret:default", &opts, &mut |l| {
            eprintln!("[second] {l}");
            waited |= l == "waiting for another build of lazaret:default";
        });
        (first.join().unwrap(), (second, waited))
    });
    let elapsed = started.elapsed();
    eprintln!("built lazaret:default in {:.1} s", elapsed.as_secs_f64());
    let img = a.expect("build");
    let (second, waited) = b;
    assert_eq!(second.expect("second prepare"), img);
    assert!(waited, "the second preparation did not wait for the first");

    assert_eq!(img.id, default_artifact_id(&opts));
    assert_eq!(img.reference, "lazaret:default");
    let dir = store.artifact_dir(&img.id);
    assert_eq!(img.rootfs, dir.join("rootfs"));
    let r = &img.rootfs;
    assert!(r.join("usr/bin/git").is_file());
    assert!(r.join("usr/bin/python3").exists());
    // `vi` is an absolute link into /etc/alternatives: not followed here.
    for tool in ["make", "rg", "jq", "ssh", "vi"] {
        assert!(
            r.join("usr/bin").join(tool).symlink_metadata().is_ok(),
            "{tool}"
        );
    }
    assert!(r.join("usr/share/terminfo/a/alacritty").exists());
    assert_eq!(
        std::fs::read_to_string(r.join("etc/ld.so.preload")).unwrap(),
        "/usr/lib/lazaret-statx-shim.so\n"
    );
    let shim = r.join("usr/lib/lazaret-statx-shim.so");
    assert_eq!(mode(&shim), 0o644);
    assert_eq!(std::fs::metadata(&shim).unwrap().uid(), map.uid);
    for d in ["workspace", "proc", "dev", "sys", "run", ".lazaret", "tmp"] {
        assert!(r.join(d).is_dir(), "missing /{d}");
    }
    assert_eq!(mode(&r.join("tmp")), 0o1777);
    assert_eq!(std::fs::read_dir(r.join("dev")).unwrap().count(), 0);
    assert_eq!(mode(&dir), 0o555);
    assert!(dir.join("complete").is_file());
    assert!(!dir.join("rootfs.tar").exists());
    assert_eq!(mode(store.lowers_dir()), 0o700);

    // Ownership maps: ID 0 is the developer, other IDs are subordinate ones.
    let (sub_start, sub_count) = map.sub_uid;
    let in_ns = |uid: u32| uid == map.uid || (sub_start..sub_start + sub_count).contains(&uid);
    let mut subordinate = 0;
    let mut stack = vec![r.clone()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            in_ns(m.uid()),
            "{} is owned by unmapped uid {}",
            p.display(),
            m.uid()
        );
        if m.uid() != map.uid {
            subordinate += 1;
        }
        if m.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.map(|e| e.unwrap().path()));
            }
        }
    }
    assert_eq!(std::fs::metadata(r).unwrap().uid(), map.uid);
    assert!(std::fs::metadata(r.join("usr/bin/git")).unwrap().uid() == map.uid);
    eprintln!("{subordinate} entries owned by subordinate ids");

    // Nothing left in staging; the next preparation is the fast path.
    let leftovers: Vec<_> = std::fs::read_dir(store.lowers_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".staging-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let t = Instant::now();
    let mut lines = 0;
    let again = store
        .prepare("lazaret:default", &opts, &mut |_| lines += 1)
        .unwrap();
    assert_eq!(again, img);
    assert_eq!(lines, 0);
    assert!(
        t.elapsed().as_millis() < 200,
        "fast path took {:?}",
        t.elapsed()
    );

    if keep.is_some() {
        return;
    }
    // Clean up the tree of subordinate-owned files.
    let status = run_mapped(
        &map,
        Command::new("rm")
            .args(["-rf", "--"])
            .arg(root.path().join("lowers")),
    )
    .unwrap();
    assert!(status.success());
}
