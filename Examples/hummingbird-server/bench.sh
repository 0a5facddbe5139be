#!/usr/bin/env bash
# The middleware's cost: wrk on loopback against the example server with the rate-limit
# middleware (every request admitted: a quota far above the load) and without it
# (--no-limit), X-Client-Id from a counter over CLIENTS distinct clients (bench/clients.lua).
# Runs alternate (without, with, without, with, ...) ROUNDS times; prints each run's
# requests/s and p99 and the medians. Bounded: ROUNDS x 2 x DURATION seconds of load.
#
# usage: Examples/hummingbird-server/bench.sh [BIN]   (default: the release build of this package)
#   env: ROUNDS=3 DURATION=10 THREADS=1 CONNECTIONS=32 CLIENTS=100000
#        SERVER_CPUS=0 WRK_CPUS=1   pin the server and wrk to those CPUs (taskset -c); unset: not pinned
#        PERF_STAT=1   also the server's CPU time (and, where the machine has hardware counters,
#                      user-space instructions) per request: perf stat on the server during the
#                      wrk run. A loaded machine disturbs it less than requests per second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-}"
if [ -z "$bin" ]; then
  swift build -c release --package-path "$here" >&2
  bin="$(swift build -c release --package-path "$here" --show-bin-path)/hummingbird-server"
fi
rounds="${ROUNDS:-3}" duration="${DURATION:-10}" threads="${THREADS:-1}" connections="${CONNECTIONS:-32}"
export CLIENTS="${CLIENTS:-100000}"
work="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"' EXIT

run() { # LABEL FLAGS...: one wrk run against a fresh server
  local label="$1"; shift
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  ${SERVER_CPUS:+taskset -c "$SERVER_CPUS"} "$bin" --port "$port" --limit 1000000000 --per 1 "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  local perf=""
  if [ -n "${PERF_STAT:-}" ]; then
    perf stat -x, -e instructions:u,task-clock -p "$pid" -o "$work/perf" &
    perf=$!
  fi
  ${WRK_CPUS:+taskset -c "$WRK_CPUS"} wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s "$here/bench/clients.lua" \
    "http://127.0.0.1:$port/" >"$work/out"
  if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; fi
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  local rps p99 requests per=""
  rps="$(awk '/^Requests\/sec/ {print $2}' "$work/out")"
  p99="$(awk '$1 == "99%" {print $2}' "$work/out")"
  requests="$(awk '/requests in/ {print $1}' "$work/out")"
  if [ -n "$perf" ]; then
    per="$(awk -F, -v n="$requests" '$3 ~ /instructions/ {i=$1} $3 ~ /task-clock/ {t=$1}
      END {printf "%.0f %.2f", i/n, t*1000/n}' "$work/perf")"  # instructions, microseconds of CPU
  fi
  grep -q "Non-2xx" "$work/out" && echo "warning: non-2xx answers in $label" >&2
  echo "$label $rps $p99 $per" | tee -a "$work/results"
}

for _ in $(seq 1 "$rounds"); do
  run without --no-limit
  run with
  [ -n "${EXTRA:-}" ] && run "with$EXTRA" $EXTRA
done
python3 - "$work/results" <<'PY'
import sys, statistics
def ms(v):
    for unit, f in (("us", 1e-3), ("ms", 1.0), ("s", 1e3)):
        if v.endswith(unit) and not (unit == "s" and v.endswith(("us", "ms"))):
            return float(v[: -len(unit)]) * f
    return float(v)
rows = [l.split() for l in open(sys.argv[1])]
for label in sorted({x[0] for x in rows}, key=len):
    r = [float(x[1]) for x in rows if x[0] == label]
    p = [ms(x[2]) for x in rows if x[0] == label]
    print(f"median {label:8s} {statistics.median(r):10.0f} req/s ({min(r):.0f}-{max(r):.0f})"
          f"   p99 {statistics.median(p):7.2f} ms ({min(p):.2f}-{max(p):.2f})   runs {len(r)}")
w = [float(x[1]) for x in rows if x[0] == "with"]; wo = [float(x[1]) for x in rows if x[0] == "without"]
pw = [ms(x[2]) for x in rows if x[0] == "with"]; pwo = [ms(x[2]) for x in rows if x[0] == "without"]
print(f"req/s with/without: {statistics.median(w)/statistics.median(wo):.3f}   p99 with/without: {statistics.median(pw)/statistics.median(pwo):.3f}")
if all(len(x) >= 5 for x in rows):
    for label in sorted({x[0] for x in rows}, key=len):
        i = [float(x[3]) for x in rows if x[0] == label]
        c = [float(x[4]) for x in rows if x[0] == label]
        counted = f"{statistics.median(i):8.0f} instructions ({min(i):.0f}-{max(i):.0f})   " if min(i) > 0 else ""
        print(f"per request {label:8s} {counted}{statistics.median(c):6.2f} us CPU ({min(c):.2f}-{max(c):.2f})")
PY
