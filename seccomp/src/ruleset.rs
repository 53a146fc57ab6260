//! Landlock rulesets from typed rules.
//!
//! A [`Rule`] names a place ("the workspace") and the rights beneath it;
//! the binary binds each place to a handle it opened before confining
//! ([`Place`]). Printing uses the names, so a binary's printed confinement
//! is the same on every machine.

use crate::ConfineError;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::os::fd::BorrowedFd;

/// Rights beneath one place.
#[derive(Debug, Clone)]
pub struct Rule {
    /// How the place is printed, e.g. "the workspace".
    pub place: &'static str,
    pub access: BitFlags<AccessFs>,
    /// A required place must be bound at [`Landlock::restrict_self`]; an
    /// optional one (a file that may not exist) may be left out.
    pub required: bool,
}

/// A place bound to a handle (an `O_PATH` descriptor is enough).
pub struct Place<'a> {
    pub place: &'static str,
    pub fd: BorrowedFd<'a>,
}

/// How the scopes of ABI 6 (abstract unix sockets, signals) are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoping {
    None,
    /// Where the kernel has ABI 6.
    BestEffort,
    Required,
}

/// One landlock layer.
#[derive(Debug, Clone)]
pub struct Landlock {
    /// The ABI handling `fs` and `net` needs (a hard requirement).
    pub abi: ABI,
    /// Handled (denied unless a rule allows) file system rights.
    pub fs: BitFlags<AccessFs>,
    /// Handled network rights: denied entirely, unless `connect_ports`.
    pub net: BitFlags<AccessNet>,
    pub scoping: Scoping,
    pub rules: Vec<Rule>,
    /// Fail unless the kernel reports the ruleset fully enforced.
    pub require_full: bool,
    /// What the rules leave out or a later layer adds, printed as is.
    pub notes: Vec<&'static str>,
}

fn ll(abi: ABI) -> impl Fn(&dyn std::fmt::Display) -> ConfineError {
    move |e| ConfineError::Landlock {
        abi: abi as i32,
        detail: e.to_string(),
    }
}

impl Landlock {
    /// Restricts this thread (and what it starts) to the rules, each
    /// place bound to the handles in `places` of the same name.
    pub fn restrict_self(&self, places: &[Place<'_>]) -> Result<(), ConfineError> {
        let ll = ll(self.abi);
        let mut attr = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(self.fs)
            .map_err(|e| ll(&e))?;
        if !self.net.is_empty() {
            attr = attr.handle_access(self.net).map_err(|e| ll(&e))?;
        }
        attr = match self.scoping {
            Scoping::None => attr,
            Scoping::BestEffort => attr
                .set_compatibility(CompatLevel::BestEffort)
                .scope(Scope::from_all(ABI::V6))
                .map_err(|e| ll(&e))?
                .set_compatibility(CompatLevel::HardRequirement),
            Scoping::Required => attr.scope(Scope::from_all(ABI::V6)).map_err(|e| ll(&e))?,
        };
        let mut rs = attr.create().map_err(|e| ll(&e))?;
        for rule in &self.rules {
            let mut bound = false;
            for p in places.iter().filter(|p| p.place == rule.place) {
                rs = rs
                    .add_rule(PathBeneath::new(p.fd, rule.access))
                    .map_err(|e| ll(&e))?;
                bound = true;
            }
            if rule.required && !bound {
                return Err(ConfineError::MissingPlace(rule.place));
            }
        }
        if let Some(p) = places
            .iter()
            .find(|p| !self.rules.iter().any(|r| r.place == p.place))
        {
            return Err(ll(&format!("no rule for the place {:?}", p.place)));
        }
        let status = rs.restrict_self().map_err(|e| ll(&e))?;
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok(()),
            RulesetStatus::PartiallyEnforced if !self.require_full => Ok(()),
            s => Err(ll(&format!("the kernel enforced the ruleset only {s:?}"))),
        }
    }
}

/// A later layer: TCP connect only to `ports` (none: no TCP connect).
pub fn connect_only(ports: &[u16]) -> Result<(), ConfineError> {
    let ll = ll(ABI::V4);
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .map_err(|e| ll(&e))?
        .create()
        .map_err(|e| ll(&e))?;
    for p in ports {
        rs = rs
            .add_rule(NetPort::new(*p, AccessNet::ConnectTcp))
            .map_err(|e| ll(&e))?;
    }
    let status = rs.restrict_self().map_err(|e| ll(&e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(ll(&format!("ruleset only {:?}", status.ruleset)));
    }
    Ok(())
}

/// `ReadFile` → `read_file`.
pub(crate) fn snake<T: std::fmt::Debug>(v: T) -> String {
    let mut s = String::new();
    for (i, c) in format!("{v:?}").chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// File system rights as a stable, comma-separated list.
pub fn fs_rights(r: BitFlags<AccessFs>) -> String {
    r.iter().map(snake).collect::<Vec<_>>().join(", ")
}

/// Network rights as a stable, comma-separated list.
pub fn net_rights(r: BitFlags<AccessNet>) -> String {
    r.iter().map(snake).collect::<Vec<_>>().join(", ")
}
