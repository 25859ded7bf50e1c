extension UserSessionError {
    /// Whether the user must sign in again: the session is gone for good, whoever asks.
    ///
    /// True for a refresh failure of class ``RefreshFailureClass/terminal``, a refused refresh token
    /// (``Code-swift.struct/refreshTokenRefused``), nothing stored (``Code-swift.struct/noStoredSession``) and
    /// credentials that expired and cannot be refreshed (``Code-swift.struct/credentialsUnusable``); false for
    /// everything passing (a transient failure, an unreachable store), after which the session may still work. The
    /// one classification the server integrations sign a browser out by.
    public var requiresSignIn: Bool {
        failureClass == .terminal || code == .refreshTokenRefused || code == .noStoredSession
            || code == .credentialsUnusable
    }
}
