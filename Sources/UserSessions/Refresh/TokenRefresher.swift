/// Turns credentials into fresh ones, usually by calling an OAuth 2.0 token endpoint.
///
/// The controller calls ``refresh(_:)`` through its single-flight gate: at most one call per session is in
/// flight at any time, whatever the number of callers.
///
/// - Important: Throw a ``UserSessionError`` with code ``UserSessionError/Code/refreshFailed`` and a
///   ``UserSessionError/failureClass`` to say how the refresh failed. A `CancellationError` is treated as
///   ``RefreshFailureClass/cancelled``; any other error is treated as ``RefreshFailureClass/transient``.
public protocol TokenRefresher: Sendable {
    /// Returns new credentials for `credentials`.
    ///
    /// If the response carries no new refresh token, keep the one from `credentials`.
    func refresh(_ credentials: Credentials) async throws -> Credentials
}
