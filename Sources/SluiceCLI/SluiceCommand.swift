import ArgumentParser

@main
struct SluiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sluice")
}
