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
/// different values different identities.
///
/// Integers, `String`, `Substring`, `UUID`, `[UInt8]` and `ArraySlice<UInt8>`
/// conform already. A `RawRepresentable` type whose raw value is a key only
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
    /// A byte identity: the string's UTF-8, without a terminator (embedded
    /// NULs are part of the key). Strings are compared by their UTF-8, not by
    /// Unicode equivalence: `"é"` precomposed and decomposed are two keys.
    ///
    /// Native strings are lent in place; other strings are made contiguous once.
    ///
    /// - Parameter body: receives `.bytes` of the UTF-8.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        if let result = utf8.withContiguousStorageIfAvailable({ body(.bytes(UnsafeRawBufferPointer($0))) }) {
            return result
        }
        var copy = self
        return copy.withUTF8 { body(.bytes(UnsafeRawBufferPointer($0))) }
    }
}

extension Substring: LimiterKey {
    /// A byte identity: the substring's UTF-8 (the same key as the equal
    /// `String`).
    ///
    /// - Parameter body: receives `.bytes` of the UTF-8.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        if let result = utf8.withContiguousStorageIfAvailable({ body(.bytes(UnsafeRawBufferPointer($0))) }) {
            return result
        }
        var copy = self
        return copy.withUTF8 { body(.bytes(UnsafeRawBufferPointer($0))) }
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
