#if Metrics
import CoreMetrics
import Logging
import Sluice
import Synchronization

/// A limiter as observability and lifecycle see it: a name, its counters,
/// and how to drain it. Make one with ``limiter(_:_:)`` or ``rateLimiter(_:_:)``.
public struct ObservedLimiter: Sendable {
    /// The value of the `limiter` dimension of its metrics.
    public let name: String
    let statistics: @Sendable () -> LimiterStatistics
    let drain: @Sendable () async -> Void

    /// A ``Sluice/Limiter``: drained with `close(drain: true)`, so that every
    /// pending (debounced, throttled, audited) value is emitted.
    ///
    /// - Parameters:
    ///   - name: the limiter's name in the metrics.
    ///   - limiter: the limiter.
    public static func limiter<Key, Value>(_ name: String, _ limiter: Limiter<Key, Value>) -> ObservedLimiter {
        ObservedLimiter(
            name: name, statistics: { limiter.statistics },
            drain: { if !limiter.isClosed { try? await limiter.close(drain: true) } })
    }

    /// A ``Sluice/RateLimiter``: nothing is pending in it; it is closed, so
    /// later checks throw ``Sluice/LimiterError/closed``.
    ///
    /// - Parameters:
    ///   - name: the limiter's name in the metrics.
    ///   - limiter: the limiter.
    public static func rateLimiter<Key>(_ name: String, _ limiter: RateLimiter<Key>) -> ObservedLimiter {
        ObservedLimiter(name: name, statistics: { limiter.statistics }, drain: { try? limiter.close() })
    }
}

/// swift-metrics counters and gauges for limiters, from their counters
/// (``Sluice/LimiterStatistics``, O(1) to read): call ``poll()`` whenever
/// you like — after each decision, or periodically (``LimiterService`` does,
/// every `pollInterval`). Each poll adds what each counter grew by since the
/// previous one.
///
/// Metrics, each with the dimension `limiter` = the limiter's name:
///
/// | metric | kind | what |
/// | --- | --- | --- |
/// | `sluice_admitted_total` | counter | calls emitted or admitted at once |
/// | `sluice_emitted_later_total` | counter | values emitted at a deadline (or by flush/close) |
/// | `sluice_dropped_total` | counter | calls dropped (rate: refused requests) |
/// | `sluice_discarded_total` | counter | pending values discarded (cancel, close without drain) |
/// | `sluice_refused_at_cap_total` | counter | new keys refused at `maxKeys` |
/// | `sluice_live_keys` | gauge | keys with state |
/// | `sluice_pending_values` | gauge | values waiting for a deadline |
///
/// Keys refused at the cap are also logged (one warning per poll that saw
/// new refusals, with the count), on the given `Logger`.
public final class LimiterMetrics: Sendable {
    struct Instruments: Sendable {
        let admitted, emittedLater, dropped, discarded, refusedAtCap: Counter
        let liveKeys, pendingValues: Gauge
    }

    let limiters: [ObservedLimiter]
    let instruments: [Instruments]
    let last: Mutex<[LimiterStatistics?]>
    let logger: Logger

    /// Metrics for `limiters`.
    ///
    /// - Parameters:
    ///   - limiters: the limiters (names should differ).
    ///   - factory: the metrics backend (`MetricsSystem.factory` by default).
    ///   - logger: where refusals at the key cap are logged.
    public init(
        _ limiters: [ObservedLimiter], factory: any MetricsFactory = MetricsSystem.factory,
        logger: Logger = Logger(label: "sluice")
    ) {
        self.limiters = limiters
        self.logger = logger
        instruments = limiters.map { limiter in
            let dimensions = [("limiter", limiter.name)]
            func counter(_ label: String) -> Counter { Counter(label: label, dimensions: dimensions, factory: factory) }
            func gauge(_ label: String) -> Gauge { Gauge(label: label, dimensions: dimensions, factory: factory) }
            return Instruments(
                admitted: counter("sluice_admitted_total"), emittedLater: counter("sluice_emitted_later_total"),
                dropped: counter("sluice_dropped_total"), discarded: counter("sluice_discarded_total"),
                refusedAtCap: counter("sluice_refused_at_cap_total"), liveKeys: gauge("sluice_live_keys"),
                pendingValues: gauge("sluice_pending_values"))
        }
        last = Mutex(Array(repeating: nil, count: limiters.count))
    }

    /// Reads every limiter's counters and updates the metrics (from any
    /// thread; concurrent polls are serialised).
    public func poll() {
        last.withLock { last in
            for (index, limiter) in limiters.enumerated() {
                let now = limiter.statistics()
                let before = last[index]
                let metrics = instruments[index]
                func grow(_ counter: Counter, _ path: KeyPath<LimiterStatistics, Int>) {
                    let delta = now[keyPath: path] - (before?[keyPath: path] ?? 0)
                    if delta > 0 { counter.increment(by: Int64(delta)) }
                }
                grow(metrics.admitted, \.admitted)
                grow(metrics.emittedLater, \.emittedLater)
                grow(metrics.dropped, \.dropped)
                grow(metrics.discarded, \.discarded)
                grow(metrics.refusedAtCap, \.refusedAtCap)
                metrics.liveKeys.record(now.liveKeys)
                metrics.pendingValues.record(now.pendingValues)
                let refused = now.refusedAtCap - (before?.refusedAtCap ?? 0)
                if refused > 0 {
                    logger.warning(
                        "new keys refused at the limiter's key cap (maxKeys)",
                        metadata: [
                            "limiter": "\(limiter.name)", "refused": "\(refused)",
                            "live_keys": "\(now.liveKeys)",
                        ])
                }
                last[index] = now
            }
        }
    }
}
#endif
