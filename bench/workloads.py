#!/usr/bin/env python3
"""bench/workloads.py: the fixture, the timed workloads and the tables of
bench/workloads (see bench/README.md).

  workloads.py fixture DIR FILES
      A Git repository in DIR (one commit): FILES tracked files under src/,
      100 per directory, a package.json, a .gitignore that ignores
      node_modules/, and vendor/bench-pkg-1.0.0.tgz, a package of 300 small
      files that `npm install` takes offline.

  workloads.py run NODE NPM_CLI
      Run in the repository (on the host, or inside a sandbox with the
      program on stdin: `python3 - run ...`): times each workload once, in
      this order, and prints one JSON object {workload: milliseconds} on
      stdout. NODE and NPM_CLI are node and npm's npm-cli.js as seen where
      it runs ("-" for none: the npm workload is left out).

  workloads.py table RESULTS_DIR
      Reads RESULTS_DIR/*.json (placement: samples), prints the medians and
      the ratios against bare runsc of the same release, and writes
      RESULTS_DIR/summary.json.
"""

import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

NEEDLE = "lazaret-bench-needle-nowhere"
PKG = "vendor/bench-pkg-1.0.0.tgz"
# (name, label), in the order they run and print.
WORKLOADS = [
    ("git-status-first", "`git status`, first (index without stat data: every file re-read)"),
    ("git-status-again", "`git status`, again"),
    ("find", "`find . -type f`"),
    ("cat", "`cat` of every file (.git aside)"),
    ("grep", "`grep -r` (no match: reads every file)"),
    ("npm-install", "`npm install` of a 300-file package into ignored node_modules (offline)"),
    ("git-commit", "`git commit -a` of 1,000 changed files"),
]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
}


# ------------------------------------------------------------------ fixture
def fixture(ws, files):
    os.makedirs(ws)
    for i in range(files):
        d = f"{ws}/src/d{i // 100}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/f{i % 100}.txt", "w") as f:
            f.write(f"file {i}\n" + "".join(f"line {k} of file {i}: some text to read\n" for k in range(8)))
    with open(f"{ws}/.gitignore", "w") as f:
        f.write("node_modules/\n")
    with open(f"{ws}/package.json", "w") as f:
        json.dump({"name": "bench", "version": "1.0.0", "private": True}, f)
    os.makedirs(f"{ws}/vendor")
    package(f"{ws}/{PKG}")
    run(["git", "init", "-q"], ws)
    run(["git", "add", "-A"], ws)
    # No auto gc in the background (the copies of the fixture would race
    # it): the objects are packed here, once, as in a cloned repository.
    run(["git", "-c", "gc.auto=0", "commit", "-q", "-m", "fixture"], ws)
    run(["git", "gc", "-q"], ws)


def package(out):
    """An npm package tarball (entries under package/), 300 files."""
    with tempfile.TemporaryDirectory() as t:
        root = os.path.join(t, "package")
        for k in range(300):
            d = f"{root}/lib/g{k // 100}"
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/m{k}.js", "w") as f:
                f.write(f"module.exports = function m{k}(x) {{ return x + {k}; }};\n")
        with open(f"{root}/index.js", "w") as f:
            f.write("module.exports = require('./lib/g0/m0.js');\n")
        with open(f"{root}/package.json", "w") as f:
            json.dump({"name": "bench-pkg", "version": "1.0.0", "main": "index.js"}, f)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(root, arcname="package")


def run(argv, cwd=".", ok=(0,)):
    env = dict(os.environ, **GIT_ENV)
    p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode not in ok:
        raise SystemExit(f"workloads: {' '.join(argv)} exited {p.returncode}: {p.stderr.decode()[-2000:]}")


# ------------------------------------------------------------------ workloads
def timed(argv, ok=(0,)):
    t = time.perf_counter()
    run(argv, ok=ok)
    return (time.perf_counter() - t) * 1000


def change_files(n):
    """Appends a line to n tracked files (fewer in a smaller repository;
    untimed), so a commit has that many changes."""
    stamp = time.time_ns()
    for i in range(n):
        try:
            f = open(f"src/d{i // 100}/f{i % 100}.txt", "a")
        except FileNotFoundError:
            return
        with f:
            f.write(f"changed {stamp}\n")


def workloads(node, npm_cli):
    # An index of HEAD without stat data (untimed), as after a clone or a
    # checkout elsewhere: the first `git status` re-reads every file, and
    # refreshes the index for the next one.
    run(["git", "read-tree", "HEAD"])
    ms = {}
    ms["git-status-first"] = timed(["git", "status"])
    ms["git-status-again"] = timed(["git", "status"])
    ms["find"] = timed(["find", ".", "-type", "f"])
    ms["cat"] = timed(["find", ".", "-path", "./.git", "-prune", "-o", "-type", "f",
                       "-exec", "cat", "{}", "+"])
    ms["grep"] = timed(["grep", "-r", NEEDLE, "."], ok=(1,))
    if node != "-":
        shutil.rmtree("node_modules", ignore_errors=True)
        cache = tempfile.mkdtemp(prefix="bench-npm-cache-")
        ms["npm-install"] = timed([node, npm_cli, "install", "--offline", "--no-audit", "--no-fund",
                                   "--no-save", "--no-package-lock", "--no-update-notifier",
                                   f"--cache={cache}", f"./{PKG}"])
        if not os.path.isfile("node_modules/bench-pkg/lib/g2/m299.js"):
            raise SystemExit("workloads: npm install did not install bench-pkg")
        shutil.rmtree("node_modules")
        shutil.rmtree(cache, ignore_errors=True)
    change_files(1000)
    ms["git-commit"] = timed(["git", "commit", "-q", "-a", "-m", "bench"])
    return ms


# ------------------------------------------------------------------ tables
def median(xs):
    return statistics.median(xs) if xs else float("nan")


def p90(xs):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * 0.9
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def fmt(x):
    return "-" if x != x else f"{x:,.0f}"


def ratio(a, b):
    return "-" if a != a or b != b or b == 0 else f"{a / b:.2f}x"


def table(results):
    places = {}
    for f in sorted(glob.glob(os.path.join(glob.escape(results), "*.json"))):
        name = os.path.basename(f)[:-5]
        if name == "summary":
            continue
        with open(f) as h:
            places[name] = json.load(h)
    host = places.get("host", {"samples": []})
    releases = sorted({p["release"] for p in places.values() if p.get("release")})
    summary = {}
    for rel in releases:
        def find(kind):
            return next((p for p in places.values() if p.get("release") == rel and p["kind"] == kind),
                        {"samples": [], "label": ""})
        bare, iso, shared = find("bare"), find("lazaret-isolated"), find("lazaret-shared")
        print(f"\nrunsc {rel}: {bare.get('label', '')}; medians of {len(bare['samples'])} samples, ms")
        print(f"{'workload':<74} {'host':>7} {'bare':>7} {'Lazaret':>8} {'/bare':>6} {'ii=false':>9} {'/bare':>6}")
        for name, label in WORKLOADS:
            def med(p):
                return median([s[name] for s in p["samples"] if name in s])
            h, b, i, s = med(host), med(bare), med(iso), med(shared)
            if b != b and i != i:
                continue
            print(f"{label:<74} {fmt(h):>7} {fmt(b):>7} {fmt(i):>8} {ratio(i, b):>6} {fmt(s):>9} {ratio(s, b):>6}")
            summary.setdefault(rel, {})[name] = {
                "host_ms": h, "bare_ms": b, "lazaret_ms": i, "lazaret_shared_ms": s,
                "lazaret_vs_bare": i / b if b == b and b else None,
                "lazaret_shared_vs_bare": s / b if b == b and b else None,
                "p90_ms": {"host": p90([x[name] for x in host["samples"] if name in x]),
                           "bare": p90([x[name] for x in bare["samples"] if name in x]),
                           "lazaret": p90([x[name] for x in iso["samples"] if name in x]),
                           "lazaret_shared": p90([x[name] for x in shared["samples"] if name in x])},
            }
    print("\nbare = runsc --rootless --network=none --ignore-cgroups do over the same directory; "
          "Lazaret = isolate_ignored = true (the default), ii=false = isolate_ignored = false; "
          "/bare = against bare runsc of the same release, in the same run")
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


def main():
    args = sys.argv[1:]
    if args[:1] == ["fixture"] and len(args) == 3:
        fixture(args[1], int(args[2]))
    elif args[:1] == ["run"] and len(args) == 3:
        print(json.dumps(workloads(args[1], args[2])))
    elif args[:1] == ["table"] and len(args) == 2:
        table(args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
