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
    /// A slot: its header, then the entry, which is initialized only while
    /// the slot is held. A held slot has an odd generation (a free slot an
    /// even one), and tokens carry the generation of their slot: a token
    /// whose generation matches its slot's is held, with no separate
    /// occupancy flag to read, write or clear (an `Optional` entry cost a
    /// tag write and a `take` on every insert and remove).
    @usableFromInline
    struct Slot {
        @usableFromInline var generation: UInt32
        @usableFromInline var nextFree: Int32
        @usableFromInline var entry: (key: Key, value: Value)

        @inlinable
        init(generation: UInt32, nextFree: Int32, entry: (key: Key, value: Value)) {
            self.generation = generation
            self.nextFree = nextFree
            self.entry = entry
        }
    }

    /// The table's bookkeeping, at a fixed address: a manual engine's event
    /// callback frees the slots of trivial values through it
    /// (``SlotTableHeader/releaseTrivial(_:)``).
    @usableFromInline let header: UnsafeMutablePointer<SlotTableHeader>

    /// `capacity` slots, of which the first `used` have a header (held or free).
    @inlinable
    var base: UnsafeMutablePointer<Slot> {
        get { header.pointee.base.assumingMemoryBound(to: Slot.self) }
        nonmutating set { header.pointee.base = UnsafeMutableRawPointer(newValue) }
    }
    @inlinable
    var capacity: Int {
        get { header.pointee.capacity }
        nonmutating set { header.pointee.capacity = newValue }
    }
    /// Slots ever handed out (their header initialized); the others are raw memory.
    @inlinable
    var used: Int {
        get { header.pointee.used }
        nonmutating set { header.pointee.used = newValue }
    }
    @inlinable
    var freeHead: Int32 {
        get { header.pointee.freeHead }
        nonmutating set { header.pointee.freeHead = newValue }
    }
    /// Values held.
    @inlinable
    var count: Int {
        get { header.pointee.count }
        nonmutating set { header.pointee.count = newValue }
    }

    @inlinable
    init() {
        assert(
            MemoryLayout<Slot>.offset(of: \Slot.entry) == Swift.max(8, MemoryLayout<(key: Key, value: Value)>.alignment)
        )
        header = .allocate(capacity: 1)
        header.initialize(
            to: SlotTableHeader(
                base: UnsafeMutableRawPointer(UnsafeMutablePointer<Slot>.allocate(capacity: 16)), capacity: 16, used: 0,
                freeHead: -1, count: 0, stride: MemoryLayout<Slot>.stride))
    }

    /// Whether the keys and values are trivially copyable: releasing one is
    /// freeing its slot, which ``SlotTableHeader/releaseTrivial(_:)`` does
    /// without knowing their types.
    @inlinable
    static var isTrivial: Bool { _isPOD(Key.self) && _isPOD(Value.self) }

    @inlinable
    deinit {
        if !_isPOD(Key.self) || !_isPOD(Value.self) {
            for i in 0..<used where base[i].generation & 1 == 1 { Self.entry(base + i).deinitialize(count: 1) }
        }
        base.deallocate()  // the headers are trivial
        header.deallocate()  // trivial
    }

    /// The entry of a slot (initialized only while the slot is held).
    @inlinable @inline(__always)
    static func entry(_ slot: UnsafeMutablePointer<Slot>) -> UnsafeMutablePointer<(key: Key, value: Value)> {
        // Declaration order: the entry follows the 8-byte header, at its own alignment.
        UnsafeMutableRawPointer(slot).advanced(by: Swift.max(8, MemoryLayout<(key: Key, value: Value)>.alignment))
            .assumingMemoryBound(to: (key: Key, value: Value).self)
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
            let generation = slot.pointee.generation &+ 1  // odd: held
            slot.pointee.generation = generation
            Self.entry(slot).initialize(to: (key, value))
            return UInt64(generation) << 32 | UInt64(index)
        }
        if used == capacity { grow() }
        let index = used
        (base + index).initialize(to: Slot(generation: 1, nextFree: -1, entry: (key, value)))
        used = index + 1
        return 1 << 32 | UInt64(index)
    }

    /// Doubles the buffer (slots move; tokens are indices, so they stay valid).
    @usableFromInline
    mutating func grow() {
        precondition(capacity < Int(Int32.max), "too many values held at once")
        let newCapacity = Swift.min(capacity * 2, Int(Int32.max))
        let newBase = UnsafeMutablePointer<Slot>.allocate(capacity: newCapacity)
        if _isBitwiseTakable(Slot.self) {
            UnsafeMutableRawPointer(newBase).copyMemory(from: base, byteCount: used * MemoryLayout<Slot>.stride)
        } else {
            for i in 0..<used {
                let from = base + i, to = newBase + i
                to.pointee.generation = from.pointee.generation
                to.pointee.nextFree = from.pointee.nextFree
                if from.pointee.generation & 1 == 1 { Self.entry(to).moveInitialize(from: Self.entry(from), count: 1) }
            }
        }
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// The slot of a held token, or `nil` for a stale or unknown token.
    @inlinable @inline(__always)
    func slot(of token: UInt64) -> UnsafeMutablePointer<Slot>? {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        guard index < used else { return nil }
        let slot = base + index
        // Only odd generations are handed out, and a slot has one only while held.
        guard UInt64(slot.pointee.generation) == token >> 32, token & (1 << 32) != 0 else { return nil }
        return slot
    }

    /// Whether a token is held.
    @inlinable
    func contains(_ token: UInt64) -> Bool {
        slot(of: token) != nil
    }

    /// Frees a held slot (its entry already moved out or deinitialized).
    @inlinable @inline(__always)
    mutating func free(_ slot: UnsafeMutablePointer<Slot>, index: Int) {
        slot.pointee.generation &+= 1  // even: free
        slot.pointee.nextFree = freeHead
        freeHead = Int32(truncatingIfNeeded: index)
        count &-= 1
    }

    /// Takes the key and value of a token out of the table and frees its slot.
    @inlinable @inline(__always)
    mutating func remove(_ token: UInt64) -> (key: Key, value: Value) {
        guard let slot = slot(of: token) else { staleToken() }
        let entry = Self.entry(slot).move()
        free(slot, index: Int(truncatingIfNeeded: token & 0xFFFF_FFFF))
        return entry
    }

    /// Releases the key and value of a token and frees its slot (nothing is
    /// read for keys and values that are trivially copyable).
    @inlinable @inline(__always)
    mutating func discard(_ token: UInt64) {
        guard let slot = slot(of: token) else { staleToken() }
        Self.entry(slot).deinitialize(count: 1)
        free(slot, index: Int(truncatingIfNeeded: token & 0xFFFF_FFFF))
    }

    /// Replaces the value of a token with `transform(value)`.
    @inlinable
    mutating func update(_ token: UInt64, _ transform: (Value) -> Value) {
        guard let slot = slot(of: token) else { staleToken() }
        let entry = Self.entry(slot)
        // Moved out and back: `transform` gets the only reference to the value.
        let old = entry.move()
        entry.initialize(to: (old.key, transform(old.value)))
    }

}

/// The bookkeeping of a ``SlotTable``, at a fixed address.
@usableFromInline
struct SlotTableHeader {
    @usableFromInline var base: UnsafeMutableRawPointer
    @usableFromInline var capacity: Int
    @usableFromInline var used: Int
    @usableFromInline var freeHead: Int32
    @usableFromInline var count: Int
    /// `MemoryLayout<Slot>.stride`.
    @usableFromInline let stride: Int

    @inlinable
    init(base: UnsafeMutableRawPointer, capacity: Int, used: Int, freeHead: Int32, count: Int, stride: Int) {
        self.base = base
        self.capacity = capacity
        self.used = used
        self.freeHead = freeHead
        self.count = count
        self.stride = stride
    }

    /// Frees the slot of a held token of a table whose keys and values are
    /// trivially copyable (``SlotTable/isTrivial``: nothing to release), what
    /// ``SlotTable/discard(_:)`` does for them, without knowing their types.
    /// Returns `false`, changing nothing, for a token that is not held.
    @inlinable @inline(__always)
    mutating func releaseTrivial(_ token: UInt64) -> Bool {
        let index = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
        guard index < used else { return false }
        let slot = base + index &* stride
        // The slot's header: generation (odd while held), then nextFree.
        let generation = slot.load(as: UInt32.self)
        guard UInt64(generation) == token >> 32, token & (1 << 32) != 0 else { return false }
        slot.storeBytes(of: generation &+ 1, as: UInt32.self)
        slot.storeBytes(of: freeHead, toByteOffset: 4, as: Int32.self)
        freeHead = Int32(truncatingIfNeeded: index)
        count &-= 1
        return true
    }
}

/// The trap for a token the slot table does not hold (out of line: cold).
@usableFromInline
func staleToken() -> Never {
    preconditionFailure("Sluice: the core reported a token that is not held (stale or duplicated)")
}

/// A first-in first-out queue on a growable ring buffer: appending and
/// removing never allocate once it has grown to its working size.
/// Bulk operations (reserveRoom, appendEach, drain): LimiterStorage+Fire.swift.
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
