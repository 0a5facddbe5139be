import Testing

@testable import Sluice

// Shared by the differential tests (BatchTests, CompactTests, EmitOnlyTests),
// which run one random sequence of calls on two limiters and compare what
// each reported.

/// A deterministic generator of small random numbers (a 64-bit LCG): the
/// same seed gives the same sequence on every run and machine.
struct SeededRandom {
    var state: UInt64

    /// A number in `0..<n`.
    mutating func next(_ n: Int) -> Int {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Int((state >> 33) % UInt64(n))
    }
}

/// What a limiter reported, recorded from any thread and read as one array.
final class SeenLog<Seen: Sendable>: Sendable {
    private let items = Locked<[Seen]>([])

    /// Records one report.
    func add(_ seen: Seen) { items.withLock { $0.append(seen) } }

    /// Everything recorded so far, in order.
    var snapshot: [Seen] { items.withLock { $0 } }
}

/// A value that a slot limiter must keep in its table (not trivially
/// copyable): the limiter a compact or emit-only one is compared with.
final class SlotBox<V: Sendable>: Sendable {
    let value: V
    init(_ value: V) { self.value = value }
}

/// Two limiters on manual clocks, same policy, cap and hash seed, told the
/// same calls: `a` holds `V` values, `b` the same values boxed (in value
/// slots). Each call is made on both and expects the same decision (or
/// error); `context` ("seed 3 step 41") prefixes a failure's message, which
/// points at the caller. What each delivered is the caller's to compare.
struct SlotTwins<K: LimiterKey, V: Sendable> {
    let a: Limiter<K, V>
    let b: Limiter<K, SlotBox<V>>
    let clockA: ManualLimiterClock
    let clockB: ManualLimiterClock

    /// Makes both limiters; each delivery is given its limiter's clock.
    init(
        _ policy: LimiterPolicy, maxKeys: Int?, seed: (UInt64, UInt64),
        a deliveryA: (ManualLimiterClock) -> LimiterDelivery<K, V>,
        b deliveryB: (ManualLimiterClock) -> LimiterDelivery<K, SlotBox<V>>
    ) throws {
        clockA = ManualLimiterClock()
        clockB = ManualLimiterClock()
        a = try Limiter<K, V>(
            policy, scheduler: .manual(clockA), maxKeys: maxKeys, tick: nil, combine: nil, delivery: deliveryA(clockA),
            seed: seed, makeSink: { LimiterStorage.makeSink($0) })
        b = try Limiter<K, SlotBox<V>>(
            policy, scheduler: .manual(clockB), maxKeys: maxKeys, tick: nil, combine: nil, delivery: deliveryB(clockB),
            seed: seed, makeSink: { LimiterStorage.makeSink($0) })
    }

    func submit(_ value: V, for key: K, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let ra = Result { () throws(LimiterError) in try a.submit(value, for: key) }
        let rb = Result { () throws(LimiterError) in try b.submit(SlotBox(value), for: key) }
        #expect("\(ra)" == "\(rb)", "\(context): decisions differ", sourceLocation: sourceLocation)
    }

    func submit(contentsOf items: [(V, K)], _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let ra = a.submit(contentsOf: items)
        let rb = b.submit(contentsOf: items.map { (SlotBox($0.0), $0.1) })
        #expect("\(ra)" == "\(rb)", "\(context): batch decisions differ", sourceLocation: sourceLocation)
    }

    func flush(_ key: K, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            "\(Result { () throws(LimiterError) in try a.flush(key) })"
                == "\(Result { () throws(LimiterError) in try b.flush(key) })", "\(context): flush",
            sourceLocation: sourceLocation)
    }

    func cancel(_ key: K, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            "\(Result { () throws(LimiterError) in try a.cancel(key) })"
                == "\(Result { () throws(LimiterError) in try b.cancel(key) })", "\(context): cancel",
            sourceLocation: sourceLocation)
    }

    func pending(_ key: K, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            "\(Result { () throws(LimiterError) in try a.pending(key) })"
                == "\(Result { () throws(LimiterError) in try b.pending(key) })", "\(context): pending",
            sourceLocation: sourceLocation)
    }

    func close(drain: Bool) throws {
        try a.close(drain: drain)
        try b.close(drain: drain)
    }

    func advance(by dt: Duration) {
        clockA.advance(by: dt)
        clockB.advance(by: dt)
    }

    func runUntilIdle() {
        clockA.runUntilIdle()
        clockB.runUntilIdle()
    }
}
