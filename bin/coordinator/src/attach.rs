//! Sessions that outlive their terminal (`lazaret run -d`, `lazaret
//! attach`, `detach_on_hangup`): the client end of a session is a
//! [`Sink`] that a terminal can leave and another can take, one at a
//! time. While none is attached, the session's output goes to a bounded
//! ring buffer that the next attach replays, exactly as live output would
//! have reached that terminal (sandbox output, never into a prompt: the
//! replay is written before the terminal is handed to the session, under
//! the sink's lock, so no prompt can be on it yet).
//!
//! Only the developer reaches this: `lazaret attach` comes over the same
//! authenticated control connection as `lazaret run` (peer uid, then
//! mutual TLS against the Trust Anchor, SR-9/SR-10). Nothing inside the
//! sandbox names a terminal: the session's processes write into their PTY
//! only, and which connection reads it is decided here.

use lazaret_protocol::frame::write_frame;
use lazaret_protocol::session::ServerMsg;
use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

/// Output kept for a session while no terminal is attached.
pub const RING_BYTES: usize = 64 * 1024;

/// Detached sessions that ended, kept for `lazaret ps` and `lazaret
/// attach` to report; past this, the oldest is forgotten.
pub const MAX_ENDED: usize = 16;

/// The newest [`RING_BYTES`] of a session's output.
#[derive(Default)]
pub struct Ring {
    buf: VecDeque<u8>,
}

impl Ring {
    pub fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(RING_BYTES)..];
        let over = (self.buf.len() + data.len()).saturating_sub(RING_BYTES);
        self.buf.drain(..over);
        self.buf.extend(data);
    }

    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf).into()
    }
}

/// Where a session's records go: its client's connection, or, for a
/// session that outlives its terminal, the ring buffer while none is
/// attached.
pub struct Sink {
    stream: Option<UnixStream>,
    /// `Some`: the session keeps running without a terminal.
    ring: Option<Ring>,
    /// Counts attaches, so that a connection that ended long after its
    /// terminal was replaced detaches nothing.
    epoch: u64,
    /// How the session ended while detached (`Exit` or `Failed`).
    ended: Option<ServerMsg>,
}

pub type Writer = Arc<Mutex<Sink>>;

impl Sink {
    /// A session that ends with its client.
    pub fn attached(stream: UnixStream) -> Self {
        Self {
            stream: Some(stream),
            ring: None,
            epoch: 0,
            ended: None,
        }
    }

    /// A session that keeps running when its client goes.
    pub fn detachable(stream: UnixStream) -> Self {
        Self {
            ring: Some(Ring::default()),
            ..Self::attached(stream)
        }
    }

    pub fn is_attached(&self) -> bool {
        self.stream.is_some()
    }

    pub fn is_detachable(&self) -> bool {
        self.ring.is_some()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How it ended while detached, if it did.
    pub fn ended(&self) -> Option<&ServerMsg> {
        self.ended.as_ref()
    }

    /// Lets go of the terminal of attach `epoch` (a later attach keeps
    /// its own). True when it was detached now.
    pub fn detach(&mut self, epoch: u64) -> bool {
        if self.ring.is_none() || epoch != self.epoch || self.stream.is_none() {
            return false;
        }
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        true
    }

    /// Takes a new terminal: `first` (the session's acceptance) and the
    /// output kept meanwhile are written to it before anything else can
    /// be; then how the session ended, if it did. The new epoch, or
    /// `None` when another terminal holds it or the connection failed.
    pub fn attach(&mut self, mut stream: UnixStream, first: &ServerMsg) -> Option<u64> {
        if self.stream.is_some() || self.ring.is_none() {
            return None;
        }
        write_frame(&mut stream, first).ok()?;
        let kept = self.ring.as_mut().map(Ring::take).unwrap_or_default();
        if !kept.is_empty() {
            write_frame(&mut stream, &ServerMsg::Stdout(kept)).ok()?;
        }
        if let Some(end) = &self.ended {
            let _ = write_frame(&mut stream, end);
            return Some(self.epoch);
        }
        self.stream = Some(stream);
        self.epoch += 1;
        Some(self.epoch)
    }

    /// Sends `msg` to the attached terminal; with none (or when it just
    /// went away), a detachable session keeps output in its ring and its
    /// end for the next attach. False when a session that ends with its
    /// client has lost it.
    pub fn send(&mut self, msg: &ServerMsg) -> bool {
        if let Some(s) = self.stream.as_mut() {
            if write_frame(s, msg).is_ok() {
                return true;
            }
            if self.ring.is_none() {
                return false;
            }
            // The terminal hung up: the session goes on detached.
            self.stream = None;
        }
        let Some(ring) = self.ring.as_mut() else {
            return false;
        };
        match msg {
            ServerMsg::Stdout(d) | ServerMsg::Stderr(d) => ring.push(d),
            ServerMsg::Exit { .. } | ServerMsg::Failed { .. } => self.ended = Some(msg.clone()),
            _ => {}
        }
        true
    }

    /// The connection, taken out (a `lazaret attach` connection moves to
    /// the session it attaches).
    pub fn take_stream(&mut self) -> Option<UnixStream> {
        self.stream.take()
    }

    /// Closes the attached connection (the session ended).
    pub fn close(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Writes a whole frame to the attached terminal (the Host Escalation
/// side); with none attached, the write fails as with a client that is
/// gone.
impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.stream.as_mut() {
            Some(s) => s.write(buf),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "no terminal is attached to the session (it runs detached)",
            )),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.stream.as_mut() {
            Some(s) => s.flush(),
            None => Ok(()),
        }
    }
}

/// ctrl-p ctrl-q, as docker: `lazaret attach` detaches on it (the CLI
/// recognises it; the coordinator only hears [`ClientMsg::Detach`]).
///
/// [`ClientMsg::Detach`]: lazaret_protocol::session::ClientMsg::Detach
pub const DETACH_KEYS: [u8; 2] = [0x10, 0x11];

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::frame::read_frame;

    #[test]
    fn the_ring_keeps_the_newest_bytes_within_its_bound() {
        let mut r = Ring::default();
        r.push(b"abc");
        r.push(&vec![b'x'; RING_BYTES]);
        r.push(b"end");
        let got = r.take();
        assert_eq!(got.len(), RING_BYTES);
        assert!(got.ends_with(b"xxxend"));
        assert!(r.take().is_empty());
    }

    #[test]
    fn a_detached_sink_keeps_output_and_replays_it_once_to_one_terminal() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut s = Sink::detachable(a);
        assert!(s.detach(0));
        assert!(s.send(&ServerMsg::Stdout(b"meanwhile".to_vec())));
        let (c, mut d) = UnixStream::pair().unwrap();
        let first = ServerMsg::Accepted {
            session_id: "s".into(),
        };
        let epoch = s.attach(c, &first).unwrap();
        let (e, _f) = UnixStream::pair().unwrap();
        assert_eq!(s.attach(e, &first), None, "one terminal at a time");
        assert!(s.send(&ServerMsg::Stdout(b"live".to_vec())));
        assert!(!s.detach(epoch - 1), "an older attach detaches nothing");
        assert!(s.detach(epoch));
        let got: Vec<ServerMsg> = std::iter::from_fn(|| read_frame(&mut d).ok()).collect();
        assert_eq!(
            got,
            [
                first,
                ServerMsg::Stdout(b"meanwhile".to_vec()),
                ServerMsg::Stdout(b"live".to_vec())
            ]
        );
    }

    #[test]
    fn a_session_that_ends_with_its_client_keeps_nothing() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut s = Sink::attached(a);
        assert!(!s.detach(0));
        assert!(!s.send(&ServerMsg::Stdout(b"x".to_vec())));
        let (c, _d) = UnixStream::pair().unwrap();
        assert_eq!(s.attach(c, &ServerMsg::Detached), None);
    }
}
