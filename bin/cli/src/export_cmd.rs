//! `lazaret export kubernetes`: the profile as Kubernetes manifests
//! (lazaret-kubernetes builds them; docs/kubernetes.md maps each concept).
//! Loads the profile as `lazaret run` does; writes one YAML stream to
//! stdout, or one file per object into `--out DIR`. Exits 0, or 125 with
//! the reason (an unknown profile, a bad flag, a network configuration
//! `run` would refuse too).

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::error::CliError;
use crate::global::Global;

#[derive(clap::Subcommand)]
pub enum ExportCmd {
    /// Manifests for a Kubernetes cluster with gVisor (RuntimeClass
    /// `runsc`) and the agent-sandbox controller: a SandboxTemplate, the
    /// egress Pod with the profile's network policy, and their fences
    Kubernetes(KubernetesArgs),
}

#[derive(clap::Args)]
pub struct KubernetesArgs {
    /// The repository a trusted init step clones into the workspace
    /// (default: the workspace starts empty)
    #[arg(long, value_name = "URL")]
    repo: Option<String>,
    /// The branch, tag or commit it checks out (needs --repo)
    #[arg(long = "ref", value_name = "REF", requires = "repo")]
    git_ref: Option<String>,
    /// Write one file per object into DIR (created if needed) instead of
    /// one stream to stdout
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The objects' namespace (default: none, kubectl's current one)
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The agent image as the cluster pulls it (default: the profile's)
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// The egress Service's address: a free one of the cluster's Service
    /// range, the agent Pods' resolver and proxy
    #[arg(long, value_name = "IP", default_value_t = lazaret_kubernetes::DEFAULT_EGRESS_IP)]
    egress_ip: Ipv4Addr,
    /// The egress image (`scripts/release` builds it as an OCI layout)
    #[arg(long, value_name = "IMAGE")]
    egress_image: Option<String>,
    /// The image of the trusted init step that clones the repository
    #[arg(long, value_name = "IMAGE", default_value = lazaret_kubernetes::DEFAULT_GIT_IMAGE)]
    git_image: String,
}

pub fn run(cmd: ExportCmd, g: &Global) -> Result<i32, CliError> {
    let ExportCmd::Kubernetes(args) = cmd;
    if g.workspace.is_some() {
        return Err(CliError::Usage(
            "`lazaret export kubernetes` does not take --workspace: the cluster's workspace is cloned from --repo".into(),
        ));
    }
    let env = lazaret_config::EnvVars::from_process();
    let loaded = lazaret_config::load(g.config(), &env, rustix::process::getuid().as_raw())?;
    let name = g.profile();
    let profile = loaded.config.profile(name)?;
    let mut opts = lazaret_kubernetes::Options::new(name);
    opts.repo = args.repo;
    opts.git_ref = args.git_ref;
    opts.namespace = args.namespace;
    opts.image = args.image;
    opts.egress_ip = args.egress_ip;
    if let Some(i) = args.egress_image {
        opts.egress_image = i;
    }
    opts.git_image = args.git_image;
    let export =
        lazaret_kubernetes::export(profile, &opts).map_err(|e| CliError::Usage(e.to_string()))?;
    let encode = |e: lazaret_kubernetes::ExportError| CliError::Usage(e.to_string());
    match &args.out {
        None => {
            let text = export.to_yaml().map_err(encode)?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| CliError::Session(format!("cannot write the manifests: {e}")))?;
        }
        Some(dir) => {
            let storage = |source| CliError::Storage {
                path: dir.display().to_string(),
                source,
            };
            std::fs::create_dir_all(dir).map_err(storage)?;
            write_manifests(dir, &export.files().map_err(encode)?)?;
            eprintln!(
                "lazaret: wrote {} manifests into {}; apply them with `kubectl apply -f {}`",
                export.manifests.len(),
                dir.display(),
                dir.display()
            );
        }
    }
    for n in &export.notes {
        eprintln!("lazaret: note: {n}");
    }
    Ok(0)
}

/// Writes each `(name, text)` into `dir` without following a link: the
/// directory itself must not be a symbolic link, and each file is written
/// under a temporary name and renamed over its own, so a link, FIFO or
/// hard link left at a manifest's name (`--out` may well be inside a
/// workspace the sandbox writes) is replaced, never written through.
fn write_manifests(dir: &Path, files: &[(String, String)]) -> Result<(), CliError> {
    use rustix::fs::{Mode, OFlags};
    let failed = |path: &Path, e: rustix::io::Errno| CliError::Storage {
        path: path.display().to_string(),
        source: e.into(),
    };
    let d = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => CliError::Usage(format!(
            "--out {} is a symbolic link or not a directory: name the directory itself",
            dir.display()
        )),
        e => failed(dir, e),
    })?;
    for (name, text) in files {
        let path = dir.join(name);
        if name.contains('/') || name.starts_with('.') {
            return Err(CliError::Usage(format!(
                "{name:?} is no manifest file name"
            )));
        }
        let tmp = format!(".{name}.lazaret-tmp");
        let discard = || {
            let _ = rustix::fs::unlinkat(&d, tmp.as_str(), rustix::fs::AtFlags::empty());
        };
        // One left by an interrupted export, or put there: it goes.
        discard();
        let fd = rustix::fs::openat(
            &d,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| failed(&path, e))?;
        let written = std::fs::File::from(fd)
            .write_all(text.as_bytes())
            .map_err(CliError::storage(&path))
            .and_then(|()| {
                rustix::fs::renameat(&d, tmp.as_str(), &d, name.as_str())
                    .map_err(|e| failed(&path, e))
            });
        if written.is_err() {
            discard();
        }
        written?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: ExportCmd,
    }

    fn global(config: &std::path::Path, profile: &str) -> Global {
        Global {
            config: Some(config.into()),
            profile: Some(profile.into()),
            workspace: None,
        }
    }

    #[test]
    fn the_profile_is_loaded_as_run_loads_it_and_written_one_file_per_object() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/codex.toml");
        std::fs::copy(example, &config).unwrap();
        let out = dir.path().join("k8s");
        let top = Top::parse_from([
            "export",
            "kubernetes",
            "--repo",
            "https://git.example.com/app.git",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(run(top.cmd, &global(&config, "codex")).unwrap(), 0);
        let mut files: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files[0], "01-runtimeclass-lazaret-gvisor.yaml");
        assert!(files.contains(&"02-sandboxtemplate-lazaret-codex.yaml".to_string()));
        let t = std::fs::read_to_string(out.join("02-sandboxtemplate-lazaret-codex.yaml")).unwrap();
        assert!(t.contains("name: lazaret-codex-env"), "{t}");
        assert!(
            t.contains("value: \"https://git.example.com/app.git\""),
            "{t}"
        );

        // What the sandbox may leave at --out (inside a workspace) is
        // replaced, never written through: a link to a file outside, a
        // FIFO.
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "mine\n").unwrap();
        let template = out.join("02-sandboxtemplate-lazaret-codex.yaml");
        std::fs::remove_file(&template).unwrap();
        std::os::unix::fs::symlink(&outside, &template).unwrap();
        let runtime = out.join("01-runtimeclass-lazaret-gvisor.yaml");
        std::fs::remove_file(&runtime).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &runtime,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        std::fs::write(
            out.join(".01-runtimeclass-lazaret-gvisor.yaml.lazaret-tmp"),
            "x",
        )
        .unwrap();
        let again = |out: &std::path::Path| {
            let top = Top::parse_from(["export", "kubernetes", "--out", out.to_str().unwrap()]);
            run(top.cmd, &global(&config, "codex"))
        };
        assert_eq!(again(&out).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
        for f in [&template, &runtime] {
            let m = std::fs::symlink_metadata(f).unwrap();
            assert!(m.file_type().is_file(), "{}: {m:?}", f.display());
        }
        assert!(std::fs::read_to_string(&template)
            .unwrap()
            .contains("kind: SandboxTemplate"));
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // --out itself a link: refused, nothing written where it points.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = dir.path().join("k8s-link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let e = again(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

        // An unknown profile names the ones there are.
        let top = Top::parse_from(["export", "kubernetes"]);
        let e = run(top.cmd, &global(&config, "nope")).unwrap_err();
        assert!(e.to_string().contains("codex-setup"), "{e}");
        assert_eq!(e.exit_code(), crate::error::LAZARET_FAILED);
    }
}
