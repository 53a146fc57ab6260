//! `lazaret df [--json]`: what Lazaret keeps on disk, by what it is for:
//! prepared images, each Domain's State Anchors, Ignored Workspace State
//! and the rest of its Domain Root, and each profile's shared paths.
//!
//! Sizes are allocated blocks (each inode once), counted by the
//! supervisor's confined scan as `state list` counts them: the files the
//! sandbox's subordinate IDs own (which `du` cannot read) included, and a
//! sparse file counted by its data, never by the size the sandbox gave it.

use crate::error::CliError;
use crate::state_cmd::{all_domains, allocated_bytes, human_bytes};
use lazaret_config::EnvVars;
use lazaret_protocol::display;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Serialize)]
struct Usage {
    storage_root: String,
    images: Vec<ImageUsage>,
    domains: Vec<DomainUsage>,
    shared_paths: Vec<SharedUsage>,
    total_bytes: u64,
}

#[derive(Serialize)]
struct ImageUsage {
    id: String,
    reference: String,
    bytes: u64,
}

#[derive(Serialize)]
struct DomainUsage {
    domain_id: String,
    profile: Option<String>,
    workspace: Option<String>,
    anchors_bytes: u64,
    ignored_bytes: u64,
    /// Logs, records, the changes journal, private Git state.
    other_bytes: u64,
    total_bytes: u64,
    /// Why a part could not be counted (its figures are then lower
    /// bounds); one Domain's failure hides no other's.
    error: Option<String>,
}

#[derive(Serialize)]
struct SharedUsage {
    profile: String,
    /// The shared directory's name (the sandbox path, escaped as State
    /// Anchors' are).
    dir: String,
    bytes: u64,
}

/// The allocated bytes of `dir`, 0 when it does not exist.
fn size(dir: &Path) -> Result<u64, CliError> {
    if !dir.is_dir() {
        return Ok(0);
    }
    allocated_bytes(dir)
}

fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    v.sort();
    v
}

fn usage(config: Option<PathBuf>) -> Result<Usage, CliError> {
    let env = EnvVars::from_process();
    let uid = rustix::process::getuid().as_raw();
    let loaded = lazaret_config::load(config.as_deref(), &env, uid)?;
    let root = lazaret_config::storage_root(&loaded.config, &env)?;
    let map = lazaret_helpers::userns::current_id_map()?;
    let store = lazaret_image::Store::new(&root, map);
    let mut images = Vec::new();
    for l in store.list()? {
        let dir = store.artifact_dir(&l.record.id);
        images.push(ImageUsage {
            bytes: size(&dir)?,
            id: l.record.id,
            reference: l.record.reference,
        });
    }
    let mut domains = Vec::new();
    for d in all_domains(config)? {
        let mut error = None;
        let mut counted = |dir: &Path| {
            size(dir).unwrap_or_else(|e| {
                error.get_or_insert_with(|| e.to_string());
                0
            })
        };
        let total = counted(&d.layout.root);
        let anchors = counted(&d.layout.root.join("state"));
        let ignored = counted(&d.layout.ignored());
        domains.push(DomainUsage {
            domain_id: d.id.clone(),
            profile: d.meta.as_ref().map(|m| m.profile.clone()),
            workspace: d.meta.as_ref().map(|m| m.workspace.clone()),
            anchors_bytes: anchors,
            ignored_bytes: ignored,
            other_bytes: total.saturating_sub(anchors + ignored),
            total_bytes: total.max(anchors + ignored),
            error,
        });
    }
    let mut shared_paths = Vec::new();
    for (profile, dir) in subdirs(&root.join("profiles")) {
        for (name, path) in subdirs(&dir.join("shared")) {
            shared_paths.push(SharedUsage {
                profile: profile.clone(),
                dir: name,
                bytes: size(&path)?,
            });
        }
    }
    let total_bytes = images.iter().map(|i| i.bytes).sum::<u64>()
        + domains.iter().map(|d| d.total_bytes).sum::<u64>()
        + shared_paths.iter().map(|s| s.bytes).sum::<u64>();
    Ok(Usage {
        storage_root: root.display().to_string(),
        images,
        domains,
        shared_paths,
        total_bytes,
    })
}

pub fn run(config: Option<PathBuf>, json: bool) -> Result<i32, CliError> {
    let u = usage(config)?;
    if json {
        crate::json::print(&u)?;
        return Ok(0);
    }
    let h = human_bytes;
    println!("Storage Root {}", display::message(&u.storage_root));
    section(
        "images",
        &u.images,
        |i| i.bytes,
        " prepared; `lazaret image gc` removes those nothing needs",
    );
    for i in &u.images {
        row(
            &i.id[..12.min(i.id.len())],
            i.bytes,
            &display::message(&i.reference),
        );
    }
    section(
        "Domains",
        &u.domains,
        |d| d.total_bytes,
        "; `lazaret state rm` or `state prune` removes inactive ones",
    );
    for d in &u.domains {
        let o = |s: &Option<String>| display::message(s.as_deref().unwrap_or("?"));
        row(
            &d.domain_id[..12.min(d.domain_id.len())],
            d.total_bytes,
            &format!(
                "profile {}, workspace {}: State Anchors {}, Ignored Workspace State {}, other {}",
                o(&d.profile),
                o(&d.workspace),
                h(d.anchors_bytes),
                h(d.ignored_bytes),
                h(d.other_bytes)
            ),
        );
        if let Some(e) = &d.error {
            println!("                 not all counted: {}", display::message(e));
        }
    }
    section("shared paths", &u.shared_paths, |s| s.bytes, "");
    for s in &u.shared_paths {
        row(
            &display::message(&s.dir),
            s.bytes,
            &format!("profile {}", display::message(&s.profile)),
        );
    }
    println!("total           {:>10}", h(u.total_bytes));
    Ok(0)
}

/// The first line of a section of `lazaret df`: its name, the bytes of
/// its `items` together, then their number and `note` in parentheses.
fn section<T>(name: &str, items: &[T], bytes: impl Fn(&T) -> u64, note: &str) {
    println!(
        "{name:<16}{:>10}  ({}{note})",
        human_bytes(items.iter().map(bytes).sum()),
        items.len()
    );
}

/// One item of a section: its name (`key`), its bytes, then `rest`.
fn row(key: &str, bytes: u64, rest: &str) {
    println!("  {key:<12}  {:>10}  {rest}", human_bytes(bytes));
}
