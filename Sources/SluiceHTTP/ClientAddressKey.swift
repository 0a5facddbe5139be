/// The key of a client address: what the middleware's default keys limit.
///
/// An IPv4 address is one client. An IPv6 client usually holds a whole
/// network (a /64 per subscriber is the rule, and a host picks new addresses
/// in it at will), so keying on the full address would give one client
/// 2⁶⁴ quotas: the address is masked to its first ``defaultIPv6PrefixLength``
/// bits (configurable) and written `network/length` in RFC 5952's form.
/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, a dual-stack socket's
/// view of an IPv4 client) is keyed as the IPv4 address; a zone
/// (`fe80::1%eth0`) is dropped; anything that is not an IP address is kept
/// as it is.
///
/// ```swift
/// let key = ClientAddressKey.key("2001:db8:1:2:a:b:c:d")  // "2001:db8:1:2::/64"
/// let wide = ClientAddressKey.key("2001:db8:1:2::1", ipv6PrefixLength: 48)  // "2001:db8:1::/48"
/// ```
public enum ClientAddressKey {
    /// The prefix length an IPv6 address is masked to by default: 64, one
    /// subscriber's network.
    public static let defaultIPv6PrefixLength = 64

    /// The key of `address` (see ``ClientAddressKey``).
    ///
    /// - Parameters:
    ///   - address: a textual IPv4 or IPv6 address (as the server reports the
    ///     peer, or as ``ForwardedHeaders/clientAddress(peer:forwarded:xForwardedFor:)`` finds it).
    ///   - ipv6PrefixLength: the bits of an IPv6 address kept, clamped to
    ///     0...128; 128 keys on the whole address (written without `/128`).
    /// - Returns: the key: the IPv4 address, the masked IPv6 network, or
    ///   `address` unchanged when it is not an IP address.
    public static func key(_ address: String, ipv6PrefixLength: Int = defaultIPv6PrefixLength) -> String {
        guard address.contains(":"), var groups = parseIPv6(address) else { return address }
        if groups[0..<5].allSatisfy({ $0 == 0 }) && groups[5] == 0xFFFF {
            return "\(groups[6] >> 8).\(groups[6] & 0xFF).\(groups[7] >> 8).\(groups[7] & 0xFF)"
        }
        let length = min(max(ipv6PrefixLength, 0), 128)
        for index in 0..<8 {
            let kept = min(max(length - index * 16, 0), 16)
            groups[index] &= kept == 0 ? 0 : UInt16.max << (16 - kept)
        }
        let text = format(groups)
        return length == 128 ? text : "\(text)/\(length)"
    }

    /// The eight 16-bit groups of a textual IPv6 address (a zone dropped, a
    /// trailing dotted IPv4 part allowed), or `nil` when it is not one.
    static func parseIPv6(_ address: String) -> [UInt16]? {
        var text = Substring(address)
        if let percent = text.firstIndex(of: "%") { text = text[..<percent] }
        func groups(_ part: Substring, last: Bool) -> [UInt16]? {
            if part.isEmpty { return [] }
            var result: [UInt16] = []
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            for (index, piece) in pieces.enumerated() {
                if last, index == pieces.count - 1, piece.contains(".") {
                    let octets = piece.split(separator: ".", omittingEmptySubsequences: false)
                    guard octets.count == 4 else { return nil }
                    var bytes: [UInt16] = []
                    for octet in octets {
                        guard (1...3).contains(octet.count), octet.allSatisfy({ $0.isASCII && $0.isNumber }),
                            let value = UInt16(octet), value <= 255
                        else { return nil }
                        bytes.append(value)
                    }
                    result.append(bytes[0] << 8 | bytes[1])
                    result.append(bytes[2] << 8 | bytes[3])
                    continue
                }
                guard (1...4).contains(piece.count), piece.allSatisfy({ $0.isASCII && $0.isHexDigit }),
                    let value = UInt16(piece, radix: 16)
                else { return nil }
                result.append(value)
            }
            return result
        }
        guard let gap = text.firstRange(of: "::") else {
            guard let all = groups(text, last: true), all.count == 8 else { return nil }
            return all
        }
        let before = text[..<gap.lowerBound]
        let after = text[gap.upperBound...]
        guard after.firstRange(of: "::") == nil, !after.hasPrefix(":"), !before.hasSuffix(":"),
            let head = groups(before, last: false), let tail = groups(after, last: true),
            head.count + tail.count <= 7
        else { return nil }
        return head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
    }

    /// RFC 5952: lowercase hex without leading zeros, the longest run of two
    /// or more zero groups (the first of equal runs) written `::`.
    static func format(_ groups: [UInt16]) -> String {
        var best = (start: -1, count: 0)
        var index = 0
        while index < 8 {
            guard groups[index] == 0 else {
                index += 1
                continue
            }
            var end = index
            while end < 8 && groups[end] == 0 { end += 1 }
            if end - index > best.count && end - index >= 2 { best = (index, end - index) }
            index = end
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.start >= 0 else { return hex.joined(separator: ":") }
        let head = hex[..<best.start].joined(separator: ":")
        let tail = hex[(best.start + best.count)...].joined(separator: ":")
        return head + "::" + tail
    }
}
