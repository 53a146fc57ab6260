//! `lazaret image commit` (issue 14, item 5): what one Domain installed
//! in its State Anchors becomes a prepared image, `local:NAME`, that
//! another workspace's Domain starts from, with no install; the
//! sandbox's writing is copied, never followed or trusted.

use lazaret_tests::{assert_domain_gone, eventually, require_env, text};
use std::time::Duration;

#[test]
fn a_domains_state_anchors_become_an_image_another_workspace_starts_from() {
    let env = require_env!();
    let a = env.workspace("commit-a");
    // What an agent's setup leaves behind: a tool, its settings, a
    // removed image file, a link the host must never follow, a setuid
    // bit, and a file outside every persistent path.
    let out = a.run_sh(
        "printf '#!/bin/sh\\necho agent 1.2.3\\n' > /usr/local/bin/agent && chmod 4755 /usr/local/bin/agent \
         && echo settings > /root/.agentrc && rm /etc/debian_version && ln -s /etc/shadow /root/evil \
         && echo transient > /tmp/not-persistent && echo SETUP",
    );
    assert_eq!(text(&out.stdout), "SETUP\n", "{}", text(&out.stderr));
    assert_domain_gone(&a.domain_id("default"));

    // A bad name changes nothing.
    let out = a
        .lazaret(&["image", "commit", "Bad/Name"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("1 to 64 of a-z"),
        "{}",
        text(&out.stderr)
    );

    let out = a
        .lazaret(&["image", "commit", "agentimg"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 64, "{id}");
    let err = text(&out.stderr);
    assert!(err.contains("committed as local:agentimg"), "{err}");
    assert!(
        err.contains("/usr/local/bin/agent"),
        "the cleared setuid bit is named: {err}"
    );
    let out = a.lazaret(&["image", "list"]).output().unwrap();
    assert!(
        text(&out.stdout).contains("local:agentimg"),
        "{}",
        text(&out.stdout)
    );

    // Another workspace starts from it.
    let b = env.workspace("commit-b");
    b.write_config("[profiles.default]\nimage = \"local:agentimg\"\n");
    let out = b.run_sh(
        "agent; cat /root/.agentrc; test -e /etc/debian_version || echo GONE; readlink /root/evil; \
         stat -c %a /usr/local/bin/agent; test -e /tmp/not-persistent || echo NOT-KEPT",
    );
    assert_eq!(
        text(&out.stdout),
        "agent 1.2.3\nsettings\nGONE\n/etc/shadow\n755\nNOT-KEPT\n",
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&b.domain_id("default"));

    // The image it was made from is unchanged.
    let c = env.workspace("commit-c");
    let out =
        c.run_sh("test -e /etc/debian_version && test ! -e /usr/local/bin/agent && echo BASE");
    assert_eq!(text(&out.stdout), "BASE\n", "{}", text(&out.stderr));
    assert_domain_gone(&c.domain_id("default"));

    // A running Domain is not committed.
    let mut running = a.lazaret(&["run", "--", "sleep", "60"]).spawn().unwrap();
    let domain = a.domain_root("default");
    assert!(eventually(Duration::from_secs(60), || domain
        .join("run/coordinator.sock")
        .exists()));
    let out = a.lazaret(&["image", "commit", "again"]).output().unwrap();
    let _ = running.kill();
    let _ = running.wait();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is active"),
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&a.domain_id("default"));

    // `image gc` keeps a committed image (issue 29): nothing leases it
    // now, yet it is 75 s of an agent's setup.
    let out = a.lazaret(&["image", "gc", "--yes"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("committed as local:agentimg; --all removes it"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stdout).contains(&format!("removed {id}")));
    // Removed by name, after asking: refused without a terminal or --yes;
    // a profile naming it then says how to make it.
    let out = a
        .lazaret(&["image", "rm", "local:agentimg"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("pass --yes"),
        "{}",
        text(&out.stderr)
    );
    let out = a
        .lazaret(&["image", "rm", "--yes", "local:agentimg"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("removed {id}")),
        "{}",
        text(&out.stdout)
    );
    let out = b.run_sh("true");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no committed image `local:agentimg`"),
        "{}",
        text(&out.stderr)
    );
}

/// Compares two files of `len` bytes chunk by chunk.
fn same_content(a: &std::path::Path, b: &std::path::Path, len: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let (fa, fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut off = 0;
    while off < len {
        let n = ((len - off) as usize).min(x.len());
        fa.read_exact_at(&mut x[..n], off).unwrap();
        fb.read_exact_at(&mut y[..n], off).unwrap();
        if x[..n] != y[..n] {
            return false;
        }
        off += n as u64;
    }
    true
}

#[test]
fn a_sparse_file_is_committed_with_its_holes_and_its_exact_content() {
    use std::os::unix::fs::MetadataExt;
    let env = require_env!();
    let a = env.workspace("commit-sparse");
    // From inside: 2 GiB with no data at all, and 2 GiB with data only at
    // both ends; each takes next to no disk in the State Anchor.
    let out = a.run_sh(
        "truncate -s 2G /root/hole && printf head > /root/ends && truncate -s 2G /root/ends \
         && printf tail | dd of=/root/ends bs=1 seek=2147483644 conv=notrunc 2>/dev/null && echo SETUP",
    );
    assert_eq!(text(&out.stdout), "SETUP\n", "{}", text(&out.stderr));
    assert_domain_gone(&a.domain_id("default"));
    let out = a
        .lazaret(&["image", "commit", "sparseimg"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let committed = env
        .data_home
        .join("lazaret/lowers")
        .join(&id)
        .join("rootfs/root");
    let upper = std::fs::read_dir(a.domain_root("default").join("state/anchors/root"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("upper"))
        .find(|p| p.join("ends").exists())
        .expect("the /root anchor's upper");
    let mut sizes = Vec::new();
    for name in ["hole", "ends"] {
        let m = std::fs::metadata(committed.join(name)).unwrap();
        sizes.push((name, m.len(), m.blocks() * 512));
        assert_eq!(m.len(), 2 << 30, "{name}");
        assert!(
            same_content(&committed.join(name), &upper.join(name), 2 << 30),
            "{name} differs from what the sandbox wrote"
        );
    }
    // Removed before the sizes are judged: a failing run leaves no 4 GiB.
    let rm = a
        .lazaret(&["image", "rm", "--yes", "local:sparseimg"])
        .output()
        .unwrap();
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    for (name, _, allocated) in sizes {
        assert!(
            allocated <= 1 << 20,
            "{name}: {allocated} bytes of host disk for a file of holes"
        );
    }
}
