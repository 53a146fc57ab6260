//! Landlock rulesets from typed rules.
//!
//! A [`Rule`] names a place ("the workspace") and the rights beneath it;
//! the binary binds each place to a handle it opened before confining
//! ([`Place`]). Printing uses the names, so a binary's printed confinement
//! is the same on every machine.

use crate::abi::{Available, Feature};
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

/// One landlock layer, written for the newest ABI whose rights it
/// handles ([`Landlock::abi`]) and cut down, feature by feature
/// ([`Feature`]), to the ABI this process may use
/// ([`crate::abi::Available`]): every right of that ABI is a hard
/// requirement, nothing newer is asked for, and no ABI at all (0) is an
/// error.
#[derive(Debug, Clone)]
pub struct Landlock {
    /// The newest ABI whose rights `fs` and `net` hold.
    pub abi: ABI,
    /// Handled (denied unless a rule allows) file system rights.
    pub fs: BitFlags<AccessFs>,
    /// Handled network rights: denied entirely, unless `connect_ports`.
    pub net: BitFlags<AccessNet>,
    /// Scope abstract unix sockets and signals to the domain (ABI 6).
    pub scoped: bool,
    pub rules: Vec<Rule>,
    /// Fail unless the kernel reports the ruleset fully enforced.
    pub require_full: bool,
    /// What the rules leave out or a later layer adds, printed as is.
    pub notes: Vec<&'static str>,
    /// For a feature whose loss on an older kernel seccomp does not cover
    /// (see [`crate::Confinement::below`]): what is lost, and why the
    /// binary still runs without it.
    pub below: Vec<(Feature, &'static str)>,
}

fn ll(abi: i32) -> impl Fn(&dyn std::fmt::Display) -> ConfineError {
    move |e| ConfineError::Landlock {
        abi,
        detail: e.to_string(),
    }
}

impl Landlock {
    /// The file system rights handled at `abi` (0 to 7...).
    pub fn fs_at(&self, abi: i32) -> BitFlags<AccessFs> {
        self.fs & AccessFs::from_all(ABI::from(abi.min(self.abi as i32)))
    }

    /// The ABI from which all of it is enforced.
    pub fn newest(&self) -> i32 {
        self.features()
            .iter()
            .map(|f| f.abi())
            .chain([self.abi as i32])
            .max()
            .unwrap_or(1)
    }

    /// The features this layer loses below their ABI.
    pub fn features(&self) -> Vec<Feature> {
        Feature::ALL
            .into_iter()
            .filter(|f| match f {
                Feature::Refer => self
                    .rules
                    .iter()
                    .any(|r| r.access.contains(AccessFs::Refer)),
                Feature::Truncate => self.fs.contains(AccessFs::Truncate),
                Feature::Tcp => !self.net.is_empty(),
                Feature::IoctlDev => self.fs.contains(AccessFs::IoctlDev),
                Feature::Scopes => self.scoped,
            })
            .collect()
    }

    /// Restricts this thread (and what it starts) to the rules, each
    /// place bound to the handles in `places` of the same name, at the
    /// ABI of this kernel (and [`crate::abi::TEST_CAP_ENV`]).
    pub fn restrict_self(&self, places: &[Place<'_>]) -> Result<(), ConfineError> {
        let avail = Available::detect()?;
        self.restrict_self_at(places, &avail)
    }

    fn restrict_self_at(
        &self,
        places: &[Place<'_>],
        avail: &Available,
    ) -> Result<(), ConfineError> {
        if let Some(why) = avail.missing() {
            return Err(ConfineError::NoLandlock(why));
        }
        let abi = avail.effective();
        let ll = ll(abi);
        let fs = self.fs_at(abi);
        let mut attr = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(fs)
            .map_err(|e| ll(&e))?;
        if !self.net.is_empty() && avail.has(Feature::Tcp) {
            attr = attr.handle_access(self.net).map_err(|e| ll(&e))?;
        }
        if self.scoped && avail.has(Feature::Scopes) {
            attr = attr.scope(Scope::from_all(ABI::V6)).map_err(|e| ll(&e))?;
        }
        let mut rs = attr.create().map_err(|e| ll(&e))?;
        for rule in &self.rules {
            let mut bound = false;
            let access = rule.access & fs;
            for p in places.iter().filter(|p| p.place == rule.place) {
                if !access.is_empty() {
                    rs = rs
                        .add_rule(PathBeneath::new(p.fd, access))
                        .map_err(|e| ll(&e))?;
                }
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
/// Below ABI 4 there is no TCP restriction to add, and the layer is left
/// out (the binary's description says so).
pub fn connect_only(ports: &[u16]) -> Result<(), ConfineError> {
    let avail = Available::detect()?;
    if let Some(why) = avail.missing() {
        return Err(ConfineError::NoLandlock(why));
    }
    if !avail.has(Feature::Tcp) {
        return Ok(());
    }
    let ll = ll(avail.effective());
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

/// The Network Sidecar's long-lived helpers' landlock (`lazaret-dns-filter`,
/// `lazaret-netpolicy watch`): no place at all, every file system and TCP
/// right of `abi` handled, so none is granted.
pub fn no_files_no_tcp(abi: ABI, opened_before: &'static str) -> Landlock {
    Landlock {
        abi,
        fs: AccessFs::from_all(abi),
        net: AccessNet::from_all(abi),
        scoped: true,
        rules: vec![],
        require_full: true,
        notes: vec![opened_before, "TCP: no bind, no connect"],
        below: vec![],
    }
}
