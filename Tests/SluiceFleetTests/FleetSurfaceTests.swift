import Sluice
import SluiceFleet
import SluiceHTTP
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback TCP port that accepts connections (the kernel completes them
/// from the backlog) but never answers: every request to it waits for its
/// timeout.
private final class SilentServer {
    let port: Int
    private let fd: Int32

    init() throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw LimiterError.notConnected }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, listen(fd, 16) == 0, named == 0 else {
            close(fd)
            throw LimiterError.notConnected
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(fd) }
}

/// Records what a gate's failure observer is told.
private final class Observed: Sendable {
    private let entries = Mutex<[String]>([])
    func add(_ key: String, _ error: any Error) { entries.withLock { $0.append("\(key): \(error)") } }
    var all: [String] { entries.withLock { $0 } }
}

private func unreachable(_ onFailure: FleetConfiguration.FailurePolicy) -> FleetConfiguration {
    var c = FleetConfiguration()
    c.port = 1  // nothing listens on port 1: every call is answered by the failure policy
    // A refused connection answers at once (notConnected); a short request
    // timeout could end first on a loaded machine (timedOut).
    c.timeout = .seconds(30)
    c.onFailure = onFailure
    return c
}

@Suite("FleetLimiter: the surface of a local limiter, failures the gate can see")
struct FleetSurfaceTests {
    @Test("a cancelled task's call throws cancelled at once, and the limiter stays usable", .timeLimit(.minutes(5)))
    func cancellation() async throws {
        let silent = try SilentServer()
        var c = FleetConfiguration()
        c.port = silent.port
        c.timeout = .seconds(600)  // far longer than the bound below: only cancellation can end the call early
        let fleet = try FleetLimiter<String>(.rate(limit: 5, per: .seconds(1)), configuration: c)
        defer { try? fleet.close() }
        let started = ContinuousClock.now
        let task = Task { () async throws(LimiterError) -> RateDecision in try await fleet.check("x") }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        let result = await task.result
        let waited = ContinuousClock.now - started
        #expect(throws: LimiterError.cancelled) { try result.get() }
        // (generous: under TSan the test pool's two threads can be busy with
        // other suites for tens of seconds before the cancelled task resumes)
        #expect(waited < .seconds(180), "cancellation took \(waited)")
        // A call whose task is cancelled before it is made throws at once too.
        let early = Task { () async throws(LimiterError) -> RateDecision in
            withUnsafeCurrentTask { $0?.cancel() }
            return try await fleet.check("y")
        }
        await #expect(throws: LimiterError.cancelled) { try await early.value }
        #expect(!fleet.isClosed)
    }

    @Test("a URL reaches Redis; a malformed one is refused naming the part; the password is never shown", .needsRedis)
    func url() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        var c = FleetConfiguration(url: "redis://127.0.0.1:\(redis.port)/1")
        c.host = ""  // not used with a URL
        c.prefix = "swift-url"
        c.timeout = .seconds(30)
        let fleet = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(3600)), configuration: c)
        defer { try? fleet.close() }
        let first = try await fleet.check("u")
        let second = try await fleet.check("u")
        #expect(first.isAdmitted && first.source == .limiter)
        #expect(!second.isAdmitted && second.failure == nil)

        let secret = "s3cret-Pw"
        for bad in ["redis://user:\(secret)@127.0.0.1:99999", "rediss://:\(secret)@host?cacrt=/tmp/ca.pem"] {
            do {
                _ = try FleetLimiter<String>(
                    .rate(limit: 1, per: .seconds(1)), configuration: FleetConfiguration(url: bad))
                Issue.record("accepted: a malformed URL")
            } catch {
                let reason = error.reason ?? ""
                #expect(error == .malformedInput && reason.hasPrefix("Invalid FleetConfiguration.url: "), "\(error)")
                #expect(reason.contains("99999") || reason.contains("cacrt"), "\(reason)")
                #expect(!reason.contains(secret) && !"\(error)".contains(secret))
            }
        }
        let described = "\(FleetConfiguration(url: "redis://app:\(secret)@10.0.0.5:6380/2"))"
        #expect(!described.contains(secret) && described.contains("10.0.0.5:6380"), "\(described)")
    }

    @Test("on a loop of one's own: answers come, and a close with calls in flight answers each once", .needsRedis)
    func ownLoop() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let loop = try LimiterLoop()
        var c = FleetConfiguration(url: "redis://127.0.0.1:\(redis.port)")
        c.prefix = "swift-loop"
        c.timeout = .seconds(30)
        let fleet = try FleetLimiter<UInt64>(.rate(limit: 2, per: .seconds(3600)), configuration: c, loop: loop)
        #expect(fleet.loop === loop)
        let first = try await fleet.check(1)
        #expect(first.isAdmitted && first.source == .limiter)
        let answers = await withTaskGroup(of: Result<RateDecision, LimiterError>.self) { group in
            for key in 0..<40 as Range<UInt64> {
                group.addTask { () async -> Result<RateDecision, LimiterError> in
                    do throws(LimiterError) {
                        return .success(try await fleet.check(100 + key))
                    } catch {
                        return .failure(error)
                    }
                }
            }
            try? fleet.close()  // from this thread, calls in flight or not yet made
            var all: [Result<RateDecision, LimiterError>] = []
            for await answer in group { all.append(answer) }
            return all
        }
        #expect(answers.count == 40)
        for answer in answers {
            switch answer {
            case .success(let d): #expect(d.isAdmitted)
            case .failure(let e): #expect(e == .closed, "\(e)")
            }
        }
        #expect(fleet.isClosed)
    }

    @Test("manual time needs each call's time; server time refuses one, naming the option")
    func timeModes() async throws {
        var c = unreachable(.open)
        c.manualTime = true
        let manual = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
        defer { try? manual.close() }
        do {
            _ = try await manual.check("x")
            Issue.record("a manual-time call without a time was accepted")
        } catch {
            #expect(error == .invalidArgument && (error.reason ?? "").contains("manualTime"), "\(error)")
        }
        let server = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: unreachable(.open))
        defer { try? server.close() }
        do {
            _ = try await server.quota(for: "x", at: LimiterInstant(nanoseconds: 5))
            Issue.record("a server-time call with a time was accepted")
        } catch {
            #expect(error == .invalidArgument && (error.reason ?? "").contains("at:"), "\(error)")
        }
        await #expect(throws: LimiterError.outOfRange) { try await server.check("x", cost: 0) }
        // A quota read has no failure policy: Redis's absence is its error.
        await #expect(throws: LimiterError.notConnected) { try await server.quota(for: "x") }
    }

    @Test("behind the gate, fail closed is a 503 with the fleet's Retry-After, never a quota answer")
    func gateFailClosed() async throws {
        let fleet = try FleetLimiter<String>(
            .rate(limit: 10, per: .seconds(1)), configuration: unreachable(.closed(retryAfter: .seconds(2))))
        defer { try? fleet.close() }
        let observed = Observed()
        let gate = RateLimitGate(fleet, policyName: "api", failureObserver: observed.add)
        let verdict = await gate.evaluate(key: "client")
        let rejection = try #require(verdict.rejection)
        #expect(rejection.status == 503)
        #expect(rejection.body.contains("\"status\":503") && rejection.body.contains("retry after 2 seconds"))
        #expect(verdict.headers.map(\.name) == ["Retry-After"], "\(verdict.headers)")
        #expect(verdict.retryAfter == "2" && verdict.rateLimit == nil && verdict.ratePolicy == nil)
        #expect(observed.all == ["client: \(LimiterError.notConnected)"])

        let shadow = RateLimitGate(fleet, policyName: "api", shadow: true, failureObserver: observed.add)
        let passed = await shadow.evaluate(key: "client")
        #expect(passed.rejection == nil && passed.headers.isEmpty)
        #expect(observed.all.count == 2)
    }

    @Test("a wrong password: the connection's problem is named, without the password", .needsRedis)
    func connectionProblem() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        var c = FleetConfiguration(url: "redis://:Not-The-Pw-7@127.0.0.1:\(redis.port)")
        c.timeout = .seconds(30)
        let fleet = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
        defer { try? fleet.close() }
        // The test's server has no password: AUTH with one is refused.
        let decision = try await fleet.check("x")
        #expect(decision.source == .failurePolicy(.authenticationFailed), "\(decision)")
        let problem = try #require(fleet.connectionProblem)
        #expect(problem == .authenticationFailed && !"\(problem)".contains("Not-The-Pw-7"), "\(problem)")
        #expect(!fleet.isConnected)
    }

    @Test("a key over 1024 bytes is keyTooLong, which the gate answers 431 (not 503)")
    func longKey() async throws {
        let fleet = try FleetLimiter<String>(.rate(limit: 10, per: .seconds(1)), configuration: unreachable(.open))
        defer { try? fleet.close() }
        let long = String(repeating: "k", count: 1025)
        await #expect(throws: LimiterError.keyTooLong) { try await fleet.check(long) }
        let observed = Observed()
        let verdict = await RateLimitGate(fleet, failureObserver: observed.add).evaluate(key: long)
        #expect(verdict.rejection?.status == 431, "\(String(describing: verdict.rejection))")
        #expect(observed.all.count == 1)
    }

    @Test("behind the gate, fail open lets the request through without RateLimit fields; the observer is told")
    func gateFailOpen() async throws {
        let fleet = try FleetLimiter<String>(.rate(limit: 10, per: .seconds(1)), configuration: unreachable(.open))
        defer { try? fleet.close() }
        let observed = Observed()
        let gate = RateLimitGate(fleet, policyName: "api", failureObserver: observed.add)
        let verdict = await gate.evaluate(key: "client")
        #expect(verdict.rejection == nil && verdict.headers.isEmpty, "\(verdict.headers)")
        #expect(verdict.decision?.source == .failurePolicy(.notConnected))
        #expect(observed.all == ["client: \(LimiterError.notConnected)"])
    }

    @Test("behind the gate, the local fallback's decisions are real quota answers, each reported")
    func gateFallback() async throws {
        let fleet = try FleetLimiter<String>(
            .rate(limit: 1, per: .seconds(60)), configuration: unreachable(.local(nil)))
        defer { try? fleet.close() }
        let observed = Observed()
        let gate = RateLimitGate(fleet, policyName: "api", failureObserver: observed.add)
        let first = await gate.evaluate(key: "client")
        #expect(first.rejection == nil)
        #expect(first.ratePolicy == "\"api\";q=1;w=60" && first.rateLimit == "\"api\";r=0;t=60", "\(first.headers)")
        let second = await gate.evaluate(key: "client")
        // 60 s after the first call, counted from the second (a loaded
        // machine may put seconds between them)
        let retry = try #require(second.retryAfter.flatMap { Int($0) })
        #expect(second.rejection?.status == 429 && (1...60).contains(retry), "\(second.headers)")
        let firstAt = try #require(first.decision?.at), secondRetry = try #require(second.decision?.retryAt)
        // (each answer's times are placed on the loop clock from its own
        // reading: two decisions agree to within their answers' latency)
        let skew = secondRetry.duration(to: firstAt.advanced(by: .seconds(60)))
        #expect(skew > .seconds(-5) && skew < .seconds(5), "\(skew)")
        #expect(observed.all.count == 2)
        #expect(fleet.statistics.failures == 2)
    }
}
