//! `--scan-anchor` (run by `lazaret state`): lists the names in a State
//! Anchor's upper, which the sandbox wrote, from a clone in the Domain's
//! user namespace that confines itself first
//! (`lazaret-supervisor-scan`).

use lazaret_helpers::userns;
use lazaret_supervisor::exit;
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

/// The confinement of `--scan-anchor`'s clone
/// (`lazaret_supervisor::confinement::supervisor_scan`).
const SCAN_CONFINEMENT: &str = "lazaret-supervisor-scan";

/// The most bytes of a scan summary read back from the clone.
const MAX_SCAN_SUMMARY: u64 = 16 << 20;

/// Why the clone did not scan; its message goes back to the scan in the
/// summary's JSON.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: std::path::PathBuf,
        source: rustix::io::Errno,
    },
    #[error("cannot confine the scan: {0}")]
    Confine(lazaret_seccomp::ConfineError),
    /// Reading the upper or the lower.
    #[error("{0}")]
    Read(std::io::Error),
}

/// Confines the scanning clone: read beneath `upper` and `lower` only.
fn confine_scan(
    upper: &Path,
    lower: &Path,
    filters: &[(&'static str, lazaret_seccomp::BpfProgram)],
) -> Result<(), ScanError> {
    use lazaret_seccomp::ruleset::Place;
    use lazaret_supervisor::confinement::{PLACE_SCAN_LOWER, PLACE_SCAN_UPPER};
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    let open = |p: &Path| {
        rustix::fs::open(
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let up = open(upper).map_err(|source| ScanError::Open {
        path: upper.to_path_buf(),
        source,
    })?;
    let low = open(lower).ok();
    let mut places = vec![Place {
        place: PLACE_SCAN_UPPER,
        fd: up.as_fd(),
    }];
    if let Some(l) = &low {
        places.push(Place {
            place: PLACE_SCAN_LOWER,
            fd: l.as_fd(),
        });
    }
    lazaret_supervisor::confinement::supervisor_scan()
        .apply(&places, filters)
        .map_err(ScanError::Confine)
}

/// `lazaret-supervisor --scan-anchor PATH UPPER LOWER`: prints the JSON
/// summary of a State Anchor's upper (never file contents), scanned from
/// inside the mapped user namespace where its directories are readable.
pub(crate) fn scan_anchor(args: &[String]) -> i32 {
    let [path, upper, lower] = args else {
        lazaret_protocol::log_line!("lazaret-supervisor: --scan-anchor takes PATH UPPER LOWER");
        return exit::BAD_PLAN;
    };
    // A scan only answers its `lazaret`: killed with it (a `state reset`
    // interrupted while it scans), it must not go on holding the Domain
    // Root, which the next `state` command would find in use.
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
        || nix::unistd::getppid().as_raw() == 1
    {
        return exit::START_FAILED;
    }
    let Some(map) = crate::logged(userns::current_id_map()) else {
        return exit::START_FAILED;
    };
    let Some((r, w)) = crate::logged(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC))
    else {
        return exit::START_FAILED;
    };
    // Decoded here: the clone's allow-list need not allow decoding.
    let Some(filters) = crate::logged(lazaret_seccomp::filters(
        lazaret_supervisor::policies::POLICIES,
        SCAN_CONFINEMENT,
    )) else {
        return exit::START_FAILED;
    };
    let w_raw = w.as_raw_fd();
    // This process is single-threaded, so the clone may allocate.
    let child = userns::clone_mapped(&map, CloneFlags::empty(), || {
        // Dies with the scan, as the scan dies with its `lazaret`.
        // SAFETY: prctl with an integer argument; nothing else is touched.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        // SAFETY: w_raw is the pipe's write end, inherited by the clone.
        let mut out = unsafe { std::fs::File::from_raw_fd(w_raw) };
        // The names it lists are the sandbox's: confined before the first.
        let result = confine_scan(Path::new(upper), Path::new(lower), &filters)
            .and_then(|()| {
                lazaret_state::scan::scan(path, Path::new(upper), Path::new(lower), 1000)
                    .map_err(ScanError::Read)
            })
            // The summary's JSON carries the message.
            .map_err(|e| e.to_string());
        let _ = serde_json::to_writer(&mut out, &result);
        0
    });
    drop(w);
    let Some(child) = crate::logged(child) else {
        return exit::START_FAILED;
    };
    let mut json = String::new();
    let _ = std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::from(r), MAX_SCAN_SUMMARY),
        &mut json,
    );
    let _ = nix::sys::wait::waitpid(child, None);
    print_summary(&json, upper)
}

/// Prints the summary the confined clone wrote (`json`), or says why there
/// is none; the exit code of the scan.
fn print_summary(json: &str, upper: &str) -> i32 {
    match serde_json::from_str::<Result<lazaret_state::scan::Summary, String>>(json) {
        Ok(Ok(summary)) => match serde_json::to_string(&summary) {
            Ok(text) => {
                println!("{text}");
                exit::STOPPED
            }
            Err(e) => {
                lazaret_protocol::log_line!(
                    "lazaret-supervisor: cannot print the scan of {upper}: {e}"
                );
                exit::START_FAILED
            }
        },
        Ok(Err(e)) => {
            lazaret_protocol::log_line!("lazaret-supervisor: cannot scan {upper}: {e}");
            exit::START_FAILED
        }
        Err(e) => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: the scan of {upper} gave no result: {e}"
            );
            exit::START_FAILED
        }
    }
}
