import CBench
import Sluice

/// "sluice-swift": `Limiter<UInt64, Int>` with a handler delivery (the
/// consumer), on a `ManualLimiterClock` where sluice-c runs the core on a
/// manual clock (same time steps: 100 µs every 1024 calls), and on a
/// `LimiterLoop` (the real loop and clock) for lateness and threads.
enum SluiceSwiftScenarios {
    typealias L = Limiter<UInt64, Int>

    static func run(_ p: CaseParams, _ w: Workload) throws -> [String: Measured] {
        switch p.scenario {
        case "throttle-hot": return ["throttle-hot": try hot(.throttle(interval: .seconds(3600)), p, w, passes: 2)]
        case "debounce-rearm":
            return ["debounce-rearm": try hot(.debounce(interval: .nanoseconds(Int64(p.interval))), p, w, passes: 1)]
        case "fire": return try fire(p, w)
        case "lateness": return ["lateness": try lateness(p, w)]
        case "spray": return ["spray": try spray(p, w)]
        case "threads": return ["threads": try threads(p, w)]
        default: return [:]
        }
    }

    static func hot(_ policy: LimiterPolicy, _ p: CaseParams, _ w: Workload, passes: Int) throws -> Measured {
        let consumer = Consumer(target: .max)
        let clock = ManualLimiterClock()
        clock.advance(to: LimiterInstant(nanoseconds: manualT0))
        let limiter = try L(policy, scheduler: .manual(clock)) { _, v in consumer.consume(v) }
        for pass in 0..<passes {
            clock.advance(to: LimiterInstant(nanoseconds: manualT0 + UInt64(pass)))
            for k in 0..<w.n { try limiter.submit(k, for: w.key(k)) }
        }
        let start = manualT0 + UInt64(passes)
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        var i = 0
        while i < w.ops {
            let end = min(i + 4096, w.ops)
            while i < end {
                if i & 1023 == 0 { clock.advance(to: LimiterInstant(nanoseconds: cb_manual_now(start, i))) }
                _ = try? limiter.submit(i, for: w.orderedKey(i))
                i += 1
            }
            if p.budget > 0 && Double(cb_now() - t0) > p.budget * 1e9 { break }
        }
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        cb_keep(consumer.sum)
        withExtendedLifetime(limiter) {}
        return .rate(ops: i, wall: wall, cpu: cpu)
    }

    /// "sluice-swift-batch": throttle-hot and debounce-rearm as ``hot(_:_:_:passes:)``,
    /// the measured calls handed over with `submit(contentsOf:_:)` in batches
    /// of 32 (a divisor of the 1024-call clock step: every call keeps its
    /// time). As `sluice-swift` ignores `submit`'s decision, the batch reads
    /// none of its results (the emissions reach the consumer through the
    /// handler): the variant that calls a closure per result, allocating no
    /// array of results.
    static func runBatch(_ p: CaseParams, _ w: Workload) throws -> [String: Measured] {
        switch p.scenario {
        case "throttle-hot": return ["throttle-hot": try hotBatch(.throttle(interval: .seconds(3600)), p, w, passes: 2)]
        case "debounce-rearm":
            return [
                "debounce-rearm": try hotBatch(.debounce(interval: .nanoseconds(Int64(p.interval))), p, w, passes: 1)
            ]
        default: return [:]
        }
    }

    static func hotBatch(_ policy: LimiterPolicy, _ p: CaseParams, _ w: Workload, passes: Int) throws -> Measured {
        let consumer = Consumer(target: .max)
        let clock = ManualLimiterClock()
        clock.advance(to: LimiterInstant(nanoseconds: manualT0))
        let limiter = try L(policy, scheduler: .manual(clock)) { _, v in consumer.consume(v) }
        for pass in 0..<passes {
            clock.advance(to: LimiterInstant(nanoseconds: manualT0 + UInt64(pass)))
            for k in 0..<w.n { try limiter.submit(k, for: w.key(k)) }
        }
        let start = manualT0 + UInt64(passes)
        let batch = 32
        // One buffer for every batch, filled in place (as the C harness fills
        // its stack array): appending would test the array's uniqueness and
        // capacity per element.
        var items = [(Int, UInt64)](repeating: (0, 0), count: batch)
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        var i = 0
        while i < w.ops {
            let end = min(i + 4096, w.ops)
            while i < end {
                if i & 1023 == 0 { clock.advance(to: LimiterInstant(nanoseconds: cb_manual_now(start, i))) }
                let n = min(batch, end - i)
                items.withUnsafeMutableBufferPointer { buffer in
                    for j in 0..<n { buffer[j] = (i + j, w.orderedKey(i + j)) }
                }
                if n == batch {
                    limiter.submit(contentsOf: items) { _, _ in }
                } else {
                    limiter.submit(contentsOf: items[..<n]) { _, _ in }
                }
                i += n
            }
            if p.budget > 0 && Double(cb_now() - t0) > p.budget * 1e9 { break }
        }
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        cb_keep(consumer.sum)
        withExtendedLifetime(limiter) {}
        return .rate(ops: i, wall: wall, cpu: cpu)
    }

    /// Keys submitted over one second of manual time (deadlines spread over a
    /// second, `interval` later), then one advance past them all.
    static func fire(_ p: CaseParams, _ w: Workload) throws -> [String: Measured] {
        let consumer = Consumer(target: w.n)
        let clock = ManualLimiterClock()
        clock.advance(to: LimiterInstant(nanoseconds: manualT0))
        let limiter = try L(.debounce(interval: .nanoseconds(Int64(p.interval))), scheduler: .manual(clock)) { _, v in
            consumer.deliver(v, deadline: 0)
        }
        let rss0 = cb_rss()
        for k in 0..<w.n {
            if k & 1023 == 0 {
                let t = manualT0 + UInt64(Double(k) * 1e9 / Double(w.n))
                clock.advance(to: LimiterInstant(nanoseconds: t))
            }
            try limiter.submit(k, for: w.key(k))
        }
        let rss1 = cb_rss()
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        clock.advance(to: LimiterInstant(nanoseconds: manualT0 + sec + p.interval + 2 * ms))
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        let rss2 = cb_rss()
        let got = consumer.delivered.load(ordering: .acquiring)
        var fire = Measured.rate(ops: got, wall: wall, cpu: cpu)
        if got != w.n { fire.note = "only \(got) of \(w.n) delivered" }
        var memory = Measured()
        memory.ops = w.n
        memory.bytesPerKey = (Double(rss1) - Double(rss0)) / Double(w.n)
        memory.idleBytesPerKey = (Double(rss2) - Double(rss0)) / Double(w.n)
        withExtendedLifetime(limiter) {}
        return ["fire": fire, "memory": memory]
    }

    static func lateness(_ p: CaseParams, _ w: Workload) throws -> Measured {
        let consumer = Consumer(target: w.n, recordLateness: true)
        let loop = try LimiterLoop()
        let limiter = try L(
            .debounce(interval: .nanoseconds(Int64(p.interval))), scheduler: .loop(loop),
            delivery: .events { event in
                if event.kind == .emitted { consumer.deliver(event.value, deadline: event.at.nanoseconds) }
            })
        paced(w.n, spread: p.spread) { k in _ = try? limiter.submit(k, for: w.key(k)) }
        let ok = consumer.waitAll(timeout: Double(p.interval) / 1e9 + 30)
        try? await_close(limiter)
        var m = Measured()
        m.ops = consumer.delivered.load(ordering: .acquiring)
        m.lateness = consumer.samples
        m.early = consumer.early
        if !ok { m.note = "only \(m.ops) of \(w.n) delivered" }
        return m
    }

    private static func await_close(_ limiter: L) throws {
        try limiter.close(drain: false)
    }

    static func spray(_ p: CaseParams, _ w: Workload) throws -> Measured {
        let consumer = Consumer(target: .max)
        let clock = ManualLimiterClock()
        clock.advance(to: LimiterInstant(nanoseconds: manualT0))
        let limiter = try L(.rate(limit: 1, per: .seconds(60), burst: 1), scheduler: .manual(clock), maxKeys: p.cap) {
            _, v in consumer.consume(v)
        }
        _ = cb_reset_peak_rss()
        let rss0 = cb_rss()
        var refused = 0
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        for i in 0..<w.n {
            if i & 1023 == 0 { clock.advance(to: LimiterInstant(nanoseconds: cb_manual_now(manualT0, i))) }
            do {
                try limiter.submit(i, for: w.key(i))
            } catch .full {
                refused += 1
            } catch {
                fatalError("sluice-swift spray: \(error)")
            }
        }
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        let peak = cb_peak_rss()
        var m = Measured.rate(ops: w.n, wall: wall, cpu: cpu)
        m.refused = refused
        m.peakRSS = peak > rss0 ? Double(peak - rss0) : 0
        m.bytesPerKey = m.peakRSS! / Double(max(1, min(w.n, p.cap)))
        cb_keep(consumer.sum)
        withExtendedLifetime(limiter) {}
        return m
    }

    static func threads(_ p: CaseParams, _ w: Workload) throws -> Measured {
        // A quota decision per request, the work done by the caller when
        // admitted: `RateLimiter.check`, as sluice-c reads sluice_mt_submit's
        // decision and the Dispatch limiters return `.emitted` (a `Limiter`
        // would instead hand each admitted value to its handler on the loop
        // thread).
        let loop = try LimiterLoop()
        let limiter = try RateLimiter<UInt64>(.rate(limit: 100, per: .seconds(1)), scheduler: .loop(loop))
        for k in 0..<w.n { _ = try limiter.check(w.key(k)) }
        let per = w.n / p.threads
        let (ops, wall, cpu) = runThreads(p.threads, budget: p.budget) { t, stop in
            var i = 0
            var sum: UInt64 = 0
            let lo = t * per
            let start = t * 7919
            while !stop.load(ordering: .relaxed) {
                for _ in 0..<256 {
                    let k = lo + Int(w.order[(start + i) % w.ops]) % per
                    if (try? limiter.check(w.key(k)))?.isAdmitted == true { sum &+= UInt64(i) }
                    i += 1
                }
            }
            cb_keep(sum)
            return i
        }
        withExtendedLifetime(limiter) {}
        return .rate(ops: ops, wall: wall, cpu: cpu)
    }
}
