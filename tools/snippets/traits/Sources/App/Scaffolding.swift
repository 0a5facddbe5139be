// Names the trait modules' doc-comment examples take for granted: the
// reader's event loop group, router, application, logger and limiters,
// declared here once. Nothing here runs: the examples are only compiled.
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sluice
import Vapor

// MARK: - SluiceNIO

/// The reader's event loop group.
let group = MultiThreadedEventLoopGroup.singleton

/// What the reader's debounced handler does with a value.
func save(_ key: String, _ value: Int) {}

// MARK: - SluiceHummingbird

/// The reader's request context, which knows the client's address.
struct ClientContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}

// MARK: - SluiceVapor

/// The reader's Vapor application (never created: the examples only compile).
nonisolated(unsafe) var app: Vapor.Application! = nil

// MARK: - SluiceMetrics

/// The reader's logger.
let logger = Logging.Logger(label: "snippets")

/// The reader's limiters, named as the example names them.
let saves = try! Sluice.Limiter<String, Int>(.debounce(interval: .milliseconds(200))) { _, _ in }
let api = try! Sluice.RateLimiter<String>(limit: 100, per: .seconds(60))

/// The reader's server, a service of the group.
struct Server: Service {
    func run() async throws {}
}

let server = Server()
