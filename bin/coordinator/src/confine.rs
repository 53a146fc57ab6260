//! The coordinator's confinement, applied once start-up is over (see
//! [`crate::confinement::coordinator`] for what it allows and why).
//!
//! By then the Runtime Supervisor and the Escalation Mailbox reader run
//! and the Domain socket is bound, so nothing after it starts a process
//! or opens anything beyond the Domain Root, the Storage Catalog and the
//! PTY devices. Landlock and seccomp bind the calling thread and what it
//! starts: this runs while the coordinator has one thread.

use crate::confinement::{self, PLACE_CATALOG, PLACE_DOMAIN_ROOT, PLACE_PTMX, PLACE_PTS};
use lazaret_catalog::{CATALOG_FILE, LOCK_FILE};
use lazaret_seccomp::ruleset::Place;
use lazaret_seccomp::ConfineError;
use rustix::fs::{Mode, OFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

const BINARY: &str = "lazaret-coordinator";

fn handle(p: &Path) -> Result<OwnedFd, ConfineError> {
    rustix::fs::open(p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
        ConfineError::Sys {
            what: "open a landlock place",
            source: std::io::Error::other(format!("{}: {e}", p.display())),
        }
    })
}

/// Confines this process: `domain_root` read-write, the Storage Catalog
/// of `catalog_root` (when the image is a catalogued one), the PTY
/// devices; no execute, no network, the coordinator's seccomp allow-list.
/// Returns what of its landlock rules this kernel enforces (for the log).
pub fn confine(domain_root: &Path, catalog_root: Option<&Path>) -> Result<String, ConfineError> {
    // Asked before confining: the allow-list has no landlock calls.
    let avail = lazaret_seccomp::abi::Available::detect()?;
    // Decoded before confining: the allow-list need not allow decoding.
    let filters = lazaret_seccomp::filters(crate::policies::POLICIES, BINARY)?;
    let root = handle(domain_root)?;
    let ptmx = handle(Path::new("/dev/ptmx"))?;
    let pts = handle(Path::new("/dev/pts"))?;
    let mut catalog = Vec::new();
    if let Some(c) = catalog_root {
        for f in [CATALOG_FILE, LOCK_FILE] {
            if let Ok(fd) = handle(&c.join(f)) {
                catalog.push(fd);
            }
        }
    }
    let mut places = vec![
        Place {
            place: PLACE_DOMAIN_ROOT,
            fd: root.as_fd(),
        },
        Place {
            place: PLACE_PTMX,
            fd: ptmx.as_fd(),
        },
        Place {
            place: PLACE_PTS,
            fd: pts.as_fd(),
        },
    ];
    places.extend(catalog.iter().map(|fd| Place {
        place: PLACE_CATALOG,
        fd: fd.as_fd(),
    }));
    let conf = confinement::coordinator();
    conf.apply(&places, &filters)?;
    Ok(conf.on_kernel(&avail).unwrap_or_default())
}
