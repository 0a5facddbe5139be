#!/usr/bin/env python3
"""clients.py — raw-socket HTTP clients for test_http_server.sh (loopback only).

Each mode drives the example server the way a misbehaving or demanding
client would, checks what it can on the client side, prints one line
starting with "ok" and exits 0, or prints "FAIL ..." and exits 1.

  clients.py pipeline-close PORT ROUNDS N DOC
      ROUNDS times: one connection, N pipelined POST /docs/DOC/changed sent
      at once, then closed without reading a reply (every fourth time with
      a reset).
  clients.py burst PORT CONNS N DOC OUT
      CONNS connections at once, each pipelining N changes of DOC and reading
      every reply; writes the seq of every 202 to OUT, one per line.
  clients.py check-counts LOG DOC SEQS
      every "changed doc=DOC" line of LOG: coalesced == the number of this
      client's seqs in (previous line's last, last], first == the lowest of
      them; and the lines add up to all the seqs.
  clients.py raw PORT HEX...
      sends the given requests (hex, may hold NUL bytes) on one connection,
      prints the status code of each reply that came back, one per line.
  clients.py idle PORT MIN MAX
      connects, sends nothing: the server must close within [MIN, MAX] s.
  clients.py slowloris PORT EVERY MIN MAX
      sends a request head one byte every EVERY s (never finishing it): the
      server must close within [MIN, MAX] s.
  clients.py flood PORT header|body
      streams a 48 MB header line, or a 300 MB body (Content-Length given):
      the server must answer 4xx or close within 2 s, long before the end.
  clients.py hold PORT N SECONDS
      opens N connections (as many as the server accepts) and holds them
      SECONDS, then closes them all; prints how many connected.
"""
import socket
import sys
import threading
import time


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def change(doc):
    return ("POST /docs/%s/changed HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n" % doc).encode()


def read_replies(sock, count):
    """Reads `count` replies (each with a Content-Length body); returns [(code, body)]."""
    buf = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        code = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            rest += chunk
        out.append((code, rest[:length]))
        buf = rest[length:]
    return out


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def pipeline_close(port, rounds, n, doc):
    import struct
    for _ in range(int(rounds)):
        s = connect(port)
        s.sendall(change(doc) * int(n))
        # close at once without reading: the kernel answers the server's
        # first reply with a reset, its next write fails with EPIPE
        # (SIGPIPE unless ignored); every fourth round resets at once
        if _ % 4 == 3:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    print("ok sent %d x %d pipelined changes, closed without reading" % (int(rounds), int(n)))


def burst(port, conns, n, doc, out):
    seqs = []
    errors = []
    lock = threading.Lock()

    def one():
        try:
            s = connect(port, timeout=30)
            s.sendall(change(doc) * int(n))
            replies = read_replies(s, int(n))
            s.close()
            got = []
            for code, body in replies:
                if code != 202:
                    errors.append("status %d" % code)
                    continue
                fields = dict(f.split("=", 1) for f in body.decode().split()[1:])
                got.append(int(fields["seq"]))
            if len(replies) != int(n):
                errors.append("only %d of %d replies" % (len(replies), int(n)))
            with lock:
                seqs.extend(got)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(int(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("burst: " + "; ".join(errors[:5]))
    with open(out, "w") as f:
        for s in sorted(seqs):
            f.write("%d\n" % s)
    print("ok %d changes accepted" % len(seqs))


def check_counts(log, doc, seqfile):
    seqs = sorted(int(x) for x in open(seqfile).read().split())
    lines = []
    for line in open(log):
        f = line.split()
        if len(f) < 2 or f[0] != "changed" or f[1] != "doc=" + doc:
            continue
        kv = dict(x.split("=", 1) for x in f[1:])
        lines.append((int(kv["last"]), int(kv["coalesced"]), int(kv.get("first", 0))))
    lines.sort()
    prev = 0
    total = 0
    import bisect
    for last, count, first in lines:
        lo = bisect.bisect_right(seqs, prev)
        hi = bisect.bisect_right(seqs, last)
        mine = seqs[lo:hi]
        if count != len(mine):
            fail("line last=%d says coalesced=%d, but %d changes fall in (%d, %d]" % (last, count, len(mine), prev, last))
        if first and mine and first != mine[0]:
            fail("line last=%d says first=%d, the burst starts at %d" % (last, first, mine[0]))
        total += count
        prev = last
    if total != len(seqs):
        fail("lines add up to %d changes, %d were accepted" % (total, len(seqs)))
    print("ok %d notification lines, each count exact, %d changes in all" % (len(lines), total))


def raw(port, *hexes):
    s = connect(port)
    s.sendall(b"".join(bytes.fromhex(h) for h in hexes))
    for code, _ in read_replies(s, len(hexes)):
        print(code)
    s.close()


def wait_closed(s, limit):
    """Seconds until the peer closes (recv returns b'' or an error), or None after `limit`."""
    t0 = time.monotonic()
    s.settimeout(0.05)
    while time.monotonic() - t0 < limit:
        try:
            if s.recv(65536) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def idle(port, lo, hi):
    s = connect(port)
    t = wait_closed(s, float(hi) + 1)
    if t is None or t < float(lo) or t > float(hi):
        fail("idle connection closed after %s s, want %s..%s" % (t, lo, hi))
    print("ok idle connection closed after %.2f s" % t)


def slowloris(port, every, lo, hi):
    s = connect(port)
    head = b"GET /api/slow HTTP/1.1\r\nHost: t\r\nX-Filler: " + b"a" * 10000
    t0 = time.monotonic()
    i = 0
    closed = None
    while time.monotonic() - t0 < float(hi) + 1:
        try:
            s.send(head[i:i + 1])
            i += 1
        except OSError:
            closed = time.monotonic() - t0
            break
        t = wait_closed(s, float(every))
        if t is not None:
            closed = time.monotonic() - t0
            break
    if closed is None or closed < float(lo) or closed > float(hi):
        fail("slow client (a byte every %s s) closed after %s s, want %s..%s" % (every, closed, lo, hi))
    print("ok slow client (%d bytes sent, a byte every %s s) closed after %.2f s" % (i, every, closed))


def flood(port, kind):
    s = connect(port)
    if kind == "header":
        total = 48 << 20
        s.sendall(b"GET /api/flood HTTP/1.1\r\nHost: t\r\nX-Filler: ")
    else:
        total = 300 << 20
        s.sendall(b"POST /api/upload HTTP/1.1\r\nHost: t\r\nX-API-Key: flood\r\nContent-Length: %d\r\n\r\n" % total)
    s.setblocking(False)
    t0 = time.monotonic()
    sent = 0
    chunk = b"a" * 65536
    reply = b""
    while sent < total and time.monotonic() - t0 < 2:
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            break
        try:
            got = s.recv(4096)
            if not got:
                break
            reply += got
        except BlockingIOError:
            pass
        except OSError:
            break
    t = time.monotonic() - t0
    s.setblocking(True)
    s.settimeout(1)
    try:
        reply += s.recv(4096)
    except OSError:
        pass
    code = reply.split(b" ")[1].decode() if reply.startswith(b"HTTP/") else "none"
    if sent >= total or t >= 2 or not (code.startswith("4") or code == "none"):
        fail("a %s flood: %d of %d bytes taken in %.2f s, answer %s" % (kind, sent, total, t, code))
    print("ok a %s flood: stopped after %.1f MB, %.2f s, answer %s" % (kind, sent / 1e6, t, code))


def hold(port, n, seconds):
    socks = []
    for _ in range(int(n)):
        try:
            socks.append(connect(port, timeout=1))
        except OSError:
            break
    time.sleep(float(seconds))
    for s in socks:
        s.close()
    print("ok held %d connections for %s s" % (len(socks), seconds))


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {
        "pipeline-close": pipeline_close,
        "burst": burst,
        "check-counts": check_counts,
        "raw": raw,
        "idle": idle,
        "slowloris": slowloris,
        "flood": flood,
        "hold": hold,
    }[mode](*args)
