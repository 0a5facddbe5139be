import CBench
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Nanoseconds.
let ms: UInt64 = 1_000_000
let sec: UInt64 = 1_000_000_000

/// The origin of the manual clocks (sluice-c and sluice-swift start there).
let manualT0: UInt64 = 1 * ms

/// One case's inputs, shared with the C implementations (`cb_params_t`).
public struct CaseParams: Sendable {
    public var scenario: String
    public var impl: String
    public var keys: Int
    public var threads: Int
    public var ops: Int
    public var budget: Double
    public var interval: UInt64
    public var spread: UInt64
    public var cap: Int
    public var quick: Bool

    public init(
        scenario: String, impl: String, keys: Int, threads: Int, ops: Int, budget: Double, interval: UInt64,
        spread: UInt64, cap: Int, quick: Bool
    ) {
        self.scenario = scenario
        self.impl = impl
        self.keys = keys
        self.threads = threads
        self.ops = ops
        self.budget = budget
        self.interval = interval
        self.spread = spread
        self.cap = cap
        self.quick = quick
    }
}

/// The generated workload of a case: keys and a random key order, made by the
/// C helpers so every implementation sees the same sequence.
final class Workload: @unchecked Sendable {
    let keys: UnsafeMutablePointer<UInt64>
    let order: UnsafeMutablePointer<UInt32>
    let n: Int
    let ops: Int

    init(keys n: Int, ops: Int) {
        self.n = n
        self.ops = ops
        keys = cb_make_keys(n)
        order = cb_make_order(n, ops, 0x5EED_0000 &+ UInt64(n))
    }

    deinit {
        free(keys)
        free(order)
    }

    @inline(__always) func key(_ i: Int) -> UInt64 { keys[i] }
    @inline(__always) func orderedKey(_ i: Int) -> UInt64 { keys[Int(order[i])] }

    func cParams(_ p: CaseParams) -> cb_params_t {
        var c = cb_params_t()
        c.keys = n
        c.ops = ops
        c.budget_s = p.budget
        c.threads = Int32(p.threads)
        c.interval_ns = p.interval
        c.spread_ns = p.spread
        c.cap = p.cap
        c.key = UnsafePointer(keys)
        c.order = UnsafePointer(order)
        return c
    }
}

/// What a case measured (the Swift mirror of `cb_result_t`).
struct Measured {
    var ops = 0
    var nsPerOp: Double?
    var cpuNsPerOp: Double?
    var bytesPerKey: Double?
    var idleBytesPerKey: Double?
    var peakRSS: Double?
    var refused: Int?
    var early: Int?
    var admitted: Int?
    var lateness: [UInt64]?
    var note: String?

    init() {}

    init(_ r: cb_result_t) {
        ops = Int(r.ops)
        nsPerOp = r.ns_per_op >= 0 ? r.ns_per_op : nil
        cpuNsPerOp = r.cpu_ns_per_op >= 0 ? r.cpu_ns_per_op : nil
        bytesPerKey = r.bytes_per_key != -1 ? r.bytes_per_key : nil
        idleBytesPerKey = r.idle_bytes_per_key != -1 ? r.idle_bytes_per_key : nil
        peakRSS = r.peak_rss_bytes >= 0 ? r.peak_rss_bytes : nil
        refused = Int(r.refused)
        early = Int(r.early)
        admitted = Int(r.admitted)
        if let v = r.lateness_ns {
            lateness = Array(UnsafeBufferPointer(start: v, count: r.lateness_n))
        }
    }

    static func rate(ops: Int, wall: UInt64, cpu: UInt64) -> Measured {
        var m = Measured()
        m.ops = ops
        m.nsPerOp = ops > 0 ? Double(wall) / Double(ops) : nil
        m.cpuNsPerOp = ops > 0 ? Double(cpu) / Double(ops) : nil
        return m
    }
}

/// The single serial consumer every implementation delivers to: it folds each
/// value into a checksum, counts deliveries and, for lateness, records the
/// delivery time minus the deadline on CLOCK_MONOTONIC.
final class Consumer: @unchecked Sendable {
    // Touched only by the one delivering context at a time.
    var sum: UInt64 = 0
    private var late: UnsafeMutablePointer<UInt64>?
    private var lateCount = 0
    private var lateCapacity = 0
    var early = 0
    // Read by the driver.
    let delivered = Atomic<Int>(0)
    let done = DispatchSemaphore(value: 0)
    let target: Int

    init(target: Int, recordLateness: Bool = false) {
        self.target = target
        if recordLateness {
            late = .allocate(capacity: max(target, 1))
            lateCapacity = target
        }
    }

    deinit { late?.deallocate() }

    @inline(__always)
    func consume(_ value: Int) {
        sum &+= UInt64(truncatingIfNeeded: value) &+ 1
    }

    /// A delivery of a value that was due at `deadline` (ns, CLOCK_MONOTONIC).
    @inline(__always)
    func deliver(_ value: Int, deadline: UInt64) {
        if let late {
            let now = cb_now()
            if now < deadline {
                early += 1
            } else if lateCount < lateCapacity {
                late[lateCount] = now - deadline
                lateCount += 1
            }
        }
        consume(value)
        // One delivering context at a time (a loop's thread, a serial queue,
        // the thread advancing a manual clock): a load and a store count the
        // delivery, no locked instruction, as the C implementations count.
        let n = delivered.load(ordering: .relaxed) &+ 1
        delivered.store(n, ordering: .releasing)
        if n == target { done.signal() }
    }

    /// Waits until `target` deliveries happened (or the timeout passed).
    func waitAll(timeout seconds: Double) -> Bool {
        if delivered.load(ordering: .acquiring) >= target { return true }
        return done.wait(timeout: .now() + seconds) == .success
    }

    var samples: [UInt64] {
        guard let late else { return [] }
        return Array(UnsafeBufferPointer(start: late, count: lateCount))
    }
}

/// Sleeps in 10 ms steps until the process stops burning CPU (the Dispatch
/// manager thread is done), at most `limit` seconds.
func waitUntilQuiet(limit: Double) {
    let end = cb_now() + UInt64(limit * 1e9)
    var last = cb_process_cpu()
    while cb_now() < end {
        cb_sleep_until(cb_now() + 10 * ms)
        let c = cb_process_cpu()
        if c - last < 200_000 { return }  // under 2 % of one core
        last = c
    }
}

/// Starts `count` threads running `body(index)` after a common start signal;
/// returns the wall time from the signal until all returned, and the process
/// CPU time over the same span.
func runThreads(
    _ count: Int, budget: Double, _ body: @escaping @Sendable (Int, borrowing Atomic<Bool>) -> Int
) -> (ops: Int, wall: UInt64, cpu: UInt64) {
    final class Shared: @unchecked Sendable {
        let stop = Atomic<Bool>(false)
        let go = Atomic<Bool>(false)
        let ready = Atomic<Int>(0)
        let ops: UnsafeMutablePointer<Int>
        let n: Int
        init(_ n: Int) {
            self.n = n
            ops = .allocate(capacity: n)
            ops.initialize(repeating: 0, count: n)
        }
        deinit { ops.deallocate() }
        var total: Int { (0..<n).reduce(0) { $0 + ops[$1] } }
    }
    let shared = Shared(count)
    let group = DispatchGroup()
    var threads: [pthread_t] = []
    final class Box: @unchecked Sendable {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }
    for t in 0..<count {
        group.enter()
        let box = Box {
            shared.ready.wrappingAdd(1, ordering: .relaxed)
            while !shared.go.load(ordering: .acquiring) {}
            shared.ops[t] = body(t, shared.stop)
            group.leave()
        }
        var th = pthread_t()
        let rc = pthread_create(
            &th, nil,
            { arg in
                let box = Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue()
                box.run()
                return nil
            }, Unmanaged.passRetained(box).toOpaque())
        precondition(rc == 0, "pthread_create")
        threads.append(th)
    }
    while shared.ready.load(ordering: .acquiring) < count { cb_sleep_until(cb_now() + 100_000) }
    let c0 = cb_process_cpu()
    let t0 = cb_now()
    shared.go.store(true, ordering: .releasing)
    cb_sleep_until(t0 + UInt64(budget * 1e9))
    shared.stop.store(true, ordering: .relaxed)
    group.wait()
    let wall = cb_now() - t0
    let cpu = cb_process_cpu() - c0
    for th in threads { pthread_join(th, nil) }
    return (shared.total, wall, cpu)
}
