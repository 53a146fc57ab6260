//! [`Confinement`]: one binary's authority, applied and printed from the
//! same data.

use crate::caps::{self, Capability};
use crate::ruleset::{fs_rights, net_rights, Landlock, Place, Scoping};
use crate::{BpfProgram, ConfineError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Whether the binary confines itself.
#[derive(Debug, Clone)]
pub enum Status {
    /// Landlock and/or seccomp as described.
    Confined,
    /// It drops what it can (see the other fields) but cannot confine
    /// itself, for this reason.
    Unconfined { reason: &'static str },
}

/// The capabilities a binary ends with.
#[derive(Debug, Clone)]
pub enum Capabilities {
    /// Only these, in every set; all others leave the bounding set too.
    Keep(Vec<Capability>),
    /// It does not change its capabilities; why, and what it has.
    Unchanged(&'static str),
}

/// What one binary of the suite may do.
#[derive(Debug, Clone)]
pub struct Confinement {
    pub binary: &'static str,
    /// Who starts it, as which user, where.
    pub runs_as: &'static str,
    pub status: Status,
    /// The namespaces it runs in (and joins).
    pub namespaces: &'static str,
    /// Inherited descriptors it closes, or `None`.
    pub closes_fds: Option<&'static str>,
    pub no_new_privs: bool,
    pub not_dumpable: bool,
    pub capabilities: Capabilities,
    pub landlock: Option<Landlock>,
    /// Whether it installs its policy from `seccomp/policies/`.
    pub seccomp: bool,
    /// Anything else a reviewer must know, printed as is.
    pub notes: Vec<&'static str>,
}

impl Confinement {
    /// Capabilities, `no_new_privs`, not dumpable, landlock (each rule's
    /// place bound to the handles of that name in `places`), then the
    /// seccomp `filters` (from [`crate::filters`], decoded beforehand).
    /// Descriptors are the caller's to close ([`crate::process`]), before
    /// it opens the handles.
    pub fn apply(
        &self,
        places: &[Place<'_>],
        filters: &[(&'static str, BpfProgram)],
    ) -> Result<(), ConfineError> {
        if let Capabilities::Keep(keep) = &self.capabilities {
            caps::keep_only(keep)?;
        }
        if self.no_new_privs {
            crate::process::no_new_privs()?;
        }
        if self.not_dumpable {
            crate::process::not_dumpable()?;
        }
        if let Some(l) = &self.landlock {
            l.restrict_self(places)?;
        }
        if self.seccomp {
            if filters.is_empty() {
                return Err(ConfineError::NoPolicy {
                    binary: self.binary,
                    arch: std::env::consts::ARCH,
                });
            }
            crate::install(filters)?;
        }
        Ok(())
    }

    /// The text `--print-confinement` prints: stable across machines (no
    /// run-time paths), one `key: value` line per aspect at the margin,
    /// details indented beneath.
    pub fn print(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "binary: {}", self.binary);
        let _ = writeln!(s, "runs as: {}", self.runs_as);
        let _ = writeln!(
            s,
            "confined: {}",
            match self.status {
                Status::Confined => "yes",
                Status::Unconfined { .. } => "no",
            }
        );
        let _ = writeln!(s, "namespaces: {}", self.namespaces);
        let mut process = Vec::new();
        if let Some(f) = self.closes_fds {
            process.push(format!("inherited descriptors closed but {f}"));
        }
        if self.no_new_privs {
            process.push("no_new_privs".into());
        }
        if self.not_dumpable {
            process.push("not dumpable".into());
        }
        if process.is_empty() {
            process.push("as started".into());
        }
        let _ = writeln!(s, "process: {}", process.join("; "));
        match &self.capabilities {
            Capabilities::Keep(k) if k.is_empty() => {
                let _ = writeln!(s, "capabilities: none (effective, permitted, inheritable and ambient sets empty; the bounding set too where CAP_SETPCAP allows)");
            }
            Capabilities::Keep(k) => {
                let names: Vec<&str> = k.iter().map(|c| c.name).collect();
                let _ = writeln!(
                    s,
                    "capabilities: {} only (effective, permitted, bounding); all others dropped, inheritable and ambient empty",
                    names.join(", ")
                );
            }
            Capabilities::Unchanged(why) => {
                let _ = writeln!(s, "capabilities: unchanged: {why}");
            }
        }
        match &self.landlock {
            None => {
                let _ = writeln!(s, "landlock: none");
            }
            Some(l) => print_landlock(&mut s, l),
        }
        if self.seccomp {
            print_seccomp(&mut s, self.binary);
        } else {
            let _ = writeln!(s, "seccomp: none");
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if let Status::Unconfined { reason } = self.status {
            let _ = writeln!(s, "reason: {reason}");
        }
        s
    }
}

fn print_landlock(s: &mut String, l: &Landlock) {
    let places: Vec<&str> = l.rules.iter().map(|r| r.place).collect();
    let _ = writeln!(
        s,
        "landlock: (hard requirement ABI {}) {} place{}: {}",
        l.abi as i32,
        places.len(),
        if places.len() == 1 { "" } else { "s" },
        places.join("; ")
    );
    let _ = writeln!(s, "  handled fs: {}", fs_rights(l.fs));
    let _ = writeln!(
        s,
        "  handled net: {}",
        if l.net.is_empty() {
            "none".to_string()
        } else {
            format!("{} (denied)", net_rights(l.net))
        }
    );
    let _ = writeln!(
        s,
        "  scoped: {}",
        match l.scoping {
            Scoping::None => "nothing",
            Scoping::BestEffort =>
                "abstract unix sockets and signals outside the domain (where the kernel has ABI 6)",
            Scoping::Required => "abstract unix sockets and signals outside the domain",
        }
    );
    for r in &l.rules {
        let _ = writeln!(
            s,
            "  allow beneath {}{}: {}",
            r.place,
            if r.required { "" } else { " (if present)" },
            fs_rights(r.access)
        );
    }
    for n in &l.notes {
        let _ = writeln!(s, "  {n}");
    }
}

#[derive(Deserialize)]
struct FilterJson {
    #[serde(alias = "default_action")]
    mismatch_action: serde_json::Value,
    #[serde(alias = "filter_action")]
    match_action: serde_json::Value,
    filter: Vec<RuleJson>,
}

#[derive(Deserialize)]
struct RuleJson {
    syscall: String,
    #[serde(default)]
    args: Vec<CondJson>,
}

#[derive(Deserialize)]
struct CondJson {
    index: u8,
    op: serde_json::Value,
    val: u64,
    comment: Option<String>,
}

fn action(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

fn condition(c: &CondJson) -> String {
    let op = match &c.op {
        serde_json::Value::String(o) => match o.as_str() {
            "eq" => "==".to_string(),
            "ne" => "!=".to_string(),
            "lt" => "<".to_string(),
            "le" => "<=".to_string(),
            "gt" => ">".to_string(),
            "ge" => ">=".to_string(),
            o => o.to_string(),
        },
        serde_json::Value::Object(m) => match m.get("masked_eq") {
            Some(mask) => format!("& {mask} =="),
            None => action(&c.op),
        },
        other => other.to_string(),
    };
    match &c.comment {
        Some(k) => format!("arg{} {op} {} ({k})", c.index, c.val),
        None => format!("arg{} {op} {}", c.index, c.val),
    }
}

/// The policy's filters: actions, then the system calls sorted by name,
/// each with its argument conditions (alternatives one per line).
fn print_seccomp(s: &mut String, binary: &str) {
    let Some(p) = crate::policy(binary) else {
        let _ = writeln!(
            s,
            "seccomp: MISSING: no policy named {binary} in this build"
        );
        return;
    };
    let filters: BTreeMap<String, FilterJson> = match serde_json::from_str(p.json) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(s, "seccomp: UNREADABLE policy {}: {e}", p.file);
            return;
        }
    };
    let allowed: std::collections::BTreeSet<&str> = filters
        .get(binary)
        .map(|f| f.filter.iter().map(|r| r.syscall.as_str()).collect())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "seccomp: {} system calls allowed, {} ({} filter{})",
        allowed.len(),
        p.file,
        filters.len(),
        if filters.len() == 1 { "" } else { "s" }
    );
    // Installation order, as build.rs compiles it.
    let mut names: Vec<&String> = filters.keys().collect();
    names.sort_by_key(|n| (n.as_str() == binary, (*n).clone()));
    for name in names {
        let f = &filters[name];
        let _ = writeln!(
            s,
            "  filter {name}: listed calls {}, any other call {}",
            action(&f.match_action),
            action(&f.mismatch_action)
        );
        let mut rules: Vec<&RuleJson> = f.filter.iter().collect();
        rules.sort_by(|a, b| a.syscall.cmp(&b.syscall));
        for r in rules {
            if r.args.is_empty() {
                let _ = writeln!(s, "    {}", r.syscall);
            } else {
                let conds: Vec<String> = r.args.iter().map(condition).collect();
                let _ = writeln!(s, "    {} if {}", r.syscall, conds.join(" and "));
            }
        }
    }
}
