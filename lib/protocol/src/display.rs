//! The one escaping function for text the sandbox controls on its way to
//! the developer's terminal (SR-7, DX-4): file names from State Anchor
//! uppers, mailbox entry names, escalation fields, paths and values quoted
//! in error messages.
//!
//! [`escape`] maps any bytes to a printable, single-line, unambiguous
//! string, and [`unescape`] maps it back (the escape is lossless):
//!
//! | input | shown as |
//! | --- | --- |
//! | `\` | `\\` |
//! | newline, tab, carriage return | `\n`, `\t`, `\r` |
//! | any other C0 control byte (0x00..0x1f) and DEL (0x7f) | `\xNN` (`\x1b` for ESC) |
//! | a byte that is not part of valid UTF-8 | `\xNN` (always 0x80 or above) |
//! | a C1 control character (U+0080..U+009F) | `\u{NN}` (`\u{9b}` for CSI) |
//! | a character a terminal draws as nothing, as blank or over its neighbour (the classes below) | `\u{NNNN}` |
//! | any other non-ASCII character, with [`Charset::Ascii`] | `\u{NNNN}` |
//! | every other character | itself |
//!
//! The characters that are always escaped, although valid UTF-8, because
//! what the terminal shows for them is not what they are:
//!
//! | class | examples |
//! | --- | --- |
//! | C1 controls | U+0080..U+009F (U+009B is CSI) |
//! | format characters and every other default-ignorable code point | bidi marks, embeddings, overrides and isolates (U+200E, U+202A..U+202E, U+2066..U+2069, U+061C), zero-width space and joiners (U+200B..U+200D), word joiner and invisible operators (U+2060..U+2064), soft hyphen U+00AD, BOM U+FEFF, tag characters U+E0000..U+E007F (and the rest of U+E0000..U+E0FFF), variation selectors U+FE00..U+FE0F and U+E0100..U+E01EF, Mongolian variation selectors, combining grapheme joiner U+034F |
//! | Hangul fillers | U+115F, U+1160, U+3164, U+FFA0 (drawn blank, one or two columns wide) |
//! | combining and enclosing marks, and everything else a terminal draws in zero columns | U+0300..U+036F, U+20DD, conjoining Hangul vowels and finals (U+1160..U+11FF), prepended marks: every character of width 0 for `unicode-width` (its `Grapheme_Extend` and `Default_Ignorable_Code_Point` tables) |
//! | spaces other than U+0020, and blanks | U+00A0, U+1680, U+2000..U+200A, U+202F, U+205F, U+3000, Braille blank U+2800 |
//! | line and paragraph separators, interlinear annotations | U+2028, U+2029, U+FFF9..U+FFFB |
//! | private-use characters and noncharacters (the font decides what they look like) | U+E000..U+F8FF, U+F0000..U+10FFFF, U+FDD0..U+FDEF, U+xxFFFE, U+xxFFFF |
//!
//! So no C0, C1, DEL or ESC byte reaches the terminal, a `\` in the
//! output always starts an escape, and every character shown takes
//! columns of its own: nothing is invisible, joined to its neighbour or
//! mistaken for a space. [`quoted`] additionally escapes `"` and wraps the
//! result in quotes (for argument vectors); [`bounded`] cuts an escaped
//! field to a number of terminal columns with a marker, and [`wrap_argv`]
//! lays an argument vector out over rows, cut the same way.
//!
//! What is left is printable characters of every script, which listings,
//! logs and error messages show as themselves ([`Charset::Unicode`]): a
//! Cyrillic `а` there looks like a Latin `a`, and unassigned code points
//! (which no table here knows) are shown as the terminal draws them. Where
//! the developer decides on what the text says (the Host Escalation
//! prompt: the command, the directories, the asking process, the
//! justification), the text is shown in [`Charset::Ascii`]: every
//! non-ASCII character escaped, so a homoglyph cannot pass for ASCII, no
//! right-to-left letter reorders the row, and the row's width in columns is
//! exactly its length whatever the terminal's fonts and width tables.
//!
//! JSON output: names that may be arbitrary bytes (file names, mailbox
//! entry names) are carried as their [`escape`] form, so the exact bytes
//! come back with [`unescape`]; UTF-8 strings (argument vectors,
//! justifications) are carried as JSON strings written by [`ascii_json`],
//! whose only non-ASCII or control characters are standard `\uXXXX`
//! escapes, so any JSON parser gets the exact string back.

use std::fmt::Write;
use unicode_width::UnicodeWidthChar;

/// Which printable characters are shown as themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charset {
    /// Printable characters of every script (listings, logs, errors).
    Unicode,
    /// ASCII only: every other character is escaped (the prompt).
    Ascii,
}

/// Characters shown as `\u{...}` although they are valid UTF-8, in
/// either [`Charset`]: C1 controls and every character a terminal draws
/// as nothing, as blank or over its neighbour (see the module's table).
pub fn hidden(c: char) -> bool {
    if c.is_ascii() {
        return false;
    }
    matches!(c,
        '\u{80}'..='\u{a0}'
        | '\u{ad}'
        | '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}'
        | '\u{1680}'
        | '\u{2000}'..='\u{200f}'
        | '\u{2028}'..='\u{202f}'
        | '\u{205f}'..='\u{206f}'
        | '\u{2800}'
        | '\u{3000}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{fdd0}'..='\u{fdef}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{e0000}'..='\u{e0fff}'
        | '\u{f0000}'..='\u{10ffff}')
        || (c as u32 & 0xfffe) == 0xfffe
        || matches!(c.width(), None | Some(0))
}

/// Calls `piece` with the escaped form of each input character (or invalid
/// byte), in order, and the number of input bytes it stands for: the
/// single definition of the escape. `piece` returns `false` to stop.
fn pieces(bytes: &[u8], charset: Charset, mut piece: impl FnMut(&str, usize) -> bool) {
    let mut buf = String::with_capacity(12);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            buf.clear();
            match c {
                '\\' => buf.push_str("\\\\"),
                '\n' => buf.push_str("\\n"),
                '\t' => buf.push_str("\\t"),
                '\r' => buf.push_str("\\r"),
                '\0'..='\u{1f}' | '\u{7f}' => {
                    let _ = write!(buf, "\\x{:02x}", c as u32);
                }
                c if hidden(c) || (charset == Charset::Ascii && !c.is_ascii()) => {
                    let _ = write!(buf, "\\u{{{:x}}}", c as u32);
                }
                c => buf.push(c),
            }
            if !piece(&buf, c.len_utf8()) {
                return;
            }
        }
        for b in chunk.invalid() {
            buf.clear();
            let _ = write!(buf, "\\x{b:02x}");
            if !piece(&buf, 1) {
                return;
            }
        }
    }
}

/// The escaped, printable, single-line form of `bytes` (see the module
/// documentation).
pub fn escape(bytes: impl AsRef<[u8]>) -> String {
    escape_in(bytes, Charset::Unicode)
}

/// [`escape`], showing as themselves only the characters `charset` allows.
pub fn escape_in(bytes: impl AsRef<[u8]>, charset: Charset) -> String {
    let bytes = bytes.as_ref();
    let mut out = String::with_capacity(bytes.len());
    pieces(bytes, charset, |p, _| {
        out.push_str(p);
        true
    });
    out
}

/// The escaped form of a path or other OS string.
pub fn escape_os(s: impl AsRef<std::ffi::OsStr>) -> String {
    use std::os::unix::ffi::OsStrExt;
    escape(s.as_ref().as_bytes())
}

/// `"escaped"`, with `"` escaped as `\"` too: an argument whose
/// boundaries and spaces are visible.
pub fn quoted(bytes: impl AsRef<[u8]>) -> String {
    quoted_in(bytes, Charset::Unicode)
}

/// [`quoted`] in `charset`.
pub fn quoted_in(bytes: impl AsRef<[u8]>, charset: Charset) -> String {
    format!("\"{}\"", escape_in(bytes, charset).replace('"', "\\\""))
}

/// An argument vector, each argument [`quoted`], separated by spaces.
pub fn argv(argv: &[String]) -> String {
    argv_in(argv, Charset::Unicode)
}

/// [`argv`] in `charset`.
pub fn argv_in(argv: &[String], charset: Charset) -> String {
    argv.iter()
        .map(|a| quoted_in(a, charset))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Terminal columns a character may take (conservatively: everything from
/// U+1100 on may be double width).
fn columns(s: &str) -> usize {
    s.chars().map(|c| if c >= '\u{1100}' { 2 } else { 1 }).sum()
}

/// The marker that ends a cut field: `…[cut N bytes]`, or with
/// [`Charset::Ascii`] `...[cut N bytes]`.
fn marker(cut: usize, charset: Charset) -> String {
    match charset {
        Charset::Unicode => format!("…[cut {cut} bytes]"),
        Charset::Ascii => format!("...[cut {cut} bytes]"),
    }
}

/// A piece of an escaped rendering: the text shown and the input bytes it
/// stands for. A lone space standing for no input separates arguments: a
/// row may end before it, and then the next row does not start with it.
struct Piece {
    text: String,
    bytes: usize,
}

impl Piece {
    fn separates(&self) -> bool {
        self.bytes == 0 && self.text == " "
    }
}

/// The pieces `feed` produces, until they are wider than `cap` columns
/// (more can never be shown); `true` with them when `feed` ran to its end.
fn collect(
    cap: usize,
    feed: impl FnOnce(&mut dyn FnMut(&str, usize) -> bool),
) -> (Vec<Piece>, bool) {
    let mut out = Vec::new();
    let mut width = 0;
    let mut complete = true;
    feed(&mut |text, bytes| {
        if width > cap {
            complete = false;
            return false;
        }
        width += columns(text);
        out.push(Piece {
            text: text.to_string(),
            bytes,
        });
        true
    });
    (out, complete && width <= cap)
}

/// Greedily lays `pieces` out in at most `rows` rows of `width` columns,
/// the last row `reserve` columns shorter: a word (the pieces between two
/// separators) that fits a row of its own starts one rather than being
/// broken; stops at the first piece that does not fit. Returns the rows,
/// how many pieces they hold and the input bytes those stand for.
fn lay(pieces: &[Piece], width: usize, rows: usize, reserve: usize) -> (Vec<String>, usize, usize) {
    let budget = |row: usize| {
        if row + 1 >= rows {
            width.saturating_sub(reserve)
        } else {
            width
        }
    };
    let mut out = vec![String::new()];
    let (mut used, mut kept) = (0, 0);
    for (i, p) in pieces.iter().enumerate() {
        let w = columns(&p.text);
        if i > 0 && pieces[i - 1].separates() && out.len() < rows {
            let word: usize = pieces[i..]
                .iter()
                .take_while(|q| !q.separates())
                .map(|q| columns(&q.text))
                .sum();
            if used + word > budget(out.len() - 1) && word <= budget(out.len()) {
                if let Some(row) = out.last_mut() {
                    row.pop();
                }
                out.push(String::new());
                used = 0;
            }
        }
        if used + w > budget(out.len() - 1) {
            if out.len() >= rows || w > budget(out.len()) {
                return (out, i, kept);
            }
            out.push(String::new());
            used = 0;
            if p.separates() {
                continue;
            }
        }
        if let Some(row) = out.last_mut() {
            row.push_str(&p.text);
        }
        used += w;
        kept += p.bytes;
    }
    (out, pieces.len(), kept)
}

/// What `feed` produces in at most `rows` rows of `width` columns: when
/// it does not all fit, cut between two pieces (never inside an escape),
/// the last row ending with the marker, which counts the `total` input
/// bytes not shown.
fn fit(
    width: usize,
    rows: usize,
    total: usize,
    charset: Charset,
    feed: impl FnOnce(&mut dyn FnMut(&str, usize) -> bool),
) -> Vec<String> {
    let rows = rows.max(1);
    let (pieces, complete) = collect(width.saturating_mul(rows), feed);
    if complete {
        let (out, placed, _) = lay(&pieces, width, rows, 0);
        if placed == pieces.len() {
            return out;
        }
    }
    // Room for the marker with the largest count it can show.
    let reserve = columns(&marker(total, charset));
    let (mut out, _, kept) = lay(&pieces, width, rows, reserve);
    let m = marker(total.saturating_sub(kept), charset);
    let last_fits = out
        .last()
        .is_some_and(|r| columns(r) + columns(&m) <= width);
    if !last_fits && out.len() < rows {
        out.push(String::new());
    }
    if let Some(row) = out.last_mut() {
        row.push_str(&m);
    }
    out
}

/// The escaped form of `bytes` in at most `max_columns` terminal columns:
/// when longer, it is cut between two escaped characters and ends with
/// `…[cut N bytes]` (the marker counts towards the bound).
pub fn bounded(bytes: impl AsRef<[u8]>, max_columns: usize) -> String {
    bounded_in(bytes, max_columns, Charset::Unicode)
}

/// [`bounded`] in `charset`.
pub fn bounded_in(bytes: impl AsRef<[u8]>, max_columns: usize, charset: Charset) -> String {
    let bytes = bytes.as_ref();
    fit(max_columns, 1, bytes.len(), charset, |piece| {
        pieces(bytes, charset, piece)
    })
    .concat()
}

/// Calls `piece` with the pieces of [`argv_in`]: each argument's opening
/// quote is joined to its first character and its closing quote to its
/// last, so no row of [`wrap_argv`] ends with a lone quote.
fn argv_pieces(args: &[String], charset: Charset, piece: &mut dyn FnMut(&str, usize) -> bool) {
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !piece(" ", 0) {
            return;
        }
        // The piece before the current one, held back to take the quotes.
        let mut held = String::from("\"");
        let mut held_bytes = 0;
        let (mut first, mut go) = (true, true);
        pieces(a.as_bytes(), charset, |p, n| {
            let shown = if p == "\"" { "\\\"" } else { p };
            if !first {
                go = piece(&held, held_bytes);
                held.clear();
            }
            first = false;
            held.push_str(shown);
            held_bytes = n;
            go
        });
        held.push('"');
        if !go || !piece(&held, held_bytes) {
            return;
        }
    }
}

/// [`argv`] in at most `max_columns` terminal columns: when longer, it is
/// cut between two escaped characters (never inside an escape) and ends
/// with `…[cut N bytes]`, N counting the argument bytes not shown.
pub fn bounded_argv(args: &[String], max_columns: usize) -> String {
    bounded_argv_in(args, max_columns, Charset::Unicode)
}

/// [`bounded_argv`] in `charset`.
pub fn bounded_argv_in(args: &[String], max_columns: usize, charset: Charset) -> String {
    wrap_argv(args, max_columns, 1, charset).concat()
}

/// [`argv_in`] laid out in at most `rows` rows of `columns` columns,
/// broken between escaped characters (a row never ends inside an escape),
/// and when it does not fit, cut like [`bounded_argv`], the marker ending
/// the last row.
pub fn wrap_argv(args: &[String], columns: usize, rows: usize, charset: Charset) -> Vec<String> {
    let total = args.iter().map(String::len).sum();
    fit(columns, rows, total, charset, |piece| {
        argv_pieces(args, charset, piece)
    })
}

/// Whether `s` would be printed unchanged by [`escape`], backslashes
/// aside: it holds no control, C1 or hidden character.
pub fn is_plain(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() || hidden(c))
}

/// A message for the terminal: each line printed as is when it is
/// [`is_plain`] (the values in it were escaped when it was made), else
/// escaped whole. Line breaks are kept; nothing else of control reaches
/// the terminal.
pub fn message(s: &str) -> String {
    s.split('\n')
        .map(|line| {
            if is_plain(line) {
                line.to_string()
            } else {
                escape(line)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The inverse of [`escape`] (and of [`quoted`]'s inner part): `None` when
/// `s` is not an escaped form.
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            let mut b = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            continue;
        }
        match it.next()? {
            '\\' => out.push(b'\\'),
            '"' => out.push(b'"'),
            'n' => out.push(b'\n'),
            't' => out.push(b'\t'),
            'r' => out.push(b'\r'),
            'x' => {
                let hex: String = [it.next()?, it.next()?].iter().collect();
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            'u' => {
                if it.next()? != '{' {
                    return None;
                }
                let mut hex = String::new();
                loop {
                    match it.next()? {
                        '}' => break,
                        h => hex.push(h),
                    }
                }
                let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
            _ => return None,
        }
    }
    Some(out)
}

/// JSON text made safe for a terminal without changing its meaning: every
/// non-ASCII character and DEL becomes a `\uXXXX` escape (a surrogate
/// pair beyond the BMP). Control characters below 0x20 are already
/// escaped by any JSON writer, and outside strings JSON is ASCII, so the
/// result parses to exactly the same value.
pub fn ascii_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() && c != '\u{7f}' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{u:04x}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminal_safe(s: &str) -> bool {
        s.bytes().all(|b| (0x20..0x7f).contains(&b) || b >= 0x80)
            && !s.chars().any(|c| c.is_control() || hidden(c))
    }

    #[test]
    fn every_byte_alone_is_visible_and_round_trips() {
        for b in 0u8..=255 {
            let e = escape([b]);
            assert!(terminal_safe(&e), "{b:#x} -> {e:?}");
            assert_eq!(unescape(&e), Some(vec![b]), "{b:#x} -> {e:?}");
            match b {
                b'\\' => assert_eq!(e, "\\\\"),
                b'\n' => assert_eq!(e, "\\n"),
                b'\t' => assert_eq!(e, "\\t"),
                b'\r' => assert_eq!(e, "\\r"),
                0..=0x1f | 0x7f | 0x80..=0xff => assert_eq!(e, format!("\\x{b:02x}")),
                _ => assert_eq!(e, (b as char).to_string()),
            }
        }
        assert_eq!(escape(b"\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape(b"\x00\x07\x08\x7f"), "\\x00\\x07\\x08\\x7f");
    }

    #[test]
    fn c1_controls_and_hidden_characters_are_shown_as_code_points() {
        for c in 0x80u32..=0x9f {
            let ch = char::from_u32(c).unwrap();
            let e = escape(ch.to_string());
            assert_eq!(e, format!("\\u{{{c:x}}}"));
            assert!(terminal_safe(&e));
            assert_eq!(unescape(&e).unwrap(), ch.to_string().as_bytes());
        }
        assert_eq!(escape("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(
            escape("a\u{202e}b\u{2066}\u{200b}"),
            "a\\u{202e}b\\u{2066}\\u{200b}"
        );
        assert_eq!(escape("\u{2028}\u{feff}"), "\\u{2028}\\u{feff}");
        // Printable non-ASCII stays readable.
        assert_eq!(escape("café ü 日本 ✓"), "café ü 日本 ✓");
    }

    #[test]
    fn invalid_utf8_is_shown_byte_by_byte_and_distinct_from_c1() {
        // A lone continuation byte vs the same value as a C1 character.
        assert_eq!(escape(b"\x9b"), "\\x9b");
        assert_eq!(escape("\u{9b}"), "\\u{9b}");
        // Truncated sequences, overlongs, surrogates, beyond U+10FFFF.
        for bad in [
            &b"\xc3"[..],
            b"\xe2\x82",
            b"\xc0\xaf",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xff\xfe",
            b"ok\xffok",
        ] {
            let e = escape(bad);
            assert!(terminal_safe(&e), "{bad:?} -> {e}");
            assert_eq!(unescape(&e).as_deref(), Some(bad), "{bad:?} -> {e}");
        }
        assert_eq!(escape(b"ok\xffok"), "ok\\xffok");
    }

    #[test]
    fn the_escape_is_unambiguous() {
        // What looks like an escape in the input is itself escaped.
        assert_eq!(escape("\\x1b"), "\\\\x1b");
        assert_ne!(escape("\\x1b"), escape("\x1b"));
        assert_eq!(unescape("\\\\x1b").unwrap(), b"\\x1b");
        // Every pair of two-byte inputs maps to distinct outputs.
        let mut seen = std::collections::HashSet::new();
        for a in 0u8..=255 {
            for b in [0u8, b'\\', b'x', b'1', 0x1b, 0x80, 0xc2, 0x9b, 0xff] {
                assert!(seen.insert(escape([a, b])), "{a:#x} {b:#x}");
            }
        }
        assert_eq!(unescape("\\q"), None);
        assert_eq!(unescape("\\x1"), None);
        assert_eq!(unescape("\\u{110000}"), None);
    }

    #[test]
    fn quoted_arguments_show_boundaries() {
        assert_eq!(
            argv(&[
                "rm".into(),
                "a b".into(),
                "x\ny".into(),
                "\u{1b}[2J".into(),
                "q\"".into()
            ]),
            r#""rm" "a b" "x\ny" "\x1b[2J" "q\"""#
        );
    }

    #[test]
    fn bounded_cuts_between_escapes_with_a_marker() {
        assert_eq!(bounded("short", 40), "short");
        let long = "a".repeat(100);
        let b = bounded(&long, 40);
        assert!(columns(&b) <= 40, "{b}");
        assert!(
            b.starts_with("aaaa") && b.ends_with("…[cut 77 bytes]"),
            "{b}"
        );
        // Never half an escape; newlines never survive.
        let b = bounded("\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\n\n\n\n\n\n\n\n\n\n", 30);
        assert!(terminal_safe(&b) && !b.contains('\n'), "{b}");
        let kept = b.split('…').next().unwrap();
        assert!(unescape(kept).is_some(), "{b}");
        assert!(columns(&bounded("日".repeat(100), 40)) <= 40);
    }

    #[test]
    fn bounded_argv_cuts_between_escapes_with_a_marker() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(bounded_argv(&v(&["a", "b c"]), 40), r#""a" "b c""#);
        let long = v(&["bash", "-c", &"\x1b[2J\"".repeat(30), "tail"]);
        let b = bounded_argv(&long, 60);
        assert!(columns(&b) <= 60, "{b}");
        assert!(terminal_safe(&b), "{b}");
        assert!(b.starts_with(r#""bash" "-c" "\x1b[2J\""#), "{b}");
        let total: usize = long.iter().map(String::len).sum();
        let (kept, cut) = b.split_once('…').unwrap();
        // Never half an escape: the shown text is whole escaped pieces.
        assert!(!kept.ends_with("\\x1") && !kept.ends_with("\\"), "{b}");
        let n: usize = cut
            .trim_start_matches("[cut ")
            .trim_end_matches(" bytes]")
            .parse()
            .unwrap();
        assert!(n > 0 && n < total, "{b}");
    }

    #[test]
    fn invisible_and_space_like_characters_are_escaped_in_every_charset() {
        let invisible = [
            '\u{e0041}', // tag LATIN CAPITAL LETTER A
            '\u{e0001}',
            '\u{e007f}', // cancel tag
            '\u{115f}',  // Hangul choseong filler (two columns of blank)
            '\u{1160}',
            '\u{3164}',
            '\u{ffa0}',
            '\u{ad}',   // soft hyphen
            '\u{301}',  // combining acute accent
            '\u{338}',  // combining long solidus overlay
            '\u{20dd}', // combining enclosing circle
            '\u{fe0f}', // variation selector 16
            '\u{e0100}',
            '\u{180b}',
            '\u{34f}', // combining grapheme joiner
            '\u{200d}',
            '\u{2060}',
            '\u{61c}',
            '\u{11a8}', // Hangul jongseong (joins the syllable before)
            '\u{a0}',   // no-break space
            '\u{2003}', // em space
            '\u{202f}',
            '\u{3000}', // ideographic space
            '\u{2800}', // Braille blank
            '\u{1680}',
            '\u{2029}',
            '\u{e000}', // private use
            '\u{f8ff}',
            '\u{10fffd}',
            '\u{fdd0}', // noncharacters
            '\u{fffe}',
            '\u{1ffff}',
        ];
        for c in invisible {
            for cs in [Charset::Unicode, Charset::Ascii] {
                let e = escape_in(format!("a{c}b"), cs);
                assert_eq!(e, format!("a\\u{{{:x}}}b", c as u32), "{c:?} {cs:?}");
                assert_eq!(unescape(&e).unwrap(), format!("a{c}b").as_bytes());
            }
            assert!(!is_plain(&c.to_string()), "{c:?}");
        }
        // Printable characters of other scripts stay readable outside
        // the prompt, and are escaped in ASCII.
        for visible in ["é", "日", "✓", "а", "א", "😀"] {
            assert_eq!(escape(visible), visible);
            assert!(is_plain(visible));
            let a = escape_in(visible, Charset::Ascii);
            assert!(a.is_ascii() && a.starts_with("\\u{"), "{a}");
            assert_eq!(unescape(&a).unwrap(), visible.as_bytes());
        }
        assert_eq!(escape_in("pаypal", Charset::Ascii), "p\\u{430}ypal");
    }

    #[test]
    fn every_code_point_round_trips_and_what_is_shown_raw_takes_columns() {
        let mut raw = 0;
        for c in (0..=0x10ffffu32).filter_map(char::from_u32) {
            let s = c.to_string();
            let u = escape(&s);
            assert_eq!(unescape(&u).as_deref(), Some(s.as_bytes()), "{c:?}");
            if u == s && !c.is_ascii() {
                raw += 1;
                assert!(
                    matches!(c.width(), Some(1..)),
                    "{c:?} is shown raw but takes no column"
                );
                assert!(!hidden(c) && !c.is_control());
            }
            let a = escape_in(&s, Charset::Ascii);
            assert!(a.bytes().all(|b| (0x20..0x7f).contains(&b)), "{c:?} -> {a}");
            assert_eq!(unescape(&a).as_deref(), Some(s.as_bytes()), "{c:?}");
        }
        // Most of Unicode is still readable in listings.
        assert!(raw > 100_000, "{raw}");
    }

    #[test]
    fn wrapped_vectors_fill_rows_and_are_cut_with_a_count() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let short = v(&["git", "fetch", "origin"]);
        assert_eq!(
            wrap_argv(&short, 80, 3, Charset::Ascii),
            vec![r#""git" "fetch" "origin""#]
        );
        // Broken between arguments, the separating space dropped.
        assert_eq!(
            wrap_argv(&short, 14, 3, Charset::Ascii),
            vec![r#""git" "fetch""#, r#""origin""#]
        );
        let long = v(&["sh", "-c", &"echo \u{e0041}x; ".repeat(40), "é"]);
        let total: usize = long.iter().map(String::len).sum();
        for (cols, rows) in [(20, 1), (30, 4), (63, 6), (80, 8)] {
            let r = wrap_argv(&long, cols, rows, Charset::Ascii);
            assert!(r.len() <= rows, "{r:?}");
            for row in &r {
                assert!(row.is_ascii() && row.len() <= cols, "{row:?} {cols}");
            }
            let last = r.last().unwrap();
            let (_, cut) = last.rsplit_once("...[cut ").expect(last);
            let n: usize = cut.trim_end_matches(" bytes]").parse().unwrap();
            assert!(n > 0 && n < total, "{r:?}");
            // Rows end between escapes, never inside one.
            for row in &r[..r.len() - 1] {
                assert!(!row.ends_with('\\') && !row.ends_with("\\u{e004"), "{r:?}");
            }
        }
        // Everything fits: nothing is cut, and rows broken between
        // arguments join back to the one-line form.
        let many = v(&["a", "bb", "ccc", "dddd", "eeeee", "ffffff"].repeat(8));
        let r = wrap_argv(&many, 20, 20, Charset::Unicode);
        assert!(r.len() > 1 && !r.concat().contains("[cut "), "{r:?}");
        assert_eq!(r.join(" "), argv(&many));
        assert_eq!(
            wrap_argv(&v(&["x"]), 80, 0, Charset::Ascii),
            vec![r#""x""#],
            "zero rows is one"
        );
    }

    #[test]
    fn messages_keep_lines_and_escape_unsafe_ones() {
        assert_eq!(message("a\nb \\x1b"), "a\nb \\x1b");
        assert_eq!(message("ok\nbad \x1b[2J"), "ok\nbad \\x1b[2J");
        assert_eq!(message("tab\there"), "tab\\there");
    }

    #[test]
    fn ascii_json_keeps_the_value() {
        let s = "{\"a\":\"\\u001b\u{9b}\u{7f}é\u{202e}😀\"}";
        let j = ascii_json(s);
        assert!(j.is_ascii() && !j.contains('\u{7f}'), "{j}");
        assert_eq!(
            j,
            "{\"a\":\"\\u001b\\u009b\\u007f\\u00e9\\u202e\\ud83d\\ude00\"}"
        );
    }
}
