//! Every fuzz target, bounded: the corpus and the regressions replayed,
//! then `LAZARET_FUZZ_SECS` seconds (default 4) of mutations each, from a
//! seed printed for replay (`LAZARET_FUZZ_SEED`). The full run:
//! `cargo run -p lazaret-fuzz --release -- --secs 300`.

#[test]
fn no_target_panics_on_its_corpus_or_on_mutations_of_it() {
    let secs: u64 = std::env::var("LAZARET_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let seed: u64 = std::env::var("LAZARET_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let mut failures = Vec::new();
    for t in lazaret_fuzz::TARGETS {
        let r = lazaret_fuzz::run(t, std::time::Duration::from_secs(secs), seed);
        eprintln!("fuzz {}: {} inputs (seed {seed})", t.name, r.execs);
        if let Some((path, why)) = r.failure {
            failures.push(format!(
                "{}: {why} (input saved as {})",
                t.name,
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_target_has_a_corpus() {
    for t in lazaret_fuzz::TARGETS {
        let dir = lazaret_fuzz::root().join("corpus").join(t.name);
        let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        assert!(n > 0, "{} has no corpus in {}", t.name, dir.display());
    }
}

#[test]
fn the_runner_finds_and_keeps_a_failing_input() {
    fn fragile(b: &[u8]) {
        assert!(b.len() < 4, "long input");
    }
    let t = lazaret_fuzz::Target {
        name: "selftest",
        run: fragile,
    };
    let r = lazaret_fuzz::run(&t, std::time::Duration::from_secs(5), 1);
    let (path, why) = r.failure.expect("the runner missed a failing input");
    assert!(why.contains("long input"), "{why}");
    let kept = std::fs::read(&path).unwrap();
    assert!(kept.len() >= 4);
    std::fs::remove_file(path).unwrap();
}
