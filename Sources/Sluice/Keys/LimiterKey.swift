import CSluice

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The exact identity of a key, as a limiter sees it: a 64-bit integer or a
/// string of bytes.
///
/// A limiter compares identities exactly — two keys share state only when
/// their identities are equal — and an integer identity never equals a byte
/// identity, even when the bytes agree. Byte identities are 0 to 1024 bytes
/// long (longer ones are refused with ``LimiterError/keyTooLong``); the empty
/// identity and one zero byte are different keys.
///
/// An identity is lent for the duration of one call (see
/// ``LimiterKey/withLimiterKeyIdentity(_:)``): the limiter copies the bytes
/// if it keeps the key.
public enum LimiterKeyIdentity {
    /// An integer: the allocation-free fast path of the core.
    case integer(UInt64)
    /// A string of bytes, valid only during the call that lends it.
    case bytes(UnsafeRawBufferPointer)
}

/// A type whose values can be the keys of a ``Limiter``.
///
/// Conforming types lend their exact identity for the duration of one call.
/// Two keys are the same key exactly when their identities are equal: no
/// hashing shortcut ever merges two keys, so a conforming type must give
/// different values different identities, and values it considers equal the
/// same identity (as `String` does for canonically equivalent spellings).
///
/// Integers, `String`, `Substring`, `UUID`, `[UInt8]` and `ArraySlice<UInt8>`
/// conform already; ``CompositeKey`` combines several keys into one. A `RawRepresentable` type whose raw value is a key only
/// needs to declare the conformance:
///
/// ```swift
/// enum Channel: String, LimiterKey { case email, sms }
/// ```
///
/// Any other type provides its identity itself, as an integer (cheapest) or
/// as bytes:
///
/// ```swift
/// struct TenantID: LimiterKey {
///     var rawValue: UInt64
///     func withLimiterKeyIdentity<R>(_ body: (LimiterKeyIdentity) -> R) -> R {
///         body(.integer(rawValue))
///     }
/// }
/// ```
///
/// Keys are stored by the limiter while they have work pending and handed
/// back to the delivery handler, so they must be `Sendable`.
public protocol LimiterKey: Sendable {
    /// Calls `body` with the key's exact identity.
    ///
    /// - Parameter body: receives the identity; a ``LimiterKeyIdentity/bytes(_:)``
    ///   buffer is valid only during this call.
    /// - Returns: what `body` returns.
    func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result

    /// For Sluice's own use; do not implement. Whether every value of this
    /// type is lent as ``LimiterKeyIdentity/integer(_:)`` and can be rebuilt
    /// from that integer by ``_sluiceKey(integerIdentity:)`` (the built-in
    /// fixed-width integer types). A limiter of such keys and small
    /// trivially copyable values keeps no table of values: the core carries
    /// the value in its token and hands the key back with every event.
    /// The default is `false`.
    static var _sluiceIntegerIdentity: Bool { get }

    /// For Sluice's own use; do not implement. The key whose integer
    /// identity is `identity`, for a type whose ``_sluiceIntegerIdentity``
    /// is `true` (the default traps).
    ///
    /// - Parameter identity: an identity this type lent.
    /// - Returns: the key.
    static func _sluiceKey(integerIdentity identity: UInt64) -> Self
}

extension LimiterKey {
    /// Not an integer key that can be rebuilt from its identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { false }

    /// Traps: only types whose ``_sluiceIntegerIdentity`` is `true` are rebuilt.
    ///
    /// - Parameter identity: unused.
    /// - Returns: never.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self {
        preconditionFailure("Sluice: \(Self.self) is not rebuilt from an integer identity")
    }
}

extension LimiterKey where Self: RawRepresentable, RawValue: LimiterKey {
    /// The identity of the raw value.
    ///
    /// - Parameter body: receives the identity of `rawValue`.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        rawValue.withLimiterKeyIdentity(body)
    }
}

// MARK: - Integers

extension UInt64: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { identity }

    /// An integer identity: the value itself.
    ///
    /// - Parameter body: receives `.integer(self)`.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(self))
    }
}

extension Int: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self {
        Int(bitPattern: UInt(truncatingIfNeeded: identity))
    }

    /// An integer identity: the value's bit pattern.
    ///
    /// - Parameter body: receives `.integer(UInt64(bitPattern:))` of the value.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(UInt(bitPattern: self))))
    }
}

extension UInt: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { UInt(truncatingIfNeeded: identity) }

    /// An integer identity: the value itself.
    ///
    /// - Parameter body: receives `.integer` of the value.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(self)))
    }
}

extension Int64: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { Int64(bitPattern: identity) }

    /// An integer identity: the value's bit pattern.
    ///
    /// - Parameter body: receives `.integer(UInt64(bitPattern: self))`.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(bitPattern: self)))
    }
}

extension Int32: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self {
        Int32(bitPattern: UInt32(truncatingIfNeeded: identity))
    }

    /// An integer identity: the value's 32-bit pattern, zero-extended.
    ///
    /// - Parameter body: receives `.integer` of the bit pattern.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(UInt32(bitPattern: self))))
    }
}

extension UInt32: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { UInt32(truncatingIfNeeded: identity) }

    /// An integer identity: the value itself.
    ///
    /// - Parameter body: receives `.integer` of the value.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(self)))
    }
}

extension Int16: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self {
        Int16(bitPattern: UInt16(truncatingIfNeeded: identity))
    }

    /// An integer identity: the value's 16-bit pattern, zero-extended.
    ///
    /// - Parameter body: receives `.integer` of the bit pattern.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(UInt16(bitPattern: self))))
    }
}

extension UInt16: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { UInt16(truncatingIfNeeded: identity) }

    /// An integer identity: the value itself.
    ///
    /// - Parameter body: receives `.integer` of the value.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(self)))
    }
}

extension Int8: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self {
        Int8(bitPattern: UInt8(truncatingIfNeeded: identity))
    }

    /// An integer identity: the value's 8-bit pattern, zero-extended.
    ///
    /// - Parameter body: receives `.integer` of the bit pattern.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(UInt8(bitPattern: self))))
    }
}

extension UInt8: LimiterKey {
    /// Rebuilt from its integer identity.
    @inlinable
    public static var _sluiceIntegerIdentity: Bool { true }

    /// The value whose identity is `identity`.
    ///
    /// - Parameter identity: an identity lent by a value of this type.
    /// - Returns: that value.
    @inlinable
    public static func _sluiceKey(integerIdentity identity: UInt64) -> Self { UInt8(truncatingIfNeeded: identity) }

    /// An integer identity: the value itself.
    ///
    /// - Parameter body: receives `.integer` of the value.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        body(.integer(UInt64(self)))
    }
}

// MARK: - Byte strings

extension String: LimiterKey {
    /// A byte identity: the UTF-8 of the string in Unicode Normalization
    /// Form C, without a terminator (embedded NULs are part of the key).
    ///
    /// Two strings are the same key exactly when Swift says they are equal:
    /// `"caf\u{E9}"` (precomposed) and `"cafe\u{301}"` (decomposed) are one
    /// key, so a client cannot get a second quota by sending the other
    /// spelling. ASCII strings, already in normal form, are lent in place
    /// without any work but a scan; other strings are normalized into a
    /// temporary buffer for the call. The 1024-byte limit applies to the
    /// normalized UTF-8.
    ///
    /// - Parameter body: receives `.bytes` of the normalized UTF-8.
    /// - Returns: what `body` returns.
    @inlinable
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        // `withUTF8` lends a native string's storage in place (a bridged
        // string without contiguous UTF-8 is made contiguous once, in the
        // copy). Not `utf8.withContiguousStorageIfAvailable`: its `Result?`
        // made this unspecialized function look up `Optional<Result>`'s
        // metadata on every call (~900 instructions). Inlinable, with the
        // ASCII scan: specialized in the caller, no closure layers.
        var copy = self
        return copy.withUTF8 { utf8 in
            isASCII(utf8) ? body(.bytes(UnsafeRawBufferPointer(utf8))) : withNormalizedUTF8(self, body)
        }
    }
}

extension Substring: LimiterKey {
    /// A byte identity: the substring's UTF-8 in Normalization Form C, the
    /// same key as the equal `String` (see `String`'s conformance).
    ///
    /// - Parameter body: receives `.bytes` of the normalized UTF-8.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        // As `String`'s: the base's storage lent in place (no `Result?`).
        var copy = self
        return copy.withUTF8 { utf8 in
            isASCII(utf8) ? body(.bytes(UnsafeRawBufferPointer(utf8))) : String(self).withLimiterKeyIdentity(body)
        }
    }
}

/// Whether every byte is below 0x80 (ASCII text is its own NFC form),
/// eight bytes at a time.
@inlinable
func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    let count = bytes.count
    var i = 0
    var high: UInt64 = 0
    while i + 8 <= count {
        high |= UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)
        i += 8
    }
    while i < count {
        high |= UInt64(base[i])
        i += 1
    }
    return high & 0x8080_8080_8080_8080 == 0
}

/// Calls `body` with the NFC form of `string`'s UTF-8: the form Swift's own
/// `==` and hashing compare, so canonically equivalent strings (precomposed
/// or decomposed accents, Hangul syllables or jamo, combining marks in any
/// canonical order) lend identical bytes.
///
/// NFC grows UTF-8 by at most three times; the normalized bytes are written
/// into a temporary buffer of that size (on the stack when small).
@usableFromInline
func withNormalizedUTF8<Result>(_ string: String, _ body: (LimiterKeyIdentity) -> Result) -> Result {
    let capacity = string.utf8.count * 3
    // Keys longer than the core's limit are refused anyway; normalize them
    // into an array rather than a large temporary buffer.
    guard capacity <= 3 * 1024 else {
        return string._nfcCodeUnits.withUnsafeBytes { body(.bytes($0)) }
    }
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
        var count = 0
        string._withNFCCodeUnits { byte in
            // Cannot overflow (NFC expands UTF-8 at most 3x); checked anyway.
            precondition(count < capacity, "Sluice: NFC expanded a key beyond three times its UTF-8")
            buffer[count] = byte
            count += 1
        }
        return body(.bytes(UnsafeRawBufferPointer(start: buffer.baseAddress, count: count)))
    }
}

extension Array: LimiterKey where Element == UInt8 {
    /// A byte identity: exactly these bytes.
    ///
    /// - Parameter body: receives `.bytes` of the array.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        withUnsafeBytes { body(.bytes($0)) }
    }
}

extension ArraySlice: LimiterKey where Element == UInt8 {
    /// A byte identity: exactly these bytes (the same key as the equal `[UInt8]`).
    ///
    /// - Parameter body: receives `.bytes` of the slice.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        withUnsafeBytes { body(.bytes($0)) }
    }
}

extension UUID: LimiterKey {
    /// A byte identity: the 16 bytes of the UUID (the same key as a `[UInt8]`
    /// of those bytes, never the same as a `String` of its text).
    ///
    /// - Parameter body: receives `.bytes` of the 16 bytes.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        withUnsafeBytes(of: uuid) { body(.bytes($0)) }
    }
}

// MARK: - The core's view

extension LimiterKeyIdentity {
    /// The key as the C core takes it (the bytes are not copied).
    @inlinable
    var cKey: sluice_key_t {
        switch self {
        case let .integer(value): sluice_key_u64(value)
        case let .bytes(buffer): sluice_key_bytes(buffer.baseAddress, buffer.count)
        }
    }
}

extension LimiterKey {
    /// Calls `body` with the key as the C core takes it, valid only during the call.
    @inlinable
    func withCoreKey<R>(_ body: (sluice_key_t) -> R) -> R {
        withLimiterKeyIdentity { body($0.cKey) }
    }
}
