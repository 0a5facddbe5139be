import Testing

@testable import Sluice

/// Collects a limiter's events, for tests.
final class EventLog {
    struct Entry: Equatable {
        var kind: CoreLimiter.EventKind
        var token: UInt64
        var at: UInt64
        var key: CoreKey
    }

    var entries: [Entry] = []

    func record(_ event: CoreLimiter.Event) {
        entries.append(Entry(kind: event.kind, token: event.token, at: event.at, key: event.copyKey()))
    }

    func take() -> [Entry] {
        defer { entries.removeAll() }
        return entries
    }
}

let ms: UInt64 = 1_000_000

@Suite("CoreLimiter")
struct CoreLimiterTests {
    // MARK: Basic behaviour through the wrapper

    @Test("throttle: leading emit, kept value at the window's end")
    func throttle() throws {
        let log = EventLog()
        let limiter = try CoreLimiter(policy: .throttle(interval: .milliseconds(100)), onEvent: log.record)
        #expect(try limiter.submit(token: 1, key: "A", now: 0) == .emitted(at: 0))
        #expect(try limiter.submit(token: 2, key: "A", now: 50 * ms) == .scheduled(at: 100 * ms))
        #expect(try limiter.pending(key: "A", now: 60 * ms))
        #expect(limiter.nextDeadline.map { $0 <= 100 * ms } == true)
        try limiter.advance(to: 100 * ms)
        #expect(log.take() == [.init(kind: .emit, token: 2, at: 100 * ms, key: .bytes(Array("A".utf8)))])
        #expect(try !limiter.pending(key: "A", now: 100 * ms))
        try limiter.checkInvariants()
    }

    @Test("rate: decided at once; a drop says when a call would be admitted")
    func rate() throws {
        let limiter = try CoreLimiter(policy: .rate(limit: 2, per: .milliseconds(100))) { _ in
            Issue.record("rate never schedules")
        }
        #expect(try limiter.submit(token: 1, key: UInt64(7), now: 0) == .emitted(at: 0))
        #expect(try limiter.submit(token: 2, key: UInt64(7), now: 0) == .emitted(at: 0))
        #expect(try limiter.submit(token: 3, key: UInt64(7), now: 10 * ms) == .dropped(until: 50 * ms))
        #expect(try limiter.submit(token: 4, key: UInt64(7), now: 50 * ms) == .emitted(at: 50 * ms))
        #expect(try !limiter.pending(key: UInt64(7), now: 50 * ms))
        #expect(try !limiter.flush(key: UInt64(7), now: 50 * ms))
    }

    @Test("flush emits now and cancel drops now; both return the key to idle")
    func flushAndCancel() throws {
        let log = EventLog()
        let limiter = try CoreLimiter(policy: .debounce(interval: .milliseconds(100)), onEvent: log.record)
        #expect(try limiter.submit(token: 1, key: "A", now: 0) == .scheduled(at: 100 * ms))
        #expect(try limiter.submit(token: 2, key: "B", now: 0) == .scheduled(at: 100 * ms))
        #expect(try limiter.flush(key: "A", now: 10 * ms))
        #expect(try limiter.cancel(key: "B", now: 20 * ms))
        #expect(try !limiter.flush(key: "A", now: 30 * ms))
        #expect(try !limiter.cancel(key: "B", now: 30 * ms))
        #expect(log.take().map { [$0.kind, $0.token, $0.at] as [AnyHashable] } == [
            [CoreLimiter.EventKind.emit, UInt64(1), 10 * ms], [CoreLimiter.EventKind.drop, UInt64(2), 20 * ms],
        ])
        #expect(limiter.stats().liveKeys == 0)
        #expect(limiter.nextDeadline == nil || limiter.nextDeadline! >= 30 * ms)
    }

    @Test("close: drain emits, discard hands back; later calls throw closed")
    func close() throws {
        for mode in [CoreLimiter.CloseMode.drain, .discard] {
            let log = EventLog()
            let limiter = try CoreLimiter(policy: .audit(interval: .seconds(1)), onEvent: log.record)
            _ = try limiter.submit(token: 1, key: "A", now: 0)
            _ = try limiter.submit(token: 2, key: UInt64(1), now: 0)
            try limiter.close(mode, now: 5 * ms)
            let events = log.take()
            #expect(Set(events.map(\.token)) == [1, 2])
            #expect(events.allSatisfy { $0.kind == (mode == .drain ? .emit : .discard) && $0.at == 5 * ms })
            #expect(throws: LimiterError.closed) { try limiter.submit(token: 3, key: "A", now: 6 * ms) }
            #expect(throws: LimiterError.closed) { try limiter.flush(key: "A", now: 6 * ms) }
            #expect(throws: LimiterError.closed) { try limiter.close(.drain, now: 6 * ms) }
            #expect(throws: LimiterError.closed) { try limiter.advance(to: 6 * ms) }
        }
    }

    @Test("releasing an open limiter discards its pending values")
    func deinitDiscards() throws {
        let log = EventLog()
        do {
            let limiter = try CoreLimiter(policy: .debounce(interval: .seconds(1)), onEvent: log.record)
            _ = try limiter.submit(token: 10, key: "x", now: 0)
            _ = try limiter.submit(token: 11, key: "y", now: 0)
        }
        let events = log.take()
        #expect(Set(events.map(\.token)) == [10, 11])
        #expect(events.allSatisfy { $0.kind == .discard })
    }

    @Test("a call from inside the event handler is handled after the transition")
    func reentrantSubmit() throws {
        let log = EventLog()
        var limiterRef: CoreLimiter?
        var nested: [CoreLimiter.Decision] = []
        let limiter = try CoreLimiter(policy: .throttle(interval: .milliseconds(100))) { event in
            log.record(event)
            if event.token == 2, let limiter = limiterRef {
                // Respects the window the emission just opened.
                nested.append(try! limiter.submit(token: 3, key: "A", now: event.at))
            }
        }
        limiterRef = limiter
        defer { limiterRef = nil }
        _ = try limiter.submit(token: 1, key: "A", now: 0)
        _ = try limiter.submit(token: 2, key: "A", now: 10 * ms)
        try limiter.advance(to: 100 * ms)
        #expect(nested == [.scheduled(at: 200 * ms)])
        try limiter.advance(to: 200 * ms)
        #expect(log.take().map(\.token) == [2, 3])
        try limiter.checkInvariants()
    }

    @Test("the live-key cap refuses new keys, never evicts")
    func full() throws {
        let limiter = try CoreLimiter(policy: .debounce(interval: .seconds(1)), maxKeys: 2) { _ in }
        _ = try limiter.submit(token: 1, key: "a", now: 0)
        _ = try limiter.submit(token: 2, key: "b", now: 0)
        #expect(throws: LimiterError.full) { try limiter.submit(token: 3, key: "c", now: 0) }
        #expect(try limiter.submit(token: 4, key: "a", now: 1) == .scheduled(at: 1 + 1_000_000_000))
        #expect(limiter.stats().fullRefusals == 1)
        try limiter.close(.discard, now: 2)
    }

    // MARK: Keys

    @Test("keys up to 1024 bytes; longer ones throw keyTooLong")
    func keyLength() throws {
        let limiter = try CoreLimiter(policy: .audit(interval: .seconds(1))) { _ in }
        _ = try limiter.submit(token: 1, key: String(repeating: "k", count: 1024), now: 0)
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.submit(token: 2, key: String(repeating: "k", count: 1025), now: 0)
        }
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.pending(key: [UInt8](repeating: 0, count: 1025), now: 0)
        }
        try limiter.close(.discard, now: 0)
    }

    /// Keys that must all be different from each other.
    static let distinctKeys: [CoreKey] = [
        .bytes([]),                       // the empty key
        .bytes([0]),                      // one zero byte
        .bytes([0, 0]),
        .bytes([0x61]),                   // "a"
        .bytes([0x61, 0]),                // "a\0"
        .bytes([0, 0x61]),
        .bytes([0x61, 0, 0x62]),          // "a\0b"
        .bytes([0x61, 0, 0x63]),          // "a\0c"
        .bytes(Array("abcdefgh".utf8)),
        .bytes([0, 0, 0, 0, 0, 0, 0, 0]), // the bytes of u64 0
        .bytes([0x61, 0, 0, 0, 0, 0, 0, 0]), // the little-endian bytes of u64 0x61
        .u64(0),
        .u64(0x61),
        .u64(0x6867_6665_6463_6261),      // "abcdefgh" read as a little-endian integer
        .u64(.max),
    ]

    @Test("byte keys with zero bytes, the empty key and integer keys are all distinct")
    func distinctKeys() throws {
        let keys = Self.distinctKeys
        #expect(Set(keys).count == keys.count)
        for seed: UInt64 in [1, 2] {
            let log = EventLog()
            let limiter = try CoreLimiter(
                policy: .debounce(interval: .milliseconds(100)), seed: (seed, ~seed), onEvent: log.record)
            for (i, key) in keys.enumerated() {
                // Had two keys shared a state, the second submit would drop the first's token.
                #expect(try limiter.submit(token: UInt64(i), key: key, now: 0) == .scheduled(at: 100 * ms))
            }
            #expect(log.take().isEmpty)
            #expect(limiter.stats().liveKeys == UInt64(keys.count))
            for (i, key) in keys.enumerated().reversed() {
                #expect(try limiter.pending(key: key, now: 1))
                #expect(try limiter.flush(key: key, now: 1))
                #expect(log.take() == [.init(kind: .emit, token: UInt64(i), at: 1, key: key)])
                #expect(try !limiter.pending(key: key, now: 1))
            }
            try limiter.checkInvariants()
        }
    }

    @Test("a String and its UTF-8 bytes are the same key, with embedded NULs")
    func stringKeysAreTheirUTF8() throws {
        let log = EventLog()
        let limiter = try CoreLimiter(policy: .debounce(interval: .milliseconds(100)), onEvent: log.record)
        let pairs: [(String, [UInt8])] = [("", []), ("\0", [0]), ("a\0b", [0x61, 0, 0x62]), ("é", [0xC3, 0xA9])]
        var token: UInt64 = 0
        for (string, bytes) in pairs {
            #expect(try limiter.submit(token: token, key: string, now: 0) == .scheduled(at: 100 * ms))
            // The same key: the pending value of the string is superseded.
            #expect(try limiter.submit(token: token + 1, key: bytes, now: 0) == .scheduled(at: 100 * ms))
            #expect(log.take() == [.init(kind: .drop, token: token, at: 0, key: .bytes(bytes))])
            let sub = ("<" + string + ">").dropFirst().dropLast()
            #expect(try limiter.pending(key: sub, now: 0))
            token += 2
        }
        #expect(limiter.stats().liveKeys == UInt64(pairs.count))
        try limiter.close(.discard, now: 0)
    }

    // MARK: Token accounting

    static let accountingPolicies: [LimiterPolicy] = [
        .throttle(interval: .milliseconds(10)),
        .throttle(interval: .milliseconds(7), leading: false, pick: .first),
        .throttle(interval: .milliseconds(5), trailing: false),
        .throttle(interval: .zero),
        .audit(interval: .milliseconds(13)),
        .debounce(interval: .milliseconds(10)),
        .debounce(interval: .milliseconds(10), leading: true, trailing: true, maxWait: .milliseconds(25)),
        .debounce(interval: .milliseconds(4), leading: true, trailing: false),
        .debounce(interval: .zero),
        .rate(limit: 3, per: .milliseconds(10)),
        .rate(limit: 7, per: .milliseconds(3), burst: 2),
    ]

    @Test("every submitted token is reported exactly once", arguments: accountingPolicies)
    func tokenAccounting(policy: LimiterPolicy) throws {
        for seed: UInt64 in 1...8 {
            try runAccounting(policy: policy, seed: seed)
        }
    }

    func runAccounting(policy: LimiterPolicy, seed: UInt64) throws {
        var rng = SplitMix64(seed: seed &* 0x9E37_79B9 &+ UInt64(policy.description.utf8.count))
        let keys: [CoreKey] = [.bytes([]), .bytes([0]), .bytes(Array("k1".utf8)), .bytes(Array("k2".utf8)),
                               .u64(0), .u64(1), .u64(.max)]
        var keyOfToken: [UInt64: CoreKey] = [:]
        var held = Set<UInt64>()
        var reported = Set<UInt64>()
        var failures: [String] = []
        var now: UInt64 = 0
        var closing: CoreLimiter.CloseMode?
        let context = "\(policy), seed \(seed)"

        var limiterRef: CoreLimiter?
        let limiter = try CoreLimiter(policy: policy, tickNanoseconds: 1_000_000, seed: (seed, seed)) { event in
            if !held.contains(event.token) { failures.append("event for token \(event.token) not held") }
            if reported.contains(event.token) { failures.append("token \(event.token) reported twice") }
            if event.copyKey() != keyOfToken[event.token] { failures.append("token \(event.token) under another key") }
            if event.kind == .discard && closing != .discard { failures.append("discard outside close(discard)") }
            if event.at > now { failures.append("event at \(event.at) after now \(now)") }
            held.remove(event.token)
            reported.insert(event.token)
            _ = limiterRef
        }
        limiterRef = limiter

        var nextToken: UInt64 = 0
        for _ in 0..<600 {
            now += UInt64.random(in: 0...3, using: &rng) * 1_000_000 + UInt64.random(in: 0...2, using: &rng) * 333_333
            let key = keys.randomElement(using: &rng)!
            switch UInt8.random(in: 0..<20, using: &rng) {
            case 0..<12:
                let token = nextToken
                nextToken += 1
                keyOfToken[token] = key
                switch try limiter.submit(token: token, key: key, now: now) {
                case .emitted(let at):
                    #expect(at == now, "\(context)")
                    reported.insert(token)
                case .dropped:
                    reported.insert(token)
                case .scheduled(let at):
                    #expect(at >= now, "\(context)")
                    held.insert(token)
                }
            case 12:
                try limiter.flush(key: key, now: now)
            case 13:
                try limiter.cancel(key: key, now: now)
            case 14:
                _ = try limiter.pending(key: key, now: now)
            case 15..<18:
                while let deadline = limiter.nextDeadline, deadline <= now {
                    try limiter.advance(to: deadline)
                    if let next = limiter.nextDeadline { #expect(next > deadline, "\(context)") }
                }
            default:
                try limiter.advance(to: now, maxTimers: Int.random(in: 0...2, using: &rng))
            }
            try limiter.checkInvariants()
        }
        #expect(limiter.stats().pending == UInt64(held.count), "\(context)")
        if Bool.random(using: &rng) {
            closing = Bool.random(using: &rng) ? .drain : .discard
            try limiter.close(closing!, now: now)
        } else {
            while let deadline = limiter.nextDeadline {
                now = max(now, deadline)
                try limiter.advance(to: deadline)
            }
        }
        #expect(failures.isEmpty, "\(context): \(failures.prefix(3))")
        #expect(held.isEmpty, "\(context): \(held.count) tokens never reported")
        #expect(reported.count == Int(nextToken), "\(context)")
        #expect(limiter.stats().liveKeys == 0, "\(context)")
        limiterRef = nil
    }

    @Test("throttle emissions of a key are at least the interval apart")
    func throttleSpacing() throws {
        var rng = SplitMix64(seed: 42)
        let interval: UInt64 = 10 * ms
        var emissions: [UInt64: [UInt64]] = [:]
        var now: UInt64 = 0
        let limiter = try CoreLimiter(policy: .throttle(interval: .milliseconds(10))) { event in
            if event.kind == .emit, case .u64(let k) = event.copyKey() { emissions[k, default: []].append(event.at) }
        }
        for _ in 0..<2000 {
            now += UInt64.random(in: 0...4_000_000, using: &rng)
            while let deadline = limiter.nextDeadline, deadline <= now { try limiter.advance(to: deadline) }
            let key = UInt64.random(in: 0..<4, using: &rng)
            if case .emitted(let at) = try limiter.submit(token: 0, key: key, now: now) {
                emissions[key, default: []].append(at)
            }
        }
        while let deadline = limiter.nextDeadline { try limiter.advance(to: deadline) }
        #expect(emissions.count == 4)
        for (key, times) in emissions {
            for (a, b) in zip(times, times.dropFirst()) {
                #expect(b >= a + interval, "key \(key): \(a) then \(b)")
            }
        }
    }
}
