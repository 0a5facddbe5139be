/// Which client address a request comes from, and whether a proxy in front
/// of the server may say so.
///
/// By default (``ForwardedHeaders/ignore``) the address is the TCP peer's:
/// `X-Forwarded-For` and `Forwarded` are never read, since any client can
/// send them. With ``ForwardedHeaders/trust(_:)``, and only when the peer is
/// one of the listed proxies, the client is the nearest address in the chain
/// the proxies appended (walking from the right, the first address that is
/// not a trusted proxy); `Forwarded` (RFC 7239) is read when present,
/// `X-Forwarded-For` otherwise.
public enum ForwardedHeaders: Sendable, Hashable {
    /// Never read the forwarding headers (the default).
    case ignore
    /// Read them when the peer is one of these proxy addresses (exact
    /// textual IPs, as the server reports the peer: `127.0.0.1`, `::1`).
    case trust(Set<String>)

    /// The client address of a request.
    ///
    /// - Parameters:
    ///   - peer: the TCP peer's IP address (`nil` when unknown, e.g. a Unix socket).
    ///   - forwarded: the values of every `Forwarded` field, in order.
    ///   - xForwardedFor: the values of every `X-Forwarded-For` field, in order.
    /// - Returns: the address the limiter keys on, or `nil` when unknown.
    public func clientAddress(peer: String?, forwarded: [String], xForwardedFor: [String]) -> String? {
        guard case let .trust(proxies) = self, let peer, proxies.contains(peer) else { return peer }
        let chain: [String]
        if !forwarded.isEmpty {
            chain = forwarded.flatMap { $0.split(separator: ",") }.compactMap { element in
                for pair in element.split(separator: ";") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2, parts[0].trimmingSpaces.lowercased() == "for" else { continue }
                    return Self.stripPort(String(parts[1].trimmingSpaces))
                }
                return nil
            }
        } else {
            chain = xForwardedFor.flatMap { $0.split(separator: ",") }.map { Self.stripPort(String($0.trimmingSpaces)) }
        }
        let hops = chain.filter { !$0.isEmpty }
        guard !hops.isEmpty else { return peer }
        return hops.last(where: { !proxies.contains($0) }) ?? hops.first
    }

    /// `"[2001:db8::1]:4711"` → `2001:db8::1`, `1.2.3.4:80` → `1.2.3.4`, quotes removed.
    static func stripPort(_ raw: String) -> String {
        var text = Substring(raw)
        if text.hasPrefix("\""), text.hasSuffix("\""), text.count >= 2 { text = text.dropFirst().dropLast() }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return String(text) }
            return String(text[text.index(after: text.startIndex)..<close])
        }
        // One colon: IPv4 (or a name) with a port; several: a bare IPv6 address.
        if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") {
            return String(text[..<colon])
        }
        return String(text)
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }
}
