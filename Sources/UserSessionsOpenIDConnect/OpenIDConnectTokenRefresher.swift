#if OpenIDConnect
import Foundation
import UserSessions

/// Refreshes at the provider's token endpoint like `OAuth2TokenRefresher`, and validates the ID token a refresh
/// response may carry (OpenID Connect Core §12.2) before its tokens are used.
///
/// When the response has an `id_token`, it must verify as the sign-in's did (signature under an allowed algorithm,
/// `iss` the issuer, `aud` holding the client id, `azp` when there are several audiences), must not have expired,
/// its `sub` must be the `sub` of the ID token the credentials hold, and a `nonce`, if any, must be theirs. Then it
/// replaces the stored ID token, so a later `id_token_hint` (``OpenIDConnectClient/signOut(identifier:registry:postLogoutRedirectURI:state:)``)
/// is current. When it fails, the refresh fails with a `UserSessionError` of code `refreshFailed` whose
/// `underlying` is the ``OpenIDConnectError`` (``OpenIDConnectError/Code/subjectChanged`` or the failed check's)
/// and none of the response's tokens are used: terminal, except a failure to fetch the provider's keys, which is
/// transient. A response without an `id_token` keeps the stored one.
///
/// Make one with ``OpenIDConnectClient/tokenRefresher(revocationEndpoint:)`` and give it to the registry.
public struct OpenIDConnectTokenRefresher: TokenRefresher, CustomStringConvertible {
    /// The client whose keys, issuer and client id the ID token is checked against.
    public let client: OpenIDConnectClient
    /// The OAuth 2.0 refresher whose endpoint, authentication and revocation are used.
    public let refresher: OAuth2TokenRefresher

    /// A refresher sending `refresher`'s requests and checking ID tokens with `client`.
    public init(client: OpenIDConnectClient, refresher: OAuth2TokenRefresher) {
        self.client = client
        self.refresher = refresher
    }

    /// Refreshes `credentials`; see the type for the ID token's checks.
    ///
    /// - Throws: What `OAuth2TokenRefresher/refresh(_:)` throws, or a `UserSessionError` of code `refreshFailed`
    ///   wrapping the ``OpenIDConnectError`` of an ID token that fails its checks.
    public func refresh(_ credentials: Credentials) async throws -> Credentials {
        guard let refreshToken = credentials.refreshToken, !refreshToken.isEmpty else {
            throw UserSessionError(
                .noRefresher, "the credentials have no refresh token", failureClass: .misconfiguration)
        }
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope = refresher.scope { fields.append(("scope", scope.sorted().joined(separator: " "))) }
        let sentAt = client.now
        let response = try await refresher.post(
            fields, to: refresher.tokenEndpoint, through: refresher.tokenClient, failureCode: .refreshFailed,
            dpopKey: credentials.dpopKey)
        var refreshed = try OAuth2TokenRefresher.credentials(
            fromTokenResponse: response, refreshing: credentials, sentAt: sentAt)
        let object: [String: Any]
        do throws(OpenIDConnectError) {
            object = try JSONObject.parse(response.body, what: "the token response", code: .tokenExchangeFailed)
        } catch {
            throw UserSessionError(.malformedTokenResponse, error.message, failureClass: .transient, underlying: error)
        }
        guard let value = object["id_token"], !(value is NSNull) else { return refreshed }
        do throws(OpenIDConnectError) {
            guard let idToken = value as? String, !idToken.isEmpty else {
                throw OpenIDConnectError(.malformedToken, "the refresh response's id_token is not a string")
            }
            try await client.validateRefreshedIDToken(idToken, original: credentials.idToken)
            refreshed.idToken = idToken
            return refreshed
        } catch {
            throw UserSessionError(
                .refreshFailed, "the refresh response's ID token was refused (\(error.code))",
                failureClass: error.failureClass == .transient ? .transient : .terminal, underlying: error)
        }
    }

    /// Revokes with ``refresher``.
    public func revoke(_ credentials: Credentials) async throws { try await refresher.revoke(credentials) }

    /// Whether ``refresher`` can revoke.
    public var canRevoke: Bool { refresher.canRevoke }

    /// The DPoP proofs of ``refresher``.
    public var dpop: DPoPProofs? { refresher.dpop }

    /// The refresher's description (its endpoint; never a secret).
    public var description: String { "OpenIDConnectTokenRefresher(\(refresher))" }
}

extension OpenIDConnectClient {
    /// A refresher at the provider's token endpoint with this client's authentication and timeout, which checks
    /// the ID token of every refresh response (``OpenIDConnectTokenRefresher``).
    ///
    /// - Parameter revocationEndpoint: Where signing out revokes the tokens (RFC 7009). Default: the discovery
    ///   document's `revocation_endpoint`; with none, signing out revokes nothing at the provider.
    /// - Throws: The errors of ``providerMetadata()``; ``OpenIDConnectError/Code/invalidConfiguration`` for an
    ///   endpoint that is neither HTTPS nor loopback HTTP.
    public func tokenRefresher(revocationEndpoint: URL? = nil) async throws(OpenIDConnectError)
        -> OpenIDConnectTokenRefresher
    {
        let metadata = try await providerMetadata()
        do {
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: metadata.tokenEndpoint,
                revocationEndpoint: revocationEndpoint ?? metadata.revocationEndpoint,
                clientAuthentication: configuration.clientAuthentication, requestTimeout: configuration.requestTimeout,
                clock: clock, transport: transport, dpop: configuration.dpop)
            return OpenIDConnectTokenRefresher(client: self, refresher: refresher)
        } catch {
            throw OpenIDConnectError(
                .invalidConfiguration, "an endpoint of the provider is neither HTTPS nor loopback HTTP",
                failureClass: .misconfiguration, underlying: error)
        }
    }

    /// The checks of OpenID Connect Core §12.2 on the ID token of a refresh response: signature, `iss`, `aud`,
    /// `exp`, and `sub` (and `nonce`, when there is one) equal to those of `original`, the ID token it replaces.
    func validateRefreshedIDToken(_ token: String, original: String?) async throws(OpenIDConnectError) {
        let now = self.now
        let what = "the refresh response's ID token"
        let (claims, _) = try await verifySignedToken(token, what: what, now: now)
        let skew = configuration.clockSkew.timeInterval
        guard let expiresAt = claims.date("exp") else {
            throw OpenIDConnectError(.missingClaim, "\(what) has no exp")
        }
        guard now.timeIntervalSince(expiresAt) < skew else {
            throw OpenIDConnectError(.tokenExpired, "\(what) expired at \(expiresAt)")
        }
        guard let subject = claims.subject, !subject.isEmpty else {
            throw OpenIDConnectError(.missingClaim, "\(what) has no sub")
        }
        guard let original, let originalClaims = Self.unverifiedClaims(of: original) else { return }
        guard originalClaims.subject == subject else {
            throw OpenIDConnectError(.subjectChanged, "\(what) names another sub than the session's ID token")
        }
        if let nonce = claims["nonce"]?.stringValue {
            guard let originalNonce = originalClaims["nonce"]?.stringValue,
                SignInSecrets.constantTimeEqual(nonce, originalNonce)
            else {
                throw OpenIDConnectError(.nonceMismatch, "\(what) carries a nonce that is not the sign-in's")
            }
        }
    }

    /// The claims of an ID token this client validated earlier (it is stored with the session), read without
    /// verifying it again; `nil` when it is not readable.
    static func unverifiedClaims(of token: String) -> OpenIDClaims? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = base64URLDecode(parts[1]),
            let values = try? JSONDecoder().decode([String: ClaimValue].self, from: payload)
        else { return nil }
        return OpenIDClaims(values)
    }
}
#endif
