//! What the integration tests share: the example profiles, loaded as
//! `lazaret run` loads them, and the profiles that exercise the rest.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lazaret_config::{Network, NetworkDefault, NetworkMode, Profile};
use lazaret_kubernetes::{Export, Options};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every profile of `examples/NAME.toml`, loaded through
/// `lazaret_config::load` (the file copied to a private temporary file:
/// the loader refuses files others may write).
pub fn example(name: &str) -> lazaret_config::Config {
    let text = std::fs::read_to_string(repo_root().join(format!("examples/{name}.toml")))
        .expect("the example exists");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    let env = lazaret_config::EnvVars::default();
    // The owner of the file this process just wrote: this process.
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&path).unwrap());
    lazaret_config::load(Some(&path), &env, uid)
        .unwrap_or_else(|e| panic!("examples/{name}.toml: {e}"))
        .config
}

/// The options the golden files are made with.
pub fn options(profile: &str) -> Options {
    let mut o = Options::new(profile);
    o.repo = Some("https://git.example.com/team/app.git".into());
    o.git_ref = Some("main".into());
    o.egress_image = "registry.example.com/lazaret-egress:test".into();
    o
}

pub fn export(profile: &Profile, name: &str) -> Export {
    lazaret_kubernetes::export(profile, &options(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The example profiles, and profiles that reach the other branches:
/// names only, a resolver of its own, nested rules, no network,
/// persistent and protected paths, volumes and ports.
pub fn profiles() -> Vec<(String, Profile)> {
    let mut out = Vec::new();
    for ex in ["codex", "claude-code", "aider"] {
        for (name, p) in example(ex).profiles {
            if name != "default" {
                out.push((name, p));
            }
        }
    }
    out.push(("default".into(), Profile::default()));
    out.push((
        "names".into(),
        Profile {
            network: Network {
                default: NetworkDefault::Deny,
                allow_hosts: vec![
                    "github.com".into(),
                    "*.githubusercontent.com".into(),
                    "registry.npmjs.org:443".into(),
                    "ssh.github.com:22".into(),
                ],
                ..Network::default()
            },
            ..Profile::default()
        },
    ));
    out.push((
        "names-dns".into(),
        Profile {
            network: Network {
                default: NetworkDefault::Deny,
                dns: vec!["198.51.100.53".into()],
                allow: vec!["203.0.113.0/24".into()],
                allow_hosts: vec!["api.openai.com:443".into()],
                ..Network::default()
            },
            ..Profile::default()
        },
    ));
    out.push((
        "nested".into(),
        Profile {
            network: Network {
                allow: vec!["10.1.0.0/16".into(), "10.1.2.3".into()],
                deny: vec![
                    "10.1.2.0/24".into(),
                    "198.51.100.0/24".into(),
                    "2001:db8::/32".into(),
                ],
                dns: vec!["10.9.9.9".into(), "1.1.1.1".into()],
                ..Network::default()
            },
            ..Profile::default()
        },
    ));
    out.push((
        "offline".into(),
        Profile {
            network: Network {
                mode: Some(NetworkMode::None),
                ..Network::default()
            },
            protected_paths: vec!["ci".into(), "Makefile".into()],
            persistent_paths: vec![],
            user: Some("agent".into()),
            ports: vec!["8080:80".into()],
            volumes: vec![lazaret_config::Volume {
                host: "/srv/data".into(),
                sandbox: "/data".into(),
                read_only: true,
                git_sentry: true,
            }],
            ..Profile::default()
        },
    ));
    out
}
