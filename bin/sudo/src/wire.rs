//! The one request and its answers, over a `SOCK_SEQPACKET` connection to
//! the abstract socket `@lazaret-sudo`: the client's first message is the
//! request with its three standard descriptors; after it, each message
//! from the client is one byte, a signal to forward; the service's one
//! message is the status, four bytes little-endian.

use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;

/// The abstract socket's name: nothing on a file system to squat or
/// remove.
pub const SOCKET_NAME: &[u8] = b"lazaret-sudo";
/// The largest request: argv, environment and directory together.
pub const MAX_REQUEST: usize = 1 << 20;
/// The caller's standard input, output and error, in that order.
pub const STDIO_FDS: usize = 3;

#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub argv: Vec<Vec<u8>>,
    /// `NAME=value` each.
    pub env: Vec<Vec<u8>>,
    pub cwd: Vec<u8>,
}

/// Why a request cannot be encoded or was not decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("an argument, variable or directory holds a NUL byte")]
    Nul,
    #[error("the command and its environment are {len} bytes, more than {MAX_REQUEST}")]
    TooLarge { len: usize },
    #[error("a request shorter than its header")]
    Short,
    #[error("a request whose last field is not ended")]
    Unended,
    #[error("a request whose fields do not match its counts")]
    Counts,
}

/// `argc` and `envc` (u32 little-endian), then every field NUL-ended.
pub fn encode(r: &Request) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    out.extend_from_slice(&(r.argv.len() as u32).to_le_bytes());
    out.extend_from_slice(&(r.env.len() as u32).to_le_bytes());
    for f in r.argv.iter().chain(&r.env).chain(std::iter::once(&r.cwd)) {
        if f.contains(&0) {
            return Err(WireError::Nul);
        }
        out.extend_from_slice(f);
        out.push(0);
    }
    if out.len() > MAX_REQUEST {
        return Err(WireError::TooLarge { len: out.len() });
    }
    Ok(out)
}

pub fn decode(b: &[u8]) -> Result<Request, WireError> {
    let count = |at: usize| {
        b.get(at..at + 4)
            .and_then(|c| <[u8; 4]>::try_from(c).ok())
            .map(|c| u32::from_le_bytes(c) as usize)
            .ok_or(WireError::Short)
    };
    let (argc, envc) = (count(0)?, count(4)?);
    let fields: Vec<&[u8]> = match b[8..].strip_suffix(&[0]) {
        Some(body) => body.split(|&c| c == 0).collect(),
        None => return Err(WireError::Unended),
    };
    if argc == 0 || fields.len() != argc.saturating_add(envc).saturating_add(1) {
        return Err(WireError::Counts);
    }
    let owned = |s: &[&[u8]]| s.iter().map(|f| f.to_vec()).collect::<Vec<_>>();
    Ok(Request {
        argv: owned(&fields[..argc]),
        env: owned(&fields[argc..argc + envc]),
        cwd: fields[argc + envc].to_vec(),
    })
}

pub fn address() -> rustix::io::Result<SocketAddrUnix> {
    SocketAddrUnix::new_abstract_name(SOCKET_NAME)
}

pub fn socket() -> rustix::io::Result<OwnedFd> {
    rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
}

pub fn send(fd: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> rustix::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(STDIO_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(rustix::io::Errno::INVAL);
    }
    loop {
        match rustix::net::sendmsg(
            fd,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e),
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(rustix::io::Errno::MSGSIZE),
        }
    }
}

/// One message of at most `limit` bytes and its descriptors; an empty
/// one without descriptors is the other end gone.
pub fn recv(fd: BorrowedFd<'_>, limit: usize) -> rustix::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; limit + 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(STDIO_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            fd,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if got.bytes > limit
        || got
            .flags
            .intersects(rustix::net::ReturnFlags::TRUNC | rustix::net::ReturnFlags::CTRUNC)
    {
        return Err(rustix::io::Errno::MSGSIZE);
    }
    buf.truncate(got.bytes);
    Ok((buf, fds))
}

/// The status word: the exit code, or 128 + the signal that ended it.
pub fn status_bytes(code: i32) -> [u8; 4] {
    code.to_le_bytes()
}

pub fn status_of(b: &[u8]) -> Option<i32> {
    b.try_into().ok().map(i32::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            argv: vec![b"env".to_vec(), b"HOME=/root".to_vec(), b"id".to_vec()],
            env: vec![b"PATH=/usr/bin:/bin".to_vec(), b"EMPTY=".to_vec()],
            cwd: b"/workspace/sub dir".to_vec(),
        }
    }

    #[test]
    fn a_request_round_trips() {
        assert_eq!(decode(&encode(&req()).unwrap()).unwrap(), req());
        let mut empty_field = req();
        empty_field.argv.push(Vec::new());
        assert_eq!(decode(&encode(&empty_field).unwrap()).unwrap(), empty_field);
    }

    #[test]
    fn forged_requests_are_refused() {
        let good = encode(&req()).unwrap();
        let mut wrong_count = good.clone();
        wrong_count[0] = 9;
        let mut no_argv = good.clone();
        no_argv[..4].copy_from_slice(&0u32.to_le_bytes());
        no_argv[4..8].copy_from_slice(&4u32.to_le_bytes());
        for bad in [
            &good[..3],
            &good[..good.len() - 1],
            &wrong_count[..],
            &no_argv[..],
            &[0xff; 8][..],
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        let mut nul = req();
        nul.argv[0] = b"e\0v".to_vec();
        assert!(encode(&nul).is_err());
        let mut huge = req();
        huge.env.push(vec![b'x'; MAX_REQUEST]);
        assert!(encode(&huge).is_err());
    }

    #[test]
    fn status_words() {
        assert_eq!(status_of(&status_bytes(130)), Some(130));
        assert_eq!(status_of(&[1, 2]), None);
    }
}
