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
/// Not thread-safe: the owning limiter guards it with its lock.
@usableFromInline
struct SlotTable<Key, Value> {
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

    @usableFromInline var slots: [Slot] = []
    @usableFromInline var freeHead: Int32 = -1
    /// Values held.
    @usableFromInline var count = 0

    @inlinable
    init() {}

    /// Stores a value and returns its token.
    ///
    /// - Complexity: O(1) amortized; no allocation once the table has grown
    ///   to the number of values held at once.
    @inlinable
    mutating func insert(key: Key, value: Value) -> UInt64 {
        count &+= 1
        if freeHead >= 0 {
            let index = Int(freeHead)
            return slots.withUnsafeMutableBufferPointer { buffer in
                freeHead = buffer[index].nextFree
                buffer[index].nextFree = -1
                buffer[index].entry = (key, value)
                return UInt64(buffer[index].generation) << 32 | UInt64(index)
            }
        }
        precondition(slots.count < Int(Int32.max), "too many values held at once")
        slots.append(Slot(generation: 0, nextFree: -1, entry: (key, value)))
        return UInt64(slots.count - 1)
    }

    /// The index of a live token's slot; traps for a stale or unknown token.
    @inlinable
    func index(of token: UInt64) -> Int {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        precondition(
            index < slots.count && UInt64(slots[index].generation) == token >> 32 && slots[index].entry != nil,
            "Sluice: the core reported a token that is not held (stale or duplicated)")
        return index
    }

    /// Whether a token is held.
    @inlinable
    func contains(_ token: UInt64) -> Bool {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        return index < slots.count && UInt64(slots[index].generation) == token >> 32 && slots[index].entry != nil
    }

    /// Takes the key and value of a token out of the table and frees its slot.
    @inlinable
    mutating func remove(_ token: UInt64) -> (key: Key, value: Value) {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        let head = freeHead
        let entry: (key: Key, value: Value)? = slots.withUnsafeMutableBufferPointer { buffer in
            guard index < buffer.count, UInt64(buffer[index].generation) == token >> 32,
                  let entry = buffer[index].entry.take()
            else { return nil }
            buffer[index].generation &+= 1
            buffer[index].nextFree = head
            return entry
        }
        guard let entry else {
            preconditionFailure("Sluice: the core reported a token that is not held (stale or duplicated)")
        }
        freeHead = Int32(truncatingIfNeeded: index)
        count &-= 1
        return entry
    }

    /// Replaces the value of a token with `transform(value)`.
    @inlinable
    mutating func update(_ token: UInt64, _ transform: (Value) -> Value) {
        let index = index(of: token)
        let entry = slots[index].entry.take()!
        slots[index].entry = (entry.key, transform(entry.value))
    }

    /// Calls `body` with every held value and frees every slot (for teardown).
    mutating func removeAll(_ body: (Key, Value) -> Void) {
        for index in slots.indices {
            if let entry = slots[index].entry.take() {
                body(entry.key, entry.value)
            }
        }
        slots.removeAll()
        freeHead = -1
        count = 0
    }
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
