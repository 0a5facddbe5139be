import Testing

#if canImport(Glibc)
import Glibc
#endif

import Sluice
import SluiceFleet

/// A private redis-server on a free loopback port with no persistence, or nil
/// when redis-server is not installed.
final class RedisServer {
    let port: Int
    private let pid: pid_t

    init?() {
        let candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"]
        guard let path = candidates.first(where: { access($0, X_OK) == 0 }) else { return nil }
        // a free port: bind port 0, read it, release it
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Int32 in
                _ = bind(s, p, len)
                return getsockname(s, p, &len)
            }
        }
        port = Int(UInt16(bigEndian: addr.sin_port))
        close(s)
        let args = [path, "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--daemonize", "no", "--dir", "/tmp", "--loglevel", "warning"]
        var cargs = args.map { strdup($0) } + [nil]
        var child: pid_t = 0
        // the spawning thread may block signals (dispatch workers do): the
        // server must start with none blocked, so that SIGTERM stops it
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
        var files = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&files)
        posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0)
        let rc = posix_spawn(&child, path, &files, &attr, &cargs, environ)
        posix_spawn_file_actions_destroy(&files)
        posix_spawnattr_destroy(&attr)
        cargs.forEach { free($0) }
        guard rc == 0 else { return nil }
        pid = child
        // wait until it accepts connections (up to 5 s)
        for _ in 0..<500 {
            let c = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var a = addr
            let ok = withUnsafePointer(to: &a) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(c, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            close(c)
            if ok { return }
            usleep(10_000)
        }
    }

    deinit {
        kill(pid, SIGKILL) // no persistence: nothing to save
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }
}

private func config(port: Int, prefix: String) -> FleetConfiguration {
    var c = FleetConfiguration()
    c.port = port
    c.prefix = prefix
    c.timeout = .seconds(5)
    return c
}

@Suite("FleetLimiter (needs redis-server)")
struct FleetLimiterTests {
    @Test("decisions from Redis and the cache, quota, cancel (manual time)")
    func decisions() async throws {
        guard let redis = RedisServer() else { return } // no redis-server: nothing to test
        var c = config(port: redis.port, prefix: "swift-manual")
        c.manualTime = true
        let fleet = try FleetLimiter(policy: .rate(limit: 2, per: .seconds(1), burst: 2), configuration: c)
        defer { fleet.close() }
        let a = try await fleet.call("k", now: 0)
        #expect(a.admitted && a.source == .redis && a.remaining == 1 && a.full == 500_000_000)
        let b = try await fleet.call("k", now: 0)
        #expect(b.admitted && b.remaining == 0 && b.full == 1_000_000_000)
        let d = try await fleet.call("k", now: 1)
        #expect(!d.admitted && d.source == .cache && d.retryAt == 500_000_000)
        #expect(d.retryAfter == .nanoseconds(499_999_999))
        let big = try await fleet.call("k", cost: 3, now: 2)
        #expect(!big.admitted && big.retryAt == nil)
        let q = try await fleet.quota("k", now: 250_000_000)
        #expect(q.remaining == 0 && q.full == 1_000_000_000 && q.retryAt == 500_000_000 && q.source == .redis)
        try await fleet.cancel("k", now: 300_000_000)
        let e = try await fleet.call("k", now: 300_000_001)
        #expect(e.admitted && e.source == .redis)
        let s = fleet.stats
        #expect(s.calls == 5 && s.cacheDropped >= 1 && s.cancels == 1)
    }

    @Test("server time, concurrent callers: never more than the burst at once")
    func concurrent() async throws {
        guard let redis = RedisServer() else { return }
        let fleet = try FleetLimiter(policy: .rate(limit: 10, per: .seconds(60), burst: 10),
                                     configuration: config(port: redis.port, prefix: "swift-concurrent"))
        defer { fleet.close() }
        let admitted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<200 { group.addTask { try await fleet.call(UInt64(7)).admitted } }
            var n = 0
            for try await ok in group where ok { n += 1 }
            return n
        }
        #expect(admitted == 10)
    }

    @Test("nothing listening: the failure policy answers")
    func failure() async throws {
        var c = FleetConfiguration()
        c.port = 1 // nothing listens on port 1
        c.onFailure = .open
        let open = try FleetLimiter(policy: .rate(limit: 1, per: .seconds(1)), configuration: c)
        let a = try await open.call("x")
        #expect(a.admitted && a.source == .failure(.notConnected))
        open.close()
        await #expect(throws: FleetError.closed) { try await open.call("x") }

        c.onFailure = .closed(retryAfter: .seconds(2))
        let closed = try FleetLimiter(policy: .rate(limit: 1, per: .seconds(1)), configuration: c)
        defer { closed.close() }
        let b = try await closed.call("x")
        #expect(!b.admitted && b.retryAfter == .seconds(2))
    }

    @Test("only rate policies")
    func policy() {
        #expect(throws: LimiterError.self) {
            _ = try FleetLimiter(policy: .throttle(interval: .seconds(1)))
        }
    }
}
