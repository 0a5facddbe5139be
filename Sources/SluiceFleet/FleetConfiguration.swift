import CSluice
import CSluiceFleet
import Sluice

/// How a ``FleetLimiter`` connects and what it does when Redis cannot decide.
///
/// Its `description` never shows a password: a URL is printed redacted.
public struct FleetConfiguration: Sendable, CustomStringConvertible {
    /// What to do when Redis cannot decide in time.
    public enum FailurePolicy: Sendable {
        /// Drop the call, telling it to retry after `retryAfter`.
        case closed(retryAfter: Duration = .seconds(1))
        /// Admit the call.
        case open
        /// Decide with a local limiter of this rate policy (`nil`: the fleet's
        /// own policy); typically the fleet's rate divided by the number of processes.
        case local(LimiterPolicy?)
    }

    /// Whose clock times the decisions.
    public enum Clock: Sendable, Hashable {
        /// Redis's (`TIME` in the script): one clock for the whole fleet.
        case redis
        /// Each process's own real-time clock, for services whose scripts
        /// may not call `TIME` (ElastiCache Serverless): the servers'
        /// clocks must agree; a process `d` ahead can take up to
        /// `d × limit / per` units more than its share of a key
        /// (docs/fleet.md, "Managed services").
        case local
    }

    /// Where Redis is and how to reach it, as a URL (docs/fleet.md,
    /// "Addresses"): `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`,
    /// `rediss://…` (TLS, with `cacert=`, `cert=`, `key=`, `sni=`,
    /// `insecure=1`), `unix:///PATH[?db=N&user=U&password=P]`, and
    /// `password_env=NAME` on any of them to read the password from the
    /// environment instead of the URL. When set, ``host`` and ``port`` are
    /// not used. A malformed URL is refused at creation with
    /// ``Sluice/LimiterError/malformedInput``, its reason naming the
    /// offending part (never the password).
    public var url: String? = nil
    /// Redis host, not empty (a numeric address is best: name resolution
    /// blocks), over plain TCP; see ``url`` for the other forms.
    public var host: String = "127.0.0.1"
    /// Redis port, 1 to 65535.
    public var port: Int = 6379
    /// Key prefix, 1 to 256 bytes of UTF-8: Redis keys are `{prefix:...}`.
    /// Give each policy its own.
    public var prefix: String = "sluice"
    /// Per-request timeout, more than zero.
    public var timeout: Duration = .milliseconds(50)
    /// The failure policy.
    public var onFailure: FailurePolicy = .closed()
    /// Entries of the local cache of certain drops, at least 1 (`nil`: no cache).
    public var cacheSlots: Int? = 4096
    /// How long a cache entry is trusted, more than zero.
    public var cacheTTL: Duration = .seconds(1)
    /// Whose clock times the decisions (Redis's by default).
    public var clock: Clock = .redis
    /// Use the time passed with each request instead of any clock (tests,
    /// traces); not with ``clock`` `.local`.
    public var manualTime: Bool = false
    /// Most calls and quota reads decided by one script run, 1 to 1024
    /// (requests queued together are sent as one batch, decided in order).
    /// With Redis Cluster (`redis+cluster://`) this is per node: one batch per node, keys of many slots.
    public var maxBatch: Int = 32

    /// A configuration with the defaults (127.0.0.1:6379, 50 ms timeout, fail closed).
    public init() {}

    /// A configuration for the Redis at `url` (see ``url``), with the other
    /// defaults.
    ///
    /// - Parameter url: the Redis URL.
    public init(url: String) {
        self.url = url
    }

    /// The configuration, with the URL's passwords replaced by `***`.
    public var description: String {
        let address: String
        if let url {
            var buffer = [CChar](repeating: 0, count: url.utf8.count + 64)
            let n = sluice_fleet_redact_url(url, &buffer, buffer.count)
            address = n >= 0 && Int(n) < buffer.count ? "url: \"\(text(of: buffer))\"" : "url: (malformed)"
        } else {
            address = "host: \"\(host)\", port: \(port)"
        }
        return
            "FleetConfiguration(\(address), prefix: \"\(prefix)\", timeout: \(timeout), onFailure: \(onFailure), "
            + "cacheSlots: \(cacheSlots.map(String.init) ?? "nil"), cacheTTL: \(cacheTTL), clock: \(clock), manualTime: \(manualTime), "
            + "maxBatch: \(maxBatch))"
    }
}

private func durationNs(_ d: Duration) -> UInt64 {
    let (s, a) = d.components
    if s < 0 { return 0 }
    return UInt64(s) &* 1_000_000_000 &+ UInt64(a / 1_000_000_000)
}

/// The C form of a rate policy; `option` names it in errors ("policy",
/// "onFailure: .local(…)"): a policy that is not rate, or a rate policy that
/// breaks a rule, is refused with a reason naming the option and the rule.
private func ratePolicy(_ p: LimiterPolicy, option: String) throws(LimiterError) -> sluice_policy_t {
    guard let r = p.rateLimit else {
        throw LimiterError(
            .invalidArgument,
            reason: "Invalid \(option): a FleetLimiter takes a rate policy (.rate(limit:per:burst:)), not \(p).")
    }
    if let problem = p.problem {
        throw LimiterError(problem.code, reason: "Invalid \(option): \(problem.sentence)")
    }
    try p.validate()  // the core's check (the reason above covers every refusal it makes)
    let per = durationNs(r.per)
    return sluice_rate(UInt64(r.limit), Int64(clamping: per), UInt64(r.burst))
}

/// A refused option of a ``FleetConfiguration``: its name, value and rule.
private func invalid(_ option: String, _ value: Any, _ rule: String) -> LimiterError {
    LimiterError(.invalidArgument, reason: "Invalid FleetConfiguration.\(option) (\(value)): \(rule).")
}

/// A positive duration option in nanoseconds, at most 10^18 (about 31.7 years).
private func positiveNs(_ option: String, _ d: Duration) throws(LimiterError) -> UInt64 {
    guard d > .zero else { throw invalid(option, d, "it must be more than zero") }
    guard d <= .nanoseconds(1_000_000_000_000_000_000) else {
        throw LimiterError(
            .outOfRange,
            reason:
                "Invalid FleetConfiguration.\(option) (\(d)): it may be at most 10^18 nanoseconds (about 31.7 years).")
    }
    return max(1, durationNs(d))
}

/// The C configuration of `configuration` (without host and prefix, which
/// the caller points at), after checking every option: a value the C layer
/// would silently replace by its default (a zero port, timeout or TTL, an
/// empty prefix) or clamp (cache slots, batch size) is refused, with a
/// reason naming the option and the rule.
func cConfig(
    policy: LimiterPolicy, _ configuration: FleetConfiguration
) throws(LimiterError)
    -> sluice_fleet_config_t
{
    var c = sluice_fleet_config_t()
    c.policy = try ratePolicy(policy, option: "policy")
    if let url = configuration.url {
        var why = [CChar](repeating: 0, count: 256)
        if sluice_fleet_check_url(url, &why, why.count) != 0 {
            throw LimiterError(.malformedInput, reason: "Invalid FleetConfiguration.url: \(text(of: why)).")
        }
    } else {
        guard !configuration.host.isEmpty else {
            throw invalid("host", "\"\"", "it must name the Redis server (a numeric address is best)")
        }
        guard (1...65535).contains(configuration.port) else {
            throw invalid("port", configuration.port, "it must be 1 to 65535")
        }
    }
    let prefixBytes = configuration.prefix.utf8.count
    guard (1...256).contains(prefixBytes) else {
        throw invalid("prefix", "\(prefixBytes) bytes", "it must be 1 to 256 bytes of UTF-8")
    }
    c.port = Int32(configuration.port)
    c.timeout_ns = try positiveNs("timeout", configuration.timeout)
    c.manual_time = configuration.manualTime
    c.local_clock = configuration.clock == .local
    if configuration.manualTime && configuration.clock == .local {
        throw invalid(
            "clock", ".local", "it cannot be combined with manualTime (each call's time comes from the caller)")
    }
    if let slots = configuration.cacheSlots {
        guard slots >= 1 else { throw invalid("cacheSlots", slots, "it must be at least 1, or nil for no cache") }
        c.cache_slots = slots
    } else {
        c.cache_slots = Int(bitPattern: UInt.max)  // SIZE_MAX: no cache
    }
    c.cache_ttl_ns = try positiveNs("cacheTTL", configuration.cacheTTL)
    guard (1...1024).contains(configuration.maxBatch) else {
        throw invalid("maxBatch", configuration.maxBatch, "it must be 1 to 1024")
    }
    c.max_batch = configuration.maxBatch
    switch configuration.onFailure {
    case .closed(let retry):
        c.on_failure = SLUICE_FLEET_FAIL_CLOSED
        c.closed_retry_ns = try positiveNs("onFailure: .closed(retryAfter:)", retry)
    case .open:
        c.on_failure = SLUICE_FLEET_FAIL_OPEN
    case .local(let p):
        c.on_failure = SLUICE_FLEET_FAIL_LOCAL
        if let p {
            c.fallback_policy = try ratePolicy(p, option: "onFailure: .local policy")
        }
    }
    return c
}

/// One pending request: resumes its continuation with the C result.

/// The text of a NUL-terminated buffer the C layer wrote.
func text(of buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
