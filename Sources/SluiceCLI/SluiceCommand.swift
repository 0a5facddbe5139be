import ArgumentParser
import Foundation
import Sluice

/// `sluice`: tools around Sluice limiters.
@main
struct SluiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sluice",
        abstract: "Tools for Sluice, the keyed throttle / audit / debounce / rate limiter.",
        subcommands: [Simulate.self]
    )
}

/// `sluice simulate FILE`: runs a trace through `Limiter<String, String>`.
struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a trace (trace format v1) through a Sluice limiter and print what it did.",
        discussion: """
            Without options the limiter runs on a manual clock: the output is exact and \
            repeatable, one line per thing the limiter did ('TIME emit|drop|discard KEY VALUE', \
            'TIME pending KEY yes|no'), as docs/trace-format.md specifies.

            Exit status: 0 on success; 2 for a malformed trace ('error: line N: REASON' on \
            standard error) or an input that could not be read; 3 for an internal error \
            (a bug in Sluice).
            """
    )

    @Argument(help: "The trace file, or - for standard input.")
    var file: String

    @Flag(help: "Run on the real default event loop and clock: steps happen at their real times, and each line shows when it was delivered.")
    var realtime = false

    @Flag(help: "Draw each key's calls, emissions and drops on a time axis instead of printing the lines.")
    var timeline = false

    @Option(name: .customLong("svg"), help: ArgumentHelp("Also write the timeline as an SVG picture.", valueName: "OUT.svg"))
    var svgPath: String?

    @Option(help: "Width of the terminal timeline, in columns.")
    var width = 80

    mutating func validate() throws {
        guard width >= 40 else { throw ValidationError("--width must be at least 40") }
    }

    func run() async throws {
        let code = await SimulateRun(
            file: file, realtime: realtime, timeline: timeline, svgPath: svgPath, width: width
        ).execute(out: { print($0) }, err: { FileHandle.standardError.write(Data(($0 + "\n").utf8)) })
        if code != 0 { throw ExitCode(code) }
    }
}

/// The work of `sluice simulate`, callable in-process (tests).
struct SimulateRun: Sendable {
    var file: String
    var realtime = false
    var timeline = false
    var svgPath: String?
    var width = 80

    /// Runs and returns the exit status; output goes through the two
    /// writers, one line per call.
    func execute(out emitOut: @escaping @Sendable (String) -> Void, err emitErr: @Sendable (String) -> Void) async -> Int32 {
        let bytes: [UInt8]
        do {
            bytes = try readInput()
        } catch {
            emitErr("error: cannot read \(file): \(error.localizedDescription)")
            return 2
        }
        let trace: Trace
        do {
            trace = try Trace(parsing: bytes)
        } catch {
            emitErr(error.message)
            return 2
        }
        let output: [TraceOutput]
        do {
            if realtime {
                // Lines are printed as they are delivered (unless drawing).
                if timeline {
                    output = try await trace.simulateRealtime()
                } else {
                    let printer = LinePrinter(emit: emitOut)
                    output = try await trace.simulateRealtime(observe: printer.observe)
                }
            } else {
                output = try trace.simulate()
                if !timeline { output.forEach { emitOut($0.description) } }
            }
        } catch {
            emitErr("internal error: \(error)")
            return 3
        }
        let picture = Timeline(trace: trace, output: output)
        if timeline {
            emitOut(picture.text(width: width))
        }
        if let svgPath {
            do {
                try Data(picture.svg().utf8).write(to: URL(fileURLWithPath: svgPath))
            } catch {
                emitErr("error: cannot write \(svgPath): \(error.localizedDescription)")
                return 1
            }
        }
        return 0
    }

    /// Prints output lines as they are delivered.
    struct LinePrinter: Sendable {
        let emit: @Sendable (String) -> Void
        var observe: @Sendable (TraceOutput) -> Void {
            let emit = self.emit
            return { line in emit(line.description) }
        }
    }

    private func readInput() throws -> [UInt8] {
        if file == "-" {
            return [UInt8](FileHandle.standardInput.readDataToEndOfFile())
        }
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: file)))
    }
}
