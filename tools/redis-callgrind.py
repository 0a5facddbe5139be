#!/usr/bin/env python3
"""redis-callgrind.py — counts the instructions Redis spends per fleet decision
(docs/fleet.md, "Where the time goes").

    tools/redis-callgrind.py [--batch N] [--keys K] [--runs R] [--form U|B] [--plans] [--step NS] [--fcall]
    tools/redis-callgrind.py --timed N [--runs R] [--fcall]

Starts redis-server under callgrind on a free loopback port, collecting inside
`evalShaCommand` only (the script's runs, with the command's own argument
handling and reply), loads the rate script of Sources/CSluiceFleet/fleet_script.c
(read from the C source, so the count is the working tree's), then sends R + 200
runs of a batch (N calls of cost 1 in server time, 10 per second, burst 10: in
the script's 'U' form, as the limiter sends such a batch, or its 'B' form, each
call's arguments apart; with --plans, under a plan of three quotas, 10 a second,
600 a minute and 36,000 an hour, in the 'V' or 'P' form) on keys drawn at
random among K, one run at a time, and
prints the instructions per decision. With --step NS the calls are in manual
time instead, from a Unix time on, NS ns apart, and their keys expire 10 minutes
after their state says (as the limiter's manual mode adds): a key's state stays
between its calls however slowly callgrind runs the server, as it does when
calls on a key come faster than its quota refills (the benchmark's "mixed"
case: 10,000 keys, --step 3000). The first 200 runs give the keys state;
all runs are counted, so use enough of them. A count does not depend on the
machine's speed: compare two versions of the script with it, not timings.
With --fcall, the script is loaded as the function library the limiter loads
on Redis 7 (FUNCTION LOAD) and run with FCALL, collecting inside `fcallCommand`.

With --timed N, the script is the debounce's (Sources/CSluiceFleet/timed_script.c,
sluice_fleet_timed.h), in manual time: R rounds (default 8, the first one not
counted) each make N keys wait (one run of N calls, debounce of 50 ms), call
them again 10 ms later (a run of N re-arming calls), then one claim at their
deadline delivers the N emissions and one run acknowledges them all; it
prints the instructions per call of both runs of calls, and per delivery of
the claim and of the acknowledgement (callgrind_control zeroes and dumps the
counts around each).

Needs redis-server and valgrind.
"""

import argparse
import ast
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIX_NS = 1795874631000000000  # the first call's time with --step (2026-11-28)


def literals(text):
    """The C string literals in `text`, joined."""
    return "".join(ast.literal_eval('"' + lit + '"') for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text))


def script_text(library=False, source="fleet_script.c"):
    """The Lua script of Sources/CSluiceFleet/`source` as EVAL runs it (its C
    string literals between redis-script.h's EVAL head and tail), or with
    `library` its body alone (what FUNCTION LOAD gets, without the library's
    first and last lines)."""
    src = open(os.path.join(ROOT, "Sources/CSluiceFleet", source)).read()
    pattern = r"static const char script\[\] = SLUICE__SCRIPT_EVAL_HEAD(.*?) SLUICE__SCRIPT_EVAL_TAIL;\n"
    body = literals(re.search(pattern, src, re.S).group(1))
    if library:
        return body
    hdr = open(os.path.join(ROOT, "Sources/CSluiceFleet/redis-script.h")).read()
    head = literals(re.search(r"#define SLUICE__SCRIPT_EVAL_HEAD (.*)\n", hdr).group(1))
    tail = literals(re.search(r"#define SLUICE__SCRIPT_EVAL_TAIL (.*)\n", hdr).group(1))
    return head + body + tail


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    """Reads one reply; returns it (nested lists, bytes, ints), raises on an error reply."""
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if kind == b":":
        return int(rest)
    if kind == b"+":
        return rest
    raise RuntimeError("redis: " + rest.decode(errors="replace"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32, help="calls per script run (default 32)")
    ap.add_argument("--keys", type=int, default=1000, help="keys drawn from (default 1000)")
    ap.add_argument("--runs", type=int, help="runs after the 200 that warm up (default 300); rounds with --timed (8)")
    ap.add_argument("--form", choices=("U", "B"), default="U", help="the script's batch form (default U)")
    ap.add_argument("--plans", action="store_true", help="three quotas ('V' form, or 'P' with --form B)")
    ap.add_argument("--fcall", action="store_true", help="as a function library (FUNCTION LOAD, FCALL)")
    ap.add_argument("--step", type=int, metavar="NS", help="manual time: NS ns from one call to the next")
    ap.add_argument("--timed", type=int, metavar="N", help="the debounce's claims and acknowledgements of N emissions")
    args = ap.parse_args()
    if args.timed:
        return timed(args)
    if args.runs is None:
        args.runs = 300
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        server, conn = start_server(port, out, args.fcall)
        try:
            f = conn.makefile("rb")
            call = load(conn, f, "fleet_script.c", args.fcall)
            cend = str((2**64 - 1) * 10)
            rnd = random.Random(1)
            extra = "600000" if args.step else "0"
            calls = 0
            for _ in range(200 + args.runs):
                keys = ["k:%d" % rnd.randrange(args.keys) for _ in range(args.batch)]
                shared = args.form == "U"
                times = [str(UNIX_NS + (calls + i) * args.step) if args.step else "" for i in range(args.batch)]
                calls += args.batch
                if args.plans:
                    argv = call + [args.batch] + keys + ["V" if shared else "P", extra, "1", "3"]
                    for name, limit, per in (("second", 10, 10**9), ("minute", 600, 60 * 10**9),
                                             ("hour", 36000, 3600 * 10**9)):
                        argv += [name, limit, per, limit * per, (2**64 - 1) * limit]
                    for t in times[:1] if shared else times:
                        argv += ["C", t, "1", "1"]
                else:
                    argv = call + [args.batch] + keys + [args.form, "10", "10000000000", extra, cend]
                    for t in times[:1] if shared else times:
                        argv += ["C", t, "1000000000"]
                conn.sendall(command(*argv))
                read_reply(f)
        finally:
            stop_server(server, conn)
        total = None
        with open(out) as cg:
            for line in cg:
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
                    break
    decisions = (200 + args.runs) * args.batch
    form = ("V" if args.form == "U" else "P") if args.plans else args.form
    print("%d instructions per decision (form %s, batch %d, %d keys, %d runs%s%s)" %
          (total // decisions, form, args.batch, args.keys, 200 + args.runs,
           ", manual time, %d ns apart" % args.step if args.step else "", ", FCALL" if args.fcall else ""))


def load(conn, f, source, fcall):
    """Loads the script of `source` (SCRIPT LOAD, and with `fcall` FUNCTION LOAD of
    its library as the limiter loads it: sluice__script_init, redis-script.c);
    returns the head of a run's command."""
    conn.sendall(command("SCRIPT", "LOAD", script_text(source=source)))
    sha = read_reply(f)
    if not fcall:
        return ["EVALSHA", sha]
    name = "sluice_" + sha.decode()[:16]
    lib = ("#!lua name=%s\n%sredis.register_function{function_name = '%s', callback = run, "
           "flags = {'allow-cross-slot-keys'}}\n" % (name, script_text(True, source), name))
    conn.sendall(command("FUNCTION", "LOAD", lib))
    read_reply(f)
    return ["FCALL", name]


def start_server(port, out, fcall):
    """redis-server under callgrind, counting inside one command; returns it and a connection."""
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--toggle-collect=" + ("fcallCommand" if fcall else "evalShaCommand"),
         "--callgrind-out-file=" + out,
         "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            return server, socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.1)
    server.kill()
    sys.exit("redis-server under valgrind did not start")


def stop_server(server, conn):
    """Shuts the server down (callgrind writes its counts as it exits); kills it if it does not stop."""
    try:
        conn.sendall(command("SHUTDOWN", "NOSAVE"))
        conn.close()
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()


def timed(args):
    """--timed N: the instructions per delivery of a claim of N emissions and of their acknowledgements."""
    n, rounds = args.timed, args.runs or 8
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server, conn = start_server(port, os.path.join(tmp, "cg.out"), args.fcall)
        try:
            f = conn.makefile("rb")
            call = load(conn, f, "timed_script.c", args.fcall)
            part = "{0:cg:t0}"
            head = ["D 50000000 0 1 -", "30000000000", "86400000"]  # policy, lease (ns), retention (ms)

            def run(label, keys, op, now, *rest):
                if label:
                    subprocess.run(["callgrind_control", "-z", str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                conn.sendall(command(*(call + [len(keys)] + keys + [op, now] + head + list(rest))))
                reply = read_reply(f)
                if label:
                    subprocess.run(["callgrind_control", "-d", label, str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                return reply

            t0 = 1700000000 * 10**9
            # 1,000 keys that wait for days: the due index holds as many keys as a busy
            # partition does (a sorted set that small would be a listpack, scanned per key)
            far = []
            for i in range(1000):
                far += ["far:%d" % i, "v"]
            run(None, [part, part + ":s"], "B", t0 + 10**15, 1000, *far)
            for r in range(rounds):
                t = t0 + r * 10**9
                pairs = []
                for i in range(n):
                    pairs += ["k:%d:%d" % (r, i), "v%d" % i]
                run("calls" if r else None, [part, part + ":s"], "B", t, n, *pairs)
                run("rearm" if r else None, [part, part + ":s"], "B", t + 10**7, n, *pairs)
                got = run("claim" if r else None, [part], "W", t + 70 * 10**6, n)
                acks = []
                for i in range(3, len(got), 5):
                    acks += [got[i], got[i + 1]]
                if len(acks) != 2 * n:
                    sys.exit("the claim delivered %d of %d" % (len(acks) // 2, n))
                run("ack" if r else None, [part], "K", "0", n, *acks)
        finally:
            stop_server(server, conn)
        totals = {"calls": 0, "rearm": 0, "claim": 0, "ack": 0}
        for name in os.listdir(tmp):
            text = open(os.path.join(tmp, name)).read()
            label = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
            total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if label and total and label.group(1) in totals:
                totals[label.group(1)] += int(total.group(1))
    per = n * (rounds - 1)
    print("instructions, runs of %d (%d rounds counted%s): per call %d on a new key, %d re-arming a key; "
          "per delivery %d in a claim, %d in its acknowledgement" %
          (n, rounds - 1, ", FCALL" if args.fcall else "", totals["calls"] // per, totals["rearm"] // per,
           totals["claim"] // per, totals["ack"] // per))


if __name__ == "__main__":
    main()
