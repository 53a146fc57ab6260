#!/usr/bin/python3
"""Test hosts for tests/tests/network.rs, run as root inside the test's own
network namespace (which has no uplink; every address is on its `lo`).

- TCP on every address, ports 8080 and 8081: answers "SERVED-OK <local
  address>".
- UDP DNS on every address, port 53: names under `lazaret.test.` answer
  A 198.51.100.1 (but for the few network_hosts.rs needs: a short TTL, a
  private address, `*.pkg.lazaret.test` 198.51.100.3, and a CNAME out of
  lazaret.test); anything else NXDOMAIN. Every name asked is appended to
  `queries.log` beside the script.

Prints "ready" once both listen; serves until stdin closes.
"""
import socket
import struct
import sys
import threading

PORT = 8080

# Every name asked, one per line, beside this script: the tests check
# what reached the upstream resolver.
QUERIES = open(__file__.rsplit("/", 1)[0] + "/queries.log", "a")


def tcp_server(port=PORT):
    try:
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("::", port))
    except OSError:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
    srv.listen(64)
    while True:
        c, _ = srv.accept()
        try:
            local = c.getsockname()[0].replace("::ffff:", "")
            c.sendall(("SERVED-OK %s\n" % local).encode())
        except OSError:
            pass
        c.close()


def dns_answer(q):
    if len(q) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", q[:6])
    if qd != 1:
        return None
    # The question: labels up to the zero byte, then type and class.
    i, labels = 12, []
    while i < len(q) and q[i] != 0:
        n = q[i]
        labels.append(q[i + 1 : i + 1 + n].decode("ascii", "replace").lower())
        i += 1 + n
    end = i + 5
    question = q[12:end]
    qtype = struct.unpack("!H", q[i + 1 : i + 3])[0] if end <= len(q) else 0
    name = ".".join(labels)
    rd = flags & 0x0100
    QUERIES.write(name + "\n")
    QUERIES.flush()
    header = lambda n: struct.pack("!HHHHHH", qid, 0x8180 | rd, 1, n, 0, 0)
    a_rec = lambda ptr, ttl, ip: ptr + struct.pack("!HHIH", 1, 1, ttl, 4) + bytes(ip)
    special = {
        # Allowed names of network_hosts.rs: a short TTL, a private
        # address, a port-limited registry.
        "short.lazaret.test": (1, [198, 51, 100, 2]),
        "private.lazaret.test": (60, [10, 99, 0, 1]),
    }
    if qtype == 1 and name in special:
        ttl, ip = special[name]
        return header(1) + question + a_rec(b"\xc0\x0c", ttl, ip)
    if qtype == 1 and name.endswith(".pkg.lazaret.test"):
        return header(1) + question + a_rec(b"\xc0\x0c", 60, [198, 51, 100, 3])
    if qtype == 1 and name == "alias.lazaret.test":
        # A CNAME to a name outside lazaret.test, then its address.
        target = b"\x06target\x09elsewhere\x04test\x00"
        cname = b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 60, len(target)) + target
        ptr = struct.pack("!H", 0xC000 | (len(question) + 12 + 12))
        return header(2) + question + cname + a_rec(ptr, 60, [198, 51, 100, 1])
    if name == "lazaret.test" or name.endswith(".lazaret.test"):
        if qtype == 1:
            answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes([198, 51, 100, 1])
            return struct.pack("!HHHHHH", qid, 0x8180 | rd, 1, 1, 0, 0) + question + answer
        return struct.pack("!HHHHHH", qid, 0x8180 | rd, 1, 0, 0, 0) + question
    # NXDOMAIN
    return struct.pack("!HHHHHH", qid, 0x8183 | rd, 1, 0, 0, 0) + question


def dns_server():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 53))
    while True:
        q, peer = s.recvfrom(1500)
        try:
            a = dns_answer(q)
        except Exception:
            a = None
        if a:
            s.sendto(a, peer)


for f in (tcp_server, dns_server, lambda: tcp_server(8081)):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
