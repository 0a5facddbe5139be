#!/usr/bin/env python3
"""soak_check.py — the checker of the soak (soak.sh).

  soak_check.py DIR LIMIT PER_MS BURST

DIR holds the notification log (notify.log), the server's stderr
(server.stderr), and what the wrk scripts recorded: quota-<key>.txt (the
server time, in ns, of every admitted call of that client) and
changes-<n>.txt (every "queued doc=ID seq=N" reply).

Checks:
 1. Quota: each client's admissions conform to the rate LIMIT per PER_MS
    with BURST at once (GCRA, exact integer arithmetic): never more than
    BURST + k admissions in any span of k emission intervals. Also reports
    the most admissions seen in any window of PER_MS.
 2. Counts: every notification line's coalesced count equals the changes of
    its document whose seq lies in its burst (previous line's last, last].
    A change whose reply wrk never read (requests in flight when wrk
    stopped) is unknown: a line whose burst holds one is checked within
    bounds instead of exactly. The lines add up to the server's total.
Prints a summary; exits 1 on any violation.
"""
import bisect
import collections
import glob
import os
import re
import sys


def main(d, limit, per_ms, burst):
    limit, per_ns, burst = int(limit), int(per_ms) * 1000000, int(burst) or int(limit)
    bad = []

    # --- 1. quota -------------------------------------------------------------------
    clients = 0
    admitted = 0
    worst_window = 0
    for path in sorted(glob.glob(os.path.join(d, "quota-*.txt"))):
        clients += 1
        times = []
        for line in open(path):
            if line.startswith("status"):
                bad.append("%s: unexpected %s" % (os.path.basename(path), line.strip()))
            elif line.strip():
                times.append(int(line))
        times.sort()
        admitted += len(times)
        # GCRA in units of ns * limit: the emission interval is per_ns
        tat = None
        for t in times:
            tl = t * limit
            if tat is not None and tl < tat - (burst - 1) * per_ns:
                # reported; not counted in the reference schedule, so each excess admission is reported once
                bad.append("%s: admission at %d ns is %.3f ms early (over the quota)" %
                           (os.path.basename(path), t, (tat - (burst - 1) * per_ns - tl) / limit / 1e6))
                continue
            tat = max(tat if tat is not None else tl, tl) + per_ns
        lo = 0
        for hi in range(len(times)):
            while times[hi] - times[lo] >= per_ns:
                lo += 1
            worst_window = max(worst_window, hi - lo + 1)
    print("quota: %d clients, %d admissions, most in any %d ms window: %d (bound %d + %d - 1 = %d)" %
          (clients, admitted, per_ns // 1000000, worst_window, burst, limit, burst + limit - 1))
    if clients == 0 or admitted == 0:
        bad.append("quota: nothing recorded")

    # --- 2. counts ------------------------------------------------------------------
    by_doc = collections.defaultdict(list)
    known = set()
    for path in glob.glob(os.path.join(d, "changes-*.txt")):
        for line in open(path):
            if line.startswith("status"):
                bad.append("%s: unexpected %s" % (os.path.basename(path), line.strip()))
                continue
            m = re.match(r"queued doc=(\S+) seq=(\d+)", line)
            if m:
                s = int(m.group(2))
                by_doc[m.group(1)].append(s)
                known.add(s)
    lines = collections.defaultdict(list)
    for line in open(os.path.join(d, "notify.log")):
        m = re.match(r"changed doc=(\S+) coalesced=(\d+) first=(\d+) last=(\d+)", line)
        if not m:
            bad.append("notify.log: unexpected line %r" % line)
            continue
        lines[m.group(1)].append((int(m.group(4)), int(m.group(2)), int(m.group(3))))
    stopped = open(os.path.join(d, "server.stderr")).read()
    m = re.search(r"stopped: .* (\d+) changes, (\d+) notifications", stopped)
    accepted = int(m.group(1)) if m else -1
    maxseq = max([ln[0] for v in lines.values() for ln in v] + [0])
    unknown = sorted(s for s in range(1, maxseq + 1) if s not in known)
    exact = bounded = total = 0
    for doc, ls in lines.items():
        ls.sort()
        seqs = sorted(by_doc.get(doc, []))
        prev = 0
        for last, count, first in ls:
            mine = bisect.bisect_right(seqs, last) - bisect.bisect_right(seqs, prev)
            unk = bisect.bisect_right(unknown, last) - bisect.bisect_right(unknown, prev)
            if unk == 0:
                exact += 1
                if count != mine:
                    bad.append("doc=%s last=%d: coalesced=%d, %d changes in its burst" % (doc, last, count, mine))
            else:
                bounded += 1
                if not mine <= count <= mine + unk:
                    bad.append("doc=%s last=%d: coalesced=%d, %d known + %d unknown changes in its burst" %
                               (doc, last, count, mine, unk))
            total += count
            prev = last
    recorded = sum(len(v) for v in by_doc.values())
    print("changes: %d accepted by the server, %d replies read by wrk (%d never read), %d notification lines "
          "(%d checked exactly, %d within bounds), adding up to %d" %
          (accepted, recorded, len(unknown), exact + bounded, exact, bounded, total))
    if total != accepted:
        bad.append("notification lines add up to %d, the server accepted %d changes" % (total, accepted))
    if "lost doc=" in stopped or "error:" in stopped:
        bad.append("server reported a loss: " + stopped.strip())
    for b in bad[:30]:
        print("FAIL " + b)
    if len(bad) > 30:
        print("FAIL ... and %d more" % (len(bad) - 30))
    if bad:
        sys.exit(1)
    print("soak check: every admission within quota, every notification count exact")


if __name__ == "__main__":
    main(*sys.argv[1:5])
