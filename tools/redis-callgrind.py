#!/usr/bin/env python3
"""redis-callgrind.py — counts the instructions Redis spends per fleet decision
(docs/fleet.md, "Where the time goes").

    tools/redis-callgrind.py [--batch N] [--keys K] [--runs R] [--form U|B] [--plans] [--fcall]

Starts redis-server under callgrind on a free loopback port, collecting inside
`evalShaCommand` only (the script's runs, with the command's own argument
handling and reply), loads the rate script of Sources/CSluiceFleet/fleet_script.c
(read from the C source, so the count is the working tree's), then sends R + 200
runs of a batch (N calls of cost 1 in server time, 10 per second, burst 10: in
the script's 'U' form, as the limiter sends such a batch, or its 'B' form, each
call's arguments apart; with --plans, under a plan of three quotas, 10 a second,
600 a minute and 36,000 an hour, in the 'V' or 'P' form) on keys drawn at
random among K, one run at a time, and
prints the instructions per decision. The first 200 runs give the keys state;
all runs are counted, so use enough of them. A count does not depend on the
machine's speed: compare two versions of the script with it, not timings.
With --fcall, the script is loaded as the function library the limiter loads
on Redis 7 (FUNCTION LOAD) and run with FCALL, collecting inside `fcallCommand`.

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


def literals(text):
    """The C string literals in `text`, joined."""
    return "".join(ast.literal_eval('"' + lit + '"') for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text))


def script_text(library=False):
    """The Lua script as EVAL runs it (its C string literals between
    redis-script.h's EVAL head and tail), or with `library` its body alone
    (what FUNCTION LOAD gets, without the library's first and last lines)."""
    src = open(os.path.join(ROOT, "Sources/CSluiceFleet/fleet_script.c")).read()
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
    ap.add_argument("--runs", type=int, default=300, help="runs after the 200 that warm up (default 300)")
    ap.add_argument("--form", choices=("U", "B"), default="U", help="the script's batch form (default U)")
    ap.add_argument("--plans", action="store_true", help="three quotas ('V' form, or 'P' with --form B)")
    ap.add_argument("--fcall", action="store_true", help="as a function library (FUNCTION LOAD, FCALL)")
    args = ap.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--toggle-collect=" + ("fcallCommand" if args.fcall else "evalShaCommand"),
             "--callgrind-out-file=" + out,
             "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn = None
            for _ in range(300):
                try:
                    conn = socket.create_connection(("127.0.0.1", port))
                    break
                except OSError:
                    time.sleep(0.1)
            if conn is None:
                sys.exit("redis-server under valgrind did not start")
            f = conn.makefile("rb")
            conn.sendall(command("SCRIPT", "LOAD", script_text()))
            sha = read_reply(f)
            call = ["EVALSHA", sha]
            if args.fcall:
                # the library as the limiter loads it (sluice__script_init, redis-script.c)
                name = "sluice_" + sha.decode()[:16]
                lib = ("#!lua name=%s\n%sredis.register_function{function_name = '%s', callback = run, "
                       "flags = {'allow-cross-slot-keys'}}\n" % (name, script_text(True), name))
                conn.sendall(command("FUNCTION", "LOAD", lib))
                read_reply(f)
                call = ["FCALL", name]
            cend = str((2**64 - 1) * 10)
            rnd = random.Random(1)
            for _ in range(200 + args.runs):
                keys = ["k:%d" % rnd.randrange(args.keys) for _ in range(args.batch)]
                shared = args.form == "U"
                if args.plans:
                    argv = call + [args.batch] + keys + ["V" if shared else "P", "0", "1", "3"]
                    for name, limit, per in (("second", 10, 10**9), ("minute", 600, 60 * 10**9),
                                             ("hour", 36000, 3600 * 10**9)):
                        argv += [name, limit, per, limit * per, (2**64 - 1) * limit]
                    for _ in keys[:1] if shared else keys:
                        argv += ["C", "", "1", "1"]
                else:
                    argv = call + [args.batch] + keys + [args.form, "10", "10000000000", "0", cend]
                    for _ in keys[:1] if shared else keys:
                        argv += ["C", "", "1000000000"]
                conn.sendall(command(*argv))
                read_reply(f)
            conn.sendall(command("SHUTDOWN", "NOSAVE"))
            conn.close()
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
        total = None
        with open(out) as cg:
            for line in cg:
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
                    break
    decisions = (200 + args.runs) * args.batch
    form = ("V" if args.form == "U" else "P") if args.plans else args.form
    print("%d instructions per decision (form %s, batch %d, %d keys, %d runs%s)" %
          (total // decisions, form, args.batch, args.keys, 200 + args.runs, ", FCALL" if args.fcall else ""))


if __name__ == "__main__":
    main()
