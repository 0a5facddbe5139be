#!/usr/bin/env bash
# consumer-check: a package that depends on Sluice and uses only the Sluice library
# (default traits) must not fetch SwiftNIO, Hummingbird, Vapor, swift-metrics, swift-log
# or swift-service-lifecycle; one that turns the NIO trait on must fetch swift-nio
# (the check can tell the two apart). Resolution only: nothing is compiled.
#
# usage: tools/consumer-check.sh   (from anywhere; uses a temporary folder)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-consumer.XXXXXX")"
trap 'rm -rf "$work"' EXIT
forbidden='swift-nio|hummingbird|vapor|swift-metrics|swift-log|swift-service-lifecycle'
passed=0
failed=0

make_consumer() { # DIR TRAITS-ARGUMENT
  mkdir -p "$1/Sources/App"
  cat > "$1/Package.swift" <<MANIFEST
// swift-tools-version:6.1
import PackageDescription
let package = Package(
    name: "Consumer",
    dependencies: [.package(name: "Sluice", path: "$repo"$2)],
    targets: [.executableTarget(name: "App", dependencies: [.product(name: "Sluice", package: "Sluice")])]
)
MANIFEST
  echo 'import Sluice' > "$1/Sources/App/main.swift"
}

fetched() { # DIR: the packages SwiftPM checked out or pinned
  { ls "$1/.build/checkouts" 2>/dev/null || true
    grep -o '"identity" *: *"[^"]*"' "$1/Package.resolved" 2>/dev/null | sed 's/.*: *"//; s/"$//' || true
  } | sort -u
}

check() { # NAME CONDITION MESSAGE
  if eval "$2"; then echo "ok: $1"; passed=$((passed + 1)); else echo "FAIL: $1: $3"; failed=$((failed + 1)); fi
}

# 1. Sluice only, default traits.
make_consumer "$work/plain" ""
(cd "$work/plain" && swift package resolve >"$work/plain.log" 2>&1) || { cat "$work/plain.log"; exit 1; }
plain="$(fetched "$work/plain")"
echo "Sluice only fetched: ${plain:-nothing}"
check "a Sluice-only consumer fetches none of NIO, Hummingbird, Vapor, metrics, log, lifecycle" \
  '! grep -Eq "^($forbidden)\$" <<<"$plain"' "fetched: $(grep -E "^($forbidden)\$" <<<"$plain" | tr '\n' ' ')"

# 2. Positive control: the NIO trait fetches swift-nio (and not Hummingbird or Vapor).
make_consumer "$work/nio" ', traits: ["NIO"]'
(cd "$work/nio" && swift package resolve >"$work/nio.log" 2>&1) || { cat "$work/nio.log"; exit 1; }
nio="$(fetched "$work/nio")"
check "the NIO trait fetches swift-nio" 'grep -qx swift-nio <<<"$nio"' "fetched: $(tr '\n' ' ' <<<"$nio")"
check "the NIO trait fetches neither Hummingbird nor Vapor" '! grep -Eq "^(hummingbird|vapor)\$" <<<"$nio"' \
  "fetched: $(tr '\n' ' ' <<<"$nio")"

echo "consumer-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
