//! Escalation Mailbox records (spec 3.6).
//!
//! A request file is `signature (64) || session MAC (32) || body`, where
//! body is a postcard [`Body`]. The signature is Ed25519 by the Domain
//! generation's sandbox request-signing key; the MAC is HMAC-SHA256 keyed
//! by the requesting session's Session Anchor. Both cover the exact body
//! bytes, and the mailbox reader (`lazaret-mailbox`) checks the signature
//! over the bytes it read before it parses anything. Fixed offsets: the
//! envelope needs no parser.
//!
//! Results are written by the coordinator into a directory the sandbox
//! can only read, and signed by the coordinator's protocol key
//! ([`crate::trust::result`]): a root process inside that mounts over the
//! directory still cannot make `lazaret-escalate` accept a result.

use ed25519_compact::{PublicKey, SecretKey, Signature};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// 2: requests carry the [`Requester`] they claim.
pub const VERSION: u32 = 2;
/// The largest request file the coordinator reads.
pub const MAX_REQUEST: usize = 64 * 1024;
/// The largest result file the client reads.
pub const MAX_RESULT: usize = 8 << 20;
/// Output of a host command kept in a result, per stream.
pub const MAX_OUTPUT: usize = 2 << 20;
/// A request older (or newer) than this is refused.
pub const MAX_AGE_MS: u64 = 5 * 60 * 1000;

/// Bounds the coordinator keeps per Domain, whatever the sandbox sends
/// (see the README's security model). Over one, a request is refused with
/// [`Outcome::Refused`] (exit [`exit::REFUSED`]) at once, as the
/// coordinator takes the reader's record: no thread is started for it.
pub mod bounds {
    /// Accepted requests not yet resolved, in the whole Domain.
    pub const MAX_PENDING: usize = 64;
    /// Accepted requests not yet resolved, naming one Client Session.
    pub const MAX_PENDING_PER_SESSION: usize = 16;
    /// Escalation Request IDs remembered against replay. An ID is kept
    /// until its request's creation time leaves the age window
    /// ([`super::MAX_AGE_MS`]), after which the request would be refused
    /// as expired anyway.
    pub const MAX_SEEN: usize = 65_536;
    /// Cancellations read before their request, remembered (by age too).
    pub const MAX_EARLY_CANCELS: usize = 1_024;
    /// Mailbox entries taken in one pass over the request directory.
    pub const MAX_ENTRIES_PER_POLL: usize = 256;
    /// Escalation Results kept in the result directory; the oldest go
    /// first, and none is kept longer than [`RESULT_KEEP_MS`].
    pub const MAX_RESULTS: usize = 4_096;
    pub const RESULT_KEEP_MS: u64 = 10 * 60 * 1000;
    /// `escalations.log` is rotated when it reaches this size ...
    pub const LOG_MAX_BYTES: u64 = 1 << 20;
    /// ... into `escalations.log.1` (newest) to `escalations.log.N`.
    pub const LOG_ROTATIONS: usize = 4;
}

/// The Domain's escalation record, in the Domain Root.
pub const LOG_FILE: &str = "escalations.log";

/// The record's files under `root`, oldest first: the rotations from
/// `escalations.log.N` down to `.1`, then `escalations.log` itself.
pub fn log_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    crate::logs::files_of(root, LOG_FILE, bounds::LOG_ROTATIONS)
}

/// One line of the escalation record (`escalations.log`), written as
/// JSON: `time_unix_ms`, `sandbox_id`, then the event's fields, with the
/// event's name in `event`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogRecord {
    pub time_unix_ms: u64,
    pub sandbox_id: String,
    #[serde(flatten)]
    pub event: LogEvent,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LogEvent {
    /// A mailbox entry refused before anyone was asked.
    Refused {
        /// The entry's name, escaped ([`crate::display::escape`]).
        entry: String,
        reason: String,
    },
    /// An accepted request reached its Escalation Result.
    Decision {
        request_id: String,
        session_id: String,
        argv: Vec<String>,
        justification: String,
        requester_pid: u32,
        requester_cmdline: Vec<String>,
        /// The vector that ran (the developer may have edited it).
        ran_argv: Option<Vec<String>>,
        decided_by: String,
        /// `completed, status N`, `denied`, `timed out`, ...
        result: String,
    },
    /// The Escalation Mailbox reader ended: no request is read any more.
    ReaderExited { reason: String },
}

impl Outcome {
    /// The outcome in the record's words.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Completed { status, .. } => format!("completed, status {status}"),
            Outcome::Denied { .. } => "denied".into(),
            Outcome::TimedOut => "timed out".into(),
            Outcome::Cancelled => "cancelled".into(),
            Outcome::Failed { reason } => format!("failed: {reason}"),
            Outcome::Refused { reason } => format!("refused: {reason}"),
        }
    }
}

const SIG: usize = 64;
const MAC: usize = 32;

/// Where things are inside the sandbox (the fixed control mount).
pub mod paths {
    pub const CONTROL: &str = "/.lazaret";
    pub const KEY: &str = "/.lazaret/request-key";
    pub const SANDBOX_ID: &str = "/.lazaret/sandbox-id";
    /// The published Trust Anchor (public): results are verified with it.
    pub const TRUST: &str = "/.lazaret/trust";
    /// The Agent Sandbox's certificate (role AgentSandbox) for the
    /// request-signing key; named as in the control directory.
    pub const SANDBOX_CERTIFICATE_NAME: &str = "sandbox-certificate";
    pub const REQUESTS: &str = "/.lazaret/mailbox/requests";
    pub const RESULTS: &str = "/.lazaret/mailbox/results";
    pub const BIN: &str = "/.lazaret/bin";
    /// A short text for agents about `lazaret-escalate` (for their
    /// `AGENTS.md` or `CLAUDE.md`), in a layer of Lazaret's above the image.
    pub const AGENTS_TEXT: &str = "/usr/share/lazaret/AGENTS.md";
    pub const SESSION_ID_ENV: &str = "LAZARET_SESSION_ID";
    pub const SESSION_ANCHOR_ENV: &str = "LAZARET_SESSION_ANCHOR";
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    pub argv: Vec<String>,
    pub justification: String,
    /// Working directory of the caller inside the sandbox, for the prompt.
    pub cwd: String,
    /// 0: no timeout.
    pub timeout_secs: u32,
    /// The process that asked, as the requesting client claims it. Every
    /// process inside is root and can read every other's environment, so
    /// nothing proves this, nor which Client Session it belongs to: the
    /// prompt shows it marked as claimed.
    pub requester: Requester,
}

/// Who asked, in the sandbox's words: the parent of `lazaret-escalate`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Requester {
    /// Its PID inside the sandbox.
    pub pid: u32,
    /// Its command line (`/proc/<pid>/cmdline`), bounded by the client to
    /// [`Requester::MAX_ARGS`] arguments and [`Requester::MAX_BYTES`].
    pub cmdline: Vec<String>,
}

impl Requester {
    pub const MAX_ARGS: usize = 32;
    pub const MAX_BYTES: usize = 2048;

    /// From a raw `/proc/<pid>/cmdline` (NUL-separated), within the bounds.
    pub fn from_cmdline(pid: u32, raw: &[u8]) -> Self {
        let mut cmdline = Vec::new();
        let mut used = 0;
        for arg in raw.split(|b| *b == 0) {
            if cmdline.len() == Self::MAX_ARGS || used >= Self::MAX_BYTES {
                break;
            }
            let arg = &arg[..arg.len().min(Self::MAX_BYTES - used)];
            used += arg.len();
            cmdline.push(String::from_utf8_lossy(arg).into_owned());
        }
        // A trailing NUL ends the last argument; it starts none.
        if raw.last() == Some(&0) && cmdline.last().is_some_and(String::is_empty) {
            cmdline.pop();
        }
        Self { pid, cmdline }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Kind {
    Request(Request),
    Cancel,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Body {
    pub version: u32,
    /// The Agent Sandbox ID: binds the record to one Domain generation.
    pub sandbox_id: String,
    pub session_id: String,
    /// Escalation Request ID, random.
    pub request_id: [u8; 16],
    pub created_unix_ms: u64,
    pub kind: Kind,
}

impl Body {
    pub fn request_hex(&self) -> String {
        hex::encode(self.request_id)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record of {0} bytes is shorter than its signature and MAC")]
    Truncated(usize),
    #[error("record of {0} bytes exceeds {MAX_REQUEST}")]
    TooLarge(usize),
    #[error("signature does not verify with this generation's key")]
    BadSignature,
    #[error("session MAC does not verify with the session's anchor")]
    BadMac,
    #[error("malformed body: {0}")]
    Malformed(String),
}

type HmacSha256 = Hmac<Sha256>;

/// The session MAC keyed with `anchor`.
#[allow(clippy::expect_used)] // Invariant: HMAC takes a key of any length.
fn keyed(anchor: &[u8; 32]) -> HmacSha256 {
    HmacSha256::new_from_slice(anchor).expect("any key length")
}

fn mac(anchor: &[u8; 32], body: &[u8]) -> [u8; 32] {
    let mut m = keyed(anchor);
    m.update(body);
    m.finalize().into_bytes().into()
}

/// Signs and MACs a body into request-file bytes.
pub fn seal(body: &Body, key: &SecretKey, anchor: &[u8; 32]) -> Vec<u8> {
    // Invariant: a `Body` (plain fields, derived `Serialize`) always
    // encodes into a `Vec`.
    #[allow(clippy::expect_used)]
    let bytes = postcard::to_stdvec(body).expect("postcard");
    let sig = key.sign(&bytes, None);
    let mut out = Vec::with_capacity(SIG + MAC + bytes.len());
    out.extend_from_slice(sig.as_ref());
    out.extend_from_slice(&mac(anchor, &bytes));
    out.extend_from_slice(&bytes);
    out
}

/// A record whose signature verified; the MAC is checked once the session
/// is known, with [`Verified::check_session`].
pub struct Verified {
    pub body: Body,
    sig: [u8; SIG],
    mac: [u8; 32],
    bytes: Vec<u8>,
}

impl Verified {
    pub fn check_session(&self, anchor: &[u8; 32]) -> Result<(), RecordError> {
        let mut m = keyed(anchor);
        m.update(&self.bytes);
        m.verify_slice(&self.mac).map_err(|_| RecordError::BadMac)
    }

    /// The signature and MAC, to travel beside the typed body.
    pub fn envelope(&self) -> Envelope {
        Envelope {
            signature: self.sig.to_vec(),
            mac: self.mac,
        }
    }
}

/// A record's signature and MAC apart from its bytes. The body's encoding
/// is canonical ([`open`] refuses any other), so whoever holds the typed
/// [`Body`] can check them again over its own encoding of it, without
/// the sandbox's bytes: the coordinator does, so a reader that verified
/// wrongly cannot make it act on a record nobody signed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Envelope {
    pub signature: Vec<u8>,
    pub mac: [u8; 32],
}

impl Envelope {
    /// Checks the signature over `body`'s encoding with `key`, and, when
    /// `anchor` is given, the session MAC.
    pub fn check(
        &self,
        body: &Body,
        key: &PublicKey,
        anchor: Option<&[u8; 32]>,
    ) -> Result<(), RecordError> {
        let bytes = postcard::to_stdvec(body).map_err(|e| RecordError::Malformed(e.to_string()))?;
        let sig = Signature::from_slice(&self.signature).map_err(|_| RecordError::BadSignature)?;
        key.verify(&bytes, &sig)
            .map_err(|_| RecordError::BadSignature)?;
        if let Some(anchor) = anchor {
            let mut m = keyed(anchor);
            m.update(&bytes);
            m.verify_slice(&self.mac).map_err(|_| RecordError::BadMac)?;
        }
        Ok(())
    }
}

/// Verifies the signature over the exact bytes, then parses the body.
pub fn open(record: &[u8], key: &PublicKey) -> Result<Verified, RecordError> {
    if record.len() > MAX_REQUEST {
        return Err(RecordError::TooLarge(record.len()));
    }
    if record.len() <= SIG + MAC {
        return Err(RecordError::Truncated(record.len()));
    }
    let (sig, rest) = record.split_at(SIG);
    let Some((mac, bytes)) = rest.split_first_chunk::<MAC>() else {
        return Err(RecordError::Truncated(record.len()));
    };
    let sig = Signature::from_slice(sig).map_err(|_| RecordError::BadSignature)?;
    key.verify(bytes, &sig)
        .map_err(|_| RecordError::BadSignature)?;
    let body: Body =
        postcard::from_bytes(bytes).map_err(|e| RecordError::Malformed(e.to_string()))?;
    if body.version != VERSION {
        return Err(RecordError::Malformed(format!("version {}", body.version)));
    }
    // One encoding per body (no trailing bytes, no overlong integers), so
    // the typed body alone carries what was signed (see [`Envelope`]).
    if postcard::to_stdvec(&body).ok().as_deref() != Some(bytes) {
        return Err(RecordError::Malformed("not in canonical encoding".into()));
    }
    Ok(Verified {
        body,
        sig: *sig,
        mac: *mac,
        bytes: bytes.to_vec(),
    })
}

/// The terminal state of an accepted request.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Outcome {
    Completed {
        status: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        /// Output beyond [`MAX_OUTPUT`] per stream was dropped.
        truncated: bool,
    },
    Denied {
        reason: String,
    },
    TimedOut,
    Cancelled,
    Failed {
        reason: String,
    },
    /// Refused before anyone was asked because a bound of the Domain was
    /// reached ([`bounds`]); it may succeed later. Nothing ran. (A request
    /// nobody can be asked about, its session having no terminal or having
    /// ended, is [`Outcome::Denied`].)
    Refused {
        reason: String,
    },
}

/// The Escalation Result, at `results/<request-id-hex>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResultRecord {
    pub request_id: [u8; 16],
    pub outcome: Outcome,
}

/// Exit codes of `lazaret-escalate` for outcomes other than a completed
/// command (which gives the command's own status).
pub mod exit {
    pub const DENIED: i32 = 77;
    pub const TIMED_OUT: i32 = 124;
    pub const FAILED: i32 = 125;
    pub const CANCELLED: i32 = 130;
    /// Refused without asking anyone ([`super::Outcome::Refused`]).
    pub const REFUSED: i32 = 75;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_compact::KeyPair;

    fn body() -> Body {
        Body {
            version: VERSION,
            sandbox_id: "s".into(),
            session_id: "sess".into(),
            request_id: [7; 16],
            created_unix_ms: 1,
            kind: Kind::Request(Request {
                argv: vec!["git".into(), "push".into()],
                justification: "j".into(),
                cwd: "/workspace".into(),
                timeout_secs: 0,
                requester: Requester {
                    pid: 42,
                    cmdline: vec!["bash".into()],
                },
            }),
        }
    }

    #[test]
    fn round_trip_and_tampering() {
        let kp = KeyPair::generate();
        let anchor = [1u8; 32];
        let rec = seal(&body(), &kp.sk, &anchor);
        let v = open(&rec, &kp.pk).unwrap();
        assert_eq!(v.body, body());
        v.check_session(&anchor).unwrap();
        assert_eq!(v.check_session(&[2u8; 32]), Err(RecordError::BadMac));
        // One flipped bit anywhere in the body breaks the signature.
        let mut bad = rec.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(open(&bad, &kp.pk), Err(RecordError::BadSignature)));
        // Another generation's key.
        let other = KeyPair::generate();
        assert!(matches!(
            open(&rec, &other.pk),
            Err(RecordError::BadSignature)
        ));
        assert!(matches!(
            open(&rec[..50], &kp.pk),
            Err(RecordError::Truncated(50))
        ));
        assert!(matches!(
            open(&vec![0; MAX_REQUEST + 1], &kp.pk),
            Err(RecordError::TooLarge(_))
        ));
        assert!(open(b"garbage garbage garbage garbage garbage garbage garbage garbage garbage garbage garbage garbage garbage", &kp.pk).is_err());
    }

    #[test]
    fn the_envelope_checks_the_typed_body_again_and_encodings_are_canonical() {
        let kp = KeyPair::generate();
        let anchor = [1u8; 32];
        let v = open(&seal(&body(), &kp.sk, &anchor), &kp.pk).unwrap();
        let env = v.envelope();
        env.check(&body(), &kp.pk, Some(&anchor)).unwrap();
        env.check(&body(), &kp.pk, None).unwrap();
        let mut other = body();
        other.session_id = "other".into();
        assert_eq!(
            env.check(&other, &kp.pk, None),
            Err(RecordError::BadSignature)
        );
        assert_eq!(
            env.check(&body(), &kp.pk, Some(&[2; 32])),
            Err(RecordError::BadMac)
        );
        // Signed bytes with a trailing byte decode to the same body: refused.
        let mut bytes = postcard::to_stdvec(&body()).unwrap();
        bytes.push(0);
        let mut rec = kp.sk.sign(&bytes, None).to_vec();
        rec.extend_from_slice(&mac(&anchor, &bytes));
        rec.extend_from_slice(&bytes);
        assert!(matches!(open(&rec, &kp.pk), Err(RecordError::Malformed(_))));
    }

    #[test]
    fn requester_cmdline_is_bounded_and_split_at_nuls() {
        let r = Requester::from_cmdline(7, b"bash\0-c\0echo \x1b hi\0");
        assert_eq!(r.cmdline, ["bash", "-c", "echo \u{1b} hi"]);
        assert_eq!(r.pid, 7);
        let many = b"a\0".repeat(1000);
        assert_eq!(
            Requester::from_cmdline(1, &many).cmdline.len(),
            Requester::MAX_ARGS
        );
        let long = vec![b'x'; 10_000];
        let r = Requester::from_cmdline(1, &long);
        assert_eq!(r.cmdline.concat().len(), Requester::MAX_BYTES);
        assert!(Requester::from_cmdline(1, b"").cmdline.len() <= 1);
    }

    #[test]
    fn log_files_are_listed_oldest_first() {
        let f = log_files(std::path::Path::new("/r"));
        assert_eq!(f.len(), bounds::LOG_ROTATIONS + 1);
        assert_eq!(f[0], std::path::Path::new("/r/escalations.log.4"));
        assert_eq!(f[3], std::path::Path::new("/r/escalations.log.1"));
        assert_eq!(f[4], std::path::Path::new("/r/escalations.log"));
    }

    /// Lines as the coordinator writes them (`serde_json::to_string` of a
    /// [`LogRecord`]), one per event, in its field order.
    const WRITTEN: [&str; 3] = [
        r#"{"time_unix_ms":1700000000123,"sandbox_id":"s","event":"refused","entry":"\\x1b]0;pwned.req","reason":"signature"}"#,
        r#"{"time_unix_ms":1700000000456,"sandbox_id":"s","event":"decision","request_id":"r1","session_id":"sess","argv":["git","push"],"justification":"publish","requester_pid":42,"requester_cmdline":["bash","-c","x"],"ran_argv":null,"decided_by":"developer","result":"completed, status 0"}"#,
        r#"{"time_unix_ms":1700000000789,"sandbox_id":"s","event":"reader_exited","reason":"it exited"}"#,
    ];

    fn written_records() -> [LogRecord; 3] {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        [
            LogRecord {
                time_unix_ms: 1_700_000_000_123,
                sandbox_id: "s".into(),
                event: LogEvent::Refused {
                    entry: "\\x1b]0;pwned.req".into(),
                    reason: "signature".into(),
                },
            },
            LogRecord {
                time_unix_ms: 1_700_000_000_456,
                sandbox_id: "s".into(),
                event: LogEvent::Decision {
                    request_id: "r1".into(),
                    session_id: "sess".into(),
                    argv: v(&["git", "push"]),
                    justification: "publish".into(),
                    requester_pid: 42,
                    requester_cmdline: v(&["bash", "-c", "x"]),
                    ran_argv: None,
                    decided_by: "developer".into(),
                    result: "completed, status 0".into(),
                },
            },
            LogRecord {
                time_unix_ms: 1_700_000_000_789,
                sandbox_id: "s".into(),
                event: LogEvent::ReaderExited {
                    reason: "it exited".into(),
                },
            },
        ]
    }

    #[test]
    fn a_log_record_is_written_with_the_same_names_in_the_same_order() {
        for (rec, line) in written_records().iter().zip(WRITTEN) {
            assert_eq!(serde_json::to_string(rec).unwrap(), line);
        }
    }

    #[test]
    fn a_log_record_round_trips_and_reads_what_the_writer_writes() {
        for (rec, line) in written_records().iter().zip(WRITTEN) {
            let back: LogRecord = serde_json::from_str(line).unwrap();
            assert_eq!(&back, rec);
            let again: LogRecord =
                serde_json::from_str(&serde_json::to_string(&back).unwrap()).unwrap();
            assert_eq!(again, back);
            // `lazaret escalations --json` prints the typed record as a
            // JSON value: the same value as the line's own.
            let untyped: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_value(&back).unwrap(), untyped);
        }
        let edited = WRITTEN[1].replace(r#""ran_argv":null"#, r#""ran_argv":["git","push","-n"]"#);
        let back: LogRecord = serde_json::from_str(&edited).unwrap();
        assert!(matches!(
            back.event,
            LogEvent::Decision { ran_argv: Some(ref r), .. } if r.len() == 3
        ));
    }

    #[test]
    fn what_is_not_a_log_record_does_not_parse() {
        // The reader leaves such lines out.
        for line in [
            "",
            "not json",
            &WRITTEN[0][..WRITTEN[0].len() - 5],
            r#"{"time_unix_ms":1,"sandbox_id":"s","event":"unknown"}"#,
        ] {
            assert!(serde_json::from_str::<LogRecord>(line).is_err(), "{line}");
        }
    }
}
