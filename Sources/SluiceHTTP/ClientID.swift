/// The one rule for a client id that a client sends in a header field (an
/// `X-Client-Id`, an API key), the same for every framework.
///
/// The frameworks decode header bytes as UTF-8 and turn invalid bytes into
/// U+FFFD, so ids that differ only in those bytes would become one key and
/// share one quota. Duplicated fields are combined differently by each
/// framework. So, given every value of the field in the request:
///
/// - no field: no id (key on the client address instead);
/// - optional whitespace (spaces, tabs) around the value is removed; a value
///   empty after that counts as no field;
/// - refused (``InvalidClientID``, answered `400 Bad Request` with a problem
///   body naming the reason): the field sent more than once, or a value with
///   any character other than visible ASCII (`!` to `~`) — U+FFFD (invalid
///   UTF-8), other non-ASCII characters, control characters, inner spaces —
///   or a comma (a list of ids);
/// - anything else is the id, byte for byte.
///
/// ```swift
/// let id = try ClientID.parse(["  alice "], field: "X-Client-Id")   // "alice"
/// ```
public enum ClientID {
    /// The id in `values`, the values of every field named `field` in the
    /// request, in order (see ``ClientID`` for the rule).
    ///
    /// - Parameters:
    ///   - values: each occurrence of the field (an empty array: the field is absent).
    ///   - field: the field's name, for the reason of a refusal.
    /// - Returns: the id, or `nil` when there is none (absent or empty).
    /// - Throws: ``InvalidClientID`` when the id must be refused.
    public static func parse(_ values: [String], field: String) throws(InvalidClientID) -> String? {
        guard let first = values.first else { return nil }
        guard values.count == 1 else { throw InvalidClientID(field: field, reason: "is sent more than once") }
        let id = Substring(first).trimmingSpaces
        if id.isEmpty { return nil }
        for scalar in id.unicodeScalars {
            switch scalar.value {
            case 0x21...0x7E where scalar != ",": continue
            case 0x2C: throw InvalidClientID(field: field, reason: "contains a comma (a list of ids)")
            case 0xFFFD: throw InvalidClientID(field: field, reason: "is not valid UTF-8")
            case 0x20: throw InvalidClientID(field: field, reason: "contains a space")
            case 0..<0x20, 0x7F: throw InvalidClientID(field: field, reason: "contains a control character")
            default: throw InvalidClientID(field: field, reason: "contains a character that is not ASCII")
            }
        }
        return String(id)
    }
}

/// A client id refused by the rule of ``ClientID``: the middleware answers
/// `400 Bad Request` with ``rejection``.
public struct InvalidClientID: Error, Sendable, Hashable, CustomStringConvertible {
    /// The header field's name.
    public var field: String
    /// Why it is refused ("is sent more than once", "is not valid UTF-8", …).
    public var reason: String

    /// A refusal of `field` for `reason`.
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    /// `"X-Client-Id is sent more than once"`.
    public var description: String { "\(field) \(reason)" }

    /// The answer: 400 with an RFC 9457 problem body whose `detail` names the reason.
    public var rejection: RateLimitGate.Rejection {
        RateLimitGate.Rejection(
            status: 400,
            body: RateLimitGate.problem(
                status: 400, title: "Bad Request",
                detail: "The \(field) field \(reason); a client id is one field of visible ASCII characters."))
    }
}
