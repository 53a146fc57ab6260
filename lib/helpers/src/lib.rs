//! Building blocks shared by Lazaret's binaries. Raw system calls live here,
//! each module small enough to audit on its own.

pub mod channel;
pub mod child;
pub mod fault;
pub mod fds;
pub mod hostpath;
pub mod limits;
pub mod logfile;
pub mod memfd;
pub mod pidfd;
pub mod runsc;
pub mod sockpath;
pub mod storage;
pub mod sync;
pub mod timeline;
pub mod userns;
