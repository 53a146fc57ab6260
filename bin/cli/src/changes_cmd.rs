//! `lazaret changes`: every path the sandbox created, modified, renamed
//! or deleted in the host workspace since a point the developer chooses
//! (the Domain's last start by default), whatever Git's ignore rules show.
//!
//! The list comes from the mount router's changes journal, which records
//! each change to the host store before the router makes it (see
//! `lazaret_protocol::changes`), so it is complete by construction; the
//! host workspace is only looked at for whether each path is there now
//! (`lstat` beneath the workspace, never through a link) and for its
//! ignore rules. Paths are the sandbox's bytes: always shown escaped.
//!
//! Flagged: the files host tools run or load on their own ([`host_tool`]:
//! hook paths, `.envrc`, editor tasks, devcontainer commands, Makefiles,
//! package scripts, `conftest.py`...), and new files host `git status`
//! would not list because the ignore rules as they are now (the sandbox's
//! `.gitignore` edits included) hide them.

use crate::error::CliError;
use crate::state_cmd::{resolve, Which};
use crate::Global;
use lazaret_protocol::changes::{Event, Op};
use lazaret_protocol::display;
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ChangesArgs {
    #[command(flatten)]
    which: Which,
    /// From when: `start` (the Domain's last start, the default), `all`,
    /// a duration back from now (`30s`, `10m`, `2h`, `1d`), a time
    /// (`2026-12-02T07:00:00Z`), or the name of a mark
    #[arg(long)]
    since: Option<String>,
    /// Record a point named NAME to use with `--since NAME` later
    #[arg(long, value_name = "NAME", conflicts_with_all = ["since", "json", "all"])]
    mark: Option<String>,
    /// Also list paths that were created and deleted again
    #[arg(long)]
    all: bool,
    /// One JSON array of records instead of text
    #[arg(long)]
    json: bool,
}

/// What became of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Created,
    Modified,
    Deleted,
    /// Created and deleted again within the window.
    Transient,
    /// Something beneath this directory changed (the journal's coarse
    /// record past its size bound; the root: anything may have).
    ChangedBeneath,
}

/// One path's changes in the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub kind: Kind,
    /// Its mode or owner changed (`chmod +x`).
    pub attr: bool,
    /// The name it had before a rename within the window.
    pub renamed_from: Option<Vec<u8>>,
    pub last_unix_ms: u64,
}

#[derive(Default, Clone)]
struct State {
    existed_before: bool,
    created: bool,
    modified: bool,
    removed: bool,
    attr: bool,
    beneath: bool,
    renamed_from: Option<Vec<u8>>,
    last: u64,
}

/// `path` lies strictly beneath the directory `dir`.
fn beneath(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

impl State {
    /// A path first seen changed or removed: it was there before.
    fn existing() -> State {
        State {
            existed_before: true,
            ..State::default()
        }
    }

    /// The path's net change, if any.
    fn change(self, path: Vec<u8>) -> Option<Change> {
        let kind = if self.beneath {
            Kind::ChangedBeneath
        } else if self.removed {
            if self.created {
                Kind::Transient
            } else {
                Kind::Deleted
            }
        } else if self.created {
            Kind::Created
        } else if self.modified || self.attr || self.renamed_from.is_some() {
            Kind::Modified
        } else {
            return None;
        };
        Some(Change {
            path,
            kind,
            attr: self.attr,
            renamed_from: self.renamed_from,
            last_unix_ms: self.last,
        })
    }
}

/// The net change of each path over `events` at or after `since_ms`.
pub fn summarize(events: &[Event], since_ms: u64) -> Vec<Change> {
    let mut paths: BTreeMap<Vec<u8>, State> = BTreeMap::new();
    let pre = State::existing;
    for e in events.iter().filter(|e| e.time_unix_ms >= since_ms) {
        let t = e.time_unix_ms;
        match e.op {
            Op::Start | Op::Mark => {}
            Op::Create | Op::Mkdir | Op::Symlink => {
                let s = paths.entry(e.path.clone()).or_default();
                if s.removed {
                    // Replaced: what was there before is gone.
                    s.removed = false;
                    s.modified = true;
                } else if !s.existed_before {
                    s.created = true;
                }
                s.last = t;
            }
            Op::Link => {
                if let Some(to) = &e.to {
                    let s = paths.entry(to.clone()).or_default();
                    s.created = !s.existed_before;
                    s.removed = false;
                    s.last = t;
                }
            }
            Op::Write | Op::Attr => {
                let s = paths.entry(e.path.clone()).or_insert_with(pre);
                if e.op == Op::Write {
                    s.modified = true;
                } else {
                    s.attr = true;
                }
                s.last = t;
            }
            Op::Remove => {
                let s = paths.entry(e.path.clone()).or_insert_with(pre);
                s.removed = true;
                s.last = t;
            }
            Op::Rename => {
                let Some(to) = &e.to else { continue };
                rename(&mut paths, &e.path, to, t);
            }
            Op::Beneath => {
                let s = paths.entry(e.path.clone()).or_insert_with(pre);
                s.beneath = true;
                s.last = t;
            }
        }
    }
    paths
        .into_iter()
        .filter_map(|(path, s)| s.change(path))
        .collect()
}

/// A rename of `from` to `to` at `t`: what lay beneath a renamed
/// directory moves with it, a `from` that was there before is removed,
/// and replacing a `to` that was there counts as a change of it.
fn rename(paths: &mut BTreeMap<Vec<u8>, State>, from: &[u8], to: &[u8], t: u64) {
    let pre = State::existing;
    let mut moved = paths.remove(from).unwrap_or_else(pre);
    moved.renamed_from.get_or_insert_with(|| from.to_vec());
    moved.last = t;
    // What lay beneath a renamed directory moves with it.
    let under: Vec<Vec<u8>> = paths.keys().filter(|k| beneath(k, from)).cloned().collect();
    for k in under {
        if let Some(v) = paths.remove(&k) {
            let mut nk = to.to_vec();
            nk.extend_from_slice(&k[from.len()..]);
            paths.insert(nk, v);
        }
    }
    if moved.existed_before {
        let gone = paths.entry(from.to_vec()).or_insert_with(pre);
        gone.removed = true;
        gone.last = t;
    }
    // Replacing a path that was there counts as a change of it.
    if let Some(old) = paths.get(to) {
        if old.existed_before || old.created {
            moved.modified = true;
        }
    }
    paths.insert(to.to_vec(), moved);
}

/// The files host tools run or load on their own, by name, and which tool.
const HOST_TOOL_FILES: &[(&[u8], &str)] = &[
    (b".envrc", "direnv loads it on cd"),
    (b".env", "dotenv loaders and compose read it"),
    (b"Makefile", "make runs it"),
    (b"makefile", "make runs it"),
    (b"GNUmakefile", "make runs it"),
    (b"package.json", "npm/yarn/pnpm run its scripts"),
    (b".npmrc", "npm reads it (script-shell, hooks)"),
    (b".yarnrc", "yarn reads it"),
    (b".yarnrc.yml", "yarn reads it (yarnPath)"),
    (b".pnpmfile.cjs", "pnpm runs it"),
    (b"conftest.py", "pytest loads it"),
    (b"pytest.ini", "pytest reads it (plugins)"),
    (b"tox.ini", "tox and pytest read it"),
    (b"noxfile.py", "nox runs it"),
    (b"setup.py", "pip and setuptools run it"),
    (b"setup.cfg", "setuptools and pytest read it"),
    (
        b"pyproject.toml",
        "pip and pytest read it (build backends, plugins)",
    ),
    (b"sitecustomize.py", "Python loads it at start"),
    (b"usercustomize.py", "Python loads it at start"),
    (b"Cargo.toml", "cargo reads it (build scripts)"),
    (b"build.rs", "cargo runs it"),
    (b"rust-toolchain", "rustup reads it (toolchain)"),
    (b"rust-toolchain.toml", "rustup reads it (toolchain)"),
    (b"go.mod", "go reads it (toolchain)"),
    (b"go.work", "go reads it"),
    (b"Gemfile", "bundler runs it"),
    (b"Rakefile", "rake runs it"),
    (b"justfile", "just runs it"),
    (b"Justfile", "just runs it"),
    (b"Taskfile.yml", "task runs it"),
    (b"Taskfile.yaml", "task runs it"),
    (b"CMakeLists.txt", "cmake runs it"),
    (b"meson.build", "meson runs it"),
    (b"configure", "./configure runs it"),
    (b"build.gradle", "gradle runs it"),
    (b"build.gradle.kts", "gradle runs it"),
    (b"settings.gradle", "gradle runs it"),
    (b"settings.gradle.kts", "gradle runs it"),
    (b"gradlew", "gradle's wrapper"),
    (b"pom.xml", "maven reads it (plugins)"),
    (b"mvnw", "maven's wrapper"),
    (b".pre-commit-config.yaml", "pre-commit runs its hooks"),
    (b"lefthook.yml", "lefthook runs it"),
    (b".lefthook.yml", "lefthook runs it"),
    (b"lefthook-local.yml", "lefthook runs it"),
    (b".overcommit.yml", "overcommit runs it"),
    (
        b".gitattributes",
        "Git applies its filters and diff drivers",
    ),
    (b".gitmodules", "Git reads submodule URLs from it"),
    (b".tool-versions", "asdf reads it"),
    (b"mise.toml", "mise runs its tasks and hooks"),
    (b".mise.toml", "mise runs its tasks and hooks"),
    (b".nvmrc", "nvm reads it"),
    (b"flake.nix", "nix and direnv evaluate it"),
    (b"shell.nix", "nix and direnv evaluate it"),
    (b".devcontainer.json", "devcontainer tools run its commands"),
    (b"Dockerfile", "docker builds run it"),
    (b"docker-compose.yml", "docker compose reads it"),
    (b"compose.yaml", "docker compose reads it"),
];

/// The directories whose files host tools run or load on their own.
const HOST_TOOL_DIRS: &[(&[u8], &str)] = &[
    (b".husky/", "husky's Git hooks"),
    (b".githooks/", "Git hooks (core.hooksPath)"),
    (b".vscode/", "VS Code runs its tasks and reads its settings"),
    (b".idea/", "JetBrains IDEs run its configurations"),
    (b".devcontainer/", "devcontainer tools run its commands"),
    (b".cargo/", "cargo reads it (runners, wrappers)"),
    (b".mvn/", "maven reads it"),
    (b".github/workflows/", "CI runs it"),
    (b".git/hooks/", "Git hooks"),
];

/// What runs or loads `path` on the host on its own, if anything: the
/// files a developer's tools act on without being told to.
pub fn host_tool(path: &[u8]) -> Option<&'static str> {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let under = |dir: &[u8]| {
        path.starts_with(dir)
            || path
                .windows(dir.len() + 1)
                .any(|w| w[0] == b'/' && &w[1..] == dir)
    };
    if let Some((_, why)) = HOST_TOOL_FILES.iter().find(|(n, _)| *n == name) {
        return Some(why);
    }
    if let Some((_, why)) = HOST_TOOL_DIRS.iter().find(|(d, _)| under(d)) {
        return Some(why);
    }
    if name.ends_with(b".mk") {
        return Some("make includes it");
    }
    if name.ends_with(b".pth") {
        return Some("Python runs its import lines at start");
    }
    None
}

/// The files a host command will likely read on its own, by its program:
/// for the Host Escalation prompt, which names those the sandbox changed.
pub fn read_by(argv: &[String], path: &[u8]) -> bool {
    let Some(prog) = argv.first() else {
        return false;
    };
    let prog = prog.rsplit('/').next().unwrap_or(prog);
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let is = |names: &[&str]| names.iter().any(|n| n.as_bytes() == name);
    // A path the command names itself.
    if argv
        .iter()
        .skip(1)
        .chain(std::iter::once(&argv[0]))
        .any(|a| {
            let a = a.strip_prefix("./").unwrap_or(a);
            a.as_bytes() == path
        })
    {
        return true;
    }
    match prog {
        "make" | "gmake" => is(&["Makefile", "makefile", "GNUmakefile"]) || name.ends_with(b".mk"),
        "npm" | "npx" | "yarn" | "pnpm" | "bun" | "node" => is(&[
            "package.json",
            ".npmrc",
            ".yarnrc",
            ".yarnrc.yml",
            ".pnpmfile.cjs",
        ]),
        "python" | "python3" | "pytest" | "py.test" | "tox" | "nox" | "pip" | "pip3" | "uv"
        | "poetry" => {
            is(&[
                "conftest.py",
                "pytest.ini",
                "tox.ini",
                "setup.py",
                "setup.cfg",
                "pyproject.toml",
                "noxfile.py",
                "sitecustomize.py",
            ]) || name.ends_with(b".pth")
        }
        "cargo" | "rustc" | "rustup" => {
            is(&[
                "Cargo.toml",
                "build.rs",
                "rust-toolchain",
                "rust-toolchain.toml",
            ]) || path.starts_with(b".cargo/")
        }
        "go" => is(&["go.mod", "go.work"]),
        "git" => {
            is(&[
                ".gitattributes",
                ".gitmodules",
                ".pre-commit-config.yaml",
                "lefthook.yml",
            ]) || path.starts_with(b".husky/")
                || path.starts_with(b".githooks/")
        }
        "pre-commit" => is(&[".pre-commit-config.yaml"]),
        "gradle" | "gradlew" => is(&[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
            "gradlew",
        ]),
        "mvn" | "mvnw" => is(&["pom.xml", "mvnw"]) || path.starts_with(b".mvn/"),
        "just" => is(&["justfile", "Justfile"]),
        "task" => is(&["Taskfile.yml", "Taskfile.yaml"]),
        "cmake" => is(&["CMakeLists.txt"]),
        "meson" => is(&["meson.build"]),
        "bundle" | "rake" | "ruby" => is(&["Gemfile", "Rakefile"]),
        "docker" | "podman" | "docker-compose" => {
            is(&["Dockerfile", "docker-compose.yml", "compose.yaml"])
        }
        "direnv" => is(&[".envrc"]),
        _ => false,
    }
}

/// When `--since` (or its absence) starts: milliseconds since the epoch.
fn since_ms(since: Option<&str>, events: &[Event], now_ms: u64) -> Result<u64, CliError> {
    let last_start = || {
        events
            .iter()
            .rev()
            .find(|e| e.op == Op::Start)
            .map_or(0, |e| e.time_unix_ms)
    };
    let Some(s) = since else {
        return Ok(last_start());
    };
    match s {
        "start" => return Ok(last_start()),
        "all" => return Ok(0),
        _ => {}
    }
    if let Some(e) = events
        .iter()
        .rev()
        .find(|e| e.op == Op::Mark && e.path == s.as_bytes())
    {
        return Ok(e.time_unix_ms);
    }
    let unit = |c: char| match c {
        's' => Some(1_000u64),
        'm' => Some(60_000),
        'h' => Some(3_600_000),
        'd' => Some(86_400_000),
        _ => None,
    };
    if let Some(last) = s.chars().last() {
        if let (Some(u), Ok(n)) = (unit(last), s[..s.len() - 1].parse::<u64>()) {
            return Ok(now_ms.saturating_sub(n.saturating_mul(u)));
        }
    }
    if let Ok(ts) = s.parse::<jiff::Timestamp>() {
        return Ok(u64::try_from(ts.as_millisecond()).unwrap_or(0));
    }
    Err(CliError::Usage(format!(
        "--since {}: give start, all, a duration (30s, 10m, 2h, 1d), a time (2026-12-02T07:00:00Z) or a mark's name",
        display::message(s)
    )))
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The journal of the Domain whose Domain Root is `root`.
pub fn journal_dir(root: &Path) -> PathBuf {
    root.join("rules-baseline")
}

/// A change as shown, with what the host says of it now.
#[derive(Serialize)]
struct Shown {
    /// The path, escaped (`display::escape`: the exact bytes come back
    /// with `display::unescape`).
    path: String,
    kind: Kind,
    /// Its mode or owner changed (a file that was there before).
    mode_changed: bool,
    /// A regular file with an execute bit, now.
    executable: bool,
    renamed_from: Option<String>,
    present_now: bool,
    in_git_dir: bool,
    run_by_host_tools: Option<&'static str>,
    hidden_from_git_status: bool,
    last_change_unix_ms: u64,
}

/// The mode of the host's entry `rel` beneath `ws` now (`None`: absent),
/// never through a link.
fn mode_now(ws: &Path, rel: &[u8]) -> Option<u32> {
    let root = lazaret_state::beneath::Root::open(ws).ok()?;
    if rel.is_empty() {
        return Some(0o040755);
    }
    let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let fd = root
        .open_dir(Path::new(std::ffi::OsStr::from_bytes(dir)))
        .ok()?;
    rustix::fs::statat(
        &fd,
        std::ffi::OsStr::from_bytes(name),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .ok()
    .map(|st| st.st_mode)
}

/// Whether the host has `rel` beneath `ws` now, never through a link.
fn present(ws: &Path, rel: &[u8]) -> bool {
    mode_now(ws, rel).is_some()
}

/// A regular file anyone may execute.
fn executable(mode: Option<u32>) -> bool {
    mode.is_some_and(|m| m & 0o170000 == 0o100000 && m & 0o111 != 0)
}

fn in_git_dir(p: &[u8]) -> bool {
    p == b".git" || p.starts_with(b".git/") || p.windows(6).any(|w| w == b"/.git/")
}

/// The changes of the Domain's workspace `ws` since `since_ms`, as shown.
fn shown(events: &[Event], since_ms: u64, ws: &Path, all: bool) -> Vec<Shown> {
    let ignore = crate::ignore_check::HostRules::load(ws);
    summarize(events, since_ms)
        .into_iter()
        .filter(|c| all || c.kind != Kind::Transient)
        .map(|c| {
            let mode = mode_now(ws, &c.path);
            let now = mode.is_some();
            let git = in_git_dir(&c.path);
            Shown {
                path: display::escape(&c.path),
                kind: c.kind,
                mode_changed: c.attr && c.kind != Kind::Created,
                executable: executable(mode),
                renamed_from: c.renamed_from.as_deref().map(display::escape),
                present_now: now,
                in_git_dir: git,
                run_by_host_tools: if git { None } else { host_tool(&c.path) },
                hidden_from_git_status: now
                    && !git
                    && c.kind == Kind::Created
                    && ignore.is_ignored(&c.path),
                last_change_unix_ms: c.last_unix_ms,
            }
        })
        .collect()
}

fn label(k: Kind) -> &'static str {
    match k {
        Kind::Created => "created",
        Kind::Modified => "modified",
        Kind::Deleted => "deleted",
        Kind::Transient => "transient",
        Kind::ChangedBeneath => "beneath",
    }
}

fn print_text(list: &[Shown], ws: &str, since_ms: u64) {
    let from = if since_ms == 0 {
        "ever".to_string()
    } else {
        format!("since {}", crate::human::time_ms(since_ms))
    };
    println!("The sandbox's changes in {ws} ({from}):");
    let (git, work): (Vec<&Shown>, Vec<&Shown>) = list.iter().partition(|s| s.in_git_dir);
    if work.is_empty() && git.is_empty() {
        println!("  none");
        return;
    }
    for s in &work {
        let mut line = format!("  {:<9} {}", label(s.kind), s.path);
        if let Some(f) = &s.renamed_from {
            line.push_str(&format!("  (renamed from {f})"));
        }
        if s.mode_changed {
            line.push_str("  (mode changed)");
        }
        if s.executable && (s.mode_changed || s.kind == Kind::Created) {
            line.push_str("  (executable)");
        }
        if s.kind == Kind::ChangedBeneath {
            line.push_str(if s.path.is_empty() {
                "  (anything may have changed: the journal reached its size bound)"
            } else {
                "  (something beneath it: the journal records directories past its size bound)"
            });
        }
        println!("{line}");
        if let Some(why) = s.run_by_host_tools {
            println!("            ! run by host tools: {why}");
        }
        if s.hidden_from_git_status {
            println!("            ! hidden from host `git status` by the ignore rules");
        }
    }
    if !git.is_empty() {
        let n = |f: &dyn Fn(&str) -> bool| git.iter().filter(|s| f(&s.path)).count();
        let objects = n(&|p| p.starts_with(".git/objects/"));
        let refs = n(&|p| p.starts_with(".git/refs/") || p.ends_with("packed-refs"));
        let other: Vec<&str> = git
            .iter()
            .map(|s| s.path.as_str())
            .filter(|p| !p.starts_with(".git/objects/") && !p.starts_with(".git/refs/"))
            .collect();
        println!(
            "  .git: {objects} object file(s), {refs} ref(s){}{}",
            if other.is_empty() { "" } else { ", " },
            other.join(", ")
        );
    }
    let flagged = work
        .iter()
        .filter(|s| s.run_by_host_tools.is_some() && s.present_now)
        .count();
    let hidden = work.iter().filter(|s| s.hidden_from_git_status).count();
    if flagged + hidden > 0 {
        println!(
            "{flagged} of these are run by host tools on their own and {hidden} are hidden from `git status`: review them before you run host commands here."
        );
    }
}

/// `lazaret changes`.
pub fn run(args: ChangesArgs, g: &Global) -> Result<i32, CliError> {
    let domain = resolve(&args.which.with(g)?)?;
    let dir = journal_dir(&domain.layout.root);
    if let Some(name) = &args.mark {
        if name.is_empty()
            || name.contains(['\t', '\n'])
            || matches!(name.as_str(), "start" | "all")
        {
            return Err(CliError::Usage(format!(
                "--mark {}: give a name without tabs or line breaks, other than start and all",
                display::message(name)
            )));
        }
        use std::io::Write;
        let line =
            lazaret_protocol::changes::line(now_ms().into(), Op::Mark, name.as_bytes(), None);
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(dir.join(lazaret_protocol::changes::FILE))
            })
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| CliError::Session(format!("cannot record the mark: {e}")))?;
        println!(
            "marked {}: see what changes from now with `lazaret changes --since {}`",
            display::escape(name),
            display::escape(name)
        );
        return Ok(0);
    }
    let events = lazaret_protocol::changes::read(&dir)
        .map_err(|e| CliError::Session(format!("cannot read the changes journal: {e}")))?
        .unwrap_or_default();
    let since = since_ms(args.since.as_deref(), &events, now_ms())?;
    let ws = domain
        .meta
        .as_ref()
        .map(|m| PathBuf::from(&m.workspace))
        .ok_or_else(|| {
            CliError::Session(format!(
                "Domain {} has not run yet: nothing changed",
                domain.id
            ))
        })?;
    let list = shown(&events, since, &ws, args.all);
    if args.json {
        println!(
            "{}",
            display::ascii_json(&serde_json::to_string_pretty(&list).unwrap_or_default())
        );
    } else {
        print_text(&list, &display::escape_os(&ws), since);
    }
    Ok(0)
}

/// For `lazaret run` at a session's end: one line on stderr when the
/// sandbox changed, since `since_ms`, files host tools run on their own
/// or files host `git status` does not show.
pub fn session_note(root: &Path, ws: &Path, since_ms: u64) {
    let Ok(Some(events)) = lazaret_protocol::changes::read(&journal_dir(root)) else {
        return;
    };
    let list = shown(&events, since_ms, ws, false);
    let flagged: Vec<&str> = list
        .iter()
        .filter(|s| s.present_now && s.run_by_host_tools.is_some())
        .map(|s| s.path.as_str())
        .collect();
    let hidden: Vec<&str> = list
        .iter()
        .filter(|s| s.hidden_from_git_status)
        .map(|s| s.path.as_str())
        .collect();
    if flagged.is_empty() && hidden.is_empty() {
        return;
    }
    let few = |v: &[&str]| {
        let mut s = v.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        if v.len() > 5 {
            s.push_str(&format!(" and {} more", v.len() - 5));
        }
        s
    };
    let mut parts = Vec::new();
    if !flagged.is_empty() {
        parts.push(format!(
            "{} file(s) host tools run on their own ({})",
            flagged.len(),
            few(&flagged)
        ));
    }
    if !hidden.is_empty() {
        parts.push(format!(
            "{} new file(s) host `git status` does not show ({})",
            hidden.len(),
            few(&hidden)
        ));
    }
    lazaret_protocol::log_line!(
        "lazaret: the sandbox changed {}: review them with `lazaret changes`",
        parts.join(" and ")
    );
}

/// For the Host Escalation prompt: the files the sandbox changed since
/// the Domain's last start (present now) that `argv` will likely read
/// on its own ([`read_by`]).
pub fn read_by_command(root: &Path, ws: &Path, argv: &[String]) -> Vec<Vec<u8>> {
    let Ok(Some(events)) = lazaret_protocol::changes::read(&journal_dir(root)) else {
        return Vec::new();
    };
    let since = since_ms(None, &events, now_ms()).unwrap_or(0);
    summarize(&events, since)
        .into_iter()
        .filter(|c| matches!(c.kind, Kind::Created | Kind::Modified))
        .filter(|c| !in_git_dir(&c.path) && read_by(argv, &c.path) && present(ws, &c.path))
        .map(|c| c.path)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u64, op: Op, p: &str, to: Option<&str>) -> Event {
        Event {
            time_unix_ms: t,
            op,
            path: p.as_bytes().to_vec(),
            to: to.map(|s| s.as_bytes().to_vec()),
        }
    }

    fn kinds(events: &[Event], since: u64) -> Vec<(String, Kind)> {
        summarize(events, since)
            .into_iter()
            .map(|c| (String::from_utf8(c.path).unwrap(), c.kind))
            .collect()
    }

    #[test]
    fn net_changes_by_path() {
        let e = [
            ev(1, Op::Start, "", None),
            ev(2, Op::Create, "new.py", None),
            ev(3, Op::Write, "new.py", None),
            ev(4, Op::Write, "README", None),
            ev(5, Op::Remove, "old.txt", None),
            ev(6, Op::Create, "tmp", None),
            ev(7, Op::Remove, "tmp", None),
            ev(8, Op::Attr, "run.sh", None),
            ev(9, Op::Rename, "a.txt", Some("b.txt")),
            ev(10, Op::Mkdir, "d", None),
            ev(11, Op::Create, "d/x", None),
            ev(12, Op::Rename, "d", Some("e")),
            ev(13, Op::Remove, "swap", None),
            ev(14, Op::Create, "swap", None),
        ];
        assert_eq!(
            kinds(&e, 0),
            vec![
                ("README".into(), Kind::Modified),
                ("a.txt".into(), Kind::Deleted),
                ("b.txt".into(), Kind::Modified),
                ("e".into(), Kind::Created),
                ("e/x".into(), Kind::Created),
                ("new.py".into(), Kind::Created),
                ("old.txt".into(), Kind::Deleted),
                ("run.sh".into(), Kind::Modified),
                ("swap".into(), Kind::Modified),
                ("tmp".into(), Kind::Transient),
            ]
        );
        let renamed = summarize(&e, 0)
            .into_iter()
            .find(|c| c.path == b"b.txt")
            .unwrap();
        assert_eq!(renamed.renamed_from.as_deref(), Some(&b"a.txt"[..]));
        // Only what happened since the point chosen.
        assert_eq!(kinds(&e, 13), vec![("swap".into(), Kind::Modified)]);
    }

    #[test]
    fn the_coarse_records_say_what_may_have_changed() {
        let e = [
            ev(1, Op::Beneath, "node_modules", None),
            ev(2, Op::Beneath, "", None),
        ];
        assert_eq!(
            kinds(&e, 0),
            vec![
                ("".into(), Kind::ChangedBeneath),
                ("node_modules".into(), Kind::ChangedBeneath)
            ]
        );
    }

    #[test]
    fn files_host_tools_run_are_known() {
        for p in [
            "conftest.py",
            "tests/conftest.py",
            "Makefile",
            ".envrc",
            ".vscode/tasks.json",
            "a/.husky/pre-commit",
            ".devcontainer/devcontainer.json",
            "lib/x.pth",
            "rules.mk",
            ".github/workflows/ci.yml",
            "sub/package.json",
        ] {
            assert!(host_tool(p.as_bytes()).is_some(), "{p}");
        }
        for p in ["src/main.rs", "README.md", "notes/Makefile.txt", "vscode/x"] {
            assert_eq!(host_tool(p.as_bytes()), None, "{p}");
        }
    }

    #[test]
    fn what_a_command_reads() {
        let argv = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(read_by(&argv(&["make", "test"]), b"Makefile"));
        assert!(read_by(&argv(&["/usr/bin/make"]), b"sub/rules.mk"));
        assert!(read_by(
            &argv(&["python3", "-m", "pytest"]),
            b"tests/conftest.py"
        ));
        assert!(read_by(&argv(&["sh", "./deploy.sh"]), b"deploy.sh"));
        assert!(read_by(&argv(&["git", "commit"]), b".gitattributes"));
        assert!(!read_by(&argv(&["git", "push"]), b"Makefile"));
        assert!(!read_by(&argv(&["ls"]), b"conftest.py"));
    }

    #[test]
    fn since_takes_start_all_durations_times_and_marks() {
        let e = [
            ev(1_000, Op::Start, "", None),
            ev(5_000, Op::Mark, "before-review", None),
            ev(9_000, Op::Start, "", None),
        ];
        assert_eq!(since_ms(None, &e, 100_000).unwrap(), 9_000);
        assert_eq!(since_ms(Some("start"), &e, 100_000).unwrap(), 9_000);
        assert_eq!(since_ms(Some("all"), &e, 100_000).unwrap(), 0);
        assert_eq!(since_ms(Some("before-review"), &e, 100_000).unwrap(), 5_000);
        assert_eq!(since_ms(Some("30s"), &e, 100_000).unwrap(), 70_000);
        assert_eq!(
            since_ms(Some("1970-01-01T00:00:02Z"), &e, 100_000).unwrap(),
            2_000
        );
        assert!(since_ms(Some("yesterday"), &e, 100_000).is_err());
    }
}
