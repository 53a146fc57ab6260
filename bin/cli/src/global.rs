//! The options that name a Domain's configuration: `--config`,
//! `--profile` and `--workspace`, accepted before the subcommand
//! (`lazaret --profile agent run`) and after it (`lazaret run --profile
//! agent`), defined once. A command that has no use for one of them
//! refuses it rather than ignore it.

use crate::error::CliError;
use std::path::{Path, PathBuf};

/// The profile used when `--profile` is not given.
pub const DEFAULT_PROFILE: &str = "default";

#[derive(clap::Args, Debug, Default)]
pub struct Global {
    /// Config file (default: $XDG_CONFIG_HOME/lazaret/config.toml, then ~/.config/lazaret/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Agent Profile from the config [default: default]
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Agent Workspace (default: the top level of the Git repository the
    /// current directory is in, else the current directory)
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// Which of the shared options a command uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uses {
    /// `--config`, `--profile` and `--workspace`: the command acts on one
    /// Domain.
    Domain,
    /// `--config` only: the command acts on the whole Storage Root or the
    /// machine.
    Config,
    /// `--config`, and `--profile` and `--workspace` as filters: the
    /// command lists the Domains of the Storage Root that match them.
    Filter,
    /// None of them.
    Nothing,
}

impl Global {
    pub fn profile(&self) -> &str {
        self.profile.as_deref().unwrap_or(DEFAULT_PROFILE)
    }

    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }

    /// Refuses the options `command` has no use for, naming them.
    pub fn check(&self, command: &str, uses: Uses) -> Result<(), CliError> {
        let names_domains = matches!(uses, Uses::Domain | Uses::Filter);
        let given = [
            ("--config", self.config.is_some(), uses == Uses::Nothing),
            ("--profile", self.profile.is_some(), !names_domains),
            ("--workspace", self.workspace.is_some(), !names_domains),
        ];
        let unused: Vec<&str> = given
            .iter()
            .filter(|(_, g, unused)| *g && *unused)
            .map(|(n, _, _)| *n)
            .collect();
        if unused.is_empty() {
            return Ok(());
        }
        let what = match uses {
            Uses::Domain | Uses::Filter => unreachable!("the command uses every option"),
            Uses::Config => "it acts on every Domain of the Storage Root, not on one",
            Uses::Nothing => "it reads no configuration",
        };
        Err(CliError::Usage(format!(
            "`lazaret {command}` does not take {}: {what}",
            unused.join(" or ")
        )))
    }

    /// Refuses `--profile` and `--workspace` beside `--domain`, which
    /// names the Domain on its own.
    pub fn check_domain_id(&self, domain: Option<&str>) -> Result<(), CliError> {
        if domain.is_some() && (self.profile.is_some() || self.workspace.is_some()) {
            return Err(CliError::Usage(
                "--domain names the Domain on its own: drop --profile and --workspace".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(config: bool, profile: bool, workspace: bool) -> Global {
        Global {
            config: config.then(|| "c".into()),
            profile: profile.then(|| "p".into()),
            workspace: workspace.then(|| "w".into()),
        }
    }

    #[test]
    fn unused_options_are_refused_by_name() {
        assert!(g(true, true, true).check("run", Uses::Domain).is_ok());
        assert!(g(true, false, false).check("doctor", Uses::Config).is_ok());
        let e = g(true, true, true).check("ps", Uses::Config);
        let msg = e.unwrap_err().to_string();
        assert!(msg.contains("--profile or --workspace"), "{msg}");
        assert!(!msg.contains("--config"), "{msg}");
        let msg = g(true, false, false)
            .check("completions", Uses::Nothing)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`lazaret completions` does not take --config"),
            "{msg}"
        );
        assert!(g(false, false, false).check("man", Uses::Nothing).is_ok());
        assert!(g(true, true, true)
            .check("state list", Uses::Filter)
            .is_ok());
        let e = g(true, true, true).check("df", Uses::Config);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("--profile or --workspace"));
    }

    #[test]
    fn a_domain_id_stands_alone() {
        assert!(g(true, false, false).check_domain_id(Some("x")).is_ok());
        assert!(g(false, true, false).check_domain_id(Some("x")).is_err());
        assert!(g(false, false, true).check_domain_id(Some("x")).is_err());
        assert!(g(false, true, true).check_domain_id(None).is_ok());
        assert_eq!(g(false, false, false).profile(), DEFAULT_PROFILE);
    }
}
