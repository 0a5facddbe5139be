// swift-tools-version:6.1
//
// Sluice — keyed throttle / audit / debounce / rate limiter.
//
// Targets:
//  - CLibevent: the system's libevent_core (+ libevent_pthreads) seen through a module map.
//  - CSluice:   the C11 core (Sources/CSluice, public headers under include/).
//  - Sluice:    the Swift layer over the core (Limiter, Throttler, Debouncer).
//  - SluiceCLI: the `sluice` command (simulate, timelines), on ArgumentParser.
//
// Build facts this file relies on (docs/build-recipes.md):
//  - pkgConfig must be "libevent_core": "libevent" is wrong, and Debian's
//    "libevent_pthreads" .pc also pulls in libevent.so (two copies of the core).
//  - The C target links event_core and event_pthreads itself: module-map `link`
//    lines only reach Swift importers, not a C target.
//  - No unsafeFlags: a package that depends on Sluice by version would refuse them.
import PackageDescription

let package = Package(
    name: "Sluice",
    products: [
        .library(name: "Sluice", targets: ["Sluice"]),
        .executable(name: "sluice", targets: ["SluiceCLI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // Only for `swift package generate-documentation --target Sluice`;
        // a plugin adds nothing to `swift build` or to packages depending on Sluice.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
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
            dependencies: ["CLibevent"],
            path: "Sources/CSluice",
            publicHeadersPath: "include",
            cSettings: [
                // CLOCK_MONOTONIC, nanosleep, … without GNU extensions.
                .define("_POSIX_C_SOURCE", to: "200809L"),
            ],
            linkerSettings: [
                .linkedLibrary("event_core"),
                .linkedLibrary("event_pthreads"),
            ]
        ),
        .target(
            name: "Sluice",
            dependencies: ["CSluice"],
            path: "Sources/Sluice"
        ),
        .executableTarget(
            name: "SluiceCLI",
            dependencies: [
                "Sluice",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
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
