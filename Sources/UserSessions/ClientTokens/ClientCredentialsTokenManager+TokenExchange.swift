extension ClientCredentialsTokenManager {
    /// An access token for `audience` on behalf of the user of `controller`: the user's access token exchanged at the
    /// token endpoint (RFC 8693), cached per user and audience (and scopes and resources).
    ///
    /// The request sends `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`, the user's current access
    /// token as `subject_token` (of type `urn:ietf:params:oauth:token-type:access_token`, obtained through
    /// ``UserSessionController/accessToken()``), `requested_token_type` access token, `audience`, and the scopes and
    /// resources, authenticated as the manager's client. It follows the rules of ``accessToken(for:)``: one request
    /// per expiry per user and audience, the same windows and failure classes. Exchanged tokens are kept in memory
    /// only, never in the ``Configuration/store``.
    ///
    /// The cached tokens of a user are dropped when the user signs out: add ``signOutObserver`` to the observers of
    /// the controllers' configuration (a ``UserSessionRegistry``'s controllers share it), or call
    /// ``forgetExchangedTokens(for:)`` yourself. A request in flight when the user signs out fails its callers with
    /// ``UserSessionError/Code/sessionNotOpen`` and its token is not kept.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when `controller` has no open session; what
    ///   ``accessToken(for:)`` throws; what ``UserSessionController/accessToken()`` throws for the subject token. A
    ///   subject token the server refuses (`invalid_grant`) is a misconfiguration of that request, not terminal.
    nonisolated(nonsending) public func exchangedToken(
        for controller: UserSessionController, audience: String, scopes: Set<String> = [],
        resources: Set<String> = []
    ) async throws -> String {
        let session = controller.session
        guard session.state == .opened, let identifier = session.identifier else {
            throw UserSessionError(.sessionNotOpen, "the user's session is not open: no token is exchanged for it")
        }
        let key = ClientTokenKey(scopes: scopes, resources: resources, subject: identifier, audience: audience)
        let now = clock.nowSeconds()
        if case .token(let token) = hotRead(key, now: now) { return token }
        let grant = ClientTokenGrant.exchange(audience: audience) { try await controller.accessToken() }
        return try await token(for: key, rejected: nil, grant: grant, now: now)
    }

    /// Drops every exchanged token of the user `identifier` (compared by its bytes). Requests in flight for that user
    /// fail their callers with ``UserSessionError/Code/sessionNotOpen`` and keep nothing.
    public func forgetExchangedTokens(for identifier: String) {
        let user = ExactIdentifier(identifier)
        let error = UserSessionError(.sessionNotOpen, "the user signed out: the exchanged token was dropped")
        for key in drop(subject: user, failingWith: error) {
            notify(.forgotten, key: key)
        }
    }

    /// An observer that drops a user's exchanged tokens when the user signs out (``UserSessionController/closeAndClear()``,
    /// a sign-out on another instance) or the session becomes invalid. Add it to
    /// ``UserSessionController/Configuration/observers``.
    public var signOutObserver: any UserSessionObserver { SignOutObserver(manager: self) }

    /// Drops a user's exchanged tokens at sign-out.
    private struct SignOutObserver: UserSessionObserver {
        let manager: ClientCredentialsTokenManager

        func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
            switch event.kind {
            case .closed(.cleared), .closed(.clearedElsewhere), .invalidated:
                if let identifier = event.session.identifier { manager.forgetExchangedTokens(for: identifier) }
            default:
                break
            }
        }
    }
}
