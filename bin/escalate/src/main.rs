//! `lazaret-escalate [--justification TEXT] [--timeout SECS] -- CMD [ARGS...]`
//!
//! Runs inside the Agent Sandbox. It writes a signed request into the
//! Escalation Mailbox, waits for the Escalation Result, prints the host
//! command's stdout and stderr to its own, and exits with the command's
//! status. It holds nothing but the generation's request-signing key and
//! its session's Session Anchor: it is untrusted, and the coordinator
//! trusts nothing it says beyond what it signed.
//!
//! Exit codes: the host command's status; 77 denied (by the developer,
//! or because no rule matches and the requesting Client Session has no
//! terminal or has ended: nobody was asked); 75 refused at once because a
//! bound of the Domain was reached (try again later); 124 timed out; 130 cancelled (Ctrl-C); 125
//! failed (no mailbox, bad environment, the host could not run the
//! command). Each non-command outcome prints one line on stderr.
//!
//! The request names the process that asked (this program's parent, its
//! PID and command line): a claim, shown as such in the prompt.

mod confinement;

use clap::Parser;
use lazaret_protocol::escalation::{
    self as esc, exit, paths, Body, Kind, Outcome, Request, Requester,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "lazaret-escalate",
    about = "Ask the developer to run one command on the host"
)]
struct Args {
    /// Why the command is needed; shown to the developer
    #[arg(long, default_value = "")]
    justification: String,
    /// Give up after this many seconds (0: wait for the decision)
    #[arg(long, default_value_t = 0)]
    timeout: u32,
    /// Write the signed request to FILE instead of the mailbox, and exit
    /// (for debugging and tests of the mailbox's defences)
    #[arg(long, hide = true)]
    write_request_to: Option<PathBuf>,
    /// Claim DIR as the directory the request is made from, instead of
    /// this process's (for tests of the host's defences: any process
    /// inside can sign a request claiming any directory)
    #[arg(long, hide = true)]
    claim_cwd: Option<String>,
    /// The host command and its arguments, passed as one vector (no shell)
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn fail(msg: &str) -> ! {
    eprintln!("lazaret-escalate: {msg}");
    std::process::exit(exit::FAILED)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn read_small(p: &str, limit: u64) -> Vec<u8> {
    let mut v = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(limit).read_to_end(&mut v))
        .unwrap_or_else(|e| {
            fail(&format!(
                "cannot read {p}: {e}; is this running inside a Lazaret sandbox?"
            ))
        });
    v
}

struct Session {
    /// The published Trust Anchor: results must be signed under it.
    trust: lazaret_protocol::trust::manifest::Verified,
    key: ed25519_compact::SecretKey,
    anchor: [u8; 32],
    session_id: String,
    sandbox_id: String,
}

impl Session {
    fn load() -> Self {
        let key = ed25519_compact::SecretKey::from_slice(&read_small(paths::KEY, 128))
            .unwrap_or_else(|_| fail("the request-signing key is malformed"));
        let session_id = std::env::var(paths::SESSION_ID_ENV).unwrap_or_else(|_| {
            fail(&format!(
                "{} is not set: run inside a `lazaret run` session",
                paths::SESSION_ID_ENV
            ))
        });
        let anchor_hex = std::env::var(paths::SESSION_ANCHOR_ENV).unwrap_or_else(|_| {
            fail(&format!(
                "{} is not set: run inside a `lazaret run` session",
                paths::SESSION_ANCHOR_ENV
            ))
        });
        let mut anchor = [0u8; 32];
        hex::decode_to_slice(anchor_hex.trim(), &mut anchor)
            .unwrap_or_else(|_| fail(&format!("{} is malformed", paths::SESSION_ANCHOR_ENV)));
        let sandbox_id = String::from_utf8_lossy(&read_small(paths::SANDBOX_ID, 256))
            .trim()
            .to_string();
        let trust = lazaret_protocol::trust::manifest::Published::read_verified(
            Path::new(paths::TRUST),
            None,
        )
        .unwrap_or_else(|e| fail(&format!("the Trust Anchor {}: {e}", paths::TRUST)));
        Self {
            trust,
            key,
            anchor,
            session_id,
            sandbox_id,
        }
    }

    fn record(&self, request_id: [u8; 16], kind: Kind) -> Vec<u8> {
        let body = Body {
            version: esc::VERSION,
            sandbox_id: self.sandbox_id.clone(),
            session_id: self.session_id.clone(),
            request_id,
            created_unix_ms: now_ms(),
            kind,
        };
        esc::seal(&body, &self.key, &self.anchor)
    }
}

/// Publishes a record by writing a temporary name and renaming it.
fn publish(name: &str, bytes: &[u8]) {
    let dir = Path::new(paths::REQUESTS);
    let tmp = dir.join(format!(".{name}.tmp"));
    // Readable by the host's mailbox reader whatever the writer's umask:
    // written by another user than root inside, the file belongs on the
    // host to that user's subordinate ID, and the reader reads it as
    // "others".
    std::fs::write(&tmp, bytes)
        .and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        })
        .and_then(|_| std::fs::rename(&tmp, dir.join(name)))
        .unwrap_or_else(|e| {
            fail(&format!(
                "cannot write to the Escalation Mailbox {}: {e}",
                dir.display()
            ))
        });
}

/// The process that asked: this program's parent, as /proc shows it.
fn requester() -> Requester {
    let pid = std::os::unix::process::parent_id();
    let mut raw = Vec::new();
    let _ = std::fs::File::open(format!("/proc/{pid}/cmdline")).and_then(|f| {
        f.take(Requester::MAX_BYTES as u64 * 2)
            .read_to_end(&mut raw)
    });
    Requester::from_cmdline(pid, &raw)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        confinement::escalate().print_and_exit();
    }
    let args = Args::parse();
    let session = Session::load();
    let mut request_id = [0u8; 16];
    getrandom::getrandom(&mut request_id).unwrap_or_else(|e| fail(&e.to_string()));
    let cwd = args.claim_cwd.clone().unwrap_or_else(|| {
        std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    });
    let record = session.record(
        request_id,
        Kind::Request(Request {
            argv: args.command.clone(),
            justification: args.justification.clone(),
            cwd,
            timeout_secs: args.timeout,
            requester: requester(),
        }),
    );
    if let Some(f) = &args.write_request_to {
        std::fs::write(f, &record).unwrap_or_else(|e| fail(&e.to_string()));
        return;
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, interrupted.clone());
    }
    let id = hex::encode(request_id);
    publish(&format!("{id}.req"), &record);

    let result_path = Path::new(paths::RESULTS).join(&id);
    let deadline =
        (args.timeout > 0).then(|| Instant::now() + Duration::from_secs(args.timeout as u64 + 30));
    let mut cancelled_at: Option<Instant> = None;
    let mut looks = Looks::default();
    loop {
        std::thread::sleep(looks.next_wait());
        if let Ok(f) = std::fs::File::open(&result_path) {
            let mut bytes = Vec::new();
            let _ = f.take(esc::MAX_RESULT as u64 + 1).read_to_end(&mut bytes);
            let want = lazaret_protocol::trust::result::Expect {
                generation: &session.trust.manifest.generation,
                sandbox_id: &session.sandbox_id,
                session_id: &session.session_id,
                request_id: &request_id,
            };
            match lazaret_protocol::trust::result::open(&bytes, &session.trust.result_key, &want) {
                Ok(r) => std::process::exit(report(r.outcome)),
                Err(e) => fail(&format!(
                    "refused the Escalation Result {}: {e}",
                    result_path.display()
                )),
            }
        }
        if interrupted.load(Ordering::Relaxed) && cancelled_at.is_none() {
            publish(
                &format!("{id}.cancel"),
                &session.record(request_id, Kind::Cancel),
            );
            cancelled_at = Some(Instant::now());
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(15)) {
            eprintln!("lazaret-escalate: cancelled (the host did not confirm)");
            std::process::exit(exit::CANCELLED);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            eprintln!("lazaret-escalate: timed out waiting for the host");
            std::process::exit(exit::TIMED_OUT);
        }
    }
}

/// The waits before each look for the result. Inotify inside gVisor does
/// not see the host's writes, so the client polls, and each look costs a
/// round trip through gVisor's gofer (about 0.1 ms on the ptrace
/// platform). The first waits are short, as an auto-approved command
/// answers within milliseconds; each is a quarter longer than the one
/// before, up to [`Looks::LONGEST`], the pace of a request that waits for
/// the developer.
struct Looks {
    next: Duration,
}

impl Default for Looks {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Looks {
    const FIRST: Duration = Duration::from_millis(1);
    const LONGEST: Duration = Duration::from_millis(20);

    fn next_wait(&mut self) -> Duration {
        let w = self.next;
        self.next = (self.next + self.next / 4).min(Self::LONGEST);
        w
    }
}

fn report(outcome: Outcome) -> i32 {
    match outcome {
        Outcome::Completed {
            status,
            stdout,
            stderr,
            truncated,
        } => {
            let _ = std::io::stdout().write_all(&stdout);
            let _ = std::io::stderr().write_all(&stderr);
            if truncated {
                eprintln!(
                    "lazaret-escalate: the host command's output was cut at {} bytes per stream",
                    esc::MAX_OUTPUT
                );
            }
            status
        }
        Outcome::Denied { reason } => {
            eprintln!("lazaret-escalate: denied: {reason}");
            exit::DENIED
        }
        Outcome::TimedOut => {
            eprintln!("lazaret-escalate: timed out: the host command was stopped");
            exit::TIMED_OUT
        }
        Outcome::Cancelled => {
            eprintln!("lazaret-escalate: cancelled");
            exit::CANCELLED
        }
        Outcome::Failed { reason } => {
            eprintln!("lazaret-escalate: failed: {reason}");
            exit::FAILED
        }
        Outcome::Refused { reason } => {
            eprintln!("lazaret-escalate: refused: {reason}");
            exit::REFUSED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_start_short_and_slow_down_to_the_longest_wait() {
        let mut l = Looks::default();
        let waits: Vec<Duration> = (0..40).map(|_| l.next_wait()).collect();
        assert_eq!(waits[0], Looks::FIRST);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= Looks::LONGEST));
        assert_eq!(waits[39], Looks::LONGEST);
        // Within the first 20 ms it looks often, not at every tick.
        let mut t = Duration::ZERO;
        let looks = waits
            .iter()
            .take_while(|w| {
                t += **w;
                t <= Duration::from_millis(20)
            })
            .count();
        assert!((5..=12).contains(&looks), "{looks} looks in 20 ms");
    }
}
