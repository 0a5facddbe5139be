// GuardedServer: Vapor's HTTP/1 server again, with the connection guard of server-support.
import ExampleServerSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import Vapor

/// An HTTP/1 server for a Vapor application, installed with `app.servers.use`, that
/// enforces the connection guard of server-support: a connection cap (`ConnectionCap`), a
/// header timeout and a request timeout (`HTTPTimeouts`), besides the idle timeout.
///
/// It exists because Vapor 4's own `HTTPServer` builds its channel pipeline and accept
/// loop privately: it has an idle timeout (restarted by any byte, so a slowloris client
/// sending 1 byte/s is never cut off) and no hook for a header timeout or a connection
/// cap (docs/servers.md). This server runs its own NIO `ServerBootstrap` on the
/// application's event loops with the pipeline
///
///     ConnectionCap → NIOHTTP1 (configureHTTPServerPipeline) → HTTPTimeouts
///       → IdleStateHandler → RequestHandler
///
/// where `RequestHandler` collects each request (head and body, at most
/// `app.routes.defaultMaxBodySize` bytes, else 413) into a `Vapor.Request`, passes it to
/// the application's responder (routes and middleware, as Vapor's server does) and
/// writes the `Vapor.Response` back, keeping the connection open when the request asks.
/// One request at a time per connection (NIOHTTP1's pipelining handler holds the next).
/// What Vapor's server has and this one has not: HTTP/2, TLS, upgrades (WebSocket),
/// response compression and request decompression, streamed request bodies (a route's
/// body arrives collected).
final class GuardedServer: Vapor.Server, Sendable {
    struct Configuration: Sendable {
        var host: String
        var port: Int
        /// No request part read (a head, a body chunk) and nothing written for this long:
        /// the connection is closed. (The bytes of an unfinished head do not count: the
        /// header timeout is theirs.)
        var idleTimeout: TimeAmount
        /// A request's head complete at most this long after its first byte.
        var headerTimeout: TimeAmount
        /// From a request's complete head to the end of its response at most this long.
        var requestTimeout: TimeAmount
        /// At most this many connections open at once.
        var maxConnections: Int
    }

    private struct Running {
        let channel: any Channel
        let quiesce: ServerQuiescingHelper
    }

    let application: Application
    let configuration: Configuration
    let cap: ConnectionCap
    private let running = NIOLockedValueBox<Running?>(nil)
    private let stopped: EventLoopPromise<Void>

    init(application: Application, configuration: Configuration) {
        self.application = application
        self.configuration = configuration
        self.cap = ConnectionCap(limit: configuration.maxConnections)
        self.stopped = application.eventLoopGroup.any().makePromise()
    }

    var onShutdown: EventLoopFuture<Void> { stopped.futureResult }

    func start(address: BindAddress?) async throws {
        // The responder is made now, when the routes and middleware are in place.
        let responder = application.responder.current
        let application = application
        let configuration = configuration
        let cap = cap
        let maxBodySize = application.routes.defaultMaxBodySize.value
        let quiesce = ServerQuiescingHelper(group: application.eventLoopGroup)
        let bootstrap = ServerBootstrap(group: application.eventLoopGroup)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try cap.admit(channel)
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.configureHTTPServerPipeline(withErrorHandling: true)
                    try HTTPTimeouts.install(
                        on: channel, headerTimeout: configuration.headerTimeout,
                        requestTimeout: configuration.requestTimeout)
                    try pipeline.addHandler(IdleStateHandler(allTimeout: configuration.idleTimeout))
                    try pipeline.addHandler(
                        RequestHandler(application: application, responder: responder, maxBodySize: maxBodySize))
                }
            }
        let channel: any Channel
        switch address {
        case .unixDomainSocket(let path):
            channel = try await bootstrap.bind(unixDomainSocketPath: path).get()
        case .hostname(let host, let port):
            channel = try await bootstrap.bind(
                host: host ?? configuration.host, port: port ?? configuration.port
            ).get()
        case nil:
            channel = try await bootstrap.bind(host: configuration.host, port: configuration.port).get()
        }
        running.withLockedValue { $0 = Running(channel: channel, quiesce: quiesce) }
        let bound = channel.localAddress
        application.logger.notice(
            "Server started on http://\(bound?.ipAddress ?? bound?.pathname ?? "?"):\(bound?.port.map(String.init) ?? "")"
        )
    }

    @available(*, noasync, message: "Use the async start(address:) instead.")
    func start(address: BindAddress?) throws {
        let promise = application.eventLoopGroup.any().makePromise(of: Void.self)
        promise.completeWithTask { try await self.start(address: address) }
        try promise.futureResult.wait()
    }

    /// Stops accepting, lets the requests in progress finish (a connection with none is
    /// closed at once, the others after their response), then completes `onShutdown`.
    func shutdown() async {
        guard
            let running = running.withLockedValue({ state in
                defer { state = nil }; return state
            })
        else { return }
        let done = application.eventLoopGroup.any().makePromise(of: Void.self)
        running.quiesce.initiateShutdown(promise: done)
        try? await done.futureResult.get()
        stopped.succeed()
    }

    @available(*, noasync, message: "Use the async shutdown() instead.")
    func shutdown() {
        let promise = application.eventLoopGroup.any().makePromise(of: Void.self)
        promise.completeWithTask { await self.shutdown() }
        try? promise.futureResult.wait()
    }
}

/// The last handler of a connection: collects each request into a `Vapor.Request`, has
/// the application's responder answer it, and writes the response.
private final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private enum State {
        /// Between requests.
        case idle
        /// A head read, its body arriving.
        case reading(HTTPRequestHead, ByteBuffer)
        /// The request is with the responder, or its answer is being written.
        case responding
    }

    let application: Application
    let responder: any Responder
    let maxBodySize: Int
    private var state = State.idle
    private let dates = DateFormatter()

    init(application: Application, responder: any Responder, maxBodySize: Int) {
        self.application = application
        self.responder = responder
        self.maxBodySize = maxBodySize
        dates.locale = Locale(identifier: "en_US_POSIX")
        dates.timeZone = TimeZone(identifier: "GMT")
        dates.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch (unwrapInboundIn(data), state) {
        case (.head(let head), .idle):
            state = .reading(head, context.channel.allocator.buffer(capacity: 0))
        case (.body(var chunk), .reading(let head, var body)):
            guard body.readableBytes + chunk.readableBytes <= maxBodySize else {
                // Too large: answered at once, and the connection closed after.
                state = .responding
                write(Response(status: .payloadTooLarge), for: head, keepAlive: false, context: context)
                return
            }
            state = .idle  // (no copy of the buffer while it grows)
            body.writeBuffer(&chunk)
            state = .reading(head, body)
        case (.end, .reading(let head, let body)):
            state = .responding
            respond(to: head, body: body, context: context)
        default:
            break  // the rest of a request answered already (413)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func respond(to head: HTTPRequestHead, body: ByteBuffer, context: ChannelHandlerContext) {
        let request = Request(
            application: application, method: head.method, url: URI(path: head.uri), version: head.version,
            headersNoUpdate: head.headers, collectedBody: body.readableBytes > 0 ? body : nil,
            remoteAddress: context.channel.remoteAddress, logger: application.logger,
            byteBufferAllocator: context.channel.allocator, on: context.eventLoop)
        responder.respond(to: request).hop(to: context.eventLoop).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let response):
                self.write(response, for: head, keepAlive: head.isKeepAlive, context: context)
            case .failure:
                self.write(Response(status: .internalServerError), for: head, keepAlive: false, context: context)
            }
        }
    }

    /// Writes `response` (its body collected first, when it is a stream), then closes the
    /// connection unless `keepAlive`.
    private func write(_ response: Response, for head: HTTPRequestHead, keepAlive: Bool, context: ChannelHandlerContext)
    {
        response.body.collect(on: context.eventLoop).assumeIsolated().whenComplete { result in
            guard case .success(let body) = result else {
                context.close(promise: nil)
                return
            }
            var headers = response.headers
            headers.replaceOrAdd(name: .connection, value: keepAlive ? "keep-alive" : "close")
            headers.replaceOrAdd(name: .date, value: self.dates.string(from: Date()))
            // No body for HEAD, 204 and 304 (their Content-Length, if any, stays).
            let bodyless = head.method == .HEAD || response.status == .noContent || response.status == .notModified
            if !bodyless {
                headers.remove(name: .transferEncoding)
                headers.replaceOrAdd(name: .contentLength, value: String(body?.readableBytes ?? 0))
            }
            context.write(
                self.wrapOutboundOut(
                    .head(HTTPResponseHead(version: head.version, status: response.status, headers: headers))),
                promise: nil)
            if !bodyless, let body, body.readableBytes > 0 {
                context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            }
            let ended = context.writeAndFlush(self.wrapOutboundOut(.end(nil)))
            self.state = .idle
            if !keepAlive {
                ended.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            }
        }
    }
}
