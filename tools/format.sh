#!/bin/sh
# format.sh — formats the tree's C with clang-format (.clang-format) and its Swift
# with swift-format (.swift-format, part of the Swift toolchain).
#
#   tools/format.sh           rewrite the files in place (make format)
#   tools/format.sh --check   change nothing; list the files that are not formatted
#                             and fail if there is one (make format-check, CI)
set -eu
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
--check) check=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null 2>&1 ||
    { echo "$0: $CLANG_FORMAT not found (apt-get install clang-format)" >&2; exit 2; }
SWIFT=${SWIFT:-swift}

# Tracked files only: build folders, checkouts and generated files are never touched.
c_files=$(git ls-files -- 'Sources/*.c' 'Sources/*.h' 'ctests/*.c' 'ctests/*.h' 'fuzz/*.c' 'tools/*.c' \
    'tools/*.h' 'Benchmarks/Sources/*.c' 'Benchmarks/Sources/*.h' 'Examples/*.c')
swift_files=$(git ls-files -- 'Sources/*.swift' 'Tests/*.swift' 'Benchmarks/Sources/*.swift' \
    'Benchmarks/Benchmarks/*.swift' 'Examples/*/Sources/*.swift')

if [ "$check" -eq 0 ]; then
    # shellcheck disable=SC2086
    "$CLANG_FORMAT" -i $c_files
    # shellcheck disable=SC2086
    "$SWIFT" format format --configuration .swift-format -i $swift_files
    exit 0
fi

bad=0
for f in $c_files; do
    if ! "$CLANG_FORMAT" "$f" | cmp -s - "$f"; then echo "not formatted: $f"; bad=1; fi
done
for f in $swift_files; do
    if ! "$SWIFT" format format --configuration .swift-format "$f" | cmp -s - "$f"; then
        echo "not formatted: $f"
        bad=1
    fi
done
if [ "$bad" -ne 0 ]; then
    echo "$0: run 'make format' (tools/format.sh) and commit the result" >&2
    exit 1
fi
echo "format: every C and Swift file is formatted"
