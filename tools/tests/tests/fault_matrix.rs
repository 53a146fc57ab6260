//! The fault-injection matrix (issue 17, item 1): every process of a
//! Domain, SIGKILLed at every lifecycle step, with the real sandbox.
//!
//! A step is a fault point (`lazaret_helpers::fault`): a process that
//! reaches it with `LAZARET_FAULT_PAUSE` set says so on its stderr and
//! stands there for a moment, while this test kills the victim, found in
//! `/proc` by its place in the Domain's process tree. After each cell:
//!
//! - every session in flight either keeps working (it ends with status 0
//!   when told to) or ends with a clear error (non-zero, with a
//!   `lazaret:` line); none hangs, none ends silently;
//! - the next `lazaret run` works and sees the persistent state (a file in
//!   a State Anchor, one in Ignored Workspace State);
//! - after its teardown nothing of the old generation remains: no process
//!   of the killed tree, no process or mount naming the Domain, no image
//!   lease of the Domain in the Storage Catalog, no run directory or other
//!   transient file in the Domain Root;
//! - `lazaret state verify` passes, the Escalation Log lost nothing, and
//!   the coordinators' recorded lifecycle replays through the model.
//!
//! `.ci/run` runs a fixed selection covering every victim and every step
//! (33 cells, about 3 minutes on 2 cores). `LAZARET_FAULT_MATRIX=full` (or `tools/tests/fault-matrix`)
//! runs every cell: a census run per step (paused, nothing killed) finds
//! which processes exist there, then each is killed in a cell of its own.
//! Both print the matrix as a table (`recovered`, or what failed).

use lazaret_tests::{mounts_mentioning, processes_mentioning, require_env, text, Workspace};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
enum Victim {
    Cli,
    Coordinator,
    Supervisor,
    Holder,
    Keeper,
    SlirpUplink,
    SlirpSandbox,
    NetHelper,
    Router,
    RunscRun,
    Sandbox,
    Gofer,
    ExecBridge,
    Mailbox,
}

const VICTIMS: &[Victim] = &[
    Victim::Cli,
    Victim::Coordinator,
    Victim::Supervisor,
    Victim::Holder,
    Victim::Keeper,
    Victim::SlirpUplink,
    Victim::SlirpSandbox,
    Victim::NetHelper,
    Victim::Router,
    Victim::RunscRun,
    Victim::Sandbox,
    Victim::Gofer,
    Victim::ExecBridge,
    Victim::Mailbox,
];

impl Victim {
    fn name(self) -> &'static str {
        match self {
            Victim::Cli => "cli",
            Victim::Coordinator => "coordinator",
            Victim::Supervisor => "supervisor",
            Victim::Holder => "holder",
            Victim::Keeper => "netns keeper",
            Victim::SlirpUplink => "slirp4netns A",
            Victim::SlirpSandbox => "slirp4netns B",
            Victim::NetHelper => "network helper",
            Victim::Router => "mount router",
            Victim::RunscRun => "runsc run",
            Victim::Sandbox => "runsc sandbox",
            Victim::Gofer => "runsc gofer",
            Victim::ExecBridge => "exec bridge",
            Victim::Mailbox => "mailbox reader",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scene {
    /// `lazaret run` starting the Domain.
    Start,
    /// A second session joining a running Domain.
    Join,
    /// One of two sessions leaving.
    Leave,
    /// The last session gone, the coordinator tearing the Domain down.
    Teardown,
    /// An auto-approved Host Escalation in flight.
    Escalation,
    /// `lazaret state reset` of a stopped Domain.
    Reset,
    /// `lazaret image prepare` of a new image.
    Image,
}

struct Step {
    label: &'static str,
    scene: Scene,
    point: &'static str,
}

const fn step(label: &'static str, scene: Scene, point: &'static str) -> Step {
    Step {
        label,
        scene,
        point,
    }
}

const STEPS: &[Step] = &[
    step(
        "start: leader lock taken",
        Scene::Start,
        "cli:leader-locked",
    ),
    step("start: image ready", Scene::Start, "cli:image-prepared"),
    step(
        "start: coordinator input made",
        Scene::Start,
        "cli:input-ready",
    ),
    step(
        "start: recovery done",
        Scene::Start,
        "coordinator:recovered",
    ),
    step(
        "start: generation leased",
        Scene::Start,
        "coordinator:generation-leased",
    ),
    step(
        "start: supervisor spawned",
        Scene::Start,
        "coordinator:supervisor-spawn",
    ),
    step(
        "start: namespaces made",
        Scene::Start,
        "holder:namespaces-ready",
    ),
    step(
        "start: policy installing",
        Scene::Start,
        "netpolicy:install",
    ),
    step(
        "start: slirp4netns B up",
        Scene::Start,
        "holder:slirp4netns-b-ready",
    ),
    step("start: probe running", Scene::Start, "netpolicy:probe"),
    step("start: network ready", Scene::Start, "holder:network-ready"),
    step("start: routers ready", Scene::Start, "holder:routers-ready"),
    step(
        "start: runsc run spawned",
        Scene::Start,
        "holder:runsc-run-spawned",
    ),
    step(
        "start: sandbox running",
        Scene::Start,
        "holder:sandbox-running",
    ),
    step(
        "start: coordinator ready",
        Scene::Start,
        "coordinator:ready",
    ),
    step(
        "start: session accepted",
        Scene::Start,
        "cli:session-accepted",
    ),
    step(
        "start: first bridge started",
        Scene::Start,
        "coordinator:session-bridge-started",
    ),
    step(
        "join: hello received",
        Scene::Join,
        "coordinator:session-hello#2",
    ),
    step(
        "join: session accepted",
        Scene::Join,
        "cli:session-accepted",
    ),
    step(
        "join: bridge started",
        Scene::Join,
        "coordinator:session-bridge-started#2",
    ),
    step(
        "leave: bridge exited",
        Scene::Leave,
        "coordinator:session-bridge-exited#1",
    ),
    step(
        "teardown: stopping",
        Scene::Teardown,
        "coordinator:teardown-stopping",
    ),
    step(
        "teardown: supervisor ended",
        Scene::Teardown,
        "coordinator:teardown-supervisor-ended",
    ),
    step(
        "teardown: lease released",
        Scene::Teardown,
        "coordinator:teardown-lease-released",
    ),
    step(
        "escalation: request read",
        Scene::Escalation,
        "coordinator:escalation-record-in",
    ),
    step(
        "escalation: sent to the CLI",
        Scene::Escalation,
        "coordinator:escalation-run-sent",
    ),
    step(
        "escalation: command starting",
        Scene::Escalation,
        "cli:host-command-in",
    ),
    step(
        "escalation: command ended",
        Scene::Escalation,
        "cli:host-command-ended",
    ),
    step("state reset: intent recorded", Scene::Reset, "reset-intent"),
    step("state reset: new upper made", Scene::Reset, "reset-mkdir"),
    step("state reset: switched", Scene::Reset, "reset-switch"),
    step(
        "image prepare: staged",
        Scene::Image,
        "image:publish-staged",
    ),
    step(
        "image prepare: renamed",
        Scene::Image,
        "image:publish-renamed",
    ),
];

/// The cells `.ci/run` runs: every step and every victim at least once,
/// where the victim exists (`tools/tests/fault-matrix` runs them all).
const CI_CELLS: &[(&str, Victim)] = &[
    ("cli:leader-locked", Victim::Cli),
    ("cli:image-prepared", Victim::Cli),
    ("cli:input-ready", Victim::Cli),
    ("coordinator:recovered", Victim::Coordinator),
    ("coordinator:generation-leased", Victim::Coordinator),
    ("coordinator:supervisor-spawn", Victim::Cli),
    ("holder:namespaces-ready", Victim::Supervisor),
    ("netpolicy:install", Victim::NetHelper),
    ("holder:slirp4netns-b-ready", Victim::SlirpUplink),
    ("netpolicy:probe", Victim::Keeper),
    ("holder:network-ready", Victim::SlirpSandbox),
    ("holder:routers-ready", Victim::Router),
    ("holder:runsc-run-spawned", Victim::Holder),
    ("holder:sandbox-running", Victim::Gofer),
    ("coordinator:ready", Victim::Sandbox),
    ("cli:session-accepted", Victim::Coordinator),
    ("coordinator:session-bridge-started", Victim::ExecBridge),
    ("coordinator:session-hello#2", Victim::Coordinator),
    ("cli:session-accepted", Victim::Cli),
    ("coordinator:session-bridge-started#2", Victim::RunscRun),
    ("coordinator:session-bridge-exited#1", Victim::Supervisor),
    ("coordinator:teardown-stopping", Victim::Holder),
    ("coordinator:teardown-supervisor-ended", Victim::Coordinator),
    ("coordinator:teardown-lease-released", Victim::Coordinator),
    ("coordinator:escalation-record-in", Victim::Mailbox),
    ("coordinator:escalation-run-sent", Victim::Cli),
    ("cli:host-command-in", Victim::Coordinator),
    ("cli:host-command-ended", Victim::Sandbox),
    ("reset-intent", Victim::Cli),
    ("reset-mkdir", Victim::Cli),
    ("reset-switch", Victim::Cli),
    ("image:publish-staged", Victim::Cli),
    ("image:publish-renamed", Victim::Cli),
];

/// How long a session, the next run or a teardown may take before the
/// cell counts it as hung.
const PATIENCE: Duration = Duration::from_secs(90);

/// One process of the Domain's tree (or a session's CLI).
#[derive(Clone, Debug)]
struct Proc {
    pid: i32,
    ppid: i32,
    start: u64,
    cmd: String,
}

fn proc_of(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.first() == Some(&"Z") {
        return None;
    }
    let cmd = text(&std::fs::read(format!("/proc/{pid}/cmdline")).ok()?).replace('\0', " ");
    Some(Proc {
        pid,
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        cmd,
    })
}

fn all_procs() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
                .filter_map(proc_of)
                .collect()
        })
        .unwrap_or_default()
}

fn alive(p: &Proc) -> bool {
    proc_of(p.pid).is_some_and(|q| q.start == p.start)
}

/// The Domain's processes by role: the coordinator named by its argv and
/// everything under it.
fn domain_tree(domain_id: &str) -> Vec<(Victim, Proc)> {
    let procs = all_procs();
    let Some(coord) = procs
        .iter()
        .find(|p| p.cmd.contains("lazaret-coordinator") && p.cmd.contains(domain_id))
    else {
        return Vec::new();
    };
    let mut role: HashMap<i32, Victim> = HashMap::new();
    role.insert(coord.pid, Victim::Coordinator);
    let mut out = vec![(Victim::Coordinator, coord.clone())];
    // Parents come before children in a breadth-first walk.
    let mut frontier = vec![coord.pid];
    while let Some(parent) = frontier.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            let parent_role = role.get(&parent).copied();
            let c = &p.cmd;
            let r = if c.contains("lazaret-supervisor") {
                match parent_role {
                    Some(Victim::Coordinator) => Victim::Supervisor,
                    Some(Victim::Supervisor) => Victim::Holder,
                    _ => Victim::Keeper,
                }
            } else if c.starts_with("slirp4netns-uplink") {
                Victim::SlirpUplink
            } else if c.starts_with("slirp4netns-sandbox") {
                Victim::SlirpSandbox
            } else if c.contains("lazaret-netpolicy") {
                Victim::NetHelper
            } else if c.contains("lazaret-mount-router") {
                Victim::Router
            } else if c.contains("lazaret-exec-bridge") {
                Victim::ExecBridge
            } else if c.contains("lazaret-mailbox") {
                Victim::Mailbox
            } else if c.starts_with("runsc-gofer") {
                Victim::Gofer
            } else if c.starts_with("runsc-sandbox") {
                Victim::Sandbox
            } else if c.contains("runsc") && c.contains(" run --bundle") {
                Victim::RunscRun
            } else {
                // runsc exec and the like: walked, not a victim of its own.
                frontier.push(p.pid);
                continue;
            };
            role.insert(p.pid, r);
            out.push((r, p.clone()));
            frontier.push(p.pid);
        }
    }
    out
}

/// A `lazaret` process the test started, with its stderr collected.
struct Session {
    child: Child,
    pid: i32,
    start: u64,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    status: Option<std::process::ExitStatus>,
}

fn collect(r: Option<impl Read + Send + 'static>) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    if let Some(mut r) = r {
        let b = buf.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().push_str(&text(&chunk[..n]));
            }
        });
    }
    buf
}

impl Session {
    fn spawn(ws: &Workspace<'_>, args: &[&str], pause: Option<&str>) -> Session {
        let mut cmd = ws.lazaret(args);
        if let Some(p) = pause {
            cmd.env("LAZARET_FAULT_PAUSE", p);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lazaret");
        let pid = child.id() as i32;
        let start = proc_of(pid).map_or(0, |p| p.start);
        let stdout = collect(child.stdout.take());
        let stderr = collect(child.stderr.take());
        Session {
            child,
            pid,
            start,
            stdout,
            stderr,
            status: None,
        }
    }

    fn proc(&self) -> Proc {
        Proc {
            pid: self.pid,
            ppid: 0,
            start: self.start,
            cmd: "lazaret".into(),
        }
    }

    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(s)) => self.status = Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
        // Let the readers drain.
        std::thread::sleep(Duration::from_millis(50));
        self.status
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What became of the session: `Ok(description)` when it kept working
    /// or ended with a clear error, `Err(problem)` otherwise.
    fn outcome(&mut self, name: &str, expect_out: &str) -> Result<String, String> {
        let Some(st) = self.wait(PATIENCE) else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return Err(format!("{name} hung"));
        };
        if st.success() {
            return if self.stdout().contains(expect_out) {
                Ok(format!("{name} kept"))
            } else {
                Err(format!(
                    "{name} exited 0 without its output ({:?})",
                    self.stdout()
                ))
            };
        }
        let err = self.stderr();
        match err.lines().rev().find(|l| l.starts_with("lazaret:")) {
            Some(l) => Ok(format!("{name} ended: {}", shorten(l))),
            None => Err(format!(
                "{name} ended silently ({st}; stderr {:?})",
                shorten(&err)
            )),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn shorten(s: &str) -> String {
    let s = s.trim();
    if s.len() > 90 {
        let mut end = 90;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

/// The test's Domain and what it checks against.
struct Matrix<'a> {
    ws: Workspace<'a>,
    id: String,
    root: std::path::PathBuf,
    /// The Domain Root's names after a clean stop.
    baseline: BTreeSet<String>,
    escalations: usize,
    /// Where `Scene::Image` prepares (a Storage Root of its own).
    image_ws: Workspace<'a>,
}

/// The long session's program: alive until the host makes `.fault-stop`.
const LOOP: &str =
    "echo started; while [ ! -e /workspace/.fault-stop ]; do sleep 0.1; done; echo stopped";
const MARKERS: &str = "cat /usr/local/fault-marker /workspace/ignored/marker";

impl<'a> Matrix<'a> {
    fn new(env: &'a lazaret_tests::TestEnv) -> Matrix<'a> {
        let ws = env.workspace("fault-matrix");
        ws.write_config(
            "[[profiles.default.escalation.auto_approve]]\nargv = [\"/bin/echo\", \"host-ok\"]\n",
        );
        let out = ws.host_sh(
            "printf 'ignored/\\n' > .gitignore && git add .gitignore && git commit -qm ignore",
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let out = ws.run_sh(
            "echo anchor > /usr/local/fault-marker && mkdir -p /workspace/ignored && echo ignored > /workspace/ignored/marker && lazaret-escalate -- /bin/echo host-ok",
        );
        assert!(out.status.success(), "setup: {}", text(&out.stderr));
        let id = ws.domain_id("default");
        let root = ws.domain_root("default");
        let image_ws = env.workspace("fault-image");
        image_ws.write_config(&format!(
            "[storage]\ndata_root = \"{}\"\n",
            image_ws.base.join("data").display()
        ));
        let mut m = Matrix {
            ws,
            id,
            root,
            baseline: BTreeSet::new(),
            escalations: 0,
            image_ws,
        };
        assert!(m.wait_down(), "the set-up Domain did not stop");
        m.baseline = m.root_names();
        m.escalations = m.escalation_count().expect("lazaret escalations");
        assert!(m.escalations >= 1, "the set-up escalation is not recorded");
        m
    }

    fn root_names(&self) -> BTreeSet<String> {
        std::fs::read_dir(&self.root)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn escalation_count(&self) -> Option<usize> {
        let out = self.ws.lazaret(&["escalations", "--json"]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v.as_array().map(Vec::len)
    }

    /// Waits until the Domain is fully torn down (its coordinator holds
    /// `domain.lock` until then).
    fn wait_down(&self) -> bool {
        let out = self.ws.env.sh(&format!(
            "flock -w {} '{}' true",
            PATIENCE.as_secs(),
            self.root.join("domain.lock").display()
        ));
        out.status.success()
    }

    /// Bytes of the logs a paused process writes to, for [`Self::paused`].
    fn log_marks(&self) -> [usize; 2] {
        ["coordinator.log", "helpers.log"]
            .map(|n| std::fs::metadata(self.root.join(n)).map_or(0, |m| m.len() as usize))
    }

    /// Whether `point`'s pause line appeared in a session's stderr or, past
    /// `marks`, in the Domain's logs.
    fn paused(&self, point: &str, marks: [usize; 2], sessions: &[&Session], logs: &Path) -> bool {
        let line = format!(
            "lazaret-fault: paused at {}",
            point.split('#').next().unwrap()
        );
        if sessions.iter().any(|s| s.stderr().contains(&line)) {
            return true;
        }
        ["coordinator.log", "helpers.log"]
            .iter()
            .zip(marks)
            .any(|(n, from)| {
                std::fs::read(logs.join(n))
                    .map(|b| b.get(from..).is_some_and(|t| text(t).contains(&line)))
                    .unwrap_or(false)
            })
    }
}

/// What one cell saw: the outcome and the problems (none: recovered).
struct Cell {
    notes: Vec<String>,
    problems: Vec<String>,
    /// The roles present at the step (for the census).
    present: BTreeSet<Victim>,
    absent: bool,
}

/// `None` kills nothing: the census.
fn run_cell(m: &Matrix<'_>, s: &Step, victim: Option<Victim>) -> Cell {
    match s.scene {
        Scene::Reset => return reset_cell(m, s, victim),
        Scene::Image => return image_cell(m, s, victim),
        _ => {}
    }
    let ws = &m.ws;
    let cli_point = s.point.starts_with("cli:");
    let marks = m.log_marks();
    let mut sessions: Vec<(String, Session, &str)> = Vec::new();
    // The session whose action the step is (its CLI is the victim `cli`).
    let actor = match s.scene {
        Scene::Start | Scene::Teardown => {
            // At the bridge step the bridge is the victim: its command
            // outlives the pause, or `echo` may be done before the kill.
            let command = if s.point == "coordinator:session-bridge-started" {
                "sleep 3; echo ran"
            } else {
                "echo ran"
            };
            sessions.push((
                "session".into(),
                Session::spawn(ws, &["run", "--", "sh", "-c", command], Some(s.point)),
                "ran",
            ));
            0
        }
        Scene::Escalation => {
            sessions.push((
                "session".into(),
                Session::spawn(
                    ws,
                    &[
                        "run",
                        "--",
                        "sh",
                        "-c",
                        "lazaret-escalate -- /bin/echo host-ok; echo ran",
                    ],
                    Some(s.point),
                ),
                "ran",
            ));
            0
        }
        Scene::Join | Scene::Leave => {
            let first = Session::spawn(
                ws,
                &["run", "--", "sh", "-c", LOOP],
                (!cli_point).then_some(s.point),
            );
            let up = lazaret_tests::eventually(PATIENCE, || first.stdout().contains("started"));
            sessions.push(("first session".into(), first, "stopped"));
            if !up {
                return Cell {
                    notes: vec![],
                    problems: vec!["the first session never started".into()],
                    present: BTreeSet::new(),
                    absent: false,
                };
            }
            let second = if s.scene == Scene::Join {
                Session::spawn(
                    ws,
                    &["run", "--", "sh", "-c", "echo ran"],
                    cli_point.then_some(s.point),
                )
            } else {
                Session::spawn(ws, &["run", "--", "sh", "-c", "sleep 0.5; echo ran"], None)
            };
            sessions.push(("second session".into(), second, "ran"));
            1
        }
        Scene::Reset | Scene::Image => unreachable!(),
    };
    let refs: Vec<&Session> = sessions.iter().map(|(_, s, _)| s).collect();
    let reached = lazaret_tests::eventually(PATIENCE, || m.paused(s.point, marks, &refs, &m.root));
    let tree = domain_tree(&m.id);
    let mut present: BTreeSet<Victim> = tree.iter().map(|(r, _)| *r).collect();
    present.insert(Victim::Cli);
    if s.scene == Scene::Teardown {
        // The last CLI returned before the teardown began.
        present.remove(&Victim::Cli);
    }
    let mut cell = Cell {
        notes: vec![],
        problems: vec![],
        present,
        absent: false,
    };
    if !reached {
        cell.problems.push(format!("{} never reached", s.point));
    }
    // Everything that must be gone once the Domain is down again.
    let mut watched: Vec<Proc> = tree.iter().map(|(_, p)| p.clone()).collect();
    if let Some(v) = victim.filter(|_| reached) {
        let target = if v == Victim::Cli {
            if s.scene == Scene::Teardown {
                None
            } else {
                Some(sessions[actor].1.proc())
            }
        } else {
            // The newest of its kind (a joining session's bridge).
            tree.iter()
                .filter(|(r, _)| *r == v)
                .map(|(_, p)| p.clone())
                .max_by_key(|p| p.start)
        };
        match target {
            Some(p) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p.pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                if v == Victim::Cli {
                    sessions[actor].0 = "killed CLI".into();
                }
            }
            None => cell.absent = true,
        }
    }
    if cell.absent {
        // Nothing was killed: the sessions end and the Domain goes down
        // before the next cell, or that cell joins this Domain (whose
        // coordinator never pauses at the next cell's point).
        let _ = ws.host_sh("touch .fault-stop");
        for (_, sess, _) in &mut sessions {
            if sess.wait(PATIENCE).is_none() {
                let _ = sess.child.kill();
                let _ = sess.child.wait();
            }
        }
        let _ = ws.host_sh("rm -f .fault-stop");
        let _ = m.wait_down();
        return cell;
    }
    // The sessions: each keeps working or ends clearly.
    let mut long_alive = Vec::new();
    for (i, (name, sess, expect)) in sessions.iter_mut().enumerate() {
        if name == "killed CLI" {
            let _ = sess.wait(Duration::from_secs(5));
            continue;
        }
        if *expect == "stopped" {
            // The long session: still running is judged after the next run.
            if sess.wait(Duration::from_millis(10)).is_none() {
                long_alive.push(i);
                continue;
            }
        }
        match sess.outcome(name, expect) {
            Ok(n) => cell.notes.push(n),
            Err(p) => cell.problems.push(p),
        }
    }
    check_next_run(m, &mut cell);
    let _ = ws.host_sh("touch .fault-stop");
    for i in long_alive {
        let (name, sess, expect) = &mut sessions[i];
        match sess.outcome(name, expect) {
            Ok(n) => cell.notes.push(n),
            Err(p) => cell.problems.push(p),
        }
    }
    let _ = ws.host_sh("rm -f .fault-stop");
    for (_, sess, _) in &sessions {
        watched.push(sess.proc());
    }
    check_clean(m, &mut cell, &watched);
    cell
}

/// The next `lazaret run` works and sees the persistent state.
fn check_next_run(m: &Matrix<'_>, cell: &mut Cell) {
    let mut next = Session::spawn(&m.ws, &["run", "--", "sh", "-c", MARKERS], None);
    match next.wait(PATIENCE) {
        Some(st) if st.success() && next.stdout() == "anchor\nignored\n" => {}
        Some(st) => cell.problems.push(format!(
            "next run: {st}, stdout {:?}, stderr {:?}",
            next.stdout(),
            shorten(&next.stderr())
        )),
        None => cell.problems.push("next run hung".into()),
    }
}

/// After the Domain is down: nothing of the old generation remains and
/// the persistent state is whole.
fn check_clean(m: &Matrix<'_>, cell: &mut Cell, watched: &[Proc]) {
    if !m.wait_down() {
        cell.problems.push("teardown did not finish".into());
    }
    // Processes the kill orphaned go within a moment (PDEATHSIG, pidfds).
    let left = |ps: &[Proc]| -> Vec<Proc> { ps.iter().filter(|p| alive(p)).cloned().collect() };
    let _ = lazaret_tests::eventually(Duration::from_secs(10), || {
        left(watched).is_empty() && processes_mentioning(&m.id).is_empty()
    });
    for p in left(watched) {
        cell.problems
            .push(format!("process left: {} {}", p.pid, shorten(&p.cmd)));
    }
    for (pid, cmd) in processes_mentioning(&m.id) {
        cell.problems
            .push(format!("process left: {pid} {}", shorten(&cmd)));
    }
    for l in mounts_mentioning(&m.id) {
        cell.problems.push(format!("mount left: {}", shorten(&l)));
    }
    let names = m.root_names();
    // A log of the baseline rotated (`helpers.log.1`, `host-addresses.log.1`):
    // the previous generation's, kept by design.
    let rotated = |n: &str| {
        n.rsplit_once('.').is_some_and(|(base, k)| {
            k.parse::<usize>()
                .is_ok_and(|k| (1..=lazaret_protocol::logs::ROTATIONS).contains(&k))
                && m.baseline.contains(base)
        })
    };
    for n in names.difference(&m.baseline).filter(|n| !rotated(n)) {
        cell.problems.push(format!("Domain Root: {n} left"));
    }
    for n in m.baseline.difference(&names) {
        cell.problems.push(format!("Domain Root: {n} lost"));
    }
    match m.ws.lazaret(&["image", "list", "--json"]).output() {
        Ok(o) if o.status.success() => {
            if text(&o.stdout).contains(&format!("\"{}\"", m.id)) {
                cell.problems.push("image lease of the Domain left".into());
            }
        }
        _ => cell.problems.push("lazaret image list failed".into()),
    }
    match m.ws.lazaret(&["state", "verify"]).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => cell.problems.push(format!(
            "state verify: {}",
            shorten(&format!("{}{}", text(&o.stdout), text(&o.stderr)))
        )),
        Err(e) => cell.problems.push(format!("state verify: {e}")),
    }
    match m.escalation_count() {
        Some(n) if n >= m.escalations => {}
        other => cell.problems.push(format!(
            "Escalation Log: {other:?} entries, had {}",
            m.escalations
        )),
    }
    let trace = lazaret_tests::lifecycle_trace(&m.root);
    if let Err(v) = lazaret_protocol::lifecycle::replay(&trace) {
        cell.problems.push(format!("lifecycle model: {v}"));
    }
}

/// A CLI command run with the pause at `s.point` (a step of its own, as
/// `state reset` and `image prepare` are): killed there when the victim
/// is the CLI, else waited for. `Some(success)` when it was not killed.
fn run_cli_step(
    sess: &mut Session,
    s: &Step,
    victim: Option<Victim>,
    cell: &mut Cell,
) -> Option<bool> {
    let reached = lazaret_tests::eventually(PATIENCE, || {
        sess.stderr()
            .contains(&format!("lazaret-fault: paused at {}", s.point))
    });
    if !reached {
        cell.problems.push(format!("{} never reached", s.point));
    }
    if victim == Some(Victim::Cli) && reached {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sess.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = sess.wait(Duration::from_secs(10));
        return None;
    }
    Some(sess.wait(PATIENCE).is_some_and(|st| st.success()))
}

/// `lazaret state reset /usr` of the stopped Domain, its CLI killed at the
/// step: the anchor is the old one or a new empty one, never half.
fn reset_cell(m: &Matrix<'_>, s: &Step, victim: Option<Victim>) -> Cell {
    let mut cell = Cell {
        notes: vec![],
        problems: vec![],
        present: [Victim::Cli].into(),
        absent: false,
    };
    let mut r = Session::spawn(&m.ws, &["state", "reset", "/usr", "--yes"], Some(s.point));
    match run_cli_step(&mut r, s, victim, &mut cell) {
        None => cell.notes.push("reset killed".into()),
        Some(true) => cell.notes.push("reset done".into()),
        Some(false) => cell
            .problems
            .push(format!("reset failed: {}", shorten(&r.stderr()))),
    }
    // Old anchor (file kept) or new empty one (file gone): put it back.
    let mut next = Session::spawn(
        &m.ws,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "cat /usr/local/fault-marker 2>/dev/null || echo reset; echo anchor > /usr/local/fault-marker; cat /workspace/ignored/marker",
        ],
        None,
    );
    match next.wait(PATIENCE) {
        Some(st) if st.success() => {
            let out = next.stdout();
            if out == "anchor\nignored\n" || out == "reset\nignored\n" {
                cell.notes.push(format!(
                    "anchor {}",
                    if out.starts_with("reset") {
                        "reset"
                    } else {
                        "kept"
                    }
                ));
            } else {
                cell.problems.push(format!("next run saw {out:?}"));
            }
        }
        Some(st) => cell
            .problems
            .push(format!("next run: {st}: {}", shorten(&next.stderr()))),
        None => cell.problems.push("next run hung".into()),
    }
    check_clean(m, &mut cell, &[r.proc()]);
    cell
}

/// `lazaret image prepare` of an image never prepared before, its CLI
/// killed at the step: nothing half-published, and the next prepare works.
fn image_cell(m: &Matrix<'_>, s: &Step, victim: Option<Victim>) -> Cell {
    let ws = &m.image_ws;
    let mut cell = Cell {
        notes: vec![],
        problems: vec![],
        present: [Victim::Cli].into(),
        absent: false,
    };
    let mut rnd = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut rnd))
        .unwrap();
    let tag = format!(
        "t{}",
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let reference = ws.mkoci("layout", &tag, &format!("--hello {tag}"));
    let mut p = Session::spawn(ws, &["image", "prepare", &reference], Some(s.point));
    match run_cli_step(&mut p, s, victim, &mut cell) {
        None => cell.notes.push("prepare killed".into()),
        Some(true) => {}
        Some(false) => cell
            .problems
            .push(format!("prepare failed: {}", shorten(&p.stderr()))),
    }
    let lowers = ws.base.join("data/lowers");
    // Nothing incomplete is listed as prepared.
    let list = ws.lazaret(&["image", "list", "--json"]).output().unwrap();
    if !list.status.success() {
        cell.problems
            .push(format!("image list: {}", shorten(&text(&list.stderr))));
    }
    let again = ws
        .lazaret(&["image", "prepare", &reference])
        .output()
        .unwrap();
    if !again.status.success() {
        cell.problems
            .push(format!("next prepare: {}", shorten(&text(&again.stderr))));
    }
    let id = text(&again.stdout).trim().to_string();
    if !lowers.join(&id).join("complete").exists() {
        cell.problems
            .push(format!("artifact {id:?} has no completion marker"));
    }
    let leftovers: Vec<String> = std::fs::read_dir(&lowers)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".staging-") || n.starts_with(".trash-"))
                .collect()
        })
        .unwrap_or_default();
    for l in leftovers {
        cell.problems.push(format!("left in lowers/: {l}"));
    }
    if alive(&p.proc()) {
        cell.problems.push("prepare process left".into());
    }
    cell
}

fn full() -> bool {
    std::env::var("LAZARET_FAULT_MATRIX").as_deref() == Ok("full")
}

#[test]
fn every_process_killed_at_every_step_recovers() {
    let env = require_env!();
    let m = Matrix::new(env);
    let started = Instant::now();
    // (step index, victim) -> result cell text; failures collected.
    let mut table: BTreeMap<(usize, Victim), String> = BTreeMap::new();
    let mut failures = Vec::new();
    let cells: Vec<(usize, Victim)> = if full() {
        let mut v = Vec::new();
        for (i, s) in STEPS.iter().enumerate() {
            let census = run_cell(&m, s, None);
            if !census.problems.is_empty() {
                failures.push(format!(
                    "{} (nothing killed): {}",
                    s.label,
                    census.problems.join("; ")
                ));
            }
            eprintln!("census {}: {:?}", s.label, census.present);
            for victim in VICTIMS {
                if census.present.contains(victim) {
                    v.push((i, *victim));
                } else {
                    table.insert((i, *victim), "-".into());
                }
            }
        }
        v
    } else {
        CI_CELLS
            .iter()
            .map(|(point, victim)| {
                let i = STEPS
                    .iter()
                    .position(|s| s.point == *point)
                    .unwrap_or_else(|| panic!("no step {point}"));
                // The join step shares its point name with the start's.
                let i = if *point == "cli:session-accepted" && *victim == Victim::Cli {
                    STEPS
                        .iter()
                        .position(|s| s.point == *point && s.scene == Scene::Join)
                        .unwrap()
                } else {
                    i
                };
                (i, *victim)
            })
            .collect()
    };
    for (i, victim) in cells {
        let s = &STEPS[i];
        let t = Instant::now();
        let cell = run_cell(&m, s, Some(victim));
        let verdict = if cell.absent {
            if full() {
                // There at the census, not at this kill: a process that
                // comes and goes around the step (runsc's sandbox, as
                // `runsc run` starts it).
                "absent".to_string()
            } else {
                failures.push(format!(
                    "{} x {}: the victim is not there",
                    s.label,
                    victim.name()
                ));
                "ABSENT".to_string()
            }
        } else if cell.problems.is_empty() {
            "recovered".to_string()
        } else {
            failures.push(format!(
                "{} x {}: {} (sessions: {})",
                s.label,
                victim.name(),
                cell.problems.join("; "),
                cell.notes.join("; ")
            ));
            format!("FAILED: {}", cell.problems.join("; "))
        };
        eprintln!(
            "cell {} x {}: {verdict} [{}] ({:.1} s)",
            s.label,
            victim.name(),
            cell.notes.join("; "),
            t.elapsed().as_secs_f64()
        );
        table.insert((i, victim), verdict);
    }
    print_table(&table);
    eprintln!(
        "fault matrix: {} cells in {:.0} s",
        table.values().filter(|v| *v != "-").count(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "cells that did not recover:\n{}",
        failures.join("\n")
    );
}

/// The matrix, as a Markdown table: a row per step, a column per victim;
/// `ok` recovered, `-` the process does not exist at that step, `absent`
/// it was there at the census but not at this kill, blank not run (CI's
/// selection), `FAIL` see the failures.
fn print_table(table: &BTreeMap<(usize, Victim), String>) {
    let short = |v: &str| match v {
        "recovered" => "ok",
        "-" => "-",
        "absent" => "absent",
        _ => "FAIL",
    };
    let mut out = String::from("| step \\ SIGKILL |");
    for v in VICTIMS {
        out.push_str(&format!(" {} |", v.name()));
    }
    out.push_str("\n| --- |");
    for _ in VICTIMS {
        out.push_str(" --- |");
    }
    out.push('\n');
    for (i, s) in STEPS.iter().enumerate() {
        out.push_str(&format!("| {} |", s.label));
        for v in VICTIMS {
            let c = table.get(&(i, *v)).map_or("", |c| short(c));
            out.push_str(&format!(" {c} |"));
        }
        out.push('\n');
    }
    // Also kept in a file: `cargo test` shows a passing test's output
    // only with --nocapture.
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-matrix.txt");
    let _ = std::fs::write(&file, &out);
    eprintln!("\n{out}\n(also in {})", file.display());
}
