//! Mapping between byte offsets in the config text and dotted key paths.
//!
//! serde errors carry a byte span but not (publicly) the key they concern,
//! and semantic validation knows the key but not the line. Re-parsing the
//! text with `toml_edit`, which keeps spans, and indexing every key bridges
//! both ways. This only runs when an error is reported.

use std::fmt;
use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, TableLike, Value};

/// One step in a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// A path such as `profiles.default.volumes[0].sandbox`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(pub(crate) Vec<Seg>);

impl KeyPath {
    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_owned()));
        Self(segs)
    }

    pub(crate) fn index(&self, index: usize) -> Self {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(index));
        Self(segs)
    }
}

/// Build a path from literal keys, e.g. `key_path!["storage", "data_root"]`.
macro_rules! key_path {
    ($($seg:expr),* $(,)?) => {
        $crate::spans::KeyPath(vec![$($crate::spans::Seg::Key(String::from($seg))),*])
    };
}
pub(crate) use key_path;

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Index(n) => write!(f, "[{n}]")?,
                Seg::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    write_key(f, k)?;
                }
            }
        }
        Ok(())
    }
}

/// Write a key the way TOML would need it: bare if possible, else quoted.
fn write_key(f: &mut fmt::Formatter<'_>, key: &str) -> fmt::Result {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        return f.write_str(key);
    }
    f.write_str("\"")?;
    for c in key.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            c if c.is_control() => write!(f, "\\u{:04X}", u32::from(c))?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

struct Entry {
    path: KeyPath,
    key_span: Option<Range<usize>>,
    value_span: Option<Range<usize>>,
}

/// Every key and array element of a document with its spans.
pub(crate) struct SpanIndex<'a> {
    text: &'a str,
    entries: Vec<Entry>,
}

impl<'a> SpanIndex<'a> {
    /// `None` when the text is not even syntactically valid TOML.
    pub(crate) fn build(text: &'a str) -> Option<Self> {
        let doc = ImDocument::parse(text).ok()?;
        let mut index = Self {
            text,
            entries: Vec::new(),
        };
        index.walk_table(doc.as_table(), &KeyPath::default());
        Some(index)
    }

    /// 1-based line of a byte offset.
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        line_of(self.text, offset)
    }

    /// The innermost key whose key or value contains `offset`.
    pub(crate) fn path_at(&self, offset: usize) -> Option<&KeyPath> {
        let contains = |r: &Option<Range<usize>>| {
            r.as_ref()
                .filter(|r| r.contains(&offset) || r.start == offset)
                .map(|r| r.len())
        };
        let mut best: Option<(usize, &Entry)> = None;
        for entry in &self.entries {
            let Some(len) = [contains(&entry.key_span), contains(&entry.value_span)]
                .into_iter()
                .flatten()
                .min()
            else {
                continue;
            };
            // Smallest span is the innermost; `<=` lets a later entry win a
            // tie because children are pushed after their parent.
            if !matches!(best, Some((best_len, _)) if len > best_len) {
                best = Some((len, entry));
            }
        }
        best.map(|(_, entry)| &entry.path)
    }

    /// Line of `path`, or of its nearest ancestor that has a position.
    pub(crate) fn line_of_path(&self, path: &KeyPath) -> Option<usize> {
        (0..=path.0.len()).rev().find_map(|len| {
            let prefix = &path.0[..len];
            self.entries
                .iter()
                .find(|e| e.path.0 == prefix)
                .and_then(|e| e.key_span.clone().or_else(|| e.value_span.clone()))
                .map(|span| self.line_of(span.start))
        })
    }

    fn push(&mut self, path: KeyPath, key_span: Option<Range<usize>>, item: &Item) {
        self.entries.push(Entry {
            path: path.clone(),
            key_span,
            value_span: item.span(),
        });
        match item {
            Item::None => {}
            Item::Table(table) => self.walk_table(table, &path),
            Item::ArrayOfTables(tables) => {
                for (i, table) in tables.iter().enumerate() {
                    let path = self.push_element(&path, i, table.span());
                    self.walk_table(table, &path);
                }
            }
            Item::Value(value) => self.walk_value(value, &path),
        }
    }

    /// Records the `i`th element of the array at `path` (an array of
    /// tables, or an array value), which spans `span`; returns its path.
    fn push_element(&mut self, path: &KeyPath, i: usize, span: Option<Range<usize>>) -> KeyPath {
        let path = path.index(i);
        self.entries.push(Entry {
            path: path.clone(),
            key_span: None,
            value_span: span,
        });
        path
    }

    fn walk_table(&mut self, table: &Table, path: &KeyPath) {
        self.walk_table_like(table, path);
    }

    fn walk_table_like(&mut self, table: &dyn TableLike, path: &KeyPath) {
        for (key, item) in table.iter() {
            let key_span = table.key(key).and_then(|k| k.span());
            self.push(path.key(key), key_span, item);
        }
    }

    fn walk_value(&mut self, value: &Value, path: &KeyPath) {
        match value {
            Value::Array(array) => {
                for (i, element) in array.iter().enumerate() {
                    let path = self.push_element(path, i, element.span());
                    self.walk_value(element, &path);
                }
            }
            Value::InlineTable(table) => self.walk_table_like(table, path),
            _ => {}
        }
    }
}

/// 1-based line of a byte offset (clamped to the text).
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    1 + text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
[storage]
data_root = \"/d\"

[profiles.main]
image = \"img\"
env = { A = \"1\", \"B C\" = \"2\" }
persistent_paths = [
  \"/usr\",
  \"/etc\",
]

[[profiles.main.volumes]]
host = \"/h\"
sandbox = \"/s\"
";

    #[test]
    fn key_path_display_quotes_non_bare_keys() {
        let p = key_path!["profiles", "a.b"].key("env").key("X\"Y").index(2);
        assert_eq!(p.to_string(), r#"profiles."a.b".env."X\"Y"[2]"#);
    }

    #[test]
    fn finds_lines_of_paths() {
        let index = SpanIndex::build(DOC).unwrap();
        assert_eq!(
            index.line_of_path(&key_path!["storage", "data_root"]),
            Some(2)
        );
        assert_eq!(index.line_of_path(&key_path!["profiles", "main"]), Some(4));
        assert_eq!(
            index.line_of_path(&key_path!["profiles", "main", "image"]),
            Some(5)
        );
        let env_b = key_path!["profiles", "main", "env", "B C"];
        assert_eq!(index.line_of_path(&env_b), Some(6));
        let pp = key_path!["profiles", "main", "persistent_paths"].index(1);
        assert_eq!(index.line_of_path(&pp), Some(9));
        let sandbox = key_path!["profiles", "main", "volumes"]
            .index(0)
            .key("sandbox");
        assert_eq!(index.line_of_path(&sandbox), Some(14));
        // Unknown paths fall back to the nearest known ancestor.
        let missing = key_path!["profiles", "main", "nope"];
        assert_eq!(index.line_of_path(&missing), Some(4));
    }

    #[test]
    fn finds_innermost_path_at_offset() {
        let index = SpanIndex::build(DOC).unwrap();
        let at = |needle: &str| {
            let offset = DOC.find(needle).unwrap();
            index.path_at(offset).map(ToString::to_string)
        };
        assert_eq!(at("\"img\"").as_deref(), Some("profiles.main.image"));
        assert_eq!(at("\"2\"").as_deref(), Some("profiles.main.env.\"B C\""));
        assert_eq!(
            at("\"/etc\"").as_deref(),
            Some("profiles.main.persistent_paths[1]")
        );
        assert_eq!(
            at("sandbox").as_deref(),
            Some("profiles.main.volumes[0].sandbox")
        );
    }

    #[test]
    fn line_of_counts_newlines() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }
}
