#!/bin/sh
# starved.sh — runs a command on one CPU shared with two CPU-bound processes,
# the way a loaded CI machine treats a test suite (CONTRIBUTING.md).
#
#   tools/starved.sh [-n RUNS] COMMAND [ARG...]
#
# The command, and everything it starts, is pinned to CPU $STARVE_CPU
# (default 0) beside two busy loops pinned there too; it runs RUNS times in
# a row (default 1) and the script fails on the first run that fails. The busy
# loops are stopped however the script ends.
set -eu

runs=1
if [ "${1:-}" = "-n" ]; then
    runs=$2
    shift 2
fi
[ $# -gt 0 ] || { echo "usage: $0 [-n RUNS] COMMAND [ARG...]" >&2; exit 2; }
command -v taskset >/dev/null 2>&1 || { echo "$0: taskset not found (util-linux)" >&2; exit 2; }
cpu=${STARVE_CPU:-0}

hogs=""
stop_hogs() {
    for pid in $hogs; do kill "$pid" 2>/dev/null || true; done
    hogs=""
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in 1 2; do
    taskset -c "$cpu" sh -c 'while :; do :; done' &
    hogs="$hogs $!"
done

i=1
while [ "$i" -le "$runs" ]; do
    echo "starved.sh: run $i of $runs on CPU $cpu beside two busy loops: $*"
    if ! taskset -c "$cpu" "$@"; then
        echo "starved.sh: run $i failed" >&2
        exit 1
    fi
    i=$((i + 1))
done
echo "starved.sh: $runs run(s) passed"
