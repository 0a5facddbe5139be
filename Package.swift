// swift-tools-version:6.1
//
// Sluice — keyed throttle / audit / debounce / rate limiter.
//
// Targets:
//  - CLibevent:    the system's libevent_core (+ libevent_pthreads) seen through a module map.
//  - CSluice:      the C11 core (Sources/CSluice, public header include/sluice.h). No
//                  dependencies: it builds and links against libc alone.
//  - CSluiceLoop:  the libevent loop layer (Sources/CSluiceLoop, include/sluice_loop.h):
//                  loop bindings and thread-safe sharded limiters over the core.
//  - CSluiceTrace: the trace parser and the manual and real-time trace runners
//                  (Sources/CSluiceTrace, include/sluice_trace.h).
//  - Sluice:       the Swift layer over the core and the loop layer (Limiter, Throttler, Debouncer).
//  - CHiredis, CSluiceFleet, SluiceFleet: the fleet (Redis) rate limiter (docs/fleet.md);
//                  only a package using the SluiceFleet product needs hiredis, and
//                  OpenSSL with libevent_openssl (its TLS connections).
//  - SluiceCLI:    the `sluice` command (simulate, timelines) over CSluiceTrace, with a
//                  hand-written argument parser: no dependency for consumers to fetch.
//
// Documentation: `SLUICE_DOCS=1 swift package generate-documentation --target Sluice`.
// The swift-docc-plugin dependency is declared only when SLUICE_DOCS is set, so a
// package that depends on Sluice never fetches it.
//
// Build facts this file relies on:
//  - CLibevent's pkgConfig must be "libevent_core": "libevent" names the
//    library that also carries evhttp/evdns, and Debian's "libevent_pthreads"
//    .pc pulls in libevent.so besides libevent_core.so (two copies of the
//    event loop in one process).
//  - A C target that calls libevent links event_core and event_pthreads
//    itself (linkerSettings): a module map's `link` lines reach Swift
//    importers only, not a C target.
//  - The loop layer includes the core's internal accessor header by a
//    relative path ("../CSluice/core-internal.h"), so no header search path
//    (and no unsafeFlags) is needed.
//  - CHiredis has no pkgConfig: Debian's hiredis.pc adds -D_FILE_OFFSET_BITS=64,
//    a flag SwiftPM refuses with a warning on every build, and its include
//    path is not needed, because every include names <hiredis/...> from the
//    compiler's default search path. Without pkgConfig SwiftPM prints no
//    `providers:` hint, so the headers carry it: without libhiredis-dev (make
//    deps installs it) a build of SluiceFleet stops in CSluiceFleet/fleet.c at
//    `error: "hiredis not found: ... install libhiredis-dev (apt-get install
//    libhiredis-dev, or make deps)"`, followed by "'hiredis/adapters/libevent.h'
//    file not found" (CHiredis.h has the same check for a Swift import).
//  - No unsafeFlags: a package that depends on Sluice by version would refuse them.
import PackageDescription

let package = Package(
    name: "Sluice",
    // Synchronization's Atomic (the lock) needs macOS 15; Linux needs nothing.
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        .executable(name: "sluice", targets: ["SluiceCLI"]),
        // The fleet (Redis) rate limiter: needs hiredis; Sluice alone does not.
        .library(name: "SluiceFleet", targets: ["SluiceFleet"]),
        // Servers (docs/servers.md): each behind a package trait, so that a package that
        // uses only Sluice never fetches SwiftNIO, Hummingbird, Vapor or swift-metrics.
        .library(name: "SluiceNIO", targets: ["SluiceNIO"]),
        .library(name: "SluiceHummingbird", targets: ["SluiceHummingbird"]),
        .library(name: "SluiceVapor", targets: ["SluiceVapor"]),
        .library(name: "SluiceMetrics", targets: ["SluiceMetrics"]),
        .library(name: "SluiceHTTP", targets: ["SluiceHTTP"]),
    ],
    // Traits (all off by default): NIO (SluiceNIO), Hummingbird and Vapor (the
    // middleware; each turns NIO on; Hummingbird, which needs them anyway, turns Metrics on), Metrics (SluiceMetrics: swift-metrics, swift-log,
    // swift-service-lifecycle). A dependency used only under a trait that is off is
    // not fetched (checked by `make consumer-check`).
    traits: [
        .trait(name: "NIO"),
        .trait(name: "Hummingbird", enabledTraits: ["NIO", "Metrics"]),
        .trait(name: "Vapor", enabledTraits: ["NIO"]),
        .trait(name: "Metrics"),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibevent",
            path: "Sources/CLibevent",
            pkgConfig: "libevent_core",
            providers: [.apt(["libevent-dev"])]
        ),
        .target(
            name: "CSluice",
            path: "Sources/CSluice",
            publicHeadersPath: "include",
            cSettings: [
                // CLOCK_MONOTONIC, nanosleep, … without GNU extensions.
                .define("_POSIX_C_SOURCE", to: "200809L"),
            ]
        ),
        .target(
            name: "CSluiceLoop",
            dependencies: ["CSluice", "CLibevent"],
            path: "Sources/CSluiceLoop",
            publicHeadersPath: "include",
            cSettings: [
                .define("_POSIX_C_SOURCE", to: "200809L"),
            ],
            linkerSettings: [
                .linkedLibrary("event_core"),
                .linkedLibrary("event_pthreads"),
            ]
        ),
        .target(
            name: "CSluiceTrace",
            dependencies: ["CSluice", "CSluiceLoop"],
            path: "Sources/CSluiceTrace",
            publicHeadersPath: "include",
            cSettings: [
                .define("_POSIX_C_SOURCE", to: "200809L"),
            ]
        ),
        // ---- fleet (Redis) rate limiter: only SluiceFleet's users need hiredis ----
        .systemLibrary(
            name: "CHiredis",
            path: "Sources/CHiredis"
        ),
        .target(
            name: "CSluiceFleet",
            dependencies: ["CSluice", "CSluiceLoop", "CLibevent", "CHiredis"],
            path: "Sources/CSluiceFleet",
            publicHeadersPath: "include",
            cSettings: [
                .define("_POSIX_C_SOURCE", to: "200809L"),
            ],
            linkerSettings: [
                .linkedLibrary("hiredis"),
                .linkedLibrary("event_core"),
                .linkedLibrary("event_pthreads"),
                // TLS (rediss://, conn.c): libevent's bufferevent_openssl and
                // OpenSSL 3 (Debian: libevent-dev, libssl-dev).
                .linkedLibrary("event_openssl"),
                .linkedLibrary("ssl"),
                .linkedLibrary("crypto"),
            ]
        ),
        // ---- Swift targets ----
        .target(
            name: "Sluice",
            dependencies: ["CSluice", "CSluiceLoop"],
            path: "Sources/Sluice"
        ),
        .target(
            name: "SluiceFleet",
            dependencies: ["Sluice", "CSluiceFleet"],
            path: "Sources/SluiceFleet"
        ),
        .executableTarget(
            name: "SluiceCLI",
            dependencies: ["Sluice", "CSluiceTrace"],
            path: "Sources/SluiceCLI"
        ),
        .testTarget(
            name: "SluiceFleetTests",
            dependencies: ["SluiceFleet", "Sluice", "SluiceHTTP"],
            path: "Tests/SluiceFleetTests"
        ),
        // The Swift tests (SluiceHTTP: the gate's answers under plans, RatePlanTests).
        // With the NIO trait on they also run the behaviour suite
        // (Tests/SluiceTests/Behaviour) on the NIO engine (NIOEngineTests.swift).
        .testTarget(
            name: "SluiceTests",
            dependencies: [
                "Sluice", "SluiceCLI", "SluiceNIO", "SluiceHTTP",
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["NIO"])),
                .product(name: "NIOEmbedded", package: "swift-nio", condition: .when(traits: ["NIO"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["NIO"])),
            ],
            path: "Tests/SluiceTests"
        ),
        // ---- servers (traits; docs/servers.md): sources are empty unless their trait is on ----
        .target(
            name: "SluiceHTTP",
            dependencies: ["Sluice"],
            path: "Sources/SluiceHTTP"
        ),
        .target(
            name: "SluiceNIO",
            dependencies: [
                "Sluice",
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["NIO"])),
            ],
            path: "Sources/SluiceNIO"
        ),
        .target(
            name: "SluiceHummingbird",
            dependencies: [
                "Sluice", "SluiceHTTP",
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Hummingbird"])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["Hummingbird"])),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: .when(traits: ["Hummingbird"])),
            ],
            path: "Sources/SluiceHummingbird"
        ),
        .target(
            name: "SluiceVapor",
            dependencies: [
                "Sluice", "SluiceHTTP",
                .product(name: "Vapor", package: "vapor", condition: .when(traits: ["Vapor"])),
            ],
            path: "Sources/SluiceVapor"
        ),
        .target(
            name: "SluiceMetrics",
            dependencies: [
                "Sluice",
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Metrics"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle",
                    condition: .when(traits: ["Metrics"])),
            ],
            path: "Sources/SluiceMetrics"
        ),
        .testTarget(
            name: "SluiceHummingbirdTests",
            dependencies: [
                "SluiceHummingbird", "SluiceHTTP", "Sluice",
                .product(name: "HummingbirdTesting", package: "hummingbird", condition: .when(traits: ["Hummingbird"])),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: .when(traits: ["Hummingbird"])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["Hummingbird"])),
            ],
            path: "Tests/SluiceHummingbirdTests"
        ),
        .testTarget(
            name: "SluiceMetricsTests",
            dependencies: [
                "SluiceMetrics", "Sluice",
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["Metrics"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Metrics"])),
            ],
            path: "Tests/SluiceMetricsTests"
        ),
        .testTarget(
            name: "SluiceVaporTests",
            dependencies: [
                "SluiceVapor", "SluiceHTTP", "Sluice",
                .product(name: "VaporTesting", package: "vapor", condition: .when(traits: ["Vapor"])),
            ],
            path: "Tests/SluiceVaporTests"
        ),
    ],
    swiftLanguageModes: [.v6],
    cLanguageStandard: .c11
)

// The DocC plugin, only for building the documentation (see the top of this file).
if Context.environment["SLUICE_DOCS"] != nil {
    package.dependencies.append(.package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"))
}
