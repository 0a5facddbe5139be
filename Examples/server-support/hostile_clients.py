#!/usr/bin/env python3
"""Hostile clients against an example server (Examples/*/test.sh runs this).

Each check opens its connections at once (in threads), then measures when the server
closes each one, and asserts "closed no earlier than the timeout, and no later than the
timeout plus a generous bound" (the bound absorbs a loaded machine; it is never a fixed
window around an exact time). Each time is measured from before what starts the server's
timer (the connect, the request, the first byte), so "never early" holds however late
this process runs. Every wait is bounded.

  idle        connections that send nothing, and keep-alive connections idle after one
              request: closed by the idle timeout (after the connect / the response).
  slowloris   a request head sent 1 byte per second: closed by the header timeout
              (from its first byte); the idle timeout must be longer than the window.
  slow-body   a complete head, then its body at 1 byte per second: closed (or answered,
              e.g. 503) by the request timeout, after the head.
  flood       many connections at once beyond --max-connections: the ones beyond are
              closed promptly (within the bound, shorter than the idle timeout), the open
              count settles at the cap (± a slack of 2), and one more is closed at once.

usage: hostile_clients.py --port P [--host H] [--bound S] CHECK...
  --idle N:SECONDS  --slowloris N:SECONDS  --slow-body N:SECONDS  --flood N:CAP
Exit status 0 when every check passes; one line per check on stdout.
"""
import argparse
import select
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
PORT = 0
BOUND = 4.0  # seconds of slack above a timeout, for a loaded machine
SLACK = 2  # connections above the cap tolerated while the server closes the extra ones


def connect():
    s = socket.create_connection((HOST, PORT), timeout=5)
    s.setblocking(False)
    return s


def closed_or_answered(s, until):
    """Waits until the server closes s (EOF or reset) or sends bytes; returns that time,
    or None at `until`."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return None
        readable, _, _ = select.select([s], [], [], min(left, 0.5))
        if readable:
            try:
                s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            return time.monotonic()


def wait_closed(s, until):
    """Waits until the server closes s (EOF or reset), reading any answer before it;
    returns that time, or None at `until`."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return None
        readable, _, _ = select.select([s], [], [], min(left, 0.5))
        if readable:
            try:
                if s.recv(65536):
                    continue
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            return time.monotonic()


def trickle(s, data, stop):
    """Sends data one byte per second until stop is set or the socket fails."""
    for i in range(len(data)):
        if stop.is_set():
            return
        try:
            s.send(data[i:i + 1])
        except OSError:
            return
        stop.wait(1.0)


def run_threads(count, body):
    results = [None] * count
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, body(i))) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def window_check(name, timeout, elapsed):
    """Every elapsed time in [timeout - 0.05, timeout + BOUND]."""
    early = [e for e in elapsed if e is not None and e < timeout - 0.05]
    late = [e for e in elapsed if e is None or e > timeout + BOUND]
    ok = not early and not late
    shown = sorted(round(e, 2) for e in elapsed if e is not None)
    print(f"{'ok' if ok else 'FAIL'}: {name}: {len(elapsed)} connections, expected closed in "
          f"[{timeout}, {timeout + BOUND}] s: {len(early)} early, {len(late)} late or never; "
          f"closed after {shown[:3]}..{shown[-3:]} s")
    return ok


def idle(count, timeout):
    # Each start is taken before what starts the server's timer (connect, the request),
    # so that "no earlier than" holds however late this process runs.
    def silent(_):
        start = time.monotonic()
        s = connect()
        end = wait_closed(s, start + timeout + BOUND + 1)
        s.close()
        return None if end is None else end - start

    def after_request(_):
        s = connect()
        s.setblocking(True)
        s.settimeout(5)
        start = time.monotonic()  # the server's idle timer starts at the end of its answer
        s.sendall(f"GET /docs/none HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:  # a 404 with a short body: the head is enough
            chunk = s.recv(65536)
            if not chunk:
                return 0.0  # closed at once: not a keep-alive connection
            answer += chunk
        s.setblocking(False)
        end = wait_closed(s, start + timeout + BOUND + 1)
        s.close()
        return None if end is None else end - start

    half = count // 2
    ok = window_check("idle (nothing sent)", timeout, run_threads(half, silent))
    return window_check("idle (after one keep-alive request)", timeout, run_threads(count - half, after_request)) and ok


def slowloris(count, timeout):
    head = f"GET / HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: {'a' * 200}\r\n\r\n".encode()

    def client(_):
        s = connect()
        stop = threading.Event()
        start = time.monotonic()  # before the first byte
        sender = threading.Thread(target=trickle, args=(s, head, stop))
        sender.start()
        end = wait_closed(s, start + timeout + BOUND + 1)
        stop.set()
        sender.join()
        s.close()
        return None if end is None else end - start

    return window_check("slowloris (1 byte/s head)", timeout, run_threads(count, client))


def slow_body(count, timeout):
    def client(i):
        s = connect()
        start = time.monotonic()  # before the head: the server's timer starts when it has read it
        s.sendall(f"PUT /docs/slow{i} HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 1000\r\n\r\n".encode())
        stop = threading.Event()
        sender = threading.Thread(target=trickle, args=(s, b"x" * 1000, stop))
        sender.start()
        end = closed_or_answered(s, start + timeout + BOUND + 1)
        stop.set()
        sender.join()
        s.close()
        return None if end is None else end - start

    return window_check("slow body (1 byte/s), closed or answered", timeout, run_threads(count, client))


def flood(count, cap):
    sockets = []
    try:
        for _ in range(count):
            sockets.append(connect())
        refused = 0
        # Settled within the bound: the timed checks use an idle timeout longer than it, so
        # a server without a cap cannot pass by closing idle connections.
        deadline = time.monotonic() + BOUND
        while True:
            still_open = []
            for s in sockets:
                try:
                    readable, _, _ = select.select([s], [], [], 0)
                    if readable and not s.recv(1):
                        raise ConnectionResetError
                    still_open.append(s)
                except OSError:
                    s.close()
                    refused += 1
            sockets = still_open
            if len(sockets) <= cap + SLACK or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        settled = len(sockets)
        # One more beyond the cap: closed promptly.
        extra = connect()
        start = time.monotonic()
        end = wait_closed(extra, start + BOUND)
        extra.close()
        ok = cap - SLACK <= settled <= cap + SLACK and end is not None
        print(f"{'ok' if ok else 'FAIL'}: flood: {count} connections, cap {cap}: {settled} open after "
              f"at most {BOUND} s (expected {cap} ± {SLACK}), {refused} closed by the server; one more closed after "
              f"{'never' if end is None else round(end - start, 2)} s (at most {BOUND})")
        return ok
    finally:
        for s in sockets:
            s.close()


def main():
    global HOST, PORT, BOUND
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bound", type=float, default=BOUND)
    parser.add_argument("--idle")
    parser.add_argument("--slowloris")
    parser.add_argument("--slow-body")
    parser.add_argument("--flood")
    args = parser.parse_args()
    HOST, PORT, BOUND = args.host, args.port, args.bound

    def pair(text, kind):
        n, value = text.split(":")
        return int(n), kind(value)

    # The timed checks run at once (their connections stay below any cap of the flood's);
    # the flood runs alone after them.
    results = []
    timed = []
    if args.idle:
        timed.append(threading.Thread(target=lambda: results.append(idle(*pair(args.idle, float)))))
    if args.slowloris:
        timed.append(threading.Thread(target=lambda: results.append(slowloris(*pair(args.slowloris, float)))))
    if args.slow_body:
        timed.append(threading.Thread(target=lambda: results.append(slow_body(*pair(args.slow_body, float)))))
    for t in timed:
        t.start()
    for t in timed:
        t.join()
    if args.flood:
        results.append(flood(*pair(args.flood, int)))
    sys.exit(0 if results and all(results) else 1)


if __name__ == "__main__":
    main()
