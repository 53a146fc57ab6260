//! Image preparation end to end: OCI images written by the test itself
//! (`mkoci.py`: a busybox rootfs in a hand-made OCI layout), prepared by
//! `lazaret image prepare`, listed, run under `lazaret run`; hostile
//! images; SIGKILL during preparation; concurrent preparation; gc and
//! leases.
//!
//! Each test uses its own Storage Root (`storage.data_root` in its
//! config), so that `image gc` in one test cannot touch another's images.

use lazaret_tests::{eventually, require_env, text, TestEnv, Workspace};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const MKOCI: &str = include_str!("mkoci.py");

/// A workspace whose config points the Storage Root at its own directory
/// and the default profile at `image`.
fn setup<'a>(env: &'a TestEnv, name: &str, image: Option<&str>) -> (Workspace<'a>, PathBuf) {
    let ws = env.workspace(name);
    let data = ws.base.join("data");
    write_config(&ws, &data, image);
    let out = env.sh(&format!(
        "cat > '{}/mkoci.py' <<'LAZARET_MKOCI_EOF'\n{MKOCI}\nLAZARET_MKOCI_EOF",
        ws.base.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    (ws, data)
}

fn write_config(ws: &Workspace<'_>, data: &Path, image: Option<&str>) {
    let mut body = format!("[storage]\ndata_root = \"{}\"\n", data.display());
    if let Some(i) = image {
        body.push_str(&format!("\n[profiles.default]\nimage = \"{i}\"\n"));
    }
    ws.write_config(&body);
}

/// Runs `mkoci.py LAYOUT TAG ARGS` in the workspace base, as the test user.
fn mkoci(ws: &Workspace<'_>, layout: &str, tag: &str, args: &str) -> String {
    let out = ws.env.sh(&format!(
        "cd '{}' && python3 mkoci.py {layout} {tag} {args}",
        ws.base.display()
    ));
    assert!(
        out.status.success(),
        "mkoci.py failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_string()
}

fn lazaret(ws: &Workspace<'_>, args: &[&str]) -> Output {
    ws.lazaret(args).output().expect("run lazaret")
}

/// `lazaret image prepare REF`; returns the artifact ID.
fn prepare(ws: &Workspace<'_>, reference: &str) -> String {
    let out = lazaret(ws, &["image", "prepare", reference]);
    assert!(
        out.status.success(),
        "prepare {reference} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 64, "not an artifact ID: {id:?}");
    id
}

fn lowers_dir(data: &Path) -> PathBuf {
    data.join("lowers")
}

fn published(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(lowers_dir(data))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn leftovers(data: &Path) -> Vec<String> {
    std::fs::read_dir(lowers_dir(data))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".staging-") || n.starts_with(".trash-"))
                .collect()
        })
        .unwrap_or_default()
}

/// `image list --json`, as (id, reference, manifest digest, lease count).
fn list(ws: &Workspace<'_>) -> Vec<(String, String, String, usize)> {
    let out = lazaret(ws, &["image", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    // A tiny reader for the fields we need, without a JSON dependency.
    let field = |obj: &str, key: &str| -> String {
        let k = format!("\"{key}\": \"");
        obj.find(&k)
            .map(|i| {
                let rest = &obj[i + k.len()..];
                rest[..rest.find('"').unwrap_or(0)].to_string()
            })
            .unwrap_or_default()
    };
    s.split("\n  {")
        .skip(1)
        .map(|obj| {
            let leases = obj
                .find("\"leases\": [")
                .map(|i| {
                    obj[i..]
                        .split(']')
                        .next()
                        .unwrap_or("")
                        .matches("\"domain_id\"")
                        .count()
                })
                .unwrap_or(0);
            (
                field(obj, "id"),
                field(obj, "reference"),
                field(obj, "manifest_digest"),
                leases,
            )
        })
        .collect()
}

#[test]
fn oci_layout_and_archives_are_prepared_listed_and_run() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-forms", None);
    let digest = mkoci(&ws, "layout", "bb", "");
    let b = ws.base.display().to_string();
    let out = env.sh(&format!(
        "cd '{b}' && skopeo copy -q oci:layout:bb oci-archive:bb-oci.tar:bb && skopeo copy -q oci:layout:bb docker-archive:bb-docker.tar:lazaret/bb:latest"
    ));
    assert!(out.status.success(), "skopeo: {}", text(&out.stderr));

    let forms = [
        format!("oci:{b}/layout:bb"),
        format!("oci-archive:{b}/bb-oci.tar:bb"),
        format!("docker-archive:{b}/bb-docker.tar"),
    ];
    let mut ids = Vec::new();
    for reference in &forms {
        let id = prepare(&ws, reference);
        let listed = list(&ws);
        let rec = listed
            .iter()
            .find(|r| r.0 == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {listed:?}"));
        assert!(rec.2.starts_with("sha256:"), "{rec:?}");
        // The rootfs is published read-only, with the ownership the
        // sandbox maps (1000 inside = a subordinate id outside).
        let dir = lowers_dir(&data).join(&id);
        let meta = std::fs::metadata(&dir).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(meta.permissions().mode() & 0o777, 0o555);
        assert!(dir.join("complete").is_file());
        let owned = std::fs::metadata(dir.join("rootfs/home/user/owned")).unwrap();
        assert_ne!(owned.uid(), env.uid, "ownership was not mapped");
        let suid = std::fs::metadata(dir.join("rootfs/bin/suid-tool")).unwrap();
        assert_eq!(suid.permissions().mode() & 0o7777, 0o755, "setuid kept");

        write_config(&ws, &data, Some(reference));
        let out = ws.run_sh(
            "cat /etc/hello; ls /opq; test -e /etc/removed && echo REMOVED-IS-BACK; \
             ls -ln /home/user | grep owned | awk '{print $3\":\"$4}'; echo ok > /tmp/w && cat /tmp/w",
        );
        assert!(
            out.status.success(),
            "run with {reference}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            "hello from the oci image\nnew\n1000:1000\nok\n",
            "{reference}"
        );
        ids.push(id);
    }
    // The OCI layout and the OCI archive hold the same manifest: one
    // artifact. The docker archive's manifest is converted: another.
    assert_eq!(ids[0], ids[1]);
    assert_ne!(ids[0], ids[2]);
    let listed = list(&ws);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed.iter().any(|r| r.2 == digest),
        "{listed:?} lacks {digest}"
    );
    assert_eq!(published(&data).len(), 2);
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));

    // Changing the profile's image changes the next start's lower.
    mkoci(&ws, "layout", "other", "--hello 'another image'");
    write_config(&ws, &data, Some(&format!("oci:{b}/layout:other")));
    let out = ws.run_sh("cat /etc/hello");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "another image\n");
    // A second workspace with the same image shares its artifact.
    let ws2 = env.workspace("img-forms-2");
    write_config(&ws2, &data, Some(&format!("oci:{b}/layout:other")));
    let out = ws2.run_sh("cat /etc/hello");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(list(&ws).len(), 3);
}

#[test]
fn hostile_images_are_refused_and_publish_nothing() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-hostile", None);
    let outside = ws.base.join("outside");
    let out = env.sh(&format!("mkdir -p '{}'", outside.display()));
    assert!(out.status.success());
    let b = ws.base.display().to_string();
    for (kind, expect) in [
        ("traversal", "escape-traversal"),
        ("absolute", "escape-absolute"),
        ("symlink", "esc/pwned"),
        ("hardlink", "hard-link target"),
        ("truncated", "truncated"),
        ("digest", "igest"),
    ] {
        mkoci(
            &ws,
            &format!("evil-{kind}"),
            "x",
            &format!("--evil {kind} --outside '{}'", outside.display()),
        );
        let reference = format!("oci:{b}/evil-{kind}:x");
        let out = lazaret(&ws, &["image", "prepare", &reference]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{kind} was accepted: {err}");
        assert!(
            err.contains(expect),
            "{kind}: the error does not name `{expect}`: {err}"
        );
        assert!(
            err.contains("refused") || err.contains("skopeo could not copy"),
            "{kind}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "{kind} wrote outside the staging directory"
        );
        assert!(
            published(&data).is_empty(),
            "{kind} published {:?}",
            published(&data)
        );
        assert!(
            leftovers(&data).is_empty(),
            "{kind} left {:?}",
            leftovers(&data)
        );
        assert!(!ws.base.join("escape-traversal").exists());
        assert!(!Path::new("/escape-absolute").exists());
    }
    // Neutralised: the device node is skipped, the setuid bit cleared.
    for (kind, line) in [
        ("device", "skipped device node dev/evil-null"),
        ("setuid", "cleared the setuid/setgid bits of bin/evil-suid"),
    ] {
        mkoci(&ws, &format!("evil-{kind}"), "x", &format!("--evil {kind}"));
        let out = lazaret(
            &ws,
            &["image", "prepare", &format!("oci:{b}/evil-{kind}:x")],
        );
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(line),
            "{kind}: {}",
            text(&out.stderr)
        );
        let root = lowers_dir(&data)
            .join(text(&out.stdout).trim())
            .join("rootfs");
        use std::os::unix::fs::PermissionsExt;
        if kind == "device" {
            assert!(std::fs::symlink_metadata(root.join("dev/evil-null")).is_err());
        } else {
            let m = std::fs::metadata(root.join("bin/evil-suid")).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        }
    }
}

#[test]
fn unreachable_registry_fails_fast_and_clearly() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-registry", None);
    let t = Instant::now();
    let out = lazaret(
        &ws,
        &[
            "image",
            "prepare",
            "docker://registry.invalid/lazaret/none:1",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot be reached") && err.contains("oci-archive:"),
        "{err}"
    );
    // The failure may be the name or the network, not this machine alone.
    assert!(
        err.contains("check the name and this machine's network"),
        "{err}"
    );
    assert!(
        !err.contains("no registry is reachable from this machine"),
        "{err}"
    );
    // A bound against retrying for minutes (or for ever), not a speed
    // threshold: one resolution failure is reported at once.
    assert!(
        t.elapsed() < Duration::from_secs(150),
        "kept retrying for {:?}",
        t.elapsed()
    );
    assert!(published(&data).is_empty());
    assert!(leftovers(&data).is_empty());
    // And so does an unsupported reference, naming the accepted forms.
    let out = lazaret(&ws, &["image", "prepare", "ubuntu:24.04"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("oci-archive:FILE"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigkill_during_preparation_publishes_nothing() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-kill", None);
    mkoci(&ws, "big", "big", "--big 160");
    let reference = format!("oci:{}/big:big", ws.base.display());
    let mut child = ws
        .lazaret(&["image", "prepare", &reference])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once it unpacks (the rootfs exists in its staging directory).
    let unpacking = eventually(Duration::from_secs(60), || {
        std::fs::read_dir(lowers_dir(&data))
            .map(|rd| {
                rd.flatten().any(|e| {
                    e.file_name().to_string_lossy().starts_with(".staging-")
                        && e.path().join("rootfs/big").exists()
                })
            })
            .unwrap_or(false)
    });
    assert!(unpacking, "the preparation never started unpacking");
    // setpriv execs lazaret: the child is lazaret itself.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    std::thread::sleep(Duration::from_millis(200));
    assert!(published(&data).is_empty(), "{:?}", published(&data));
    assert!(
        !leftovers(&data).is_empty(),
        "the staging directory vanished"
    );
    assert!(list(&ws).is_empty());

    let id = prepare(&ws, &reference);
    assert_eq!(published(&data), vec![id.clone()]);
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
    let size = std::fs::metadata(lowers_dir(&data).join(&id).join("rootfs/big/blob-0159"))
        .unwrap()
        .len();
    assert_eq!(size, 1 << 20);
}

#[test]
fn concurrent_preparations_give_one_artifact() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-concurrent", None);
    mkoci(&ws, "layout", "bb", "--big 20");
    let reference = format!("oci:{}/layout:bb", ws.base.display());
    let children: Vec<_> = (0..3)
        .map(|_| {
            ws.lazaret(&["image", "prepare", &reference])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let ids: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            text(&out.stdout).trim().to_string()
        })
        .collect();
    assert!(ids.iter().all(|i| i == &ids[0]), "{ids:?}");
    assert_eq!(published(&data), vec![ids[0].clone()]);
    assert_eq!(list(&ws).len(), 1);
    assert!(leftovers(&data).is_empty());
}

#[test]
fn gc_removes_unleased_images_and_keeps_leased_ones() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-gc", None);
    let b = ws.base.display().to_string();
    mkoci(&ws, "layout", "used", "--hello used");
    mkoci(&ws, "layout", "unused", "--hello unused");
    let used = prepare(&ws, &format!("oci:{b}/layout:used"));
    let unused = prepare(&ws, &format!("oci:{b}/layout:unused"));
    assert_ne!(used, unused);

    // A running Domain on `used`: its generation holds a lease.
    write_config(&ws, &data, Some(&format!("oci:{b}/layout:used")));
    let mut session = ws
        .lazaret(&[
            "run",
            "--",
            "sh",
            "-c",
            "cat /etc/hello > /workspace/started; sleep 60",
        ])
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || ws.path.join("started").exists()),
        "the session did not start"
    );
    let leased = list(&ws);
    assert!(
        leased.iter().any(|r| r.0 == used && r.3 == 1),
        "the running Domain holds no lease on {used}: {leased:?}"
    );
    let out = lazaret(&ws, &["image", "rm", "--yes", &used[..16]]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "rm of a leased image succeeded"
    );
    assert!(
        text(&out.stderr).contains("in use by Domain"),
        "{}",
        text(&out.stderr)
    );

    // gc lists what it would remove and asks: no terminal, no --yes, so
    // nothing is removed (exit 2).
    let out = lazaret(&ws, &["image", "gc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("remove  {}", &unused[..12])),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(published(&data).len(), 2, "gc removed without asking");
    let out = lazaret(&ws, &["image", "gc", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("removed {unused}")), "{said}");
    assert!(
        said.contains(&format!("keep    {}", &used[..12])) && said.contains("(leased by a Domain)"),
        "{said}"
    );
    assert_eq!(published(&data), vec![used.clone()]);
    assert_eq!(list(&ws).len(), 1);
    // The running sandbox still reads its lower.
    let out = ws.run_sh("cat /etc/hello");
    assert_eq!(text(&out.stdout), "used\n", "{}", text(&out.stderr));

    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(session.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = session.wait();
    lazaret_tests::assert_domain_gone(&ws.domain_id("default"));
    // Released at teardown: now gc removes it too.
    let released = eventually(Duration::from_secs(10), || {
        list(&ws).iter().all(|r| r.3 == 0)
    });
    assert!(released, "the lease outlived the Domain: {:?}", list(&ws));
    // Unleased now, but the profile names it: gc keeps it unless --all.
    let out = lazaret(&ws, &["image", "gc", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("named by profile default; --all removes it"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(published(&data), vec![used.clone()]);
    // `image rm` takes the reference as the profile gives it.
    let reference = format!("oci:{b}/layout:used");
    let out = lazaret(&ws, &["image", "rm", &reference]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(published(&data), vec![used.clone()]);
    let out = lazaret(&ws, &["image", "rm", "--yes", &reference]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("removed {used}")));
    let out = lazaret(&ws, &["image", "gc", "--all", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(published(&data).is_empty(), "{:?}", published(&data));
    assert!(list(&ws).is_empty());
    assert!(leftovers(&data).is_empty());
}

#[test]
fn the_default_image_is_in_the_catalog() {
    let env = require_env!();
    // The shared Storage Root, where the warm-up prepared lazaret:default.
    let ws = env.workspace("img-default");
    let listed = list(&ws);
    assert!(
        listed
            .iter()
            .any(|r| r.1 == "lazaret:default" && r.0.len() == 64),
        "{listed:?}"
    );
}

/// State Anchors over a changing image (issue: State Anchor): a file the
/// Domain never touched follows the new image; one it changed keeps the
/// upper's content.
#[test]
fn after_an_image_change_unmodified_files_follow_and_modified_ones_stay() {
    let env = require_env!();
    let (ws, data) = setup(env, "img-change", None);
    let b = ws.base.display().to_string();
    mkoci(&ws, "layout", "one", "--hello one");
    mkoci(&ws, "layout", "two", "--hello two");
    let run = |script: &str| {
        let out = ws.run_sh(script);
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
        lazaret_tests::assert_domain_gone(&ws.domain_id("default"));
        text(&out.stdout)
    };
    write_config(&ws, &data, Some(&format!("oci:{b}/layout:one")));
    assert_eq!(run("cat /etc/hello /etc/hello2"), "one\none\n");
    run("echo mine > /etc/hello2");
    write_config(&ws, &data, Some(&format!("oci:{b}/layout:two")));
    assert_eq!(run("cat /etc/hello /etc/hello2"), "two\nmine\n");
}
