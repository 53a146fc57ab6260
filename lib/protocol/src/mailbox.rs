//! The seam between `lazaret-mailbox` (the confined Escalation Mailbox
//! reader) and the coordinator that starts it.
//!
//! The reader gets its [`ReaderInput`] in a sealed memfd whose SHA-256 is
//! passed on its command line, the request directory as an fd, and one end
//! of a Unix stream socketpair, at the numbers of [`crate::fdno::mailbox`].
//! Over that socket, in length-prefixed postcard frames ([`crate::frame`]),
//! the coordinator tells it which Client Sessions exist ([`ToReader`]) and
//! the reader hands back only typed records ([`FromReader`]): each one
//! either an entry whose signature, generation, age and Session Anchor MAC
//! verified, or a refusal with the entry's escaped name and the reason, for
//! the log.

use crate::escalation::{Body, Envelope};
use serde::{Deserialize, Serialize};

/// Version of [`ReaderInput`]; a reader refuses any other.
pub const INPUT_VERSION: u32 = 1;

/// The largest input memfd the reader accepts.
pub const MAX_INPUT: u64 = 4096;

/// What the reader needs to verify entries of one Domain generation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReaderInput {
    pub version: u32,
    /// The generation's sandbox request-signing public key (Ed25519).
    pub public_key: [u8; 32],
    /// The Agent Sandbox ID every entry must name.
    pub sandbox_id: String,
    /// Entries taken in one pass over the request directory.
    pub max_entries_per_pass: u32,
    /// Unremovable entries remembered (so they are refused only once).
    pub max_stuck: u32,
}

/// Coordinator to reader.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ToReader {
    /// A Client Session was registered; its requests carry a MAC keyed by
    /// `anchor`. Sent before any process of the session exists.
    SessionAdded {
        session_id: String,
        anchor: [u8; 32],
    },
    /// The session ended: its entries no longer verify.
    SessionRemoved { session_id: String },
}

/// Reader to coordinator: one per mailbox entry taken.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum FromReader {
    /// Signed with this generation's key over the exact bytes read, naming
    /// this generation's sandbox, within the age window, and with a valid
    /// MAC of the registered session it names. The envelope lets the
    /// coordinator check the signature and MAC again over the typed body.
    Verified {
        entry: String,
        body: Body,
        envelope: Envelope,
    },
    /// Signed, of this generation, fresh, but naming no session the reader
    /// knows (it ended or never was): the coordinator answers it, so one
    /// Escalation Request ID gets at most one result.
    NoSession {
        entry: String,
        body: Body,
        envelope: Envelope,
    },
    /// Refused; `entry` is the sandbox's name in its escaped form
    /// ([`crate::display::escape`]), `reason` is the reader's.
    Refused { entry: String, reason: String },
}
