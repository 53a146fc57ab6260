//! The Domain's `coordinator.log` and `helpers.log`, bounded for the
//! Domain's whole life (`lazaret_protocol::logs`).
//!
//! - `coordinator.log`: every line of [`line`] goes through one rotating
//!   writer, which also makes it this process's stderr, so what else
//!   writes there (a panic) is in the bounded file too. A rotated file
//!   begins with the lifecycle checkpoint of the one before
//!   (`lazaret_protocol::lifecycle::Checkpoint`), so the lifecycle model's
//!   replay can start in any file. Repeated events the sandbox triggers
//!   go through [`coalesced`]: per kind, a few lines per window, then one
//!   line with the count.
//! - `helpers.log`: the supervisor and every helper under it (the holder,
//!   runsc, the routers, slirp4netns, the DNS filter's stderr) write to a
//!   pipe, not to the file, and the coordinator copies the pipe into the
//!   rotating file ([`HelpersLog`]): a helper cannot grow the file past
//!   its bound whatever it writes, and a line repeated at once is folded.
//!   The copying thread starts once the coordinator is confined; until
//!   then its main thread copies while it waits for the supervisor.

use lazaret_helpers::logfile::{Coalescer, Held, LineSplitter, LogFile};
use lazaret_helpers::sync::lock;
use lazaret_protocol::lifecycle::{checkpoint_of_log, Event, LOG_PREFIX};
use lazaret_protocol::logs::{COORDINATOR_LOG, HELPERS_LOG, MAX_BYTES, ROTATIONS, TIME_FORMAT};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

static COORDINATOR: OnceLock<LogFile> = OnceLock::new();

/// Per kind, the first [`BURST`] events of each [`WINDOW`] are logged one
/// by one, the rest counted.
const WINDOW: Duration = Duration::from_secs(10);
const BURST: u32 = 5;
static REPEATED: Coalescer = Coalescer::new(WINDOW, BURST);

/// Mailbox entries refused (by the reader, or by the coordinator before
/// anyone is asked): each is in `escalations.log`.
pub const REFUSED_ENTRY: &str = "Escalation Mailbox: refused";
/// Escalation Results that could not be written (a full Storage Root).
pub const UNPUBLISHED_RESULT: &str = "cannot publish an Escalation Result";

/// The line prefix of every coordinator line: time (always
/// milliseconds, so that every line's time has the same width) and PID.
fn stamp() -> String {
    format!(
        "{} lazaret-coordinator[{}]: ",
        time_text(jiff::Timestamp::now()),
        std::process::id()
    )
}

/// `t` as [`TIME_FORMAT`] writes it.
fn time_text(t: jiff::Timestamp) -> String {
    t.strftime(TIME_FORMAT).to_string()
}

/// From here on, `coordinator.log` in `domain_root` is written through
/// its rotating writer (before, lines go to stderr, which the CLI opened
/// on the same file).
pub fn init(domain_root: &Path) {
    match writer(domain_root, MAX_BYTES) {
        Ok(f) => {
            let _ = COORDINATOR.set(f.as_stderr());
        }
        Err(e) => line(format_args!(
            "cannot open {}: {e}; this log is not rotated",
            domain_root.display()
        )),
    }
}

/// The rotating writer of `coordinator.log` in `domain_root`: each new
/// file begins with the lifecycle checkpoint of the one rotated.
fn writer(domain_root: &Path, max_bytes: u64) -> std::io::Result<LogFile> {
    let header: lazaret_helpers::logfile::Header = Box::new(|old| {
        let c = checkpoint_of_log(&String::from_utf8_lossy(old));
        format!("{}{LOG_PREFIX}{}\n", stamp(), Event::Checkpoint(c)).into_bytes()
    });
    Ok(LogFile::new(domain_root, COORDINATOR_LOG, max_bytes, ROTATIONS)?.with_header(header))
}

/// One timestamped line of `coordinator.log`.
pub fn line(msg: impl std::fmt::Display) {
    let text = format!("{}{msg}\n", stamp());
    match COORDINATOR.get() {
        Some(f) => {
            let _ = f.append(text.as_bytes());
        }
        None => lazaret_protocol::log_line!("{}", text.trim_end()),
    }
}

/// One event of a kind the sandbox can repeat at will: logged as
/// [`line`] unless its kind is over its share of the window, in which
/// case it is only counted (see [`flush`]).
pub fn coalesced(kind: &'static str, msg: impl std::fmt::Display) {
    let (show, held) = REPEATED.admit(kind, Instant::now());
    if let Some(h) = held {
        line(summary(&h));
    }
    if show {
        line(msg);
    }
}

/// Logs the counts of the windows that have passed (`all`: every count,
/// as the coordinator ends).
pub fn flush(all: bool) {
    let held = if all {
        REPEATED.drain()
    } else {
        REPEATED.due(Instant::now())
    };
    for h in held {
        line(summary(&h));
    }
}

/// The line that stands for `h.count` events not logged one by one.
pub fn summary(h: &Held) -> String {
    let secs = WINDOW.as_secs();
    let ago = h.since.elapsed().as_secs();
    match h.kind {
        REFUSED_ENTRY => format!(
            "{REFUSED_ENTRY} {} more entries in the {secs} s window begun {ago} s ago (not logged one by one; `lazaret escalations` lists each)",
            h.count
        ),
        kind => format!(
            "{kind}: {} more times in the {secs} s window begun {ago} s ago (not logged one by one)",
            h.count
        ),
    }
}

/// `helpers.log`: a pipe the helpers write to, copied into the rotating
/// file.
pub struct HelpersLog {
    read: OwnedFd,
    copy: Mutex<Copy>,
}

struct Copy {
    file: LogFile,
    lines: LineSplitter,
    ended: bool,
}

/// How long the copy waits for more before it reports folded repeats.
const PAUSE: Duration = Duration::from_secs(1);

/// Why `helpers.log` could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HelpersLogError {
    #[error("cannot make the helpers' log pipe: {0}")]
    Pipe(rustix::io::Errno),
    #[error("cannot set up the helpers' log pipe: {0}")]
    SetUp(rustix::io::Errno),
    #[error("cannot open {}: {source}", dir.display())]
    Open {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl HelpersLog {
    /// The log of `domain_root`, and the pipe's write end for the
    /// supervisor's stdout and stderr.
    pub fn open(domain_root: &Path) -> Result<(Arc<HelpersLog>, OwnedFd), HelpersLogError> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let (read, write) =
            pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).map_err(HelpersLogError::Pipe)?;
        // The writers' end blocks (runsc and slirp4netns expect that); a
        // larger buffer lets them run ahead of the copy at start-up.
        rustix::fs::fcntl_setfl(&write, rustix::fs::OFlags::empty())
            .map_err(HelpersLogError::SetUp)?;
        let _ = rustix::pipe::fcntl_setpipe_size(&write, 1 << 20);
        let file =
            LogFile::new(domain_root, HELPERS_LOG, MAX_BYTES, ROTATIONS).map_err(|source| {
                HelpersLogError::Open {
                    dir: domain_root.to_path_buf(),
                    source,
                }
            })?;
        let log = HelpersLog {
            read,
            copy: Mutex::new(Copy {
                file,
                lines: LineSplitter::default(),
                ended: false,
            }),
        };
        Ok((Arc::new(log), write))
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Copies what the pipe holds now; `false` once every writer is gone.
    pub fn drain(&self) -> bool {
        let mut c = lock(&self.copy);
        let mut buf = vec![0u8; 64 << 10];
        while !c.ended {
            match rustix::io::read(&self.read, &mut buf) {
                Ok(0) => {
                    c.ended = true;
                    let rest = c.lines.finish();
                    let _ = c.file.append(&rest);
                }
                Ok(n) => {
                    let out = c.lines.feed(&buf[..n]);
                    let _ = c.file.append(&out);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                // Nothing more can be read from it.
                Err(_) => c.ended = true,
            }
        }
        !c.ended
    }

    /// No more for a while: folded repeats are reported.
    fn pause(&self) {
        let mut c = lock(&self.copy);
        let out = c.lines.pause();
        let _ = c.file.append(&out);
    }

    /// Waits until the pipe has something, at most `timeout`.
    fn wait(&self, timeout: Duration) -> bool {
        let mut pfd = [nix::poll::PollFd::new(
            self.read.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        matches!(nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(ms)), Ok(n) if n > 0)
    }

    /// Copies until every writer is gone, in a thread of its own (started
    /// once the coordinator is confined).
    pub fn spawn(self: Arc<Self>) {
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("helpers-log".into())
            .spawn(move || loop {
                if !me.wait(PAUSE) {
                    me.pause();
                }
                if !me.drain() {
                    return;
                }
            });
        if let Err(e) = started {
            line(format_args!(
                "cannot start copying the helpers' messages into {HELPERS_LOG}: {e}"
            ));
        }
    }

    /// Copies what the helpers still write until they are all gone, or
    /// until `deadline` (one may outlive the Domain's teardown).
    pub fn finish(&self, deadline: Instant) {
        while self.drain() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.pause();
                return;
            }
            self.wait(left.min(PAUSE));
        }
    }
}

/// Copies the rest of the helpers' messages when the coordinator leaves
/// `run`, whichever way it leaves.
pub struct FinishOnDrop(pub Arc<HelpersLog>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish(Instant::now() + Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::lifecycle::{replay, trace_of_log, Phase, ResultKind};

    /// Generations with sessions and requests, as the coordinator writes
    /// them, through a writer rotated every few kilobytes.
    #[test]
    fn the_lifecycle_replays_across_rotations_from_any_kept_file() {
        let d = tempfile::tempdir().unwrap();
        let log = writer(d.path(), 4096).unwrap();
        let write = |pid: u32, e: Event| {
            let l = format!("2026-12-02T00:00:00Z lazaret-coordinator[{pid}]: {LOG_PREFIX}{e}\n");
            log.append(l.as_bytes()).unwrap();
        };
        for g in 1..=3u64 {
            let pid = 100 + g as u32;
            write(pid, Event::Owner);
            write(pid, Event::Begin { generation: g });
            let phase = |from, to| Event::Phase {
                generation: g,
                from,
                to,
            };
            write(pid, phase(Phase::Starting, Phase::Running));
            let session = format!("{g:032x}");
            write(
                pid,
                Event::Joined {
                    session: session.clone(),
                },
            );
            for i in 0..200u32 {
                let request = format!("{:032x}", u64::from(i) << 8 | g);
                write(
                    pid,
                    Event::Accepted {
                        request: request.clone(),
                        session: session.clone(),
                    },
                );
                // Not a step: an unrelated line in between.
                log.append(
                    b"2026-12-02T00:00:00Z lazaret-coordinator[1]: Escalation Mailbox: refused x\n",
                )
                .unwrap();
                write(
                    pid,
                    Event::Result {
                        request,
                        kind: ResultKind::Denied,
                    },
                );
            }
            write(pid, Event::Left { session });
            write(pid, phase(Phase::Running, Phase::Stopping));
            write(pid, phase(Phase::Stopping, Phase::Stopped));
            write(pid, Event::Released);
        }
        let files = lazaret_protocol::logs::files(d.path(), COORDINATOR_LOG);
        // Every kept file alone, and each with those after it, replays
        // from its checkpoint to the same end.
        for start in 0..files.len() {
            let text: String = files[start..]
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                .collect();
            assert!(text.len() <= 4096 * (files.len() - start), "{start}");
            let r =
                replay(&trace_of_log(&text)).unwrap_or_else(|v| panic!("from file {start}: {v}"));
            assert_eq!(r.generation, Some((3, Phase::Stopped)), "from file {start}");
            assert_eq!(r.owner, None);
        }
        let first = std::fs::read_to_string(&files[0]).unwrap();
        assert!(
            first
                .lines()
                .next()
                .unwrap()
                .contains("lifecycle: checkpoint owner"),
            "{first}"
        );
    }

    #[test]
    fn every_time_has_milliseconds_and_the_same_width() {
        for (ms, text) in [
            (1_796_229_065_120, "2026-12-02T16:31:05.120Z"),
            (1_796_229_065_000, "2026-12-02T16:31:05.000Z"),
            (1_796_229_065_001, "2026-12-02T16:31:05.001Z"),
        ] {
            let t = jiff::Timestamp::from_millisecond(ms).unwrap();
            assert_eq!(time_text(t), text);
        }
        // Below a millisecond: cut, never rounded into another width.
        let t = jiff::Timestamp::from_nanosecond(1_796_229_065_999_999_999).unwrap();
        assert_eq!(time_text(t), "2026-12-02T16:31:05.999Z");
        assert!(stamp().starts_with(&time_text(jiff::Timestamp::now())[..10]));
    }

    #[test]
    fn what_the_helpers_write_reaches_the_file_until_the_last_writer_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let (log, write) = HelpersLog::open(d.path()).unwrap();
        let mut w = std::fs::File::from(write);
        let copy = w.try_clone().unwrap();
        std::io::Write::write_all(&mut w, b"one\nflood\nflood\nflood\ntwo").unwrap();
        drop(w);
        assert!(log.drain(), "a writer is left");
        drop(copy);
        log.finish(Instant::now() + Duration::from_secs(5));
        let t = std::fs::read_to_string(d.path().join(HELPERS_LOG)).unwrap();
        assert_eq!(
            t,
            "one\nflood\n(the line above was repeated 2 more times)\ntwo\n"
        );
        assert!(!log.drain());
    }

    #[test]
    fn the_helpers_log_is_rotated_whatever_they_write() {
        let d = tempfile::tempdir().unwrap();
        let (log, write) = HelpersLog::open(d.path()).unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::fs::File::from(write);
            for i in 0..200_000u32 {
                // 37 bytes a line: 7 MiB in all.
                let _ = writeln!(w, "lazaret-mount-router: line {i:010}");
            }
        });
        // Read as the coordinator's thread does, while it is written.
        while log.drain() {
            log.wait(Duration::from_millis(100));
        }
        writer.join().unwrap();
        let files = lazaret_protocol::logs::files(d.path(), HELPERS_LOG);
        let mut last = None;
        for p in &files {
            let t = std::fs::read_to_string(p).unwrap();
            assert!(t.len() as u64 <= MAX_BYTES, "{}: {}", p.display(), t.len());
            for l in t.lines() {
                let i: u32 = l.rsplit(' ').next().unwrap().parse().unwrap();
                assert!(last.is_none_or(|p| p + 1 == i), "{l} after {last:?}");
                last = Some(i);
            }
        }
        assert_eq!(last, Some(199_999));
    }
}
