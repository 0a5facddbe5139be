import Testing

@testable import Sluice

/// The engine-generic behaviour suite (Behaviour/BehaviourCases.swift) on
/// Sluice's manual clock. NIOEngineTests (NIO trait) runs the same cases on the NIO engine.
@Suite("Behaviour on the manual clock")
struct BehaviourOnManualClock {
    @Test("behaviour", arguments: Behaviour.cases)
    func behaviour(_ test: BehaviourCase) async throws {
        let clock = ManualLimiterClock()
        try await test.body(clock)
        try await clock.finish()
    }
}
