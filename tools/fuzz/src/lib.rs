//! Fuzz targets for what crosses a trust boundary into a host process,
//! and a small, dependency-free mutation runner that CI runs for a
//! bounded time.
//!
//! Each target is a plain `fn(&[u8])` (the shape `cargo fuzz` and
//! libFuzzer take too): it feeds the bytes to one decoder the way the
//! product does and must never panic, hang or write outside its scratch
//! directory, whatever the bytes. The runner starts from the target's
//! corpus (`tools/fuzz/corpus/<target>/`, kept in the tree), replays every file
//! of `fuzz/regressions/<target>/` (inputs that once failed), then
//! mutates corpus entries (bit flips, byte and length edits, splices,
//! repeated chunks, interesting integers) for the time it is given. A
//! failing input is written to `tools/fuzz/crashes/<target>-<hash>` for a
//! regression file.
//!
//! This runner is not coverage-guided: it finds what random edits of
//! valid inputs reach. `lazaret-fuzz --secs N TARGET...` runs it longer.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "config",
        run: targets::config,
    },
    Target {
        name: "escalation-record",
        run: targets::escalation_record,
    },
    Target {
        name: "escalation-body",
        run: targets::escalation_body,
    },
    Target {
        name: "sandbox-plan",
        run: targets::sandbox_plan,
    },
    Target {
        name: "coordinator-input",
        run: targets::coordinator_input,
    },
    Target {
        name: "session-frames",
        run: targets::session_frames,
    },
    Target {
        name: "supervisor-channel",
        run: targets::supervisor_channel,
    },
    Target {
        name: "mailbox-channel",
        run: targets::mailbox_channel,
    },
    Target {
        name: "netreport",
        run: targets::netreport,
    },
    Target {
        name: "oci-layer",
        run: targets::oci_layer,
    },
    Target {
        name: "ignore-rules",
        run: targets::ignore_rules,
    },
    Target {
        name: "image-reference",
        run: targets::image_reference,
    },
    Target {
        name: "escalation-result",
        run: targets::escalation_result,
    },
    Target {
        name: "trust-anchor",
        run: targets::trust_anchor,
    },
    Target {
        name: "registration",
        run: targets::registration,
    },
    Target {
        name: "certificate-claims",
        run: targets::certificate_claims,
    },
    Target {
        name: "dns-filter",
        run: targets::dns_filter,
    },
    Target {
        name: "git-index",
        run: targets::git_index,
    },
    Target {
        name: "changes-journal",
        run: targets::changes_journal,
    },
];

pub mod seeds;
pub mod targets;

/// splitmix64: a fixed, seedable sequence (runs are reproducible from
/// the seed printed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
];

/// One random edit of `input` (`others`: the corpus, for splices).
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = input.len();
    match rng.below(9) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            input[i] = rng.next_u64() as u8;
        }
        2 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            input.splice(i..i, bytes);
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            input.drain(i..i + n);
        }
        4 => input.truncate(rng.below(len + 1)),
        5 if len > 0 => {
            // Repeat a chunk (lengths, nesting).
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(32));
            let chunk = input[i..i + n].to_vec();
            let times = 1 + rng.below(8);
            for _ in 0..times {
                input.splice(i..i, chunk.iter().copied());
            }
        }
        6 if !others.is_empty() => {
            let o = &others[rng.below(others.len())];
            if !o.is_empty() {
                let (a, b) = (rng.below(len + 1), rng.below(o.len()));
                input.truncate(a);
                input.extend_from_slice(&o[b..]);
            }
        }
        7 if len > 0 => {
            let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
            let n = [1, 2, 4, 8][rng.below(4)];
            let i = rng.below(len);
            for (k, b) in v[..n].iter().enumerate() {
                if i + k < len {
                    input[i + k] = *b;
                }
            }
        }
        _ => {
            let i = rng.below(len + 1);
            input.insert(
                i,
                [b'\n', b'"', b'[', b'=', 0, 0xff, b'/', b'.'][rng.below(8)],
            );
        }
    }
}

/// The tree's `tools/fuzz/` directory.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.path(), std::fs::read(e.path()).ok()?)))
        .collect();
    out.sort();
    out
}

/// What one run of a target found.
pub struct Report {
    pub execs: u64,
    /// The first failing input and why, saved under `tools/fuzz/crashes/`.
    pub failure: Option<(PathBuf, String)>,
}

fn attempt(t: &Target, input: &[u8]) -> Result<(), String> {
    std::panic::catch_unwind(|| (t.run)(input)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

fn save(t: &Target, input: &[u8], why: String) -> (PathBuf, String) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in input {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    let dir = root().join("crashes");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{}-{h:016x}", t.name));
    let _ = std::fs::write(&path, input);
    (path, why)
}

/// Replays the corpus and the regressions of `t`, then mutates for
/// `budget`, starting from `seed`.
pub fn run(t: &Target, budget: Duration, seed: u64) -> Report {
    let mut execs = 0;
    let corpus: Vec<Vec<u8>> = files(&root().join("corpus").join(t.name))
        .into_iter()
        .chain(files(&root().join("regressions").join(t.name)))
        .map(|(_, b)| b)
        .collect();
    for input in &corpus {
        execs += 1;
        if let Err(why) = attempt(t, input) {
            return Report {
                execs,
                failure: Some(save(t, input, why)),
            };
        }
    }
    let seeds = if corpus.is_empty() {
        vec![Vec::new()]
    } else {
        corpus
    };
    let mut rng = Rng(seed);
    let start = Instant::now();
    while start.elapsed() < budget {
        let mut input = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(8) {
            mutate(&mut rng, &mut input, &seeds);
        }
        input.truncate(1 << 20);
        execs += 1;
        if let Err(why) = attempt(t, &input) {
            return Report {
                execs,
                failure: Some(save(t, &input, why)),
            };
        }
    }
    Report {
        execs,
        failure: None,
    }
}
