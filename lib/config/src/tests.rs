//! End-to-end tests of [`load`] and [`check_not_mounted`] on real files.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::*;

/// The example from the schema documentation, every key used once.
const FULL: &str = r#"[storage]
data_root = "/srv/lazaret"

[runtime]
runsc = "/usr/local/bin/runsc"

[profiles.default]
image = "lazaret:default"
persistent_paths = ["/usr", "/etc", "/var", "/opt", "/root", "/home"]
isolate_ignored = true
env = { KEY = "value" }

[[profiles.default.volumes]]
host = "/abs/host/path"
sandbox = "/data"
read_only = true

[profiles.default.network]
allow = ["10.0.0.0/8"]
deny = ["169.254.169.254/32"]
dns = ["1.1.1.1"]
default = "deny"
mode = "enabled"
probe = "198.51.100.7:443"

[[profiles.default.escalation.auto_approve]]
argv = ["git", "fetch"]
trailing_args = false
"#;

struct Fixture {
    dir: TempDir,
    uid: u32,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Whoever runs the tests owns the files they create.
        let uid = fs::metadata(dir.path()).unwrap().uid();
        Self { dir, uid }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Write a config with safe permissions (0644).
    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, contents).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        path
    }

    fn load(&self, path: &Path) -> Result<Loaded, ConfigError> {
        load(Some(path), &EnvVars::default(), self.uid)
    }

    fn load_err(&self, path: &Path) -> ConfigError {
        self.load(path).expect_err("load should have failed")
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        fs::canonicalize(path).unwrap()
    }
}

fn home_env(home: &Path) -> EnvVars {
    EnvVars {
        home: Some(home.to_path_buf()),
        xdg_config_home: None,
        xdg_data_home: None,
    }
}

// ---- locating the file ----

#[test]
fn default_config_when_default_file_missing() {
    let fx = Fixture::new();
    let loaded = load(None, &home_env(fx.dir.path()), fx.uid).unwrap();
    assert_eq!(loaded.path, None);
    assert_eq!(loaded.config, Config::builtin());
    let profile = loaded.config.profile("default").unwrap();
    assert_eq!(profile.image, "lazaret:default");
    assert_eq!(
        profile.persistent_paths,
        ["/usr", "/etc", "/var", "/opt", "/root", "/home"]
    );
    assert!(profile.isolate_ignored);
    assert_eq!(
        loaded.fingerprint,
        "25d72bc1e0b4483dadec8dfc56f686654cca098287554a529f062920397310ed"
    );
}

#[test]
fn default_config_without_home_or_xdg() {
    let loaded = load(None, &EnvVars::default(), 0).unwrap();
    assert_eq!(loaded.path, None);
    assert!(loaded.config.profiles.contains_key("default"));
}

#[test]
fn default_location_under_home_is_loaded() {
    let fx = Fixture::new();
    let file = fx.write(".config/lazaret/config.toml", "[profiles.work]\n");
    let loaded = load(None, &home_env(fx.dir.path()), fx.uid).unwrap();
    assert_eq!(loaded.path, Some(fx.canonical(&file)));
    assert!(loaded.config.profiles.contains_key("work"));
}

#[test]
fn xdg_config_home_wins_over_home() {
    let fx = Fixture::new();
    fx.write(".config/lazaret/config.toml", "[profiles.from_home]\n");
    let file = fx.write("xdg/lazaret/config.toml", "[profiles.from_xdg]\n");
    let env = EnvVars {
        home: Some(fx.dir.path().to_path_buf()),
        xdg_config_home: Some(fx.path("xdg")),
        xdg_data_home: None,
    };
    let loaded = load(None, &env, fx.uid).unwrap();
    assert_eq!(loaded.path, Some(fx.canonical(&file)));
    assert!(loaded.config.profiles.contains_key("from_xdg"));
    assert!(!loaded.config.profiles.contains_key("from_home"));
}

#[test]
fn explicit_missing_path_is_an_error() {
    let fx = Fixture::new();
    let missing = fx.path("nope.toml");
    let err = fx.load_err(&missing);
    assert!(
        matches!(&err, ConfigError::ExplicitNotFound { path } if *path == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains("nope.toml"), "{err}");
}

#[test]
fn dangling_symlink_at_default_location_is_an_error() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.path(".config/lazaret")).unwrap();
    std::os::unix::fs::symlink(fx.path("gone.toml"), fx.path(".config/lazaret/config.toml"))
        .unwrap();
    let err = load(None, &home_env(fx.dir.path()), fx.uid).unwrap_err();
    assert!(matches!(err, ConfigError::Resolve { .. }), "{err:?}");
}

// ---- schema ----

#[test]
fn full_example_parses() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    let loaded = fx.load(&file).unwrap();
    let config = &loaded.config;
    assert_eq!(
        config.storage.data_root.as_deref(),
        Some(Path::new("/srv/lazaret"))
    );
    assert_eq!(
        config.runtime.runsc.as_deref(),
        Some(Path::new("/usr/local/bin/runsc"))
    );
    assert_eq!(config.profiles.len(), 1);
    let p = config.profile("default").unwrap();
    assert_eq!(p.image, "lazaret:default");
    assert_eq!(p.persistent_paths.len(), 6);
    assert!(p.isolate_ignored);
    assert_eq!(p.env.get("KEY").map(String::as_str), Some("value"));
    assert_eq!(
        p.volumes,
        [Volume {
            host: "/abs/host/path".into(),
            sandbox: "/data".into(),
            read_only: true,
            git_sentry: true,
        }]
    );
    assert_eq!(
        p.network,
        Network {
            allow: vec!["10.0.0.0/8".into()],
            deny: vec!["169.254.169.254/32".into()],
            dns: vec!["1.1.1.1".into()],
            allow_hosts: vec![],
            default: NetworkDefault::Deny,
            mode: Some(NetworkMode::Enabled),
            probe: Some("198.51.100.7:443".into()),
        }
    );
    assert_eq!(
        p.escalation.auto_approve,
        [AutoApprove {
            argv: vec!["git".into(), "fetch".into()],
            trailing_args: false,
            trailing_options: vec![],
        }]
    );
}

#[test]
fn omitted_fields_take_defaults() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[[profiles.x.volumes]]\nhost = \"/h\"\nsandbox = \"/s\"\n\
         [[profiles.x.escalation.auto_approve]]\nargv = [\"ls\"]\n",
    );
    let config = fx.load(&file).unwrap().config;
    let x = config.profile("x").unwrap();
    assert_eq!(x.image, DEFAULT_IMAGE);
    assert_eq!(x.persistent_paths, DEFAULT_PERSISTENT_PATHS);
    assert!(x.isolate_ignored);
    assert!(x.volumes[0].read_only, "volumes default to read-only");
    assert!(!x.escalation.auto_approve[0].trailing_args);
    assert!(
        x.volumes[0].git_sentry,
        "writable volumes get Git Sentry unless told"
    );
    assert_eq!(x.network.default, NetworkDefault::Allow);
    assert_eq!(x.network.mode, None);
    assert_eq!(x.network.probe, None);
    // The file has no `default` profile, but the built-in one is there.
    assert_eq!(config.profile("default").unwrap(), &Profile::default());
}

#[test]
fn file_default_profile_overrides_builtin() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[profiles.default]\nimage = \"mine\"\n");
    let config = fx.load(&file).unwrap().config;
    assert_eq!(config.profile("default").unwrap().image, "mine");
}

#[test]
fn unknown_profile_lists_available_names() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[profiles.alpha]\n[profiles.beta]\n");
    let config = fx.load(&file).unwrap().config;
    let err = config.profile("gamma").unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnknownProfile { name, .. } if name == "gamma"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("`gamma`"), "{msg}");
    assert!(msg.contains("alpha, beta, default"), "{msg}");
}

#[test]
fn resolved_profile_round_trips_through_postcard() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    let config = fx.load(&file).unwrap().config;
    let profile = config.profile("default").unwrap();
    let bytes = postcard::to_allocvec(profile).unwrap();
    let back: Profile = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(&back, profile);
    let bytes = postcard::to_allocvec(&config).unwrap();
    let back: Config = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, config);
}

// ---- parse errors ----

/// Assert `err` is a parse error at `line` whose message names the file,
/// the line and every one of `needles`.
fn assert_parse_error(err: &ConfigError, file: &Path, line: usize, needles: &[&str]) {
    assert!(
        matches!(err, ConfigError::Parse { line: Some(l), .. } if *l == line),
        "expected parse error at line {line}, got {err:?}"
    );
    let msg = err.to_string();
    let prefix = format!("config {}:{line}: ", file.display());
    assert!(
        msg.starts_with(&prefix),
        "{msg:?} should start with {prefix:?}"
    );
    for needle in needles {
        assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
    }
}

#[test]
fn unknown_top_level_key_names_file_line_and_field() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[storage]\n\n[profilez.default]\n");
    let err = fx.load_err(&file);
    assert_parse_error(&err, &fx.canonical(&file), 3, &["unknown field `profilez`"]);
}

#[test]
fn unknown_profile_key_names_file_line_and_field() {
    let fx = Fixture::new();
    let text = "# comment\n\n[profiles.default]\nimage = \"x\"\n\n\nimagee = \"y\"\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        7,
        &[
            "unknown field `imagee`",
            "expected one of",
            "profiles.default.imagee",
        ],
    );
}

#[test]
fn unknown_volume_key_names_file_line_and_field() {
    let fx = Fixture::new();
    let text = "[profiles.p]\n[[profiles.p.volumes]]\nhost = \"/h\"\nsandbox = \"/s\"\nread_onyl = false\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        5,
        &[
            "unknown field `read_onyl`",
            "profiles.p.volumes[0].read_onyl",
        ],
    );
}

#[test]
fn unknown_network_key_is_refused() {
    let fx = Fixture::new();
    let text = "[profiles.p.network]\nallow = []\nalow = []\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    assert_parse_error(&err, &fx.canonical(&file), 3, &["unknown field `alow`"]);
}

#[test]
fn wrong_type_names_line_and_key() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[profiles.default]\n\nimage = 5\n");
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        3,
        &[
            "invalid type: integer `5`, expected a string",
            "for key `profiles.default.image`",
        ],
    );
}

#[test]
fn wrong_type_inside_array_names_element() {
    let fx = Fixture::new();
    let text = "[profiles.default]\npersistent_paths = [\n  \"/usr\",\n  7,\n]\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        4,
        &[
            "invalid type: integer `7`",
            "profiles.default.persistent_paths[1]",
        ],
    );
}

#[test]
fn bad_enum_value_is_refused_with_line() {
    let fx = Fixture::new();
    let text = "[profiles.default.network]\ndefault = \"maybe\"\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        2,
        &[
            "unknown variant `maybe`",
            "profiles.default.network.default",
        ],
    );
}

#[test]
fn syntax_error_names_line() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[storage]\ndata_root = \"/x\"\nbroken =\n");
    let err = fx.load_err(&file);
    assert_parse_error(&err, &fx.canonical(&file), 3, &[]);
    // Multi-line parser messages are folded so the error stays one line.
    assert!(!err.to_string().contains('\n'), "{err}");
}

// ---- semantic validation ----

/// Assert `err` is a validation error at `line` for `key`.
fn assert_invalid(err: &ConfigError, file: &Path, line: usize, key: &str) -> Invalid {
    let ConfigError::Invalid {
        path,
        line: Some(l),
        key: k,
        reason,
    } = err
    else {
        panic!("expected a validation error with a line, got {err:?}");
    };
    assert_eq!(path, file);
    assert_eq!((*l, k.as_str()), (line, key), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("config {}:{line}: ", file.display())),
        "{msg}"
    );
    assert!(msg.contains(&format!("for key `{key}`")), "{msg}");
    reason.clone()
}

#[test]
fn volume_beneath_workspace_is_refused() {
    let fx = Fixture::new();
    let text =
        "[profiles.p]\n\n[[profiles.p.volumes]]\nhost = \"/h\"\nsandbox = \"/workspace/x\"\n";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    let reason = assert_invalid(
        &err,
        &fx.canonical(&file),
        5,
        "profiles.p.volumes[0].sandbox",
    );
    assert_eq!(
        reason,
        Invalid::Reserved {
            path: "/workspace/x".into(),
            reserved: "/workspace"
        }
    );
}

#[test]
fn duplicate_sandbox_paths_are_refused() {
    let fx = Fixture::new();
    let text = "\
[[profiles.p.volumes]]
host = \"/a\"
sandbox = \"/data\"

[[profiles.p.volumes]]
host = \"/b\"
sandbox = \"/data\"
";
    let file = fx.write("c.toml", text);
    let err = fx.load_err(&file);
    let reason = assert_invalid(
        &err,
        &fx.canonical(&file),
        7,
        "profiles.p.volumes[1].sandbox",
    );
    assert_eq!(
        reason,
        Invalid::DuplicateSandbox {
            path: "/data".into(),
            first: 0
        }
    );
}

#[test]
fn relative_or_dotdot_host_paths_are_refused() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[storage]\ndata_root = \"rel/dir\"\n");
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        2,
        "storage.data_root",
    );
    assert_eq!(reason, Invalid::NotAbsolute("rel/dir".into()));

    let file = fx.write("c2.toml", "[runtime]\n\nrunsc = \"/opt/../bin/runsc\"\n");
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        3,
        "runtime.runsc",
    );
    assert_eq!(reason, Invalid::ParentComponent("/opt/../bin/runsc".into()));

    let file = fx.write(
        "c3.toml",
        "[[profiles.p.volumes]]\nhost = \"/a/../b\"\nsandbox = \"/s\"\n",
    );
    assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        2,
        "profiles.p.volumes[0].host",
    );
}

#[test]
fn reserved_persistent_path_is_refused() {
    let fx = Fixture::new();
    let text = "[profiles.p]\npersistent_paths = [\n  \"/usr\",\n  \"/tmp/cache\",\n]\n";
    let file = fx.write("c.toml", text);
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        4,
        "profiles.p.persistent_paths[1]",
    );
    assert_eq!(
        reason,
        Invalid::Reserved {
            path: "/tmp/cache".into(),
            reserved: "/tmp"
        }
    );
}

#[test]
fn shared_paths_are_loaded_and_refused_by_file_line_and_key() {
    let fx = Fixture::new();
    let file = fx.write(
        "ok.toml",
        "[profiles.claude-code]\nshared_paths = [\"/root/.claude\"]\n",
    );
    let loaded = fx.load(&file).unwrap();
    assert_eq!(
        loaded.config.profile("claude-code").unwrap().shared_paths,
        ["/root/.claude"]
    );
    assert!(loaded
        .config
        .profile("default")
        .unwrap()
        .shared_paths
        .is_empty());

    let text =
        "[profiles.p]\nshared_paths = [\n  \"/root/.claude\",\n  \"/root/.claude/sub\",\n]\n";
    let file = fx.write("nested.toml", text);
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        4,
        "profiles.p.shared_paths[1]",
    );
    assert_eq!(
        reason,
        Invalid::NestedShared {
            path: "/root/.claude/sub".into(),
            first: 0
        }
    );

    let file = fx.write("tmp.toml", "[profiles.p]\n\nshared_paths = [\"/tmp/x\"]\n");
    let err = fx.load_err(&file);
    assert_invalid(&err, &fx.canonical(&file), 3, "profiles.p.shared_paths[0]");
    assert!(
        err.to_string().contains("`/tmp/x` is `/tmp` or beneath it"),
        "{err}"
    );
}

#[test]
fn bad_profile_name_is_refused() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[profiles.ok]\n[profiles.-bad]\n");
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        2,
        "profiles.-bad",
    );
    assert_eq!(reason, Invalid::ProfileName("-bad".into()));

    let file = fx.write("c2.toml", "[profiles.ok]\n\n[profiles.\"a b\"]\n");
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        3,
        "profiles.\"a b\"",
    );
    assert_eq!(reason, Invalid::ProfileName("a b".into()));
}

#[test]
fn bad_env_key_is_refused() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.p]\nimage = \"i\"\nenv = { OK = \"1\", 9LIVES = \"x\" }\n",
    );
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        3,
        "profiles.p.env.9LIVES",
    );
    assert_eq!(reason, Invalid::EnvNameDigit("9LIVES".into()));
}

#[test]
fn empty_argv_is_refused() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[[profiles.p.escalation.auto_approve]]\nargv = []\n",
    );
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        2,
        "profiles.p.escalation.auto_approve[0].argv",
    );
    assert_eq!(reason, Invalid::EmptyArgv);
}

// ---- file checks ----

#[test]
fn group_writable_file_is_refused() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o664)).unwrap();
    let err = fx.load_err(&file);
    assert!(
        matches!(err, ConfigError::Writable { mode: 0o664, .. }),
        "{err:?}"
    );
    let canonical = fx.canonical(&file);
    let msg = err.to_string();
    assert!(
        msg.contains("group- or world-writable (mode 0664)"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("chmod go-w {}", canonical.display())),
        "{msg}"
    );
}

#[test]
fn world_writable_file_is_refused() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o646)).unwrap();
    let err = fx.load_err(&file);
    assert!(
        matches!(err, ConfigError::Writable { mode: 0o646, .. }),
        "{err:?}"
    );
}

#[test]
fn private_file_is_accepted() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    fx.load(&file).unwrap();
}

#[test]
fn file_owned_by_someone_else_is_refused() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", FULL);
    if fx.uid != 0 {
        // Handing a file to another user needs root; the check itself is
        // covered by file::tests::owner_must_be_caller_or_root.
        eprintln!("skipping: not root, cannot chown");
        return;
    }
    std::os::unix::fs::chown(&file, Some(4242), None).unwrap();
    let err = fx.load_err(&file);
    assert!(
        matches!(
            err,
            ConfigError::BadOwner {
                owner: 4242,
                uid: 0,
                ..
            }
        ),
        "{err:?}"
    );
    // A root-owned file is fine for any user.
    std::os::unix::fs::chown(&file, Some(0), None).unwrap();
    load(Some(&file), &EnvVars::default(), 4242).unwrap();
}

#[test]
fn symlink_to_valid_file_is_accepted_and_resolved() {
    let fx = Fixture::new();
    let target = fx.write("real/c.toml", FULL);
    let link = fx.path("link.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let loaded = fx.load(&link).unwrap();
    assert_eq!(loaded.path, Some(fx.canonical(&target)));
    assert_ne!(loaded.path, Some(link));
}

#[test]
fn symlink_checks_apply_to_the_target() {
    let fx = Fixture::new();
    let target = fx.write("real/c.toml", FULL);
    fs::set_permissions(&target, fs::Permissions::from_mode(0o666)).unwrap();
    let link = fx.path("link.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = fx.load_err(&link);
    assert!(
        matches!(&err, ConfigError::Writable { path, .. } if *path == fx.canonical(&target)),
        "{err:?}"
    );
}

#[test]
fn oversized_file_is_refused() {
    let fx = Fixture::new();
    let mut text = String::from("[storage]\n");
    while text.len() <= MAX_CONFIG_BYTES as usize {
        text.push_str("# padding padding padding padding padding padding\n");
    }
    let file = fx.write("big.toml", &text);
    let err = fx.load_err(&file);
    assert!(
        matches!(err, ConfigError::TooLarge { size, limit: MAX_CONFIG_BYTES, .. } if size == text.len() as u64),
        "{err:?}"
    );
}

#[test]
fn file_of_exactly_the_limit_is_accepted() {
    let fx = Fixture::new();
    let mut text = "#".repeat(MAX_CONFIG_BYTES as usize - 1);
    text.push('\n');
    let file = fx.write("edge.toml", &text);
    fx.load(&file).unwrap();
}

#[test]
fn directory_is_refused() {
    let fx = Fixture::new();
    let dir = fx.path("cfgdir");
    fs::create_dir(&dir).unwrap();
    let err = fx.load_err(&dir);
    assert!(
        matches!(
            err,
            ConfigError::NotRegular {
                kind: "directory",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn fifo_is_refused_without_blocking() {
    let fx = Fixture::new();
    let fifo = fx.path("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipping: mkfifo unavailable");
        return;
    }
    fs::set_permissions(&fifo, fs::Permissions::from_mode(0o600)).unwrap();
    let err = fx.load_err(&fifo);
    assert!(
        matches!(err, ConfigError::NotRegular { kind: "fifo", .. }),
        "{err:?}"
    );
}

#[test]
fn non_utf8_is_refused_with_line() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", b"[storage]\n# caf\xe9\n");
    let err = fx.load_err(&file);
    assert!(
        matches!(err, ConfigError::NotUtf8 { line: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("not valid UTF-8"), "{err}");
}

#[test]
fn fingerprint_is_sha256_of_bytes_and_tracks_content() {
    let fx = Fixture::new();
    let file = fx.write("c.toml", "[profiles.a]\n");
    let first = fx.load(&file).unwrap().fingerprint;
    assert_eq!(first.len(), 64);
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(fx.load(&file).unwrap().fingerprint, first, "stable");

    // A comment changes nothing semantically but is a different file.
    fx.write("c.toml", "[profiles.a]\n# edited\n");
    let second = fx.load(&file).unwrap().fingerprint;
    assert_ne!(first, second);
    assert_ne!(second, Loaded::builtin().fingerprint);
}

// ---- placement (SR-2) ----

fn loaded_from(fx: &Fixture, name: &str) -> Loaded {
    let file = fx.write(name, "[profiles.default]\n");
    fx.load(&file).unwrap()
}

#[test]
fn config_beneath_workspace_is_refused() {
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "w/sub/cfg.toml");
    let profile = loaded.config.profile("default").unwrap();
    let err = check_not_mounted(&loaded, profile, &fx.path("w")).unwrap_err();
    assert!(
        matches!(&err, ConfigError::BeneathWorkspace { workspace, .. } if *workspace == fx.canonical(&fx.path("w"))),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("lies beneath the workspace"), "{msg}");
    assert!(msg.contains("move it outside"), "{msg}");
}

#[test]
fn a_config_in_the_default_place_beneath_the_workspace_gets_advice_that_helps() {
    // The workspace is the home directory: "move it to
    // ~/.config/lazaret/config.toml" would name where it already is.
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "home/.config/lazaret/config.toml");
    let profile = loaded.config.profile("default").unwrap();
    let msg = check_not_mounted(&loaded, profile, &fx.path("home"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("run Lazaret in a project directory"), "{msg}");
    assert!(!msg.contains("move it outside"), "{msg}");
}

#[test]
fn workspace_given_through_symlink_is_still_detected() {
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "w/cfg.toml");
    let alias = fx.path("alias");
    std::os::unix::fs::symlink(fx.path("w"), &alias).unwrap();
    let profile = loaded.config.profile("default").unwrap();
    let err = check_not_mounted(&loaded, profile, &alias).unwrap_err();
    assert!(
        matches!(err, ConfigError::BeneathWorkspace { .. }),
        "{err:?}"
    );
}

#[test]
fn config_equal_to_workspace_path_is_refused() {
    // Mounting a single file as the workspace is odd, but still a mount.
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "cfg.toml");
    let profile = loaded.config.profile("default").unwrap();
    let err = check_not_mounted(&loaded, profile, &fx.path("cfg.toml")).unwrap_err();
    assert!(
        matches!(err, ConfigError::BeneathWorkspace { .. }),
        "{err:?}"
    );
}

#[test]
fn config_beside_workspace_is_accepted() {
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "w2/cfg.toml");
    fs::create_dir(fx.path("w")).unwrap();
    let profile = loaded.config.profile("default").unwrap();
    check_not_mounted(&loaded, profile, &fx.path("w")).unwrap();
}

#[test]
fn config_beneath_volume_host_is_refused() {
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "shared/lazaret/cfg.toml");
    fs::create_dir(fx.path("w")).unwrap();
    let mut profile = Profile::default();
    profile.volumes.push(Volume {
        host: fx.path("other"),
        sandbox: "/other".into(),
        read_only: true,
        git_sentry: true,
    });
    profile.volumes.push(Volume {
        host: fx.path("shared"),
        sandbox: "/shared".into(),
        read_only: true,
        git_sentry: true,
    });
    let err = check_not_mounted(&loaded, &profile, &fx.path("w")).unwrap_err();
    assert!(
        matches!(&err, ConfigError::BeneathVolume { host, sandbox, .. }
            if *host == fx.canonical(&fx.path("shared")) && sandbox == "/shared"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("mounted into the sandbox at /shared"),
        "{err}"
    );
}

#[test]
fn missing_volume_host_behind_symlink_is_resolved() {
    let fx = Fixture::new();
    let loaded = loaded_from(&fx, "conf/cfg.toml");
    fs::create_dir(fx.path("w")).unwrap();
    std::os::unix::fs::symlink(fx.path("conf"), fx.path("link")).unwrap();
    let mut profile = Profile::default();
    // `link` exists (-> conf); `link/..` is not used, only the prefix is.
    profile.volumes.push(Volume {
        host: fx.path("link"),
        sandbox: "/c".into(),
        read_only: true,
        git_sentry: true,
    });
    let err = check_not_mounted(&loaded, &profile, &fx.path("w")).unwrap_err();
    assert!(matches!(err, ConfigError::BeneathVolume { .. }), "{err:?}");

    // A host that does not exist yet, beneath nothing relevant, passes.
    profile.volumes[0].host = fx.path("not-yet/deeper");
    check_not_mounted(&loaded, &profile, &fx.path("w")).unwrap();
}

#[test]
fn builtin_config_is_never_mounted() {
    let fx = Fixture::new();
    let loaded = Loaded::builtin();
    check_not_mounted(&loaded, &Profile::default(), fx.dir.path()).unwrap();
}

#[test]
fn protected_paths_are_workspace_relative() {
    for (bad, want) in [
        ("/etc", Invalid::NotRelative("/etc".into())),
        ("a/../b", Invalid::ParentComponent("a/../b".into())),
        ("a//b", Invalid::NotNormalized("a//b".into())),
    ] {
        let fx = Fixture::new();
        let text = format!("[profiles.p]\nprotected_paths = [\n  \".husky\",\n  \"{bad}\",\n]\n");
        let file = fx.write("c.toml", &text);
        let reason = assert_invalid(
            &fx.load_err(&file),
            &fx.canonical(&file),
            4,
            "profiles.p.protected_paths[1]",
        );
        assert_eq!(reason, want, "{bad}");
    }
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.p]\nprotected_paths = [\".husky\", \"tools/hooks\"]\n",
    );
    let loaded = fx.load(&file).unwrap();
    assert_eq!(
        loaded.config.profiles["p"].protected_paths,
        [".husky", "tools/hooks"]
    );
}

#[test]
fn git_identity_is_one_bounded_line() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.p.git_identity]\nname = \"Agent\"\nemail = \"a\\nb\"\n",
    );
    let reason = assert_invalid(
        &fx.load_err(&file),
        &fx.canonical(&file),
        3,
        "profiles.p.git_identity.email",
    );
    assert_eq!(reason, Invalid::GitIdentity);
    let file = fx.write(
        "d.toml",
        "[profiles.p.git_identity]\nfrom_host = false\nname = \"Agent\"\n",
    );
    let loaded = fx.load(&file).unwrap();
    let id = &loaded.config.profiles["p"].git_identity;
    assert!(!id.from_host);
    assert_eq!(id.name.as_deref(), Some("Agent"));
    assert_eq!(id.email, None);
    assert!(loaded.config.profiles["default"].git_identity.from_host);
}

// ---- limits ----

#[test]
fn limits_parse_and_default() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.default.limits]\nmemory = \"2GiB\"\nprocesses = 256\nignored_state_size = \"unlimited\"\n",
    );
    let config = fx.load(&file).unwrap().config;
    let limits = &config.profile("default").unwrap().limits;
    assert_eq!(limits.memory_bytes(), Some(2 << 30));
    assert_eq!(limits.processes, 256);
    assert_eq!(limits.ignored_state_bytes(), None);
    assert_eq!(
        limits.anchor_bytes(),
        crate::parse_size(crate::limits::DEFAULT_ANCHOR_SIZE).unwrap()
    );
}

#[test]
fn malformed_limit_sizes_name_file_line_and_key() {
    let fx = Fixture::new();
    for (body, line, key) in [
        ("memory = \"4 GB\"", 3, "profiles.default.limits.memory"),
        ("memory = \"512MiB\"", 3, "profiles.default.limits.memory"),
        ("processes = 2", 3, "profiles.default.limits.processes"),
        (
            "ignored_state_size = \"huge\"",
            3,
            "profiles.default.limits.ignored_state_size",
        ),
        (
            "anchor_size = \"1.5GiB\"",
            3,
            "profiles.default.limits.anchor_size",
        ),
    ] {
        let file = fx.write(
            "c.toml",
            format!("[profiles.default]\n[profiles.default.limits]\n{body}\n"),
        );
        let err = fx.load_err(&file);
        assert_invalid(&err, &fx.canonical(&file), line, key);
    }
    // A number where a size string belongs is a type error at its line.
    let file = fx.write("c.toml", "[profiles.default.limits]\n\nmemory = 4\n");
    let err = fx.load_err(&file);
    assert_parse_error(
        &err,
        &fx.canonical(&file),
        3,
        &["profiles.default.limits.memory"],
    );
    let file = fx.write("c.toml", "[profiles.default.limits]\nmemroy = \"4GiB\"\n");
    let err = fx.load_err(&file);
    assert_parse_error(&err, &fx.canonical(&file), 2, &["memroy"]);
}

// ---- host overlap (issue 26, item 6) ----

/// A home with `src/app` (the workspace), `src/app2`, `data`, the Storage
/// Root and Lazaret's programs; `places` for a run in `src/app`.
fn overlap_home(fx: &Fixture) -> HostPlaces {
    for d in [
        "src/app/.git",
        "src/app2",
        "data",
        "share/lazaret",
        "bin",
        "ca",
        "conf",
    ] {
        fs::create_dir_all(fx.path(d)).unwrap();
    }
    HostPlaces {
        workspace: fx.canonical(&fx.path("src/app")),
        git_dirs: vec![],
        storage_root: fx.path("share/lazaret"),
        default_config: Some(fx.path(".config/lazaret/config.toml")),
        programs: Some(fx.path("bin")),
    }
}

/// Loads `body` (after a first line, so keys sit on known lines) as
/// `conf/c.toml` and checks it against `places`.
fn overlap_check(fx: &Fixture, body: &str, places: &HostPlaces) -> Result<(), ConfigError> {
    let file = fx.write("conf/c.toml", format!("[profiles.p]\n{body}"));
    let loaded = fx.load(&file).unwrap();
    check_host_overlap(&loaded, "p", places)
}

fn vol(host: &Path, read_only: bool) -> String {
    format!(
        "[[profiles.p.volumes]]\nhost = \"{}\"\nsandbox = \"/v{}\"\nread_only = {read_only}\n",
        host.display(),
        host.as_os_str().len()
    )
}

#[test]
fn a_volume_over_the_workspace_its_ancestors_or_inside_it_is_refused_with_its_line() {
    let fx = Fixture::new();
    let places = overlap_home(&fx);
    let file = fx.canonical(&fx.path("conf")).join("c.toml");
    let ws = places.workspace.display().to_string();
    for (host, read_only, relation) in [
        (fx.path("src"), true, "contains"),
        (fx.path("src"), false, "contains"),
        (fx.path("src/app"), false, "is"),
        (fx.path("src/app/.git"), false, "lies inside"),
        (fx.path("src/app/docs"), true, "lies inside"),
        (PathBuf::from("/"), true, "contains"),
    ] {
        let err = overlap_check(&fx, &vol(&host, read_only), &places).unwrap_err();
        let reason = assert_invalid(&err, &file, 3, "profiles.p.volumes[0].host");
        assert!(
            matches!(&reason, Invalid::VolumeOverlap { overlap, .. }
                if overlap.starts_with(&format!("{relation} the workspace {ws}: "))),
            "{}: {reason:?}",
            host.display()
        );
        assert!(err.to_string().contains("past Git Sentry"), "{err}");
    }
    // Beside it, and a second volume that is fine before a bad one.
    overlap_check(&fx, &vol(&fx.path("src/app2"), false), &places).unwrap();
    let body = format!(
        "{}{}",
        vol(&fx.path("data"), false),
        vol(&fx.path("src"), true)
    );
    let err = overlap_check(&fx, &body, &places).unwrap_err();
    assert_invalid(&err, &file, 7, "profiles.p.volumes[1].host");
}

#[test]
fn a_volume_over_a_git_directory_the_workspace_uses_or_the_storage_root_is_refused() {
    let fx = Fixture::new();
    let mut places = overlap_home(&fx);
    fs::create_dir_all(fx.path("main/.git/worktrees/app")).unwrap();
    places.git_dirs = vec![fx.path("main/.git")];
    for (host, what) in [
        ("main", "the Git directory"),
        ("main/.git/objects", "the Git directory"),
        ("share", "the Storage Root"),
        ("share/lazaret/profiles/p/shared", "the Storage Root"),
    ] {
        let err = overlap_check(&fx, &vol(&fx.path(host), true), &places).unwrap_err();
        let ConfigError::Invalid {
            reason: Invalid::VolumeOverlap { overlap, .. },
            ..
        } = &err
        else {
            panic!("{host}: {err:?}");
        };
        assert!(overlap.contains(&format!(" {what} ")), "{host}: {err}");
    }
}

#[test]
fn a_writable_volume_over_the_configuration_or_lazarets_programs_is_refused() {
    let fx = Fixture::new();
    let places = overlap_home(&fx);
    // The default configuration file need not exist: a writable volume
    // over its directory could create it.
    for host in [".config", "bin"] {
        let err = overlap_check(&fx, &vol(&fx.path(host), false), &places).unwrap_err();
        assert!(
            matches!(
                &err,
                ConfigError::Invalid {
                    reason: Invalid::VolumeOverlap { .. },
                    ..
                }
            ),
            "{host}: {err:?}"
        );
        assert!(err.to_string().contains("read_only = true"), "{err}");
        overlap_check(&fx, &vol(&fx.path(host), true), &places).unwrap();
    }
}

#[test]
fn a_read_only_volume_inside_a_writable_one_is_refused() {
    let fx = Fixture::new();
    let places = overlap_home(&fx);
    fs::create_dir_all(fx.path("data/sub")).unwrap();
    let body = format!(
        "{}{}",
        vol(&fx.path("data"), false),
        vol(&fx.path("data/sub"), true)
    );
    let err = overlap_check(&fx, &body, &places).unwrap_err();
    let file = fx.canonical(&fx.path("conf")).join("c.toml");
    let reason = assert_invalid(&err, &file, 7, "profiles.p.volumes[1].host");
    assert!(
        matches!(reason, Invalid::ReadOnlyInWritable { other: 0, .. }),
        "{reason:?}"
    );
    // The other way round is a writable corner of a read-only volume.
    let body = format!(
        "{}{}",
        vol(&fx.path("data"), true),
        vol(&fx.path("data/sub"), false)
    );
    overlap_check(&fx, &body, &places).unwrap();
}

#[test]
fn a_host_ca_file_where_a_sandbox_can_write_is_refused() {
    let fx = Fixture::new();
    let places = overlap_home(&fx);
    let file = fx.canonical(&fx.path("conf")).join("c.toml");
    let ca = |p: &Path| format!("trust_host_ca = true\nhost_ca_file = \"{}\"\n", p.display());
    for (at, extra, place) in [
        ("src/app/ca.pem", String::new(), "the workspace"),
        ("share/lazaret/ca.pem", String::new(), "the Storage Root"),
        ("data/ca.pem", vol(&fx.path("data"), true), "the host path"),
    ] {
        let err = overlap_check(&fx, &format!("{}{extra}", ca(&fx.path(at))), &places).unwrap_err();
        let reason = assert_invalid(&err, &file, 3, "profiles.p.host_ca_file");
        assert!(
            matches!(&reason, Invalid::HostCaPlace { place: p, .. } if p.contains(place)),
            "{at}: {reason:?}"
        );
    }
    overlap_check(&fx, &ca(&fx.path("ca/ca.pem")), &places).unwrap();
    // Not read without trust_host_ca: not checked either.
    let body = format!(
        "host_ca_file = \"{}\"\n",
        fx.path("src/app/x.pem").display()
    );
    overlap_check(&fx, &body, &places).unwrap();
}

#[test]
fn trailing_options_need_trailing_args_and_a_name() {
    let fx = Fixture::new();
    for (rule, key, want) in [
        (
            "trailing_options = [\"--all\"]",
            "profiles.p.escalation.auto_approve[0].trailing_options",
            Invalid::OptionsWithoutTrailing,
        ),
        (
            "trailing_args = true\ntrailing_options = [\"--all\", \"\"]",
            "profiles.p.escalation.auto_approve[0].trailing_options[1]",
            Invalid::EmptyOption,
        ),
    ] {
        let file = fx.write(
            "c.toml",
            format!("[profiles.p]\n[[profiles.p.escalation.auto_approve]]\nargv = [\"git\", \"fetch\"]\n{rule}\n"),
        );
        let err = fx.load_err(&file);
        let ConfigError::Invalid {
            key: k,
            reason,
            line,
            ..
        } = &err
        else {
            panic!("{err:?}");
        };
        assert_eq!((k.as_str(), reason), (key, &want), "{err}");
        assert!(line.is_some(), "{err}");
    }
    let file = fx.write(
        "c.toml",
        "[[profiles.p.escalation.auto_approve]]\nargv = [\"git\", \"fetch\"]\ntrailing_args = true\ntrailing_options = [\"--prune\"]\n",
    );
    let rule = &fx.load(&file).unwrap().config.profiles["p"]
        .escalation
        .auto_approve[0];
    assert_eq!(rule.trailing_options, ["--prune"]);
}

#[test]
fn escalation_pass_env_takes_names_only_and_errors_name_the_entry() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.p.escalation]\npass_env = [\"SSH_AUTH_SOCK\", \"GPG_AGENT_INFO\"]\n",
    );
    let p = &fx.load(&file).unwrap().config.profiles["p"];
    assert_eq!(p.escalation.pass_env, ["SSH_AUTH_SOCK", "GPG_AGENT_INFO"]);
    assert!(
        p.pass_env.is_empty(),
        "the session's pass_env is another key"
    );
    for (list, want) in [
        (
            "[\"SSH_AUTH_SOCK\", \"A=b\"]",
            Invalid::EnvNameEquals("A=b".into()),
        ),
        ("[\"SSH_AUTH_SOCK\", \"\"]", Invalid::EmptyEnvName),
        (
            "[\"SSH_AUTH_SOCK\", \"LAZARET_ESCALATION\"]",
            Invalid::LazaretEnvName("LAZARET_ESCALATION".into()),
        ),
    ] {
        let file = fx.write(
            "c.toml",
            format!("[profiles.p]\n\n[profiles.p.escalation]\npass_env = {list}\n"),
        );
        let err = fx.load_err(&file);
        let reason = assert_invalid(&err, &file, 4, "profiles.p.escalation.pass_env[1]");
        assert_eq!(reason, want, "{err}");
    }
    // A value is not a name: a table is refused by the schema.
    let file = fx.write(
        "c.toml",
        "[profiles.p.escalation]\npass_env = { SSH_AUTH_SOCK = \"/tmp/x\" }\n",
    );
    assert!(fx.load(&file).is_err());
}

#[test]
fn ports_are_loaded_and_refused_by_file_line_and_key() {
    let fx = Fixture::new();
    let file = fx.write(
        "ok.toml",
        "[profiles.web]\nports = [\"8080:3000\", \"0.0.0.0:1455:1455\"]\n",
    );
    let loaded = fx.load(&file).unwrap();
    let web = loaded.config.profile("web").unwrap();
    let parsed = crate::parse_ports(&web.ports).unwrap();
    assert_eq!(parsed[0].to_string(), "127.0.0.1:8080:3000");
    assert_eq!(parsed[1].to_string(), "0.0.0.0:1455:1455");

    for (text, line, key, says) in [
        (
            "[profiles.p]\nports = [\n  \"8080:80\",\n  \"0:80\",\n]\n",
            4,
            "profiles.p.ports[1]",
            "host port",
        ),
        (
            "[profiles.p]\nports = [\"70000:80\"]\n",
            2,
            "profiles.p.ports[0]",
            "1 to 65535",
        ),
        (
            "[profiles.p]\nports = [\"web\"]\n",
            2,
            "profiles.p.ports[0]",
            "HOST_PORT:SANDBOX_PORT",
        ),
        (
            "[profiles.p]\nports = [\"8080:80\", \"8080:81\"]\n",
            2,
            "profiles.p.ports[1]",
            "ports[0]",
        ),
        (
            "[profiles.p]\nports = [\"8080:80\"]\n[profiles.p.network]\nmode = \"none\"\n",
            2,
            "profiles.p.ports",
            "network.mode",
        ),
    ] {
        let file = fx.write("bad.toml", text);
        let err = fx.load_err(&file);
        assert_invalid(&err, &fx.canonical(&file), line, key);
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn keep_alive_and_detach_on_hangup_are_read_and_a_bad_duration_names_file_line_and_key() {
    let fx = Fixture::new();
    let file = fx.write(
        "c.toml",
        "[profiles.default]\nkeep_alive = \"10m\"\ndetach_on_hangup = true\n",
    );
    let loaded = fx.load(&file).unwrap();
    let p = loaded.config.profile("default").unwrap();
    assert_eq!(p.keep_alive_ms(), Some(600_000));
    assert!(p.detach_on_hangup);
    for bad in ["10", "10 m", "1.5h", "8d", "169h", "m"] {
        let file = fx.write(
            "c.toml",
            format!("[profiles.default]\n\nkeep_alive = \"{bad}\"\n"),
        );
        let err = fx.load_err(&file);
        assert_invalid(&err, &fx.canonical(&file), 3, "profiles.default.keep_alive");
    }
}
