import CSluice

/// A key copied out of the core, for example from an event: either bytes or
/// an integer. It is itself usable as a key (for tests and tools that do not
/// know the key's Swift type).
@usableFromInline
enum CoreKey: Hashable, Sendable, LimiterKey, CustomStringConvertible {
    case bytes([UInt8])
    case u64(UInt64)

    /// Copies a key the core lends (the bytes of an event key are valid
    /// only during the callback).
    @usableFromInline
    init(_ key: sluice_key_t) {
        if key.kind == SLUICE_KEY_U64 {
            self = .u64(key.u64)
        } else if let base = key.bytes, key.len > 0 {
            self = .bytes(Array(UnsafeRawBufferPointer(start: base, count: key.len)))
        } else {
            self = .bytes([])
        }
    }

    /// Copies a key's identity.
    init(_ identity: LimiterKeyIdentity) {
        switch identity {
        case let .integer(value): self = .u64(value)
        case let .bytes(buffer): self = .bytes(Array(buffer))
        }
    }

    /// Copies the identity of a key.
    @usableFromInline
    init(key: some LimiterKey) {
        self = key.withLimiterKeyIdentity { CoreKey($0) }
    }

    @usableFromInline
    func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        switch self {
        case let .bytes(bytes): bytes.withLimiterKeyIdentity(body)
        case let .u64(value): body(.integer(value))
        }
    }

    @usableFromInline
    var description: String {
        switch self {
        case let .bytes(bytes): "bytes(\(String(decoding: bytes, as: UTF8.self).debugDescription))"
        case let .u64(value): "u64(\(value))"
        }
    }
}
