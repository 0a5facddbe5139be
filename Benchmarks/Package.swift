// swift-tools-version:6.1
//
// Sluice's benchmark suite: a package of its own beside the library, so that
// `swift build` / `swift test` at the root never pay for the benchmark
// dependencies (docs/benchmarks.md, shared build recipes).
//
// Targets:
//  - CBench:         C drivers for `sluice-c` (the core and the loop layer),
//                    `sluice-redis` and `redis-per-call` (the fleet scenario, fleet.c),
//                    `libevent-timers` (one struct event per key on libevent's
//                    heap) and `floor` (one random access into N 64-byte records).
//  - BenchSuite:     the workloads, the Swift implementations (`sluice-swift`,
//                    `dispatch-naive`, `dispatch-tuned`) and the runner.
//  - BenchReport:    turns Benchmarks/results/latest.json into docs/benchmarks.md
//                    and docs/charts/*.svg (no dependency on Sluice).
//  - SluiceBench:    the `sluice-bench` command: `run`, `case`, `report`.
//  - SluiceOps:      package-benchmark microbenchmarks of single operations
//                    (`swift package benchmark`), with allocation thresholds
//                    in Thresholds/.
//
// Build facts this file relies on:
//  - ordo-one/benchmark needs `traits: ["MallocInterposer"]` here (without it
//    resolution fails) and swift-tools-version 6.1.
//  - `.package(name: "Sluice", path: "..")` keeps the name: products are
//    referred to by package name below.
//  - libevent's headers come from the system (libevent-dev, `make deps`); the
//    libraries are linked by CSluice already, and again by CBench below.
import PackageDescription

let package = Package(
    name: "SluiceBenchmarks",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "sluice-bench", targets: ["SluiceBench"]),
    ],
    dependencies: [
        .package(name: "Sluice", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .target(
            name: "CBench",
            dependencies: [
                .product(name: "Sluice", package: "Sluice"),
                // the fleet scenario (fleet.c): the fleet limiter and hiredis
                .product(name: "SluiceFleet", package: "Sluice"),
            ],
            path: "Sources/CBench",
            cSettings: [
                .define("_GNU_SOURCE"),
            ],
            linkerSettings: [
                .linkedLibrary("event_core"),
                .linkedLibrary("event_pthreads"),
                .linkedLibrary("pthread"),
                .linkedLibrary("hiredis"),
            ]
        ),
        .target(
            name: "BenchReport",
            path: "Sources/BenchReport"
        ),
        .target(
            name: "BenchSuite",
            dependencies: [
                "CBench",
                "BenchReport",
                .product(name: "Sluice", package: "Sluice"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ],
            path: "Sources/BenchSuite"
        ),
        .executableTarget(
            name: "SluiceBench",
            dependencies: [
                "BenchSuite",
                "BenchReport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/SluiceBench"
        ),
        .executableTarget(
            name: "SluiceOps",
            dependencies: [
                "CBench",
                "BenchSuite",
                .product(name: "Sluice", package: "Sluice"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/SluiceOps",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
