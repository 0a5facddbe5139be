#!/usr/bin/env bash
# The Vapor example answers exactly as the Hummingbird one: the same curl test.
# usage: SERVER_BIN=/path/to/vapor-server Examples/vapor-server/test.sh
#   (without SERVER_BIN this package is built in debug and its binary used)
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${SERVER_BIN:-}" ]; then
  swift build --package-path "$here" >&2 || exit 1
  SERVER_BIN="$(swift build --package-path "$here" --show-bin-path)/vapor-server"
fi
SERVER_BIN="$SERVER_BIN" SERVER_NAME=vapor-server exec "$here/../hummingbird-server/test.sh"
