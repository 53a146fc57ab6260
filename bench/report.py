#!/usr/bin/env python3
"""Helpers for bench/run.

  report.py domain-id PROFILE CANONICAL_WORKSPACE
      Prints the Domain ID lazaret derives (DomainIdV1, protocol/src/domain.rs):
      the first 16 bytes of SHA-256("lazaret.domain-id.v1\\0" || len(profile) as
      u64 BE || profile || len(workspace) as u64 BE || workspace), in hex.

  report.py table RESULTS_DIR
      Reads the hyperfine exports RESULTS_DIR/<case>.<round>.json (or
      RESULTS_DIR/<case>.json), pools each case's rounds, and prints the table
      (median, p90, ratio lazaret/bare). Also writes RESULTS_DIR/summary.json.
"""

import glob
import hashlib
import json
import os
import struct
import sys

# (file stem, kind, label, baseline stem or None)
CASES = [
    ("bare-cold", "cold", "bare: unshare + runsc run /bin/true", None),
    ("lazaret-cold", "cold", "lazaret run -- true (no Domain)", "bare-cold"),
    ("lazaret-cold-cycle", "cold", "  ... + until Domain torn down", "bare-cold"),
    ("bare-warm", "warm", "bare: runsc exec /bin/true", None),
    ("lazaret-warm", "warm", "lazaret run -- true (Domain up)", "bare-warm"),
]


def domain_id(profile: str, workspace: str) -> str:
    ws = os.fsencode(workspace)
    p = profile.encode()
    h = hashlib.sha256()
    h.update(b"lazaret.domain-id.v1\0")
    h.update(struct.pack(">Q", len(p)))
    h.update(p)
    h.update(struct.pack(">Q", len(ws)))
    h.update(ws)
    return h.digest()[:16].hex()


def quantile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def load(results, stem):
    """All samples of one case: STEM.json, or the rounds STEM.<k>.json."""
    paths = sorted(glob.glob(os.path.join(glob.escape(results), stem + ".*.json")))
    paths = [p for p in paths if os.path.basename(p)[len(stem) + 1:-5].isdigit()]
    single = os.path.join(results, stem + ".json")
    if os.path.exists(single):
        paths.append(single)
    if not paths:
        return None
    times, command = [], None
    for path in paths:
        with open(path) as f:
            r = json.load(f)["results"][0]
        command = command or r["command"]
        times += [t * 1000.0 for t in r["times"]]
    return {
        "command": command,
        "n": len(times),
        "rounds": len(paths),
        "median_ms": quantile(times, 0.5),
        "p90_ms": quantile(times, 0.9),
        "min_ms": min(times),
        "max_ms": max(times),
        "times_ms": times,
    }


def table(results):
    stats = {stem: load(results, stem) for stem, *_ in CASES}
    rows = [("case", "benchmark", "N", "median ms", "p90 ms", "ratio")]
    summary = []
    for stem, kind, label, base in CASES:
        s = stats[stem]
        if s is None:
            continue
        b = stats.get(base) if base else None
        ratio = s["median_ms"] / b["median_ms"] if b else None
        ratio_p90 = s["p90_ms"] / b["p90_ms"] if b else None
        rows.append((kind, label, str(s["n"]), f"{s['median_ms']:.1f}", f"{s['p90_ms']:.1f}",
                     f"{ratio:.2f}x" if ratio is not None else "(baseline)"))
        summary.append({"case": stem, "kind": kind, "label": label.strip(), "baseline": base,
                        "ratio_median": ratio, "ratio_p90": ratio_p90, **s})
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 5}
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print()
    print("ratio = lazaret median / bare median of the same kind (cold vs cold, warm vs warm).")
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "domain-id":
        print(domain_id(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
