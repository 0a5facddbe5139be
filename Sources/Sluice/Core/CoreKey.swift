import CSluice

/// A Swift value that the C core can use as a key.
///
/// Conforming types lend the core a `sluice_key_t` for the duration of one
/// call; the core copies the bytes if the key becomes live. Byte keys and
/// integer keys never meet: `"A"` and `UInt64(0x41)` are different keys, and
/// so are the empty key and a key of one zero byte.
protocol CoreKeyConvertible {
    /// Calls `body` with a C view of the key, valid only during the call.
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R
}

extension UInt64: CoreKeyConvertible {
    /// An integer key (the core's allocation-free fast path).
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        body(sluice_key_u64(self))
    }
}

extension String: CoreKeyConvertible {
    /// A byte key: the string's UTF-8, without a terminator (so embedded
    /// NULs are part of the key). Native strings are lent in place; others
    /// are made contiguous once.
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        if let result = utf8.withContiguousStorageIfAvailable({ utf8 in
            body(sluice_key_bytes(utf8.baseAddress, utf8.count))
        }) {
            return result
        }
        var copy = self
        return copy.withUTF8 { utf8 in body(sluice_key_bytes(utf8.baseAddress, utf8.count)) }
    }
}

extension Substring: CoreKeyConvertible {
    /// A byte key: the substring's UTF-8 (see `String.withCoreKey(_:)`).
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        if let result = utf8.withContiguousStorageIfAvailable({ utf8 in
            body(sluice_key_bytes(utf8.baseAddress, utf8.count))
        }) {
            return result
        }
        var copy = self
        return copy.withUTF8 { utf8 in body(sluice_key_bytes(utf8.baseAddress, utf8.count)) }
    }
}

extension Array: CoreKeyConvertible where Element == UInt8 {
    /// A byte key: exactly these bytes.
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        withUnsafeBytes { bytes in body(sluice_key_bytes(bytes.baseAddress, bytes.count)) }
    }
}

/// A key copied out of the core, for example from an event: either bytes or
/// an integer. It is itself usable as a key.
enum CoreKey: Hashable, Sendable, CoreKeyConvertible, CustomStringConvertible {
    case bytes([UInt8])
    case u64(UInt64)

    /// Copies a key the core lends (the bytes of an event key are valid
    /// only during the callback).
    init(_ key: sluice_key_t) {
        if key.kind == SLUICE_KEY_U64 {
            self = .u64(key.u64)
        } else if let base = key.bytes, key.len > 0 {
            self = .bytes(Array(UnsafeRawBufferPointer(start: base, count: key.len)))
        } else {
            self = .bytes([])
        }
    }

    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        switch self {
        case let .bytes(bytes): bytes.withCoreKey(body)
        case let .u64(value): value.withCoreKey(body)
        }
    }

    var description: String {
        switch self {
        case let .bytes(bytes): "bytes(\(String(decoding: bytes, as: UTF8.self).debugDescription))"
        case let .u64(value): "u64(\(value))"
        }
    }
}
