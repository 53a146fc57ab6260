//! Reading the Escalation Mailbox: everything that touches the bytes and
//! names the sandbox writes.
//!
//! The mailbox is not an authentication boundary. Each entry is opened
//! relative to the request directory's handle without following links,
//! removed, and must be a regular file no larger than
//! [`esc::MAX_REQUEST`]; it is read once, and its signature (this
//! generation's key) is checked over the bytes read before they are
//! parsed. Then it must name this generation's sandbox, a fresh time, and,
//! when it names a session this reader knows, carry that session's
//! Session Anchor MAC. Paths, owners and PIDs are never evidence of who
//! wrote an entry. Names are any bytes: they leave this process only in
//! their escaped form.
//!
//! What it leaves to the coordinator: the replay set, the pending bounds,
//! routing to the session and the result (they operate on typed values).

use ed25519_compact::PublicKey;
use lazaret_protocol::display;
use lazaret_protocol::escalation::{self as esc, Kind};
use lazaret_protocol::mailbox::{FromReader, ReaderInput, ToReader, INPUT_VERSION};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::BorrowedFd;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("input version {0} is not {INPUT_VERSION}")]
    Version(u32),
    #[error("the public key does not decode: {0}")]
    Key(String),
    #[error("malformed input: {0}")]
    Decode(#[from] postcard::Error),
}

/// Whether a pass skips an entry of this name: the client's files being
/// written start with `.` (it publishes by rename), as do `.` and `..`.
pub fn skipped(name: &[u8]) -> bool {
    name.starts_with(b".")
}

/// What one pass did.
#[derive(Debug)]
pub struct Pass {
    /// One record per entry taken.
    pub records: Vec<FromReader>,
    /// Directory entries read, taken or not: the pass's cost, which paces
    /// the next one ([`crate::run::Pace`]).
    pub examined: usize,
    /// The pass stopped at `max_entries_per_pass`: more may be waiting,
    /// and no event will announce them again.
    pub full: bool,
}

pub struct Reader {
    key: PublicKey,
    sandbox_id: String,
    sessions: HashMap<String, [u8; 32]>,
    /// Entries refused once that could not be removed (a non-empty
    /// directory): skipped, so they are not refused (and logged) again at
    /// every pass. At most `max_stuck`.
    stuck: HashSet<CString>,
    max_entries: usize,
    max_stuck: usize,
}

impl Reader {
    pub fn from_input(bytes: &[u8]) -> Result<Self, InputError> {
        let input: ReaderInput = postcard::from_bytes(bytes)?;
        if input.version != INPUT_VERSION {
            return Err(InputError::Version(input.version));
        }
        Self::new(&input)
    }

    pub fn new(input: &ReaderInput) -> Result<Self, InputError> {
        Ok(Self {
            key: PublicKey::from_slice(&input.public_key)
                .map_err(|e| InputError::Key(e.to_string()))?,
            sandbox_id: input.sandbox_id.clone(),
            sessions: HashMap::new(),
            stuck: HashSet::new(),
            max_entries: input.max_entries_per_pass as usize,
            max_stuck: input.max_stuck as usize,
        })
    }

    /// Entries taken in one pass at most.
    pub fn max_entries(&self) -> u32 {
        u32::try_from(self.max_entries).unwrap_or(u32::MAX)
    }

    pub fn control(&mut self, m: ToReader) {
        match m {
            ToReader::SessionAdded { session_id, anchor } => {
                self.sessions.insert(session_id, anchor);
            }
            ToReader::SessionRemoved { session_id } => {
                self.sessions.remove(&session_id);
            }
        }
    }

    /// Entry names as the sandbox made them (any bytes), at most
    /// `max_entries_per_pass` per pass, and how many directory entries
    /// were read to find them (`.`, `..` and skipped names included).
    /// Names starting with `.` are the client's files being written (it
    /// publishes by rename).
    pub fn entries(&self, dir: BorrowedFd<'_>) -> (Vec<CString>, usize) {
        let Ok(mut rd) = rustix::fs::Dir::read_from(dir) else {
            return (Vec::new(), 0);
        };
        let (mut names, mut examined) = (Vec::new(), 0);
        while names.len() < self.max_entries {
            let Some(Ok(e)) = rd.next() else { break };
            examined += 1;
            let name = e.file_name();
            if skipped(name.to_bytes()) || self.stuck.contains(name) {
                continue;
            }
            names.push(name.to_owned());
        }
        (names, examined)
    }

    /// One pass: every entry taken, one record each.
    pub fn pass(&mut self, dir: BorrowedFd<'_>, now_ms: u64) -> Pass {
        let (names, examined) = self.entries(dir);
        Pass {
            records: names.iter().map(|n| self.take(dir, n, now_ms)).collect(),
            examined,
            full: self.max_entries > 0 && names.len() >= self.max_entries,
        }
    }

    /// Reads one entry once, removes it, and verifies it.
    pub fn take(&mut self, dir: BorrowedFd<'_>, name: &CStr, now_ms: u64) -> FromReader {
        let entry = display::escape(name.to_bytes());
        let refuse = |reason: &str| FromReader::Refused {
            entry: entry.clone(),
            reason: reason.to_string(),
        };
        let opened = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        );
        if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_err()
            && rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).is_err()
            && self.stuck.len() < self.max_stuck
        {
            self.stuck.insert(name.to_owned());
        }
        let fd = match opened {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => return refuse("a symbolic link"),
            Err(e) => return refuse(&format!("cannot open: {e}")),
        };
        let st = match rustix::fs::fstat(&fd) {
            Ok(st) => st,
            Err(e) => return refuse(&e.to_string()),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return refuse("not a regular file");
        }
        if st.st_size as u64 > esc::MAX_REQUEST as u64 {
            return refuse(&format!("{} bytes, over the limit", st.st_size));
        }
        let mut bytes = Vec::with_capacity(st.st_size as usize);
        if std::fs::File::from(fd)
            .take(esc::MAX_REQUEST as u64 + 1)
            .read_to_end(&mut bytes)
            .is_err()
        {
            return refuse("unreadable");
        }
        let verified = match esc::open(&bytes, &self.key) {
            Ok(v) => v,
            Err(e) => return refuse(&e.to_string()),
        };
        let body = &verified.body;
        if body.sandbox_id != self.sandbox_id {
            return refuse("signed for another generation");
        }
        if now_ms.abs_diff(body.created_unix_ms) > esc::MAX_AGE_MS {
            return refuse("expired");
        }
        let envelope = verified.envelope();
        let Some(anchor) = self.sessions.get(&body.session_id) else {
            return FromReader::NoSession {
                entry,
                body: verified.body,
                envelope,
            };
        };
        if verified.check_session(anchor).is_err() {
            return refuse("the Session Anchor does not verify");
        }
        if let Kind::Request(r) = &body.kind {
            if r.argv.is_empty() {
                return refuse("an empty command");
            }
        }
        FromReader::Verified {
            entry,
            body: verified.body,
            envelope,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::escalation::{Body, Request};
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;

    const NOW: u64 = 1_700_000_000_000;

    fn setup() -> (
        tempfile::TempDir,
        Reader,
        OwnedFd,
        ed25519_compact::SecretKey,
    ) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("requests")).unwrap();
        let kp = ed25519_compact::KeyPair::generate();
        let r = Reader::new(&ReaderInput {
            version: INPUT_VERSION,
            public_key: *kp.pk,
            sandbox_id: "s".into(),
            max_entries_per_pass: 256,
            max_stuck: 1024,
        })
        .unwrap();
        let dir = rustix::fs::open(
            d.path().join("requests"),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        (d, r, dir, kp.sk)
    }

    fn body(session: &str, sandbox: &str, created: u64) -> Body {
        Body {
            version: esc::VERSION,
            sandbox_id: sandbox.into(),
            session_id: session.into(),
            request_id: [5; 16],
            created_unix_ms: created,
            kind: Kind::Request(Request {
                argv: vec!["/bin/true".into()],
                justification: String::new(),
                cwd: "/workspace".into(),
                timeout_secs: 0,
                requester: Default::default(),
            }),
        }
    }

    fn reason(r: &FromReader) -> &str {
        match r {
            FromReader::Refused { reason, .. } => reason,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn verified_records_name_a_known_session_with_its_anchor() {
        let (d, mut r, dir, sk) = setup();
        let req = d.path().join("requests");
        r.control(ToReader::SessionAdded {
            session_id: "a".into(),
            anchor: [1; 32],
        });
        std::fs::write(
            req.join("ok"),
            esc::seal(&body("a", "s", NOW), &sk, &[1; 32]),
        )
        .unwrap();
        std::fs::write(
            req.join("badmac"),
            esc::seal(&body("a", "s", NOW), &sk, &[2; 32]),
        )
        .unwrap();
        std::fs::write(
            req.join("other-gen"),
            esc::seal(&body("a", "t", NOW), &sk, &[1; 32]),
        )
        .unwrap();
        std::fs::write(
            req.join("old"),
            esc::seal(&body("a", "s", NOW - esc::MAX_AGE_MS - 1), &sk, &[1; 32]),
        )
        .unwrap();
        std::fs::write(
            req.join("unknown"),
            esc::seal(&body("b", "s", NOW), &sk, &[1; 32]),
        )
        .unwrap();
        let t = |r: &mut Reader, n: &str| r.take(dir.as_fd(), &CString::new(n).unwrap(), NOW);
        assert!(
            matches!(t(&mut r, "ok"), FromReader::Verified { ref entry, ref body, .. } if entry == "ok" && body.session_id == "a")
        );
        assert!(reason(&t(&mut r, "badmac")).contains("Session Anchor"));
        assert!(reason(&t(&mut r, "other-gen")).contains("another generation"));
        assert_eq!(reason(&t(&mut r, "old")), "expired");
        assert!(matches!(t(&mut r, "unknown"), FromReader::NoSession { .. }));
        // Once the session is removed, its entries name no session.
        r.control(ToReader::SessionRemoved {
            session_id: "a".into(),
        });
        std::fs::write(
            req.join("late"),
            esc::seal(&body("a", "s", NOW), &sk, &[1; 32]),
        )
        .unwrap();
        assert!(matches!(t(&mut r, "late"), FromReader::NoSession { .. }));
        assert_eq!(std::fs::read_dir(&req).unwrap().count(), 0);
    }

    #[test]
    fn links_fifos_oversized_and_hostile_names_are_refused_and_removed() {
        let (d, mut r, dir, _sk) = setup();
        let req = d.path().join("requests");
        std::fs::write(d.path().join("target"), "x").unwrap();
        std::os::unix::fs::symlink(d.path().join("target"), req.join("link.req")).unwrap();
        nix::unistd::mkfifo(
            &req.join("fifo.req"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(req.join("big.req"), vec![0u8; esc::MAX_REQUEST + 1]).unwrap();
        std::fs::write(req.join("junk.req"), vec![0u8; 200]).unwrap();
        let hostile = std::ffi::OsStr::from_bytes(b"\x1b]0;pwned\x07\xff.req");
        std::fs::write(req.join(hostile), vec![0u8; 200]).unwrap();
        let mut got: Vec<(String, String)> = r
            .pass(dir.as_fd(), NOW)
            .records
            .into_iter()
            .map(|x| match x {
                FromReader::Refused { entry, reason } => (entry, reason),
                other => panic!("{other:?}"),
            })
            .collect();
        got.sort();
        let want = [
            ("\\x1b]0;pwned\\x07\\xff.req", "signature"),
            ("big.req", "over the limit"),
            ("fifo.req", "not a regular file"),
            ("junk.req", "signature"),
            ("link.req", "symbolic link"),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((entry, why), (n, w)) in got.iter().zip(want) {
            assert_eq!(entry, n);
            assert!(why.contains(w), "{entry}: {why}");
        }
        assert_eq!(std::fs::read_dir(&req).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(d.path().join("target")).unwrap(),
            "x"
        );
    }

    #[test]
    fn directories_are_removed_or_refused_once() {
        let (d, mut r, dir, _sk) = setup();
        let req = d.path().join("requests");
        std::fs::create_dir(req.join("empty")).unwrap();
        std::fs::create_dir_all(req.join("full/x")).unwrap();
        let mut all = Vec::new();
        for _ in 0..3 {
            all.extend(r.pass(dir.as_fd(), NOW).records);
        }
        assert!(!req.join("empty").exists());
        let n = |name: &str| {
            all.iter()
                .filter(|x| matches!(x, FromReader::Refused { entry, .. } if entry == name))
                .count()
        };
        assert_eq!(n("full"), 1, "{all:?}");
        assert_eq!(n("empty"), 1, "{all:?}");
    }

    #[test]
    fn a_pass_takes_at_most_its_bound() {
        let (d, mut r, dir, _sk) = setup();
        r.max_entries = 3;
        for i in 0..10 {
            std::fs::write(d.path().join(format!("requests/e{i}")), b"x").unwrap();
        }
        std::fs::write(d.path().join("requests/.tmp"), b"x").unwrap();
        let p = r.pass(dir.as_fd(), NOW);
        assert_eq!(p.records.len(), 3);
        assert!(p.full);
        assert!(p.examined >= 3, "{p:?}");
        assert_eq!(
            std::fs::read_dir(d.path().join("requests"))
                .unwrap()
                .count(),
            8
        );
    }
}
