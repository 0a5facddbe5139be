import Testing

@testable import Sluice

/// The Swift trace parser must refuse exactly what the C parser
/// (tools/sluice-trace/trace.c) refuses, with the same line and reason.
@Suite("Trace parser")
struct TraceParserTests {
    /// A malformed input and the line the C tool prints for it.
    struct ErrorCase: Sendable, CustomTestStringConvertible {
        var input: String
        var expected: String  // `error: line N: REASON`
        var testDescription: String { expected }
    }

    static let errors: [ErrorCase] = ([
        ("", "error: line 1: missing policy"),
        ("# only a comment\n\n", "error: line 3: missing policy"),
        ("# no newline", "error: line 2: missing policy"),
        ("0 call A a\n", "error: line 1: missing policy"),
        ("policy\n", "error: line 1: missing field"),
        ("policy foo\n", "error: line 1: unknown policy 'foo'"),
        ("policy throttle interval\n", "error: line 1: bad option 'interval'"),
        ("policy throttle interval=1 maxwait=3\n", "error: line 1: unknown option 'maxwait'"),
        ("policy audit interval=1 leading=true\n", "error: line 1: unknown option 'leading'"),
        ("policy rate limit=1 per=1 interval=3\n", "error: line 1: unknown option 'interval'"),
        ("policy throttle interval=1 interval=2\n", "error: line 1: duplicate option 'interval'"),
        ("policy throttle interval=\n", "error: line 1: missing value for interval"),
        ("policy throttle interval=1x\n", "error: line 1: bad number '1x'"),
        ("policy throttle interval=+1\n", "error: line 1: bad number '+1'"),
        ("policy throttle interval=-\n", "error: line 1: bad number '-'"),
        ("policy throttle interval=-1x\n", "error: line 1: bad number '-1x'"),
        ("policy throttle interval=-5\n", "error: line 1: negative interval"),
        ("policy debounce interval=5 maxwait=-0\n", "error: line 1: negative maxwait"),
        ("policy rate limit=-1 per=1\n", "error: line 1: negative limit"),
        ("policy throttle interval=1000000000001\n", "error: line 1: number too large"),
        ("policy throttle interval=99999999999999999999999999999\n", "error: line 1: number too large"),
        ("policy rate limit=1000000000001 per=1\n", "error: line 1: number too large"),
        ("policy rate limit=0 per=1\n", "error: line 1: limit below 1"),
        ("policy rate limit=1 per=0\n", "error: line 1: per below 1"),
        ("policy rate limit=1 per=1 burst=0\n", "error: line 1: burst below 1"),
        ("policy rate per=1\n", "error: line 1: missing option limit"),
        ("policy rate limit=1\n", "error: line 1: missing option per"),
        ("policy debounce leading=true\n", "error: line 1: missing option interval"),
        ("policy debounce interval=10 maxwait=9\n", "error: line 1: maxwait below interval"),
        ("policy throttle interval=10 leading=false trailing=false\n", "error: line 1: no edge enabled"),
        ("policy debounce interval=10 trailing=false\n", "error: line 1: no edge enabled"),
        ("policy throttle interval=10 leading=yes\n", "error: line 1: bad value 'yes' for leading"),
        ("policy throttle interval=10 trailing=TRUE\n", "error: line 1: bad value 'TRUE' for trailing"),
        ("policy throttle interval=10 pick=last\n", "error: line 1: bad value 'last' for pick"),
        ("policy Throttle interval=10\n", "error: line 1: unknown policy 'Throttle'"),
        ("policy audit interval=1\n0 call A a\npolicy audit interval=1\n", "error: line 3: duplicate policy"),
        ("policy audit interval=1\n0 shout A a\n", "error: line 2: unknown verb 'shout'"),
        ("policy audit interval=1\n0\n", "error: line 2: missing field"),
        ("policy audit interval=1\n0 call A\n", "error: line 2: missing field"),
        ("policy audit interval=1\n0 call\n", "error: line 2: missing field"),
        ("policy audit interval=1\n0 flush\n", "error: line 2: missing field"),
        ("policy audit interval=1\n0 call A a b\n", "error: line 2: extra field 'b'"),
        ("policy audit interval=1\n0 pending A B\n", "error: line 2: extra field 'B'"),
        ("policy audit interval=1\n0 close drain now\n", "error: line 2: extra field 'now'"),
        ("policy audit interval=1\n0 close later\n", "error: line 2: bad value 'later' for close"),
        ("policy audit interval=1\nx call A a\n", "error: line 2: bad number 'x'"),
        ("policy audit interval=1\n-3 call A a\n", "error: line 2: negative time"),
        ("policy audit interval=1\n10000000000001 call A a\n", "error: line 2: number too large"),
        ("policy audit interval=1\n10000000000000 call A a\n5 call A b\n", "error: line 3: time goes backwards"),
        ("policy audit interval=1\n5 call A a\n4 bogus\n", "error: line 3: time goes backwards"),
        ("policy audit interval=1\n5 close drain\n6 call A a\n", "error: line 3: line after close"),
        ("policy audit interval=1\n5 close drain\npolicy audit interval=1\n", "error: line 3: line after close"),
        ("policy audit interval=1\n5 close discard\n\n# fine\n   \nx\n", "error: line 6: line after close"),
        ("policy audit interval=1\n0 call \(String(repeating: "k", count: 1025)) a\n", "error: line 2: key too long"),
        ("policy audit interval=1\n0 call A a\r\r\n", "error: line 2: bad character 0x0d"),
        ("policy audit interval=1\n0 call A\u{7F} a\n", "error: line 2: bad character 0x7f"),
        ("policy audit interval=1\n0 call A\u{0B}a\n", "error: line 2: bad character 0x0b"),
        ("policy audit interval=1\n0 call A é\n", "error: line 2: bad character 0xc3"),
        ("policy audit interval=1\n0 call A a # \u{0}\n", "error: line 2: bad character 0x00"),
        ("policy audit interval=1 \u{0}\n", "error: line 1: bad character 0x00"),
        ("policy audit interval=1\n0 shout\(String(repeating: "x", count: 50)) A\n",
         "error: line 2: unknown verb 'shout\(String(repeating: "x", count: 35))...'"),
        ("policy audit interval=1\n0 call A a \(String(repeating: "y", count: 40))\n",
         "error: line 2: extra field '\(String(repeating: "y", count: 40))'"),
        ("policy audit interval=1\n0 call A a \(String(repeating: "y", count: 41))\n",
         "error: line 2: extra field '\(String(repeating: "y", count: 40))...'"),
    ] as [(String, String)]).map { ErrorCase(input: $0.0, expected: $0.1) }

    @Test("malformed traces give the C parser's line and reason", arguments: errors)
    func malformed(_ errorCase: ErrorCase) {
        let (input, expected) = (errorCase.input, errorCase.expected)
        do {
            let trace = try Trace(parsing: input)
            Issue.record("parsed \(trace.steps.count) steps; expected \(expected)")
        } catch {
            #expect(error.message == expected)
            #expect(error.description == String(expected.dropFirst("error: ".count)))
        }
    }

    @Test("raw bytes: invalid UTF-8 is a bad character, and is fine in comments")
    func rawBytes() throws {
        let bad: [UInt8] = Array("policy audit interval=1\n0 call A ".utf8) + [0xFF] + Array("\n".utf8)
        #expect(throws: TraceSyntaxError(line: 2, reason: "bad character 0xff")) { try Trace(parsing: bad) }
        let comment: [UInt8] = Array("policy audit interval=1 # ".utf8) + [0xFF, 0x0D, 0x01] + Array("\n".utf8)
        #expect(try Trace(parsing: comment).steps.isEmpty)
    }

    @Test("a full trace: defaults, free option order, blanks, comments, CRLF")
    func wellFormed() throws {
        let text = "# header\r\n\tpolicy  debounce maxwait=0250\tinterval=100 # tail\r\n" +
            "\n0 call A a\n 007   flush\tA\n7 pending A\n7 cancel B\n10000000000000 close discard"
        let trace = try Trace(parsing: text)
        #expect(trace.policy == .debounce(interval: .milliseconds(100), leading: false, trailing: true,
                                          maxWait: .milliseconds(250)))
        #expect(trace.steps == [
            .init(line: 4, time: 0, action: .call(key: "A", value: "a")),
            .init(line: 5, time: 7, action: .flush(key: "A")),
            .init(line: 6, time: 7, action: .pending(key: "A")),
            .init(line: 7, time: 7, action: .cancel(key: "B")),
            .init(line: 8, time: 10_000_000_000_000, action: .close(.discard)),
        ])
        #expect(try Trace(parsing: "policy throttle interval=5").policy == .throttle(interval: .milliseconds(5)))
        #expect(try Trace(parsing: "policy rate per=10 limit=3").policy == .rate(limit: 3, per: .milliseconds(10)))
        #expect(try Trace(parsing: "policy rate per=10 limit=3 burst=3").policy
                == .rate(limit: 3, per: .milliseconds(10), burst: 3))
        #expect(try Trace(parsing: "policy throttle interval=0 leading=false pick=first").policy
                == .throttle(interval: .zero, leading: false, trailing: true, pick: .first))
    }

    @Test("runs a trace: the audit/throttle example of the spec")
    func runs() throws {
        let calls = "0 call A a\n50 call A b\n120 call A c\n"
        let audit = try Trace(parsing: "policy audit interval=100\n" + calls).run().map(\.description)
        #expect(audit == ["50 drop A a", "100 emit A b", "220 emit A c"])
        let throttle = try Trace(parsing: "policy throttle interval=100 leading=false\n" + calls)
            .run().map(\.description)
        #expect(throttle == ["50 drop A a", "100 emit A b", "200 emit A c"])
        let rate = try Trace(parsing: "policy rate limit=1 per=100\n0 call K a\n99 call K b\n100 call K c\n")
            .run().map(\.description)
        #expect(rate == ["0 emit K a", "99 drop K b", "100 emit K c"])
    }
}
