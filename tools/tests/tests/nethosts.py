#!/usr/bin/python3
"""Test hosts for tools/tests/tests/network.rs, run as root inside the test's own
network namespaces (which have no uplink): the remote one, whose `lo` holds
every test host's address, and (with `--tcp-only`) the test "host" itself.

- TCP on every address, ports 8080 and 8081: answers "SERVED-OK <local
  address>".
- UDP DNS on every address, port 53 (not with `--tcp-only`): names under
  `lazaret.test.` answer A 198.51.100.1 (but for the few the allow_hosts
  tests need: a short TTL, a private address, `*.pkg.lazaret.test`
  198.51.100.3, a CNAME out of lazaret.test, and names whose address is
  the test host's own or its resolver's); anything else NXDOMAIN. Every
  name asked is appended to `queries.log` beside the script.

Prints "ready" once all listen; serves until stdin closes.
"""
import socket
import struct
import sys
import threading

PORT = 8080

# Every name asked, one per line, beside this script: the tests check
# what reached the upstream resolver.
QUERIES = None if "--tcp-only" in sys.argv[1:] else open(__file__.rsplit("/", 1)[0] + "/queries.log", "a")


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
        # The test host's own interface address, one it gains while the
        # Domain runs, and the resolver's address.
        "hostaddr.lazaret.test": (60, [203, 0, 113, 1]),
        "added.lazaret.test": (60, [203, 0, 113, 78]),
        "resolver.lazaret.test": (60, [198, 51, 100, 53]),
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


IP_PKTINFO = 8  # Linux; not in Python's socket module


def dns_server():
    # Answers from the address asked (IP_PKTINFO): the test hosts share
    # one link, whose own address would otherwise be the source, and a
    # resolver must answer from the address it was asked on.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    s.bind(("0.0.0.0", 53))
    while True:
        q, anc, _, peer = s.recvmsg(1500, socket.CMSG_SPACE(12))
        local = b"\0" * 4
        for level, kind, data in anc:
            if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(data) >= 12:
                local = struct.unpack("I4s4s", data[:12])[2]
        try:
            a = dns_answer(q)
        except Exception:
            a = None
        if a:
            info = struct.pack("I4s4s", 0, local, b"\0" * 4)
            s.sendmsg([a], [(socket.IPPROTO_IP, IP_PKTINFO, info)], 0, peer)


servers = [tcp_server, lambda: tcp_server(8081)]
if "--tcp-only" not in sys.argv[1:]:
    servers.append(dns_server)
for f in servers:
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
