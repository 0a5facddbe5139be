// swift-tools-version:6.1
//
// hummingbird-server: Sluice's rate-limit middleware and a debounced endpoint on
// Hummingbird 2 (docs/servers.md). Depends on the Sluice package two folders up with
// its Hummingbird trait on (which turns on NIO and Metrics).
//
//   swift run -c release --package-path Examples/hummingbird-server hummingbird-server \
//       --port 8080 --limit 10 --per 60
//   Examples/hummingbird-server/test.sh     (curl against a running server)
//
// The command line and the document store are shared with the Vapor example
// (../server-support). `make servers-test` builds this package and runs test.sh.
import PackageDescription

let package = Package(
    name: "hummingbird-server",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../server-support"),
        .package(name: "Sluice", path: "../..", traits: ["Hummingbird"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .executableTarget(
            name: "hummingbird-server",
            dependencies: [
                .product(name: "ExampleServerSupport", package: "server-support"),
                .product(name: "Sluice", package: "Sluice"),
                .product(name: "SluiceHTTP", package: "Sluice"),
                .product(name: "SluiceHummingbird", package: "Sluice"),
                .product(name: "SluiceMetrics", package: "Sluice"),
                .product(name: "SluiceNIO", package: "Sluice"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Sources/hummingbird-server"
        ),
    ],
    swiftLanguageModes: [.v6]
)
