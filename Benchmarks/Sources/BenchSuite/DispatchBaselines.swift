import CBench
import Dispatch
import Foundation
import Synchronization

/// The policies the scenarios use, in nanoseconds.
enum BasePolicy: Sendable {
    case throttle(interval: UInt64)
    case debounce(interval: UInt64)
    /// GCRA: `limit` per `per`, bursts of `burst`.
    case rate(limit: UInt64, per: UInt64, burst: UInt64)
    /// Three GCRA quotas on every key, all or nothing (the quotas scenario;
    /// dispatch-tuned only). Each `per` a whole multiple of its `limit`.
    case quotas([RateQuota])

    /// The quotas scenario's plan (cb_quota(), the same numbers as sluice-c's).
    static var quotaPlan: BasePolicy {
        .quotas(
            (0..<Int(CB_QUOTA_COUNT)).map { i in
                let q = cb_quota(Int32(i))
                return RateQuota(limit: q.limit, per: q.per_ns, burst: q.burst)
            })
    }
}

/// One GCRA quota: `limit` per `per` ns, bursts of `burst`.
struct RateQuota: Sendable {
    var limit: UInt64
    var per: UInt64
    var burst: UInt64
}

/// What a submit did.
enum Outcome: Sendable {
    case emitted, scheduled, dropped, full
}

/// An implementation written with Dispatch only. Emissions that a call
/// decides at once (`.emitted`) are consumed by the caller; emissions by a
/// timer are delivered to the consumer on `queue`, the one serial queue every
/// callback runs on.
protocol DispatchLimiter: AnyObject, Sendable {
    init(policy: BasePolicy, queue: DispatchQueue, cap: Int?, consumer: Consumer)
    var queue: DispatchQueue { get }
    /// The leeway a timer of this implementation may fire late by (ns).
    var leeway: UInt64 { get }
    func submit(_ value: Int, for key: UInt64) -> Outcome
}

@inline(__always) func monotonicNow() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

// MARK: - dispatch-naive

/// What people ship: a `[Key: DispatchWorkItem]` plus last-fire times behind
/// one lock. Debounce cancels the key's work item and schedules a new one with
/// `asyncAfter`; throttle keeps the last emission time and schedules one
/// trailing `asyncAfter` per window; rate keeps each key's TAT and a work item
/// that forgets the key when its TAT is reached. Entries are removed when
/// their work item fires. (A cancelled work item's timer stays inside
/// Dispatch until its deadline: that is what `cancel()` does.)
final class DispatchNaive: DispatchLimiter, @unchecked Sendable {
    let queue: DispatchQueue
    let policy: BasePolicy
    let cap: Int?
    let consumer: Consumer
    let lock = NSLock()
    // Guarded by `lock`.
    private var items: [UInt64: DispatchWorkItem] = [:]
    private var lastFire: [UInt64: UInt64] = [:]
    private var values: [UInt64: (value: Int, deadline: UInt64)] = [:]
    private var tats: [UInt64: UInt64] = [:]

    init(policy: BasePolicy, queue: DispatchQueue, cap: Int?, consumer: Consumer) {
        self.policy = policy
        self.queue = queue
        self.cap = cap
        self.consumer = consumer
    }

    /// `asyncAfter`'s leeway in libdispatch: a tenth of the delay, within [1 ms, 60 s].
    var leeway: UInt64 {
        let interval: UInt64 =
            switch policy {
            case let .throttle(i), let .debounce(i): i
            case let .rate(limit, per, _): per / limit
            case .quotas: ms
            }
        return min(max(interval / 10, ms), 60 * sec)
    }

    func submit(_ value: Int, for key: UInt64) -> Outcome {
        switch policy {
        case let .debounce(interval):
            let deadline = DispatchTime.now() + .nanoseconds(Int(interval))
            lock.lock()
            if items[key] == nil, let cap, items.count >= cap {
                lock.unlock()
                return .full
            }
            items[key]?.cancel()
            let item = DispatchWorkItem { [weak self] in self?.fireDebounce(key) }
            items[key] = item
            values[key] = (value, deadline.uptimeNanoseconds)
            lock.unlock()
            queue.asyncAfter(deadline: deadline, execute: item)
            return .scheduled

        case let .throttle(interval):
            let now = monotonicNow()
            lock.lock()
            if let last = lastFire[key], now < last + interval {
                let end = last + interval
                values[key] = (value, end)
                if items[key] == nil {
                    let item = DispatchWorkItem { [weak self] in self?.fireThrottle(key) }
                    items[key] = item
                    lock.unlock()
                    queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: end), execute: item)
                    return .scheduled
                }
                lock.unlock()
                return .scheduled
            }
            if lastFire[key] == nil, let cap, lastFire.count >= cap {
                lock.unlock()
                return .full
            }
            lastFire[key] = now
            lock.unlock()
            return .emitted

        case let .rate(limit, per, burst):
            let now = monotonicNow()
            let t = per / limit
            let tau = (burst - 1) * t
            lock.lock()
            let old = tats[key]
            let tat = old ?? now
            if tat > now + tau {
                lock.unlock()
                return .dropped
            }
            if old == nil, let cap, tats.count >= cap {
                lock.unlock()
                return .full
            }
            let newTat = max(tat, now) + t
            tats[key] = newTat
            items[key]?.cancel()
            let item = DispatchWorkItem { [weak self] in self?.expire(key) }
            items[key] = item
            lock.unlock()
            queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: newTat), execute: item)
            return .emitted

        case .quotas:
            preconditionFailure("dispatch-naive does not run the quotas scenario")
        }
    }

    private func fireDebounce(_ key: UInt64) {
        lock.lock()
        items[key] = nil
        let pending = values.removeValue(forKey: key)
        lock.unlock()
        if let pending { consumer.deliver(pending.value, deadline: pending.deadline) }
    }

    private func fireThrottle(_ key: UInt64) {
        let now = monotonicNow()
        lock.lock()
        items[key] = nil
        let pending = values.removeValue(forKey: key)
        if pending != nil { lastFire[key] = now }  // the emission opens the next window
        lock.unlock()
        if let pending { consumer.deliver(pending.value, deadline: pending.deadline) }
    }

    private func expire(_ key: UInt64) {
        let now = monotonicNow()
        lock.lock()
        if let tat = tats[key], tat <= now {
            tats[key] = nil
            items[key] = nil
        }
        lock.unlock()
    }
}

// MARK: - dispatch-tuned

/// The best Dispatch can do. One `DispatchSourceTimer` per live key,
/// rescheduled in place (never cancelled and recreated while the key is
/// live); a generation counter tells a stale firing (one that was already
/// under way when the deadline moved) from the current one; the source is
/// cancelled and the entry removed when the key goes idle. State lives in 16
/// shards, each a `Mutex` from Synchronization; deadlines on monotonic
/// `DispatchTime`; leeway 1 ms (Sluice's tick); every handler on one serial
/// queue. Rate needs no timers: a TAT dictionary per shard, swept once a
/// second; three quotas (the quotas scenario): a struct of three TATs per key
/// in a dictionary of its own, one lookup per call, all or nothing.
final class DispatchTuned: DispatchLimiter, @unchecked Sendable {
    /// A live key (guarded by its shard's mutex).
    final class Entry: @unchecked Sendable {
        var deadline: UInt64
        var value: Int
        var hasValue: Bool
        /// Bumped by every call that moves the deadline; a handler acts only
        /// for the generation it finds due.
        var generation: UInt64 = 0
        let timer: DispatchSourceTimer

        init(deadline: UInt64, value: Int, hasValue: Bool, timer: DispatchSourceTimer) {
            self.deadline = deadline
            self.value = value
            self.hasValue = hasValue
            self.timer = timer
        }
    }

    /// quotas: a key's three GCRA states, each quota's theoretical arrival time (ns).
    struct Tats3 {
        var a: UInt64
        var b: UInt64
        var c: UInt64
        var latest: UInt64 { max(a, max(b, c)) }
    }

    final class Shard: Sendable {
        let entries = Mutex<[UInt64: Entry]>([:])
        let tats = Mutex<[UInt64: UInt64]>([:])
        let tats3 = Mutex<[UInt64: Tats3]>([:])
    }

    static let shardCount = 16
    let queue: DispatchQueue
    let policy: BasePolicy
    let consumer: Consumer
    let shards: [Shard]
    let shardCap: Int
    let leeway: UInt64 = ms
    private let sweeper: DispatchSourceTimer?
    /// quotas: each quota's emission interval T = per / limit (exact) and tolerance (burst - 1) × T.
    private let step: (UInt64, UInt64, UInt64)
    private let tau: (UInt64, UInt64, UInt64)

    init(policy: BasePolicy, queue: DispatchQueue, cap: Int?, consumer: Consumer) {
        self.policy = policy
        self.queue = queue
        self.consumer = consumer
        shards = (0..<Self.shardCount).map { _ in Shard() }
        shardCap = cap.map { ($0 + Self.shardCount - 1) / Self.shardCount } ?? Int.max
        if case let .quotas(q) = policy {
            precondition(q.count == 3 && q.allSatisfy { $0.limit > 0 && $0.per % $0.limit == 0 && $0.burst > 0 })
            let t = q.map { $0.per / $0.limit }
            step = (t[0], t[1], t[2])
            tau = ((q[0].burst - 1) * t[0], (q[1].burst - 1) * t[1], (q[2].burst - 1) * t[2])
        } else {
            step = (0, 0, 0)
            tau = (0, 0, 0)
        }
        switch policy {
        case .rate, .quotas:
            let timer = DispatchSource.makeTimerSource(queue: queue)
            sweeper = timer
            let shards = self.shards
            timer.setEventHandler {
                let now = monotonicNow()
                for shard in shards {
                    shard.tats.withLock { tats in
                        if tats.contains(where: { $0.value <= now }) { tats = tats.filter { $0.value > now } }
                    }
                    shard.tats3.withLock { tats in
                        if tats.contains(where: { $0.value.latest <= now }) {
                            tats = tats.filter { $0.value.latest > now }
                        }
                    }
                }
            }
            timer.schedule(deadline: .now() + .seconds(1), repeating: .seconds(1), leeway: .milliseconds(10))
            timer.activate()
        default:
            sweeper = nil
        }
    }

    deinit { sweeper?.cancel() }

    @inline(__always) private func shard(_ key: UInt64) -> Shard {
        shards[Int(truncatingIfNeeded: key >> 60) & (Self.shardCount - 1)]
    }

    @inline(__always) private func schedule(_ timer: DispatchSourceTimer, at deadline: UInt64) {
        timer.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .nanoseconds(Int(leeway)))
    }

    private func makeTimer(_ key: UInt64, _ shard: Shard) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [unowned self] in self.fired(key, shard) }
        return timer
    }

    func submit(_ value: Int, for key: UInt64) -> Outcome {
        let now = monotonicNow()
        let shard = shard(key)
        switch policy {
        case let .debounce(interval):
            let deadline = now + interval
            return shard.entries.withLock { entries -> Outcome in
                if let e = entries[key] {
                    e.value = value
                    e.hasValue = true
                    e.deadline = deadline
                    e.generation &+= 1
                    schedule(e.timer, at: deadline)  // in place
                    return .scheduled
                }
                guard entries.count < shardCap else { return .full }
                let e = Entry(deadline: deadline, value: value, hasValue: true, timer: makeTimer(key, shard))
                entries[key] = e
                schedule(e.timer, at: deadline)
                e.timer.activate()
                return .scheduled
            }

        case let .throttle(interval):
            return shard.entries.withLock { entries -> Outcome in
                if let e = entries[key] {  // the window is open
                    e.value = value
                    e.hasValue = true
                    return .scheduled
                }
                guard entries.count < shardCap else { return .full }
                let e = Entry(deadline: now + interval, value: 0, hasValue: false, timer: makeTimer(key, shard))
                entries[key] = e
                schedule(e.timer, at: e.deadline)
                e.timer.activate()
                return .emitted  // leading edge
            }

        case let .rate(limit, per, burst):
            let t = per / limit
            let tau = (burst - 1) * t
            return shard.tats.withLock { tats -> Outcome in
                if let tat = tats[key] {
                    if tat > now + tau { return .dropped }
                    tats[key] = max(tat, now) + t
                    return .emitted
                }
                guard tats.count < shardCap else { return .full }
                tats[key] = now + t
                return .emitted
            }

        case .quotas:
            let (t0, t1, t2) = step
            let (u0, u1, u2) = tau
            return shard.tats3.withLock { tats -> Outcome in
                // One hash lookup; the state is updated in place through the index.
                if let i = tats.index(forKey: key) {
                    let s = tats.values[i]
                    let a = max(s.a, now), b = max(s.b, now), c = max(s.c, now)
                    // All or nothing: admitted only when every quota has room, then charged in all.
                    guard a - now <= u0 && b - now <= u1 && c - now <= u2 else { return .dropped }
                    tats.values[i] = Tats3(a: a + t0, b: b + t1, c: c + t2)
                    return .emitted
                }
                guard tats.count < shardCap else { return .full }
                tats[key] = Tats3(a: now + t0, b: now + t1, c: now + t2)  // a fresh key: every burst ≥ 1
                return .emitted
            }
        }
    }

    /// A key's timer fired (on `queue`).
    private func fired(_ key: UInt64, _ shard: Shard) {
        let now = monotonicNow()
        let emission = shard.entries.withLock { entries -> (Int, UInt64)? in
            guard let e = entries[key] else { return nil }
            // Stale: this firing was for a deadline that has moved since.
            guard e.deadline <= now else { return nil }
            let firedGeneration = e.generation
            switch policy {
            case let .throttle(interval):
                if e.hasValue {
                    let out = (e.value, e.deadline)
                    e.hasValue = false
                    e.deadline += interval  // the emission opens the next window
                    e.generation = firedGeneration &+ 1
                    schedule(e.timer, at: e.deadline)
                    return out
                }
                entries[key] = nil
                e.timer.cancel()
                return nil
            default:
                entries[key] = nil
                e.timer.cancel()
                return e.hasValue ? (e.value, e.deadline) : nil
            }
        }
        if let (value, deadline) = emission { consumer.deliver(value, deadline: deadline) }
    }
}
