//! The `lazaret-mailbox` process, in the order it runs:
//!
//! 1. sanitise: close every inherited fd but 0, 1, 2 and the three of
//!    [`fdno`];
//! 2. read the input: seals and size of the memfd, SHA-256 against
//!    `--input-digest`, then postcard;
//! 3. confine (see [`crate::confine`]);
//! 4. serve: between passes over the request directory, apply the
//!    coordinator's session registrations; after each pass, send one
//!    record per entry taken. It ends when the coordinator closes its end.

use crate::confine;
use crate::reader::Reader;
use lazaret_protocol::frame::{read_frame, write_frame, FrameError};
use lazaret_protocol::mailbox::{fdno, ToReader, MAX_INPUT};
use sha2::{Digest, Sha256};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

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

/// How long the reader waits for the coordinator between passes: the
/// sandbox's client polls its result at the same pace.
pub const PASS_INTERVAL: Duration = Duration::from_millis(15);

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
        lazaret_helpers::memfd::read_sealed("mailbox input", input, MAX_INPUT).map_err(bad)?;
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

/// Whether `chan` has something to read (a frame or its end) within
/// `wait`.
fn readable(chan: &UnixStream, wait: Duration) -> Result<bool, RunError> {
    let mut pfd = [rustix::event::PollFd::new(
        chan,
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::event::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as i64,
    };
    match rustix::event::poll(&mut pfd, Some(&ts)) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(RunError::Channel(FrameError::Io(e.into()))),
    }
}

/// Step 4. Returns when the coordinator closes the channel.
pub fn serve(mut reader: Reader, requests: OwnedFd, chan: UnixStream) -> Result<(), RunError> {
    let mut chan = chan;
    loop {
        let mut wait = PASS_INTERVAL;
        while readable(&chan, wait)? {
            match read_frame::<_, ToReader>(&mut chan) {
                Ok(m) => reader.control(m),
                Err(FrameError::Closed) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            wait = Duration::ZERO;
        }
        for rec in reader.pass(requests.as_fd(), now_ms()) {
            write_frame(&mut chan, &rec)?;
        }
    }
}

/// The whole helper, after argument parsing. Call from `main` only,
/// single-threaded.
pub fn run(digest: &str) -> Result<(), RunError> {
    close_other_fds()?;
    let input = lazaret_helpers::fds::inherited(fdno::INPUT)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::INPUT)))?;
    let requests = lazaret_helpers::fds::inherited(fdno::REQUESTS)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::REQUESTS)))?;
    let chan = lazaret_helpers::fds::inherited(fdno::CHANNEL)
        .map_err(|e| bad(format!("fd {}: {e}", fdno::CHANNEL)))?;
    let reader = read_input(&input, digest)?;
    drop(input);
    let filters = confine::filters()?;
    confine::confine(requests.as_fd(), &filters)?;
    serve(reader, requests, UnixStream::from(chan))
}
