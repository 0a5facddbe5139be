# Sluice — the README's commands.
#
#   make test       C core (CMake + ctest), then the Swift package (swift build, swift test,
#                   and swift test under ThreadSanitizer)
#   make bench      the benchmark suite: Sluice beside Dispatch baselines, libevent's timers and
#                   the hardware floor, ratios in one run (QUICK=1: reduced sizes, under 3 min)
#   make sanitize   C core under ASan+UBSan and under TSan, Swift tests under TSan
#   make fuzz       libFuzzer harnesses, SECONDS each (default 60)
#   make format     format the C and Swift sources (format-check: fail when one is not)
#   make test-starved  the ASan C suite and the Swift tests, twice each, on one CPU beside
#                   two busy loops (before submitting: CONTRIBUTING.md)
#   make install-test   install into a temporary prefix and build consumers against it: the
#                   core alone (pkg-config sluice-core) and the loop layer (pkg-config sluice),
#                   shared and static, and find_package(sluice)
#   make test-topology  the fleet limiter behind Redis Sentinel and Redis Cluster, through
#                   real failovers (ctest label "topology", left out of the other runs; about 40 s)
#   make core-only  the core builds and links against libc alone (ctest label "split")
#   make deps       install libevent-dev, libhiredis-dev, redis-server, cmake, pkg-config, curl
#                   with apt-get when missing
#   make clean
#
# Build folders stay at the root (build/, build-*/): SwiftPM compiles every
# .c under Sources/ (CSluice, CSluiceLoop, CSluiceTrace, ...), so no CMake
# folder may live there.

SHELL := /bin/sh

CMAKE ?= cmake
CTEST ?= ctest
SWIFT ?= swift
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CTEST_FLAGS ?= --output-on-failure
# Topology tests (a Sentinel failover: seconds of real time) run in make test-topology only.
CTEST_EXCLUDE ?= -LE topology
SECONDS ?= 60
QUICK ?=

# clang for sanitizer and fuzz builds: the Swift toolchain's when present.
CLANG ?= $(shell if [ -x /opt/swift/usr/bin/clang ]; then echo /opt/swift/usr/bin/clang; \
                 else command -v clang 2>/dev/null || echo clang; fi)

# sudo only when not root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build test ctest swift-test bench sanitize sanitize-address sanitize-thread \
        sanitize-swift fuzz install-test core-only clean

all: build

# --- dependencies ------------------------------------------------------------
deps:
	@missing=""; \
	command -v cmake >/dev/null 2>&1 || missing="$$missing cmake"; \
	command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libevent_core; then \
	  missing="$$missing libevent-dev"; \
	fi; \
	if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists hiredis; then \
	  missing="$$missing libhiredis-dev"; \
	fi; \
	if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then \
	  missing="$$missing libssl-dev"; \
	fi; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if [ -z "$$missing" ]; then \
	  echo "deps: libevent-dev, libhiredis-dev, libssl-dev, redis-server, cmake, pkg-config, curl are present"; \
	  exit 0; \
	fi; \
	echo "deps: installing$$missing"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: apt-get not found; install these yourself:$$missing" >&2; exit 1; \
	fi; \
	if [ -n "$(SUDO)" ] && ! command -v sudo >/dev/null 2>&1; then \
	  echo "deps: not root and no sudo; install these as root:$$missing" >&2; exit 1; \
	fi; \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

# --- C core --------------------------------------------------------------------
build: deps
	$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	$(CMAKE) --build build -j$(JOBS)

ctest: build
	$(CTEST) --test-dir build $(CTEST_EXCLUDE) $(CTEST_FLAGS)

# --- everything: C core, then Swift ----------------------------------------------
test: deps build
	$(CTEST) --test-dir build $(CTEST_EXCLUDE) $(CTEST_FLAGS)
	$(SWIFT) build
	$(SWIFT) test
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan

swift-test:
	$(SWIFT) build
	$(SWIFT) test

# --- benchmark -------------------------------------------------------------------
# The suite (Benchmarks/, a SwiftPM package of its own; docs/benchmarks.md):
# sluice-c, sluice-swift, dispatch-naive, dispatch-tuned, libevent-timers and
# floor on every scenario, one process per case (the per-call cases three times,
# in turn, keeping the median), ratios taken in one run. Prints the table and the
# goals, writes Benchmarks/results/latest.json and, for a full run,
# Benchmarks/results/KIND.json (the newest run of its machine kind). About 10 min
# with the build; QUICK=1: keys up to 100k, under 3 min.
BENCH_BIN := Benchmarks/.build/release/sluice-bench

.PHONY: bench-build bench-report

bench: deps bench-build
	$(BENCH_BIN) run $(if $(filter 1 yes true,$(QUICK)),--quick)

bench-build:
	$(SWIFT) build -c release --package-path Benchmarks --product sluice-bench

# docs/benchmarks.md and docs/charts/*.svg from Benchmarks/results/latest.json.
bench-report: bench-build
	$(BENCH_BIN) report

# --- sanitizers --------------------------------------------------------------------
sanitize: sanitize-address sanitize-thread sanitize-swift

# The C build under ASan+UBSan (build-asan/), and how its tests run. Its tests' time limit
# is 30 min instead of 5: a limit only catches a hang, and the CPU-bound tests run several
# times slower under ASan on a loaded machine (make test-starved).
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
.PHONY: build-asan
build-asan: deps
	$(CMAKE) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=$(CLANG) \
	  -DSLUICE_SANITIZE=address -DSLUICE_TEST_TIMEOUT=1800
	$(CMAKE) --build build-asan -j$(JOBS)

sanitize-address: build-asan
	$(ASAN_ENV) $(CTEST) --test-dir build-asan $(CTEST_EXCLUDE) $(CTEST_FLAGS)

sanitize-thread: deps
	$(CMAKE) -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=$(CLANG) \
	  -DSLUICE_SANITIZE=thread -DSLUICE_TEST_TIMEOUT=1800
	$(CMAKE) --build build-tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(CTEST) --test-dir build-tsan $(CTEST_EXCLUDE) $(CTEST_FLAGS)

sanitize-swift:
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan

# --- formatting (.clang-format, .swift-format) -----------------------------------------------
# format: rewrites every tracked C and Swift file; format-check (CI): fails on one that is not
# formatted. clang-format comes from Debian (apt-get install clang-format); swift-format is
# part of the Swift toolchain.
.PHONY: format format-check
format:
	tools/format.sh
format-check:
	tools/format.sh --check

# --- a loaded machine (run before submitting; CONTRIBUTING.md) ------------------------------
# test-starved: the ASan+UBSan C suite, then the Swift tests, each STARVED_RUNS times in a
# row (default 2) on one CPU shared with two busy loops (tools/starved.sh): the way a busy
# two-core CI machine runs them. A test that passes only when its threads are prompt fails
# here. Slow (the C suite alone takes tens of minutes): not part of make test.
STARVED_RUNS ?= 2
.PHONY: test-starved
test-starved: build-asan
	$(ASAN_ENV) tools/starved.sh -n $(STARVED_RUNS) $(CTEST) --test-dir build-asan $(CTEST_EXCLUDE) $(CTEST_FLAGS)
	$(SWIFT) build --build-tests
	tools/starved.sh -n $(STARVED_RUNS) $(SWIFT) test --skip-build

# --- fuzzing ------------------------------------------------------------------------
# Each fuzz_<name> runs SECONDS on a copy of fuzz/corpus/<name>/ (the checked-in
# corpus is never modified), with fuzz/<name>.dict when it exists; crash inputs
# land in build-fuzz/run/<name>/.
fuzz: deps
	$(CMAKE) -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=$(CLANG) \
	  -DSLUICE_FUZZ=ON -DSLUICE_BUILD_TESTS=OFF
	$(CMAKE) --build build-fuzz -j$(JOBS) --target fuzz-build
	@status=0; count=0; \
	for bin in build-fuzz/fuzz_*; do \
	  [ -f "$$bin" ] && [ -x "$$bin" ] || continue; \
	  name=$${bin##*/fuzz_}; work=build-fuzz/run/$$name; \
	  rm -rf "$$work"; mkdir -p "$$work/corpus"; \
	  if [ -d "fuzz/corpus/$$name" ]; then cp -R "fuzz/corpus/$$name/." "$$work/corpus/"; fi; \
	  echo "=== fuzz_$$name for $(SECONDS) s (corpus: $$(ls "$$work/corpus" | wc -l) inputs)"; \
	  count=$$((count + 1)); dict=""; \
	  if [ -f "fuzz/$$name.dict" ]; then dict="-dict=fuzz/$$name.dict"; fi; \
	  if ! "$$bin" -max_total_time=$(SECONDS) -print_final_stats=1 $$dict \
	       -artifact_prefix="$$work/" "$$work/corpus"; then \
	    echo "=== fuzz_$$name FAILED: see $$work/ (crash-*, leak-*, timeout-*)"; status=1; \
	  fi; \
	done; \
	if [ "$$count" -eq 0 ]; then echo "fuzz: no fuzz_* harness was built (fuzz/fuzz_*.c)" >&2; exit 1; fi; \
	exit $$status

# --- install --------------------------------------------------------------------------
install-test: build
	$(CTEST) --test-dir build -R '^install-consumer$$' $(CTEST_FLAGS)

core-only: build
	$(CTEST) --test-dir build -L split $(CTEST_FLAGS)

# test-topology: the ctest label "topology" (test_fleet_sentinel: a primary, a replica and
# sentinels on loopback, forced and SIGKILL failovers; test_fleet_cluster: a 3-primary
# Redis Cluster, slot moves and a node killed; test_fleet_cluster_failover: 3 primaries with
# a replica each, a primary killed and its replica promoted); needs redis-server and redis-cli.
.PHONY: test-topology
test-topology: deps
	$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	$(CMAKE) --build build -j$(JOBS) --target test_fleet_sentinel test_fleet_cluster \
		test_fleet_cluster_failover sluice-trace
	$(CTEST) --test-dir build -L topology $(CTEST_FLAGS)

clean:
	rm -rf build build-asan build-tsan build-fuzz .build .build-tsan .build-snippets Benchmarks/.build

# --- documentation code -------------------------------------------------------------------
# Every ```swift block of the README, the DocC catalog and the doc comments of Sluice,
# SluiceFleet and SluiceHTTP built in a consumer package (Swift 6 mode), every ```c block
# of the README compiled against build/ and run, its output compared with the README's
# (tools/snippets/check-snippets.sh; its consumer package and build in .build-snippets).
.PHONY: snippets
snippets: build
	tools/snippets/check-snippets.sh --symbols

# --- soak (not part of make test) -------------------------------------------------------------
# The example server (Examples/http-server) under two wrk runs at once for SOAK_SECONDS
# (default 180): the quota endpoint and the debounced changes endpoint; then a checker
# (soak_check.py): every client's admissions within its quota, every notification line's
# count exact. Figures in docs/reliability.md.
SOAK_SECONDS ?= 180
.PHONY: soak
soak: build
	sh Examples/http-server/soak.sh build/sluice-http-example build/soak $(SOAK_SECONDS)

# --- servers (docs/servers.md; not part of make test: the frameworks take minutes to build) ---
# consumer-check: a package using only the Sluice library fetches no NIO, Hummingbird,
# Vapor, swift-metrics (package traits, all off by default).
# servers-test: one build of the root package with the server traits on (SluiceNIO,
# SluiceHummingbird, SluiceVapor, SluiceMetrics and their tests), the tests; then each
# example built as the standalone package a user runs (`swift run --package-path ...`) and
# tested with curl (Examples/*/test.sh). The examples are built in the same scratch path:
# SwiftPM reuses the frameworks compiled for the tests (Sluice's modules, the example and
# a few modules whose flags differ compile again), so CI builds NIO, Hummingbird and Vapor
# once. Last, the trait modules' doc-comment examples are built the same way, in a consumer
# package with every trait on (check-snippets.sh --traits). SwiftPM keeps one cached build plan per scratch path (debug.yaml), not per root
# package: it is removed before each build so that each package's own plan is made.
SERVERS_SCRATCH ?= .build-servers
SERVERS_TRAITS ?= NIO,Hummingbird,Vapor,Metrics
.PHONY: consumer-check servers-test servers-bench
consumer-check:
	tools/consumer-check.sh
servers-test:
	rm -f $(SERVERS_SCRATCH)/debug.yaml
	$(SWIFT) build --build-tests --traits $(SERVERS_TRAITS) --scratch-path $(SERVERS_SCRATCH) -j $(JOBS)
	$(SWIFT) test --skip-build --traits $(SERVERS_TRAITS) --scratch-path $(SERVERS_SCRATCH) \
	  --filter 'NIOEngineTests|Sluice(Hummingbird|Vapor|Metrics)Tests'
	rm -f $(SERVERS_SCRATCH)/debug.yaml
	$(SWIFT) build --package-path Examples/hummingbird-server --scratch-path $(SERVERS_SCRATCH) -j $(JOBS)
	SERVER_BIN=$(SERVERS_SCRATCH)/debug/hummingbird-server Examples/hummingbird-server/test.sh
	rm -f $(SERVERS_SCRATCH)/debug.yaml
	$(SWIFT) build --package-path Examples/vapor-server --scratch-path $(SERVERS_SCRATCH) -j $(JOBS)
	SERVER_BIN=$(SERVERS_SCRATCH)/debug/vapor-server Examples/vapor-server/test.sh
	SNIPPETS_SCRATCH=$(SERVERS_SCRATCH) tools/snippets/check-snippets.sh --traits

# servers-bench (not CI): the middleware's cost, wrk on loopback against the Hummingbird example
# (release) with and without the middleware at 100,000 distinct clients (docs/servers.md).
# Variables of Examples/hummingbird-server/bench.sh pass through: ROUNDS, DURATION,
# CONNECTIONS, SERVER_CPUS, WRK_CPUS, PERF_STAT.
servers-bench:
	Examples/hummingbird-server/bench.sh
