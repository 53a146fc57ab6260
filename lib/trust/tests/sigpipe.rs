//! A `lazaret` command other than `run` restores SIGPIPE's default
//! action, so a write to a socket whose peer left would kill it. Every
//! write of the control connection (registration, handshake, the pump's
//! TLS records and plaintext) goes through `NoSigPipe`: the peer's
//! departure is an EPIPE error. With the default action restored in this
//! test process, a SIGPIPE would end the test binary.

use lazaret_trust::tls::NoSigPipe;
use std::io::Write;
use std::os::unix::net::UnixStream;

#[test]
fn a_write_to_a_peer_that_left_is_an_error_not_a_signal() {
    // SAFETY: SIG_DFL is a valid action; this test binary has one test.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let (a, b) = UnixStream::pair().unwrap();
    drop(b);
    let e = NoSigPipe(&a).write(b"close_notify").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
}
