/// The cost of a request by its route: a table of path prefixes and their
/// costs, for the middleware's cost (one quota, expensive routes charged
/// more).
///
/// A prefix matches the path itself and the paths below it, by whole
/// segments (`/search` matches `/search` and `/search/images`, not
/// `/searches`); the longest matching prefix decides; a path no prefix
/// matches costs ``defaultCost``. The query is not part of the path. The
/// gate counts a cost below 1 as 1: to let a route through unlimited, use
/// the middleware's `exempting`.
///
/// ```swift
/// let costs = RouteCosts(["/search": 5, "/export": 50, "/search/suggest": 1])
/// let cost = costs.cost(path: "/search/images")   // 5
/// ```
public struct RouteCosts: Sendable, Hashable {
    /// The cost of each path prefix.
    public var costs: [String: Int]
    /// The cost of a path no prefix matches.
    public var defaultCost: Int

    /// A table of costs.
    ///
    /// - Parameters:
    ///   - costs: the cost of each path prefix (a trailing `/` is ignored).
    ///   - defaultCost: the cost of any other path (1 by default).
    public init(_ costs: [String: Int], default defaultCost: Int = 1) {
        var normalized: [String: Int] = [:]
        for (prefix, cost) in costs { normalized[Self.trimmed(prefix)] = cost }
        self.costs = normalized
        self.defaultCost = defaultCost
    }

    /// The cost of a request for `path` (a query, `?…`, is ignored).
    public func cost(path: String) -> Int {
        var candidate = Self.trimmed(String(path.prefix { $0 != "?" }))
        while true {
            if let cost = costs[candidate] { return cost }
            guard let slash = candidate.lastIndex(of: "/") else { return defaultCost }
            candidate = String(candidate[..<slash])
        }
    }

    /// `path` without a trailing `/` (`/` itself becomes the empty root).
    static func trimmed(_ path: String) -> String {
        var path = Substring(path)
        while path.hasSuffix("/") { path = path.dropLast() }
        return String(path)
    }
}
