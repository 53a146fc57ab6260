#!/usr/bin/env python3
"""Helpers for bench/run and bench/compare.

  report.py domain-id PROFILE CANONICAL_WORKSPACE
      Prints the Domain ID lazaret derives (DomainIdV1, lib/protocol/src/domain.rs):
      the first 16 bytes of SHA-256("lazaret.domain-id.v1\\0" || len(profile) as
      u64 BE || profile || len(workspace) as u64 BE || workspace), in hex.

  report.py table RESULTS_DIR [run|compare]
      Reads the hyperfine exports RESULTS_DIR/<case>.<round>.json (or
      RESULTS_DIR/<case>.json), pools each case's rounds, and prints the table
      of that benchmark's cases (default run): median, p90, and the ratio to
      the baseline of the same kind measured in the same run. Also writes
      RESULTS_DIR/summary.json.
"""

import glob
import hashlib
import json
import os
import struct
import sys

# A case: (file stem, kind, label, baselines, target). The ratio is taken
# against the first of `baselines` that was measured (None: the case is a
# baseline itself); `target` is the ratio the case should stay within, or
# None.
SETS = {
    "run": [
        ("bare-cold", "cold", "bare: unshare + runsc run /bin/true", None, None),
        ("lazaret-cold", "cold", "lazaret run -- true (no Domain)", ("bare-cold",), None),
        ("lazaret-cold-cycle", "cold", "  ... + until Domain torn down", ("bare-cold",), None),
        ("bare-warm", "warm", "bare: runsc exec /bin/true", None, None),
        ("bare-warm-sh", "warm", "bare: runsc exec sh -c 'exec \"$@\"' true", ("bare-warm",), None),
        ("lazaret-warm", "warm", "lazaret run -- true (Domain up)", ("bare-warm",), 1.2),
    ],
    "compare": [
        ("podman-cold", "cold", "podman+runsc: run --rm --network=none /bin/true", None, None),
        ("lazaret-cold-none", "cold", "lazaret run -- true, network mode none",
         ("podman-cold", "bare-cold"), 1.0),
        ("lazaret-cold-net", "cold", "lazaret run -- true, default network",
         ("podman-cold", "bare-cold"), None),
        ("bare-cold", "cold", "bare: unshare + runsc run /bin/true", ("podman-cold",), None),
        ("bare-warm", "warm", "bare: runsc exec /bin/true", None, None),
        ("podman-warm", "warm", "podman+runsc: exec /bin/true", ("bare-warm",), None),
        ("lazaret-warm", "warm", "lazaret run -- true (Domain up, mode none)", ("bare-warm",), 1.2),
    ],
}

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


def table(results, which="run"):
    cases = SETS[which]
    stats = {stem: load(results, stem) for stem, *_ in cases}
    has_targets = any(c[4] is not None for c in cases)
    head = ["case", "benchmark", "N", "median ms", "p90 ms", "ratio"]
    if has_targets:
        head.append("target")
    rows = [tuple(head)]
    summary = []
    for stem, kind, label, bases, target in cases:
        s = stats[stem]
        if s is None:
            continue
        base = next((b for b in (bases or ()) if stats.get(b)), None)
        b = stats[base] if base else None
        ratio = s["median_ms"] / b["median_ms"] if b else None
        ratio_p90 = s["p90_ms"] / b["p90_ms"] if b else None
        if ratio is not None:
            shown = f"{ratio:.2f}x" + ("" if base == bases[0] else f" vs {base}")
        else:
            shown = "(baseline)"
        row = [kind, label, str(s["n"]), f"{s['median_ms']:.1f}", f"{s['p90_ms']:.1f}", shown]
        met = None
        if has_targets:
            if target is not None and ratio is not None and base == bases[0]:
                met = ratio <= target
                row.append(f"<= {target:.2f}x {'met' if met else 'MISSED'}")
            else:
                row.append("")
        rows.append(tuple(row))
        summary.append({"case": stem, "kind": kind, "label": label.strip(), "baseline": base,
                        "ratio_median": ratio, "ratio_p90": ratio_p90,
                        "target": target, "target_met": met, **s})
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 5}
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        print("  ".join(cells).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print()
    if which == "run":
        print("ratio = lazaret median / bare median of the same kind (cold vs cold, warm vs warm).")
    else:
        print("ratio = median / the (baseline) median of the same kind (cold vs cold, warm vs warm);")
        print("target = the ratio lazaret should stay within (issue 16), judged on medians.")
    with open(os.path.join(results, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "domain-id":
        print(domain_id(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "table" and all(a in SETS for a in sys.argv[3:]):
        table(sys.argv[2], *sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
