#!/bin/sh
# test_http_server.sh — the example server end to end, with curl.
#
#   test_http_server.sh SERVER_EXE [WORK_DIR]
#
# 1. Quota: 5 per minute (burst 5). A scripted burst of 8 requests with
#    X-API-Key alice gives exactly 5 x 200 and 3 x 429 (each 429 with a
#    Retry-After of 1..60 s); bob is independent (2 x 200); requests without
#    a key are counted per client address (6 -> 5 x 200, 1 x 429).
# 2. Debounce (1 s): 5 changes of doc A and 3 of doc B, sent in one burst,
#    become exactly one notification each: coalesced=5 and coalesced=3.
# 3. Shutdown: 2 changes of doc C, then SIGTERM at once: the server drains
#    and exits 0 with "changed doc=C coalesced=2" logged (nothing lost).
#    The same through POST /admin/shutdown on a second server.
set -u

SERVER=${1:?usage: test_http_server.sh SERVER_EXE [WORK_DIR]}
WORK=${2:-$(mktemp -d)}
mkdir -p "$WORK"
CURL=${CURL:-curl}
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

if ! command -v "$CURL" >/dev/null 2>&1; then
    echo "curl not found (apt-get install curl; 'make deps' does it)" >&2
    exit 1
fi

# start_server NAME: starts the server, sets $pid, $port, $log
start_server() {
    name=$1
    log="$WORK/$name.notify.log"
    portfile="$WORK/$name.port"
    rm -f "$log" "$portfile"
    "$SERVER" --port 0 --port-file "$portfile" --notify-log "$log" \
        --rate 5/60000 --debounce 1000 >"$WORK/$name.stdout" 2>"$WORK/$name.stderr" &
    pid=$!
    i=0
    while [ ! -s "$portfile" ]; do
        i=$((i + 1))
        if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "server did not start:" >&2
            cat "$WORK/$name.stderr" >&2
            exit 1
        fi
        sleep 0.05
    done
    port=$(cat "$portfile")
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

start_server main
base="http://127.0.0.1:$port"

# --- 1. quota ------------------------------------------------------------------
urls=""
for i in 1 2 3 4 5 6 7 8; do urls="$urls $base/api/items?n=$i"; done
# one curl, one connection, 8 requests in a row: one status code per line
$CURL -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: alice' $urls >"$WORK/alice.codes"
[ "$(count 200 "$WORK/alice.codes")" = 5 ] || fail "alice: want 5 x 200, got: $(tr '\n' ' ' <"$WORK/alice.codes")"
[ "$(count 429 "$WORK/alice.codes")" = 3 ] || fail "alice: want 3 x 429, got: $(tr '\n' ' ' <"$WORK/alice.codes")"

retry=$($CURL -s -D - -o /dev/null -H 'X-API-Key: alice' "$base/api/items" | tr -d '\r' |
    sed -n 's/^[Rr]etry-[Aa]fter: *//p')
case "$retry" in
'' | *[!0-9]*) fail "429 without a numeric Retry-After: '$retry'" ;;
*) if [ "$retry" -lt 1 ] || [ "$retry" -gt 60 ]; then fail "Retry-After $retry not in 1..60"; fi ;;
esac

$CURL -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: bob' "$base/api/a" "$base/api/b" >"$WORK/bob.codes"
[ "$(count 200 "$WORK/bob.codes")" = 2 ] || fail "bob: want 2 x 200, got: $(tr '\n' ' ' <"$WORK/bob.codes")"

urls=""
for i in 1 2 3 4 5 6; do urls="$urls $base/api/anon?n=$i"; done
$CURL -s -o /dev/null -w '%{http_code}\n' $urls >"$WORK/anon.codes"
[ "$(count 200 "$WORK/anon.codes")" = 5 ] || fail "by address: want 5 x 200, got: $(tr '\n' ' ' <"$WORK/anon.codes")"
[ "$(count 429 "$WORK/anon.codes")" = 1 ] || fail "by address: want 1 x 429, got: $(tr '\n' ' ' <"$WORK/anon.codes")"

# --- 2. debounce -----------------------------------------------------------------
urls=""
for i in 1 2 3 4 5; do urls="$urls $base/docs/A/changed"; done
for i in 1 2 3; do urls="$urls $base/docs/B/changed"; done
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST $urls >"$WORK/docs.codes"
[ "$(count 202 "$WORK/docs.codes")" = 8 ] || fail "changes: want 8 x 202, got: $(tr '\n' ' ' <"$WORK/docs.codes")"
wait_for_lines "$log" 2 || fail "no notifications after 10 s"
sleep 1.2 # a second notification of A or B would come by now: there must be none
[ "$(wc -l <"$log")" = 2 ] || fail "want 2 notifications, got: $(cat "$log")"
grep -q '^changed doc=A coalesced=5 last=' "$log" || fail "doc A not coalesced into one: $(cat "$log")"
grep -q '^changed doc=B coalesced=3 last=' "$log" || fail "doc B not coalesced into one: $(cat "$log")"

# --- 3. nothing lost at shutdown (SIGTERM) ------------------------------------------
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/C/changed" "$base/docs/C/changed" >"$WORK/c.codes"
[ "$(count 202 "$WORK/c.codes")" = 2 ] || fail "doc C: want 2 x 202"
kill -TERM "$pid"
wait_exit
[ "$status" = 0 ] || fail "server exit status $status after SIGTERM"
grep -q '^changed doc=C coalesced=2 last=' "$log" || fail "doc C lost at SIGTERM: $(cat "$log")"
[ "$(wc -l <"$log")" = 3 ] || fail "want 3 notifications in all: $(cat "$log")"
grep -q '^lost' "$log" && fail "a notification was discarded: $(cat "$log")"
cat "$WORK/main.stderr"

# --- the shutdown endpoint -------------------------------------------------------------
start_server admin
base="http://127.0.0.1:$port"
$CURL -s -o /dev/null -w '%{http_code}\n' -X POST "$base/docs/D/changed" "$base/docs/D/changed" \
    "$base/docs/D/changed" "$base/docs/E/changed" >"$WORK/d.codes"
[ "$(count 202 "$WORK/d.codes")" = 4 ] || fail "docs D, E: want 4 x 202"
code=$($CURL -s -o /dev/null -w '%{http_code}' -X POST "$base/admin/shutdown")
[ "$code" = 200 ] || fail "shutdown endpoint: $code"
wait_exit
[ "$status" = 0 ] || fail "server exit status $status after /admin/shutdown"
grep -q '^changed doc=D coalesced=3 last=' "$log" || fail "doc D lost at shutdown: $(cat "$log")"
grep -q '^changed doc=E coalesced=1 last=' "$log" || fail "doc E lost at shutdown: $(cat "$log")"
[ "$(wc -l <"$log")" = 2 ] || fail "want 2 notifications: $(cat "$log")"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed (files in $WORK)" >&2
    exit 1
fi
echo "example server: all checks passed"
