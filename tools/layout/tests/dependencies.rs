//! The layout's rules (`docs/layout.md`), read from `cargo metadata`:
//!
//! - every workspace crate lives in `bin/`, `lib/` or `tools/`;
//! - a `bin/` crate builds exactly one binary, and depends on no other
//!   `bin/` crate (a reviewer audits a binary from its own folder plus
//!   the libraries);
//! - a `lib/` crate has no binary;
//! - `lazaret-protocol` depends on no other workspace library (it is the
//!   vocabulary every binary shares);
//! - `lazaret-coordinator` links neither `lazaret-config` nor
//!   `lazaret-image`, directly or through another workspace crate;
//! - `lazaret-mailbox` links no workspace library but `lazaret-protocol`
//!   and the confinement library (`lazaret-seccomp`): a reviewer audits it
//!   from `bin/mailbox/` and those two;
//! - `lazaret-dns-filter` links none but those two and the rtnetlink
//!   client both network helpers share (`lazaret-netlink`, which links
//!   `lazaret-protocol` alone): its judge, its policy and its log are
//!   `lazaret_protocol::netpolicy`, its routes its own;
//! - only the CLI links the configuration parser (`lazaret-config`) and
//!   the policy's derivation (`lazaret-netpolicy`): every other binary
//!   is handed what it needs.
//!
//! A rule broken on purpose, for now, is listed in [`KNOWN_EXCEPTIONS`]
//! with the issue that removes it; an exception that no longer happens
//! fails too, so the list shrinks as the work lands.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `(rule, crate, dependency)` broken knowingly, each with the issue that
/// removes it (none now).
const KNOWN_EXCEPTIONS: &[(&str, &str, &str)] = &[];

struct Krate {
    /// `bin`, `lib` or `tools` (or the first directory otherwise).
    floor: String,
    dir: PathBuf,
    binaries: Vec<String>,
    /// Workspace crates it depends on as a normal or build dependency.
    deps: BTreeSet<String>,
    /// The same, dev-dependencies included.
    all_deps: BTreeSet<String>,
}

fn metadata() -> Value {
    // The host's platform only: metadata for every platform would need
    // the registry index, which a test must not fetch.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let vv = Command::new(&cargo).arg("-vV").output().expect("cargo -vV");
    let host = String::from_utf8_lossy(&vv.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("cargo -vV names the host");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(&cargo)
        .current_dir(&root)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &host])
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn workspace() -> BTreeMap<String, Krate> {
    let m = metadata();
    let root = PathBuf::from(m["workspace_root"].as_str().expect("workspace_root"));
    let members: BTreeSet<&str> = m["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let name_of: BTreeMap<&str, &str> = m["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let mut out = BTreeMap::new();
    for p in m["packages"].as_array().expect("packages") {
        let id = p["id"].as_str().expect("id");
        if !members.contains(id) {
            continue;
        }
        let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
        let dir = manifest
            .parent()
            .expect("a manifest's directory")
            .strip_prefix(&root)
            .expect("a member beneath the workspace root")
            .to_path_buf();
        let floor = dir
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        let binaries = p["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        let node = m["resolve"]["nodes"]
            .as_array()
            .expect("resolve nodes")
            .iter()
            .find(|n| n["id"] == id)
            .expect("a resolve node per member");
        let mut deps = BTreeSet::new();
        let mut all_deps = BTreeSet::new();
        for d in node["deps"].as_array().expect("deps") {
            let pkg = d["pkg"].as_str().expect("pkg");
            if !members.contains(pkg) {
                continue;
            }
            let name = name_of[pkg].to_string();
            let linked = d["dep_kinds"]
                .as_array()
                .expect("dep_kinds")
                .iter()
                .any(|k| k["kind"] != "dev");
            if linked {
                deps.insert(name.clone());
            }
            all_deps.insert(name);
        }
        out.insert(
            p["name"].as_str().expect("name").to_string(),
            Krate {
                floor,
                dir,
                binaries,
                deps,
                all_deps,
            },
        );
    }
    out
}

/// What `name` links of the workspace, transitively (normal and build
/// dependencies; features as cargo unifies them for the whole
/// workspace).
fn links(ws: &BTreeMap<String, Krate>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_string()];
    while let Some(n) = todo.pop() {
        for d in &ws[&n].deps {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn violations(ws: &BTreeMap<String, Krate>) -> BTreeSet<(String, String, String)> {
    let mut v = BTreeSet::new();
    let mut add = |rule: &str, krate: &str, what: &str| {
        v.insert((rule.to_string(), krate.to_string(), what.to_string()));
    };
    for (name, k) in ws {
        match k.floor.as_str() {
            "bin" => {
                if k.binaries.len() != 1 {
                    add("one-binary-per-bin-crate", name, &k.binaries.join(","));
                }
                for d in &k.all_deps {
                    if ws[d].floor == "bin" {
                        add("bin-depends-on-bin", name, d);
                    }
                }
            }
            "lib" => {
                for b in &k.binaries {
                    add("lib-has-binary", name, b);
                }
            }
            "tools" => {}
            _ => add("outside-bin-lib-tools", name, &k.dir.display().to_string()),
        }
    }
    // Its dev-dependency on itself turns on its own `netpolicy` feature
    // for its tests; that is no other library.
    for d in ws["lazaret-protocol"]
        .all_deps
        .iter()
        .filter(|d| *d != "lazaret-protocol")
    {
        add("protocol-depends-on-library", "lazaret-protocol", d);
    }
    for d in links(ws, "lazaret-coordinator") {
        if d == "lazaret-config" || d == "lazaret-image" {
            add("coordinator-links", "lazaret-coordinator", &d);
        }
    }
    for d in links(ws, "lazaret-mailbox") {
        if d != "lazaret-protocol" && d != "lazaret-seccomp" {
            add(
                "mailbox-links-beyond-protocol-and-confinement",
                "lazaret-mailbox",
                &d,
            );
        }
    }
    for d in links(ws, "lazaret-dns-filter") {
        if !["lazaret-protocol", "lazaret-seccomp", "lazaret-netlink"].contains(&d.as_str()) {
            add(
                "dns-filter-links-beyond-protocol-confinement-netlink",
                "lazaret-dns-filter",
                &d,
            );
        }
    }
    for d in links(ws, "lazaret-netlink") {
        if d != "lazaret-protocol" {
            add("netlink-links-beyond-protocol", "lazaret-netlink", &d);
        }
    }
    let helpers = ws
        .iter()
        .filter(|(n, k)| k.floor == "bin" && *n != "lazaret-cli");
    for (name, _) in helpers {
        for d in links(ws, name) {
            if d == "lazaret-config" || d == "lazaret-netpolicy" {
                add("only-the-cli-links-config-and-derivation", name, &d);
            }
        }
    }
    v
}

#[test]
fn the_layout_rules_hold() {
    let ws = workspace();
    // The rules see the crates they are about.
    for (name, floor) in [
        ("lazaret-coordinator", "bin"),
        ("lazaret-dns-filter", "bin"),
        ("lazaret-protocol", "lib"),
        ("lazaret-seccomp", "lib"),
        ("lazaret-tests", "tools"),
    ] {
        assert_eq!(
            ws.get(name).map(|k| k.floor.as_str()),
            Some(floor),
            "{name}"
        );
    }
    let known: BTreeSet<(String, String, String)> = KNOWN_EXCEPTIONS
        .iter()
        .map(|(r, k, d)| (r.to_string(), k.to_string(), d.to_string()))
        .collect();
    let found = violations(&ws);
    let new: Vec<_> = found.difference(&known).collect();
    let stale: Vec<_> = known.difference(&found).collect();
    assert!(new.is_empty(), "layout rules broken: {new:?}");
    assert!(
        stale.is_empty(),
        "no longer broken, remove from KNOWN_EXCEPTIONS: {stale:?}"
    );
}

/// Each rule fails on a workspace that breaks it (so the test above
/// cannot pass by checking nothing).
#[test]
fn each_rule_catches_its_violation() {
    let mut ws = workspace();
    let base = violations(&ws);
    let expect = |ws: &BTreeMap<String, Krate>, rule: &str| {
        let extra: Vec<_> = violations(ws)
            .difference(&base)
            .map(|(r, _, _)| r.clone())
            .collect();
        assert!(extra.iter().any(|r| r == rule), "{rule}: {extra:?}");
    };
    ws.get_mut("lazaret-dns-filter")
        .expect("dns-filter")
        .all_deps
        .insert("lazaret-netpolicy-helper".into());
    expect(&ws, "bin-depends-on-bin");
    ws.get_mut("lazaret-state")
        .expect("state")
        .binaries
        .push("lazaret-state-tool".into());
    expect(&ws, "lib-has-binary");
    ws.get_mut("lazaret-protocol")
        .expect("protocol")
        .all_deps
        .insert("lazaret-helpers".into());
    expect(&ws, "protocol-depends-on-library");
    ws.get_mut("lazaret-mailbox")
        .expect("mailbox")
        .binaries
        .push("lazaret-mailbox-two".into());
    expect(&ws, "one-binary-per-bin-crate");
    ws.get_mut("lazaret-mailbox")
        .expect("mailbox")
        .deps
        .insert("lazaret-helpers".into());
    expect(&ws, "mailbox-links-beyond-protocol-and-confinement");
    ws.get_mut("lazaret-netlink")
        .expect("netlink")
        .deps
        .insert("lazaret-netpolicy".into());
    expect(&ws, "netlink-links-beyond-protocol");
    // Through the rtnetlink client, the derivation reaches the filter.
    expect(&ws, "dns-filter-links-beyond-protocol-confinement-netlink");
    expect(&ws, "only-the-cli-links-config-and-derivation");
}

#[test]
fn the_coordinator_rule_follows_links_through_other_crates() {
    let mut ws = workspace();
    for n in ["lazaret-coordinator", "lazaret-netpolicy"] {
        let k = ws.get_mut(n).expect(n);
        k.deps.remove("lazaret-config");
        k.deps.remove("lazaret-image");
    }
    assert!(!links(&ws, "lazaret-coordinator").contains("lazaret-image"));
    // Through a library it links, the image crate would still count.
    ws.get_mut("lazaret-state")
        .expect("state")
        .deps
        .insert("lazaret-image".into());
    assert!(
        links(&ws, "lazaret-coordinator").contains("lazaret-image"),
        "{:?}",
        links(&ws, "lazaret-coordinator")
    );
}
