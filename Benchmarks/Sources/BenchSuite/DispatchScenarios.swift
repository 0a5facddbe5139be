import CBench
import Dispatch
import Synchronization

/// The scenarios, for an implementation written with Dispatch. Time is the
/// real monotonic clock (`DispatchTime`, CLOCK_MONOTONIC on Linux), read on
/// every call: Dispatch's timers leave no other choice.
enum DispatchScenarios {
    static func run<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> [String: Measured] {
        switch p.scenario {
        case "throttle-hot": return ["throttle-hot": hot(type, .throttle(interval: 3600 * sec), p, w, passes: 2)]
        case "debounce-rearm": return ["debounce-rearm": hot(type, .debounce(interval: p.interval), p, w, passes: 1)]
        case "fire": return fire(type, p, w)
        case "lateness": return ["lateness": lateness(type, p, w)]
        case "spray": return ["spray": spray(type, p, w)]
        case "threads": return ["threads": threads(type, p, w)]
        case "quotas": return ["quotas": p.threads > 1 ? quotasThreads(type, p, w) : quotas(type, p, w)]
        default: return [:]
        }
    }

    static func queue() -> DispatchQueue {
        DispatchQueue(label: "bench.consumer", qos: .userInitiated)
    }

    /// Calls on existing keys in random order. `passes` setup rounds over all
    /// keys first (throttle: open the window, then make a value pending).
    static func hot<L: DispatchLimiter>(
        _ type: L.Type, _ policy: BasePolicy, _ p: CaseParams, _ w: Workload, passes: Int
    ) -> Measured {
        let consumer = Consumer(target: .max)
        let q = queue()
        let limiter = L(policy: policy, queue: q, cap: nil, consumer: consumer)
        for _ in 0..<passes {
            for k in 0..<w.n where limiter.submit(k, for: w.key(k)) == .emitted { consumer.consume(k) }
        }
        q.sync {}
        waitUntilQuiet(limit: 5)
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        var i = 0
        while i < w.ops {
            let end = min(i + 4096, w.ops)
            while i < end {
                if limiter.submit(i, for: w.orderedKey(i)) == .emitted { consumer.consume(i) }
                i += 1
            }
            if p.budget > 0 && Double(cb_now() - t0) > p.budget * 1e9 { break }
        }
        q.sync {}  // the work the calls queued on the serial queue
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        cb_keep(consumer.sum)
        return .rate(ops: i, wall: wall, cpu: cpu)
    }

    /// N debounce keys armed with the consumer queue suspended, all due after
    /// the arming ends; once the Dispatch manager has fired them all (its CPU
    /// time is counted), the queue is resumed and timed until the last
    /// delivery. Also gives the memory figures (RSS per pending key, and once
    /// everything fired and went idle).
    static func fire<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> [String: Measured] {
        // Pilot: the arming cost per key, on a throwaway limiter.
        let pilotCount = min(2000, w.n)
        let pilot = L(policy: .debounce(interval: 3600 * sec), queue: queue(), cap: nil, consumer: Consumer(target: 0))
        let pt0 = cb_now()
        for k in 0..<pilotCount { _ = pilot.submit(k, for: w.key(k) ^ 0x5555) }
        let perKey = Double(cb_now() - pt0) / Double(max(pilotCount, 1))
        let delay = UInt64(max(100e6, 3.0 * perKey * Double(w.n) + 100e6))

        let consumer = Consumer(target: w.n)
        let q = queue()
        let limiter = L(policy: .debounce(interval: delay), queue: q, cap: nil, consumer: consumer)
        q.suspend()
        waitUntilQuiet(limit: 2)
        let rss0 = cb_rss()
        let armStart = cb_now()
        for k in 0..<w.n { _ = limiter.submit(k, for: w.key(k)) }
        let armEnd = cb_now()
        let rss1 = cb_rss()
        var note: String?
        if armEnd >= armStart + delay { note = "arming overran the first deadline" }
        cb_sleep_until(max(cb_now(), armStart + delay - 2 * ms))
        let c0 = cb_process_cpu()
        cb_sleep_until(armEnd + delay + limiter.leeway + 5 * ms)
        waitUntilQuiet(limit: 30)
        let c1 = cb_process_cpu()
        let t0 = cb_now()
        q.resume()
        let ok = consumer.waitAll(timeout: 120)
        let t1 = cb_now()
        let c2 = cb_process_cpu()
        cb_sleep_until(cb_now() + 100 * ms)
        waitUntilQuiet(limit: 5)
        let rss2 = cb_rss()
        let got = consumer.delivered.load(ordering: .acquiring)
        var fire = Measured()
        fire.ops = got
        // wall: the manager's CPU time while firing (nothing else ran) plus
        // the delivery's wall time; cpu: all threads, firing and delivery.
        fire.nsPerOp = got > 0 ? Double((c1 - c0) + (t1 - t0)) / Double(got) : nil
        fire.cpuNsPerOp = got > 0 ? Double(c2 - c0) / Double(got) : nil
        fire.note = ok ? note : "only \(got) of \(w.n) delivered"
        var memory = Measured()
        memory.ops = w.n
        memory.bytesPerKey = (Double(rss1) - Double(rss0)) / Double(w.n)
        memory.idleBytesPerKey = (Double(rss2) - Double(rss0)) / Double(w.n)
        withExtendedLifetime((pilot, limiter)) {}
        return ["fire": fire, "memory": memory]
    }

    /// N keys submitted at a steady pace over `spread`, each due `interval`
    /// later; delivery time minus deadline on the consumer queue.
    static func lateness<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> Measured {
        let consumer = Consumer(target: w.n, recordLateness: true)
        let q = queue()
        let limiter = L(policy: .debounce(interval: p.interval), queue: q, cap: nil, consumer: consumer)
        paced(w.n, spread: p.spread) { k in _ = limiter.submit(k, for: w.key(k)) }
        let ok = consumer.waitAll(timeout: Double(p.interval) / 1e9 + 30)
        q.sync {}
        var m = Measured()
        m.ops = consumer.delivered.load(ordering: .acquiring)
        m.lateness = consumer.samples
        m.early = consumer.early
        if !ok { m.note = "only \(m.ops) of \(w.n) delivered" }
        return m
    }

    /// Unique keys past the cap on a rate limiter (1 per minute).
    static func spray<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> Measured {
        let consumer = Consumer(target: .max)
        let q = queue()
        let limiter = L(policy: .rate(limit: 1, per: 60 * sec, burst: 1), queue: q, cap: p.cap, consumer: consumer)
        waitUntilQuiet(limit: 1)
        _ = cb_reset_peak_rss()
        let rss0 = cb_rss()
        var refused = 0
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        for i in 0..<w.n {
            switch limiter.submit(i, for: w.key(i)) {
            case .emitted: consumer.consume(i)
            case .full: refused += 1
            default: break
            }
        }
        q.sync {}
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        let peak = cb_peak_rss()
        var m = Measured.rate(ops: w.n, wall: wall, cpu: cpu)
        m.refused = refused
        m.peakRSS = peak > rss0 ? Double(peak - rss0) : 0
        m.bytesPerKey = m.peakRSS! / Double(max(1, min(w.n, p.cap)))
        cb_keep(consumer.sum)
        return m
    }

    /// Rate limiter (100 per second) on warm keys, each thread its own keys.
    static func threads<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> Measured {
        let consumer = Consumer(target: .max)
        let q = queue()
        let limiter = L(policy: .rate(limit: 100, per: sec, burst: 100), queue: q, cap: nil, consumer: consumer)
        for k in 0..<w.n { _ = limiter.submit(k, for: w.key(k)) }
        q.sync {}
        waitUntilQuiet(limit: 5)
        let per = w.n / p.threads
        let (ops, wall, cpu) = runThreads(p.threads, budget: p.budget) { t, stop in
            var i = 0
            var sum: UInt64 = 0
            let lo = t * per
            let start = t * 7919
            while !stop.load(ordering: .relaxed) {
                for _ in 0..<256 {
                    let k = lo + Int(w.order[(start + i) % w.ops]) % per
                    if limiter.submit(i, for: w.key(k)) == .emitted { sum &+= UInt64(i) }
                    i += 1
                }
            }
            cb_keep(sum)
            return i
        }
        return .rate(ops: ops, wall: wall, cpu: cpu)
    }
}

extension DispatchScenarios {
    /// quotas, one thread: every key charged once under the three quotas
    /// (untimed; the RSS growth over it is the memory figure), then calls on
    /// existing keys in random order, the real clock read on every call.
    static func quotas<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> Measured {
        let consumer = Consumer(target: .max)
        let q = queue()
        let limiter = L(policy: BasePolicy.quotaPlan, queue: q, cap: nil, consumer: consumer)
        waitUntilQuiet(limit: 2)
        let rss0 = cb_rss()
        for k in 0..<w.n where limiter.submit(k, for: w.key(k)) == .emitted { consumer.consume(k) }
        let rss1 = cb_rss()
        waitUntilQuiet(limit: 5)
        var admitted = 0
        let c0 = cb_process_cpu()
        let t0 = cb_now()
        var i = 0
        while i < w.ops {
            let end = min(i + 4096, w.ops)
            while i < end {
                if limiter.submit(i, for: w.orderedKey(i)) == .emitted {
                    consumer.consume(i)
                    admitted += 1
                }
                i += 1
            }
            if p.budget > 0 && Double(cb_now() - t0) > p.budget * 1e9 { break }
        }
        q.sync {}
        let wall = cb_now() - t0
        let cpu = cb_process_cpu() - c0
        cb_keep(consumer.sum)
        var m = Measured.rate(ops: i, wall: wall, cpu: cpu)
        m.admitted = admitted
        m.bytesPerKey = (Double(rss1) - Double(rss0)) / Double(w.n)
        return m
    }

    /// quotas, several threads: as `threads` (each thread its own share of
    /// the keys), under the three quotas.
    static func quotasThreads<L: DispatchLimiter>(_ type: L.Type, _ p: CaseParams, _ w: Workload) -> Measured {
        let consumer = Consumer(target: .max)
        let q = queue()
        let limiter = L(policy: BasePolicy.quotaPlan, queue: q, cap: nil, consumer: consumer)
        for k in 0..<w.n { _ = limiter.submit(k, for: w.key(k)) }
        q.sync {}
        waitUntilQuiet(limit: 5)
        let per = w.n / p.threads
        let admitted = AdmittedCount()
        let (ops, wall, cpu) = runThreads(p.threads, budget: p.budget) { t, stop in
            var i = 0
            var n = 0
            var sum: UInt64 = 0
            let lo = t * per
            let start = t * 7919
            while !stop.load(ordering: .relaxed) {
                for _ in 0..<256 {
                    let k = lo + Int(w.order[(start + i) % w.ops]) % per
                    if limiter.submit(i, for: w.key(k)) == .emitted {
                        sum &+= UInt64(i)
                        n += 1
                    }
                    i += 1
                }
            }
            cb_keep(sum)
            admitted.n.wrappingAdd(n, ordering: .relaxed)
            return i
        }
        var m = Measured.rate(ops: ops, wall: wall, cpu: cpu)
        m.admitted = admitted.n.load(ordering: .relaxed)
        return m
    }
}

/// Calls admitted by the threads of a case (each adds its own count once, at the end).
final class AdmittedCount: Sendable {
    let n = Atomic<Int>(0)
}

/// Calls `body(k)` for k in 0..<n, in batches every 100 µs spread evenly over
/// `spread` ns (the pace of the lateness scenario, the same for everyone).
func paced(_ n: Int, spread: UInt64, _ body: (Int) -> Void) {
    let t0 = cb_now()
    let batches = max(1, Int(spread / 100_000))
    var done = 0
    for b in 0..<batches {
        let upto = n * (b + 1) / batches
        while done < upto {
            body(done)
            done += 1
        }
        cb_sleep_until(t0 + UInt64(b + 1) * 100_000)
    }
}
