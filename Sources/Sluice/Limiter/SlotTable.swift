/// The Swift side of the token contract: values stay in Swift, the C core
/// only sees 64-bit tokens.
///
/// A token is `generation << 32 | index`. The slot at `index` holds the key
/// and the value until the core reports the token's fate; its generation
/// changes every time the slot is freed, so a stale or duplicated token from
/// the core is caught (a precondition failure: a bug in Sluice) instead of
/// releasing someone else's value. Freed slots are reused (a free list), so
/// in steady state inserting and removing never allocates.
///
/// The slots live in a manually managed buffer rather than an `Array`: the
/// table is on every submit's path twice (insert, then remove of the value
/// the submit superseded), and an array's uniqueness check and copy-on-write
/// machinery were a measurable share of a submit. The table is therefore
/// noncopyable (one owner, the limiter's storage), and frees its buffer,
/// releasing whatever it still holds, in `deinit`.
///
/// Not thread-safe: the owning limiter guards it with its lock.
@usableFromInline
struct SlotTable<Key, Value>: ~Copyable {
    @usableFromInline
    struct Slot {
        @usableFromInline var generation: UInt32
        @usableFromInline var nextFree: Int32
        @usableFromInline var entry: (key: Key, value: Value)?

        @inlinable
        init(generation: UInt32, nextFree: Int32, entry: (key: Key, value: Value)?) {
            self.generation = generation
            self.nextFree = nextFree
            self.entry = entry
        }
    }

    /// `capacity` slots, of which the first `used` are initialized.
    @usableFromInline var base: UnsafeMutablePointer<Slot>
    @usableFromInline var capacity: Int
    /// Slots ever handed out (initialized); the others are raw memory.
    @usableFromInline var used = 0
    @usableFromInline var freeHead: Int32 = -1
    /// Values held.
    @usableFromInline var count = 0

    @inlinable
    init() {
        capacity = 16
        base = .allocate(capacity: capacity)
    }

    @inlinable
    deinit {
        base.deinitialize(count: used)
        base.deallocate()
    }

    /// Stores a value and returns its token.
    ///
    /// - Complexity: O(1) amortized; no allocation once the table has grown
    ///   to the number of values held at once.
    @inlinable @inline(__always)
    mutating func insert(key: Key, value: Value) -> UInt64 {
        count &+= 1
        if freeHead >= 0 {
            let index = Int(truncatingIfNeeded: freeHead)
            let slot = base + index
            freeHead = slot.pointee.nextFree
            slot.pointee.nextFree = -1
            slot.pointee.entry = (key, value)
            return UInt64(slot.pointee.generation) << 32 | UInt64(index)
        }
        if used == capacity { grow() }
        let index = used
        (base + index).initialize(to: Slot(generation: 0, nextFree: -1, entry: (key, value)))
        used = index + 1
        return UInt64(index)
    }

    /// Doubles the buffer (slots move; tokens are indices, so they stay valid).
    @usableFromInline
    mutating func grow() {
        precondition(capacity < Int(Int32.max), "too many values held at once")
        let newCapacity = Swift.min(capacity * 2, Int(Int32.max))
        let newBase = UnsafeMutablePointer<Slot>.allocate(capacity: newCapacity)
        newBase.moveInitialize(from: base, count: used)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// The slot of a held token, or `nil` for a stale or unknown token.
    @inlinable
    func slot(of token: UInt64) -> UnsafeMutablePointer<Slot>? {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        guard index < used else { return nil }
        let slot = base + index
        guard UInt64(slot.pointee.generation) == token >> 32, slot.pointee.entry != nil else { return nil }
        return slot
    }

    /// Whether a token is held.
    @inlinable
    func contains(_ token: UInt64) -> Bool {
        slot(of: token) != nil
    }

    /// Takes the key and value of a token out of the table and frees its slot.
    @inlinable
    mutating func remove(_ token: UInt64) -> (key: Key, value: Value) {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        guard index < used else { staleToken() }
        let slot = base + index
        guard UInt64(slot.pointee.generation) == token >> 32, let entry = slot.pointee.entry.take() else {
            staleToken()
        }
        slot.pointee.generation &+= 1
        slot.pointee.nextFree = freeHead
        freeHead = Int32(truncatingIfNeeded: index)
        count &-= 1
        return entry
    }

    /// Replaces the value of a token with `transform(value)`.
    @inlinable
    mutating func update(_ token: UInt64, _ transform: (Value) -> Value) {
        guard let slot = slot(of: token) else { staleToken() }
        let entry = slot.pointee.entry.take()!
        slot.pointee.entry = (entry.key, transform(entry.value))
    }

}

/// The trap for a token the slot table does not hold (out of line: cold).
@usableFromInline
func staleToken() -> Never {
    preconditionFailure("Sluice: the core reported a token that is not held (stale or duplicated)")
}

/// A first-in first-out queue on a growable ring buffer: appending and
/// removing never allocate once it has grown to its working size.
@usableFromInline
struct RingBuffer<Element> {
    @usableFromInline var storage: [Element?] = []
    @usableFromInline var head = 0
    @usableFromInline var count = 0

    @inlinable
    init() {}

    @inlinable
    var isEmpty: Bool { count == 0 }

    @inlinable
    mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        var tail = head + count
        if tail >= storage.count { tail -= storage.count }
        storage[tail] = element
        count += 1
    }

    @inlinable
    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        head += 1
        if head == storage.count { head = 0 }
        count -= 1
        return element
    }

    @usableFromInline
    mutating func grow() {
        let newCapacity = Swift.max(8, storage.count * 2)
        var newStorage = [Element?](repeating: nil, count: newCapacity)
        for i in 0..<count {
            var index = head + i
            if index >= storage.count { index -= storage.count }
            newStorage[i] = storage[index].take()
        }
        storage = newStorage
        head = 0
    }
}
