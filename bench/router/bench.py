#!/usr/bin/env python3
"""Direct vs routed placement benchmark for lazaret-mount-router.

Run through bench/router/run, which builds the router and enters a mount
namespace (as root of a user namespace when started unprivileged).
"""

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

ROUTER = os.environ["BENCH_ROUTER"]
RUNS = int(os.environ.get("BENCH_RUNS", "7"))
ONLY = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
OUT = os.environ.get("BENCH_OUT") or tempfile.mkdtemp(prefix="lazaret-router-bench.")
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": OUT,
    "LANG": "C.UTF-8",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@lazaret.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@lazaret.invalid",
    # No background `git gc`/maintenance holding the mount busy.
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",
    "GIT_CONFIG_KEY_1": "maintenance.auto",
    "GIT_CONFIG_VALUE_1": "false",
}


def log(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def sh(cmd, cwd, check=True):
    r = subprocess.run(["sh", "-c", cmd], cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise SystemExit(f"bench: `{cmd}` failed in {cwd}: {r.stderr.decode(errors='replace')}")
    return r


# ----------------------------------------------------------------- fixtures
def fixture_metadata(d):
    os.makedirs(d)
    sh("git init -q && printf 'node_modules/\\n*.o\\n' > .gitignore", d)
    for i in range(100):
        sub = os.path.join(d, f"d{i:03}")
        os.mkdir(sub)
        for j in range(100):
            with open(os.path.join(sub, f"f{j:03}.txt"), "w") as f:
                f.write(f"{i} {j}\n")


def fixture_git(d):
    fixture_metadata(d)
    sh("git add -A && git commit -qm init", d)


def fixture_build(d):
    os.makedirs(os.path.join(d, "src"))
    sh("git init -q && printf 'build/\\n' > .gitignore", d)
    for i in range(120):
        with open(os.path.join(d, "src", f"m{i:03}.c"), "w") as f:
            f.write(f'#include <stdio.h>\n#include <string.h>\nint m{i}(int x) {{ '
                    f'char b[64]; snprintf(b, sizeof b, "%d", x * {i}); return (int)strlen(b); }}\n')
    with open(os.path.join(d, "src", "main.c"), "w") as f:
        f.write("int main(void) { return 0; }\n")
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write("SRC := $(wildcard src/*.c)\nOBJ := $(SRC:src/%.c=build/%.o)\n"
                "build/app: $(OBJ)\n\t$(CC) -o $@ $^\n"
                "build/%.o: src/%.c | build\n\t$(CC) -O1 -c -o $@ $<\n"
                "build:\n\tmkdir -p build\n")
    sh("git add -A && git commit -qm init", d)


def make_wheels(wdir, n=20, modules=40):
    os.makedirs(wdir, exist_ok=True)
    for i in range(n):
        name = f"lzbench{i:02}"
        path = os.path.join(wdir, f"{name}-1.0-py3-none-any.whl")
        with zipfile.ZipFile(path, "w") as z:
            files = {f"{name}/__init__.py": "VALUE = 1\n"}
            for m in range(modules):
                files[f"{name}/mod{m:03}.py"] = f"def f(x):\n    return x + {m}\n" * 20
            di = f"{name}-1.0.dist-info"
            files[f"{di}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
            files[f"{di}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            files[f"{di}/top_level.txt"] = f"{name}\n"
            record = [f"{p},," for p in files] + [f"{di}/RECORD,,"]
            files[f"{di}/RECORD"] = "\n".join(record) + "\n"
            for p, body in files.items():
                z.writestr(p, body)


def fixture_pip(d):
    os.makedirs(d)
    sh("git init -q && printf '.venv/\\n' > .gitignore && git add -A && git commit -qm init", d)


# ---------------------------------------------------------------- workloads
WORKLOADS = {
    # name: (fixture, command run in the workspace view)
    "metadata": (fixture_metadata,
                 "find . -path ./.git -prune -o -type f -printf '%s %T@ %m\\n' >/dev/null && ls -lR >/dev/null"),
    "git": (fixture_git,
            "git status --porcelain >/dev/null && echo change >> d000/f000.txt && git commit -qam change"),
    "pip": (fixture_pip, None),
    "build": (fixture_build, "make -s -j2 >/dev/null"),
}


def pip_cmd(wheels):
    return (f"{sys.executable} -m pip install -q --no-index --no-deps --disable-pip-version-check "
            f"--no-compile --target .venv/site {wheels}/*.whl")


def have_pip():
    return subprocess.run([sys.executable, "-m", "pip", "--version"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


# ------------------------------------------------------------------ mounting
class Routed:
    def __init__(self, ws, state, mnt):
        os.makedirs(state)
        os.makedirs(mnt)
        r, w = os.pipe()
        self.p = subprocess.Popen([ROUTER, "--workspace", ws, "--state", state, "--mountpoint", mnt,
                                   "--ready-fd", str(w)], pass_fds=(w,), env=ENV,
                                  stderr=subprocess.PIPE)
        os.close(w)
        got = os.read(r, 16)
        os.close(r)
        if got != b"ready\n":
            raise SystemExit(f"bench: the router did not start: {self.p.stderr.read().decode()}")
        self.mnt = mnt

    def close(self):
        if subprocess.run(["umount", self.mnt], check=False).returncode != 0:
            subprocess.run(["umount", "-l", self.mnt], check=False)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def timed(cmd, cwd):
    subprocess.run(["sync"], check=False)
    t0 = time.perf_counter()
    sh(cmd, cwd)
    return time.perf_counter() - t0


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def main():
    work = os.path.join(OUT, "work")
    os.makedirs(work, exist_ok=True)
    results = {}
    names = [n for n in WORKLOADS if not ONLY or n in ONLY]
    wheels = os.path.join(OUT, "wheels")
    for name in names:
        fixture, cmd = WORKLOADS[name]
        if name == "pip":
            if not have_pip():
                log("pip: skipped (no pip for", sys.executable + ")")
                continue
            make_wheels(wheels)
            cmd = pip_cmd(wheels)
        template = os.path.join(work, f"{name}-template")
        log(f"{name}: preparing the fixture")
        fixture(template)
        direct, routed, ratios = [], [], []
        for i in range(RUNS + 1):  # sample 0 warms caches and is dropped
            pair = {}
            for placement in (("direct", "routed") if i % 2 == 0 else ("routed", "direct")):
                base = os.path.join(work, f"{name}-{i}-{placement}")
                ws = os.path.join(base, "ws")
                os.makedirs(base)
                subprocess.run(["cp", "-a", template, ws], check=True)
                if placement == "direct":
                    pair[placement] = timed(cmd, ws)
                else:
                    r = Routed(ws, os.path.join(base, "state"), os.path.join(base, "mnt"))
                    try:
                        pair[placement] = timed(cmd, r.mnt)
                    finally:
                        r.close()
                    # Never delete through a mount that is still there.
                    if os.path.ismount(r.mnt):
                        raise SystemExit(f"bench: {r.mnt} is still mounted")
                shutil.rmtree(base)
            if i == 0:
                continue
            direct.append(pair["direct"])
            routed.append(pair["routed"])
            ratios.append(pair["routed"] / pair["direct"])
            log(f"{name}: sample {i}: direct {pair['direct']:.3f}s routed {pair['routed']:.3f}s")
        shutil.rmtree(template)
        results[name] = {
            "direct_median_s": statistics.median(direct),
            "direct_p90_s": p90(direct),
            "routed_median_s": statistics.median(routed),
            "routed_p90_s": p90(routed),
            "ratio_of_medians": statistics.median(routed) / statistics.median(direct),
            "median_paired_ratio": statistics.median(ratios),
            "samples": RUNS,
            "direct_s": direct,
            "routed_s": routed,
        }
    meta = {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "router": ROUTER,
        "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
        "tmp_fs": subprocess.run(["df", "-T", OUT], capture_output=True, text=True).stdout.splitlines()[-1],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    print(f"\nlazaret-mount-router: direct vs routed ({RUNS} paired samples each; fresh fixture copy per sample)")
    print(f"{'workload':<10} {'direct med':>11} {'direct p90':>11} {'routed med':>11} {'routed p90':>11} {'ratio':>7} {'paired':>7}")
    for n, r in results.items():
        print(f"{n:<10} {r['direct_median_s']:>10.3f}s {r['direct_p90_s']:>10.3f}s "
              f"{r['routed_median_s']:>10.3f}s {r['routed_p90_s']:>10.3f}s "
              f"{r['ratio_of_medians']:>6.2f}x {r['median_paired_ratio']:>6.2f}x")
    print(f"\nresults and run metadata: {os.path.join(OUT, 'results.json')}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
