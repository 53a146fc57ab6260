//! Host Git configuration, read by plain parsing: Lazaret never runs
//! `git` to learn a setting, so nothing a configuration file names (an
//! fsmonitor, an alias, a pager) is ever executed by it. Includes are not
//! followed: a setting that only an included file makes is not seen (the
//! callers say what that means for them).

use std::path::PathBuf;

/// The system and global Git configuration files, as Git finds them (in
/// Git's order: later files win), from this process's environment.
pub fn global_files() -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut files = Vec::new();
    if env("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(
            env("GIT_CONFIG_SYSTEM").map_or_else(|| PathBuf::from("/etc/gitconfig"), PathBuf::from),
        );
    }
    if let Some(g) = env("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(g));
    } else {
        let home = env("HOME").map(PathBuf::from);
        if let Some(x) = env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
        {
            files.push(x.join("git/config"));
        }
        if let Some(h) = home {
            files.push(h.join(".gitconfig"));
        }
    }
    files
}

/// The last value of `section.key` in a Git config text: a plain reading
/// of the format (sections `[name]`, case-insensitive names, `;`/`#`
/// comments, a value in double quotes). Keys in subsections
/// (`[section "sub"]`) do not count, and includes are not followed.
pub fn last_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut in_section = false;
    let mut value = None;
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else {
                in_section = false;
                continue;
            };
            let name = rest[..end].trim();
            in_section = name.eq_ignore_ascii_case(section);
            line = rest[end + 1..].trim();
            if line.is_empty() {
                continue;
            }
        }
        if !in_section || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or((line, "true"));
        if !k.trim().eq_ignore_ascii_case(key) {
            continue;
        }
        let v = v.trim();
        let v = match v.strip_prefix('"') {
            // A quoted value ends at its closing quote; a comment may follow.
            Some(q) => q.split('"').next().unwrap_or(""),
            None => v.split([';', '#']).next().unwrap_or("").trim(),
        };
        value = Some(v.to_string());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_like_git() {
        let v = |t: &str| last_value(t, "core", "hookspath");
        assert_eq!(
            v("[core]\n\thooksPath = .githooks\n"),
            Some(".githooks".into())
        );
        assert_eq!(
            v("[core]\nhookspath=a\n[core]\n\tHooksPath = \"b c\" # x\n"),
            Some("b c".into())
        );
        assert_eq!(v("[user]\nhooksPath = x\n"), None);
        assert_eq!(v("[core] hooksPath = inline\n"), Some("inline".into()));
        assert_eq!(v("; [core]\nhooksPath = x\n"), None);
    }
}
