//! Wake-ups for the reader: an inotify watch on the request directory, so
//! a pass runs as soon as the sandbox publishes an entry rather than at
//! the next tick of a timer.
//!
//! The watch is taken before confinement ([`crate::run`], step 3): the
//! seccomp allow-list has no inotify call, and reading the watch's events
//! is a `read` of a descriptor the reader already holds. Landlock does not
//! apply to it either way; the watch names the one directory the reader
//! is given, through its descriptor (`/proc/self/fd`), so a rename of that
//! directory cannot redirect it.
//!
//! What it leaves to the pass: an event is a hint, never evidence. The
//! pass lists the directory itself and checks every entry as before;
//! nothing an event says is passed on. The one thing read from an event's
//! name (the sandbox's bytes) is whether it starts with `.`, the names a
//! pass skips anyway ([`crate::reader::skipped`]). A missed, merged or
//! overflowed event costs time only: the reader still passes
//! periodically ([`crate::run::Pace`]).

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Buffers of events read per drain; what is left stays queued and
/// wakes the reader again.
const MAX_READS: usize = 16;

/// Bytes per read: room for at least one event with the longest name.
const BUF: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot create an inotify instance: {0}")]
    Init(Errno),
    #[error("cannot watch the request directory: {0}")]
    Add(Errno),
}

/// The inotify watch of the request directory.
pub struct Watch {
    fd: OwnedFd,
}

/// What the queued events said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// An event names an entry a pass would take, or events were lost
    /// (the queue overflowed): a pass is due.
    pub due: bool,
    /// The watch is gone (the directory was removed or its file system
    /// unmounted): no event will come any more.
    pub ended: bool,
}

impl Watch {
    /// Watches `requests` for entries written and closed in it or renamed
    /// into it (how the client publishes). Non-blocking, close-on-exec.
    pub fn new(requests: BorrowedFd<'_>) -> Result<Self, WatchError> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(WatchError::Init)?;
        let path = format!("/proc/self/fd/{}", requests.as_raw_fd());
        inotify::add_watch(
            &fd,
            path,
            WatchFlags::CLOSE_WRITE | WatchFlags::MOVED_TO | WatchFlags::ONLYDIR,
        )
        .map_err(WatchError::Add)?;
        Ok(Self { fd })
    }

    /// The descriptor to poll: readable while events are queued.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Reads what is queued (at most [`MAX_READS`] buffers).
    pub fn drain(&self) -> Drained {
        let mut buf = [MaybeUninit::<u8>::uninit(); BUF];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        let mut out = Drained::default();
        let mut reads = 0;
        loop {
            if reader.is_buffer_empty() {
                if reads == MAX_READS {
                    break;
                }
                reads += 1;
            }
            match reader.next() {
                Ok(e) => {
                    let flags = e.events();
                    if flags.intersects(ReadFlags::IGNORED | ReadFlags::UNMOUNT) {
                        out.ended = true;
                    }
                    let named_skipped = e
                        .file_name()
                        .is_some_and(|n| crate::reader::skipped(n.to_bytes()));
                    out.due |= flags.contains(ReadFlags::QUEUE_OVERFLOW) || !named_skipped;
                }
                // Nothing queued, or interrupted: what is left wakes us.
                Err(Errno::AGAIN | Errno::INTR) => break,
                // Anything else: the watch cannot be trusted to wake us.
                Err(_) => {
                    out.due = true;
                    out.ended = true;
                    break;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};

    fn watched() -> (tempfile::TempDir, OwnedFd, Watch) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("requests")).unwrap();
        let dir = rustix::fs::open(
            d.path().join("requests"),
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let w = Watch::new(dir.as_fd()).unwrap();
        (d, dir, w)
    }

    #[test]
    fn a_published_entry_makes_a_pass_due_and_a_file_being_written_does_not() {
        let (d, _dir, w) = watched();
        let req = d.path().join("requests");
        assert_eq!(w.drain(), Drained::default());
        // The client writes a dot-name, then renames it.
        std::fs::write(req.join(".abc.req.tmp"), b"x").unwrap();
        assert_eq!(w.drain(), Drained::default());
        std::fs::rename(req.join(".abc.req.tmp"), req.join("abc.req")).unwrap();
        assert!(w.drain().due);
        assert_eq!(w.drain(), Drained::default(), "drained once");
        // A writer that does not rename is seen when it closes the file.
        std::fs::write(req.join("direct.req"), b"x").unwrap();
        assert!(w.drain().due);
    }

    #[test]
    fn the_watch_follows_the_directory_through_a_rename() {
        let (d, _dir, w) = watched();
        std::fs::rename(d.path().join("requests"), d.path().join("moved")).unwrap();
        std::fs::write(d.path().join("moved/x.req"), b"x").unwrap();
        assert!(w.drain().due);
    }

    #[test]
    fn the_removal_of_the_directory_ends_the_watch() {
        let (d, dir, w) = watched();
        drop(dir);
        std::fs::remove_dir(d.path().join("requests")).unwrap();
        let got = w.drain();
        assert!(got.ended && got.due, "{got:?}");
    }

    #[test]
    fn more_events_than_one_drain_reads_stay_queued() {
        let (d, _dir, w) = watched();
        let long = "n".repeat(200);
        for i in 0..(MAX_READS * BUF / 200 + 50) {
            std::fs::write(d.path().join(format!("requests/{long}{i}")), b"").unwrap();
        }
        assert!(w.drain().due);
        assert!(w.drain().due, "the rest is still queued");
    }
}
