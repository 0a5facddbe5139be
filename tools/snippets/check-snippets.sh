#!/usr/bin/env bash
# check-snippets.sh — the documentation's code must build as written.
#
#   tools/snippets/check-snippets.sh            Swift and C
#   tools/snippets/check-snippets.sh --swift    only the Swift blocks
#   tools/snippets/check-snippets.sh --c        only the C blocks
#   tools/snippets/check-snippets.sh --list     list the blocks and what is done with each
#   tools/snippets/check-snippets.sh --symbols  also the ```swift examples of the doc comments
#                                               of Sources/Sluice, Sources/SluiceFleet and
#                                               Sources/SluiceHTTP (DocC shows them too)
#   tools/snippets/check-snippets.sh --traits   only the ```swift examples of the doc comments
#                                               of the trait modules (SluiceNIO,
#                                               SluiceHummingbird, SluiceVapor, SluiceMetrics)
#
# Swift: every ```swift block of README.md, docs/fleet.md and Sources/Sluice/Sluice.docc/*.md.
#  - A block that starts with `// swift-tools-version` is a package manifest: the
#    first one becomes the consumer package's Package.swift, with its Sluice
#    dependency (`.package(url: …)` or `.package(path: …)`) pointed at this
#    checkout; every other manifest block must equal it. Its first executable
#    target receives the snippets.
#  - Every other block becomes one file of that target, its body inside
#    `func snippet…() async throws { … }` (so each snippet has its own scope:
#    names do not clash; types it declares are local) — or at file scope when
#    it declares an extension or a protocol, which cannot be local. `import`
#    lines move to the top of the file; `import Sluice` is implied, any other
#    module (Foundation for UUID, …) must be imported by the snippet. An
#    ellipsis (…) stands for the reader's own code and is removed. Names the
#    snippets assume (Document, store, …) are declared in
#    template/Sources/App/Scaffolding.swift.
#  - With --symbols, a doc comment's example of module M (SluiceFleet,
#    SluiceHTTP) has `import M` implied too, and the consumer's executable
#    target depends on M's product for the build (the fleet needs hiredis).
#  - The package is built with `swift build` (Swift 6 language mode: tools
#    version 6.x); compiler messages point at the Markdown file and line.
#  - With --traits, the consumer is tools/snippets/traits/Package.swift (Sluice with
#    the traits on, and the frameworks the examples name) and its scaffolding
#    tools/snippets/traits/Sources/App; `make servers-test` runs it in the servers'
#    scratch path (SNIPPETS_SCRATCH), so the frameworks are built once.
# C: every ```c block of README.md is compiled with -std=c11 -Wall -Wextra
#    -Werror against the headers (Sources/*/include) and the CMake-built
#    build/libsluice-core.a (build/libsluice.a and libevent when the block
#    includes sluice_loop.h; run `make build` first, or set SLUICE_BUILD_DIR); a
#    block with main() is linked and run, and when the text before the next
#    plain block says "prints", its standard output must equal that block.
#
# No block may be skipped: code in a ```swift or ```c fence must build. Text that
# is not code (a shell session, an output) goes in a fence without that language.
#
# Environment: SWIFT (swift), CC (cc), SLUICE_BUILD_DIR (build),
# SNIPPETS_WORK (.build-snippets, with --traits .build-snippets-traits: the
# consumer package and its build, kept between runs so that rebuilds are
# incremental), SNIPPETS_SCRATCH (the consumer's scratch path; default its own
# .build), JOBS (2).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
SWIFT=${SWIFT:-swift}
CC=${CC:-cc}
JOBS=${JOBS:-2}
cbuild=${SLUICE_BUILD_DIR:-$root/build}
do_swift=1 do_c=1 list=0 symbols=0 traits=0
for arg in "$@"; do
  case $arg in
    --symbols) symbols=1 ;;
    --traits) traits=1 symbols=1 do_c=0 ;;
    --swift) do_c=0 ;;
    --c) do_swift=0 ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-snippets: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "check-snippets: $*" >&2; exit 1; }
if ((traits)); then
  work=${SNIPPETS_WORK:-$root/.build-snippets-traits}
  template=$here/traits
else
  work=${SNIPPETS_WORK:-$root/.build-snippets}
  template=$here/template
fi
scratch=${SNIPPETS_SCRATCH:-}

# --- extract ------------------------------------------------------------------------
docs=()
if ((!traits)); then
  docs=("$root/README.md" "$root/docs/fleet.md")
  for f in "$root"/Sources/Sluice/Sluice.docc/*.md; do docs+=("$f"); done
fi
blocks=$work/blocks
rm -rf "$blocks"
mkdir -p "$blocks"
((${#docs[@]} == 0)) || awk -v OUT="$blocks" -f "$here/extract.awk" "${docs[@]}"
touch "$blocks/index"
# The modules whose doc comments --symbols checks: the products without a
# trait, or with --traits those of the traits.
if ((traits)); then
  symbol_modules=(SluiceNIO SluiceHummingbird SluiceVapor SluiceMetrics)
else
  symbol_modules=(Sluice SluiceFleet SluiceHTTP)
fi
symbol_dirs=()
for m in "${symbol_modules[@]}"; do [[ -d $root/Sources/$m ]] && symbol_dirs+=("$root/Sources/$m"); done
# The module of a doc comment's block, other than Sluice (empty for a Markdown file).
block_module() {
  local m
  for m in "${symbol_modules[@]}"; do
    [[ $m != Sluice && $1 == "$root/Sources/$m/"*.swift ]] && { echo "$m"; return; }
  done
  return 0
}
if ((symbols)); then
  # The Swift layer's doc comments: each source file seen as Markdown (the
  # text of its /// lines, every other line left empty so that line numbers
  # stay those of the .swift file).
  rm -rf "$work/symbols"
  while IFS= read -r f; do
    mkdir -p "$work/symbols/$(dirname "${f#"$root"/}")"
    sed -E -e 's#^[[:space:]]*/// ?##;t' -e 's#.*##' "$f" >"$work/symbols/${f#"$root"/}"
  done < <(grep -rl '^[[:space:]]*/// *```' "${symbol_dirs[@]}" --include='*.swift' | sort)
  if [[ -d $work/symbols ]]; then
    start=$(($(wc -l <"$blocks/index") + 1))
    awk -v OUT="$blocks" -v FIRST="$start" -f "$here/extract.awk" $(find "$work/symbols" -name '*.swift' | sort)
    sed -i "s#$work/symbols/#$root/#" "$blocks/index"
  fi
fi

rel() { echo "${1#"$root"/}"; }
is_manifest() { grep -m1 -v '^[[:space:]]*$' "$1" | grep -q '^// swift-tools-version'; }
# A snippet that declares an extension or a protocol (at its own top level) stays at file scope.
needs_file_scope() { grep -Eq '^(public |internal |private |fileprivate )?(extension|protocol)[[:space:]]' "$1"; }

if ((list)); then
  while read -r id lang file line prose; do
    case $lang in
      swift)
        if is_manifest "$blocks/$id.block"; then what="manifest of the consumer package"
        elif needs_file_scope "$blocks/$id.block"; then what="built at file scope"
        else what="built in its own function"; fi ;;
      c)
        if grep -q 'main[[:space:]]*(' "$blocks/$id.block"; then what="compiled, linked and run"
        else what="compiled"; fi ;;
      *) what="not code (not checked)" ;;
    esac
    printf '%s:%s  %-6s %s\n' "$(rel "$file")" "$line" "$lang" "$what"
  done <"$blocks/index"
  exit 0
fi

# --- Swift ----------------------------------------------------------------------------
check_swift() {
  local app=$work/consumer manifest="" target="" n=0
  mkdir -p "$app"
  # The consumer reaches this checkout as ../sluice, so the package identity is
  # "sluice" whatever the checkout's directory is called.
  ln -sfn "$root" "$work/sluice"

  ((traits)) && manifest=$template/Package.swift
  while read -r id lang file line prose; do
    [[ $lang == swift ]] || continue
    local block=$blocks/$id.block
    if ((!traits)) && is_manifest "$block"; then
      if [[ -z $manifest ]]; then
        manifest=$block
        echo "manifest: $(rel "$file"):$line"
      elif ! diff -q -B -w "$manifest" "$block" >/dev/null; then
        diff -B -w "$manifest" "$block" >&2 || true
        fail "$(rel "$file"):$line: this manifest differs from the first one (above); keep them equal"
      fi
    fi
  done <"$blocks/index"
  [[ -n $manifest ]] || fail "no \`\`\`swift block starting with // swift-tools-version (the consumer manifest) in the README"

  # The Sluice dependency, pointed at this checkout (the traits' manifest
  # names it so already, with its traits).
  local deps
  deps=$(grep -v '^[[:space:]]*//' "$manifest" | grep -Ec '\.package\((url|path): *"[^"]*sluice[^"]*"' || true)
  [[ $deps == 1 ]] || fail "the manifest must name Sluice exactly once as .package(url: \"…sluice…\", …) or .package(path: \"…\") (found $deps)"
  if ((traits)); then
    cp "$manifest" "$app/Package.swift.new"
  else
    sed -E '/^[[:space:]]*\/\//!s#\.package\((url|path): *"[^"]*sluice[^"]*"[^)]*\)#.package(path: "../sluice")#' "$manifest" >"$app/Package.swift.new"
  fi
  target=$(sed -nE 's/.*\.executableTarget\( *name: *"([^"]+)".*/\1/p' "$manifest" | head -n 1)
  [[ -n $target ]] || fail "the manifest declares no .executableTarget(name: …) to hold the snippets"
  # The products of the other modules whose doc comments have examples (--symbols).
  local m products=""
  for m in $(while read -r id lang file line prose; do
               [[ $lang == swift ]] && block_module "$file"
             done <"$blocks/index" | sort -u); do
    products+=", .product(name: \"$m\", package: \"sluice\")"
  done
  if [[ -n $products ]]; then
    grep -Eq '\.product\(name: *"Sluice", *package: *"sluice"\)' "$app/Package.swift.new" ||
      fail "the manifest's target does not depend on .product(name: \"Sluice\", package: \"sluice\"): cannot add${products#,}"
    sed -i -E "s#\.product\(name: *\"Sluice\", *package: *\"sluice\"\)#&$products#" "$app/Package.swift.new"
  fi

  # Sources: the template's files, then one file per snippet. Files are only
  # rewritten when they change, so that rebuilds stay incremental.
  local out=$app/Sources/$target staging=$work/staging
  rm -rf "$staging"
  mkdir -p "$staging" "$out"
  cp "$template"/Sources/App/*.swift "$staging/"
  while read -r id lang file line prose; do
    [[ $lang == swift ]] || continue
    local block=$blocks/$id.block
    is_manifest "$block" && continue
    n=$((n + 1))
    local name rel_file src=$staging/Snippet$id.swift
    rel_file=$(rel "$file")
    name="snippet${id}_$(echo "$rel_file" | tr -c 'A-Za-z0-9\n' '_')"
    {
      echo "// $rel_file:$line (generated by tools/snippets/check-snippets.sh)"
      echo "import Sluice"
      m=$(block_module "$file")
      [[ -z $m ]] || echo "import $m"
      grep -E '^[[:space:]]*(@preconcurrency[[:space:]]+)?import[[:space:]]' "$block" | sed 's/^[[:space:]]*//' || true
      if needs_file_scope "$block"; then
        echo "#sourceLocation(file: \"$file\", line: $((line + 1)))"
        sed -E -e 's/…//g' -e 's/^[[:space:]]*(@preconcurrency[[:space:]]+)?import[[:space:]].*$//' "$block"
        echo "#sourceLocation()"
      else
        echo "func $name() async throws {"
        echo "#sourceLocation(file: \"$file\", line: $((line + 1)))"
        sed -E -e 's/…//g' -e 's/^[[:space:]]*(@preconcurrency[[:space:]]+)?import[[:space:]].*$//' "$block"
        echo "#sourceLocation()"
        echo "}"
      fi
    } >"$src"
  done <"$blocks/index"
  ((n > 0)) || fail "no Swift snippet found"

  cmp -s "$app/Package.swift.new" "$app/Package.swift" 2>/dev/null || cp "$app/Package.swift.new" "$app/Package.swift"
  rm -f "$app/Package.swift.new"
  for f in "$out"/*.swift; do
    [[ -e $f && ! -e $staging/${f##*/} ]] && rm -f "$f"
  done
  for f in "$staging"/*.swift; do
    cmp -s "$f" "$out/${f##*/}" 2>/dev/null || cp "$f" "$out/${f##*/}"
  done

  echo "swift: $n snippets in $(rel "$out") (Swift 6 language mode), building..."
  local log=$work/swift-build.log
  # SwiftPM does not notice files added to or removed from the checkout
  # behind the ../sluice link: drop the build plan (not the objects) so that
  # it is made again from the sources as they are.
  local build=("$SWIFT" build --package-path "$app" -j "$JOBS")
  if [[ -n $scratch ]]; then
    build+=(--scratch-path "$scratch")
    rm -f "$scratch/debug.yaml"
  else
    rm -f "$app/.build/debug.yaml"
  fi
  if ! "${build[@]}" >"$log" 2>&1; then
    grep -E -A4 'error:' "$log" | grep -v '^\[' >&2 || tail -n 30 "$log" >&2
    echo "check-snippets: the documented Swift code does not build (full log: $(rel "$log"))" >&2
    return 1
  fi
  grep -E '\.md:[0-9]+:[0-9]+: warning:' "$log" | sort -u || true
  echo "swift: all $n snippets build"
}

# --- C ----------------------------------------------------------------------------------
check_c() {
  local n=0 status=0 includes=() d
  for d in "$root"/Sources/*/include; do includes+=(-I "$d"); done
  [[ -f $cbuild/libsluice.a ]] || fail "$cbuild/libsluice.a not found: run \`make build\` first (or set SLUICE_BUILD_DIR)"
  # The core alone (libc only) when the block does not use the loop layer.
  local core=() full=()
  full=("$cbuild/libsluice.a" $(pkg-config --libs libevent_core 2>/dev/null || echo -levent_core) -levent_pthreads -lpthread)
  if [[ -f $cbuild/libsluice-core.a ]]; then core=("$cbuild/libsluice-core.a"); else core=("${full[@]}"); fi
  mkdir -p "$work/c"
  local ids=() langs=() files=() lines=() proses=()
  while read -r id lang file line prose; do
    ids+=("$id") langs+=("$lang") files+=("$file") lines+=("$line") proses+=("$prose")
  done <"$blocks/index"
  local i
  for ((i = 0; i < ${#ids[@]}; i++)); do
    [[ ${langs[i]} == c ]] || continue
    [[ ${files[i]} == "$root/README.md" ]] || continue # docs/fleet.md's C blocks are fragments
    n=$((n + 1))
    local id=${ids[i]} where
    where="$(rel "${files[i]}"):${lines[i]}"
    local src=$work/c/snippet$id.c exe=$work/c/snippet$id
    { echo "#line $((lines[i] + 1)) \"${files[i]}\""; cat "$blocks/$id.block"; } >"$src"
    if ! grep -q 'main[[:space:]]*(' "$blocks/$id.block"; then
      if "$CC" -std=c11 -Wall -Wextra -Werror -Wno-unused-function "${includes[@]}" -c -o "$exe.o" "$src"; then
        echo "c: $where compiles"
      else
        echo "check-snippets: $where does not compile" >&2; status=1
      fi
      continue
    fi
    local link=("${core[@]}")
    if grep -q 'sluice_loop\.h' "$blocks/$id.block"; then link=("${full[@]}"); fi
    if ! "$CC" -std=c11 -Wall -Wextra -Werror "${includes[@]}" -o "$exe" "$src" "${link[@]}"; then
      echo "check-snippets: $where does not compile and link" >&2; status=1; continue
    fi
    local rc=0
    "$exe" >"$exe.out" || rc=$?
    if ((rc != 0)); then
      echo "check-snippets: $where exits with status $rc (output in $(rel "$exe.out"))" >&2; status=1; continue
    fi
    # The expected output: the next block, when it has no language and the text before it says "prints".
    local j=$((i + 1))
    if ((j < ${#ids[@]})) && [[ ${langs[j]} == - && ${proses[j]} == prints && ${files[j]} == "${files[i]}" ]]; then
      if diff -u "$blocks/${ids[j]}.block" "$exe.out" >"$exe.diff"; then
        echo "c: $where runs and prints what $(rel "${files[j]}"):${lines[j]} shows"
      else
        echo "check-snippets: $where prints something else than $(rel "${files[j]}"):${lines[j]} shows (- documented, + actual):" >&2
        cat "$exe.diff" >&2
        status=1
      fi
    else
      echo "c: $where runs (no documented output follows it)"
    fi
  done
  ((n > 0)) || fail "no C block found in the README"
  return $status
}

status=0
if ((do_swift)); then check_swift || status=1; fi
if ((do_c)); then check_c || status=1; fi
if ((status)); then
  echo "check-snippets: FAILED" >&2
else
  echo "check-snippets: documentation code builds and runs as written"
fi
exit $status
