//! The `lazaret-mailbox` process, in the order it runs:
//!
//! 1. sanitise: close every inherited fd but 0, 1, 2 and the three of
//!    [`fdno`];
//! 2. read the input: seals and size of the memfd, SHA-256 against
//!    `--input-digest`, then postcard;
//! 3. watch the request directory ([`crate::watch`]); without a watch
//!    (no inotify instance left for the developer, say) it polls, as a
//!    line on stderr says;
//! 4. confine (see [`crate::confine`]);
//! 5. serve: apply the coordinator's session registrations as they come;
//!    pass over the request directory when the watch says an entry was
//!    published, and periodically in any case, paced by [`Pace`]; after
//!    each pass, send one record per entry taken. It ends when the
//!    coordinator closes its end.

use crate::confine;
use crate::reader::Reader;
use crate::watch::Watch;
use lazaret_protocol::fdno::mailbox as fdno;
use lazaret_protocol::frame::{read_frame, write_frame, FrameError};
use lazaret_protocol::mailbox::{ToReader, MAX_INPUT};
use sha2::{Digest, Sha256};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Exit codes of `lazaret-mailbox`.
pub mod exit {
    /// The coordinator closed the channel.
    pub const OK: i32 = 0;
    /// Arguments, fds, memfd seals/size/digest or input bytes are wrong.
    pub const BAD_INPUT: i32 = 2;
    /// The channel to the coordinator failed.
    pub const CHANNEL: i32 = 3;
    /// Confinement could not be applied.
    pub const CONFINE_FAILED: i32 = 6;
}

/// The pace of the reader's rate bound: a pass that reads `n` directory
/// entries delays the next by `n / max_entries_per_pass` of this, so on
/// average the reader reads no more than `max_entries_per_pass` entries
/// (and verifies no more signatures) per interval, as when it polled at
/// this interval. Without a watch it is also the polling interval.
pub const PASS_INTERVAL: Duration = Duration::from_millis(15);

/// With a watch, the periodic pass: it takes what no event announces
/// (links, directories and special files made in the request directory,
/// entries beyond a drain's bound) and is the fallback for lost events.
pub const WATCHED_PASS_INTERVAL: Duration = Duration::from_millis(250);

/// The shortest time between the starts of two passes.
pub const MIN_GAP: Duration = Duration::from_millis(1);

/// When the next pass runs: a pure schedule, so the rate bound is tested
/// without a clock.
#[derive(Debug)]
pub struct Pace {
    /// An event, or a pass that stopped at its bound, asks for a pass.
    woken: bool,
    /// The earliest start of the next pass (the rate bound).
    not_before: Instant,
    /// The next periodic pass.
    periodic: Instant,
    interval: Duration,
    max_entries: u32,
}

impl Pace {
    /// The first pass is due at once: entries published before the watch
    /// existed are taken by it.
    pub fn new(now: Instant, watched: bool, max_entries: u32) -> Self {
        let interval = if watched {
            WATCHED_PASS_INTERVAL
        } else {
            PASS_INTERVAL
        };
        Self::with_interval(now, interval, max_entries)
    }

    /// With a periodic pass every `interval` (tests make it long, so only
    /// events can wake the reader).
    pub fn with_interval(now: Instant, interval: Duration, max_entries: u32) -> Self {
        Self {
            woken: true,
            not_before: now,
            periodic: now,
            interval,
            max_entries,
        }
    }

    /// Whether a pass is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.not_before && (self.woken || now >= self.periodic)
    }

    /// How long to wait for events before a pass may be due.
    pub fn wait(&self, now: Instant) -> Duration {
        let at = if self.woken {
            self.not_before
        } else {
            self.periodic.max(self.not_before)
        };
        at.saturating_duration_since(now)
    }

    /// Whether events can change anything now (else the reader need not
    /// listen for them until the pass).
    pub fn listening(&self) -> bool {
        !self.woken
    }

    /// An event announced an entry.
    pub fn wake(&mut self) {
        self.woken = true;
    }

    /// The watch ended: poll at [`PASS_INTERVAL`] from now on.
    pub fn unwatched(&mut self, now: Instant) {
        self.interval = PASS_INTERVAL;
        self.periodic = self.periodic.min(now + PASS_INTERVAL);
    }

    /// A pass started at `start`, read `examined` directory entries, and
    /// stopped at its bound when `full`.
    pub fn passed(&mut self, start: Instant, examined: usize, full: bool) {
        let cost = if self.max_entries == 0 {
            PASS_INTERVAL
        } else {
            let n = u32::try_from(examined).unwrap_or(u32::MAX);
            PASS_INTERVAL.saturating_mul(n) / self.max_entries
        };
        self.woken = full;
        self.not_before = start + cost.max(MIN_GAP);
        self.periodic = start + self.interval;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    BadInput(String),
    #[error("confinement: {0}")]
    Confine(#[from] confine::ConfineError),
    #[error("the channel to the coordinator: {0}")]
    Channel(#[from] FrameError),
}

impl RunError {
    pub fn code(&self) -> i32 {
        match self {
            RunError::BadInput(_) => exit::BAD_INPUT,
            RunError::Confine(_) => exit::CONFINE_FAILED,
            RunError::Channel(_) => exit::CHANNEL,
        }
    }
}

fn bad(e: impl std::fmt::Display) -> RunError {
    RunError::BadInput(e.to_string())
}

/// Step 1: closes every fd above 2 that is not one of [`fdno`].
pub fn close_other_fds() -> Result<(), RunError> {
    let last = fdno::CHANNEL as u32;
    // SAFETY: close_range only closes descriptors; those above the
    // inherited ones are owned by no Rust object yet (this runs first in
    // main).
    let r = unsafe { libc::syscall(libc::SYS_close_range, last + 1, u32::MAX, 0u32) };
    if r < 0 {
        return Err(bad(format!(
            "close_range: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Step 2.
pub fn read_input(input: &OwnedFd, digest: &str) -> Result<Reader, RunError> {
    let bytes =
        lazaret_protocol::memfd::read_sealed("mailbox input", input, MAX_INPUT).map_err(bad)?;
    let got = hex::encode(Sha256::digest(&bytes));
    if !got.eq_ignore_ascii_case(digest) {
        return Err(bad(format!(
            "the input's SHA-256 is {got}, not the {digest} the coordinator named"
        )));
    }
    Reader::from_input(&bytes).map_err(bad)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What became readable while the reader waited.
#[derive(Default)]
struct Ready {
    chan: bool,
    watch: bool,
}

/// Waits up to `wait` for `chan` (a frame or its end) and, when given,
/// the watch.
fn wait_for(
    chan: &UnixStream,
    watch: Option<BorrowedFd<'_>>,
    wait: Duration,
) -> Result<Ready, RunError> {
    use rustix::event::{PollFd, PollFlags};
    let ts = rustix::event::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as i64,
    };
    let mut pfd = vec![PollFd::new(chan, PollFlags::IN)];
    if let Some(w) = &watch {
        pfd.push(PollFd::new(w, PollFlags::IN));
    }
    match rustix::event::poll(&mut pfd, Some(&ts)) {
        Ok(0) | Err(rustix::io::Errno::INTR) => Ok(Ready::default()),
        Ok(_) => Ok(Ready {
            chan: !pfd[0].revents().is_empty(),
            watch: pfd.get(1).is_some_and(|p| !p.revents().is_empty()),
        }),
        Err(e) => Err(RunError::Channel(FrameError::Io(e.into()))),
    }
}

/// Step 3: the watch, or `None` (said on stderr) when there can be none.
pub fn watch(requests: BorrowedFd<'_>) -> Option<Watch> {
    match Watch::new(requests) {
        Ok(w) => Some(w),
        Err(e) => {
            lazaret_protocol::log_line!(
                "lazaret-mailbox: {e}; polling the request directory every {} ms instead",
                PASS_INTERVAL.as_millis()
            );
            None
        }
    }
}

/// Step 5. Returns when the coordinator closes the channel.
pub fn serve(
    reader: Reader,
    requests: OwnedFd,
    chan: UnixStream,
    watch: Option<Watch>,
) -> Result<(), RunError> {
    let pace = Pace::new(Instant::now(), watch.is_some(), reader.max_entries());
    serve_paced(reader, requests, chan, watch, pace)
}

/// [`serve`] on a given schedule.
pub fn serve_paced(
    mut reader: Reader,
    requests: OwnedFd,
    chan: UnixStream,
    mut watch: Option<Watch>,
    mut pace: Pace,
) -> Result<(), RunError> {
    let mut chan = chan;
    loop {
        let now = Instant::now();
        if pace.due(now) {
            // Sessions registered so far are known to the pass (a session
            // is registered before any of its processes exists).
            if !apply_control(&mut reader, &mut chan)? {
                return Ok(());
            }
            // What is queued now is covered by this pass; what comes after
            // the drain stays queued and wakes the next one.
            if let Some(w) = &watch {
                if w.drain().ended {
                    watch = None;
                    pace.unwatched(now);
                }
            }
            let pass = reader.pass(requests.as_fd(), now_ms());
            pace.passed(now, pass.examined, pass.full);
            for rec in &pass.records {
                write_frame(&mut chan, rec)?;
            }
            continue;
        }
        let listen = watch.as_ref().filter(|_| pace.listening());
        let ready = wait_for(&chan, listen.map(Watch::fd), pace.wait(now))?;
        if ready.watch {
            if let Some(w) = &watch {
                let d = w.drain();
                if d.due {
                    pace.wake();
                }
                if d.ended {
                    watch = None;
                    pace.unwatched(Instant::now());
                }
            }
        }
        if ready.chan && !apply_control(&mut reader, &mut chan)? {
            return Ok(());
        }
    }
}

/// Applies the coordinator's frames that are already there; `false` when
/// it closed the channel.
fn apply_control(reader: &mut Reader, chan: &mut UnixStream) -> Result<bool, RunError> {
    while wait_for(chan, None, Duration::ZERO)?.chan {
        match read_frame::<_, ToReader>(&mut *chan) {
            Ok(m) => reader.control(m),
            Err(FrameError::Closed) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The whole helper, after argument parsing. Call from `main` only,
/// single-threaded.
pub fn run(digest: &str) -> Result<(), RunError> {
    close_other_fds()?;
    let input = lazaret_protocol::fdno::inherited(fdno::INPUT)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::INPUT)))?;
    let requests = lazaret_protocol::fdno::inherited(fdno::REQUESTS)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::REQUESTS)))?;
    let chan = lazaret_protocol::fdno::inherited(fdno::CHANNEL)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::CHANNEL)))?;
    let reader = read_input(&input, digest)?;
    drop(input);
    let watch = watch(requests.as_fd());
    let filters = confine::filters()?;
    confine::confine(requests.as_fd(), &filters)?;
    serve(reader, requests, UnixStream::from(chan), watch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 256;

    #[test]
    fn the_first_pass_is_due_at_once() {
        let t = Instant::now();
        assert!(Pace::new(t, true, MAX).due(t));
        assert!(Pace::new(t, false, MAX).due(t));
    }

    #[test]
    fn an_event_makes_a_pass_due_after_the_shortest_gap() {
        let t = Instant::now();
        let mut p = Pace::new(t, true, MAX);
        p.passed(t, 3, false);
        assert!(p.listening());
        assert!(!p.due(t + MIN_GAP * 2));
        assert_eq!(p.wait(t), WATCHED_PASS_INTERVAL);
        p.wake();
        assert!(!p.listening());
        assert!(!p.due(t));
        assert_eq!(p.wait(t), MIN_GAP);
        assert!(p.due(t + MIN_GAP));
    }

    #[test]
    fn without_events_a_pass_is_due_periodically() {
        let t = Instant::now();
        let mut p = Pace::new(t, true, MAX);
        p.passed(t, 2, false);
        assert!(!p.due(t + WATCHED_PASS_INTERVAL - MIN_GAP));
        assert!(p.due(t + WATCHED_PASS_INTERVAL));
        let mut p = Pace::new(t, false, MAX);
        p.passed(t, 2, false);
        assert!(p.due(t + PASS_INTERVAL));
        // A watch that ends falls back to polling.
        let mut p = Pace::new(t, true, MAX);
        p.passed(t, 2, false);
        p.unwatched(t);
        assert!(p.due(t + PASS_INTERVAL));
    }

    #[test]
    fn a_full_pass_is_followed_by_another_at_the_old_pace() {
        let t = Instant::now();
        let mut p = Pace::new(t, true, MAX);
        p.passed(t, MAX as usize + 2, true);
        // Entries beyond the bound announce themselves no more: the next
        // pass comes without an event, no sooner than polling allowed.
        assert!(!p.due(t + PASS_INTERVAL - MIN_GAP));
        assert!(p.due(t + PASS_INTERVAL * 2));
    }

    #[test]
    fn events_never_push_the_rate_over_the_bound() {
        // An event after every pass, each pass reading `n` entries: over
        // one second, the entries read stay within one bound per
        // interval (plus the pass in flight).
        for n in [1usize, 3, 40, 255, 256, 257, 5_000] {
            let t0 = Instant::now();
            let mut p = Pace::new(t0, true, MAX);
            let (mut t, mut read) = (t0, 0usize);
            while t < t0 + Duration::from_secs(1) {
                if p.due(t) {
                    p.passed(t, n, n >= MAX as usize);
                    read += n;
                }
                p.wake();
                t += p.wait(t).max(Duration::from_micros(100));
            }
            let bound = (1000 / PASS_INTERVAL.as_millis() as usize + 1) * MAX as usize;
            assert!(
                read <= bound + n,
                "{n} per pass: {read} read, bound {bound}"
            );
            // And no more than one pass per gap.
            let passes = read / n;
            assert!(
                passes <= 1000 / MIN_GAP.as_millis() as usize + 1,
                "{passes}"
            );
        }
    }

    /// The reader's loop over a real directory, woken by its watch only
    /// (the periodic pass is an hour away): every entry published before
    /// the watch existed, or while the reader runs, is taken; none waits
    /// for a timer (a lost wake-up would hang, and the read below fail).
    /// A session registered before its entry is known to the pass.
    #[test]
    fn no_entry_is_left_waiting_for_a_timer() {
        use lazaret_protocol::escalation::{self as esc, Body, Kind, Request};
        use lazaret_protocol::mailbox::{FromReader, ReaderInput, INPUT_VERSION};
        use rustix::fs::{Mode, OFlags};
        let d = tempfile::tempdir().unwrap();
        let req = d.path().join("requests");
        std::fs::create_dir(&req).unwrap();
        let kp = ed25519_compact::KeyPair::generate();
        let reader = Reader::new(&ReaderInput {
            version: INPUT_VERSION,
            public_key: *kp.pk,
            sandbox_id: "s".into(),
            max_entries_per_pass: 4,
            max_stuck: 16,
        })
        .unwrap();
        let dir =
            rustix::fs::open(&req, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
        let publish = |name: &str, bytes: &[u8]| {
            let tmp = req.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::rename(&tmp, req.join(name)).unwrap();
        };
        // Before the watch exists: more than one pass takes.
        for i in 0..6 {
            publish(&format!("early{i}"), b"not signed");
        }
        let watch = Watch::new(dir.as_fd()).unwrap();
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let pace = Pace::with_interval(Instant::now(), Duration::from_secs(3600), 4);
        let served =
            std::thread::spawn(move || serve_paced(reader, dir, theirs, Some(watch), pace));
        let take = |ours: &mut UnixStream, n: usize| {
            let mut names = Vec::new();
            for _ in 0..n {
                match read_frame::<_, FromReader>(ours) {
                    Ok(FromReader::Refused { entry, .. }) => names.push(entry),
                    other => panic!("{other:?}"),
                }
            }
            names.sort();
            names
        };
        assert_eq!(
            take(&mut ours, 6),
            (0..6).map(|i| format!("early{i}")).collect::<Vec<_>>()
        );
        // While it runs: one at a time, then in a burst from another
        // thread (events arrive during passes and between them).
        for i in 0..20 {
            publish(&format!("one{i:02}"), b"not signed");
            assert_eq!(take(&mut ours, 1), [format!("one{i:02}")]);
        }
        let burst = {
            let req = req.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let tmp = req.join(format!(".b{i:03}.tmp"));
                    std::fs::write(&tmp, b"not signed").unwrap();
                    std::fs::rename(&tmp, req.join(format!("b{i:03}"))).unwrap();
                }
            })
        };
        assert_eq!(
            take(&mut ours, 100),
            (0..100).map(|i| format!("b{i:03}")).collect::<Vec<_>>()
        );
        burst.join().unwrap();
        // A session registered, then its request at once.
        write_frame(
            &mut ours,
            &ToReader::SessionAdded {
                session_id: "a".into(),
                anchor: [7; 32],
            },
        )
        .unwrap();
        let body = Body {
            version: esc::VERSION,
            sandbox_id: "s".into(),
            session_id: "a".into(),
            request_id: [1; 16],
            created_unix_ms: now_ms(),
            kind: Kind::Request(Request {
                argv: vec!["/bin/true".into()],
                justification: String::new(),
                cwd: "/workspace".into(),
                timeout_secs: 0,
                requester: Default::default(),
            }),
        };
        publish("a.req", &esc::seal(&body, &kp.sk, &[7; 32]));
        match read_frame::<_, FromReader>(&mut ours) {
            Ok(FromReader::Verified { entry, body, .. }) => {
                assert_eq!((entry.as_str(), body.session_id.as_str()), ("a.req", "a"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(&req).unwrap().count(), 0);
        drop(ours);
        served.join().unwrap().unwrap();
    }

    #[test]
    fn a_reader_without_bound_does_not_spin() {
        let t = Instant::now();
        let mut p = Pace::new(t, true, 0);
        p.passed(t, 0, false);
        assert!(!p.due(t + PASS_INTERVAL - MIN_GAP));
    }
}
