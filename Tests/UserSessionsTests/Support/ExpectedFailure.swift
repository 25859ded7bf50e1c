import Testing

@testable import UserSessions

/// What several suites expect of a call that must fail, and the fixture answers whose failure class they check.
enum ExpectedFailure {
    /// Runs `body`, which must throw a ``UserSessionError``, and returns that error (recording an issue otherwise).
    static func error<Value>(of what: String, _ body: () async throws -> Value) async -> UserSessionError? {
        do {
            _ = try await body()
            Issue.record("the \(what) should have failed")
            return nil
        } catch let error as UserSessionError {
            return error
        } catch {
            Issue.record("unexpected error type \(type(of: error))")
            return nil
        }
    }

    /// Settings of the OAuth fixture that make an endpoint fail, each with the failure class it must be reported as
    /// (for refreshes and revocations alike).
    static let fixtureAnswers: [([String: any Sendable], RefreshFailureClass)] = [
        (["mode": "error500"], .transient),
        (["mode": "status", "status": 503], .transient),
        (["mode": "status", "status": 400], .misconfiguration),
        (["mode": "redirect"], .transient),
        (["mode": "invalid_client"], .misconfiguration),
    ]
}
