import CSluice

/// Policies as the core takes them (`sluice_policy_t`, `sluice.h`): the
/// conversions both ways and `sluice_policy_validate`.
package enum CPolicy {
    /// `sluice_policy_validate`.
    static func validate(_ policy: sluice_policy_t) -> Int32 {
        var policy = policy
        return sluice_policy_validate(&policy)
    }

    /// The largest rate limit, burst or cost (`SLUICE_RATE_MAX`; a
    /// `UINT64_C` macro, which Swift does not import).
    package static let rateMax = 1_000_000_000_000
    /// The error of a cost outside 1...rateMax.
    package static func badCost(_ cost: Int) -> LimiterError {
        LimiterError(.outOfRange, reason: "Invalid cost (\(cost)): a call weighs 1 to 10^12 units.")
    }

    /// The error of a cost or a quota asked of a policy that is not rate.
    static func costNeedsRate(_ policy: LimiterPolicy) -> LimiterError {
        LimiterError(.invalidArgument, reason: "Costs and quotas need a rate policy, not \(policy).")
    }

    /// A time that never comes (`SLUICE_NEVER`, `UINT64_MAX`).
    package static let never = UInt64.max
}

extension LimiterPolicy {
    /// The C core's description of this policy, not yet validated by the
    /// core (that happens in `sluice_limiter_new()`), but with every number
    /// converted exactly.
    ///
    /// - Throws: ``LimiterError/invalidArgument`` for a negative duration, a
    ///   limit below 1 or an explicit burst below 1;
    ///   ``LimiterError/outOfRange`` for a duration that does not fit.
    package func cPolicy() throws(LimiterError) -> sluice_policy_t {
        switch kind {
        case let .throttle(interval, leading, trailing, pick):
            return sluice_throttle(
                try Self.nanoseconds(interval), leading, trailing,
                pick == .latest ? SLUICE_PICK_LATEST : SLUICE_PICK_FIRST)
        case let .audit(interval):
            return sluice_audit(try Self.nanoseconds(interval))
        case let .debounce(interval, leading, trailing, maxWait):
            // sluice_debounce() reads a negative max_wait as "none"; a negative
            // Duration is rejected by nanoseconds(_:) before it can get there.
            let wait: Int64 = if let maxWait { try Self.nanoseconds(maxWait) } else { -1 }
            return sluice_debounce(try Self.nanoseconds(interval), leading, trailing, wait)
        case let .rate(limit, per, burst):
            guard limit >= 1 else { throw .invalidArgument }
            var cBurst: UInt64 = 0  // 0 asks the core for `limit`
            if let burst {
                guard burst >= 1 else { throw .invalidArgument }
                cBurst = UInt64(burst)
            }
            return sluice_rate(UInt64(limit), try Self.nanoseconds(per), cBurst)
        }
    }

    /// The policy a core policy describes (for tools that read policies
    /// from C, such as the trace library), or `nil` for an unknown kind.
    ///
    /// - Parameter policy: a policy, as `sluice_trace_policy()` returns it.
    package init?(core policy: sluice_policy_t) {
        switch policy.kind {
        case SLUICE_THROTTLE:
            self = .throttle(
                interval: .nanoseconds(policy.interval_ns), leading: policy.leading, trailing: policy.trailing,
                pick: policy.pick == SLUICE_PICK_FIRST ? .first : .latest)
        case SLUICE_AUDIT:
            self = .audit(interval: .nanoseconds(policy.interval_ns))
        case SLUICE_DEBOUNCE:
            self = .debounce(
                interval: .nanoseconds(policy.interval_ns), leading: policy.leading, trailing: policy.trailing,
                maxWait: policy.has_max_wait ? .nanoseconds(policy.max_wait_ns) : nil)
        case SLUICE_RATE:
            self = .rate(
                limit: Int(policy.limit), per: .nanoseconds(policy.per_ns),
                burst: policy.burst == 0 ? nil : Int(policy.burst))
        default:
            return nil
        }
    }
}
