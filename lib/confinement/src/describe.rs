//! [`Confinement`]: one binary's authority, applied and printed from the
//! same data.

use crate::abi::{Available, Feature};
use crate::caps::{self, Capability};
use crate::ruleset::{fs_rights, net_rights, Landlock, Place};
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

/// A binary's reviewed seccomp policy, as its `confinement.rs` names it:
/// the file (relative to the workspace, for printing) and its text
/// (`include_str!` of the file beside it). Its crate's `build.rs` compiles
/// the same file to the BPF the binary installs.
#[derive(Debug, Clone, Copy)]
pub struct PolicySource {
    pub file: &'static str,
    pub json: &'static str,
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
    /// The seccomp policy it installs, if any.
    pub seccomp: Option<PolicySource>,
    /// Anything else a reviewer must know, printed as is.
    pub notes: Vec<&'static str>,
}

impl Confinement {
    /// A program of ours that runs inside the Agent Sandbox as the
    /// sandbox's own: what it holds is the sandbox's, so a filter on
    /// itself binds nothing the sandbox could not undo.
    pub fn inside_sandbox(
        binary: &'static str,
        runs_as: &'static str,
        reason: &'static str,
    ) -> Confinement {
        Confinement {
            binary,
            runs_as,
            status: Status::Unconfined { reason },
            namespaces: "the sandbox's (gVisor)",
            closes_fds: None,
            no_new_privs: false,
            not_dumpable: false,
            capabilities: Capabilities::Unchanged("the sandbox's root's, inside gVisor"),
            landlock: None,
            seccomp: None,
            notes: vec![],
        }
    }

    /// Capabilities, `no_new_privs`, not dumpable, landlock (each rule's
    /// place bound to the handles of that name in `places`), then the
    /// seccomp `filters` (from [`crate::filters`] on its crate's compiled
    /// policies, decoded beforehand).
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
        if self.seccomp.is_some() {
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
            Some(l) => {
                print_landlock(&mut s, l);
                self.print_below(&mut s, l);
            }
        }
        if let Some(p) = self.seccomp {
            print_seccomp(&mut s, self.binary, p);
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

    /// For `--print-confinement`: prints this confinement on stdout, then
    /// what of it this kernel enforces, and exits 0 (125 for a bad
    /// [`crate::abi::TEST_CAP_ENV`]).
    pub fn print_and_exit(&self) -> ! {
        print!("{}", self.print());
        match Available::detect() {
            Ok(a) => print!("{}", self.on_kernel(&a).unwrap_or_default()),
            Err(e) => {
                eprintln!("{}: {e}", self.binary);
                std::process::exit(125)
            }
        }
        std::process::exit(0)
    }

    /// [`Confinement::print`], then what of it this kernel enforces
    /// ([`Confinement::on_kernel`]).
    pub fn print_on_this_kernel(&self) -> String {
        let mut s = self.print();
        match Available::detect() {
            Ok(a) => s.push_str(&self.on_kernel(&a).unwrap_or_default()),
            Err(e) => {
                let _ = writeln!(s, "landlock on this kernel: {e}");
            }
        }
        s
    }

    /// What seccomp does about `f`, which landlock lacks below its ABI:
    /// `Ok(why it is covered)`, or `Err(what is left uncovered)`.
    pub fn below(&self, f: Feature) -> Result<String, Uncovered> {
        let allow = Allowed::of(self.binary, self.seccomp);
        match f {
            Feature::Refer => Ok("the kernel then refuses every rename and link across directories (EXDEV), even beneath the places whose rules allow them: stricter than the rules".into()),
            Feature::Truncate if !allow.any("truncate") && !allow.any("ftruncate") => Ok("covered by seccomp: neither truncate(2) nor ftruncate(2) is allowed (O_TRUNC needs write_file, which landlock grants beneath the places only)".into()),
            Feature::Truncate if !allow.any("truncate") => Ok("covered by seccomp: no truncate(2); ftruncate(2) and O_TRUNC need a descriptor open for writing, which landlock grants beneath the places only".into()),
            Feature::Truncate => Err(Uncovered::Truncate),
            Feature::Tcp if !allow.socket(libc::AF_INET) && !allow.socket(libc::AF_INET6) => Ok(format!("covered by seccomp: {}", allow.sockets())),
            Feature::Tcp => Err(Uncovered::Tcp),
            Feature::IoctlDev => match allow.ioctls() {
                Some(cmds) => Ok(format!("covered by seccomp: {cmds}")),
                None => Err(Uncovered::AnyIoctl),
            },
            Feature::Scopes => {
                let sockets = (!allow.socket(libc::AF_UNIX)).then(|| allow.sockets());
                let signals: Vec<&'static str> = SIGNAL_CALLS.iter().copied().filter(|c| allow.any(c)).collect();
                match (&sockets, signals.is_empty()) {
                    (Some(s), true) => Ok(format!("covered by seccomp: abstract unix sockets are ({s}); signals are (no system call that signals another process)")),
                    _ => Err(Uncovered::Scopes { sockets, signals }),
                }
            }
        }
    }

    /// The stable part about older kernels: what each feature's absence
    /// means, and the `older kernels:` line of the authority table.
    fn print_below(&self, s: &mut String, l: &Landlock) {
        let mut short = Vec::new();
        for f in l.features() {
            let why = self.below(f);
            let hand = l.below.iter().find(|(g, _)| *g == f).map(|(_, w)| *w);
            let line = match (&why, hand) {
                (Ok(w), None) => w.clone(),
                (Ok(w), Some(h)) => format!("{w}; {h}"),
                (Err(w), Some(h)) => format!("{w}: {h}"),
                (Err(w), None) => format!("{w}: UNEXPLAINED"),
            };
            let _ = writeln!(
                s,
                "  below ABI {}: {} {}; {line}",
                f.abi(),
                f.name(),
                if f == Feature::Refer {
                    "unavailable"
                } else {
                    "not enforced"
                }
            );
            short.push(format!(
                "{} below {}: {}",
                f.short(),
                f.abi(),
                match (f, &why) {
                    (Feature::Refer, _) => "refused (stricter)",
                    (_, Ok(_)) => "seccomp covers",
                    (_, Err(_)) => "partly uncovered",
                }
            ));
        }
        let _ = writeln!(
            s,
            "older kernels: runs from Landlock ABI 1 (refuses without Landlock){}{}",
            if short.is_empty() { "" } else { "; " },
            short.join("; ")
        );
    }

    /// What of its landlock layer is enforced on a kernel with `avail`,
    /// for `--print-confinement` (after [`Confinement::print`]) and
    /// `lazaret doctor`; `None` for a binary without landlock.
    pub fn on_kernel(&self, avail: &Available) -> Option<String> {
        let l = self.landlock.as_ref()?;
        let mut s = String::new();
        if let Some(why) = avail.missing() {
            let _ = writeln!(
                s,
                "landlock on this kernel: none ({why}): this binary refuses to run"
            );
            return Some(s);
        }
        let abi = avail.effective();
        let missing: Vec<Feature> = l
            .features()
            .into_iter()
            .filter(|f| !avail.has(*f))
            .collect();
        let _ = writeln!(
            s,
            "landlock on this kernel: {avail}: {}",
            if missing.is_empty() {
                format!(
                    "all of the above enforced (handled fs: {})",
                    fs_rights(l.fs_at(abi))
                )
            } else {
                format!("handled fs: {}", fs_rights(l.fs_at(abi)))
            }
        );
        for f in missing {
            let why = self.below(f).unwrap_or_else(|e| {
                let hand = l
                    .below
                    .iter()
                    .find(|(g, _)| *g == f)
                    .map_or("UNEXPLAINED", |(_, w)| w);
                format!("{e}: {hand}")
            });
            let _ = writeln!(
                s,
                "  {}: {} (kernel Landlock ABI {abi}{}, needs {}); {why}",
                f.name(),
                if f == Feature::Refer {
                    "unavailable"
                } else {
                    "not enforced"
                },
                if avail.capped() { " as capped" } else { "" },
                f.abi()
            );
        }
        Some(s)
    }
}

/// What seccomp leaves open of a landlock feature an older kernel lacks
/// ([`Confinement::below`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uncovered {
    #[error("seccomp allows truncate(2)")]
    Truncate,
    #[error("seccomp allows TCP sockets")]
    Tcp,
    #[error("seccomp allows ioctl(2) with any command")]
    AnyIoctl,
    /// Landlock's scopes, of which at least one half is open: `sockets`
    /// are the socket families seccomp allows, `None` when they include
    /// `AF_UNIX`; `signals` the calls that signal another process it
    /// allows.
    #[error("{}; {}", scope_sockets(sockets), scope_signals(signals))]
    Scopes {
        sockets: Option<String>,
        signals: Vec<&'static str>,
    },
}

fn scope_sockets(sockets: &Option<String>) -> String {
    match sockets {
        Some(s) => format!("covered by seccomp: abstract unix sockets are ({s})"),
        None => "abstract unix sockets are not (seccomp allows AF_UNIX sockets)".into(),
    }
}

fn scope_signals(signals: &[&str]) -> String {
    if signals.is_empty() {
        "signals are (no system call that signals another process)".into()
    } else {
        format!("signals are not (seccomp allows {})", signals.join(", "))
    }
}

/// The system calls that signal another process.
const SIGNAL_CALLS: &[&str] = &[
    "kill",
    "tkill",
    "tgkill",
    "pidfd_send_signal",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
];

/// A binary's allow-list, by system call: the alternatives' conditions.
struct Allowed(BTreeMap<String, Vec<Vec<CondJson>>>);

impl Allowed {
    fn of(binary: &str, policy: Option<PolicySource>) -> Allowed {
        let mut m: BTreeMap<String, Vec<Vec<CondJson>>> = BTreeMap::new();
        let filters: Option<BTreeMap<String, FilterJson>> =
            policy.and_then(|p| serde_json::from_str(p.json).ok());
        if let Some(f) = filters.and_then(|mut f| f.remove(binary)) {
            for r in f.filter {
                m.entry(r.syscall).or_default().push(r.args);
            }
        }
        Allowed(m)
    }

    fn any(&self, call: &str) -> bool {
        self.0.contains_key(call)
    }

    /// Whether some `socket` alternative admits `family`.
    fn socket(&self, family: i32) -> bool {
        self.0.get("socket").is_some_and(|alts| {
            alts.iter().any(|conds| {
                !conds
                    .iter()
                    .any(|c| c.index == 0 && op_is(&c.op, "eq") && c.val != family as u64)
            })
        })
    }

    /// "no socket(2)", or the families it admits.
    fn sockets(&self) -> String {
        match self.0.get("socket") {
            None => "no socket(2)".into(),
            Some(alts) => {
                let mut fams: Vec<String> = alts
                    .iter()
                    .filter_map(|conds| {
                        conds
                            .iter()
                            .find(|c| c.index == 0)
                            .map(|c| c.comment.clone().unwrap_or_else(|| c.val.to_string()))
                    })
                    .collect();
                fams.dedup();
                format!("socket(2) only for {}", fams.join(", "))
            }
        }
    }

    /// `None` when some alternative admits any command.
    fn ioctls(&self) -> Option<String> {
        let Some(alts) = self.0.get("ioctl") else {
            return Some("no ioctl(2)".into());
        };
        let mut cmds = Vec::new();
        for conds in alts {
            let c = conds.iter().find(|c| c.index == 1 && op_is(&c.op, "eq"))?;
            cmds.push(c.comment.clone().unwrap_or_else(|| c.val.to_string()));
        }
        Some(format!("ioctl(2) only with {}", cmds.join(", ")))
    }
}

fn op_is(op: &serde_json::Value, name: &str) -> bool {
    op.as_str() == Some(name)
}

fn print_landlock(s: &mut String, l: &Landlock) {
    let places: Vec<&str> = l.rules.iter().map(|r| r.place).collect();
    let _ = writeln!(
        s,
        "landlock: (ABI 1 or later; all of it from ABI {}) {} place{}: {}",
        l.newest(),
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
        if l.scoped {
            "abstract unix sockets and signals outside the domain"
        } else {
            "nothing"
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
fn print_seccomp(s: &mut String, binary: &str, p: PolicySource) {
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

#[cfg(test)]
mod tests {
    use super::Uncovered;

    #[test]
    fn open_scopes_name_each_half() {
        let e = Uncovered::Scopes {
            sockets: None,
            signals: vec![],
        };
        assert_eq!(e.to_string(), "abstract unix sockets are not (seccomp allows AF_UNIX sockets); signals are (no system call that signals another process)");
        let e = Uncovered::Scopes {
            sockets: Some("AF_INET".into()),
            signals: vec!["kill", "tgkill"],
        };
        assert_eq!(e.to_string(), "covered by seccomp: abstract unix sockets are (AF_INET); signals are not (seccomp allows kill, tgkill)");
    }
}
