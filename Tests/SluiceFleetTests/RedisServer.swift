import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A private redis-server on a free loopback port with no persistence, for
/// the tests of one suite. It dies with its object.
///
/// A port from `bind(0)` lies in the range the kernel also gives outgoing
/// connections, and a CI run lost a server that way: between the test's
/// release of the port and the server's bind, a connection of a parallel test
/// took it. So the port is drawn outside that range; a server that still
/// exits at start is started again on another port; and the server counts as
/// started only when the process answering on the port is the one started
/// (its `process_id` in `INFO server`), not another test's server there.
final class RedisServer {
    /// The redis-server binary, or nil when none is installed (the suite is
    /// then skipped, and says so).
    static let path: String? = ["/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"]
        .first { access($0, X_OK) == 0 }

    struct StartError: Error, CustomStringConvertible {
        let description: String
    }

    let port: Int
    private let pid: pid_t

    private init(port: Int, pid: pid_t) {
        self.port = port
        self.pid = pid
    }

    /// Starts a server; throws (the test fails) when redis-server is
    /// installed but cannot be started.
    static func start() async throws -> RedisServer {
        guard let path else { throw StartError(description: "redis-server is not installed") }
        var why = "no free port"
        for _ in 0..<10 {
            guard let port = freePort() else { break }
            let pid = try spawn(path, port: port)
            // wait until it answers (up to 30 s: a loaded machine can be slow
            // to start it), or until it exits (the port was taken)
            var waited = 0
            while waited < 3_000 {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid {
                    why = "redis-server exited at start on port \(port)"
                    break
                }
                if answeringPid(port: port) == Int(pid) { return RedisServer(port: port, pid: pid) }
                do {
                    try await Task.sleep(for: .milliseconds(10))
                } catch {
                    stop(pid)  // cancelled: no server left behind
                    throw error
                }
                waited += 1
            }
            if waited == 3_000 {
                stop(pid)
                throw StartError(description: "redis-server did not answer on port \(port) within 30 s")
            }
        }
        throw StartError(description: why)
    }

    deinit {
        Self.stop(pid)
    }

    /// Kills the server (no persistence: nothing to save) and reaps it.
    private static func stop(_ pid: pid_t) {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    private static func spawn(_ path: String, port: Int) throws -> pid_t {
        let args = [
            path, "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", "/tmp", "--loglevel", "warning",
        ]
        var cargs = args.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        // the spawning thread may block signals (dispatch workers do): the
        // server must start with none blocked, so that a signal stops it
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
        var files = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&files)
        defer { posix_spawn_file_actions_destroy(&files) }
        posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0)
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &files, &attr, &cargs, environ)
        guard rc == 0 else { throw StartError(description: "posix_spawn \(path): \(String(cString: strerror(rc)))") }
        return child
    }

    private static func loopback(_ port: Int) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        a.sin_port = UInt16(port).bigEndian
        return a
    }

    private static func withSocket<R>(_ port: Int, _ body: (Int32, UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var a = loopback(port)
        return withUnsafePointer(to: &a) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    /// The kernel's range of local ports for outgoing connections (the first
    /// line of ip_local_port_range: "low high"), or Linux's default.
    private static func ephemeralRange() -> ClosedRange<Int> {
        var line = [CChar](repeating: 0, count: 64)
        if let f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r") {
            defer { fclose(f) }
            if fgets(&line, Int32(line.count), f) != nil {
                let bytes = line.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }
                let n = String(decoding: bytes, as: UTF8.self)
                    .split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
                    .compactMap { Int($0) }
                if n.count == 2, n[0] > 0, n[1] >= n[0] { return n[0]...n[1] }
            }
        }
        return 32768...60999
    }

    /// A port outside the ephemeral range that can be bound now.
    private static func freePort() -> Int? {
        let eph = ephemeralRange()
        let below = 10_000...max(10_000, eph.lowerBound - 1)
        let above = min(65_535, eph.upperBound + 1)...65_535
        let range = below.count >= above.count ? below : above
        guard range.count >= 100 else { return nil }
        for _ in 0..<200 {
            let port = Int.random(in: range)
            let free = withSocket(port) { s, a, len in bind(s, a, len) == 0 }
            if free { return port }
        }
        return nil
    }

    /// The process id of the server answering on `port`, from `INFO server`.
    private static func answeringPid(port: Int) -> Int? {
        withSocket(port) { s, a, len -> Int? in
            var tv = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            guard connect(s, a, len) == 0 else { return nil }
            let cmd = Array("INFO server\r\n".utf8)
            guard write(s, cmd, cmd.count) == cmd.count else { return nil }
            var reply: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 4096)
            while reply.count < 65_536 {
                let n = read(s, &buf, buf.count)
                if n <= 0 { return nil }
                reply += buf[0..<n]
                for line in reply.split(separator: UInt8(ascii: "\n")) {
                    let text = String(decoding: line, as: UTF8.self)
                    if text.hasPrefix("process_id:"), text.hasSuffix("\r") {
                        return Int(text.dropFirst("process_id:".count).dropLast())
                    }
                }
            }
            return nil
        }
    }
}

extension Trait where Self == ConditionTrait {
    /// Runs the test only where redis-server is installed; elsewhere it is
    /// reported as skipped. Installed but unable to start is a failure.
    static var needsRedis: Self { .enabled(if: RedisServer.path != nil, "redis-server is not installed") }
}
