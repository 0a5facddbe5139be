// swift-tools-version:6.1
// The consumer of `tools/snippets/check-snippets.sh --traits`: the doc-comment
// examples of Sluice's trait modules (SluiceNIO, SluiceHummingbird, SluiceVapor,
// SluiceMetrics) are compiled in its App target, never run. The script adds the
// products of the modules whose examples it found after the Sluice product.
import PackageDescription

let package = Package(
    name: "trait-snippets",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: "../sluice", traits: ["NIO", "Hummingbird", "Vapor", "Metrics"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        .executableTarget(name: "App", dependencies: [
            .product(name: "Sluice", package: "sluice"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "Vapor", package: "vapor"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
