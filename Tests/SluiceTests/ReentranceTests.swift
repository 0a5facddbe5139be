import Testing

@testable import Sluice

/// A `combine` that calls back into its own limiter: a deadlock before
/// (the shared loop stopped for good), now a precondition failure that
/// names the mistake.
@Suite("combine re-entrance")
struct ReentranceTests {
    @Test("calling the limiter from combine stops the process with a clear message (manual clock)")
    func manualClock() async {
        await #expect(processExitsWith: .failure) {
            let clock = ManualLimiterClock()
            let box = LimiterBox()
            let limiter = try Limiter<Int, Int>(
                .audit(interval: .milliseconds(100)), scheduler: .manual(clock),
                combine: { older, newer in
                    _ = try? box.limiter?.pending(1)
                    return older + newer
                }, handler: { _, _ in })
            box.limiter = limiter
            try limiter.submit(1, for: 1)
            try limiter.submit(2, for: 1)  // supersedes 1: combine runs and calls the limiter
        }
    }

    @Test("calling the limiter from combine on the loop stops the process instead of deadlocking the loop")
    func loop() async {
        await #expect(processExitsWith: .failure) {
            let box = LimiterBox()
            // A long interval: 2 supersedes 1 (and combine runs) however
            // long a loaded machine stalls between the two submits; with
            // 50 ms, 1 could be emitted first and the process exit cleanly.
            let limiter = try Limiter<Int, Int>(
                .debounce(interval: .seconds(3600)),
                combine: { older, newer in
                    _ = try? box.limiter?.submit(0, for: 99)
                    return older + newer
                }, handler: { _, _ in })
            box.limiter = limiter
            try limiter.submit(1, for: 1)
            try limiter.submit(2, for: 1)
            // The failure stops the process long before this ends.
            try await Task.sleep(for: .seconds(60))
        }
    }

    @Test("combine that calls another limiter is fine")
    func otherLimiter() throws {
        let clock = ManualLimiterClock()
        let other = try Limiter<Int, Int>(.rate(limit: 100, per: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        let out = Recorder<Int, Int>()
        let limiter = try Limiter<Int, Int>(
            .audit(interval: .milliseconds(100)), scheduler: .manual(clock),
            combine: { older, newer in
                _ = try? other.submit(older, for: 1)
                return older + newer
            }, handler: out.handler)
        try limiter.submit(1, for: 1)
        try limiter.submit(2, for: 1)
        clock.advance(by: .milliseconds(100))
        #expect(out.values == [3])
        #expect(other.statistics.admitted == 1)
    }
}

/// Lets a combine closure reach its limiter after creation.
final class LimiterBox: @unchecked Sendable {
    var limiter: Limiter<Int, Int>?
}
