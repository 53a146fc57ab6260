#!/usr/bin/env python3
"""The memory of a Domain (or of a bare runsc container), as the kernel
accounts it: the proportional set size (PSS, /proc/PID/smaps_rollup) of
each of its processes, so pages shared between them (runsc's binary,
libraries) count once in the total.

  pss.py domain DOMAIN_ID LABEL    the Domain's coordinator (`--domain ID`) and every descendant
  pss.py tree PID LABEL            PID and every descendant

Prints one line: LABEL, the total in MiB, and the processes by name; the
exit status is 1 when a process's PSS could not be read (then the line says
how many).
"""

import os
import sys


def processes():
    """{pid: (ppid, comm, argv)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        if rest[0] == "Z":
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        out[int(d)] = (int(rest[1]), comm, [a.decode(errors="replace") for a in argv if a])
    return out


def descendants(procs, roots):
    children = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("domain", "tree"):
        sys.exit(__doc__)
    kind, what, label = sys.argv[1:]
    procs = processes()
    if kind == "domain":
        roots = [p for p, (_, _, argv) in procs.items()
                 if argv and argv[0].endswith("lazaret-coordinator") and what in argv]
    else:
        roots = [int(what)] if int(what) in procs else []
    if not roots:
        sys.exit(f"pss: no process for {kind} {what}")
    by_name, total, unreadable = {}, 0, 0
    for pid in descendants(procs, roots):
        kib = pss_kib(pid)
        if kib is None:
            unreadable += 1
            continue
        name = procs[pid][1]
        n, k = by_name.get(name, (0, 0))
        by_name[name] = (n + 1, k + kib)
        total += kib
    parts = ", ".join(f"{name} {k / 1024:.1f}" + (f" ({n})" if n > 1 else "")
                      for name, (n, k) in sorted(by_name.items(), key=lambda x: -x[1][1]))
    note = f"; {unreadable} processes unreadable" if unreadable else ""
    print(f"{label}: {total / 1024:.1f} MiB PSS ({parts}){note}")
    sys.exit(1 if unreadable else 0)


if __name__ == "__main__":
    main()
