import Foundation

/// A small deterministic generator (SplitMix64), so a failing randomized
/// test can be replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Where the conformance vectors live: Tests/Vectors, found from this
/// file's path.
enum VectorPaths {
    /// Tests/ (this file is Tests/SluiceTests/Behaviour/Support.swift).
    static let testsDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Tests/Vectors: the project's vectors.
    static let projectVectors = testsDirectory.appendingPathComponent("Vectors")

    /// Every `*.trace` file of Tests/Vectors, as paths, sorted.
    static func traces() -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: projectVectors.path) else {
            return []
        }
        return names.sorted().filter { $0.hasSuffix(".trace") }.map {
            projectVectors.appendingPathComponent($0).path
        }
    }
}

extension Duration {
    /// A duration in whole nanoseconds (exact for any Int64).
    static func ns(_ value: Int64) -> Duration { .nanoseconds(value) }
}

/// Runs real-time checks one at a time, so that timing tests do not compete
/// for the machine's cores with each other.
actor RealtimeGate {
    static let shared = RealtimeGate()
    private var busy = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func run<R: Sendable>(_ body: @Sendable () async throws -> R) async throws -> R {
        while busy {
            await withCheckedContinuation { waiters.append($0) }
        }
        busy = true
        defer {
            busy = false
            if !waiters.isEmpty { waiters.removeFirst().resume() }
        }
        return try await body()
    }
}

/// Whether this test binary runs under ThreadSanitizer (which slows it down
/// several times: real-time bounds are then meaningless, so timing tests
/// are skipped, while the race checks of the other tests are the point).
let isThreadSanitized: Bool = dlsym(dlopen(nil, RTLD_NOW), "__tsan_init") != nil
