//! A typed record channel over `socketpair(AF_UNIX, SOCK_SEQPACKET)`: one
//! postcard record per datagram, file descriptors beside it (SCM_RIGHTS).
//!
//! Datagram boundaries are the framing, so nothing is parsed but postcard.
//! A record or a descriptor list the receiver's buffers cut short is an
//! error, never a partial record; the descriptors received with a refused
//! record are closed when the error drops.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The most descriptors one record carries.
pub const MAX_FDS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the channel is closed")]
    Closed,
    #[error("a record of {0} bytes exceeds the limit of {1}")]
    TooLarge(usize, usize),
    #[error("a record arrived truncated")]
    Truncated,
    #[error("a record carries {got} descriptors where {expected} were expected")]
    Descriptors { got: usize, expected: usize },
    #[error("malformed record: {0}")]
    Decode(#[from] postcard::Error),
    #[error("channel i/o: {0}")]
    Io(#[from] rustix::io::Errno),
}

/// Both ends of a new channel, close-on-exec.
pub fn pair() -> Result<(Channel, Channel), ChannelError> {
    let (a, b) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    Ok((Channel { fd: a }, Channel { fd: b }))
}

/// One end of a channel. Sends and receives are whole datagrams, so several
/// threads may send on one end without interleaving.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    /// An inherited or received end.
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            fd: self.fd.try_clone()?,
        })
    }

    /// Sends `msg` with `fds` (at most [`MAX_FDS`]) as one datagram.
    pub fn send<T: Serialize>(
        &self,
        msg: &T,
        fds: &[BorrowedFd<'_>],
        limit: usize,
    ) -> Result<(), ChannelError> {
        let body = postcard::to_stdvec(msg)?;
        if body.len() > limit {
            return Err(ChannelError::TooLarge(body.len(), limit));
        }
        if fds.len() > MAX_FDS {
            return Err(ChannelError::Descriptors {
                got: fds.len(),
                expected: MAX_FDS,
            });
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(rustix::net::SendAncillaryMessage::ScmRights(fds)) {
            return Err(ChannelError::Descriptors {
                got: fds.len(),
                expected: MAX_FDS,
            });
        }
        let sent = loop {
            match rustix::net::sendmsg(
                &self.fd,
                &[IoSlice::new(&body)],
                &mut control,
                rustix::net::SendFlags::NOSIGNAL,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::PIPE) => return Err(ChannelError::Closed),
                other => break other?,
            }
        };
        if sent != body.len() {
            return Err(ChannelError::Truncated);
        }
        Ok(())
    }

    /// Receives one datagram: the record and its descriptors (close-on-exec).
    /// `Closed` when the other end is gone.
    pub fn recv<T: DeserializeOwned>(
        &self,
        limit: usize,
    ) -> Result<(T, Vec<OwnedFd>), ChannelError> {
        // One byte more than the limit tells an over-long record apart.
        let mut buf = vec![0u8; limit + 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                &self.fd,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                rustix::net::RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other?,
            }
        };
        // Take ownership of every descriptor first, so that they close
        // on every error path below.
        let mut fds = Vec::new();
        for m in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if got.bytes == 0 && fds.is_empty() {
            return Err(ChannelError::Closed);
        }
        if got
            .flags
            .intersects(rustix::net::ReturnFlags::TRUNC | rustix::net::ReturnFlags::CTRUNC)
        {
            return Err(ChannelError::Truncated);
        }
        if got.bytes > limit {
            return Err(ChannelError::TooLarge(got.bytes, limit));
        }
        let msg = postcard::from_bytes(&buf[..got.bytes])?;
        Ok((msg, fds))
    }

    /// [`Self::recv`], then checks the descriptor count `expected` says.
    pub fn recv_checked<T: DeserializeOwned>(
        &self,
        limit: usize,
        expected: impl Fn(&T) -> usize,
    ) -> Result<(T, Vec<OwnedFd>), ChannelError> {
        let (msg, fds) = self.recv(limit)?;
        let want = expected(&msg);
        if fds.len() != want {
            return Err(ChannelError::Descriptors {
                got: fds.len(),
                expected: want,
            });
        }
        Ok((msg, fds))
    }
}

impl AsFd for Channel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::supervisor::FromSupervisor;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_pidfd_travels_as_a_descriptor() {
        let (a, b) = pair().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pidfd = crate::pidfd::of_child(&child).unwrap();
        a.send(&FromSupervisor::Ready, &[pidfd.as_fd()], 1024)
            .unwrap();
        drop(pidfd);
        let (msg, fds) = b
            .recv_checked::<FromSupervisor>(1024, FromSupervisor::fd_count)
            .unwrap();
        assert_eq!(msg, FromSupervisor::Ready);
        assert_eq!(fds.len(), 1);
        // The received descriptor is a pidfd of that child: killing
        // through it ends the child.
        crate::pidfd::send_signal(&fds[0], rustix::process::Signal::KILL).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
        assert_ne!(fds[0].as_raw_fd(), -1);
    }

    #[test]
    fn wrong_descriptor_counts_and_large_records_are_refused() {
        let (a, b) = pair().unwrap();
        a.send(&FromSupervisor::Ready, &[], 1024).unwrap();
        assert!(matches!(
            b.recv_checked::<FromSupervisor>(1024, FromSupervisor::fd_count),
            Err(ChannelError::Descriptors {
                got: 0,
                expected: 1
            })
        ));
        let big = FromSupervisor::StartFailed {
            reason: "x".repeat(300),
        };
        a.send(&big, &[], 1024).unwrap();
        assert!(matches!(
            b.recv::<FromSupervisor>(100),
            Err(ChannelError::Truncated | ChannelError::TooLarge(..))
        ));
        assert!(matches!(
            a.send(&big, &[], 100),
            Err(ChannelError::TooLarge(..))
        ));
        drop(a);
        assert!(matches!(
            b.recv::<FromSupervisor>(1024),
            Err(ChannelError::Closed)
        ));
    }
}
