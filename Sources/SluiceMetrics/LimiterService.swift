#if Metrics
import Logging
import ServiceLifecycle
import Sluice

/// A swift-service-lifecycle `Service` for limiters: while it runs it polls
/// their metrics (``LimiterMetrics``) every `pollInterval`; on graceful
/// shutdown (or cancellation) it drains them — a ``Sluice/Limiter`` with
/// `close(drain: true)`, so that no debounced or throttled value is lost —
/// and polls once more.
///
/// Put it in the `ServiceGroup` **before** the server: a group shuts its
/// services down in reverse order, so the server stops taking requests
/// first, then the limiters are drained.
///
/// ```swift
/// import ServiceLifecycle
///
/// let limiters = LimiterService([.limiter("saves", saves), .rateLimiter("api", api)], logger: logger)
/// let group = ServiceGroup(services: [limiters, server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public struct LimiterService: Service {
    /// The metrics it polls.
    public let metrics: LimiterMetrics
    let limiters: [ObservedLimiter]
    let pollInterval: Duration
    let logger: Logger

    /// A service for `limiters`.
    ///
    /// - Parameters:
    ///   - limiters: what to observe and drain.
    ///   - metrics: the metrics (`nil`: new ones on `MetricsSystem.factory`).
    ///   - pollInterval: how often the metrics are updated (10 s by default).
    ///   - logger: for refusals at the key cap and the drain.
    public init(
        _ limiters: [ObservedLimiter], metrics: LimiterMetrics? = nil, pollInterval: Duration = .seconds(10),
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

    /// Drains every limiter, in order, then polls the metrics.
    public func drain() async {
        for limiter in limiters {
            await limiter.drain()
            logger.debug("limiter drained", metadata: ["limiter": "\(limiter.name)"])
        }
        metrics.poll()
    }
}
#endif
