//! `lazaret-fuzz [--secs N] [--seed S] [TARGET...]`: runs the fuzz
//! targets (all by default) for N seconds each (default 60); exits 1 when
//! one fails, naming the saved input.

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut secs, mut seed, mut names) = (60u64, 1u64, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).unwrap_or(secs),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or(seed),
            "--write-seeds" => {
                for (t, name, bytes) in lazaret_fuzz::seeds::all() {
                    let dir = lazaret_fuzz::root().join("corpus").join(t);
                    std::fs::create_dir_all(&dir).expect("corpus directory");
                    std::fs::write(dir.join(&name), bytes).expect("corpus file");
                    println!("{t}/{name}");
                }
                return;
            }
            "-h" | "--help" => {
                println!("usage: lazaret-fuzz [--secs N] [--seed S] [TARGET...] | --write-seeds");
                for t in lazaret_fuzz::TARGETS {
                    println!("  {}", t.name);
                }
                return;
            }
            _ => names.push(a),
        }
    }
    let mut failed = false;
    for t in lazaret_fuzz::TARGETS {
        if !names.is_empty() && !names.iter().any(|n| n == t.name) {
            continue;
        }
        let r = lazaret_fuzz::run(t, std::time::Duration::from_secs(secs), seed);
        match r.failure {
            None => println!("{}: {} inputs, no failure", t.name, r.execs),
            Some((path, why)) => {
                failed = true;
                println!(
                    "{}: FAILED after {} inputs: {why}; input in {}",
                    t.name,
                    r.execs,
                    path.display()
                );
            }
        }
    }
    std::process::exit(i32::from(failed));
}
