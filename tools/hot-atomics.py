#!/usr/bin/env python3
"""hot-atomics.py — counts the atomic operations and runtime calls in functions
of a binary's x86-64 disassembly (docs/benchmarks.md, "Atomic operations per
call").

    tools/hot-atomics.py [--depth N] BINARY REGEX...
    tools/hot-atomics.py --callgrind [--calls N] BINARY PATH...

For every function whose demangled name matches a REGEX (Python syntax,
searched), prints per function:

  lock    instructions with a lock prefix (lock cmpxchg, lock xadd, lock inc...)
  xchg    xchg with a memory operand (atomic without a prefix)
  retain  calls or tail calls to swift_retain, swift_bridgeObjectRetain,
          swift_unknownObjectRetain (atomic increments in the runtime)
  release the same for the releases
  access  calls to swift_beginAccess (an exclusivity check: not atomic, but
          a call per access)
  mutex   calls to pthread_mutex_*, os_unfair_lock_*, pthread_cond_*

then, indented, the same for each function it calls directly in the binary
(not through the PLT), to DEPTH levels (default 2). The counts are static:
a function's every path is counted, so read which callees run per call (the
hot path) and which only on a slow path (a held lock, events, an error).

With --callgrind, BINARY is Benchmarks' sluice-bench and each PATH one of
its `hotpaths` (submit-manual, submit-loop, submit-loop-drop,
submit-batch, check-loop, check-manual): runs it under callgrind (--collect-bus=yes: every atomic
instruction executed is a global bus event), collecting inside the probe
functions of Benchmarks/Sources/BenchSuite/HotPaths.swift only, and prints
per call: instructions, atomic instructions (whoever runs them: Swift, the
runtime's retain and release, the C core), and calls to the runtime
functions above. A batch's call is one item of 32. Valgrind 3.19 cannot read
the DWARF 5 of Swift 6: the binary is run from a copy without debug
information.

Needs objdump and objcopy (binutils), swift-demangle (the Swift toolchain),
and valgrind for --callgrind.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

RUNTIME = {
    "retain": ("swift_retain", "swift_bridgeObjectRetain", "swift_unknownObjectRetain", "swift_nonatomic_retain"),
    "release": ("swift_release", "swift_bridgeObjectRelease", "swift_unknownObjectRelease"),
    "access": ("swift_beginAccess",),
    "mutex": ("pthread_mutex_", "os_unfair_lock", "pthread_cond_"),
}
COLUMNS = ("lock", "xchg", "retain", "release", "access", "mutex")


def symbols(binary):
    """Mangled name -> demangled name, for the functions defined in the binary."""
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    names = [line.split()[2] for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] in "tT"]
    demangled = subprocess.run(
        ["swift-demangle", "--simplified"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return dict(zip(names, demangled))


def disassemble(binary, name):
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "--disassemble=" + name, binary],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if re.match(r"^\s+[0-9a-f]+:\t", line)]


CALL = re.compile(r"\t(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)(@plt)?(\+0x[0-9a-f]+)?>")


def count(lines, defined):
    counts = dict.fromkeys(COLUMNS, 0)
    callees = []
    for line in lines:
        insn = line.split("\t", 1)[1].strip()
        if insn.startswith("lock"):
            counts["lock"] += 1
        if insn.startswith("xchg") and "(" in insn:
            counts["xchg"] += 1
        m = CALL.search(line)
        if not m:
            continue
        target, plt, offset = m.group(1), m.group(2), m.group(3)
        for column, prefixes in RUNTIME.items():
            if any(target.startswith(p) for p in prefixes):
                counts[column] += 1
        if not plt and not offset and target in defined and target not in callees:
            callees.append(target)
    return counts, callees


PROBES = {"submit": "*HotPathsO6submit_*", "check": "*HotPathsO5check*", "submit-batch": "*HotPathsO11submitBatch*"}


def callgrind(binary, path, calls):
    """Per call: instructions, atomic instructions, calls to each runtime function of RUNTIME."""
    probe = PROBES["submit-batch"] if path == "submit-batch" else PROBES[path.split("-")[0]]
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "sluice-bench")
        subprocess.run(["objcopy", "--strip-debug", binary, copy], check=True)
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-bus=yes", "--callgrind-out-file=" + out,
             "--toggle-collect=" + probe, copy, "hotpaths", path, "--calls", str(calls)],
            check=True, capture_output=True)
        names, called = {}, collections.Counter()
        totals = None
        callee = None
        with open(out) as f:
            for line in f:
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    if line.startswith("cfn="):
                        callee = names.get(m.group(1))
                    continue
                m = re.match(r"calls=(\d+)", line)
                if m and callee:
                    called[callee] += int(m.group(1))
                # (callgrind leaves out trailing zero counts: no atomic instruction)
                m = re.match(r"(?:summary|totals): (\d+)(?: (\d+))?", line)
                if m:
                    totals = (int(m.group(1)), int(m.group(2) or 0))
    runtime = dict.fromkeys(COLUMNS[2:], 0)
    for name, n in called.items():
        for column, prefixes in RUNTIME.items():
            if any(name.startswith(p) for p in prefixes):
                runtime[column] += n
    return totals[0] / calls, totals[1] / calls, {c: n / calls for c, n in runtime.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=2, help="levels of direct callees to show (default 2)")
    parser.add_argument("--callgrind", action="store_true", help="run hotpaths under callgrind (see above)")
    parser.add_argument("--calls", type=int, default=64000, help="calls per path with --callgrind")
    parser.add_argument("binary")
    parser.add_argument("regex", nargs="+")
    args = parser.parse_args()
    if args.callgrind:
        print("%-14s %9s %8s %7s %8s %7s %6s" % ("path", "Ir/call", "atomics", "retain", "release", "access", "mutex"))
        for path in args.regex:
            ir, atomics, runtime = callgrind(args.binary, path, args.calls)
            print("%-14s %9.1f %8.2f %7.2f %8.2f %7.2f %6.2f" % (path, ir, atomics, *runtime.values()))
        return
    names = symbols(args.binary)
    print("%-6s %-6s %-6s %-7s %-6s %-6s  function" % COLUMNS)

    def show(name, level, seen):
        counts, callees = count(disassemble(args.binary, name), names)
        label = names.get(name, name)
        if len(label) > 160:
            label = label[:157] + "..."
        print("%-6d %-6d %-6d %-7d %-6d %-6d  %s%s" % (*(counts[c] for c in COLUMNS), "  " * level, label))
        if level < args.depth:
            for callee in callees:
                if callee not in seen:
                    show(callee, level + 1, seen | {callee})

    found = False
    for regex in args.regex:
        pattern = re.compile(regex)
        for name, demangled in names.items():
            if pattern.search(demangled):
                found = True
                show(name, 0, {name})
    if not found:
        sys.exit("hot-atomics.py: no function matches")


if __name__ == "__main__":
    main()
