//! Joins a TLS connection to a plain socket pair, so that code written for
//! a blocking `UnixStream` (a reader thread and a shared writer) runs
//! unchanged inside TLS: one thread owns the TLS state and moves bytes
//! both ways, with backpressure (it reads a side only when the bytes it
//! holds for the other side are delivered).

use rustix::event::{poll, PollFd, PollFlags};
use std::io::{ErrorKind, Read, Write};
use std::ops::ControlFlow;
use std::os::unix::net::UnixStream;

use crate::tls::NoSigPipe;

const CHUNK: usize = 16 * 1024;

/// Starts the pump; the returned stream is the plain end.
pub fn spawn(conn: rustls::Connection, sock: UnixStream) -> std::io::Result<UnixStream> {
    let (ours, app) = UnixStream::pair()?;
    sock.set_nonblocking(true)?;
    sock.set_read_timeout(None)?;
    ours.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("tls-pump".into())
        .spawn(move || run(conn, sock, ours))?;
    Ok(app)
}

fn would_block(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

fn run(conn: rustls::Connection, sock: UnixStream, plain: UnixStream) {
    let mut p = Pump {
        conn,
        sock,
        plain,
        to_plain: Vec::new(),
        tls_eof: false,
        plain_eof: false,
        buf: vec![0u8; CHUNK],
    };
    // The handshake may have read the peer's first bytes along with its
    // last flight: they wait in the TLS state, not in the socket.
    match p.conn.process_new_packets() {
        Ok(state) => {
            p.tls_eof = drain(&mut p.conn, &mut p.buf, &mut p.to_plain) || state.peer_has_closed();
        }
        Err(_) => {
            let _ = p.conn.write_tls(&mut NoSigPipe(&p.sock));
            return;
        }
    }
    while p.step().is_continue() {}
}

/// The pump's state: the TLS connection over `sock`, the plain end, and
/// the peer's plaintext not yet delivered to it.
struct Pump {
    conn: rustls::Connection,
    sock: UnixStream,
    plain: UnixStream,
    to_plain: Vec<u8>,
    tls_eof: bool,
    plain_eof: bool,
    buf: Vec<u8>,
}

impl Pump {
    /// One round: deliver what is held, wait, then read what is ready;
    /// `Break` when the pump is done.
    fn step(&mut self) -> ControlFlow<()> {
        self.flush()?;
        if self.tls_eof && self.to_plain.is_empty() {
            // The peer is done: the application sees end of file.
            return ControlFlow::Break(());
        }
        if self.plain_eof && !self.conn.wants_write() && self.tls_eof {
            return ControlFlow::Break(());
        }
        let (sock_ev, plain_ev) = self.interest();
        let mut fds = [
            PollFd::new(&self.sock, sock_ev),
            PollFd::new(&self.plain, plain_ev),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return ControlFlow::Continue(()),
            Err(_) => return ControlFlow::Break(()),
        }
        let (sock_rev, plain_rev) = (fds[0].revents(), fds[1].revents());
        if self.plain_eof && plain_rev.contains(PollFlags::HUP) {
            // The application closed its end entirely: nobody is left to
            // give the peer's bytes to.
            return ControlFlow::Break(());
        }
        if sock_rev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) && !self.tls_eof {
            self.read_tls()?;
        }
        if plain_rev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) && !self.plain_eof
        {
            self.read_plain()?;
        }
        ControlFlow::Continue(())
    }

    /// Writes what TLS wants sent and what the plain end is owed, as far
    /// as the sockets take it.
    fn flush(&mut self) -> ControlFlow<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut NoSigPipe(&self.sock)) {
                Ok(_) => {}
                Err(e) if would_block(&e) => break,
                Err(_) => return ControlFlow::Break(()),
            }
        }
        while !self.to_plain.is_empty() {
            match NoSigPipe(&self.plain).write(&self.to_plain) {
                Ok(n) => {
                    self.to_plain.drain(..n);
                }
                Err(e) if would_block(&e) => break,
                Err(_) => return ControlFlow::Break(()),
            }
        }
        ControlFlow::Continue(())
    }

    /// What to wait for on each side: a side is read only when what is
    /// held for the other is delivered (the backpressure).
    fn interest(&self) -> (PollFlags, PollFlags) {
        let mut sock_ev = PollFlags::empty();
        if !self.tls_eof && self.to_plain.is_empty() {
            sock_ev |= PollFlags::IN;
        }
        if self.conn.wants_write() {
            sock_ev |= PollFlags::OUT;
        }
        let mut plain_ev = PollFlags::empty();
        if !self.plain_eof && !self.conn.wants_write() {
            plain_ev |= PollFlags::IN;
        }
        if !self.to_plain.is_empty() {
            plain_ev |= PollFlags::OUT;
        }
        (sock_ev, plain_ev)
    }

    fn read_tls(&mut self) -> ControlFlow<()> {
        match self.conn.read_tls(&mut self.sock) {
            Ok(0) => self.tls_eof = true,
            Ok(_) => match self.conn.process_new_packets() {
                Ok(state) => {
                    if drain(&mut self.conn, &mut self.buf, &mut self.to_plain)
                        || state.peer_has_closed()
                    {
                        self.tls_eof = true;
                    }
                }
                Err(_) => {
                    // rustls queued an alert for the peer; send it.
                    let _ = self.conn.write_tls(&mut NoSigPipe(&self.sock));
                    return ControlFlow::Break(());
                }
            },
            Err(e) if would_block(&e) => {}
            Err(_) => self.tls_eof = true,
        }
        ControlFlow::Continue(())
    }

    fn read_plain(&mut self) -> ControlFlow<()> {
        match self.plain.read(&mut self.buf) {
            Ok(0) => {
                self.plain_eof = true;
                self.conn.send_close_notify();
            }
            Ok(n) => {
                if self.conn.writer().write_all(&self.buf[..n]).is_err() {
                    return ControlFlow::Break(());
                }
            }
            Err(e) if would_block(&e) => {}
            Err(_) => {
                self.plain_eof = true;
                self.conn.send_close_notify();
            }
        }
        ControlFlow::Continue(())
    }
}

/// Moves the plaintext rustls holds to `to_plain`; true at the peer's end.
fn drain(conn: &mut rustls::Connection, buf: &mut [u8], to_plain: &mut Vec<u8>) -> bool {
    loop {
        match conn.reader().read(buf) {
            Ok(0) => return true,
            Ok(n) => to_plain.extend_from_slice(&buf[..n]),
            Err(e) if would_block(&e) => return false,
            Err(_) => return true,
        }
    }
}
