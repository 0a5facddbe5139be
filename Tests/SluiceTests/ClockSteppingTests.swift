import Foundation
import Synchronization
import Testing

@testable import Sluice

/// `ManualLimiterClock.advance` across the clock's limiters: each timer runs
/// with the clock at its own deadline, in time order across the limiters,
/// whether the clock has one limiter (its single-limiter rounds) or several,
/// and when limiters join or close during the advance (from a handler).
@Suite("Manual clock: stepping across limiters")
struct ClockSteppingTests {
    static let ms: UInt64 = 1_000_000

    /// What handlers saw: (limiter, key, value, the clock's time).
    final class Log: Sendable {
        let entries = Mutex<[(tag: Int, key: Int, value: Int, now: UInt64)]>([])
        func add(_ tag: Int, _ key: Int, _ value: Int, _ now: UInt64) {
            entries.withLock { $0.append((tag, key, value, now)) }
        }
        var all: [(tag: Int, key: Int, value: Int, now: UInt64)] { entries.withLock { $0 } }
    }

    /// A debounce limiter of `interval` ms on `clock` whose handler logs
    /// under `tag`; the default 1 ms tick, so deadlines on whole ms fire exactly.
    static func limiter(
        _ clock: ManualLimiterClock, _ tag: Int, _ interval: Int64, _ log: Log
    ) throws -> Limiter<Int, Int> {
        try Limiter<Int, Int>(.debounce(interval: .milliseconds(interval)), scheduler: .manual(clock)) {
            key, value in log.add(tag, key, value, clock.now.nanoseconds)
        }
    }

    @Test("one limiter, many deadlines in one advance: each value at its own deadline, in time order")
    func oneLimiter() throws {
        let clock = ManualLimiterClock()
        let log = Log()
        let a = try Self.limiter(clock, 0, 100, log)
        var expected: [Int: UInt64] = [:]
        // 3000 keys in bursts: 30 per ms, so runs of keys share a deadline
        // and deadlines sit on several wheel levels.
        for k in 0..<3000 {
            if k % 30 == 0 { clock.advance(to: LimiterInstant(nanoseconds: UInt64(k / 30) * Self.ms)) }
            try a.submit(k, for: k)
            expected[k] = clock.now.nanoseconds + 100 * Self.ms
        }
        #expect(log.all.isEmpty)
        clock.advance(by: .seconds(5))
        let seen = log.all
        #expect(seen.count == 3000)
        var last: UInt64 = 0
        for e in seen {
            #expect(e.now == expected[e.key], "key \(e.key) ran at \(e.now), its deadline is \(expected[e.key]!)")
            #expect(e.value == e.key)
            #expect(e.now >= last, "out of time order")
            last = e.now
        }
        withExtendedLifetime(a) {}
    }

    @Test("two limiters on one clock: their timers interleave in time order")
    func twoLimitersInterleave() throws {
        let clock = ManualLimiterClock()
        let log = Log()
        let a = try Self.limiter(clock, 0, 7, log)
        let b = try Self.limiter(clock, 1, 11, log)
        var expected: [Int: UInt64] = [:]  // key -> deadline (keys distinct across limiters)
        for i in 0..<400 {
            clock.advance(to: LimiterInstant(nanoseconds: UInt64(i) * Self.ms))
            try a.submit(i, for: i)
            expected[i] = UInt64(i + 7) * Self.ms
            try b.submit(10_000 + i, for: 10_000 + i)
            expected[10_000 + i] = UInt64(i + 11) * Self.ms
        }
        // Some fired during the submissions; the rest in one advance.
        clock.advance(by: .seconds(2))
        let seen = log.all
        #expect(seen.count == 800)
        var last: UInt64 = 0
        var tags = Set<Int>()
        for e in seen {
            #expect(e.now == expected[e.key], "key \(e.key) ran at \(e.now), its deadline is \(expected[e.key]!)")
            #expect(e.now >= last, "limiter \(e.tag) key \(e.key) at \(e.now) after a timer at \(last)")
            last = e.now
            tags.insert(e.tag)
        }
        #expect(tags == [0, 1])
        withExtendedLifetime((a, b)) {}
    }

    @Test("a limiter created in a handler during an advance has its timers fired in the same advance, in order")
    func limiterJoinsDuringAdvance() throws {
        let clock = ManualLimiterClock()
        let log = Log()
        let made = Mutex<Limiter<Int, Int>?>(nil)
        let a = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            log.add(0, key, value, clock.now.nanoseconds)
            if key == 0 {
                // At 10 ms: a second limiter, a value due at 15 ms.
                let b = try! ClockSteppingTests.limiter(clock, 1, 5, log)
                try! b.submit(500, for: 500)
                made.withLock { $0 = b }
            }
        }
        try a.submit(0, for: 0)  // due at 10 ms
        clock.advance(to: LimiterInstant(nanoseconds: 2 * Self.ms))
        try a.submit(2, for: 2)  // due at 12 ms
        clock.advance(to: LimiterInstant(nanoseconds: 8 * Self.ms))
        try a.submit(8, for: 8)  // due at 18 ms
        clock.advance(to: LimiterInstant(nanoseconds: 100 * Self.ms))
        let seen = log.all.map { [$0.tag, $0.key, Int($0.now / Self.ms)] }
        #expect(seen == [[0, 0, 10], [0, 2, 12], [1, 500, 15], [0, 8, 18]])
        #expect(clock.now.nanoseconds == 100 * Self.ms)
        withExtendedLifetime(a) {}
        made.withLock { $0 = nil }
    }

    @Test("a limiter closed or dropped in a handler during an advance fires nothing more; the others go on")
    func limiterLeavesDuringAdvance() throws {
        let clock = ManualLimiterClock()
        let log = Log()
        let b = Mutex<Limiter<Int, Int>?>(try Self.limiter(clock, 1, 20, log))
        let c = Mutex<Limiter<Int, Int>?>(try Self.limiter(clock, 2, 20, log))
        let a = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            log.add(0, key, value, clock.now.nanoseconds)
            if key == 1 {
                // At 11 ms: b closed (discarding what it holds), c dropped.
                b.withLock { try? $0?.close(drain: false) }
                c.withLock { $0 = nil }
            }
        }
        _ = try b.withLock { try $0!.submit(100, for: 100) }  // due at 20 ms: discarded
        _ = try c.withLock { try $0!.submit(200, for: 200) }  // due at 20 ms: discarded with c
        try a.submit(0, for: 0)  // due at 10 ms
        clock.advance(to: LimiterInstant(nanoseconds: 1 * Self.ms))
        try a.submit(1, for: 1)  // due at 11 ms
        clock.advance(to: LimiterInstant(nanoseconds: 5 * Self.ms))
        try a.submit(5, for: 5)  // due at 15 ms
        clock.advance(to: LimiterInstant(nanoseconds: 15 * Self.ms))
        try a.submit(15, for: 15)  // due at 25 ms
        clock.advance(by: .seconds(1))
        let seen = log.all.map { [$0.tag, $0.key, Int($0.now / Self.ms)] }
        #expect(seen == [[0, 0, 10], [0, 1, 11], [0, 5, 15], [0, 15, 25]])
        withExtendedLifetime(a) {}
    }

    @Test("a handler calling its limiter sees the clock at the timer's deadline")
    func handlerSeesItsDeadline() throws {
        let clock = ManualLimiterClock()
        let log = Log()
        let holder = Mutex<Limiter<Int, Int>?>(nil)
        let a = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            log.add(0, key, value, clock.now.nanoseconds)
            // Re-arm from the handler: due 10 ms after this deadline.
            if value < 3 { _ = try! holder.withLock { try $0!.submit(value + 1, for: key) } }
        }
        holder.withLock { $0 = a }
        try a.submit(0, for: 7)  // 10, then 20, 30, 40 ms
        clock.advance(to: LimiterInstant(nanoseconds: 3 * Self.ms))
        try a.submit(0, for: 8)  // 13, 23, 33, 43 ms
        clock.advance(by: .seconds(1))
        let seen = log.all.map { [$0.key, $0.value, Int($0.now / Self.ms)] }
        #expect(
            seen == [
                [7, 0, 10], [8, 0, 13], [7, 1, 20], [8, 1, 23], [7, 2, 30], [8, 2, 33], [7, 3, 40], [8, 3, 43],
            ])
        holder.withLock { $0 = nil }
        withExtendedLifetime(a) {}
    }
}
