/// A key made of several keys, for example a tenant, a user and a route:
/// one limiter state per combination, without writing a byte encoding by
/// hand.
///
/// ```swift
/// let perRoute = try RateLimiter<CompositeKey>(limit: 10, per: .seconds(1))
/// if try perRoute.check(CompositeKey(request.apiKey, request.path)).isAdmitted { handle(request) }
/// ```
///
/// The parts are encoded one after the other, each with a tag that says
/// whether it is an integer or bytes and, for bytes, their length. So the
/// encoding is never ambiguous: `CompositeKey("ab", "c")`,
/// `CompositeKey("a", "bc")` and `CompositeKey("abc")` are three different
/// keys, and an integer part never equals a byte part. Two composite keys
/// are equal exactly when they have the same number of parts and each pair
/// of parts has equal identities (``LimiterKeyIdentity``): a `String` part is
/// compared as Swift compares strings, and `Int(7)` and `UInt8(7)` are the
/// same integer part.
///
/// The key's identity is its encoding, which a limiter takes up to 1024
/// bytes long (a longer key is refused with ``LimiterError/keyTooLong``): an
/// integer part takes 9 bytes, a byte part its length plus 2 or 3 bytes.
public struct CompositeKey: LimiterKey, Hashable, CustomStringConvertible {
    /// The encoded parts.
    private var encoding: [UInt8] = []
    /// How many parts were appended.
    public private(set) var count = 0

    private static let integerTag: UInt8 = 1
    private static let bytesTag: UInt8 = 2

    /// A key with no parts (append them with ``append(_:)``).
    public init() {}

    /// A key made of `parts`, in this order.
    ///
    /// - Parameter parts: the parts, any ``LimiterKey`` types.
    public init<each Part: LimiterKey>(_ parts: repeat each Part) {
        repeat append(each parts)
    }

    /// Adds a part at the end.
    ///
    /// - Parameter part: the part; its identity is copied.
    public mutating func append<Part: LimiterKey>(_ part: Part) {
        part.withLimiterKeyIdentity { identity in
            switch identity {
            case let .integer(value):
                encoding.append(Self.integerTag)
                withUnsafeBytes(of: value.littleEndian) { encoding.append(contentsOf: $0) }
            case let .bytes(bytes):
                encoding.append(Self.bytesTag)
                // The length in LEB128: 7 bits a byte, low bits first.
                var length = UInt(bytes.count)
                repeat {
                    let low = UInt8(length & 0x7f)
                    length >>= 7
                    encoding.append(length == 0 ? low : low | 0x80)
                } while length != 0
                encoding.append(contentsOf: bytes)
            }
        }
        count += 1
    }

    /// This key with one more part at the end.
    ///
    /// - Parameter part: the part.
    /// - Returns: the longer key.
    public func appending<Part: LimiterKey>(_ part: Part) -> CompositeKey {
        var copy = self
        copy.append(part)
        return copy
    }

    /// A byte identity: the encoding of the parts.
    ///
    /// - Parameter body: receives `.bytes` of the encoding.
    /// - Returns: what `body` returns.
    public func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
        encoding.withUnsafeBytes { body(.bytes($0)) }
    }

    /// The number of parts and encoded bytes, for example
    /// `CompositeKey(3 parts, 24 bytes)`.
    public var description: String {
        "CompositeKey(\(count) part\(count == 1 ? "" : "s"), \(encoding.count) bytes)"
    }

    /// Whether two keys have the same parts (identity by identity).
    public static func == (lhs: CompositeKey, rhs: CompositeKey) -> Bool {
        lhs.encoding == rhs.encoding
    }

    /// Hashes the encoding.
    ///
    /// - Parameter hasher: the hasher.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(encoding)
    }
}
