#!/usr/bin/env python3
"""Writes a small OCI image layout by hand, for the image tests and the
image benchmark.

    mkoci.py LAYOUT TAG [--evil KIND] [--outside DIR] [--big MIB] [--gzip 0|1] [--hello TEXT]

The image: a busybox-static rootfs (`/bin/busybox` and a symlink per
applet), a file and a directory owned by 1000:1000, a setuid file, a second
layer with a whiteout (`/etc/removed`) and an opaque directory (`/opq`).

--evil KIND adds a top layer with hostile content:
  traversal  an entry `../../escape-traversal`
  absolute   an entry `/escape-absolute`
  symlink    `esc -> OUTSIDE` then `esc/pwned` (OUTSIDE from --outside)
  hardlink   a hard link to `../../../../etc/passwd`
  device     a character device `dev/evil-null` (neutralised: skipped)
  setuid     a setuid-root file `bin/evil-suid` (neutralised: bit cleared)
  truncated  a gzip layer cut in half (its digest matches the cut bytes)
  digest     a layer whose content does not match its digest
--big MIB adds a layer of MIB MiB of incompressible data.
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


class Layout:
    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)

    def blob(self, data, digest=None):
        d = digest or sha(data)
        with open(os.path.join(self.path, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(data)
        return d


def tar_bytes(add):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        add(t)
    return buf.getvalue()


def info(name, kind=tarfile.REGTYPE, mode=0o644, size=0, uid=0, gid=0, link=""):
    i = tarfile.TarInfo(name)
    i.type = kind
    i.mode = mode
    i.size = size
    i.uid = uid
    i.gid = gid
    i.linkname = link
    i.mtime = 1700000000
    return i


def add_file(t, name, data, mode=0o644, uid=0, gid=0):
    t.addfile(info(name, mode=mode, size=len(data), uid=uid, gid=gid), io.BytesIO(data))


def add_dir(t, name, mode=0o755, uid=0, gid=0):
    t.addfile(info(name, tarfile.DIRTYPE, mode=mode, uid=uid, gid=gid))


HELLO = b"hello from the oci image\n"


def base_layer(t):
    for d in ["bin", "etc", "home", "opq", "var", "usr", "usr/lib"]:
        add_dir(t, d)
    with open("/bin/busybox", "rb") as f:
        add_file(t, "bin/busybox", f.read(), mode=0o755)
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
    for a in sorted(set(applets)):
        if a != "busybox":
            t.addfile(info("bin/" + a, tarfile.SYMTYPE, mode=0o777, link="busybox"))
    add_file(t, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    add_file(t, "etc/group", b"root:x:0:\nuser:x:1000:\n")
    add_file(t, "etc/removed", b"whited out by layer 2\n")
    add_file(t, "etc/hello", HELLO)
    add_file(t, "etc/hello2", HELLO)
    add_dir(t, "home/user", mode=0o750, uid=1000, gid=1000)
    add_file(t, "home/user/owned", b"mine\n", uid=1000, gid=1000)
    add_file(t, "bin/suid-tool", b"#!/bin/sh\n", mode=0o4755)
    add_file(t, "opq/old", b"old\n")


def second_layer(t):
    add_file(t, "etc/.wh.removed", b"")
    add_dir(t, "opq")
    add_file(t, "opq/.wh..wh..opq", b"")
    add_file(t, "opq/new", b"new\n")


def evil_layer(kind, outside):
    if kind == "traversal":
        return tar_bytes(lambda t: add_file(t, "../../escape-traversal", b"x"))
    if kind == "absolute":
        return tar_bytes(lambda t: add_file(t, "/escape-absolute", b"x"))
    if kind == "symlink":
        def f(t):
            t.addfile(info("esc", tarfile.SYMTYPE, mode=0o777, link=outside))
            add_file(t, "esc/pwned", b"x")
        return tar_bytes(f)
    if kind == "hardlink":
        return tar_bytes(lambda t: t.addfile(info("h", tarfile.LNKTYPE, link="../../../../etc/passwd")))
    if kind == "device":
        def f(t):
            add_dir(t, "dev")
            i = info("dev/evil-null", tarfile.CHRTYPE, mode=0o666)
            i.devmajor, i.devminor = 1, 3
            t.addfile(i)
        return tar_bytes(f)
    if kind == "setuid":
        return tar_bytes(lambda t: add_file(t, "bin/evil-suid", b"#!/bin/sh\n", mode=0o4755))
    raise SystemExit("unknown --evil kind " + kind)


def main():
    args = sys.argv[1:]
    layout, tag = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    evil = opts.get("--evil")
    global HELLO
    if "--hello" in opts:
        HELLO = opts["--hello"].encode() + b"\n"
    use_gzip = opts.get("--gzip", "1") == "1"
    lay = Layout(layout)
    layers = []  # (media type, digest, size, diff_id)

    def push(tarb, compress=use_gzip, blob=None, digest=None, diff=None):
        data = blob if blob is not None else (gzip.compress(tarb, 1, mtime=0) if compress else tarb)
        d = lay.blob(data, digest)
        mt = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        layers.append((mt, d, len(data), diff or sha(tarb)))

    push(tar_bytes(base_layer))
    push(tar_bytes(second_layer))
    if "--big" in opts:
        mib = int(opts["--big"])
        def big(t):
            chunk = 1 << 20
            for i in range(mib):
                add_file(t, "big/blob-%04d" % i, os.urandom(chunk))
        push(tar_bytes(big), compress=False)
    if evil == "truncated":
        tb = tar_bytes(lambda t: add_file(t, "big-file", os.urandom(256 << 10)))
        gz = gzip.compress(tb, 1, mtime=0)
        cut = gz[: len(gz) // 2]
        push(tb, blob=cut)
    elif evil == "digest":
        tb = tar_bytes(lambda t: add_file(t, "tampered", b"original content\n"))
        gz = gzip.compress(tb, 1, mtime=0)
        d = sha(gz)
        bad = gzip.compress(tar_bytes(lambda t: add_file(t, "tampered", b"EVIL!!!! content\n")), 1, mtime=0)
        push(tb, blob=bad, digest=d)
        layers[-1] = (layers[-1][0], d, len(gz), layers[-1][3])
    elif evil:
        push(evil_layer(evil, opts.get("--outside", "/tmp")))

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [l[3] for l in layers]},
        "history": [],
    }
    cb = json.dumps(config).encode()
    cd = lay.blob(cb)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": len(cb)},
        "layers": [{"mediaType": m, "digest": d, "size": s} for (m, d, s, _) in layers],
    }
    mb = json.dumps(manifest).encode()
    md = lay.blob(mb)
    index_path = os.path.join(layout, "index.json")
    index = {"schemaVersion": 2, "manifests": []}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    index["manifests"] = [m for m in index["manifests"]
                          if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag]
    index["manifests"].append({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": md,
        "size": len(mb),
        "annotations": {"org.opencontainers.image.ref.name": tag},
    })
    with open(index_path, "w") as f:
        json.dump(index, f)
    print(md)


main()
