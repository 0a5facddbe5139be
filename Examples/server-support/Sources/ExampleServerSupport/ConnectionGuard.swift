// The connection guard of the example servers: what the frameworks' own settings lack
// against hostile clients, as SwiftNIO channel handlers (no framework import).
//
//   - a connection cap: ConnectionCap.admit(_:) closes a new connection beyond the cap at
//     once (the client sees the close, instead of hanging in the accept queue);
//   - a header timeout: a request's head (request line and fields) must be complete within
//     `headerTimeout` of its first byte (a slowloris client sending 1 byte/s is cut off);
//   - a request timeout: from a complete head to the end of its response (a slow body
//     upload, a handler that never answers) at most `requestTimeout`.
//
// The idle timeout (no request in progress) is the frameworks' own setting.
import NIOCore
import NIOHTTP1
import Synchronization

/// Counts a server's open connections and closes those beyond `limit`.
public final class ConnectionCap: Sendable {
    /// The most connections open at once.
    public let limit: Int
    private let open = Mutex(0)

    /// A cap of `limit` open connections.
    public init(limit: Int) {
        self.limit = limit
    }

    /// The connections open now.
    public var count: Int { open.withLock { $0 } }

    /// Counts `channel` until it closes or, when `limit` connections are open
    /// already, closes it as soon as it is active. Call on the channel's event
    /// loop, from the child channel initializer.
    public func admit(_ channel: any Channel) throws {
        let admitted = open.withLock { open in
            guard open < limit else { return false }
            open += 1
            return true
        }
        if admitted {
            channel.closeFuture.whenComplete { _ in self.open.withLock { $0 -= 1 } }
        } else {
            try channel.pipeline.syncOperations.addHandler(CloseWhenActive(), position: .first)
        }
    }
}

/// Closes its channel as soon as it is active, reading nothing from it.
final class CloseWhenActive: ChannelInboundHandler {
    typealias InboundIn = NIOAny

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { context.close(promise: nil) }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}

/// The header and request timeouts of one HTTP/1 connection: installs two handlers, one
/// in front of the HTTP decoder (it sees a request's first byte) and one right after it
/// (it sees the parsed parts and the response parts written).
public enum HTTPTimeouts {
    /// Adds the handlers to `channel`'s pipeline, whose NIOHTTP1 request decoder must be
    /// in place already. Call on the channel's event loop (a child channel initializer).
    public static func install(
        on channel: any Channel, headerTimeout: TimeAmount, requestTimeout: TimeAmount
    ) throws {
        let pipeline = channel.pipeline.syncOperations
        let decoder = try pipeline.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
        let parts = HTTPTimeoutHandler(headerTimeout: headerTimeout, requestTimeout: requestTimeout)
        try pipeline.addHandler(parts, position: .after(decoder))
        try pipeline.addHandler(FirstByteHandler(timeouts: parts), position: .first)
    }
}

/// Tells the timeout handler that bytes arrived (before the decoder keeps them).
final class FirstByteHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    let timeouts: HTTPTimeoutHandler

    init(timeouts: HTTPTimeoutHandler) {
        self.timeouts = timeouts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        timeouts.bytesArrived()
        context.fireChannelRead(data)
    }
}

/// Between the HTTP decoder and the framework: arms the header timer at a request's
/// first byte, the request timer at its head, and stops it at the end of its response.
final class HTTPTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let headerTimeout: TimeAmount
    let requestTimeout: TimeAmount
    /// Requests whose head was read and whose response has not ended.
    private var inFlight = 0
    /// Between a head and the end of its body.
    private var readingBody = false
    private var timer: Scheduled<Void>?
    private var timerIsHeader = false
    private var context: ChannelHandlerContext?

    init(headerTimeout: TimeAmount, requestTimeout: TimeAmount) {
        self.headerTimeout = headerTimeout
        self.requestTimeout = requestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancel()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancel()
        context.fireChannelInactive()
    }

    /// A request's first byte starts the header timer (bytes of a request being read or
    /// answered are not a new request's).
    func bytesArrived() {
        guard inFlight == 0, !readingBody, timer == nil else { return }
        arm(headerTimeout, header: true)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            inFlight += 1
            readingBody = true
            if timerIsHeader || timer == nil { arm(requestTimeout, header: false) }
        case .body:
            break
        case .end:
            readingBody = false
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), inFlight > 0 {
            inFlight -= 1
            // The next pipelined request gets a request timer of its own.
            if inFlight == 0 { cancel() } else { arm(requestTimeout, header: false) }
        }
        context.write(data, promise: promise)
    }

    private func arm(_ timeout: TimeAmount, header: Bool) {
        cancel()
        guard let context else { return }
        timerIsHeader = header
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            timer = nil
            context.close(promise: nil)
        }
    }

    private func cancel() {
        timer?.cancel()
        timer = nil
        timerIsHeader = false
    }
}
