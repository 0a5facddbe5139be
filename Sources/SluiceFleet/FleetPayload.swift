import Foundation

/// A value a ``FleetTimedLimiter`` can keep in Redis: it turns into bytes
/// and back.
///
/// `String` (its UTF-8 bytes) and `[UInt8]` (as they are) conform, so a C
/// process of the same fleet reads and writes the same values. Any `Codable`
/// type conforms by declaring it, and is written as JSON:
///
/// ```swift
/// struct Edit: Codable, FleetPayload {
///     var document: String
///     var revision: Int
/// }
/// ```
public protocol FleetPayload: Sendable {
    /// The bytes stored in Redis.
    ///
    /// - Throws: when the value cannot be written (an encoder's error).
    func fleetBytes() throws -> [UInt8]

    /// The value the bytes hold.
    ///
    /// - Parameter bytes: what ``fleetBytes()`` wrote (in this process or
    ///   another one).
    /// - Throws: when the bytes are not such a value.
    init(fleetBytes bytes: [UInt8]) throws
}

extension FleetPayload where Self: Codable {
    /// The value as JSON.
    public func fleetBytes() throws -> [UInt8] {
        Array(try JSONEncoder().encode(self))
    }

    /// The value from JSON.
    ///
    /// - Parameter bytes: JSON written by ``fleetBytes()``.
    public init(fleetBytes bytes: [UInt8]) throws {
        self = try JSONDecoder().decode(Self.self, from: Data(bytes))
    }
}

extension String: FleetPayload {
    /// The string's UTF-8 bytes.
    public func fleetBytes() -> [UInt8] { Array(utf8) }

    /// The string of UTF-8 bytes (invalid sequences become U+FFFD).
    ///
    /// - Parameter bytes: UTF-8 bytes.
    public init(fleetBytes bytes: [UInt8]) {
        self = String(decoding: bytes, as: UTF8.self)
    }
}

extension Array: FleetPayload where Element == UInt8 {
    /// The bytes themselves.
    public func fleetBytes() -> [UInt8] { self }

    /// The bytes themselves.
    ///
    /// - Parameter bytes: any bytes.
    public init(fleetBytes bytes: [UInt8]) {
        self = bytes
    }
}
