#if Metrics
import Logging
import ServiceLifecycle
import Sluice

/// A swift-service-lifecycle `Service` for limiters: while it runs it polls
/// their metrics (``LimiterMetrics``) every ``pollInterval`` (1 s by
/// default); on graceful shutdown (or cancellation) it drains them — a
/// ``Sluice/Limiter`` with `close(drain: true)`, so that no debounced or
/// throttled value is lost — and polls once more.
///
/// Put it in the `ServiceGroup` **before** the server: a group shuts its
/// services down in reverse order, so the server stops taking requests
/// first, then the limiters are drained.
///
/// **Chains.** The limiters are drained one after another, **in the order
/// given**, each only once the previous one's drained values were
/// delivered. So a chain — a limiter whose delivery submits to the next
/// one, such as "debounce, but at most every 30 s" (docs/semantics.md,
/// "Chains") — loses nothing at shutdown when it is listed upstream first:
/// the values the first limiter drains reach the second before the second
/// is closed and drained in turn. With a handler delivery that submits to
/// the next limiter, ``ObservedLimiter/limiter(_:_:)`` is enough; when a
/// task of yours consumes a stream and submits, use
/// ``ObservedLimiter/limiter(_:_:consumer:)`` so that the drain waits for
/// that task too.
///
/// ```swift
/// // Save a document once its edits pause for 2 s, but at most every 30 s.
/// let saves = try Limiter<String, Int>(.throttle(interval: .seconds(30))) { id, version in
///     save(id, version)
/// }
/// let quiet = try Limiter<String, Int>(.debounce(interval: .seconds(2))) { id, version in
///     do { try saves.submit(version, for: id) } catch { logger.error("save of \(id) refused: \(error)") }
/// }
/// let service = LimiterService([.limiter("quiet", quiet), .limiter("saves", saves)], logger: logger)
/// ```
///
/// ```swift
/// import ServiceLifecycle
///
/// let limiters = LimiterService([.limiter("saves", saves), .rateLimiter("api", api)], logger: logger)
/// let group = ServiceGroup(services: [limiters, server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public struct LimiterService: Service {
    /// The metrics it polls. For metrics without lag, call its
    /// ``LimiterMetrics/poll()`` yourself right before they are read (in a
    /// `/metrics` handler, before the backend renders).
    public let metrics: LimiterMetrics
    let limiters: [ObservedLimiter]
    /// How often ``run()`` polls the metrics: how far they may lag the
    /// limiters' counters.
    public let pollInterval: Duration
    let logger: Logger

    /// A service for `limiters`.
    ///
    /// - Parameters:
    ///   - limiters: what to observe and drain, upstream first for a chain
    ///     (they are drained in this order).
    ///   - metrics: the metrics (`nil`: new ones on `MetricsSystem.factory`).
    ///   - pollInterval: how often the metrics are updated, so how far they
    ///     may lag (1 s by default; a poll costs about 14 µs per limiter,
    ///     see ``LimiterMetrics``).
    ///   - logger: for refusals at the key cap and the drain.
    public init(
        _ limiters: [ObservedLimiter], metrics: LimiterMetrics? = nil, pollInterval: Duration = .seconds(1),
        logger: Logger = Logger(label: "sluice")
    ) {
        self.limiters = limiters
        self.metrics = metrics ?? LimiterMetrics(limiters, logger: logger)
        self.pollInterval = pollInterval
        self.logger = logger
    }

    /// Polls until graceful shutdown or cancellation, then drains every limiter.
    public func run() async throws {
        let metrics = self.metrics
        let interval = pollInterval
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                metrics.poll()
                try await Task.sleep(for: interval)
            }
        }
        await drain()
    }

    /// Drains every limiter, in the order given — each after the previous
    /// one's drained values were delivered (and, with a `consumer`, after
    /// that task finished) — then polls the metrics.
    public func drain() async {
        for limiter in limiters {
            await limiter.drain()
            logger.debug("limiter drained", metadata: ["limiter": "\(limiter.name)"])
        }
        metrics.poll()
    }
}
#endif
