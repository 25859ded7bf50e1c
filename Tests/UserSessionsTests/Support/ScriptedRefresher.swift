import Foundation

@testable import UserSessions

/// A ``TokenRefresher`` that follows a script: each call takes the next step (or, when the script is empty,
/// succeeds with derived credentials), may block on a gate first, and is counted.
final class ScriptedRefresher: TokenRefresher {
    enum Step: Sendable {
        /// Succeed with credentials derived from the call number: `at-N`, `rt-N`, expiring `lifetime` from now.
        case succeed
        /// Succeed with these credentials.
        case succeedWith(Credentials)
        /// Throw this error.
        case fail(any Error)
        /// Wait for the gate to open, then do the step.
        indirect case block(AsyncGate, then: Step)
    }

    private struct State {
        var steps: [Step]
        var received: [Credentials] = []
    }
    private let state: Locked<State>
    private let now: @Sendable () -> Date
    private let lifetime: TimeInterval
    /// One arrival per call, as the call starts.
    let started = ArrivalCounter()
    /// One arrival per call, as the call returns or throws.
    let finished = ArrivalCounter()

    init(steps: [Step] = [], lifetime: TimeInterval = 3600, now: @escaping @Sendable () -> Date = { Date() }) {
        self.state = Locked(State(steps: steps))
        self.lifetime = lifetime
        self.now = now
    }

    /// How many times ``refresh(_:)`` was called.
    var calls: Int { state.withLock { $0.received.count } }
    /// The credentials each call received, in call order.
    var received: [Credentials] { state.withLock { $0.received } }

    /// Appends steps to the script.
    func append(_ steps: Step...) {
        state.withLock { $0.steps.append(contentsOf: steps) }
    }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let (number, step) = state.withLock { state -> (Int, Step) in
            state.received.append(credentials)
            let step = state.steps.isEmpty ? Step.succeed : state.steps.removeFirst()
            return (state.received.count, step)
        }
        started.arrive()
        defer { finished.arrive() }
        return try await perform(step, number: number)
    }

    private func perform(_ step: Step, number: Int) async throws -> Credentials {
        switch step {
        case .succeed:
            return Credentials(
                accessToken: "at-\(number)", refreshToken: "rt-\(number)",
                expiresAt: now().addingTimeInterval(lifetime), lastRefreshedAt: now(), source: .refresh)
        case .succeedWith(let credentials):
            return credentials
        case .fail(let error):
            throw error
        case .block(let gate, let next):
            await gate.wait()
            return try await perform(next, number: number)
        }
    }

    static func failure(_ failureClass: RefreshFailureClass) -> Step {
        .fail(UserSessionError(.refreshFailed, "scripted \(failureClass) failure", failureClass: failureClass))
    }
}
