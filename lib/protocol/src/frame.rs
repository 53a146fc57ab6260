//! Length-prefixed postcard frames over a byte stream.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of
//! postcard. The length is bounded before anything is allocated.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{self, Read, Write};

/// The largest frame either side accepts: room for a host command's
/// outcome (two streams of [`crate::escalation::MAX_OUTPUT`]), which the
/// CLI that ran it sends back to the coordinator.
pub const MAX_FRAME: usize = crate::escalation::MAX_RESULT;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("malformed record: {0}")]
    Decode(#[from] postcard::Error),
}

pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = postcard::to_stdvec(msg)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    if let Err(e) = r.read_exact(&mut len) {
        return Err(if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Closed
        } else {
            e.into()
        });
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(postcard::from_bytes(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ServerMsg;

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &ServerMsg::Exit { status: 7 }).unwrap();
        let got: ServerMsg = read_frame(&mut buf.as_slice()).unwrap();
        assert!(matches!(got, ServerMsg::Exit { status: 7 }));
    }

    #[test]
    fn oversized_length_is_refused_before_allocation() {
        let buf = u32::MAX.to_le_bytes();
        let err = read_frame::<_, ServerMsg>(&mut buf.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge(_)));
    }

    #[test]
    fn eof_is_closed() {
        let err = read_frame::<_, ServerMsg>(&mut [].as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Closed));
    }
}
