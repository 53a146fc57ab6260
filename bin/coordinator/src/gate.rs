//! The terminal route of one session: while a Host Escalation prompt or
//! its host process owns the developer's terminal, the coordinator stops
//! reading the session's PTY, so no sandbox output mixes into the prompt.

use lazaret_helpers::sync::lock;
use std::sync::{Condvar, Mutex, PoisonError};

#[derive(Default)]
struct State {
    closed: bool,
    /// The reader saw `closed` and is parked.
    parked: bool,
}

#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    cv: Condvar,
}

impl Gate {
    /// Called by the PTY reader before each read: parks while closed.
    pub fn pass(&self) {
        let mut s = lock(&self.state);
        while s.closed {
            s.parked = true;
            self.cv.notify_all();
            s = self.cv.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.parked = false;
    }

    /// Closes the gate and waits until the reader is parked (or a short
    /// while, for a reader blocked in poll, which re-checks in time).
    pub fn close(&self) {
        let mut s = lock(&self.state);
        s.closed = true;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while !s.parked && std::time::Instant::now() < deadline {
            s = self
                .cv
                .wait_timeout(s, std::time::Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    pub fn open(&self) {
        let mut s = lock(&self.state);
        s.closed = false;
        self.cv.notify_all();
    }
}
