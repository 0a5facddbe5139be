#!/usr/bin/env bash
# Tests the example server (Hummingbird or Vapor: same routes and answers) with curl on
# loopback: the quota's status codes and header values (computed by hand below), the
# problem+json body, the client id rule (raw bytes), the per-document debounce, and the
# drain of pending saves on SIGTERM. Then, on a second server with short timeouts, the
# hostile clients of Examples/server-support/hostile_clients.py: idle, slowloris, slow
# body and a connection flood.
#
# usage: SERVER_BIN=/path/to/server Examples/hummingbird-server/test.sh
#   Without SERVER_BIN the example package is built (debug) and its binary used.
#   Every request has a time limit; the whole run is bounded (about a minute at most).
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
name="${SERVER_NAME:-$(basename "$here")}"
if [ -z "${SERVER_BIN:-}" ]; then
  swift build --package-path "$here" >&2 || exit 1
  SERVER_BIN="$(swift build --package-path "$here" --show-bin-path)/$name"
fi
[ -x "$SERVER_BIN" ] || { echo "no server binary at $SERVER_BIN" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-$name.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
passed=0
failed=0
check() { # NAME ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then passed=$((passed + 1)); else echo "FAIL: $1: got [$2], expected [$3]"; failed=$((failed + 1)); fi
}

# A free port: let the kernel pick one, then use it.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
# 3 requests per 60 s: one unit comes back every 20 s.
"$SERVER_BIN" --host 127.0.0.1 --port "$port" --limit 3 --per 60 --debounce-ms 300 >"$work/out" 2>"$work/err" &
pid=$!
wait_ready() {
  for _ in $(seq 1 150); do
    curl -s -m 1 -o /dev/null "$base/docs/none" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited:"; cat "$work/err"; exit 1; }
    sleep 0.2
  done
  echo "server not ready after 30 s"; exit 1
}
wait_ready

# request CLIENT-ID [METHOD] [PATH] [BODY]: prints "STATUS|Retry-After|RateLimit-Policy|RateLimit|Content-Type"
request() {
  local args=(-s -m 5 -o "$work/body" -D "$work/headers" -X "${2:-GET}")
  [ -n "$1" ] && args+=(-H "X-Client-Id: $1")
  [ -n "${4:-}" ] && args+=(--data-binary "$4")
  curl "${args[@]}" "$base${3:-/}" >/dev/null
  local status
  status="$(head -n 1 "$work/headers" | cut -d' ' -f2)"
  field() { grep -i "^$1:" "$work/headers" | head -n 1 | cut -d' ' -f2- | tr -d '\r'; }
  echo "$status|$(field Retry-After)|$(field RateLimit-Policy)|$(field RateLimit)|$(field Content-Type)"
}

policy='"default";q=3;w=60'
# Three admitted: remaining 2, 1, 0; the whole burst back in 20, 40, 60 s.
check "alice 1" "$(request alice)" "200||$policy|\"default\";r=2;t=20|text/plain; charset=utf-8"
check "alice 2" "$(request alice | cut -d'|' -f1-4)" "200||$policy|\"default\";r=1;t=40"
check "alice 3" "$(request alice | cut -d'|' -f1-4)" "200||$policy|\"default\";r=0;t=60"
# The fourth: 429, retry in 20 s (one unit), problem+json.
check "alice 4" "$(request alice)" "429|20|$policy|\"default\";r=0;t=60|application/problem+json"
body="$(cat "$work/body")"
check "problem type" "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["type"])' <<<"$body")" "about:blank"
check "problem title" "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["title"])' <<<"$body")" "Too Many Requests"
check "problem status" "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])' <<<"$body")" "429"
check "problem detail" "$(python3 -c 'import json,sys; print("retry after 20 seconds" in json.load(sys.stdin)["detail"])' <<<"$body")" "True"
# Another client has its own quota; spaces around an id are not part of it.
check "bob 1" "$(request bob | cut -d'|' -f1-4)" "200||$policy|\"default\";r=2;t=20"
check "bob 2 (spaces trimmed)" "$(request ' bob ' | cut -d'|' -f1-4)" "200||$policy|\"default\";r=1;t=40"
check "bob body" "$(cat "$work/body")" "hello bob"
# No X-Client-Id, or an empty one: keyed on the address.
check "address 1" "$(request '' | cut -d'|' -f1-4)" "200||$policy|\"default\";r=2;t=20"
check "address body" "$(cat "$work/body")" "hello 127.0.0.1"
curl -s -m 5 -o "$work/body" -D "$work/headers" -H "X-Client-Id;" "$base/" >/dev/null  # an empty field
check "address 2 (empty id)" "$(grep -i '^RateLimit:' "$work/headers" | cut -d' ' -f2- | tr -d '\r')" "\"default\";r=1;t=40"
# X-Forwarded-For is not trusted by default: still the address's quota.
curl -s -m 5 -o /dev/null -H "X-Forwarded-For: 203.0.113.9" "$base/"
check "address 4 (X-Forwarded-For ignored)" "$(request '' | cut -d'|' -f1)" "429"

# Client ids refused with 400 and a problem naming why (raw bytes: invalid UTF-8 would
# otherwise become U+FFFD, one key for every such client).
refused() { # NAME EXPECTED-DETAIL-PART CURL-ARGS...
  local name=$1 reason=$2
  shift 2
  local status
  status="$(curl -s -m 5 -o "$work/body" -w '%{http_code}' "$@" "$base/")"
  check "$name: status" "$status" "400"
  check "$name: detail" "$(python3 -c 'import json,sys; d=json.load(sys.stdin)["detail"]; print(sys.argv[1] in d or d)' "$reason" <"$work/body" 2>&1)" "True"
}
refused "id \\xff" "is not valid UTF-8" -H $'X-Client-Id: \xff'
refused "id \\xfe" "is not valid UTF-8" -H $'X-Client-Id: \xfe'
refused "id caf\\xe9" "is not valid UTF-8" -H $'X-Client-Id: caf\xe9'
refused "id café (UTF-8)" "not ASCII" -H "X-Client-Id: café"
refused "id with a tab" "control character" -H $'X-Client-Id: a\tb'
refused "id sent twice" "sent more than once" -H "X-Client-Id: dup1" -H "X-Client-Id: dup2"
refused "id list" "comma" -H "X-Client-Id: dup1, dup2"

# Debounce per document: five PUTs in a burst, one save of the last, 300 ms after it.
# (Bare curls, one process each: request's parsing takes longer than 300 ms on a starved
# CPU, tools/starved.sh.)
put() { curl -s -m 5 -o /dev/null -X PUT --data-binary "$2" "$base/docs/$1"; }
put other x
for v in 1 2 3 4 5; do put readme "v$v"; done
check "not saved before the quiet time" "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$base/docs/readme")" "404"
sleep 1
check "one save after the burst" "$(request '' GET /docs/readme | cut -d'|' -f1)" "200"
check "saved content" "$(cat "$work/body")" "saves=1 content=v5"
check "other document" "$(request '' GET /docs/other >/dev/null; cat "$work/body")" "saves=1 content=x"

# Graceful shutdown drains: a save pending for 300 ms is made before the process exits.
request '' PUT /docs/draft "final" >/dev/null
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then check "exits on SIGTERM" "running" "exited"; else wait "$pid"; check "exit status" "$?" "0"; fi
pid=""
check "pending save drained on SIGTERM" "$(grep -c '^saved draft final$' "$work/out")" "1"
check "saves printed" "$(grep -c '^saved ' "$work/out")" "3"

# Hostile clients, on a server with short timeouts (each check asserts "closed no earlier
# than the timeout and no later than the timeout + --bound"): the idle timeout (8 s) is
# longer than the other windows, so that it cannot be what closes a slowloris or a slow body.
"$SERVER_BIN" --host 127.0.0.1 --port "$port" --idle-timeout 8 --header-timeout 1 --request-timeout 2 \
  --max-connections 50 >"$work/out2" 2>"$work/err2" &
pid=$!
wait_ready
hostile=(--idle 20:8 --slowloris 10:1 --slow-body 5:2 --flood 150:50)
if timeout 120 python3 "$here/../server-support/hostile_clients.py" --port "$port" --bound 5 "${hostile[@]}" >"$work/hostile"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: hostile clients:"
fi
sed "s/^/  /" "$work/hostile"
check "serves after the hostile clients" "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$base/docs/none")" "404"
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
pid=""

echo "$name: $passed passed, $failed failed"
[ "$failed" = 0 ]
