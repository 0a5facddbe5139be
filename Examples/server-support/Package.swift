// swift-tools-version:6.1
//
// server-support: what the two example servers (Examples/hummingbird-server and
// Examples/vapor-server) share and that has nothing to do with their framework: the
// command line, the document store of the debounced endpoint, unbuffered output
// lines, and the connection guard (header and request timeouts, a connection cap:
// SwiftNIO channel handlers, no framework). Both examples depend on it by path.
import PackageDescription

let package = Package(
    name: "server-support",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "ExampleServerSupport", targets: ["ExampleServerSupport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .target(
            name: "ExampleServerSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Sources/ExampleServerSupport"),
    ],
    swiftLanguageModes: [.v6]
)
