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
//  - No unsafeFlags: a package that depends on Sluice by version would refuse them.
import PackageDescription

let package = Package(
    name: "Sluice",
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        .executable(name: "sluice", targets: ["SluiceCLI"]),
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
        // ---- Swift targets ----
        .target(
            name: "Sluice",
            dependencies: ["CSluice", "CSluiceLoop"],
            path: "Sources/Sluice"
        ),
        .executableTarget(
            name: "SluiceCLI",
            dependencies: ["Sluice", "CSluiceTrace"],
            path: "Sources/SluiceCLI"
        ),
        .testTarget(
            name: "SluiceTests",
            dependencies: ["Sluice", "SluiceCLI"],
            path: "Tests/SluiceTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The DocC plugin, only for building the documentation (see the top of this file).
if Context.environment["SLUICE_DOCS"] != nil {
    package.dependencies.append(.package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"))
}
