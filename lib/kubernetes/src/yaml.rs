//! YAML out, from `serde_json::Value`: block style, as `kubectl` prints.
//!
//! Why not a YAML crate: serde_yaml is deprecated and serde_norway, its
//! maintained fork, writes `off`, `yes`, `no`, `on`, `12:30` or
//! `2001-12-14` unquoted. Those are strings in YAML 1.2, but Kubernetes
//! reads manifests with a YAML 1.1 resolver (sigs.k8s.io/yaml), where they
//! are booleans, numbers and timestamps: an annotation `off` would be
//! refused, an env value `no` would become `false`. So a string is
//! written plain only when it looks like nothing but a string in either
//! version ([`plain`]); otherwise double-quoted (JSON's escapes are
//! YAML's), or as a literal block when it has several lines. The tests
//! read every output back (with serde_norway) and compare.

use serde_json::Value;

/// One document, ending in a newline.
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => map(m, 0, &mut out),
        Value::Array(a) if !a.is_empty() => seq(a, 0, &mut out),
        other => {
            out.push_str(&scalar(other).unwrap_or_default());
            out.push('\n');
        }
    }
    out
}

/// Strings that no YAML 1.1 or 1.2 resolver reads as anything else:
/// a letter, `_` or `/` first, then letters, digits, `_`, `.`, `/` and
/// `-`, and not one of 1.1's booleans or null.
fn plain(s: &str) -> bool {
    const WORDS: [&str; 11] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf",
    ];
    let mut bytes = s.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'/');
    first_ok
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str())
}

fn quoted(s: &str) -> String {
    // A JSON string: `Value`'s `Display`, which cannot fail.
    Value::from(s).to_string()
}

/// A key or a one-line value; `None` for what needs more than a line.
fn scalar(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if literal_header(s).is_some() => return None,
        Value::String(s) if plain(s) => s.clone(),
        Value::String(s) => quoted(s),
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        _ => return None,
    })
}

/// `|` or `|-` when `s` reads back exactly as a literal block: several
/// lines, at most one newline at the end, no control character but the
/// newline, and no line that starts or ends with a blank (indentation and
/// trailing blanks are where block scalars are easy to get wrong).
fn literal_header(s: &str) -> Option<&'static str> {
    let body = s.strip_suffix('\n').unwrap_or(s);
    let ok = body.contains('\n')
        && !body.ends_with('\n')
        // The block's indentation is read from its first line.
        && !body.starts_with(['\n', ' ', '\t'])
        && body.split('\n').all(|l| {
            !l.ends_with([' ', '\t']) && l.chars().all(|c| !c.is_control() || c == '\t')
        });
    ok.then_some(if s.ends_with('\n') { "|" } else { "|-" })
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn literal(s: &str, header: &str, indent: usize, out: &mut String) {
    out.push_str(header);
    out.push('\n');
    for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// After `key:` or `-`: the value on the same line, or below it.
fn value(v: &Value, indent: usize, out: &mut String, in_seq: bool) {
    if let Value::String(s) = v {
        if let Some(header) = literal_header(s) {
            out.push(' ');
            literal(s, header, indent + 2, out);
            return;
        }
    }
    if let Some(s) = scalar(v) {
        out.push(' ');
        out.push_str(&s);
        out.push('\n');
        return;
    }
    match v {
        Value::Object(m) => {
            out.push('\n');
            map(m, indent + 2, out);
        }
        Value::Array(a) => {
            out.push('\n');
            // kubectl's style: a list under a key at the key's indentation.
            seq(a, if in_seq { indent + 2 } else { indent }, out);
        }
        _ => unreachable!("scalars are handled above"),
    }
}

fn map(m: &serde_json::Map<String, Value>, indent: usize, out: &mut String) {
    for (k, v) in m {
        pad(out, indent);
        out.push_str(&if plain(k) { k.clone() } else { quoted(k) });
        out.push(':');
        value(v, indent, out, false);
    }
}

fn seq(a: &[Value], indent: usize, out: &mut String) {
    for v in a {
        pad(out, indent);
        out.push('-');
        match v {
            Value::Object(m) if !m.is_empty() => {
                // The first key on the dash's line, the others under it.
                let mut inner = String::new();
                map(m, indent + 2, &mut inner);
                out.push(' ');
                out.push_str(&inner[indent + 2..]);
            }
            _ => value(v, indent, out, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: &Value) -> String {
        let text = to_string(v);
        let back: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, v, "\n{text}");
        text
    }

    #[test]
    fn yaml_1_1_words_and_numbers_are_quoted() {
        for s in [
            "off",
            "On",
            "yes",
            "NO",
            "y",
            "n",
            "true",
            "null",
            "~",
            "1",
            "1.0",
            "0755",
            "0x1f",
            "1e3",
            ".inf",
            "1_000",
            "12:30",
            "2001-12-14",
            "",
            " x",
            "a: b",
            "#c",
            "-",
            "- x",
            "*a",
            "&a",
            "!t",
            "@x",
            "%x",
            "{",
            "[",
            "'q",
            "\"q",
            "<<",
            "=",
            "+1",
            "nan",
        ] {
            let text = round_trip(&json!({ "k": s }));
            assert_eq!(text, format!("k: {}\n", quoted(s)), "{s:?}");
        }
        for s in [
            "runsc",
            "lazaret-gvisor",
            "/workspace",
            "v1",
            "apps/v1",
            "a.b_c-d",
        ] {
            assert_eq!(round_trip(&json!({ "k": s })), format!("k: {s}\n"));
        }
    }

    #[test]
    fn several_lines_are_a_literal_block_or_quoted() {
        let text = round_trip(&json!({ "script": "set -eu\nif x; then\n  y\nfi\n" }));
        assert!(text.starts_with("script: |\n  set -eu\n"), "{text}");
        let text = round_trip(&json!({ "s": "a\nb" }));
        assert!(text.starts_with("s: |-\n"), "{text}");
        let text = round_trip(&json!({ "s": "a\n\nb\n" }));
        assert!(text.starts_with("s: |\n"), "{text}");
        // What a block cannot say exactly is quoted.
        for s in [
            " lead\nx",
            "a\nb\n\n",
            "trail \nx",
            "ctl\u{7}\nx",
            "\nx",
            "a\r\nb",
        ] {
            let text = round_trip(&json!({ "s": s }));
            assert!(text.starts_with("s: \""), "{s:?}: {text}");
        }
    }

    #[test]
    fn nesting_reads_back() {
        round_trip(&json!({
            "a": [1, "x", {"b": [], "c": {}}, [2, [3, {"d": "off"}]], {"e": {"f": ["g"]}}],
            "h": {"i": null, "j": true, "k": 1.5, "multi": "p\nq\n"},
            "list": [{"script": "x\ny\n", "n": 1}],
            "weird key": 1,
            "off": 2
        }));
    }
}
