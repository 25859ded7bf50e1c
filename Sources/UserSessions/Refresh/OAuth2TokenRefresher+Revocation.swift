import Foundation

extension OAuth2TokenRefresher {
    /// `true` when there is a ``revocationEndpoint``: then ``UserSessionController/closeAndClear()`` revokes the
    /// credentials it removes (unless ``UserSessionController/Configuration/revokesOnSignOut`` is off).
    public var canRevoke: Bool { revocationEndpoint != nil }

    /// Revokes `credentials` at ``revocationEndpoint`` (RFC 7009), so the authorization server stops honouring them.
    ///
    /// It sends the refresh token with `token_type_hint=refresh_token` (revoking a refresh token revokes its whole
    /// grant at servers that follow RFC 7009 §2.1), or the access token with `token_type_hint=access_token` when there
    /// is no refresh token, authenticating the client as for a refresh. A 2xx answer is success; RFC 7009 has the
    /// server answer 200 for tokens it does not know too, so revoking twice is not an error. Without a revocation
    /// endpoint, or with empty tokens, nothing is sent.
    ///
    /// This does not touch any local state: signing out locally is the caller's (or the controller's) business.
    ///
    /// - Throws: ``UserSessionError`` with a ``UserSessionError/failureClass``: code
    ///   ``UserSessionError/Code/revocationFailed`` for an error answer (classified as for refreshes: 408, 429 and
    ///   5xx, such as RFC 7009's 503, are transient; other 4xx, such as `unsupported_token_type` or
    ///   `invalid_client`, are misconfiguration), a redirect or a body over the size limit (transient), and a
    ///   cancelled caller (cancelled); ``UserSessionError/Code/transportFailure`` (transient) when no answer came in
    ///   time. Errors never contain the tokens or the client secret.
    public func revoke(_ credentials: Credentials) async throws {
        guard let revocationEndpoint else { return }
        let (token, hint) =
            credentials.isRefreshable
            ? (credentials.refreshToken ?? "", "refresh_token") : (credentials.accessToken, "access_token")
        guard !token.isEmpty else { return }
        let response = try await post(
            [("token", token), ("token_type_hint", hint)], to: revocationEndpoint, through: revocationClient,
            failureCode: .revocationFailed)
        guard (200..<300).contains(response.statusCode) else {
            let secrets = [credentials.accessToken, credentials.refreshToken, clientAuthentication.secret]
            throw OAuth2TokenResponse.failure(
                status: response.statusCode, body: response.body, secrets: secrets.compactMap { $0 },
                endpoint: "the revocation endpoint", code: .revocationFailed)
        }
    }
}
