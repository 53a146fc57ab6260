//! `--remove-tree` and the run directory's removal at stop: trees whose
//! files belong to the developer's subordinate IDs, removed from inside
//! the mapped user namespace.

use lazaret_helpers::userns;
use lazaret_protocol::plan::SandboxPlan;
use lazaret_supervisor::exit;
use std::path::Path;
use std::process::Command;

/// Removes the Domain's run directory, whose files belong to the
/// developer's subordinate IDs, from inside the mapped user namespace
/// (what `--remove-tree` does). True when it is gone.
pub(crate) fn remove_run_dir(plan: &SandboxPlan) -> bool {
    let dir = &plan.run_dir;
    if !dir.is_absolute() {
        return false;
    }
    if !dir.exists() {
        return true;
    }
    match userns::run_mapped(
        &plan.id_map,
        Command::new("rm").arg("-rf").arg("--").arg(dir),
    ) {
        Ok(s) if s.success() && !dir.exists() => true,
        other => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: could not remove {}: {other:?}",
                dir.display()
            );
            false
        }
    }
}

/// `lazaret-supervisor --remove-tree DIR`: removes a Domain's transient
/// tree, whose files belong to the developer's subordinate IDs, from inside
/// the mapped user namespace. A separate single-threaded process, because
/// cloning a multi-threaded coordinator for it would not be safe. Used at
/// start-up (recovery) and by the CLI; a running Domain's run directory is
/// removed by its supervisor when it stops.
pub(crate) fn remove_tree(dir: Option<&Path>) -> i32 {
    let Some(dir) = dir.filter(|d| d.is_absolute()) else {
        lazaret_protocol::log_line!(
            "lazaret-supervisor: --remove-tree takes an absolute directory"
        );
        return exit::BAD_PLAN;
    };
    let Some(map) = crate::logged(userns::current_id_map()) else {
        return exit::START_FAILED;
    };
    match userns::run_mapped(&map, Command::new("rm").arg("-rf").arg("--").arg(dir)) {
        Ok(s) if s.success() && !dir.exists() => exit::STOPPED,
        other => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: could not remove {}: {other:?}",
                dir.display()
            );
            exit::START_FAILED
        }
    }
}
