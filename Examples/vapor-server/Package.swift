// swift-tools-version:6.1
//
// vapor-server: Sluice's rate-limit middleware and a debounced endpoint on Vapor 4
// (docs/servers.md). Depends on the Sluice package two folders up with its Vapor trait on.
//
//   swift run -c release --package-path Examples/vapor-server vapor-server --port 8080 --limit 10 --per 60
//   Examples/vapor-server/test.sh   (the same curl test as the Hummingbird example's)
//
// The command line and the document store are shared with the Hummingbird example
// (../server-support). `make servers-test` builds this package and runs test.sh.
import PackageDescription

let package = Package(
    name: "vapor-server",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../server-support"),
        .package(name: "Sluice", path: "../..", traits: ["Vapor"]),
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.24.0"),
    ],
    targets: [
        .executableTarget(
            name: "vapor-server",
            dependencies: [
                .product(name: "ExampleServerSupport", package: "server-support"),
                .product(name: "Sluice", package: "Sluice"),
                .product(name: "SluiceHTTP", package: "Sluice"),
                .product(name: "SluiceNIO", package: "Sluice"),
                .product(name: "SluiceVapor", package: "Sluice"),
                .product(name: "Vapor", package: "vapor"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
            ],
            path: "Sources/vapor-server"
        ),
    ],
    swiftLanguageModes: [.v6]
)
