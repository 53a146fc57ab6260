#!/usr/bin/env python3
"""The memory of a Domain (or of a bare runsc container), as the kernel
accounts it: the proportional set size (PSS, /proc/PID/smaps_rollup) of
each of its processes, so pages shared between them (runsc's binary,
libraries) count once in the total.

  pss.py domain DOMAIN_ID LABEL    the Domain's coordinator (`--domain ID`) and every descendant
  pss.py tree PID LABEL            PID and every descendant

Prints one line: LABEL, the total in MiB, and the processes by name. A
process that is not dumpable (Lazaret's confined coordinator and mailbox
reader) shows its PSS to root only: for any other user its RSS counts
instead, marked `*`. The exit status is 1 when a process could not be read
at all (then the line says how many).
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


def field_kib(path, field):
    """The kB value of the line `FIELD: N kB` in PATH; None if unreadable."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_kib(pid):
    """VmRSS from /proc/PID/status, which anyone may read."""
    return field_kib(f"/proc/{pid}/status", "VmRSS")


def pss_kib(pid):
    return field_kib(f"/proc/{pid}/smaps_rollup", "Pss")


def label_of(proc):
    """The program's name: argv[0]'s last component (runsc's processes are
    `runsc-sandbox`, `runsc-gofer`; slirp4netns names its role), or, with no
    argv (the systrap platform's stub processes, children of the Sentry),
    "stub"."""
    _, comm, argv = proc
    if not argv:
        return "stub"
    return os.path.basename(argv[0]).split(":")[0] or comm


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
    by_name, total, unreadable, rss = {}, 0, 0, False
    for pid in descendants(procs, roots):
        name = label_of(procs[pid])
        kib = pss_kib(pid)
        if kib is None:
            # Not dumpable (the confined coordinator and mailbox reader):
            # only root reads its PSS; its RSS counts instead (an upper bound).
            kib = rss_kib(pid)
            name += "*"
            rss = True
        if kib is None:
            unreadable += 1
            continue
        n, k = by_name.get(name, (0, 0))
        by_name[name] = (n + 1, k + kib)
        total += kib
    parts = ", ".join(f"{name} {k / 1024:.1f}" + (f" ({n})" if n > 1 else "")
                      for name, (n, k) in sorted(by_name.items(), key=lambda x: -x[1][1]))
    note = "; * RSS, not PSS (not dumpable: its PSS is root's to read)" if rss else ""
    note += f"; {unreadable} processes gone or unreadable" if unreadable else ""
    print(f"{label}: {total / 1024:.1f} MiB PSS ({parts}){note}")
    sys.exit(1 if unreadable else 0)


if __name__ == "__main__":
    main()
