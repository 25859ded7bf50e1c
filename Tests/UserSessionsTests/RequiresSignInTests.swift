import Testing
import UserSessions

/// The one classification of "the user must sign in again" the server integrations share.
struct RequiresSignInTests {
    @Test func onlyFailuresThatEndTheSessionForGoodRequireASignIn() {
        let ending = [
            UserSessionError(.refreshFailed, "x", failureClass: .terminal),
            UserSessionError(.refreshTokenRefused, "x", failureClass: .terminal),
            UserSessionError(.noStoredSession, "x"), UserSessionError(.credentialsUnusable, "x"),
        ]
        let passing = [
            UserSessionError(.refreshFailed, "x", failureClass: .transient),
            UserSessionError(.refreshFailed, "x", failureClass: .misconfiguration),
            UserSessionError(.storeFailure, "x", failureClass: .transient), UserSessionError(.storeCorrupt, "x"),
            UserSessionError(.shutdown, "x"),
        ]
        for error in ending { #expect(error.requiresSignIn, "\(error.code)") }
        for error in passing { #expect(!error.requiresSignIn, "\(error.code)") }
    }
}
