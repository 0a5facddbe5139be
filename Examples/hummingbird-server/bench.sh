#!/usr/bin/env bash
# The middleware's cost: wrk on loopback against the example server with the rate-limit
# middleware (every request admitted: a quota far above the load) and without it
# (--no-limit), X-Client-Id from a counter over CLIENTS distinct clients (bench/clients.lua).
# Runs alternate (without, with, without, with, ...) ROUNDS times; prints each run's
# requests/s and p99 and the medians. Bounded: ROUNDS x 2 x DURATION seconds of load.
#
# usage: Examples/hummingbird-server/bench.sh [BIN]   (default: the release build of this package)
#   env: ROUNDS=3 DURATION=10 THREADS=1 CONNECTIONS=32 CLIENTS=100000
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
  "$bin" --port "$port" --limit 1000000000 --per 1 "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  wrk -t"$threads" -c"$connections" -d"${duration}s" --latency -s "$here/bench/clients.lua" \
    "http://127.0.0.1:$port/" >"$work/out"
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  local rps p99
  rps="$(awk '/^Requests\/sec/ {print $2}' "$work/out")"
  p99="$(awk '$1 == "99%" {print $2}' "$work/out")"
  grep -q "Non-2xx" "$work/out" && echo "warning: non-2xx answers in $label" >&2
  echo "$label $rps $p99" | tee -a "$work/results"
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
    print(f"median {label:8s} {statistics.median(r):10.0f} req/s   p99 {statistics.median(p):7.2f} ms")
w = [float(x[1]) for x in rows if x[0] == "with"]; wo = [float(x[1]) for x in rows if x[0] == "without"]
pw = [ms(x[2]) for x in rows if x[0] == "with"]; pwo = [ms(x[2]) for x in rows if x[0] == "without"]
print(f"req/s with/without: {statistics.median(w)/statistics.median(wo):.3f}   p99 with/without: {statistics.median(pw)/statistics.median(pwo):.3f}")
PY
