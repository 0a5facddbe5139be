import Foundation
import Testing

@testable import Sluice

/// The bytes a key lends as its identity, or its integer.
private enum Identity: Hashable {
    case integer(UInt64)
    case bytes([UInt8])
}

private func identity<K: LimiterKey>(_ key: K) -> Identity {
    key.withLimiterKeyIdentity { identity in
        switch identity {
        case let .integer(value): .integer(value)
        case let .bytes(buffer): .bytes(Array(buffer))
        }
    }
}

/// A throttle that only emits on the leading edge: on one key, a second call
/// within the second is dropped; on a new key it is emitted.
private func leadingOnly<K: LimiterKey>(_: K.Type) throws -> Limiter<K, Int> {
    try Limiter<K, Int>(
        .throttle(interval: .seconds(1), trailing: false), scheduler: .manual(ManualLimiterClock()),
        handler: { _, _ in })
}

@Suite("Keys")
struct KeyTests {
    /// Canonically equivalent spellings: Swift says each pair is equal.
    static let equivalent: [(String, String, String)] = [
        ("precomposed and decomposed é", "caf\u{E9}", "cafe\u{301}"),
        (
            "Hangul syllables and conjoining jamo", "\u{D55C}\u{AE00}",
            "\u{1112}\u{1161}\u{11AB}\u{1100}\u{1173}\u{11AF}"
        ),
        ("combining marks in either canonical order", "a\u{301}\u{323}", "a\u{323}\u{301}"),
        ("angstrom sign and Å", "\u{212B}", "\u{C5}"),
        ("ohm sign and omega", "\u{2126}", "\u{3A9}"),
        ("kelvin sign and ASCII K", "\u{212A}", "K"),
        ("decomposed and precomposed with a marked base", "\u{1E69}", "s\u{323}\u{307}"),
    ]

    @Test("canonically equivalent strings are one key: a shared quota, not two", arguments: equivalent)
    func equivalentStringsShareAKey(_ name: String, _ a: String, _ b: String) throws {
        #expect(a == b, "precondition: Swift compares \(name) as equal")
        #expect(Array(a.utf8) != Array(b.utf8), "precondition: \(name) differ in UTF-8")
        #expect(identity(a) == identity(b), "\(name)")

        let limiter = try leadingOnly(String.self)
        #expect(try limiter.submit(1, for: a) == .emitted)
        #expect(try limiter.submit(2, for: b).isDropped, "\(name): the second spelling must hit the same key")
        #expect(try limiter.pending(b) == false)
        #expect(limiter.statistics.keys == 1, "\(name)")

        // One rate quota for both spellings.
        let quota = try RateLimiter<String>(limit: 2, per: .seconds(60), scheduler: .manual(ManualLimiterClock()))
        #expect(try quota.check(a).remaining == 1)
        #expect(try quota.check(b).remaining == 0, "\(name): the second spelling spends the same quota")
        #expect(try !quota.check(a).isAdmitted)
        #expect(try !quota.check(b).isAdmitted)

        // Substrings compare like the equal String.
        let substrings = try leadingOnly(Substring.self)
        let padded = "-- " + b
        #expect(try substrings.submit(1, for: Substring(a)) == .emitted)
        #expect(try substrings.submit(2, for: padded.dropFirst(3)).isDropped, "\(name) as a Substring")
    }

    @Test("strings Swift tells apart stay different keys")
    func distinctStrings() throws {
        let pairs: [(String, String)] = [
            ("\u{FB01}", "fi"),  // compatibility-equivalent only
            ("e", "\u{E9}"),
            ("a\u{301}", "\u{E1}\u{301}"),
            ("a\0b", "a"),
            ("", "\0"),
        ]
        for (a, b) in pairs {
            #expect(a != b)
            #expect(identity(a) != identity(b), "\(a.debugDescription) vs \(b.debugDescription)")
            let limiter = try leadingOnly(String.self)
            #expect(try limiter.submit(1, for: a) == .emitted)
            #expect(try limiter.submit(2, for: b) == .emitted, "\(a.debugDescription) vs \(b.debugDescription)")
        }
    }

    @Test("the identity is the NFC form of the UTF-8; ASCII is lent unchanged")
    func identityBytes() {
        #expect(identity("user:42") == .bytes(Array("user:42".utf8)))
        #expect(identity(Substring("xuser:42").dropFirst()) == .bytes(Array("user:42".utf8)))
        #expect(identity("") == .bytes([]))
        #expect(identity("cafe\u{301}") == .bytes([0x63, 0x61, 0x66, 0xC3, 0xA9]))
        #expect(identity("\u{1112}\u{1161}\u{11AB}") == .bytes([0xED, 0x95, 0x9C]))
        // Long ASCII (the eight-bytes-at-a-time scan) with one accent at the end.
        let long = String(repeating: "abcdefgh", count: 20)
        #expect(identity(long + "e\u{301}") == .bytes(Array((long + "\u{E9}").utf8)))
        #expect(identity(long + "\u{7F}") == .bytes(Array((long + "\u{7F}").utf8)))
    }

    @Test("the 1024-byte limit applies to the normalized UTF-8")
    func lengthOfNormalizedKeys() throws {
        let limiter = try leadingOnly(String.self)
        // 341 Hangul syllables: 3069 bytes as jamo, 1023 bytes in NFC: accepted, one key.
        let jamo = String(repeating: "\u{1112}\u{1161}\u{11AB}", count: 341)
        let syllables = String(repeating: "\u{D55C}", count: 341)
        #expect(jamo.utf8.count == 3069)
        #expect(try limiter.submit(1, for: jamo) == .emitted)
        #expect(try limiter.submit(2, for: syllables).isDropped)
        // 400 syllables as jamo: 3600 bytes, 1200 in NFC: refused.
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.submit(3, for: String(repeating: "\u{1112}\u{1161}\u{11AB}", count: 400))
        }
        // ASCII at the limit and one past it.
        #expect(try limiter.submit(4, for: String(repeating: "k", count: 1024)) == .emitted)
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.submit(5, for: String(repeating: "k", count: 1025))
        }
    }

    // MARK: - Composite keys

    @Test("composite keys are unambiguous: different parts, different keys")
    func compositeNoAmbiguity() throws {
        #expect(CompositeKey("ab", "c") != CompositeKey("a", "bc"))
        #expect(CompositeKey("ab", "c") != CompositeKey("abc"))
        #expect(CompositeKey("abc") != CompositeKey("abc", ""))
        #expect(CompositeKey("", "") != CompositeKey(""))
        #expect(CompositeKey() != CompositeKey(""))
        #expect(CompositeKey(1) != CompositeKey([UInt8](repeating: 0, count: 8)))

        let limiter = try leadingOnly(CompositeKey.self)
        #expect(try limiter.submit(1, for: CompositeKey("ab", "c")) == .emitted)
        #expect(try limiter.submit(2, for: CompositeKey("a", "bc")) == .emitted)
        #expect(try limiter.submit(3, for: CompositeKey("ab", "c")).isDropped)

        // Every sequence of up to three parts from a set of tricky parts (bytes
        // that look like tags and lengths, integers whose bytes look like
        // strings): two sequences encode alike exactly when their parts'
        // identities are equal, in order.
        let parts: [(Identity, (inout CompositeKey) -> Void)] = [
            (.bytes([]), { $0.append([UInt8]()) }),
            (.bytes([0]), { $0.append([UInt8(0)]) }),
            (.bytes([1]), { $0.append([UInt8(1)]) }),
            (.bytes([2]), { $0.append([UInt8(2)]) }),
            (.bytes([2, 0]), { $0.append([UInt8(2), 0]) }),
            (.bytes([2, 1, 0x61]), { $0.append([UInt8(2), 1, 0x61]) }),
            (.bytes([0x61]), { $0.append("a") }),
            (.bytes([0x61, 0x62]), { $0.append("ab") }),
            (.bytes([0x62]), { $0.append(Substring("b")) }),
            (.bytes(Array(repeating: 0x78, count: 200)), { $0.append(String(repeating: "x", count: 200)) }),
            (.integer(0), { $0.append(0) }),
            (.integer(1), { $0.append(UInt8(1)) }),
            (.integer(0x6261), { $0.append(0x6261 as UInt64) }),
            (.integer(UInt64.max), { $0.append(-1 as Int64) }),
        ]
        var sequences: [[Int]] = [[]]
        for length in 1...3 {
            sequences += sequences.filter { $0.count == length - 1 }.flatMap { s in parts.indices.map { s + [$0] } }
        }
        var seen: [[UInt8]: [Identity]] = [:]
        for sequence in sequences {
            var key = CompositeKey()
            for index in sequence { parts[index].1(&key) }
            #expect(key.count == sequence.count)
            let expected = sequence.map { parts[$0].0 }
            guard case let .bytes(encoding) = identity(key) else {
                Issue.record("a composite key lends bytes")
                continue
            }
            if let earlier = seen[encoding] {
                #expect(earlier == expected, "two different part lists share the encoding \(encoding)")
            }
            seen[encoding] = expected
        }
        #expect(seen.count == sequences.count)
    }

    @Test("composite parts compare as their own keys do")
    func compositeParts() throws {
        // A String part is compared as Swift compares strings.
        #expect(CompositeKey("tenant", "caf\u{E9}", 7) == CompositeKey("tenant", "cafe\u{301}", UInt8(7)))
        let limiter = try leadingOnly(CompositeKey.self)
        #expect(try limiter.submit(1, for: CompositeKey("tenant", "caf\u{E9}", 7)) == .emitted)
        #expect(try limiter.submit(2, for: CompositeKey("tenant", "cafe\u{301}", 7)).isDropped)
        #expect(Set([CompositeKey("a", 1), CompositeKey("a", UInt16(1))]).count == 1)

        // Built part by part, or all at once.
        var built = CompositeKey()
        built.append("tenant")
        built.append(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)))
        built.append(42)
        let atOnce = CompositeKey("tenant", UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)), 42)
        #expect(built == atOnce)
        #expect(CompositeKey("tenant").appending(1) == CompositeKey("tenant", 1))
        #expect(atOnce.count == 3)
        // tag, length, 6 bytes; tag, length, 16 bytes; tag, 8 bytes
        #expect(atOnce.description == "CompositeKey(3 parts, 35 bytes)")
    }

    @Test("composite keys obey the 1024-byte limit on their encoding")
    func compositeLength() throws {
        let limiter = try leadingOnly(CompositeKey.self)
        // A byte part of 1021 bytes: tag, two length bytes, the bytes: 1024.
        #expect(try limiter.submit(1, for: CompositeKey([UInt8](repeating: 7, count: 1021))) == .emitted)
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.submit(2, for: CompositeKey([UInt8](repeating: 7, count: 1022)))
        }
        // Lengths up to 127 take one byte.
        #expect(CompositeKey([UInt8](repeating: 0, count: 127)).description.hasSuffix("129 bytes)"))
        #expect(CompositeKey([UInt8](repeating: 0, count: 128)).description.hasSuffix("131 bytes)"))
    }
}

extension LimiterDecision {
    fileprivate var isDropped: Bool {
        if case .dropped = self { return true }
        return false
    }
}
