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

    /// Revokes `credentials` at the authorization server (for OAuth 2.0, RFC 7009), so they stop working
    /// everywhere, not only here.
    ///
    /// Optional: the default implementation does nothing and returns at once, so refreshers written before this
    /// requirement existed keep compiling and behave as before. ``OAuth2TokenRefresher`` implements it when it has a
    /// revocation endpoint.
    ///
    /// - Important: Revoking must not change local state (stores, sessions); callers sign out locally whether or
    ///   not it succeeds. Honour cancellation, and throw a ``UserSessionError`` with a
    ///   ``UserSessionError/failureClass`` when the server refused. If you implement it, implement ``canRevoke``
    ///   too: ``UserSessionController/closeAndClear()`` calls this only when ``canRevoke`` is `true`.
    func revoke(_ credentials: Credentials) async throws

    /// Whether ``revoke(_:)`` does anything.
    ///
    /// ``UserSessionController/closeAndClear()`` and ``UserSessionRegistry/closeAndClear(identifier:)`` revoke the
    /// credentials they remove only when this is `true` (and
    /// ``UserSessionController/Configuration/revokesOnSignOut`` is on), so a refresher that cannot revoke costs a
    /// sign-out nothing, not even a read of the stored credentials. The default is `false`;
    /// ``OAuth2TokenRefresher`` returns `true` when it has a revocation endpoint.
    var canRevoke: Bool { get }

    /// The DPoP proofs (RFC 9449) this refresher sends for credentials bound to a ``DPoPKey``, or `nil`.
    ///
    /// ``UserSessionController/authorizationHeaders(method:url:)`` and
    /// ``UserSessionController/withAuthorization(method:url:_:)`` sign their proofs with it, so the refresher and
    /// the requests made with its tokens share one configuration and one memory of server nonces. The default is
    /// `nil`; ``OAuth2TokenRefresher`` returns its ``OAuth2TokenRefresher/dpop``.
    var dpop: DPoPProofs? { get }
}

extension TokenRefresher {
    /// Does nothing: a refresher that cannot revoke leaves the credentials valid at the server.
    public func revoke(_ credentials: Credentials) async throws {}

    /// `false`: the default ``revoke(_:)`` does nothing.
    public var canRevoke: Bool { false }

    /// `nil`: bearer tokens only.
    public var dpop: DPoPProofs? { nil }
}
