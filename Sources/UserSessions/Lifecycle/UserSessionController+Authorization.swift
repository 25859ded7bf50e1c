import Foundation

extension UserSessionController {
    /// The headers that authorize a `method` request to `url` as the session's user, for your own HTTP client:
    /// `Authorization: Bearer <token>`, or for credentials bound with DPoP (``Credentials/dpopKey``)
    /// `Authorization: DPoP <token>` and a fresh `DPoP` proof for this method and URL (RFC 9449 §7).
    ///
    /// The token is the one ``accessToken()`` returns (refreshed first when it must be). Make one call per request: a
    /// proof is for one request only. Hand the `DPoP-Nonce` header of the answers to the refresher's
    /// ``DPoPProofs/remember(nonce:for:)``, or use ``withAuthorization(method:url:_:)``, which does it and answers a
    /// resource server's nonce challenge.
    ///
    /// - Throws: What ``accessToken()`` throws; ``UserSessionError/Code/dpopProofFailed`` when the credentials are
    ///   bound to a key and the refresher has no ``TokenRefresher/dpop``, or the proof cannot be made.
    nonisolated(nonsending) public func authorizationHeaders(method: String, url: URL) async throws
        -> HTTPTransportHeaders
    {
        try await authorizationHeaders(token: accessToken(), method: method, url: url)
    }

    /// Sends one request with the session's authorization through `send`, and returns its answer.
    ///
    /// `send` gets the headers of ``authorizationHeaders(method:url:)`` to add to the request (the same `method` and
    /// `url`), and returns the server's answer. Then:
    /// - every `DPoP-Nonce` the server sends is remembered for its origin;
    /// - a DPoP nonce challenge (401 with `WWW-Authenticate: DPoP error="use_dpop_nonce"` and a `DPoP-Nonce`) is
    ///   answered by sending once more, with the same token and a proof carrying the new nonce; it costs no refresh;
    /// - another 401 is an authentication failure as for ``withAccessToken(isAuthenticationFailure:_:)``: the token
    ///   is refreshed once (shared with concurrent callers) and the request sent once more; the answer to that is
    ///   returned whatever it is.
    ///
    /// `send` may therefore run up to four times; it runs in the caller's isolation and is not retained.
    ///
    /// - Throws: What ``authorizationHeaders(method:url:)`` throws; what `send` throws; the refresh's error when the
    ///   refresh for a replay fails; ``UserSessionError/Code/sessionNotOpen`` when the session of the first attempt
    ///   ended before the replay.
    nonisolated(nonsending) public func withAuthorization(
        method: String, url: URL, _ send: (HTTPTransportHeaders) async throws -> HTTPTransportResponse
    ) async throws -> HTTPTransportResponse {
        do {
            return try await withAccessToken(isAuthenticationFailure: { $0 is RefusedAuthorization }) { token in
                let answer = try await DPoPProofs.answeringNonceChallenge(with: gate.refresher?.dpop, from: url) {
                    try await send(authorizationHeaders(token: token, method: method, url: url))
                }
                if answer.statusCode == 401 { throw RefusedAuthorization(answer: answer) }
                return answer
            }
        } catch let refused as RefusedAuthorization {
            return refused.answer
        }
    }

    /// The headers for `token`, with a proof signed by the session's DPoP key when it has one. The key belongs to the
    /// session's credentials and no refresh changes it, so the current credentials' key is the token's.
    nonisolated func authorizationHeaders(token: String, method: String, url: URL) async throws
        -> HTTPTransportHeaders
    {
        try await DPoPProofs.authorization(
            token: token, key: gate.currentCredentials()?.dpopKey, proofs: gate.refresher?.dpop,
            holder: "the controller's refresher (give it a refresher with them, such as "
                + "OpenIDConnectClient.tokenRefresher())",
            method: method, url: url)
    }
}

/// A 401 from the server `withAuthorization` sent to: the replay's trigger, carrying the answer to return.
private struct RefusedAuthorization: Error {
    let answer: HTTPTransportResponse
}
