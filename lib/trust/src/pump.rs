//! Joins a TLS connection to a plain socket pair, so that code written for
//! a blocking `UnixStream` (a reader thread and a shared writer) runs
//! unchanged inside TLS: one thread owns the TLS state and moves bytes
//! both ways, with backpressure (it reads a side only when the bytes it
//! holds for the other side are delivered).

use rustix::event::{poll, PollFd, PollFlags};
use std::io::{ErrorKind, Read, Write};
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

fn run(mut conn: rustls::Connection, mut sock: UnixStream, mut plain: UnixStream) {
    let mut to_plain: Vec<u8> = Vec::new();
    let mut tls_eof;
    let mut plain_eof = false;
    let mut buf = vec![0u8; CHUNK];
    // The handshake may have read the peer's first bytes along with its
    // last flight: they wait in the TLS state, not in the socket.
    match conn.process_new_packets() {
        Ok(state) => {
            tls_eof = drain(&mut conn, &mut buf, &mut to_plain) || state.peer_has_closed();
        }
        Err(_) => {
            let _ = conn.write_tls(&mut NoSigPipe(&sock));
            return;
        }
    }
    loop {
        while conn.wants_write() {
            match conn.write_tls(&mut NoSigPipe(&sock)) {
                Ok(_) => {}
                Err(e) if would_block(&e) => break,
                Err(_) => return,
            }
        }
        while !to_plain.is_empty() {
            match NoSigPipe(&plain).write(&to_plain) {
                Ok(n) => {
                    to_plain.drain(..n);
                }
                Err(e) if would_block(&e) => break,
                Err(_) => return,
            }
        }
        if tls_eof && to_plain.is_empty() {
            // The peer is done: the application sees end of file.
            return;
        }
        if plain_eof && !conn.wants_write() && tls_eof {
            return;
        }
        let mut sock_ev = PollFlags::empty();
        if !tls_eof && to_plain.is_empty() {
            sock_ev |= PollFlags::IN;
        }
        if conn.wants_write() {
            sock_ev |= PollFlags::OUT;
        }
        let mut plain_ev = PollFlags::empty();
        if !plain_eof && !conn.wants_write() {
            plain_ev |= PollFlags::IN;
        }
        if !to_plain.is_empty() {
            plain_ev |= PollFlags::OUT;
        }
        let mut fds = [PollFd::new(&sock, sock_ev), PollFd::new(&plain, plain_ev)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        let (sock_rev, plain_rev) = (fds[0].revents(), fds[1].revents());
        if plain_eof && plain_rev.contains(PollFlags::HUP) {
            // The application closed its end entirely: nobody is left to
            // give the peer's bytes to.
            return;
        }
        if sock_rev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) && !tls_eof {
            match conn.read_tls(&mut sock) {
                Ok(0) => tls_eof = true,
                Ok(_) => match conn.process_new_packets() {
                    Ok(state) => {
                        if drain(&mut conn, &mut buf, &mut to_plain) || state.peer_has_closed() {
                            tls_eof = true;
                        }
                    }
                    Err(_) => {
                        // rustls queued an alert for the peer; send it.
                        let _ = conn.write_tls(&mut NoSigPipe(&sock));
                        return;
                    }
                },
                Err(e) if would_block(&e) => {}
                Err(_) => tls_eof = true,
            }
        }
        if plain_rev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) && !plain_eof {
            match plain.read(&mut buf) {
                Ok(0) => {
                    plain_eof = true;
                    conn.send_close_notify();
                }
                Ok(n) => {
                    if conn.writer().write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if would_block(&e) => {}
                Err(_) => {
                    plain_eof = true;
                    conn.send_close_notify();
                }
            }
        }
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
