#!/usr/bin/env bash
# Tests the example server (Hummingbird or Vapor: same routes and answers) with curl on
# loopback: the quota's status codes and header values (computed by hand below), the
# problem+json body, the client id rule (raw bytes), the two plans of two windows on /api
# (a free client refused by each window in turn, a pro client admitted), the per-document
# debounce, and the drain of pending saves on SIGTERM. Then, on a second server with short timeouts, the
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

# Plans on /api: two windows per plan (free: 2 a second and 5 a minute; pro: 10 a second
# and 100 a minute), the plan from the API key (a key that starts with "pro-" is on pro).
# api KEY N: N requests on one connection (one curl, so that they fall well inside half a
# second); prints "STATUS|Retry-After|RateLimit-Policy|RateLimit|Content-Type" for each,
# one a line, and leaves the bodies in $work/api1 ... $work/apiN.
api() {
  local args=(-s -m 10 -H "X-API-Key: $1")
  for i in $(seq 1 "$2"); do args+=(-o "$work/api$i" "$base/api"); done
  curl "${args[@]}" -w '%{http_code}|%header{retry-after}|%header{ratelimit-policy}|%header{ratelimit}|%header{content-type}\n'
}
json() { python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print(v if isinstance(v, (str, int)) else json.dumps(v))' "$1" <"$2" 2>&1; }
free='"second";q=2;w=1, "minute";q=5;w=60'
pro='"second";q=10;w=1, "minute";q=100;w=60'
text='text/plain; charset=utf-8'
problem='application/problem+json'
# Free: two at once pass both windows; the third is refused by "second" alone (back in
# 0.5 s: Retry-After 1), and "minute" is not charged for it (r=3 still).
mapfile -t answers < <(api free-alice 3)
check "free 1" "${answers[0]:-}" "200||$free|\"second\";r=1;t=1, \"minute\";r=4;t=12|$text"
check "free 1 body" "$(cat "$work/api1")" "hello free-alice (free)"
check "free 2" "${answers[1]:-}" "200||$free|\"second\";r=0;t=1, \"minute\";r=3;t=24|$text"
check "free 3 (second)" "${answers[2]:-}" "429|1|$free|\"second\";r=0;t=1, \"minute\";r=3;t=24|$problem"
check "free 3 problem type" "$(json type "$work/api3")" "https://iana.org/assignments/http-problem-types#quota-exceeded"
check "free 3 problem status" "$(json status "$work/api3")" "429"
check "free 3 violated-policies" "$(json violated-policies "$work/api3")" '["second"]'
check "free 3 detail" "$(json detail "$work/api3" | grep -c "retry after 1 second")" "1"
# After a second "second" is whole again; three more, 0.6 s apart ("second" always
# admits), use up "minute" (5 in all); the next is refused by "minute" alone, until
# 12 s after the first request (one unit of "minute" is 12 s).
sleep 1.1
# (4: "minute" at 36 s, t rounded up from 36 s less the time since the first request)
check "free 4" "$(api free-alice 1 | cut -d'|' -f1,4 | sed -E 's/^200\|"second";r=[0-9]+;t=[0-9]+, "minute";r=2;t=3[0-9]$/ok/')" "ok"
sleep 0.6
check "free 5" "$(api free-alice 1 | cut -d'|' -f1)" "200"
sleep 0.6
check "free 6" "$(api free-alice 1 | cut -d'|' -f1)" "200"
sleep 0.6
IFS='|' read -r status retry policy ratelimit type < <(api free-alice 1)
check "free 7 (minute): status" "$status|$policy|$type" "429|$free|$problem"
check "free 7 violated-policies" "$(json violated-policies "$work/api1")" '["minute"]'
check "free 7 Retry-After in 1..11" "$([ "${retry:-0}" -ge 1 ] 2>/dev/null && [ "$retry" -le 11 ] && echo yes || echo "$retry")" "yes"
check "free 7 RateLimit" "$(sed -E 's/^"second";r=[0-9]+;t=[0-9]+, "minute";r=0;t=(5[0-9]|60)$/ok/' <<<"$ratelimit")" "ok"
# Pro, meanwhile: admitted, with its own windows.
mapfile -t answers < <(api pro-bob 3)
check "pro 1..3" "$(printf '%s\n' "${answers[@]}" | cut -d'|' -f1,2,3,5 | sort | uniq -c | sed 's/^ *//')" "3 200||$pro|$text"
check "pro 3 minute" "$(cut -d'|' -f4 <<<"${answers[2]:-}" | sed 's/^"second";r=[0-9]*;t=[01], //')" '"minute";r=97;t=2'
check "pro body" "$(cat "$work/api3")" "hello pro-bob (pro)"
# No API key: keyed on the address, on free.
check "no key" "$(api '' 1 | cut -d'|' -f1,3)" "200|$free"
check "no key body" "$(cat "$work/api1")" "hello 127.0.0.1 (free)"

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
