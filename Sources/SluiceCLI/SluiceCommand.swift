import Foundation
import Sluice

/// `sluice`: tools around Sluice limiters.
@main
enum SluiceCommand {
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let status = await run(arguments, out: { print($0) }, err: { writeError($0) })
        exit(status)
    }

    /// Runs a command line in-process and returns the exit status; output
    /// goes through the two writers, one line (or block) per call.
    static func run(
        _ arguments: [String], out: @escaping @Sendable (String) -> Void, err: @escaping @Sendable (String) -> Void
    ) async -> Int32 {
        let command: Command
        do {
            command = try Arguments.parse(arguments)
        } catch {
            err(error.description)
            return 64
        }
        switch command {
        case let .help(text):
            out(text)
            return 0
        case .version:
            out("sluice \(sluiceVersion)")
            return 0
        case let .simulate(options):
            return await SimulateRun(options: options).execute(out: out, err: err)
        }
    }

    static func writeError(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// The work of `sluice simulate`, callable in-process (tests).
struct SimulateRun: Sendable {
    var options: SimulateOptions

    /// Runs and returns the exit status; output goes through the two
    /// writers, one line per call.
    func execute(
        out emitOut: @escaping @Sendable (String) -> Void, err emitErr: @Sendable (String) -> Void
    ) async
        -> Int32
    {
        let bytes: [UInt8]
        do {
            bytes = try readInput()
        } catch {
            emitErr("error: cannot read \(options.file): \(error.localizedDescription)")
            return 2
        }
        let trace: Trace
        do {
            trace = try Trace(parsing: bytes)
        } catch {
            emitErr(error.message)
            return 2
        }
        let output: [TraceLine]
        do {
            if options.realtime {
                // Lines are printed as they are delivered (unless drawing).
                let printLines = !options.timeline
                output = try await trace.runRealtimeDetached(observe: { line in
                    if printLines { emitOut(line.text) }
                })
            } else {
                output = try trace.run()
                if !options.timeline { output.forEach { emitOut($0.text) } }
            }
        } catch {
            emitErr("internal error: \(error)")
            return 3
        }
        let picture = Timeline(trace: trace, output: output)
        if options.timeline {
            emitOut(picture.text(width: options.width))
        }
        if let svgPath = options.svgPath {
            do {
                try Data(picture.svg().utf8).write(to: URL(fileURLWithPath: svgPath))
            } catch {
                emitErr("error: cannot write \(svgPath): \(error.localizedDescription)")
                return 1
            }
        }
        return 0
    }

    private func readInput() throws -> [UInt8] {
        if options.file == "-" {
            return [UInt8](FileHandle.standardInput.readDataToEndOfFile())
        }
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: options.file)))
    }
}
