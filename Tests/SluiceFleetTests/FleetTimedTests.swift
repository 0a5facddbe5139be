import Foundation
import Testing

import Sluice
import SluiceFleet

private func config(port: Int, prefix: String, manual: Bool = false) -> FleetConfiguration {
    var c = FleetConfiguration()
    c.port = port
    c.prefix = prefix
    c.manualTime = manual
    return c
}

private func options(lease: Duration = .seconds(30)) -> FleetTimedLimiter<String>.Options {
    var o = FleetTimedLimiter<String>.Options()
    o.lease = lease
    o.timeout = .seconds(30)  // generous: a slow reply on a loaded machine is not a fault here
    o.partitions = 3
    return o
}

private func ms(_ v: UInt64) -> LimiterInstant { LimiterInstant(nanoseconds: v * 1_000_000) }

private struct Edit: Codable, FleetPayload, Equatable {
    var document: String
    var revision: Int
}

/// The first `n` elements of a stream, or fewer when `limit` passes first.
private func take<T: Sendable>(
    _ n: Int, from stream: AsyncStream<T>, within limit: Duration = .seconds(20)
) async
    -> [T]
{
    await withTaskGroup(of: [T].self) { group in
        group.addTask {
            var got: [T] = []
            for await x in stream {
                got.append(x)
                if got.count == n { break }
            }
            return got
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return []
        }
        let first = await group.next() ?? []
        group.cancelAll()
        return first
    }
}

@Suite("FleetTimedLimiter")
struct FleetTimedTests {
    @Test("debounce in manual time: scheduled, replaced values handed back, pending, cancel, close", .needsRedis)
    func manual() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let hooks = try FleetTimedLimiter<String>(
            .debounce(interval: .milliseconds(100)), configuration: config(port: redis.port, prefix: "m", manual: true),
            options: options())
        let a = try await hooks.submit("r1", for: "doc", at: ms(0))
        #expect(a.outcome == .scheduled(at: ms(100)) && a.replaced == nil)
        let b = try await hooks.submit("r2", for: "doc", at: ms(50))
        #expect(b.outcome == .scheduled(at: ms(150)) && b.replaced == "r1")
        #expect(try await hooks.isPending("doc", at: ms(60)))
        #expect(try await hooks.cancel("doc", at: ms(70)) == "r2")
        #expect(try await !hooks.isPending("doc", at: ms(80)))
        _ = try await hooks.submit("x", for: "other", at: ms(90))
        #expect(try await hooks.flush("other", at: ms(95)))
        #expect(try await !hooks.flush("other", at: ms(96)))
        _ = try await hooks.submit("y", for: "k1", at: ms(100))
        _ = try await hooks.submit("z", for: "k2", at: ms(100))
        let back = try await hooks.closeFleet(drain: false, at: ms(150))
        #expect(Set(back.map { "\($0.key)=\($0.value)" }) == ["k1=y", "k2=z"])
        await #expect(throws: LimiterError.closed) { try await hooks.submit("late", for: "k1", at: ms(160)) }
        // a time is for manual mode only, and manual mode needs one
        await #expect(throws: LimiterError.invalidArgument) { try await hooks.submit("v", for: "k") }
    }

    @Test("options and values are checked, naming the rule", .needsRedis)
    func checks() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        #expect(throws: LimiterError.invalidArgument) {
            _ = try FleetTimedLimiter<String>(.rate(limit: 1, per: .seconds(1)))
        }
        var o = options()
        o.partitions = 0
        #expect(throws: LimiterError.invalidArgument) {
            _ = try FleetTimedLimiter<String>(.audit(interval: .seconds(1)), options: o)
        }
        o = options()
        o.maxValueBytes = 4
        let small = try FleetTimedLimiter<String>(
            .audit(interval: .seconds(1)), configuration: config(port: redis.port, prefix: "c", manual: true),
            options: o)
        await #expect(throws: LimiterError.outOfRange) { try await small.submit("12345", for: "k", at: ms(0)) }
        let ok = try await small.submit("1234", for: "k", at: ms(0))
        #expect(ok.outcome == .scheduled(at: ms(1000)))
        #expect(throws: LimiterError.invalidArgument) { _ = try small.deliveries() }  // manual time
    }

    @Test("a worker delivers another process's emissions with Codable values; acknowledged", .needsRedis)
    func worker() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let policy = LimiterPolicy.debounce(interval: .milliseconds(300))
        let caller = try FleetTimedLimiter<Edit>(
            policy, configuration: config(port: redis.port, prefix: "w"),
            options: .init())
        let worker = try FleetTimedLimiter<Edit>(policy, configuration: config(port: redis.port, prefix: "w"))
        let stream = try worker.deliveries(poll: .milliseconds(50))
        #expect(throws: LimiterError.invalidArgument) { _ = try worker.deliveries() }  // a worker once
        _ = try await caller.submit(Edit(document: "d1", revision: 1), for: "d1")
        let s = try await caller.submit(Edit(document: "d1", revision: 2), for: "d1")
        _ = try await caller.submit(Edit(document: "d2", revision: 1), for: "d2")
        // the second edit replaced the first, unless a loaded machine let the
        // first one's 300 ms pass in between: then both are delivered
        let replaced = s.replaced != nil
        #expect(!replaced || s.replaced == Edit(document: "d1", revision: 1))
        let got = await take(replaced ? 2 : 3, from: stream)
        #expect(
            Set(got.map { "\($0.key)@\($0.value.revision)" })
                == (replaced ? ["d1@2", "d2@1"] : ["d1@1", "d1@2", "d2@1"]))
        for d in got {
            #expect(d.attempt == 1 && d.generation > 0)
            try await d.acknowledge()
            try await d.acknowledge()  // the same attempt again: harmless
        }
        let stats = worker.statistics
        #expect(stats.delivered == UInt64(got.count) && stats.acknowledged == UInt64(got.count) && stats.inHand == 0)
        // the worker's claims and acknowledgements: at least one run, never
        // more than one per claim plus one per acknowledgement
        #expect(stats.scriptRuns >= 1 && stats.scriptRuns <= stats.claims + 2 * UInt64(got.count))
        #expect(caller.statistics.scriptRuns >= 1 && caller.statistics.scriptRuns <= 3)
        await worker.shutdown()
    }

    @Test("shutting a worker down hands its deliveries to another at once; a thrown handler retries", .needsRedis)
    func handOver() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let policy = LimiterPolicy.audit(interval: .milliseconds(20))
        let holder = try FleetTimedLimiter<String>(
            policy, configuration: config(port: redis.port, prefix: "h"), options: options(lease: .seconds(600)))
        let stream = try holder.deliveries(poll: .milliseconds(50))
        _ = try await holder.submit("v", for: "k")
        let got = await take(1, from: stream)
        let one = try #require(got.first)  // held, never acknowledged
        #expect(one.value == "v" && one.attempt == 1)
        // a second worker, whose handler fails once: the delivery comes back at once
        let second = try FleetTimedLimiter<String>(
            policy, configuration: config(port: redis.port, prefix: "h"), options: options(lease: .seconds(600)))
        let attempts = Locked([Int]())
        let run = Task {
            try await second.run { d in
                let n = attempts.withLock { a -> Int in
                    a.append(d.attempt)
                    return a.count
                }
                if n == 1 { throw CancellationError() }  // the work failed: retry
            }
        }
        let started = ContinuousClock.now
        // hands `one` back, well before its 600 s lease (the bounds are wide: under
        // TSan the test pool's two threads can be busy elsewhere for tens of seconds)
        await holder.shutdown()
        while attempts.withLock({ $0.count }) < 2 && ContinuousClock.now - started < .seconds(180) {
            try await Task.sleep(for: .milliseconds(20))
        }
        run.cancel()
        _ = await run.result
        let seen = attempts.withLock { $0 }
        #expect(seen.count >= 2 && seen[0] > one.attempt && seen[1] == seen[0] + 1, "\(seen)")
        #expect(ContinuousClock.now - started < .seconds(180))
        await second.shutdown()
    }
}

/// A small lock for the tests' shared state.
private final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
