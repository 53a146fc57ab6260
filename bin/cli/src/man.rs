//! What the man pages add to clap's text (`lazaret man DIR`, see
//! [`crate::completions`]): an EXAMPLES section for every page and an
//! EXIT STATUS section with the one table of exit codes (`main.rs`'s
//! header, README "Exit codes"), plus what a command adds to it.

/// The exit codes every command shares, as (code, meaning).
pub const EXIT_CODES: &[(&str, &str)] = &[
    ("0", "success"),
    (
        "1",
        "lazaret doctor found a failing check; lazaret state verify found problems",
    ),
    (
        "2",
        "refused: lazaret state reset or rm not confirmed, or the Domain active or in use",
    ),
    (
        "125",
        "Lazaret itself failed, a bad command line included (as podman)",
    ),
    (
        "126, 127, 128+N",
        "lazaret run only: the command could not be invoked (126), was not found (127), or signal N ended it; otherwise run exits with the command's own status",
    ),
];

/// One example: (command, what it does).
type Example = (&'static str, &'static str);

/// The examples of each page, by the page's names.
const EXAMPLES: &[(&[&str], &[Example])] = &[
    (&["lazaret"], &[
        ("lazaret doctor", "check this machine's prerequisites"),
        ("lazaret run", "a shell in the workspace's sandbox"),
        ("lazaret run -- cargo test", "one command in it; its status is lazaret's"),
        ("lazaret ps", "the running Domains"),
        ("lazaret man /usr/local/share/man/man1", "write these pages"),
    ]),
    (&["lazaret-run"], &[
        ("lazaret run", "an interactive login shell in the sandbox"),
        ("lazaret run -- make -C src test", "a command; -- ends lazaret's options"),
        ("lazaret run -w src -- ls", "start in /workspace/src"),
        ("lazaret run -e TOKEN -- ./deploy", "pass TOKEN from the host's environment"),
        ("lazaret --profile agent run", "the Domain of the profile agent"),
        ("lazaret run -d -- claude", "in the background; prints its Session ID"),
        ("lazaret run -p 8000:8000 -- python3 -m http.server 8000", "publish a port on the host's loopback"),
    ]),
    (&["lazaret-attach"], &[
        ("lazaret attach", "the workspace's only detached session"),
        ("lazaret attach 0123abcd", "a session by the ID lazaret ps shows"),
    ]),
    (&["lazaret-image", "lazaret-image-list"], &[
        ("lazaret image list", "prepared images: ID, size, leases, source"),
        ("lazaret image list --json", "the same as one JSON array (times as created_unix_ms)"),
    ]),
    (&["lazaret-image-prepare"], &[
        ("lazaret image prepare lazaret:default", "the default image"),
        ("lazaret image prepare oci-archive:img.tar", "an image from an OCI archive"),
    ]),
    (&["lazaret-image-rm"], &[
        ("lazaret image rm local:codex", "remove a committed image, after asking"),
        ("lazaret image rm 3f2a --yes", "by ID prefix, without asking"),
    ]),
    (&["lazaret-image-gc"], &[
        ("lazaret image gc", "list what nothing needs, then ask"),
        ("lazaret image gc --all --yes", "committed local: images too, without asking"),
    ]),
    (&["lazaret-image-commit"], &[(
        "lazaret image commit codex",
        "the Domain's image and State Anchors as the image local:codex",
    )]),
    (&["lazaret-state", "lazaret-state-list"], &[
        ("lazaret state list", "every Domain, one line each"),
        ("lazaret state list --profile agent", "only the Domains of the profile agent"),
        ("lazaret state list --workspace .", "only this workspace's Domains"),
        ("lazaret state list --long", "each Domain in detail: limits, each State Anchor"),
        ("lazaret state list --json", "every detail as one JSON array"),
    ]),
    (&["lazaret-state-inspect"], &[
        ("lazaret state inspect", "the workspace's Domain and its changes"),
        ("lazaret state inspect --paths", "with the paths added, changed and deleted"),
    ]),
    (&["lazaret-state-rm"], &[
        ("lazaret state rm", "remove the workspace's Domain, after asking"),
        ("lazaret state rm 0123abcd --yes", "a Domain by ID prefix"),
    ]),
    (&["lazaret-state-prune"], &[("lazaret state prune", "Domains whose workspace is gone")]),
    (&["lazaret-state-verify"], &[("lazaret state verify", "check the Domain's State Anchors")]),
    (&["lazaret-state-reset"], &[
        ("lazaret state reset /usr", "the next start follows the image's /usr (with /etc and /var once a package was installed)"),
        ("lazaret state reset --all --yes", "every State Anchor, without asking"),
        ("lazaret state reset --ignored", "the Ignored Workspace State"),
    ]),
    (&["lazaret-escalations"], &[
        ("lazaret escalations", "every Host Escalation decision of the Domain"),
        ("lazaret escalations --json", "as one JSON array (times as time_unix_ms)"),
    ]),
    (&["lazaret-changes"], &[
        ("lazaret changes", "what the sandbox changed in the workspace"),
        ("lazaret changes --json", "as one JSON array"),
    ]),
    (&["lazaret-net", "lazaret-net-show"], &[
        ("lazaret net show", "the network policy and readiness evidence"),
        ("lazaret net show --json", "as one JSON document"),
    ]),
    (&["lazaret-net-log"], &[("lazaret net log", "refused lookups, routed and expired addresses")]),
    (&["lazaret-export", "lazaret-export-kubernetes"], &[
        ("lazaret export kubernetes --profile codex", "the profile's manifests, one YAML stream"),
        (
            "lazaret export kubernetes --profile codex --repo https://git.example.com/app.git --ref main --out k8s",
            "the workspace cloned from a repository; one file per object in k8s/",
        ),
    ]),
    (&["lazaret-df"], &[
        ("lazaret df", "disk used by images, Domains and shared paths"),
        ("lazaret df --json", "as one JSON document"),
    ]),
    (&["lazaret-doctor"], &[
        ("lazaret doctor", "one line per check: ok, WARN or FAIL, with the fix"),
        ("NO_COLOR=1 lazaret doctor", "without colour"),
        ("lazaret doctor --json", "as one JSON document"),
    ]),
    (&["lazaret-completions"], &[(
        "lazaret completions bash > ~/.local/share/bash-completion/completions/lazaret",
        "bash completion",
    )]),
    (&["lazaret-ps"], &[
        ("lazaret ps", "running Domains: profile, sessions, uptime, memory"),
        ("lazaret ps --json", "as one JSON array"),
    ]),
    (&["lazaret-stop"], &[
        ("lazaret stop", "the workspace's running Domain"),
        ("lazaret stop 0123abcd4567", "a Domain by the ID lazaret ps shows"),
        ("lazaret stop --all", "every running Domain"),
    ]),
    (&["lazaret-logs"], &[
        ("lazaret logs", "the Domain's coordinator events: what each session ran and how it ended"),
        ("lazaret logs -f", "and what follows, until the Domain stops"),
        ("lazaret logs --json", "as one JSON array (time_unix_ms, pid, message, event)"),
        ("lazaret logs --json -f", "one JSON record per line"),
        ("lazaret logs --helpers", "what the helpers (runsc, routers, slirp4netns) said"),
    ]),
];

/// Examples of the page `name` (`lazaret`, `lazaret-run`,
/// `lazaret-state-list`, ...): (command, what it does).
pub fn examples(name: &str) -> &'static [Example] {
    match EXAMPLES.iter().find(|(names, _)| names.contains(&name)) {
        Some((_, e)) => e,
        None => &[],
    }
}

/// What the command of page `name` adds to [`EXIT_CODES`].
fn exit_note(name: &str) -> Option<&'static str> {
    Some(match name {
        "lazaret-run" => "The command's own status, or 126, 127, 128+N as above; 125 when Lazaret failed before or while it ran.",
        "lazaret-doctor" => "1 when a check failed (a warning alone does not).",
        "lazaret-state-verify" => "1 when the verification found problems.",
        "lazaret-state-reset" | "lazaret-state-rm" | "lazaret-state-prune" => {
            "2 when not confirmed, or when the Domain is active or in use."
        }
        "lazaret-stop" => "125 when a Domain did not stop within its bound.",
        _ => return None,
    })
}

/// `text` as roff text: backslashes and hyphens escaped, and a line never
/// begins with a control character.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The EXAMPLES and EXIT STATUS sections of page `name`, in roff.
pub fn extra_sections(name: &str) -> String {
    let mut s = String::new();
    let ex = examples(name);
    if !ex.is_empty() {
        s.push_str(".SH EXAMPLES\n");
        for (cmd, what) in ex {
            s.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(cmd), roff(what)));
        }
    }
    s.push_str(".SH \"EXIT STATUS\"\n");
    if let Some(note) = exit_note(name) {
        s.push_str(&format!(".PP\n{}\n", roff(note)));
    }
    for (code, meaning) in EXIT_CODES {
        s.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(code), roff(meaning)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Every page's name, as `lazaret man` writes them.
    fn pages(cmd: &clap::Command, out: &mut Vec<String>) {
        out.push(cmd.get_display_name().unwrap_or(cmd.get_name()).to_string());
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            pages(sub, out);
        }
    }

    #[test]
    fn every_page_has_examples_and_the_exit_codes() {
        let mut cmd = crate::Cli::command();
        cmd.build();
        let mut names = Vec::new();
        pages(&cmd, &mut names);
        assert!(names.len() > 20, "{names:?}");
        for n in &names {
            assert!(!examples(n).is_empty(), "no examples for {n}");
            // Each example is a command line of this very command.
            let prog = n.replace('-', " ");
            for (c, _) in examples(n) {
                let c = c.strip_prefix("NO_COLOR=1 ").unwrap_or(c);
                let words: Vec<&str> = c.split_whitespace().collect();
                let sub: Vec<&str> = words
                    .iter()
                    .copied()
                    .filter(|w| !w.starts_with('-'))
                    .collect();
                assert_eq!(words[0], "lazaret", "{n}: {c}");
                let named = prog.split(' ').skip(1).all(|p| sub.contains(&p));
                assert!(named, "{n}: {c}");
                // It parses (what is written to a file or a shell aside).
                let line = c.split(" > ").next().unwrap();
                let args: Vec<&str> = line.split_whitespace().collect();
                if let Err(e) = crate::Cli::try_parse_from(&args) {
                    panic!("{n}: {c}: {e}");
                }
            }
        }
    }

    #[test]
    fn the_sections_are_roff() {
        let s = extra_sections("lazaret-run");
        assert!(
            s.starts_with(".SH EXAMPLES\n.TP\n\\fBlazaret run\\fR\n"),
            "{s}"
        );
        assert!(
            s.contains(".SH \"EXIT STATUS\"\n.PP\nThe command's own status"),
            "{s}"
        );
        for (code, _) in EXIT_CODES {
            assert!(s.contains(&format!("\\fB{}\\fR", roff(code))), "{code}");
        }
        assert!(s.contains("\\-\\- ends lazaret's options"), "{s}");
        assert_eq!(roff(".x"), "\\&.x");
        assert_eq!(roff("a\\b"), "a\\eb");
    }
}
