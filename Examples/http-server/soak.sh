#!/bin/sh
# soak.sh — the example server under load for a while (make soak; not part of
# make test):
#
#   soak.sh SERVER_EXE WORK_DIR [SECONDS]     (SECONDS: default $SOAK_SECONDS or 180)
#
# Two wrk runs at once for SECONDS on loopback: one on the quota endpoint
# (SOAK_THREADS clients, one X-API-Key per wrk thread, rate 100 per second,
# burst 20 each), one posting changes over SOAK_DOCS documents (debounce
# 20 ms, maxWait 50 ms, so bursts end by quiet and by maxWait all the time).
# Then SIGTERM (the server drains) and soak_check.py: every admission within
# the quota, every notification line's count exact. Prints the figures.
set -u
SERVER=${1:?usage: soak.sh SERVER_EXE WORK_DIR [SECONDS]}
WORK=${2:?usage: soak.sh SERVER_EXE WORK_DIR [SECONDS]}
SECONDS_=${3:-${SOAK_SECONDS:-180}}
THREADS=${SOAK_THREADS:-4}
DOCS=${SOAK_DOCS:-50}
WRK=${WRK:-wrk}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
LIMIT=100 PER_MS=1000 BURST=20

for tool in "$WRK" "$PYTHON"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "soak: $tool not found" >&2; exit 1; }
done
rm -rf "$WORK"
mkdir -p "$WORK"
"$SERVER" --port 0 --port-file "$WORK/port" --notify-log "$WORK/notify.log" \
    --rate "$LIMIT/$PER_MS" --burst "$BURST" --debounce 20 --maxwait 50 --timeout 60 \
    --admin-token soak >"$WORK/server.stdout" 2>"$WORK/server.stderr" &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT INT TERM
i=0
while [ ! -s "$WORK/port" ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 $pid 2>/dev/null; then
        echo "soak: the server did not start" >&2
        cat "$WORK/server.stderr" >&2
        exit 1
    fi
    sleep 0.05
done
base="http://127.0.0.1:$(cat "$WORK/port")"
echo "soak: $SECONDS_ s, server $base, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
cpu0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
export SOAK_OUT="$WORK" SOAK_DOCS="$DOCS"
"$WRK" -t "$THREADS" -c "$((THREADS * 4))" -d "${SECONDS_}s" --latency -s "$HERE/soak_quota.lua" "$base" \
    >"$WORK/wrk-quota.txt" 2>&1 &
wq=$!
"$WRK" -t 2 -c 8 -d "${SECONDS_}s" --latency -s "$HERE/soak_changes.lua" "$base" >"$WORK/wrk-changes.txt" 2>&1 &
wc_=$!
sleep 5
rss_early=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
wait $wq
wait $wc_
rss_end=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
cpu1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
curl -s -H 'X-Admin-Token: soak' "$base/stats" >"$WORK/stats.txt"
kill -TERM $pid
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.05; done
wait $pid
status=$?
trap - EXIT INT TERM
echo "--- wrk, quota endpoint"
sed -n '/Latency Distribution/,/^ *99%/p; /requests in/p; /Requests\/sec/p; /Non-2xx/p; /Socket errors/p' "$WORK/wrk-quota.txt"
echo "--- wrk, changes endpoint"
sed -n '/Latency Distribution/,/^ *99%/p; /requests in/p; /Requests\/sec/p; /Non-2xx/p; /Socket errors/p' "$WORK/wrk-changes.txt"
echo "--- server"
echo "exit status $status; CPU $(((cpu1 - cpu0) / $(getconf CLK_TCK))) s over the run; RSS $rss_early kB after 5 s, $rss_end kB at the end"
cat "$WORK/server.stderr"
grep -E '^(ok|limited|changes|notifications|errors|quota_keys|notify_pending|quota_memory_bytes|notify_memory_bytes) ' \
    "$WORK/stats.txt" | tr '\n' ' '
echo
echo "--- check"
"$PYTHON" "$HERE/soak_check.py" "$WORK" "$LIMIT" "$PER_MS" "$BURST" || exit 1
[ "$status" = 0 ] || { echo "soak: server exit status $status" >&2; exit 1; }
