//! Test-only fault points: `LAZARET_FAULT_POINT=NAME` makes the process
//! kill itself with SIGKILL when it reaches `NAME`, so the end-to-end tests
//! can prove crash consistency at every step. Nothing else reads it.

pub fn point(name: &str) {
    if std::env::var("LAZARET_FAULT_POINT").as_deref() == Ok(name) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}
