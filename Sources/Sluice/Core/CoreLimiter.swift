import CSluice

/// A thin, single-threaded owner of one C limiter (`sluice_limiter_t`).
///
/// This is the layer every Swift API of Sluice is built on: it converts
/// policies and keys, maps C error codes to ``LimiterError`` and turns the
/// core's event callback into a Swift closure, and nothing more. Values never
/// enter the core: callers hand in opaque 64-bit tokens and learn the fate of
/// every token exactly once (see the top comment of `sluice.h`):
///
/// - ``submit(token:key:now:)`` returns ``Decision/emitted(at:)`` or
///   ``Decision/dropped(until:)``: the token is the caller's again at once
///   and never mentioned again;
/// - it returns ``Decision/scheduled(at:)``: the token is reported later by
///   exactly one ``Event`` (emit, drop or discard);
/// - it throws: the token was not taken.
///
/// Time is a `UInt64` count of nanoseconds on a monotonic clock of the
/// caller's choice; the core never reads a clock, so a manual clock gives
/// exact, repeatable results. A time earlier than one already seen is treated
/// as that later time.
///
/// Threads: not thread-safe, like the C limiter. Use an instance from one
/// thread at a time (the event-loop layer confines it to its loop thread).
/// The event handler runs on the calling thread, inside the call that caused
/// the event, and may call back into the limiter (a call made from the
/// handler is handled after the transition that produced the event).
final class CoreLimiter {
    /// What happened to a token the limiter held.
    enum EventKind: Hashable, Sendable {
        /// The value is emitted: do the work now.
        case emit
        /// The value will never be emitted (superseded or cancelled).
        case drop
        /// The value was pending at `close(.discard)` or when the limiter was freed.
        case discard
    }

    /// One event from the core, valid only during the handler call.
    struct Event {
        /// What happened.
        let kind: EventKind
        /// The caller's token.
        let token: UInt64
        /// When it happened by the spec, in ns: the deadline for a timer
        /// emission (even if the wheel fired up to one tick later), otherwise
        /// the `now` of the call that caused it.
        let at: UInt64
        /// The core's view of the key; its bytes are valid only during the
        /// handler call (use ``copyKey()`` to keep it).
        let rawKey: sluice_key_t

        /// A copy of the event's key, safe to keep.
        func copyKey() -> CoreKey { CoreKey(rawKey) }
    }

    /// The decision returned for a submitted token.
    enum Decision: Hashable, Sendable {
        /// Emitted now (`at` is the call's `now`): do the work; the token is
        /// not kept.
        case emitted(at: UInt64)
        /// Kept; reported later by exactly one ``Event``. `at` is when it will
        /// be emitted unless superseded, flushed or cancelled first.
        case scheduled(at: UInt64)
        /// Not emitted and not kept. For rate, `until` is the earliest time a
        /// call on this key would be admitted; for the other policies, the
        /// end of the window or wait that suppressed the call.
        case dropped(until: UInt64)
    }

    /// What ``close(_:now:)`` does with pending values.
    enum CloseMode: Hashable, Sendable {
        /// Emit every pending value now.
        case drain
        /// Hand every pending value back as ``EventKind/discard``.
        case discard
    }

    /// Counters of the limiter (`sluice_stats_t`).
    struct Stats: Hashable, Sendable {
        var liveKeys: UInt64
        var pending: UInt64
        var armedTimers: UInt64
        var memoryBytes: UInt64
        var maxProbe: UInt64
        var tableSlots: UInt64
        var fullRefusals: UInt64
    }

    /// Receives the core's events for this limiter.
    ///
    /// Ownership: the C limiter gets an *unretained* pointer to the sink as its
    /// `user` context. That is sound because the sink is a `let` of this
    /// object, and the C limiter calls back only (a) during a call made
    /// through this object, which is alive then, or (b) inside
    /// `sluice_limiter_free()` in `deinit`, which runs before this object's
    /// stored properties — the sink among them — are released. The C side
    /// never outlives the sink, and no retain cycle is created.
    private final class EventSink {
        let handler: (Event) -> Void
        init(handler: @escaping (Event) -> Void) { self.handler = handler }
    }

    /// The C limiter (`sluice_limiter_t *`), owned: freed in `deinit`.
    private let handle: OpaquePointer
    private let sink: EventSink

    /// The policy the limiter was created with.
    let policy: LimiterPolicy

    /// Creates a limiter.
    ///
    /// - Parameters:
    ///   - policy: what every key follows.
    ///   - tickNanoseconds: resolution of the timer wheel; 0 for the default
    ///     (1 ms). Timer emissions happen at most one tick after their
    ///     deadline (their ``Event/at`` is still the exact deadline).
    ///   - maxKeys: cap on live keys (0 for none); a new key past it fails
    ///     with ``LimiterError/full``.
    ///   - start: the clock's value now, in ns (the wheel's origin).
    ///   - seed: a fixed hash key, for repeatable tests only; `nil` (the
    ///     default) draws a random one so crafted keys cannot collide.
    ///   - onEvent: called for every event (see ``Event``).
    /// - Throws: ``LimiterError/invalidArgument`` or
    ///   ``LimiterError/outOfRange`` for an invalid configuration,
    ///   ``LimiterError/outOfMemory``.
    init(
        policy: LimiterPolicy,
        tickNanoseconds: UInt64 = 0,
        maxKeys: UInt64 = 0,
        start: UInt64 = 0,
        seed: (UInt64, UInt64)? = nil,
        onEvent: @escaping (Event) -> Void
    ) throws(LimiterError) {
        let sink = EventSink(handler: onEvent)
        var config = sluice_config_t()
        config.policy = try policy.cPolicy()
        config.tick_ns = tickNanoseconds
        config.max_keys = maxKeys
        config.start_ns = start
        config.user = Unmanaged.passUnretained(sink).toOpaque()
        config.on_event = { user, event in
            guard let user, let event else { return }
            let sink = Unmanaged<EventSink>.fromOpaque(user).takeUnretainedValue()
            sink.handler(Event(event.pointee))
        }
        if let seed {
            config.fixed_seed = true
            config.seed = (seed.0, seed.1)
        }
        var limiter: OpaquePointer?
        try LimiterError.check(sluice_limiter_new(&limiter, &config))
        guard let limiter else { throw .outOfMemory }  // not reached: 0 sets `out`
        self.handle = limiter
        self.sink = sink
        self.policy = policy
    }

    /// Frees the C limiter. A limiter that was not closed is closed with
    /// discard first: the handler sees a ``EventKind/discard`` event for every
    /// pending token, from inside `deinit` (a weak reference to this object
    /// is already `nil` then).
    deinit {
        sluice_limiter_free(handle)
    }

    /// Hands a token to the limiter for a key at time `now`.
    ///
    /// Deadlines of this key due at `now` fire first, so the result does not
    /// depend on whether ``advance(to:maxTimers:)`` ran before.
    ///
    /// - Parameters:
    ///   - token: the caller's handle for the value.
    ///   - key: the key.
    ///   - now: the current time in ns.
    /// - Returns: the decision (see ``Decision``).
    /// - Throws: ``LimiterError/keyTooLong``, ``LimiterError/full``,
    ///   ``LimiterError/outOfMemory``, ``LimiterError/closed``; the token was
    ///   not taken.
    func submit<Key: LimiterKey>(token: UInt64, key: Key, now: UInt64) throws(LimiterError) -> Decision {
        var decision = sluice_decision_t()
        try LimiterError.check(key.withCoreKey { sluice_limiter_submit(handle, $0, token, now, &decision) })
        switch decision.kind {
        case SLUICE_EMITTED: return .emitted(at: decision.at)
        case SLUICE_SCHEDULED: return .scheduled(at: decision.at)
        case SLUICE_DROPPED: return .dropped(until: decision.at)
        default: preconditionFailure("sluice_limiter_submit returned decision kind \(decision.kind.rawValue)")
        }
    }

    /// Emits the key's pending value now (an ``EventKind/emit`` event at
    /// `now`) and returns the key to idle: its next call is a leading edge.
    ///
    /// - Returns: whether a value was pending (and emitted).
    /// - Throws: ``LimiterError/keyTooLong``, ``LimiterError/closed``.
    @discardableResult
    func flush<Key: LimiterKey>(key: Key, now: UInt64) throws(LimiterError) -> Bool {
        try LimiterError.check(key.withCoreKey { sluice_limiter_flush(handle, $0, now) }) == 1
    }

    /// Drops the key's pending value (a ``EventKind/drop`` event at `now`)
    /// and returns the key to idle. For rate, the key gets a fresh quota.
    ///
    /// - Returns: whether a value was pending (and dropped).
    /// - Throws: ``LimiterError/keyTooLong``, ``LimiterError/closed``.
    @discardableResult
    func cancel<Key: LimiterKey>(key: Key, now: UInt64) throws(LimiterError) -> Bool {
        try LimiterError.check(key.withCoreKey { sluice_limiter_cancel(handle, $0, now) }) == 1
    }

    /// Whether a value of the key waits to be emitted later (an open window
    /// with nothing pending is not pending). Due deadlines of the key fire first.
    ///
    /// - Throws: ``LimiterError/keyTooLong``, ``LimiterError/closed``.
    func pending<Key: LimiterKey>(key: Key, now: UInt64) throws(LimiterError) -> Bool {
        try LimiterError.check(key.withCoreKey { sluice_limiter_pending(handle, $0, now) }) == 1
    }

    /// Closes the limiter: deadlines due at `now` fire, then every pending
    /// value is emitted (``CloseMode/drain``) or discarded
    /// (``CloseMode/discard``); later calls throw ``LimiterError/closed``.
    ///
    /// - Throws: ``LimiterError/closed`` if already closed.
    func close(_ mode: CloseMode, now: UInt64) throws(LimiterError) {
        try LimiterError.check(
            sluice_limiter_close(handle, now, mode == .drain ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD))
    }

    /// Fires the deadlines due at `now`.
    ///
    /// - Parameters:
    ///   - now: the current time in ns.
    ///   - maxTimers: at most this many timer transitions (0 for no bound);
    ///     the rest stay due for the next call.
    /// - Returns: the number of timer transitions handled.
    /// - Throws: ``LimiterError/closed``.
    /// - Complexity: O(occupied wheel slots + timers handled), whatever the jump.
    @discardableResult
    func advance(to now: UInt64, maxTimers: Int = 0) throws(LimiterError) -> Int {
        Int(try LimiterError.check(sluice_limiter_advance(handle, now, maxTimers)))
    }

    /// When ``advance(to:maxTimers:)`` next has work, in ns, or `nil` when no
    /// timer is armed. Never later than the earliest deadline, but possibly
    /// earlier, in which case advancing there finds nothing and the next
    /// deadline is later. O(1).
    var nextDeadline: UInt64? {
        let deadline = sluice_limiter_next_deadline(handle)
        return deadline == .max ? nil : deadline
    }

    /// The limiter's counters. O(index size).
    func stats() -> Stats {
        var s = sluice_stats_t()
        _ = sluice_limiter_stats(handle, &s)  // cannot fail on a live handle
        return Stats(
            liveKeys: s.live_keys, pending: s.pending, armedTimers: s.armed_timers,
            memoryBytes: s.memory_bytes, maxProbe: s.max_probe, tableSlots: s.table_slots,
            fullRefusals: s.full_refusals)
    }

    /// Checks every internal invariant of the core (for tests).
    ///
    /// - Throws: ``LimiterError/corrupted`` (the core describes the broken
    ///   invariant on stderr).
    /// - Complexity: O(keys + wheel).
    func checkInvariants() throws(LimiterError) {
        try LimiterError.check(sluice_limiter_check(handle))
    }
}

extension CoreLimiter.Event {
    /// Reads a C event (its key is not copied).
    fileprivate init(_ event: sluice_event_t) {
        switch event.kind {
        case SLUICE_EVENT_EMIT: kind = .emit
        case SLUICE_EVENT_DROP: kind = .drop
        case SLUICE_EVENT_DISCARD: kind = .discard
        default: preconditionFailure("the core reported event kind \(event.kind.rawValue)")
        }
        token = event.token
        at = event.at
        rawKey = event.key
    }
}
