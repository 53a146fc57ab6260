//! `lazaret image prepare REF | list [--json] | rm IMAGE | gc [--all] | commit NAME`:
//! the prepared images of the Storage Root and their Storage Catalog
//! records.
//!
//! Exit status: 0 on success; 2 when refused (`commit`: the Domain is
//! active or in use; `rm`, `gc`: not confirmed); 125 when the command failed (the message says what
//! to do next).

use crate::error::CliError;
use crate::global::{Global, Uses};
use indicatif::{ProgressBar, ProgressStyle};
use lazaret_config::EnvVars;
use lazaret_helpers::userns;
use lazaret_image::{Listed, PrepareOptions, Progress, Store};
use lazaret_protocol::plan::IdMap;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ImageArgs {
    // The shared `--config`, filled in by `run`.
    #[arg(skip)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: ImageCmd,
}

#[derive(clap::Subcommand)]
enum ImageCmd {
    /// Prepare an image and print its prepared-artifact ID.
    /// REF: lazaret:default, oci:DIR[:TAG], oci-archive:FILE[:TAG],
    /// docker-archive:FILE, containers-storage:NAME[:TAG], docker://REGISTRY/NAME[:TAG]
    Prepare {
        /// The image reference
        reference: String,
    },
    /// List prepared images: ID, size, leases, source
    List {
        /// Print JSON (one array of records) instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Remove a prepared image, after asking (refused while a Domain
    /// generation leases it)
    Rm {
        /// The prepared-artifact ID, a unique prefix of it, `local:NAME`,
        /// or an image reference as a profile names it (`lazaret:default`,
        /// `oci:DIR:TAG`: every image prepared from it)
        id: String,
        /// Remove without asking (needed without a terminal)
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Remove the prepared images nothing needs, after listing them and
    /// asking: kept are those a Domain leases, the image each profile of
    /// the configuration names, and each committed `local:` image; also
    /// removes leftovers of interrupted preparations
    Gc {
        /// Remove the images profiles name and the committed `local:`
        /// images too (leased ones are always kept)
        #[arg(long)]
        all: bool,
        /// Remove without asking (needed without a terminal)
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Make a new prepared image from a Domain's image and its State
    /// Anchors (what was installed in it), usable by any profile as
    /// `image = "local:NAME"`; the Domain must not be running
    Commit {
        /// The name: the image becomes `local:NAME`
        name: String,
        /// A Domain ID, as `lazaret state list` shows it (instead of
        /// --profile and --workspace)
        #[arg(long)]
        domain: Option<String>,
    },
}

/// Progress on stderr: an `indicatif` bar on a terminal, plain lines
/// otherwise. No steady tick: no thread is started, so the unpacker may
/// still clone into a user namespace.
struct Report {
    bar: Option<ProgressBar>,
    interactive: bool,
}

impl Report {
    fn new() -> Report {
        Report {
            bar: None,
            interactive: std::io::stderr().is_terminal(),
        }
    }

    fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Progress for Report {
    fn line(&mut self, line: &str) {
        match &self.bar {
            Some(b) => {
                b.set_message(lazaret_protocol::display::bounded(line, 80));
            }
            None => eprintln!("  {}", lazaret_protocol::display::message(line)),
        }
    }

    fn phase(&mut self, name: &str, total: Option<u64>) {
        self.done();
        if !self.interactive {
            eprintln!("lazaret: {name}");
            return;
        }
        let bar = match total {
            Some(t) => {
                let b = ProgressBar::new(t);
                b.set_style(
                    ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {bytes}/{total_bytes} {wide_msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                b
            }
            None => {
                let b = ProgressBar::new_spinner();
                b.set_style(
                    ProgressStyle::with_template("{prefix} {spinner} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b
            }
        };
        bar.set_prefix(name.to_string());
        self.bar = Some(bar);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
    }
}

fn human(bytes: u64) -> String {
    crate::human::bytes_in(bytes, &["B", "KiB", "MiB", "GiB", "TiB"])
}

fn store(args: &ImageArgs, need_ids: bool) -> Result<(Store, lazaret_config::Loaded), CliError> {
    let env = EnvVars::from_process();
    let loaded = lazaret_config::load(
        args.config.as_deref(),
        &env,
        rustix::process::getuid().as_raw(),
    )?;
    let root = lazaret_config::storage_root(&loaded.config, &env)?;
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) if need_ids => return Err(e.into()),
        Err(_) => IdMap {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
            sub_uid: (0, 0),
            sub_gid: (0, 0),
        },
    };
    Ok((Store::new(&root, map), loaded))
}

fn run_inner(args: ImageArgs, g: &Global) -> Result<(), CliError> {
    match &args.cmd {
        ImageCmd::Prepare { reference } => prepare(&args, reference),
        ImageCmd::List { json } => list(&args, *json),
        ImageCmd::Rm { id, yes } => rm(&args, id, *yes),
        ImageCmd::Commit { name, domain } => commit(&args, g, name, domain.clone()),
        ImageCmd::Gc { all, yes } => gc(&args, *all, *yes),
    }
}

/// `image prepare REF`: prints the prepared-artifact ID.
fn prepare(args: &ImageArgs, reference: &str) -> Result<(), CliError> {
    let (store, loaded) = store(args, true)?;
    let runsc =
        crate::leader::detect_runsc(store.storage_root(), loaded.config.runtime.runsc.as_deref())?;
    let opts = PrepareOptions {
        statx_shim: runsc.needs_statx_shim(),
    };
    let mut report = Report::new();
    let result = store.prepare_with(reference, &opts, &mut report);
    report.done();
    let image = result.map_err(|e| CliError::from(e).with_storage(store.storage_root()))?;
    println!("{}", image.id);
    Ok(())
}

/// `image list`: a table, or JSON.
fn list(args: &ImageArgs, json: bool) -> Result<(), CliError> {
    let (store, _) = store(args, false)?;
    let listed = store.list()?;
    if json {
        let text = serde_json::to_string_pretty(&listed)
            .map_err(|e| CliError::Session(format!("cannot encode the list: {e}")))?;
        println!("{}", lazaret_protocol::display::ascii_json(&text));
        return Ok(());
    }
    println!("{:<12}  {:>10}  {:>6}  SOURCE", "ID", "SIZE", "LEASES");
    for l in &listed {
        let r = &l.record;
        println!(
            "{:<12}  {:>10}  {:>6}  {} ({})",
            &r.id[..12.min(r.id.len())],
            human(r.size),
            l.leases.len(),
            r.reference,
            r.manifest_digest
        );
    }
    Ok(())
}

/// `image rm ID`: the images it names, after asking.
fn rm(args: &ImageArgs, id: &str, yes: bool) -> Result<(), CliError> {
    let (store, _) = store(args, true)?;
    let ids = store.resolve_named(id)?;
    let listed = store.list()?;
    for id in &ids {
        match listed.iter().find(|l| &l.record.id == id) {
            Some(l) => println!("{}", row(l)),
            None => println!("{id}  (on disk only, not in the catalog)"),
        }
    }
    confirmed(&format!("Remove {} image(s)?", ids.len()), yes)?;
    for id in &ids {
        let id = store.remove_artifact(id, &mut |l| eprintln!("  {l}"))?;
        println!("removed {id}");
    }
    Ok(())
}

/// `image commit NAME`: a Domain's image and State Anchors as `local:NAME`.
fn commit(
    args: &ImageArgs,
    g: &Global,
    name: &str,
    domain: Option<String>,
) -> Result<(), CliError> {
    let name = name
        .strip_prefix(lazaret_image::commit::LOCAL_PREFIX)
        .unwrap_or(name);
    lazaret_image::commit::check_name(name)?;
    let (store, _) = store(args, true)?;
    let which = crate::state_cmd::Which::new(domain, g)?;
    let d = crate::state_cmd::for_commit(&which, store.storage_root())?;
    let paths: Vec<&str> = d.layers.iter().map(|l| l.path.as_str()).collect();
    eprintln!(
        "lazaret: committing Domain {} (profile {}, workspace {}): image {} and State Anchors {}",
        d.id,
        d.meta.profile,
        lazaret_protocol::display::message(&d.meta.workspace),
        d.meta.image,
        paths.join(", ")
    );
    eprintln!(
        "lazaret: everything those paths hold goes into the image, credentials stored there included (keep logins in `shared_paths`)"
    );
    let mut report = Report::new();
    let result = store.commit(
        &d.base,
        &d.layers,
        name,
        lazaret_image::Limits::default(),
        &mut report,
    );
    report.done();
    let (image, done) = result?;
    eprintln!(
        "lazaret: committed as local:{name}: {} entries, {} from the State Anchors; use it with `image = \"local:{name}\"` in any profile",
        done.entries,
        human(done.bytes)
    );
    println!("{}", image.id);
    Ok(())
}

/// `image gc`: lists what is kept (and why) and what is removed, asks,
/// then removes only what it listed.
fn gc(args: &ImageArgs, all: bool, yes: bool) -> Result<(), CliError> {
    let (store, loaded) = store(args, true)?;
    let listed = store.list()?;
    let keep = if all {
        Default::default()
    } else {
        needed(&store, &loaded.config, &listed)
    };
    let domains = store.storage_root().join("domains");
    let leased = |l: &Listed| {
        l.leases
            .iter()
            .any(|lease| domains.join(&lease.domain_id).is_dir())
    };
    let mut doomed = Vec::new();
    for l in &listed {
        if leased(l) {
            println!("keep    {}  (leased by a Domain)", row(l));
        } else if let Some(why) = keep.get(&l.record.id) {
            println!("keep    {}  ({why}; --all removes it)", row(l));
        } else {
            println!("remove  {}", row(l));
            doomed.push(l.record.id.clone());
        }
    }
    if !doomed.is_empty() {
        confirmed(&format!("Remove {} image(s)?", doomed.len()), yes)?;
    } else {
        println!("no image to remove");
    }
    // Only what was listed for removal (and confirmed): an image
    // prepared meanwhile is not touched.
    let report = store.gc(&|id| doomed.iter().any(|d| d == id), &mut |l| {
        eprintln!("  {l}")
    })?;
    for id in &report.removed {
        println!("removed {id}");
    }
    for id in &report.kept {
        println!("kept {id} (leased)");
    }
    if report.leftovers > 0 {
        println!(
            "removed {} leftover(s) of interrupted preparations",
            report.leftovers
        );
    }
    Ok(())
}

/// One image as `rm` and `gc` list it: short ID, size, reference.
fn row(l: &Listed) -> String {
    let r = &l.record;
    format!(
        "{:<12}  {:>10}  {}",
        &r.id[..12.min(r.id.len())],
        human(r.size),
        lazaret_protocol::display::message(&r.reference)
    )
}

/// Asks before removing; no terminal and no `--yes` is a refusal (2).
fn confirmed(question: &str, yes: bool) -> Result<(), CliError> {
    use crate::confirm::{ask, Answer};
    match ask(question, yes) {
        Answer::Yes => Ok(()),
        Answer::No => Err(CliError::Refused("nothing was removed".into())),
        Answer::NoTerminal => Err(CliError::Refused(
            "nothing was removed: pass --yes to remove without a terminal to ask at".into(),
        )),
    }
}

/// The images `image gc` keeps unless `--all`, with the reason: for each
/// profile of the configuration, the image it names (for a reference, the
/// newest prepared from it; for `local:NAME`, the one committed so), and
/// each committed `local:` image (the current one of each name).
fn needed(
    store: &Store,
    config: &lazaret_config::Config,
    listed: &[Listed],
) -> std::collections::BTreeMap<String, String> {
    use lazaret_image::commit::LOCAL_PREFIX;
    let mut keep = std::collections::BTreeMap::new();
    let mut profiles: Vec<(&str, &str)> = config
        .profiles
        .iter()
        .map(|(n, p)| (n.as_str(), p.image.as_str()))
        .collect();
    let default = config.profile(crate::global::DEFAULT_PROFILE).ok();
    if let Some(p) =
        default.filter(|_| !config.profiles.contains_key(crate::global::DEFAULT_PROFILE))
    {
        profiles.push((crate::global::DEFAULT_PROFILE, p.image.as_str()));
    }
    for (name, image) in profiles {
        let id = match image.strip_prefix(LOCAL_PREFIX) {
            Some(local) => store.committed(local).ok().map(|i| i.id),
            None => listed
                .iter()
                .filter(|l| l.record.reference == image || l.record.source == image)
                .max_by_key(|l| l.record.created)
                .map(|l| l.record.id.clone()),
        };
        if let Some(id) = id {
            keep.entry(id).or_insert_with(|| {
                format!(
                    "named by profile {}",
                    lazaret_protocol::display::message(name)
                )
            });
        }
    }
    for l in listed {
        if let Some(local) = l.record.reference.strip_prefix(LOCAL_PREFIX) {
            if let Ok(current) = store.committed(local) {
                keep.entry(current.id).or_insert_with(|| {
                    format!(
                        "committed as {}",
                        lazaret_protocol::display::message(&l.record.reference)
                    )
                });
            }
        }
    }
    keep
}

/// Runs `lazaret image ...`; returns the exit status.
pub fn run(mut args: ImageArgs, g: &Global) -> i32 {
    // Only `commit` acts on one Domain.
    let (name, uses) = match &args.cmd {
        ImageCmd::Prepare { .. } => ("image prepare", Uses::Config),
        ImageCmd::List { .. } => ("image list", Uses::Config),
        ImageCmd::Rm { .. } => ("image rm", Uses::Config),
        ImageCmd::Gc { .. } => ("image gc", Uses::Config),
        ImageCmd::Commit { .. } => ("image commit", Uses::Domain),
    };
    args.config = g.config.clone();
    match g.check(name, uses).and_then(|()| run_inner(args, g)) {
        Ok(()) => 0,
        Err(e) => {
            crate::error::report(&e);
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_are_human() {
        assert_eq!(human(12), "12 B");
        assert_eq!(human(2048), "2.0 KiB");
        assert_eq!(human(200 << 20), "200.0 MiB");
    }
}
