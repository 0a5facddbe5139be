#!/bin/sh
# test_http_server.sh — the example server end to end, with real clients
# (curl, and clients.py for what curl cannot do: raw bytes, pipelining,
# slow and idle connections), on loopback.
#
#   test_http_server.sh SERVER_EXE [WORK_DIR]
#
#  1. Quota, 5 per minute (burst 5): 8 requests of alice give exactly 5 x 200
#     and 3 x 429; RateLimit-Policy "default";q=5;w=60 on every answer;
#     RateLimit r=4,3,2,1,0 with t=12,24,36,48,60 (one call is worth 12 s);
#     a 429 says r=0;t=60 and Retry-After: 12. bob is independent; without a
#     key the peer address is the client.
#  2. Weighted: POST /api/upload costs one unit per started KiB: 2500 bytes
#     cost 3 (r=2;t=36), a second one is refused (r=2, Retry-After 12: one
#     unit comes back every 12 s), a 1-unit GET still passes (r=1;t=48).
#  3. Debounce (1 s): 5 changes of A and 3 of B become one line each.
#  4. Nothing lost at SIGTERM and /admin/shutdown; /stats and /admin/* need
#     the admin token (404 without --admin-token, 403 with a wrong one).
#  5. A client that pipelines changes and closes without reading (RST):
#     the server survives (no SIGPIPE), and drains every accepted change.
#  6. Counts cross no burst: 8 connections pipeline 2,400 changes of one
#     document with a 10 ms debounce and maxWait, so deadlines fall due inside submits
#     ("timers first"); every line's count equals the changes whose seq lies
#     in its burst.
#  7. Keys: two 400-byte keys sharing 399 bytes have their own quotas; a
#     1024-byte key is served, 1025 bytes get 431; a key with a NUL byte gets
#     400 and takes nothing from the quota of the key before the NUL.
#  8. --debounce 0 writes every change at once (coalesced=1 each).
#  9. A notification log on /dev/full: the failure is reported, later
#     changes get 503, the exit status is 1.
# 10. Timeouts and limits: an idle connection is closed after --timeout, a
#     slow client dripping a byte every 0.3 s after --request-timeout; an
#     oversized header and an oversized body are refused; a 48 MB header
#     line and a 300 MB body are cut off after a few MB (under 0.5 s of CPU).
# 11. Out of file descriptors (ulimit -n 48, 80 connections held): the
#     server pauses accepting instead of spinning: at most 3 stderr lines and
#     under 0.5 s of CPU in 2 s; then it serves again.
# 12. At the key cap (--max-keys 2): a third client gets 503 + Retry-After
#     (--at-cap refuse) or is served untracked (--at-cap admit).
set -u

SERVER=${1:?usage: test_http_server.sh SERVER_EXE [WORK_DIR]}
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
CURL=${CURL:-curl}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
CLIENTS="$HERE/clients.py"
TOKEN=test-admin-token
failures=0
pid=

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null; fi
}
trap cleanup EXIT INT TERM

for tool in "$CURL" "$PYTHON"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$tool not found (the example's test needs curl and python3)" >&2
        exit 1
    fi
done

# start_server NAME [OPTIONS...]: starts the server (defaults: --rate 5/60000
# --debounce 1000 --admin-token), sets $pid, $port, $log, $base. With
# $FD_LIMIT set, under `ulimit -n $FD_LIMIT`.
start_server() {
    name=$1
    shift
    log="$WORK/$name.notify.log"
    portfile="$WORK/$name.port"
    rm -f "$log" "$portfile"
    if [ -n "${FD_LIMIT:-}" ]; then
        (ulimit -n "$FD_LIMIT" && exec "$SERVER" --port 0 --port-file "$portfile" --notify-log "$log" \
            --rate 5/60000 --debounce 1000 --admin-token "$TOKEN" "$@") \
            >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" &
    else
        "$SERVER" --port 0 --port-file "$portfile" --notify-log "$log" \
            --rate 5/60000 --debounce 1000 --admin-token "$TOKEN" "$@" \
            >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" &
    fi
    pid=$!
    i=0
    while [ ! -s "$portfile" ]; do
        i=$((i + 1))
        if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "server $name did not start:" >&2
            cat "$WORK/$name.stderr" >&2
            exit 1
        fi
        sleep 0.05
    done
    port=$(cat "$portfile")
    base="http://127.0.0.1:$port"
    echo "$name: $(cat "$WORK/$name.stdout")"
}

# wait_exit: waits up to 10 s for $pid to exit; sets $status
wait_exit() {
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 200 ]; then
            fail "server did not exit"
            kill -9 "$pid"
            break
        fi
        sleep 0.05
    done
    wait "$pid"
    status=$?
    pid=
}

stop_server() {
    kill -TERM "$pid" 2>/dev/null
    wait_exit
}

# count CODE FILE: lines equal to CODE
count() { grep -c "^$1\$" "$2" || true; }

# wait_for_lines FILE N: waits up to 10 s for FILE to have N lines
wait_for_lines() {
    i=0
    while [ "$(wc -l <"$1" 2>/dev/null || echo 0)" -lt "$2" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && return 1
        sleep 0.05
    done
    return 0
}

# header NAME FILE: the value of header NAME in a `curl -D` dump
header() { tr -d '\r' <"$2" | sed -n "s/^$1: *//Ip" | head -n 1; }

# rl_lines FILE [code]: per response of a `curl -D` dump, "policy|ratelimit|retry-after"
# (with "code": "status|ratelimit|retry-after")
rl_lines() {
    tr -d '\r' <"$1" | awk -v mode="${2:-policy}" '
        function out() { if (n) print (mode == "code" ? c : p) "|" r "|" a }
        /^HTTP\// { out(); n = ($2 !~ /^1/); c = $2; p = r = a = ""; next } # 100 Continue: not an answer
        { l = tolower($0) }
        l ~ /^ratelimit-policy:/ { sub(/^[^:]*: */, ""); p = $0 }
        l ~ /^ratelimit:/ { sub(/^[^:]*: */, ""); r = $0 }
        l ~ /^retry-after:/ { sub(/^[^:]*: */, ""); a = $0 }
        END { out() }'
}

# cpu_ticks PID: user + system CPU time of a process, in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

codes() { tr '\n' ' ' <"$1"; }

# codes_only: the status lines of a multi-URL curl -w '%{http_code}\n' (-o covers the first URL only)
codes_only() { grep -E '^[0-9]{3}$' || true; }

echo "--- 1, 2, 3, 4: quota and RateLimit headers, weighted cost, debounce, drain"
start_server main
# --- 1. quota ------------------------------------------------------------------
# one curl, one connection, 8 requests within a few ms (the expected t and
# Retry-After values hold while the 8 calls fall within one second)
urls=""
for i in 1 2 3 4 5 6 7 8; do urls="$urls $base/api/items?n=$i"; done
$CURL -s -o /dev/null -D "$WORK/alice.h" -w '%{http_code}\n' -H 'X-API-Key: alice' $urls | codes_only >"$WORK/alice.codes"
rl_lines "$WORK/alice.h" >"$WORK/alice.rl"
[ "$(count 200 "$WORK/alice.codes")" = 5 ] || fail "alice: want 5 x 200, got: $(codes "$WORK/alice.codes")"
[ "$(count 429 "$WORK/alice.codes")" = 3 ] || fail "alice: want 3 x 429, got: $(codes "$WORK/alice.codes")"
p='"default";q=5;w=60'
cat >"$WORK/alice.want" <<EOF
$p|"default";r=4;t=12|
$p|"default";r=3;t=24|
$p|"default";r=2;t=36|
$p|"default";r=1;t=48|
$p|"default";r=0;t=60|
$p|"default";r=0;t=60|12
$p|"default";r=0;t=60|12
$p|"default";r=0;t=60|12
EOF
cmp -s "$WORK/alice.rl" "$WORK/alice.want" ||
    fail "RateLimit headers (policy|ratelimit|retry-after), want: $(cat "$WORK/alice.want") got: $(cat "$WORK/alice.rl")"

$CURL -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: bob' "$base/api/a" "$base/api/b" | codes_only >"$WORK/bob.codes"
[ "$(count 200 "$WORK/bob.codes")" = 2 ] || fail "bob: want 2 x 200, got: $(codes "$WORK/bob.codes")"

urls=""
for i in 1 2 3 4 5 6; do urls="$urls $base/api/anon?n=$i"; done
$CURL -s -o /dev/null -w '%{http_code}\n' $urls | codes_only >"$WORK/anon.codes"
[ "$(count 200 "$WORK/anon.codes")" = 5 ] || fail "by address: want 5 x 200, got: $(codes "$WORK/anon.codes")"
[ "$(count 429 "$WORK/anon.codes")" = 1 ] || fail "by address: want 1 x 429, got: $(codes "$WORK/anon.codes")"

# --- 2. weighted cost --------------------------------------------------------------
head -c 2500 /dev/zero | tr '\0' x >"$WORK/upload.bin"
rm -f "$WORK"/carol.*.h
$CURL -s -o /dev/null -D "$WORK/carol.1.h" -H 'X-API-Key: carol' --data-binary @"$WORK/upload.bin" "$base/api/upload" \
    --next -s -o /dev/null -D "$WORK/carol.2.h" -H 'X-API-Key: carol' --data-binary @"$WORK/upload.bin" "$base/api/upload" \
    --next -s -o /dev/null -D "$WORK/carol.3.h" -H 'X-API-Key: carol' "$base/api/x"
cat "$WORK/carol.1.h" "$WORK/carol.2.h" "$WORK/carol.3.h" >"$WORK/carol.h"
rl_lines "$WORK/carol.h" code >"$WORK/carol.rl"
cat >"$WORK/carol.want" <<EOF
200|"default";r=2;t=36|
429|"default";r=2;t=36|12
200|"default";r=1;t=48|
EOF
cmp -s "$WORK/carol.rl" "$WORK/carol.want" ||
    fail "weighted upload, want: $(cat "$WORK/carol.want") got: $(cat "$WORK/carol.rl")"

# --- 3. debounce -----------------------------------------------------------------
urls=""
for i in 1 2 3 4 5; do urls="$urls $base/docs/A/changed"; done
for i in 1 2 3; do urls="$urls $base/docs/B/changed"; done
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST $urls | codes_only >"$WORK/docs.codes"
[ "$(count 202 "$WORK/docs.codes")" = 8 ] || fail "changes: want 8 x 202, got: $(codes "$WORK/docs.codes")"
wait_for_lines "$log" 2 || fail "no notifications after 10 s"
sleep 1.2 # a second notification of A or B would come by now: there must be none
[ "$(wc -l <"$log")" = 2 ] || fail "want 2 notifications, got: $(cat "$log")"
grep -q '^changed doc=A coalesced=5 first=1 last=5$' "$log" || fail "doc A not coalesced into one: $(cat "$log")"
grep -q '^changed doc=B coalesced=3 first=6 last=8$' "$log" || fail "doc B not coalesced into one: $(cat "$log")"

# --- 4. admin endpoints, nothing lost at shutdown (SIGTERM) ---------------------------
code=$($CURL -s -o /dev/null -w '%{http_code}' "$base/stats")
[ "$code" = 403 ] || fail "/stats without the token: $code, want 403"
code=$($CURL -s -o /dev/null -w '%{http_code}' -H 'X-Admin-Token: wrong' -X POST "$base/admin/shutdown")
[ "$code" = 403 ] || fail "/admin/shutdown with a wrong token: $code, want 403"
$CURL -s -H "X-Admin-Token: $TOKEN" "$base/stats" >"$WORK/stats"
stat() { sed -n "s/^$1 //p" "$WORK/stats"; }
# admitted: alice 5, bob 2, by address 5, carol 2 (an upload and a GET; a weighted call counts once)
[ "$(stat ok)" = 14 ] || fail "stats ok: $(stat ok), want 14"
[ "$(stat limited)" = 5 ] || fail "stats limited: $(stat limited), want 5"
[ "$(stat quota_admitted)" = 14 ] || fail "stats quota_admitted: $(stat quota_admitted), want 14"
[ "$(stat quota_dropped)" = 5 ] || fail "stats quota_dropped: $(stat quota_dropped), want 5"
[ "$(stat notify_scheduled)" = 8 ] || fail "stats notify_scheduled: $(stat notify_scheduled), want 8"
[ "$(stat notify_emitted_later)" = 2 ] || fail "stats notify_emitted_later: $(stat notify_emitted_later), want 2"
[ "$(stat notify_dropped)" = 6 ] || fail "stats notify_dropped (superseded): $(stat notify_dropped), want 6"

$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/C/changed" "$base/docs/C/changed" | codes_only >"$WORK/c.codes"
[ "$(count 202 "$WORK/c.codes")" = 2 ] || fail "doc C: want 2 x 202"
stop_server
[ "$status" = 0 ] || fail "server exit status $status after SIGTERM"
grep -q '^changed doc=C coalesced=2 ' "$log" || fail "doc C lost at SIGTERM: $(cat "$log")"
[ "$(wc -l <"$log")" = 3 ] || fail "want 3 notifications in all: $(cat "$log")"
grep -q '^lost' "$WORK/main.stderr" && fail "a notification was discarded: $(cat "$WORK/main.stderr")"

start_server admin
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/D/changed" "$base/docs/D/changed" \
    "$base/docs/D/changed" "$base/docs/E/changed" | codes_only >"$WORK/d.codes"
[ "$(count 202 "$WORK/d.codes")" = 4 ] || fail "docs D, E: want 4 x 202"
code=$($CURL -s -o /dev/null -w '%{http_code}' -H "X-Admin-Token: $TOKEN" -X POST "$base/admin/shutdown")
[ "$code" = 200 ] || fail "shutdown endpoint: $code"
wait_exit
[ "$status" = 0 ] || fail "server exit status $status after /admin/shutdown"
grep -q '^changed doc=D coalesced=3 ' "$log" || fail "doc D lost at shutdown: $(cat "$log")"
grep -q '^changed doc=E coalesced=1 ' "$log" || fail "doc E lost at shutdown: $(cat "$log")"
[ "$(wc -l <"$log")" = 2 ] || fail "want 2 notifications: $(cat "$log")"

rm -f "$WORK/noadmin.port"
"$SERVER" --port 0 --port-file "$WORK/noadmin.port" --notify-log "$WORK/noadmin.log" >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -s "$WORK/noadmin.port" ] && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.05; done
code=$($CURL -s -o /dev/null -w '%{http_code}' -H "X-Admin-Token: $TOKEN" "http://127.0.0.1:$(cat "$WORK/noadmin.port")/stats")
[ "$code" = 404 ] || fail "/stats without --admin-token: $code, want 404 (off)"
stop_server

echo "--- 5: a pipelining client that closes without reading"
start_server pipe --debounce 200
$PYTHON "$CLIENTS" pipeline-close "$port" 200 50 P || fail "pipelining client"
sleep 0.3
kill -0 "$pid" 2>/dev/null || fail "the server died (killed by SIGPIPE?)"
code=$($CURL -s -o /dev/null -w '%{http_code}' -X POST "$base/docs/P/changed")
[ "$code" = 202 ] || fail "after the pipelining clients: $code, want 202"
stop_server
[ "$status" = 0 ] || fail "exit status $status after the pipelining clients (141 = SIGPIPE)"
accepted=$(sed -n 's/^stopped: .* \([0-9][0-9]*\) changes,.*/\1/p' "$WORK/pipe.stderr")
written=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^coalesced=/) { sub(/coalesced=/, "", $i); n += $i } } END { print n + 0 }' "$log")
[ -n "$accepted" ] && [ "$accepted" -gt 1 ] && [ "$written" = "$accepted" ] ||
    fail "pipelining clients: $accepted changes accepted, $written written"
echo "pipe: $accepted changes accepted (of 10001 sent), $written written"

echo "--- 6: counts never cross a burst (deadlines due inside submits)"
start_server burst --debounce 10 --maxwait 10
$PYTHON "$CLIENTS" burst "$port" 8 300 S "$WORK/burst.seqs" || fail "burst client"
stop_server
[ "$status" = 0 ] || fail "exit status $status (burst)"
$PYTHON "$CLIENTS" check-counts "$log" S "$WORK/burst.seqs" || fail "coalesced counts are not exact"

echo "--- 7: long keys, NUL bytes"
start_server keys
k399=$(head -c 399 /dev/zero | tr '\0' k)
for key in "${k399}1" "${k399}2"; do
    $CURL -s -o /dev/null -w '%{http_code}\n' -H "X-API-Key: $key" "$base/api/1" "$base/api/2" "$base/api/3" \
        "$base/api/4" "$base/api/5" "$base/api/6" | codes_only >"$WORK/long.codes"
    [ "$(count 200 "$WORK/long.codes")" = 5 ] && [ "$(count 429 "$WORK/long.codes")" = 1 ] ||
        fail "400-byte key ...${key#"$k399"}: want 5 x 200 + 429 (its own quota), got $(codes "$WORK/long.codes")"
done
k1024=$(head -c 1024 /dev/zero | tr '\0' m)
code=$($CURL -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $k1024" "$base/api/max")
[ "$code" = 200 ] || fail "1024-byte key: $code, want 200"
code=$($CURL -s -o /dev/null -w '%{http_code}' -H "X-API-Key: ${k1024}m" "$base/api/over")
[ "$code" = 431 ] || fail "1025-byte key: $code, want 431"
hex() { printf "$1" | od -An -tx1 | tr -d ' \n'; } # the format's \r\n become CR LF
req_nul="$(hex 'GET /api/n HTTP/1.1\r\nHost: t\r\nX-API-Key: nulkey')00$(hex 'a\r\n\r\n')"
req_ok="$(hex 'GET /api/n HTTP/1.1\r\nHost: t\r\nX-API-Key: nulkey\r\n\r\n')"
: >"$WORK/nul.codes"
for i in 1 2 3; do $PYTHON "$CLIENTS" raw "$port" "$req_nul" >>"$WORK/nul.codes"; done
$PYTHON "$CLIENTS" raw "$port" "$req_ok" "$req_nul" "$req_ok" >>"$WORK/nul.codes"
[ "$(codes "$WORK/nul.codes")" = "400 400 400 200 400 " ] ||
    fail "NUL key: want 400 x 3, then 200 400 (closed): got $(codes "$WORK/nul.codes")"
$CURL -s -o /dev/null -w '%{http_code}\n' -H "X-API-Key: nulkey" "$base/api/1" "$base/api/2" "$base/api/3" \
    "$base/api/4" "$base/api/5" | codes_only >"$WORK/nul2.codes"
[ "$(count 200 "$WORK/nul2.codes")" = 4 ] && [ "$(count 429 "$WORK/nul2.codes")" = 1 ] ||
    fail "nulkey's quota: want 4 x 200 + 429 after one admitted call, got $(codes "$WORK/nul2.codes")"
stop_server

echo "--- 8: --debounce 0"
start_server zero --debounce 0
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/Z/changed" "$base/docs/Z/changed" \
    "$base/docs/Z/changed" | codes_only >"$WORK/z.codes"
[ "$(count 202 "$WORK/z.codes")" = 3 ] || fail "--debounce 0: want 3 x 202, got $(codes "$WORK/z.codes")"
[ "$(grep -c '^changed doc=Z coalesced=1 ' "$log")" = 3 ] || fail "--debounce 0: want 3 lines at once: $(cat "$log")"
stop_server
[ "$(wc -l <"$log")" = 3 ] || fail "--debounce 0: want 3 lines in all: $(cat "$log")"

echo "--- 9: a notification log on a full disk"
pid=
rm -f "$WORK/full.port"
"$SERVER" --port 0 --port-file "$WORK/full.port" --notify-log /dev/full --debounce 50 \
    >"$WORK/full.stdout" 2>"$WORK/full.stderr" &
pid=$!
i=0
while [ ! -s "$WORK/full.port" ] && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.05; done
base="http://127.0.0.1:$(cat "$WORK/full.port")"
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/F/changed" "$base/docs/G/changed" | codes_only >"$WORK/full.codes"
sleep 1 # both notifications fall due after 50 ms, and fail
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/H/changed" | codes_only >>"$WORK/full.codes"
[ "$(codes "$WORK/full.codes")" = "202 202 503 " ] ||
    fail "/dev/full: want 202 202 then 503 once the log failed, got $(codes "$WORK/full.codes")"
stop_server
[ "$status" = 1 ] || fail "/dev/full: exit status $status, want 1"
grep -q 'write failed' "$WORK/full.stderr" && grep -q '2 notification(s) could not be written' "$WORK/full.stderr" ||
    fail "/dev/full: no error report: $(cat "$WORK/full.stderr")"

echo "--- 10: timeouts and size limits"
start_server slow --timeout 1 --request-timeout 2
$PYTHON "$CLIENTS" idle "$port" 0.8 2.5 || fail "idle connection"
$PYTHON "$CLIENTS" slowloris "$port" 0.3 1.8 3.5 || fail "slow client"
before=$(cpu_ticks "$pid")
$PYTHON "$CLIENTS" flood "$port" header || fail "a 48 MB header line"
$PYTHON "$CLIENTS" flood "$port" body || fail "a 300 MB body"
after=$(cpu_ticks "$pid")
[ $((after - before)) -lt $(($(getconf CLK_TCK) / 2)) ] || fail "the floods cost $((after - before)) CPU ticks"
big=$(head -c 9000 /dev/zero | tr '\0' h)
code=$($CURL -s -o /dev/null -w '%{http_code}' -H "X-Filler: $big" "$base/api/big")
case "$code" in 4*) ;; *) fail "a 9,000-byte header: $code, want 4xx" ;; esac
head -c 1100000 /dev/zero >"$WORK/body.bin"
code=$($CURL -s -o /dev/null -w '%{http_code}' -H 'X-API-Key: big' --data-binary @"$WORK/body.bin" "$base/api/upload")
[ "$code" = 413 ] || fail "a 1.1 MB body: $code, want 413"
code=$($CURL -s -o /dev/null -w '%{http_code}' -H 'X-API-Key: after' "$base/api/ok")
[ "$code" = 200 ] || fail "after the slow clients: $code, want 200"
stop_server

echo "--- 11: out of file descriptors"
FD_LIMIT=48 start_server fds --timeout 30
before=$(cpu_ticks "$pid")
$PYTHON "$CLIENTS" hold "$port" 80 2 >"$WORK/hold.out" || fail "hold client"
after=$(cpu_ticks "$pid")
hz=$(getconf CLK_TCK)
lines=$(grep -c 'accept' "$WORK/fds.stderr" || true)
[ "$lines" -ge 1 ] && [ "$lines" -le 3 ] || fail "out of fds: $lines accept lines on stderr, want 1..3"
[ $((after - before)) -lt $((hz / 2)) ] || fail "out of fds: $((after - before)) ticks of CPU in 2 s (spinning?)"
echo "fds: $(cat "$WORK/hold.out"); $((after - before)) CPU ticks (of $hz/s) while held; $lines stderr line(s)"
code=000
i=0
while [ "$code" != 200 ] && [ $i -lt 20 ]; do
    i=$((i + 1))
    code=$($CURL -s -o /dev/null -m 2 -w '%{http_code}' -H 'X-API-Key: back' "$base/api/ok")
    [ "$code" = 200 ] || sleep 0.1
done
[ "$code" = 200 ] || fail "out of fds: not serving again after the connections closed ($code)"
stop_server

echo "--- 12: at the key cap"
for mode in refuse admit; do
    start_server "cap-$mode" --max-keys 2 --at-cap "$mode"
    : >"$WORK/cap-$mode.codes"
    for k in k1 k2 k3; do
        $CURL -s -o /dev/null -D "$WORK/h" -w '%{http_code}' -H "X-API-Key: $k" "$base/api/x" >"$WORK/code"
        echo "$(cat "$WORK/code")|$(header Retry-After "$WORK/h")" >>"$WORK/cap-$mode.codes"
    done
    stop_server
done
[ "$(codes "$WORK/cap-refuse.codes")" = "200| 200| 503|60 " ] ||
    fail "--at-cap refuse: want 200 200 503 (Retry-After 60), got $(codes "$WORK/cap-refuse.codes")"
[ "$(codes "$WORK/cap-admit.codes")" = "200| 200| 200| " ] ||
    fail "--at-cap admit: want 200 200 200, got $(codes "$WORK/cap-admit.codes")"

echo "--- startup: bad options are refused"
for bad in "--rate 0/1000" "--at-cap maybe" "--timeout 0" "--debounce x"; do
    # shellcheck disable=SC2086
    if "$SERVER" --port 0 $bad >/dev/null 2>&1; then fail "started with $bad"; fi
done

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed (files in $WORK)" >&2
    exit 1
fi
echo "example server: all checks passed"
