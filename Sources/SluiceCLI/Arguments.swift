/// The `sluice` command line, parsed by hand (no dependency for a consumer
/// of the library to fetch).
enum Command: Equatable, Sendable {
    /// Print this text on standard output and exit 0.
    case help(String)
    /// Print the version and exit 0.
    case version
    /// Run a trace.
    case simulate(SimulateOptions)
}

/// The options of `sluice simulate`.
struct SimulateOptions: Equatable, Sendable {
    /// The trace file, or `-` for standard input.
    var file: String
    var realtime = false
    var timeline = false
    var svgPath: String?
    var width = 80
}

/// A command line that cannot be run: printed with a hint on standard
/// error, exit status 64 (EX_USAGE).
struct UsageError: Error, Equatable, CustomStringConvertible {
    var message: String
    /// The usage text of the command concerned.
    var usage: String
    var description: String { "error: \(message)\n\(usage)" }
}

enum Arguments {
    static let mainUsage = """
        USAGE: sluice <subcommand> [options]

        Tools for Sluice, the keyed throttle / audit / debounce / rate limiter.

        SUBCOMMANDS:
          simulate     Run a trace through a Sluice limiter and print what it did.

        OPTIONS:
          -h, --help   Show this help.
          --version    Show the version.

        See 'sluice simulate --help'.
        """

    static let simulateUsage = """
        USAGE: sluice simulate [--realtime] [--timeline] [--svg OUT.svg] [--width N] FILE

        Run a trace (docs/trace-format.md, versions 1 and 2) through a Sluice limiter
        and print what it did. Without options the limiter runs on a manual clock:
        the output is exact and repeatable, one line per thing the limiter did
        ('TIME emit|drop|discard KEY VALUE', 'TIME pending KEY yes|no',
        'TIME quota KEY remaining=R full=F retry=S|never').

        ARGUMENTS:
          FILE             The trace file, or - for standard input.

        OPTIONS:
          --realtime       Run on a real event loop and clock: steps happen at their
                           real times, and each line shows when it was delivered.
          --timeline       Draw each key's calls, emissions and drops on a time axis
                           instead of printing the lines.
          --svg OUT.svg    Also write the timeline as an SVG picture.
          --width N        Width of the terminal timeline, in columns (at least 40;
                           default 80).
          -h, --help       Show this help.

        EXIT STATUS: 0 on success; 1 when the SVG cannot be written; 2 for a
        malformed trace ('error: line N: REASON' on standard error) or an input that
        could not be read; 3 for an internal error (a bug in Sluice); 64 for a bad
        command line.
        """

    /// Parses the arguments after the program name.
    ///
    /// - Parameter arguments: for example `["simulate", "--timeline", "t.trace"]`.
    /// - Returns: the command to run.
    /// - Throws: ``UsageError`` with a message naming the problem.
    static func parse(_ arguments: [String]) throws(UsageError) -> Command {
        guard let first = arguments.first else {
            throw UsageError(message: "missing subcommand", usage: mainUsage)
        }
        switch first {
        case "-h", "--help", "help":
            return .help(mainUsage)
        case "--version":
            return .version
        case "simulate":
            return try parseSimulate(Array(arguments.dropFirst()))
        default:
            throw UsageError(message: "unknown subcommand '\(first)'", usage: mainUsage)
        }
    }

    static func parseSimulate(_ arguments: [String]) throws(UsageError) -> Command {
        func fail(_ message: String) -> UsageError { UsageError(message: message, usage: simulateUsage) }
        var options = SimulateOptions(file: "")
        var file: String?
        var seen: Set<String> = []
        var i = 0
        var onlyPositional = false
        while i < arguments.count {
            var argument = arguments[i]
            i += 1
            if onlyPositional || argument == "-" || !argument.hasPrefix("-") {
                guard file == nil else { throw fail("unexpected argument '\(argument)' (one FILE only)") }
                file = argument
                continue
            }
            if argument == "--" {
                onlyPositional = true
                continue
            }
            // --name=value
            var inlineValue: String?
            if argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") {
                inlineValue = String(argument[argument.index(after: eq)...])
                argument = String(argument[..<eq])
            }
            func value() throws(UsageError) -> String {
                if let inlineValue { return inlineValue }
                guard i < arguments.count else { throw fail("missing value for '\(argument)'") }
                i += 1
                return arguments[i - 1]
            }
            func flag() throws(UsageError) {
                if inlineValue != nil { throw fail("'\(argument)' takes no value") }
            }
            if argument != "-h" && argument != "--help" {
                guard seen.insert(argument).inserted else { throw fail("'\(argument)' given twice") }
            }
            switch argument {
            case "-h", "--help":
                return .help(simulateUsage)
            case "--realtime":
                try flag()
                options.realtime = true
            case "--timeline":
                try flag()
                options.timeline = true
            case "--svg":
                let path = try value()
                guard !path.isEmpty else { throw fail("missing value for '--svg'") }
                options.svgPath = path
            case "--width":
                let text = try value()
                guard let width = Int(text) else { throw fail("'--width' needs a whole number, not '\(text)'") }
                guard width >= 40 else { throw fail("'--width' must be at least 40") }
                options.width = width
            default:
                throw fail("unknown option '\(argument)'")
            }
        }
        guard let file else { throw fail("missing FILE (a trace file, or - for standard input)") }
        options.file = file
        return .simulate(options)
    }
}
