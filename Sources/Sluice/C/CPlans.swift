import CSluice
import CSluiceLoop

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A table of plans as the core takes it (`sluice_plans_t`,
/// `sluice_plans.h`), built from ``RatePlan`` values: the names copied
/// into C strings, the quotas and plans into arrays, all owned by this
/// object and freed with it. The core copies a table when it takes it
/// (`sluice_config_t.plans`, `sluice_*_set_plans`), so the table only needs
/// to live for the call.
package final class CPlanTable {
    /// The table (pointing into the buffers below).
    private(set) var table: sluice_plans_t
    private let plans: UnsafeMutableBufferPointer<sluice_plan_t>
    private let quotas: UnsafeMutableBufferPointer<sluice_rate_quota_t>
    private var names: [UnsafeMutablePointer<CChar>] = []

    /// Builds the table of `plans`, whose numbers have been checked in Swift
    /// (see ``RatePlan/problem(in:maxQuotas:)``).
    ///
    /// - Parameters:
    ///   - plans: the plans, the default first.
    ///   - maxQuotas: the table's `max_quotas` (0: the core's default).
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for a period that does not convert to nanoseconds.
    init(_ plans: [RatePlan], maxQuotas: Int) throws(LimiterError) {
        let quotaCount = plans.reduce(0) { $0 + $1.quotas.count }
        self.plans = .allocate(capacity: max(1, plans.count))
        self.quotas = .allocate(capacity: max(1, quotaCount))
        table = sluice_plans_t(plans: nil, nplans: 0, max_quotas: maxQuotas)
        var q = 0
        for (p, plan) in plans.enumerated() {
            let first = q
            for quota in plan.quotas {
                let per: Int64
                do { per = try LimiterPolicy.nanoseconds(quota.per) } catch {
                    // Filled so far: freed by deinit (the names) and the buffers.
                    table.nplans = p
                    throw error
                }
                (self.quotas.baseAddress! + q).initialize(
                    to: sluice_rate_quota_t(
                        name: copy(quota.name), limit: UInt64(clamping: quota.limit), per_ns: per,
                        burst: UInt64(clamping: quota.burst ?? 0)))
                q += 1
            }
            (self.plans.baseAddress! + p).initialize(
                to: sluice_plan_t(
                    name: copy(plan.name), quotas: UnsafePointer(self.quotas.baseAddress! + first),
                    nquotas: plan.quotas.count))
        }
        table.plans = UnsafePointer(self.plans.baseAddress!)
        table.nplans = plans.count
    }

    deinit {
        for name in names { free(name) }
        plans.deallocate()  // trivial
        quotas.deallocate()
    }

    /// A C copy of `text`, freed with the table.
    private func copy(_ text: String) -> UnsafePointer<CChar> {
        let c = strdup(text)!
        names.append(c)
        return UnsafePointer(c)
    }

    /// Runs `body` with a pointer to the table.
    package func withTable<R>(
        _ body: (UnsafePointer<sluice_plans_t>) throws(LimiterError) -> R
    ) throws(LimiterError) -> R {
        var table = self.table
        return try withUnsafePointer(to: &table) { (p) throws(LimiterError) -> R in try body(p) }
    }

    /// `sluice_plans_check`: 0, or a negative `SLUICE_E*` with the core's
    /// sentence naming the field and the rule it breaks.
    func check() -> (code: Int32, message: String) {
        var buffer = [CChar](repeating: 0, count: Int(SLUICE_PLANS_MESSAGE_MAX))
        var table = self.table
        let rc = sluice_plans_check(&table, &buffer, buffer.count)
        guard rc < 0 else { return (rc, "") }
        let message = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return (rc, message)
    }
}

// MARK: - The core limiter's plan calls

extension CLimiter {
    /// `sluice_limiter_submit_plan`.
    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, now: UInt64,
        into decision: inout sluice_decision_t, detail: inout sluice_plan_detail_t
    ) -> Int32 {
        sluice_limiter_submit_plan(handle, key, token, cost, plan, now, &decision, &detail)
    }

    /// `sluice_limiter_quota_plan`.
    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, now: UInt64, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        sluice_limiter_quota_plan(handle, key, cost, plan, now, &quota, &detail)
    }

    /// `sluice_limiter_set_plans`.
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32 { sluice_limiter_set_plans(handle, plans) }

    /// `sluice_limiter_plan_index`.
    func planIndex(_ name: String, into index: inout UInt32) -> Int32 {
        var name = name
        return name.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) {
                sluice_limiter_plan_index(handle, $0.baseAddress, $0.count, &index)
            }
        }
    }

    /// `sluice_limiter_plan_info` (the number of plans, or a negative `SLUICE_E*`).
    func planInfo(_ plan: UInt32, into detail: inout sluice_plan_detail_t) -> Int32 {
        sluice_limiter_plan_info(handle, plan, &detail)
    }

    /// `sluice_limiter_plan_name`: the name's length written to `buffer`, or a negative `SLUICE_E*`.
    func planName(_ plan: UInt32, quota: Int32, into buffer: UnsafeMutableBufferPointer<CChar>) -> Int32 {
        sluice_limiter_plan_name(handle, plan, quota, buffer.baseAddress, buffer.count)
    }
}

// MARK: - The loop limiter's plan calls

extension CLoopLimiter {
    /// `sluice_mt_submit_plan` (cost and plan in the options; the call reads the clock).
    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        var options = sluice_mt_submit_options_t()
        options.cost = cost
        options.plan = plan
        return sluice_mt_submit_plan(handle, key, token, &options, &decision, &detail)
    }

    /// `sluice_mt_quota_plan`.
    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        var options = sluice_mt_submit_options_t()
        options.cost = cost
        options.plan = plan
        return sluice_mt_quota_plan(handle, key, &options, &quota, &detail)
    }

    /// `sluice_mt_set_plans`.
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32 { sluice_mt_set_plans(handle, plans) }

    /// `sluice_mt_plan_index`.
    func planIndex(_ name: String, into index: inout UInt32) -> Int32 {
        var name = name
        return name.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { sluice_mt_plan_index(handle, $0.baseAddress, $0.count, &index) }
        }
    }

    /// `sluice_mt_plan_info` (the number of plans, or a negative `SLUICE_E*`).
    func planInfo(_ plan: UInt32, into detail: inout sluice_plan_detail_t) -> Int32 {
        sluice_mt_plan_info(handle, plan, &detail)
    }

    /// `sluice_mt_plan_name`: the name's length written to `buffer`, or a negative `SLUICE_E*`.
    func planName(_ plan: UInt32, quota: Int32, into buffer: UnsafeMutableBufferPointer<CChar>) -> Int32 {
        sluice_mt_plan_name(handle, plan, quota, buffer.baseAddress, buffer.count)
    }
}

/// The core's plan calls that take no limiter.
enum CPlans {
    /// Whether `name` is a valid plan or quota name (`sluice_plan_name_valid`).
    static func isValidName(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 {
            sluice_plan_name_valid(UnsafeRawPointer($0.baseAddress)?.assumingMemoryBound(to: CChar.self), $0.count)
        }
    }
}
