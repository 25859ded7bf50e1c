#if OpenIDConnect
import Foundation
import UserSessions

extension OpenIDConnectClient {
    /// The event a back-channel logout token must carry.
    public static let backChannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"

    /// Handles a back-channel logout (OpenID Connect Back-Channel Logout 1.0): validates `logoutToken` (the
    /// `logout_token` form field of the provider's POST) and signs out, through `registry`, every session signed in
    /// with its `sid` (or, without one, its `sub`).
    ///
    /// The token must verify as an ID token does (signature, algorithm, `iss`, `aud`), carry an `iat` neither in the
    /// future nor older than ``OpenIDConnectConfiguration/maximumLogoutTokenAge``, the back-channel logout event,
    /// a `sub` or a `sid`, no `nonce`, and a `jti` not seen before (remembered in the shared state store). With the
    /// PostgreSQL token store the sign-out reaches every instance of a fleet.
    ///
    /// Answer the provider's POST with 200 when this returns, and 400 when it throws.
    ///
    /// - Returns: The identifiers signed out.
    /// - Throws: ``OpenIDConnectError``, in two kinds:
    ///   - a refusal of the token (``OpenIDConnectError/Code/invalidLogoutToken``,
    ///     ``OpenIDConnectError/Code/logoutTokenReplayed``, ``OpenIDConnectError/Code/unknownSession``, a signature
    ///     or claim code) or ``OpenIDConnectError/Code/storeFailure`` before any sign-out: nobody was signed out;
    ///   - ``OpenIDConnectError/Code/signOutFailed`` (transient, the first `closeAndClear` failure as
    ///     ``OpenIDConnectError/underlying``): thrown after every session concerned was tried, and the others are
    ///     signed out. The token's `jti` is already remembered (so two deliveries never race), so the provider's
    ///     retry of the same token is refused as a replay: the session that failed stays stored until it is signed
    ///     out another way. Log the error.
    @discardableResult
    public func handleBackChannelLogout(logoutToken: String, registry: UserSessionRegistry)
        async throws(OpenIDConnectError) -> [String]
    {
        try await measure(.backChannelLogout) { () async throws(OpenIDConnectError) in
            try await handleBackChannelLogoutUnmeasured(logoutToken: logoutToken, registry: registry)
        }
    }

    /// ``handleBackChannelLogout(logoutToken:registry:)`` without its measurement.
    private func handleBackChannelLogoutUnmeasured(logoutToken: String, registry: UserSessionRegistry)
        async throws(OpenIDConnectError) -> [String]
    {
        let claims = try await validateLogoutToken(logoutToken)
        let records: [OpenIDSignInRecord]
        do {
            records = try await stateStore.records(
                issuer: issuer, subject: claims.subject, sessionID: claims.sessionID)
        } catch {
            throw Self.storeFailure(error)
        }
        guard !records.isEmpty else {
            throw OpenIDConnectError(.unknownSession, "no session was signed in with the logout token's sid or sub")
        }
        var identifiers: [String] = []
        for record in records where !identifiers.contains(record.identifier) { identifiers.append(record.identifier) }
        var failure: (any Error)?
        var failed = 0
        for identifier in identifiers {
            do {
                try await registry.closeAndClear(identifier: identifier)
                try? await stateStore.forget(identifier: identifier, issuer: issuer)
            } catch {
                failure = failure ?? error
                failed += 1
            }
        }
        if let failure {
            throw OpenIDConnectError(
                .signOutFailed,
                "\(failed) of the \(identifiers.count) sessions the logout token concerns could not be signed out "
                    + "(\(type(of: failure)))", failureClass: .transient, underlying: failure)
        }
        return identifiers
    }

    /// Validates a back-channel logout token and remembers its `jti`; returns its claims.
    func validateLogoutToken(_ token: String) async throws(OpenIDConnectError) -> OpenIDClaims {
        let now = self.now
        let (claims, _) = try await verifySignedToken(token, what: "the logout token", now: now)
        let skew = configuration.clockSkew.timeInterval
        let maximumAge = configuration.maximumLogoutTokenAge.timeInterval
        guard let issuedAt = claims.date("iat") else {
            throw OpenIDConnectError(.missingClaim, "the logout token has no iat")
        }
        guard issuedAt.timeIntervalSince(now) <= skew, now.timeIntervalSince(issuedAt) <= maximumAge + skew else {
            throw OpenIDConnectError(.issuedAtInvalid, "the logout token's iat is in the future or too old")
        }
        if let expiresAt = claims.date("exp"), now.timeIntervalSince(expiresAt) >= skew {
            throw OpenIDConnectError(.tokenExpired, "the logout token expired")
        }
        guard case .object(let events) = claims["events"], events[Self.backChannelLogoutEvent] != nil else {
            throw OpenIDConnectError(.invalidLogoutToken, "the logout token has no back-channel logout event")
        }
        guard claims["nonce"] == nil else {
            throw OpenIDConnectError(.invalidLogoutToken, "the logout token has a nonce (it is an ID token)")
        }
        guard claims.subject != nil || claims.sessionID != nil else {
            throw OpenIDConnectError(.invalidLogoutToken, "the logout token has neither sub nor sid")
        }
        guard let tokenID = claims["jti"]?.stringValue, !tokenID.isEmpty else {
            throw OpenIDConnectError(.missingClaim, "the logout token has no jti")
        }
        // Remembered until it is too old to be accepted anyway.
        let rememberedUntil = issuedAt.addingTimeInterval(maximumAge + 2 * skew)
        let fresh: Bool
        do {
            fresh = try await stateStore.remember(
                logoutTokenID: tokenID, issuer: issuer, until: rememberedUntil, now: now)
        } catch {
            throw Self.storeFailure(error)
        }
        guard fresh else {
            throw OpenIDConnectError(.logoutTokenReplayed, "the logout token was already used (jti)")
        }
        return claims
    }
}
#endif
