//! Two of the house rules on shipping code (`docs/layout.md`, "House
//! rules"): no function over 120 lines, at most ten over 80; no `pub fn`
//! returns `Result<_, String>`.
//!
//! Shipping code is every `.rs` file under `bin/` and `lib/` except
//! `tests/` folders, `*_tests.rs`, `tests.rs`, `build.rs` and
//! `compile.rs` (build-time), with `#[cfg(test)]` items left out. A
//! function is counted from the line of its `fn` to the line of its
//! closing brace, braces matched outside comments, strings and character
//! literals.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 120;
const LONG_LINES: usize = 80;
const MAX_LONG: usize = 10;

/// `s` with comments, string and character literals blanked (newlines
/// kept), so that braces are only code's.
fn blank(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let keep_newlines = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend(bytes.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    while i < b.len() {
        let rest = &b[i..];
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            keep_newlines(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = find(rest, b"*/", 2).map_or(rest.len(), |e| e + 2);
            keep_newlines(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'r' && !prev_ident && raw_string_start(rest).is_some() {
            let (open, hashes) = raw_string_start(rest).unwrap_or_default();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let end = find(rest, &close, open).map_or(rest.len(), |e| e + close.len());
            keep_newlines(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            keep_newlines(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' && char_literal_len(rest).is_some() {
            let n = char_literal_len(rest).unwrap_or(1);
            out.extend(std::iter::repeat_n(b' ', n));
            i += n;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    (from..=hay.len().checked_sub(needle.len())?).find(|&k| hay[k..].starts_with(needle))
}

/// `r"`, `r#"`...: the length of the opening and the number of `#`.
fn raw_string_start(s: &[u8]) -> Option<(usize, usize)> {
    let hashes = s[1..].iter().take_while(|&&c| c == b'#').count();
    (s.get(1 + hashes) == Some(&b'"')).then_some((2 + hashes, hashes))
}

/// The length of a character literal at the start of `s` (not a
/// lifetime).
fn char_literal_len(s: &[u8]) -> Option<usize> {
    if s.get(1) == Some(&b'\\') {
        let end = s[2..].iter().take(12).position(|&c| c == b'\'')?;
        return Some(end + 3);
    }
    let text = std::str::from_utf8(&s[1..s.len().min(6)])
        .ok()
        .or_else(|| {
            // A multi-byte character cut by the slice: decode what is valid.
            let valid = std::str::from_utf8(&s[1..s.len().min(6)])
                .err()
                .map(|e| e.valid_up_to())?;
            std::str::from_utf8(&s[1..1 + valid]).ok()
        })?;
    let c = text.chars().next()?;
    (s.get(1 + c.len_utf8()) == Some(&b'\'')).then_some(2 + c.len_utf8())
}

fn is_fn_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    for w in words.by_ref() {
        let w = w.split('(').next().unwrap_or(w);
        match w {
            "fn" => return true,
            "pub" | "const" | "async" | "unsafe" | "extern" | "\"C\"" => {}
            _ if w.starts_with("pub(") => {}
            _ => return false,
        }
    }
    false
}

/// `(first line, length)` of each function in `src` outside
/// `#[cfg(test)]` items.
fn functions(src: &str) -> Vec<(usize, usize)> {
    let text = blank(src);
    let lines: Vec<&str> = text.lines().collect();
    let mut excluded = vec![false; lines.len()];
    let item_end = |from: usize| -> usize {
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(from) {
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => depth -= 1,
                    ';' if !started && depth == 0 => return j,
                    _ => {}
                }
            }
            if started && depth == 0 {
                return j;
            }
        }
        lines.len() - 1
    };
    for i in 0..lines.len() {
        let t = lines[i].trim_start();
        if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
            let end = item_end(i + 1);
            excluded[i..=end].iter_mut().for_each(|e| *e = true);
        }
    }
    let mut out = Vec::new();
    for i in 0..lines.len() {
        if excluded[i] || !is_fn_line(lines[i]) {
            continue;
        }
        let end = item_end(i);
        // A declaration without a body ends on its own `;`.
        if lines[i..=end].iter().any(|l| l.contains('{')) {
            out.push((i + 1, end - i + 1));
        }
    }
    out
}

fn shipping_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "tests" && name != "target" {
                shipping_files(&p, out);
            }
        } else if name.ends_with(".rs")
            && !name.ends_with("_tests.rs")
            && !["tests.rs", "build.rs", "compile.rs"].contains(&name.as_str())
        {
            out.push(p);
        }
    }
}

#[test]
fn shipping_functions_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for floor in ["bin", "lib"] {
        shipping_files(&root.join(floor), &mut files);
    }
    assert!(
        files.len() > 100,
        "the walk found the code: {}",
        files.len()
    );
    let mut long = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for (line, n) in functions(&src) {
            if n > LONG_LINES {
                let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
                long.push((n, format!("{rel}:{line}")));
            }
        }
    }
    long.sort();
    let too_long: Vec<_> = long.iter().filter(|(n, _)| *n > MAX_LINES).collect();
    assert!(too_long.is_empty(), "over {MAX_LINES} lines: {too_long:?}");
    assert!(
        long.len() <= MAX_LONG,
        "{} functions over {LONG_LINES} lines (at most {MAX_LONG}): {long:?}",
        long.len()
    );
}

/// The counter sees a long function, skips `#[cfg(test)]` items and is not
/// fooled by braces in strings, characters and comments.
#[test]
fn the_counter_counts_what_it_should() {
    let body = "    let x = 1;\n".repeat(130);
    let src = format!(
        "pub(crate) fn long() {{\n{body}}}\n\
         fn tricky() {{\n    let s = \"}}}}\"; let c = '}}'; // }}\n    let r = r#\"{{\"#;\n}}\n\
         fn declared();\n\
         #[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n\
         unsafe fn after<'a>(x: &'a str) -> char {{\n    'x'\n}}\n"
    );
    let f = functions(&src);
    assert_eq!(f, [(1, 132), (133, 4), (273, 3)], "{f:?}");
}

/// The return type of a `pub fn` declared at `line` (0-based) of the
/// blanked text: what stands between `->` and the body's `{`.
fn return_type(lines: &[&str], line: usize) -> Option<String> {
    let sig: String = lines[line..]
        .iter()
        .take(20)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let sig = &sig[..sig.find('{').unwrap_or(sig.len())];
    let ret = sig.split_once("->")?.1;
    Some(ret.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The lines (1-based) of the `pub fn`s in `src` whose error is text.
fn text_errors(src: &str) -> Vec<usize> {
    let text = blank(src);
    let lines: Vec<&str> = text.lines().collect();
    functions(src)
        .into_iter()
        .filter(|(line, _)| lines[line - 1].trim_start().starts_with("pub fn "))
        .filter(|(line, _)| {
            return_type(&lines, line - 1).is_some_and(|r| {
                r.starts_with("Result<") && r.replace(' ', "").ends_with(",String>")
            })
        })
        .map(|(line, _)| line)
        .collect()
}

/// Errors are types at the seams (`docs/layout.md`, "House rules"): no
/// `pub fn` of shipping code returns `Result<_, String>`.
#[test]
fn no_public_function_returns_a_text_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for floor in ["bin", "lib"] {
        shipping_files(&root.join(floor), &mut files);
    }
    let mut found = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for line in text_errors(&src) {
            let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            found.push(format!("{rel}:{line}"));
        }
    }
    assert!(found.is_empty(), "pub fn with a String error: {found:?}");
    // The check sees one, across lines, and not a private one or a
    // `String` value.
    let src = "pub fn a(x: u8)\n    -> Result<Vec<u8>, String> {\n    todo!()\n}\n\
               fn b() -> Result<(), String> {\n    todo!()\n}\n\
               pub fn c() -> Result<String, E> {\n    todo!()\n}\n";
    assert_eq!(text_errors(src), [1]);
}
