//! The index the host gets from the sandbox (Git Sentry's mirrored index).
//!
//! Git keeps in `$GIT_DIR/index` what `git status` and `git diff` compare
//! the work tree against, and three things in it make host Git *skip*
//! looking at a file: the assume-unchanged flag (`CE_VALID`), the
//! skip-worktree flag, and the cached stat data (when a file's current
//! stat matches what the index caches, Git takes the file as unchanged
//! without reading it). The sandbox writes the index as it likes, so each
//! of them would let it modify a tracked file while host `git status`
//! stays clean. The index also carries extensions Git trusts: the cache
//! tree (`TREE`, the tree IDs `git commit` writes instead of the entries),
//! the untracked cache (`UNTR`, which files `git status` lists as
//! untracked), the fsmonitor token (`FSMN`), and links to a shared index
//! (`link`) or sparse directory entries (`sdir`).
//!
//! Enforces, for every index the sandbox puts in place (see `router`,
//! which keeps the sandbox's exact copy for the sandbox and gives the host
//! [`sanitize`]'s result):
//! - an entry keeps assume-unchanged or skip-worktree only when the host's
//!   own index (the one it replaces) has that flag on the same entry;
//! - an entry keeps its cached stat data only when the host's own index
//!   has exactly the same entry (path, stage, mode, object ID, flags and
//!   stat): that is the host's own claim. Every other entry's stat data is
//!   zeroed, Git's own way to force a look at the file (`sd_size == 0`
//!   makes `git status` compare the content): the host re-reads each file
//!   the sandbox's index speaks for, once;
//! - every extension is dropped (all are caches Git rebuilds); an index
//!   with a required one (`link`, `sdir`, any lower-case signature) is
//!   refused, as is an entry whose path Git itself would refuse to check
//!   out (`..`, `.git` in any case or spelling, a symlinked `.gitmodules`)
//!   or any malformed index;
//! - the result is a version 2 index (3 when an entry keeps an extended
//!   flag: intent-to-add, or a host-set skip-worktree) with a correct
//!   trailing checksum (SHA-1, or SHA-256 for a repository of that object
//!   format: told by which checksum the sandbox's index carries).
//!
//! Leaves to others: when the router applies this (`router`), and the
//! content of the objects the entries name (they are data: what
//! `git diff --cached` shows is what `git commit` writes).

use sha1::Digest;
use std::collections::HashMap;

/// The largest index read (the sandbox's or the host's).
pub const MAX_BYTES: u64 = 512 << 20;

/// The most entries an index may have.
const MAX_ENTRIES: u32 = 10_000_000;

const ASSUME_VALID: u16 = 0x8000;
const EXTENDED: u16 = 0x4000;
const STAGE_MASK: u16 = 0x3000;
const NAME_MASK: u16 = 0x0fff;
const SKIP_WORKTREE: u16 = 0x4000;
const INTENT_TO_ADD: u16 = 0x2000;

/// Why an index was not given to the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("not an index: {0}")]
    Malformed(&'static str),
    #[error("index version {0} is not one Git writes (2, 3 or 4)")]
    Version(u32),
    #[error("the trailing checksum matches neither SHA-1 nor SHA-256")]
    Checksum,
    #[error("it carries the required extension {0:?}, which the host's index cannot be given (a split or sparse index)")]
    Required(String),
    #[error("entry {0:?} has a path Git refuses to check out")]
    Path(String),
    #[error("larger than {MAX_BYTES} bytes or {MAX_ENTRIES} entries")]
    TooLarge,
}

/// The object-ID hash of a repository, as told by the index's checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    Sha1,
    Sha256,
}

impl Hash {
    fn len(self) -> usize {
        match self {
            Hash::Sha1 => 20,
            Hash::Sha256 => 32,
        }
    }

    fn digest(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha1 => sha1::Sha1::digest(bytes).to_vec(),
            Hash::Sha256 => sha2::Sha256::digest(bytes).to_vec(),
        }
    }
}

/// One index entry, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// ctime s, ctime ns, mtime s, mtime ns, dev, ino, mode, uid, gid, size.
    pub stat: [u32; 10],
    pub oid: Vec<u8>,
    pub flags: u16,
    pub extended: u16,
    pub path: Vec<u8>,
}

const MODE: usize = 6;

impl Entry {
    fn stage(&self) -> u16 {
        self.flags & STAGE_MASK
    }
}

/// A parsed index: its entries and the names of its extensions.
#[derive(Debug)]
pub struct Index {
    pub hash: Hash,
    pub entries: Vec<Entry>,
    pub extensions: Vec<[u8; 4]>,
}

/// What [`sanitize`] changed, for the router's log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Assume-unchanged or skip-worktree flags not given to the host.
    pub flags_dropped: usize,
    /// Entries whose cached stat data was zeroed.
    pub stat_zeroed: usize,
    /// Extensions dropped.
    pub extensions_dropped: usize,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or(IndexError::Malformed("truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, IndexError> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    fn u32(&mut self) -> Result<u32, IndexError> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Git's offset varint (index version 4's prefix length).
    fn varint(&mut self) -> Result<usize, IndexError> {
        let mut c = self.take(1)?[0];
        let mut val: u64 = u64::from(c & 127);
        while c & 128 != 0 {
            val = val
                .checked_add(1)
                .filter(|v| v >> 57 == 0)
                .ok_or(IndexError::Malformed("varint overflow"))?;
            c = self.take(1)?[0];
            val = (val << 7) + u64::from(c & 127);
        }
        usize::try_from(val).map_err(|_| IndexError::Malformed("varint overflow"))
    }

    fn until_nul(&mut self) -> Result<&'a [u8], IndexError> {
        let rest = &self.b[self.at..];
        let n = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(IndexError::Malformed("unterminated path"))?;
        let s = &rest[..n];
        self.at += n + 1;
        Ok(s)
    }
}

/// The path of the entry that began at `start`: prefix-compressed
/// against `prev` (version 4), or whole and padded.
fn entry_path(
    r: &mut Reader<'_>,
    version: u32,
    flags: u16,
    prev: &[u8],
    start: usize,
) -> Result<Vec<u8>, IndexError> {
    Ok(if version == 4 {
        let strip = r.varint()?;
        if strip > prev.len() {
            return Err(IndexError::Malformed(
                "prefix longer than the previous path",
            ));
        }
        let mut p = prev[..prev.len() - strip].to_vec();
        p.extend_from_slice(r.until_nul()?);
        p
    } else {
        let len = usize::from(flags & NAME_MASK);
        let p = if len < usize::from(NAME_MASK) {
            let p = r.take(len)?.to_vec();
            if r.take(1)? != [0] {
                return Err(IndexError::Malformed("path not terminated"));
            }
            p
        } else {
            r.until_nul()?.to_vec()
        };
        // 1 to 8 NULs in all, to a multiple of 8 bytes.
        let used = r.at - start;
        let pad = (8 - used % 8) % 8;
        if r.take(pad)?.iter().any(|&b| b != 0) {
            return Err(IndexError::Malformed("non-zero padding"));
        }
        p
    })
}

/// Parses an index whose object IDs have `hash`'s length; the checksum
/// is checked by the caller.
fn parse_with(body: &[u8], hash: Hash) -> Result<Index, IndexError> {
    let mut r = Reader { b: body, at: 0 };
    if r.take(4)? != b"DIRC" {
        return Err(IndexError::Malformed("no DIRC signature"));
    }
    let version = r.u32()?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = r.u32()?;
    if count > MAX_ENTRIES {
        return Err(IndexError::TooLarge);
    }
    let mut entries = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = r.at;
        let mut stat = [0u32; 10];
        for s in &mut stat {
            *s = r.u32()?;
        }
        let oid = r.take(hash.len())?.to_vec();
        let flags = r.u16()?;
        let extended = if flags & EXTENDED != 0 {
            if version < 3 {
                return Err(IndexError::Malformed("extended flags in a version 2 index"));
            }
            r.u16()?
        } else {
            0
        };
        let path = entry_path(&mut r, version, flags, &prev, start)?;
        prev.clone_from(&path);
        entries.push(Entry {
            stat,
            oid,
            flags: flags & !EXTENDED,
            extended,
            path,
        });
    }
    let mut extensions = Vec::new();
    while r.at < body.len() {
        let sig: [u8; 4] = r
            .take(4)?
            .try_into()
            .map_err(|_| IndexError::Malformed("truncated"))?;
        let size = r.u32()? as usize;
        r.take(size)?;
        extensions.push(sig);
    }
    Ok(Index {
        hash,
        entries,
        extensions,
    })
}

/// Parses `bytes` as an index, with its checksum: SHA-1 or SHA-256
/// (whichever checks), or all zeros (`index.skipHash`).
pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(IndexError::TooLarge);
    }
    let mut last = IndexError::Checksum;
    for hash in [Hash::Sha1, Hash::Sha256] {
        let Some(split) = bytes.len().checked_sub(hash.len()) else {
            continue;
        };
        let (body, sum) = bytes.split_at(split);
        if sum.iter().all(|&b| b == 0) || hash.digest(body) == sum {
            match parse_with(body, hash) {
                Ok(i) => return Ok(i),
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}

/// Whether a path component would name the Git directory on some file
/// system Git protects against (`.git`, `.GIT`, `.git.`, `.git ` and the
/// 8.3 name `git~1`).
fn names_git_dir(c: &[u8]) -> bool {
    let lower = c.to_ascii_lowercase();
    lower == b"git~1"
        || lower
            .strip_prefix(b".git")
            .is_some_and(|rest| rest.iter().all(|&b| b == b'.' || b == b' '))
}

/// Whether Git would check out an entry at `path` with `mode`.
fn checkout_safe(path: &[u8], mode: u32) -> bool {
    if path.is_empty() || path.starts_with(b"/") || path.ends_with(b"/") {
        return false;
    }
    let comps: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    if comps
        .iter()
        .any(|c| matches!(*c, b"" | b"." | b"..") || names_git_dir(c))
    {
        return false;
    }
    let last = comps.last().map(|c| c.to_ascii_lowercase());
    let special = [
        &b".gitmodules"[..],
        b".gitattributes",
        b".gitignore",
        b".mailmap",
    ];
    !(mode & 0o170000 == 0o120000 && last.is_some_and(|l| special.contains(&l.as_slice())))
}

/// The index to give the host for the sandbox's `sandbox` index, given
/// the host's current one (`None`: none, or unreadable). See the module
/// documentation for what is kept.
pub fn sanitize(sandbox: &[u8], host: Option<&[u8]>) -> Result<(Vec<u8>, Changes), IndexError> {
    let idx = parse(sandbox)?;
    for sig in &idx.extensions {
        if !sig[0].is_ascii_uppercase() {
            return Err(IndexError::Required(lazaret_protocol::display::escape(sig)));
        }
    }
    let host = host.and_then(|h| parse(h).ok());
    let vouched: HashMap<(&[u8], u16), &Entry> = host
        .as_ref()
        .map(|h| {
            h.entries
                .iter()
                .map(|e| ((e.path.as_slice(), e.stage()), e))
                .collect()
        })
        .unwrap_or_default();
    let mut changes = Changes {
        extensions_dropped: idx.extensions.len(),
        ..Changes::default()
    };
    let mut out = Vec::with_capacity(idx.entries.len());
    for e in &idx.entries {
        if !checkout_safe(&e.path, e.stat[MODE]) {
            return Err(IndexError::Path(lazaret_protocol::display::escape(&e.path)));
        }
        let host_e = vouched.get(&(e.path.as_slice(), e.stage())).copied();
        if host_e == Some(e) {
            out.push(e.clone());
            continue;
        }
        let mut e = e.clone();
        let host_valid = host_e.is_some_and(|h| h.flags & ASSUME_VALID != 0);
        if e.flags & ASSUME_VALID != 0 && !host_valid {
            e.flags &= !ASSUME_VALID;
            changes.flags_dropped += 1;
        }
        let host_skip = host_e.is_some_and(|h| h.extended & SKIP_WORKTREE != 0);
        if e.extended & SKIP_WORKTREE != 0 && !host_skip {
            e.extended &= !SKIP_WORKTREE;
            changes.flags_dropped += 1;
        }
        // Reserved and unknown extended bits are Git's to define.
        e.extended &= SKIP_WORKTREE | INTENT_TO_ADD;
        let mode = e.stat[MODE];
        e.stat = [0; 10];
        e.stat[MODE] = mode;
        changes.stat_zeroed += 1;
        out.push(e);
    }
    Ok((write(idx.hash, &out), changes))
}

/// Writes entries as a version 2 index (3 when an entry has extended
/// flags), without extensions, with its checksum.
pub fn write(hash: Hash, entries: &[Entry]) -> Vec<u8> {
    let v3 = entries.iter().any(|e| e.extended != 0);
    let mut out = Vec::with_capacity(64 + entries.len() * 96);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&(if v3 { 3u32 } else { 2 }).to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        let start = out.len();
        for s in e.stat {
            out.extend_from_slice(&s.to_be_bytes());
        }
        out.extend_from_slice(&e.oid);
        let len = e.path.len().min(usize::from(NAME_MASK)) as u16;
        let mut flags = (e.flags & (ASSUME_VALID | STAGE_MASK)) | len;
        if e.extended != 0 {
            flags |= EXTENDED;
        }
        out.extend_from_slice(&flags.to_be_bytes());
        if e.extended != 0 {
            out.extend_from_slice(&e.extended.to_be_bytes());
        }
        out.extend_from_slice(&e.path);
        out.push(0);
        while (out.len() - start) % 8 != 0 {
            out.push(0);
        }
    }
    let sum = hash.digest(&out);
    out.extend_from_slice(&sum);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn repo(files: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q"]);
        for f in files {
            if let Some(parent) = Path::new(f).parent() {
                std::fs::create_dir_all(d.path().join(parent)).unwrap();
            }
            std::fs::write(d.path().join(f), format!("content of {f}\n")).unwrap();
        }
        git(d.path(), &["add", "."]);
        d
    }

    fn index(d: &tempfile::TempDir) -> Vec<u8> {
        std::fs::read(d.path().join(".git/index")).unwrap()
    }

    /// `git status --porcelain` with `bytes` as the index.
    fn status_with(d: &tempfile::TempDir, bytes: &[u8]) -> String {
        std::fs::write(d.path().join(".git/index"), bytes).unwrap();
        let out = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(d.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", d.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn every_version_git_writes_parses_and_round_trips() {
        for v in ["2", "3", "4"] {
            let d = repo(&["a", "dir/b", "dir/sub/c"]);
            git(d.path(), &["update-index", "--index-version", v]);
            let i = parse(&index(&d)).unwrap();
            assert_eq!(i.entries.len(), 3, "version {v}");
            let again = write(i.hash, &i.entries);
            let j = parse(&again).unwrap();
            assert_eq!(i.entries, j.entries, "version {v}");
            // Git reads what was written: nothing staged differs.
            assert_eq!(
                status_with(&d, &again),
                "A  a\nA  dir/b\nA  dir/sub/c\n",
                "version {v}"
            );
        }
        // A path over the 12-bit length field is NUL-terminated.
        let mut i = parse(&index(&repo(&["a"]))).unwrap();
        i.entries[0].path = "long/".repeat(1000).into_bytes();
        let j = parse(&write(i.hash, &i.entries)).unwrap();
        assert!(
            i.entries[0].path == j.entries[0].path,
            "the long path comes back"
        );
    }

    #[test]
    fn flags_set_inside_that_hide_a_change_do_not_reach_the_host() {
        let d = repo(&["tracked.py"]);
        git(d.path(), &["commit", "-qm", "one"]);
        let host = index(&d);
        // Inside: the file is backdoored, then hidden by each flag.
        std::fs::write(d.path().join("tracked.py"), "import os; os.system('x')\n").unwrap();
        for flag in ["--assume-unchanged", "--skip-worktree"] {
            std::fs::write(d.path().join(".git/index"), &host).unwrap();
            git(d.path(), &["update-index", flag, "tracked.py"]);
            let sandbox = index(&d);
            assert_eq!(status_with(&d, &sandbox), "", "{flag} hides the change");
            let (given, changes) = sanitize(&sandbox, Some(&host)).unwrap();
            assert_eq!(changes.flags_dropped, 1, "{flag}");
            assert_eq!(status_with(&d, &given), " M tracked.py\n", "{flag}");
        }
    }

    #[test]
    fn stat_data_the_host_did_not_vouch_for_is_zeroed() {
        let d = repo(&["a.txt", "b.txt"]);
        git(d.path(), &["commit", "-qm", "one"]);
        let host = index(&d);
        // Inside: a.txt changes (same size), and the sandbox writes an
        // index whose cached stat matches the new file but whose object
        // is the old one.
        std::fs::write(d.path().join("a.txt"), "CONTENT of a.txt\n").unwrap();
        // An old mtime, so Git's racy-entry check does not look anyway.
        std::fs::File::options()
            .write(true)
            .open(d.path().join("a.txt"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
            .unwrap();
        let mut forged = parse(&host).unwrap();
        let st = std::fs::metadata(d.path().join("a.txt")).unwrap();
        use std::os::unix::fs::MetadataExt;
        let e = &mut forged.entries[0];
        e.stat = [
            st.ctime() as u32,
            st.ctime_nsec() as u32,
            st.mtime() as u32,
            st.mtime_nsec() as u32,
            st.dev() as u32,
            st.ino() as u32,
            e.stat[MODE],
            st.uid(),
            st.gid(),
            st.size() as u32,
        ];
        let sandbox = write(forged.hash, &forged.entries);
        assert_eq!(
            status_with(&d, &sandbox),
            "",
            "the forged stat hides the change"
        );
        let (given, changes) = sanitize(&sandbox, Some(&host)).unwrap();
        assert_eq!(changes.stat_zeroed, 1, "b.txt's entry is the host's own");
        assert_eq!(status_with(&d, &given), " M a.txt\n");
        // Without the host's index, nothing is vouched for.
        let (given, changes) = sanitize(&sandbox, None).unwrap();
        assert_eq!(changes.stat_zeroed, 2);
        assert_eq!(status_with(&d, &given), " M a.txt\n");
    }

    #[test]
    fn host_set_flags_stay() {
        let d = repo(&["keep", "other"]);
        git(d.path(), &["update-index", "--skip-worktree", "keep"]);
        git(d.path(), &["update-index", "--assume-unchanged", "other"]);
        let host = index(&d);
        let (given, changes) = sanitize(&host, Some(&host)).unwrap();
        assert_eq!((changes.flags_dropped, changes.stat_zeroed), (0, 0));
        let i = parse(&given).unwrap();
        assert_eq!(i.entries, parse(&host).unwrap().entries);
    }

    #[test]
    fn caches_are_dropped_and_split_or_sparse_indexes_refused() {
        let d = repo(&["a", "b/c"]);
        git(d.path(), &["commit", "-qm", "one"]);
        git(d.path(), &["update-index", "--untracked-cache"]);
        git(d.path(), &["status", "--porcelain"]);
        let with_caches = index(&d);
        let i = parse(&with_caches).unwrap();
        assert!(
            i.extensions.contains(b"TREE") && i.extensions.contains(b"UNTR"),
            "{:?}",
            i.extensions
        );
        let (given, changes) = sanitize(&with_caches, None).unwrap();
        assert_eq!(changes.extensions_dropped, i.extensions.len());
        assert!(parse(&given).unwrap().extensions.is_empty());
        git(d.path(), &["update-index", "--split-index"]);
        assert!(matches!(
            sanitize(&index(&d), None),
            Err(IndexError::Required(s)) if s == "link"
        ));
    }

    #[test]
    fn entries_git_would_not_check_out_are_refused() {
        let d = repo(&["ok"]);
        let base = parse(&index(&d)).unwrap();
        for bad in [
            &b".git/hooks/pre-commit"[..],
            b".GIT/config",
            b"a/.git/config",
            b"a/.git./x",
            b"GIT~1/hooks/x",
            b"../escape",
            b"a//b",
            b"/abs",
            b"a/./b",
        ] {
            let mut e = base.entries[0].clone();
            e.path = bad.to_vec();
            let bytes = write(base.hash, &[e]);
            assert!(
                matches!(sanitize(&bytes, None), Err(IndexError::Path(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut link = base.entries[0].clone();
        link.path = b"sub/.gitmodules".to_vec();
        link.stat[MODE] = 0o120000;
        assert!(matches!(
            sanitize(&write(base.hash, &[link]), None),
            Err(IndexError::Path(_))
        ));
    }

    #[test]
    fn malformed_indexes_are_refused_not_panicked_on() {
        let d = repo(&["a", "b"]);
        let good = index(&d);
        assert!(parse(&good).is_ok());
        for n in 0..good.len() {
            let _ = parse(&good[..n]);
            let mut flipped = good.clone();
            flipped[n] ^= 0x41;
            let _ = sanitize(&flipped, Some(&good));
        }
        assert!(parse(b"DIRC").is_err());
        assert!(parse(&[0u8; 64]).is_err());
    }

    #[test]
    fn sha256_repositories_keep_their_checksum() {
        let d = tempfile::tempdir().unwrap();
        let out = Command::new("git")
            .args(["init", "-q", "--object-format=sha256"])
            .current_dir(d.path())
            .output()
            .unwrap();
        if !out.status.success() {
            eprintln!("skipping: this git has no sha256 repositories");
            return;
        }
        std::fs::write(d.path().join("f"), "x\n").unwrap();
        git(d.path(), &["add", "f"]);
        let i = parse(&index(&d)).unwrap();
        assert_eq!(i.hash, Hash::Sha256);
        let (given, _) = sanitize(&index(&d), None).unwrap();
        assert_eq!(status_with(&d, &given), "A  f\n");
    }
}
