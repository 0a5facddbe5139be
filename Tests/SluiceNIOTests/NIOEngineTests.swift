#if NIO
import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import Synchronization
import Testing

@testable import Sluice
@testable import SluiceCLI
import SluiceNIO

/// Tests/ (this file is Tests/SluiceNIOTests/NIOEngineTests.swift).
private let vectorsDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Vectors")

/// Every `*.trace` of Tests/Vectors that has a `.expected` file.
private func vectorTraces() -> [String] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: vectorsDirectory.path)) ?? []
    return names.sorted().filter { $0.hasSuffix(".trace") }.map { vectorsDirectory.appendingPathComponent($0).path }
        .filter { FileManager.default.fileExists(atPath: String($0.dropLast(".trace".count)) + ".expected") }
}

/// NIO's clock is an Int64 of nanoseconds: traces past it cannot run on a NIO loop.
private let nioLimitMilliseconds = UInt64(Int64.max) / 1_000_000

/// A host that counts the wake-ups a limiter schedules and cancels.
final class CountingHost: LimiterTimerHost {
    let inner: EventLoopTimerHost
    let scheduled = Atomic<Int>(0)
    let cancelled = Atomic<Int>(0)
    init(_ loop: any EventLoop) { inner = EventLoopTimerHost(loop) }
    var nowNanoseconds: UInt64 { inner.nowNanoseconds }
    func scheduleWakeUp(at deadline: UInt64, _ body: @escaping @Sendable () -> Void) -> any LimiterWakeUp {
        scheduled.add(1, ordering: .relaxed)
        return Counted(wakeUp: inner.scheduleWakeUp(at: deadline, body), host: self)
    }
    struct Counted: LimiterWakeUp {
        let wakeUp: any LimiterWakeUp
        let host: CountingHost
        func cancel() {
            host.cancelled.add(1, ordering: .relaxed)
            wakeUp.cancel()
        }
    }
}

/// Replays a trace through `Limiter<String, String>` on an EmbeddedEventLoop
/// (manual time: `advanceTime`), printing the trace format's lines.
func replayOnEmbeddedLoop(_ trace: Trace) throws -> [String] {
    let loop = EmbeddedEventLoop()
    let log = Mutex<[String]>([])
    let record: @Sendable (String) -> Void = { line in log.withLock { $0.append(line) } }
    let limiter = try Limiter<String, String>(
        trace.policy, scheduler: .eventLoop(loop), maxKeys: nil, tick: .milliseconds(1), combine: nil,
        delivery: .events { event in
            let verb = switch event.kind {
            case .emitted: "emit"
            case .dropped: "drop"
            case .discarded: "discard"
            }
            record("\(event.at.nanoseconds / 1_000_000) \(verb) \(event.key) \(event.value)")
        },
        seed: (0x736C_7569_6365_2D74, 0x7472_6163_652D_7632), makeSink: { LimiterStorage.makeSink($0) })
    func ms(_ instant: LimiterInstant?) -> String {
        guard let instant else { return "never" }
        let ns = instant.nanoseconds
        return String(ns / 1_000_000 + (ns % 1_000_000 == 0 ? 0 : 1))
    }
    var closed = false
    for step in trace.steps {
        loop.advanceTime(to: .uptimeNanoseconds(step.time * 1_000_000))
        switch step.verb {
        case let .call(value, cost):
            if cost == 1 && !step.hasCost {
                try limiter.submit(value, for: step.key)
            } else {
                try limiter.submit(value, for: step.key, cost: Int(cost))
            }
        case let .quota(cost):
            let quota = try limiter.quota(for: step.key, cost: Int(cost))
            record("\(step.time) quota \(step.key) remaining=\(quota.remaining) full=\(ms(quota.fullAt)) retry=\(ms(quota.retryAt))")
        case .cancel:
            try limiter.cancel(step.key)
        case .flush:
            try limiter.flush(step.key)
        case .pending:
            let yes = try limiter.pending(step.key)
            record("\(step.time) pending \(step.key) \(yes ? "yes" : "no")")
        case let .close(drain):
            try limiter.close(drain: drain)
            closed = true
        }
    }
    if !closed { loop.advanceTime(to: .uptimeNanoseconds(UInt64(Int64.max))) }
    let lines = log.withLock { $0 }
    if !closed { try limiter.close(drain: false) }
    try loop.syncShutdownGracefully()
    return lines
}

@Suite("NIO engine")
struct NIOEngineTests {
    @Test("there are vectors to run") func vectorsExist() {
        #expect(vectorTraces().count >= 60)
        for family in ["throttle-", "debounce-", "audit-", "rate-"] {
            #expect(vectorTraces().contains { ($0 as NSString).lastPathComponent.hasPrefix(family) }, "\(family)")
        }
    }

    /// Every vector with an expected output, on an EmbeddedEventLoop with
    /// manual time: per key the same lines in order, as a multiset equal.
    @Test("vector on an EmbeddedEventLoop", arguments: vectorTraces())
    func vector(path: String) throws {
        let base = String(path.dropLast(".trace".count))
        let expected = try String(contentsOfFile: base + ".expected", encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        let trace = try Trace(parsing: [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
        // Skipped: times past NIO's clock (Int64 ns, about 292 years).
        let outputTimes = expected.compactMap { UInt64($0.split(separator: " ").first ?? "") }
        guard (trace.steps.map(\.time) + outputTimes).allSatisfy({ $0 < nioLimitMilliseconds }) else { return }
        let actual = try replayOnEmbeddedLoop(trace)
        func byKey(_ lines: [String]) -> [String: [String]] {
            Dictionary(grouping: lines) { line in
                let fields = line.split(separator: " ")
                return fields.count > 2 ? String(fields[2]) : ""
            }
        }
        #expect(byKey(actual) == byKey(expected), "per-key output of \(path)")
        #expect(actual.sorted() == expected.sorted(), "output of \(path) as a multiset")
        let times = actual.compactMap { UInt64($0.split(separator: " ").first ?? "") }
        #expect(times == times.sorted(), "output of \(path) is not in time order")
    }

    @Test("a deadline that moves later keeps the scheduled task; a wake-up with nothing due re-arms")
    func rearmOnlyWhenEarlier() throws {
        let loop = EmbeddedEventLoop()
        let host = CountingHost(loop)
        let out = Mutex<[(String, Int, UInt64)]>([])
        let limiter = try Limiter<String, Int>(.debounce(interval: .milliseconds(100)), scheduler: .external(host)) {
            key, value in out.withLock { $0.append((key, value, loop.now.uptimeNanoseconds)) }
        }
        // 50 calls 1 ms apart: the key's deadline moves from 100 ms to 149 ms,
        // always later than the task armed at 100 ms: one task, never cancelled.
        for i in 0..<50 {
            try limiter.submit(i, for: "a")
            loop.advanceTime(by: .milliseconds(1))
        }
        #expect(host.scheduled.load(ordering: .relaxed) == 1)
        #expect(host.cancelled.load(ordering: .relaxed) == 0)
        // At 100 ms the task runs with nothing due and arms the next deadline
        // (the timer wheel may report an earlier slot first): a few tasks, not 50.
        loop.advanceTime(to: .uptimeNanoseconds(148_999_999))
        #expect(out.withLock { $0.isEmpty }, "never early")
        #expect(host.scheduled.load(ordering: .relaxed) <= 3)
        loop.advanceTime(to: .uptimeNanoseconds(149_000_000))
        #expect(out.withLock { $0.map(\.1) } == [49])
        #expect(out.withLock { $0.map(\.2) } == [149_000_000], "at its exact deadline")
        #expect(host.cancelled.load(ordering: .relaxed) == 0)
        // Nothing pending: no task comes back.
        let idle = host.scheduled.load(ordering: .relaxed)
        loop.advanceTime(by: .seconds(10))
        #expect(host.scheduled.load(ordering: .relaxed) == idle)
        try limiter.submit(1, for: "b")  // armed at its deadline
        try limiter.submit(2, for: "c")  // the same deadline: nothing new
        #expect(host.scheduled.load(ordering: .relaxed) == idle + 1)
        try limiter.close(drain: true)
        #expect(out.withLock { $0.map(\.1).sorted() } == [1, 2, 49], "close(drain) emits the pending values")
        try loop.syncShutdownGracefully()
    }

    @Test("rate limiter on an EmbeddedEventLoop: exact quotas on the loop's time")
    func rateOnEmbedded() throws {
        let loop = EmbeddedEventLoop()
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(1), scheduler: .eventLoop(loop))
        #expect(try limiter.check("k").isAdmitted)
        #expect(try limiter.check("k").isAdmitted)
        let third = try limiter.check("k")
        #expect(!third.isAdmitted)
        #expect(third.retryAfter == .milliseconds(500))
        loop.advanceTime(by: .milliseconds(499))
        #expect(try !limiter.check("k").isAdmitted)
        loop.advanceTime(by: .milliseconds(1))
        #expect(try limiter.check("k").isAdmitted)
        #expect(limiter.statistics.admitted == 3)
        #expect(limiter.statistics.dropped == 2)
        try loop.syncShutdownGracefully()
    }

    @Test("real NIO loops: calls from every loop of the group, emissions on the limiter's loop, never early",
          .timeLimit(.minutes(1)))
    func realLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let other = group.next()
        let delivered = Mutex<[(Int, Bool, UInt64)]>([])
        let limiter = try Limiter<String, Int>(.debounce(interval: .milliseconds(50)), scheduler: .eventLoop(loop)) {
            _, value in
            delivered.withLock { $0.append((value, loop.inEventLoop, NIODeadline.now().uptimeNanoseconds)) }
        }
        // Submitted from the other loop's thread.
        let submittedAt = try await other.submit { () -> UInt64 in
            for i in 0..<5 { _ = try? limiter.submit(i, for: "doc") }
            return NIODeadline.now().uptimeNanoseconds
        }.get()
        var waited = 0
        while delivered.withLock({ $0.isEmpty }) && waited < 5_000 {
            try await Task.sleep(for: .milliseconds(10))
            waited += 10
        }
        let got = delivered.withLock { $0 }
        #expect(got.map(\.0) == [4])
        #expect(got.first?.1 == true, "delivered on the limiter's loop")
        if let at = got.first?.2 { #expect(at >= submittedAt + 50_000_000, "never early") }
        try await limiter.close(drain: true)
        try await group.shutdownGracefully()
    }
}
#endif
