#!/usr/bin/env python3
"""Write the OCI bundle (config.json) used by the bare-runsc baselines.

It mirrors what lazaret-supervisor writes (bin/supervisor/src/bundle.rs) so that
the bare baseline does the same work minus Lazaret: the same base mounts, the
workspace with the Git Sentry's mounts (.git rw, .git/config ro, .git/hooks
tmpfs), fresh pid/ipc/uts/mount/network namespaces, the same capabilities and
noNewPrivileges. Only the process differs:

  cold  -> /bin/true           (`runsc run` starts the sandbox, runs it, tears it down)
  serve -> the same idle init loop lazaret uses, for `runsc exec` against it

Usage: bundle.py cold|serve ROOT WORKSPACE OUT_DIR
"""

import json
import os
import sys

CAPS = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
]
INIT_ARGS = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def workspace_mounts(ws):
    def bind(src, dst, ro):
        return {"destination": dst, "type": "bind", "source": src,
                "options": ["rbind", "ro" if ro else "rw"]}

    mounts = [bind(ws, "/workspace", False)]
    git = os.path.join(ws, ".git")
    if os.path.isdir(git):
        mounts.append(bind(git, "/workspace/.git", False))
        for name in ("config", "config.worktree", "commondir"):
            f = os.path.join(git, name)
            if os.path.isfile(f):
                mounts.append(bind(f, "/workspace/.git/" + name, True))
        if os.path.isdir(os.path.join(git, "hooks")):
            mounts.append({"destination": "/workspace/.git/hooks", "type": "tmpfs",
                           "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755"]})
    return mounts


def config(mode, root, ws):
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
    ] + workspace_mounts(ws)
    caps = {"bounding": CAPS, "effective": CAPS, "permitted": CAPS}
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"] if mode == "cold" else INIT_ARGS,
            "env": [f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8"],
            "cwd": "/",
            "capabilities": caps,
            "noNewPrivileges": True,
        },
        "root": {"path": root, "readonly": False},
        "hostname": "bench",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("cold", "serve"):
        sys.exit(__doc__)
    mode, root, ws, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config(mode, root, ws), f, indent=2)


if __name__ == "__main__":
    main()
