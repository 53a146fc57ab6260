//! The changes journal: what `lazaret-mount-router` records of every
//! change the sandbox makes to the host workspace, one line per change
//! written before it is made, and what `lazaret changes` reads back.
//!
//! A line is `TIME_UNIX_MS TAB OP TAB PATH [TAB PATH]`: the paths are
//! workspace-relative, in [`crate::display::escape`] form (lossless, and
//! never holding a tab or a line break), so any bytes the sandbox chose
//! for a name come back exactly and are shown escaped. `mark` lines are
//! the developer's own (`lazaret changes --mark NAME`). A line that does
//! not parse (torn by a crash) is skipped.

use std::path::Path;

/// The journal, in the router's directory of the Domain Root.
pub const FILE: &str = "changes";
/// The previous journal, kept when the router began a new one.
pub const PREVIOUS: &str = "changes.1";
/// The journal's bound while a Domain runs (see the router's `journal`).
pub const MAX_BYTES: u64 = 64 << 20;
/// The most bytes of one journal file read back.
pub const MAX_READ: u64 = MAX_BYTES + (1 << 20);

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The router started: a new Domain generation.
    Start,
    /// A file, FIFO or socket was created.
    Create,
    Mkdir,
    Symlink,
    /// A hard link `to` of the file `path` was made.
    Link,
    /// Content written, truncated or allocated.
    Write,
    /// Mode or ownership changed.
    Attr,
    /// Unlinked, or a directory removed.
    Remove,
    /// Renamed to `to` (a directory with everything beneath it).
    Rename,
    /// Something beneath the directory changed (the journal past its
    /// size bound records directories; the root: anything may have).
    Beneath,
    /// A point the developer named.
    Mark,
}

const NAMES: &[(Op, &str)] = &[
    (Op::Start, "start"),
    (Op::Create, "create"),
    (Op::Mkdir, "mkdir"),
    (Op::Symlink, "symlink"),
    (Op::Link, "link"),
    (Op::Write, "write"),
    (Op::Attr, "attr"),
    (Op::Remove, "remove"),
    (Op::Rename, "rename"),
    (Op::Beneath, "beneath"),
    (Op::Mark, "mark"),
];

impl Op {
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(o, _)| *o == self)
            .map(|(_, n)| *n)
            .unwrap_or("?")
    }

    pub fn from_name(s: &str) -> Option<Op> {
        NAMES.iter().find(|(_, n)| *n == s).map(|(o, _)| *o)
    }

    /// Whether repeated events of this kind on one path are recorded at
    /// most once in a short while.
    pub fn coalesces(self) -> bool {
        matches!(self, Op::Write | Op::Attr)
    }
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub time_unix_ms: u64,
    pub op: Op,
    pub path: Vec<u8>,
    pub to: Option<Vec<u8>>,
}

/// Parses one line (without its line break).
pub fn parse_line(line: &str) -> Option<Event> {
    let mut f = line.split('\t');
    let time_unix_ms = f.next()?.parse().ok()?;
    let op = Op::from_name(f.next()?)?;
    let path = crate::display::unescape(f.next()?)?;
    let to = match f.next() {
        Some(t) => Some(crate::display::unescape(t)?),
        None => None,
    };
    if f.next().is_some() {
        return None;
    }
    Some(Event {
        time_unix_ms,
        op,
        path,
        to,
    })
}

/// The events of the journal in `dir` (the previous file first), oldest
/// first; unreadable or torn lines are skipped. `Ok(None)` when there is
/// no journal at all.
pub fn read(dir: &Path) -> std::io::Result<Option<Vec<Event>>> {
    use std::io::Read;
    let mut out = Vec::new();
    let mut any = false;
    for name in [PREVIOUS, FILE] {
        let f = match std::fs::File::open(dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        any = true;
        let mut buf = Vec::new();
        f.take(MAX_READ).read_to_end(&mut buf)?;
        out.extend(String::from_utf8_lossy(&buf).lines().filter_map(parse_line));
    }
    Ok(any.then_some(out))
}

/// The line recording `op` on `path` (and `to`) at `time_unix_ms`.
pub fn line(time_unix_ms: u128, op: Op, path: &[u8], to: Option<&[u8]>) -> String {
    let esc = crate::display::escape;
    let mut l = format!("{time_unix_ms}\t{}\t{}", op.name(), esc(path));
    if let Some(t) = to {
        l.push('\t');
        l.push_str(&esc(t));
    }
    l.push('\n');
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_with_any_bytes() {
        let names: [&[u8]; 4] = [b"plain", b"tab\there\nnewline", b"\xff\x1b[2J", b""];
        for n in names {
            let l = line(7, Op::Rename, n, Some(b"to\t"));
            assert_eq!(l.matches('\t').count(), 3, "{l:?}");
            let e = parse_line(l.trim_end_matches('\n')).unwrap();
            assert_eq!((e.time_unix_ms, e.op), (7, Op::Rename));
            assert_eq!(e.path, n);
            assert_eq!(e.to.as_deref(), Some(&b"to\t"[..]));
        }
        for op in NAMES.iter().map(|(o, _)| *o) {
            assert_eq!(Op::from_name(op.name()), Some(op));
        }
    }

    #[test]
    fn torn_or_foreign_lines_are_skipped() {
        for bad in [
            "",
            "12",
            "12\tcreate",
            "x\tcreate\ta",
            "12\tnope\ta",
            "12\tcreate\t\\q",
            "1\tcreate\ta\tb\tc",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }
}
