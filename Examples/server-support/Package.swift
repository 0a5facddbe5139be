// swift-tools-version:6.1
//
// server-support: what the two example servers (Examples/hummingbird-server and
// Examples/vapor-server) share and that has nothing to do with their framework: the
// command line, the document store of the debounced endpoint, and unbuffered output
// lines. Both examples depend on it by path. No dependencies.
import PackageDescription

let package = Package(
    name: "server-support",
    products: [
        .library(name: "ExampleServerSupport", targets: ["ExampleServerSupport"]),
    ],
    targets: [
        .target(name: "ExampleServerSupport", path: "Sources/ExampleServerSupport"),
    ],
    swiftLanguageModes: [.v6]
)
