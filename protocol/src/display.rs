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
//! | Unicode format characters that reorder or hide text (bidi overrides and isolates, zero-width characters, line and paragraph separators, BOM, interlinear annotations) | `\u{NNNN}` |
//! | every other character | itself |
//!
//! So no C0, C1, DEL or ESC byte reaches the terminal, and a `\` in the
//! output always starts an escape. [`quoted`] additionally escapes `"`
//! and wraps the result in quotes (for argument vectors); [`bounded`]
//! cuts an escaped field to a number of terminal columns with a marker.
//!
//! JSON output: names that may be arbitrary bytes (file names, mailbox
//! entry names) are carried as their [`escape`] form, so the exact bytes
//! come back with [`unescape`]; UTF-8 strings (argument vectors,
//! justifications) are carried as JSON strings written by [`ascii_json`],
//! whose only non-ASCII or control characters are standard `\uXXXX`
//! escapes, so any JSON parser gets the exact string back.

use std::fmt::Write;

/// Characters shown as `\u{...}` although they are valid UTF-8: C1
/// controls and format characters that reorder, hide or break text.
fn hidden(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}

/// Calls `piece` with the escaped form of each input character (or invalid
/// byte), in order: the single definition of the escape.
fn pieces(bytes: &[u8], mut piece: impl FnMut(&str) -> bool) {
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
                c if hidden(c) => {
                    let _ = write!(buf, "\\u{{{:x}}}", c as u32);
                }
                c => buf.push(c),
            }
            if !piece(&buf) {
                return;
            }
        }
        for b in chunk.invalid() {
            buf.clear();
            let _ = write!(buf, "\\x{b:02x}");
            if !piece(&buf) {
                return;
            }
        }
    }
}

/// The escaped, printable, single-line form of `bytes` (see the module
/// documentation).
pub fn escape(bytes: impl AsRef<[u8]>) -> String {
    let bytes = bytes.as_ref();
    let mut out = String::with_capacity(bytes.len());
    pieces(bytes, |p| {
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
    format!("\"{}\"", escape(bytes).replace('"', "\\\""))
}

/// An argument vector, each argument [`quoted`], separated by spaces.
pub fn argv(argv: &[String]) -> String {
    argv.iter().map(quoted).collect::<Vec<_>>().join(" ")
}

/// Terminal columns a character may take (conservatively: everything from
/// U+1100 on may be double width).
fn columns(s: &str) -> usize {
    s.chars().map(|c| if c >= '\u{1100}' { 2 } else { 1 }).sum()
}

/// The escaped form of `bytes` in at most `max_columns` terminal columns:
/// when longer, it is cut between two escaped characters and ends with
/// `…[cut N bytes]` (the marker counts towards the bound).
pub fn bounded(bytes: impl AsRef<[u8]>, max_columns: usize) -> String {
    let bytes = bytes.as_ref();
    let full = escape(bytes);
    if columns(&full) <= max_columns {
        return full;
    }
    // The marker's own width, with room for the largest count.
    let marker_width = columns(&format!("…[cut {} bytes]", bytes.len()));
    let budget = max_columns.saturating_sub(marker_width);
    let mut out = String::new();
    let mut used = 0;
    let mut kept = 0;
    pieces(bytes, |p| {
        let w = columns(p);
        if used + w > budget {
            return false;
        }
        used += w;
        out.push_str(p);
        kept += unescape(p).map_or(0, |b| b.len());
        true
    });
    let _ = write!(out, "…[cut {} bytes]", bytes.len() - kept);
    out
}

/// [`argv`] in at most `max_columns` terminal columns: when longer, it is
/// cut between two escaped characters (never inside an escape) and ends
/// with `…[cut N bytes]`, N counting the argument bytes not shown.
pub fn bounded_argv(args: &[String], max_columns: usize) -> String {
    let full = argv(args);
    if columns(&full) <= max_columns {
        return full;
    }
    let total: usize = args.iter().map(String::len).sum();
    let marker_width = columns(&format!("…[cut {total} bytes]"));
    let budget = max_columns.saturating_sub(marker_width);
    let mut out = String::new();
    let (mut used, mut kept) = (0, 0);
    let mut fits = |p: &str, bytes: usize, out: &mut String| {
        if used + columns(p) > budget {
            return false;
        }
        used += columns(p);
        kept += bytes;
        out.push_str(p);
        true
    };
    'args: for (i, a) in args.iter().enumerate() {
        let open = if i == 0 { "\"" } else { " \"" };
        if !fits(open, 0, &mut out) {
            break;
        }
        let mut full = true;
        pieces(a.as_bytes(), |p| {
            let shown = if p == "\"" { "\\\"" } else { p };
            let n = unescape(p).map_or(0, |b| b.len());
            full = fits(shown, n, &mut out);
            full
        });
        if !full || !fits("\"", 0, &mut out) {
            break 'args;
        }
    }
    let _ = write!(out, "…[cut {} bytes]", total - kept);
    out
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
