#if OpenIDConnect
import Foundation
import UserSessions

extension OpenIDConnectClient {
    /// The claims a session's `UserInfo/attributes` never take: the protocol's own.
    static let protocolClaims: Set<String> = [
        "iss", "sub", "aud", "exp", "iat", "nbf", "nonce", "at_hash", "c_hash", "azp", "auth_time", "sid", "jti",
        "acr", "amr", "email", "name", "events",
    ]

    /// Completes a sign-in from the callback's query string (the part of the callback URL after `?`) and the
    /// sealed pending sign-in the browser kept (``AuthorizationRedirect/sealedPendingSignIn``, from its cookie).
    ///
    /// In order: an `error` parameter is refused with its code; the callback must carry a `state`, the browser its
    /// sealed pending sign-in, which must open with ``OpenIDConnectConfiguration/pendingSignInKeys``, name that
    /// same `state` and not have expired, and must not have completed before (in this process, or in the state
    /// store with ``PendingSignInStorage/stateStore``, which consumes it); the `iss` parameter (RFC 9207), when sent
    /// or promised by the provider, must be the issuer; the code is exchanged with the PKCE verifier and the
    /// client's authentication; the ID token is validated (signature, algorithm, `iss`, `aud`/`azp`, `exp`/`iat`,
    /// `nonce`, `at_hash`, `auth_time` when `max_age` was asked); optionally the userinfo `sub` is compared. Only
    /// then is the sign-in recorded (for back-channel logout) and returned.
    ///
    /// A callback URL opened in a browser other than the one that started the sign-in (login CSRF) fails with
    /// ``OpenIDConnectError/Code/pendingSignInMissing`` or ``OpenIDConnectError/Code/stateMismatch``, before any
    /// request to the provider.
    ///
    /// - Throws: ``OpenIDConnectError`` with the code of the first check that failed; nothing is opened.
    public func completeSignIn(callbackQuery: String, sealedPendingSignIn: String?)
        async throws(OpenIDConnectError) -> OpenIDSignIn
    {
        try await measure(.signIn) { () async throws(OpenIDConnectError) in
            try await completeSignInUnmeasured(callbackQuery: callbackQuery, sealedPendingSignIn: sealedPendingSignIn)
        }
    }

    /// ``completeSignIn(callbackQuery:sealedPendingSignIn:)`` without its measurement.
    private func completeSignInUnmeasured(callbackQuery: String, sealedPendingSignIn: String?)
        async throws(OpenIDConnectError) -> OpenIDSignIn
    {
        let parameters = try Self.parseQuery(callbackQuery)
        let now = self.now
        let state = parameters["state"].flatMap { $0.isEmpty ? nil : $0 }
        let keys = configuration.pendingSignInKeys
        let opened = sealedPendingSignIn.flatMap { keys.open($0, binding: sealingBinding) }
        let browserMatches = opened.map { pending in state.map { SignInSecrets.constantTimeEqual($0, pending.state) } }
        if let error = parameters["error"] {
            // The browser's own sign-in was refused: it is consumed.
            if let opened, browserMatches == true { _ = try? await takeFromStore(opened.state, now: now) }
            let code = Self.safeErrorCode(error)
            throw OpenIDConnectError(
                .authorizationDenied, "the provider answered the authorization request with \(code)",
                failureClass: code == "temporarily_unavailable" ? .transient : .terminal, providerErrorCode: code)
        }
        guard state != nil else {
            throw OpenIDConnectError(.malformedCallback, "the callback has no state")
        }
        guard let sealedPendingSignIn, !sealedPendingSignIn.isEmpty else {
            throw OpenIDConnectError(
                .pendingSignInMissing,
                "the callback came without the pending sign-in of the browser that started it (another browser, "
                    + "cookies refused, or expired)")
        }
        guard let pending = opened else {
            throw OpenIDConnectError(
                .pendingSignInUnreadable, "the browser's pending sign-in does not open with this client's keys")
        }
        guard browserMatches == true else {
            throw OpenIDConnectError(
                .stateMismatch, "the callback's state is not the one of the sign-in this browser started")
        }
        guard !pending.isExpired(at: now) else {
            throw OpenIDConnectError(.stateUnknown, "the pending sign-in expired at \(pending.expiresAt)")
        }
        if configuration.pendingSignInStorage.usesStateStore {
            guard try await takeFromStore(pending.state, now: now) != nil else {
                throw OpenIDConnectError(.stateUnknown, "the callback's state was never issued, was used, or expired")
            }
        } else if completedSignIns.contains(pending.state, now: now) {
            throw OpenIDConnectError(.stateUnknown, "the callback's state was already used")
        }
        let metadata = try await providerMetadata()
        if let callbackIssuer = parameters["iss"] {
            guard callbackIssuer.utf8.elementsEqual(metadata.issuer.utf8) else {
                throw OpenIDConnectError(
                    .callbackIssuerMismatch, "the callback's iss is not \(metadata.issuer) (a mix-up)")
            }
        } else if metadata.authorizationResponseIssuerParameterSupported || configuration.profile == .fapi2 {
            throw OpenIDConnectError(.callbackIssuerMismatch, "the callback has no iss though the provider sends it")
        }
        guard let code = parameters["code"], !code.isEmpty else {
            throw OpenIDConnectError(.malformedCallback, "the callback has no code")
        }
        let (credentials, idToken) = try await exchange(code: code, pending: pending, metadata: metadata)
        // The code is spent: a replay of this callback here is refused before reaching the provider.
        completedSignIns.insert(pending.state, until: pending.expiresAt, now: now)
        let claims = try await validateIDToken(idToken, pending: pending, accessToken: credentials.accessToken)
        var userInfoClaims: OpenIDClaims?
        if configuration.readsUserInfo {
            userInfoClaims = try await readUserInfo(metadata: metadata, credentials: credentials, claims)
        }
        return try await finish(
            claims: claims, userInfoClaims: userInfoClaims, credentials: credentials, idToken: idToken,
            pending: pending)
    }

    /// Takes the pending sign-in named `state` from the state store (``PendingSignInStorage/stateStore``).
    private func takeFromStore(_ state: String, now: Date) async throws(OpenIDConnectError) -> PendingSignIn? {
        do {
            return try await stateStore.take(state: state, now: now)
        } catch {
            throw Self.storeFailure(error)
        }
    }

    private func finish(
        claims: OpenIDClaims, userInfoClaims: OpenIDClaims?, credentials: Credentials, idToken: String,
        pending: PendingSignIn
    ) async throws(OpenIDConnectError) -> OpenIDSignIn {
        guard let subject = claims.subject else {
            throw OpenIDConnectError(.missingClaim, "the ID token has no sub")
        }
        guard let identifier = configuration.identifier(claims), !identifier.isEmpty else {
            throw OpenIDConnectError(
                .missingClaim, "the identifier mapping found no identifier in the claims",
                failureClass: .misconfiguration)
        }
        let merged = claims.values.merging(userInfoClaims?.values ?? [:]) { idTokenValue, _ in idTokenValue }
        var attributes: [String: String] = [:]
        for (name, value) in merged where !Self.protocolClaims.contains(name) {
            switch value {
            case .string(let text): attributes[name] = text
            case .bool(let flag): attributes[name] = flag ? "true" : "false"
            default: continue
            }
        }
        let merge = OpenIDClaims(merged)
        let userInfo = UserInfo(id: subject, email: merge.email, name: merge.name, attributes: attributes)
        var credentials = credentials
        credentials.idToken = idToken
        let prototype = UserSessionPrototype(identifier: identifier, userInfo: userInfo, credentials: credentials)
        do {
            try await stateStore.record(
                OpenIDSignInRecord(
                    identifier: identifier, issuer: issuer, subject: subject, sessionID: claims.sessionID,
                    signedInAt: now))
        } catch {
            throw Self.storeFailure(error)
        }
        return OpenIDSignIn(
            prototype: prototype, claims: claims, userInfoClaims: userInfoClaims, context: pending.context)
    }

    /// Exchanges `code` at the token endpoint with the PKCE verifier; returns the credentials and the ID token.
    private func exchange(code: String, pending: PendingSignIn, metadata: OpenIDProviderMetadata)
        async throws(OpenIDConnectError) -> (Credentials, String)
    {
        let secrets = [code, pending.codeVerifier] + [configuration.clientAuthentication.secret].compactMap { $0 }
        let sentAt = now
        let fields = [
            ("grant_type", "authorization_code"), ("code", code),
            ("redirect_uri", pending.redirectURI.absoluteString), ("code_verifier", pending.codeVerifier),
        ]
        let body = try await postAuthenticated(
            fields, to: metadata.tokenEndpoint, named: "the token endpoint", metadata: metadata, secrets: secrets,
            failure: (.tokenExchangeFailed, "the code exchange"), dpopKey: pending.dpopKey)
        let credentials: Credentials
        do {
            credentials = try OAuth2TokenResponse.parseSuccess(
                body, previous: nil, sentAt: sentAt, source: .signIn, dpopKey: pending.dpopKey)
        } catch let error as UserSessionError {
            let code: OpenIDConnectError.Code = error.code == .dpopDowngraded ? .dpopDowngraded : .tokenExchangeFailed
            throw OpenIDConnectError(code, error.message, failureClass: error.failureClass)
        } catch {
            throw OpenIDConnectError(.tokenExchangeFailed, "the token response is unreadable", failureClass: .transient)
        }
        let object = try JSONObject.parse(body, what: "the token response", code: .tokenExchangeFailed)
        guard let idToken = object["id_token"] as? String, !idToken.isEmpty else {
            throw OpenIDConnectError(.missingIDToken, "the token response has no id_token")
        }
        return (credentials, idToken)
    }

    /// Validates an ID token for `pending`: signature and algorithm, then the claims. (Package-wide for the
    /// benchmark's callback-validation workload.)
    package func validateIDToken(_ token: String, pending: PendingSignIn, accessToken: String?)
        async throws(OpenIDConnectError) -> OpenIDClaims
    {
        let now = self.now
        let (claims, algorithm) = try await verifySignedToken(token, what: "the ID token", now: now)
        let skew = configuration.clockSkew.timeInterval
        guard let expiresAt = claims.date("exp") else {
            throw OpenIDConnectError(.missingClaim, "the ID token has no exp")
        }
        guard now.timeIntervalSince(expiresAt) < skew else {
            throw OpenIDConnectError(.tokenExpired, "the ID token expired at \(expiresAt)")
        }
        guard let issuedAt = claims.date("iat") else {
            throw OpenIDConnectError(.missingClaim, "the ID token has no iat")
        }
        guard issuedAt.timeIntervalSince(now) <= skew else {
            throw OpenIDConnectError(.issuedAtInvalid, "the ID token was issued in the future (\(issuedAt))")
        }
        guard let nonce = claims["nonce"]?.stringValue, SignInSecrets.constantTimeEqual(nonce, pending.nonce) else {
            throw OpenIDConnectError(.nonceMismatch, "the ID token's nonce is missing or not the sign-in's")
        }
        if let hash = claims["at_hash"], let accessToken {
            guard let expected = SignInSecrets.accessTokenHash(accessToken, algorithm: algorithm),
                let hash = hash.stringValue, SignInSecrets.constantTimeEqual(hash, expected)
            else {
                throw OpenIDConnectError(.accessTokenHashMismatch, "the ID token's at_hash does not match")
            }
        }
        if let maxAge = pending.maximumAuthenticationAge {
            guard let authTime = claims.date("auth_time"),
                now.timeIntervalSince(authTime) <= Double(maxAge) + skew
            else {
                throw OpenIDConnectError(.authenticationTooOld, "the user authenticated longer than max_age ago")
            }
        }
        guard let subject = claims.subject, !subject.isEmpty else {
            throw OpenIDConnectError(.missingClaim, "the ID token has no sub")
        }
        return claims
    }

    /// What every token from the provider (an ID token, a logout token) passes first: its signature under an allowed
    /// algorithm with a key of the provider's key set (refetched once for an unknown `kid`), then its issuer and
    /// audience. Returns its claims and the algorithm it was signed with.
    func verifySignedToken(_ token: String, what: String, now: Date) async throws(OpenIDConnectError)
        -> (claims: OpenIDClaims, algorithm: String)
    {
        let (claims, algorithm) = try await keys.verify(
            token, what: what, allowedAlgorithms: configuration.acceptedAlgorithms, now: now
        ) { () async throws(OpenIDConnectError) -> Data in try await fetchKeySet() }
        try checkIssuerAndAudience(claims, what: what)
        return (claims, algorithm)
    }

    /// Checks `iss` (exactly the issuer), `aud` (contains the client id) and `azp` (the client id, required when
    /// there are several audiences).
    func checkIssuerAndAudience(_ claims: OpenIDClaims, what: String) throws(OpenIDConnectError) {
        guard let tokenIssuer = claims.issuer, tokenIssuer.utf8.elementsEqual(issuer.utf8) else {
            throw OpenIDConnectError(
                .issuerMismatch, "\(what) was issued by \(claims.issuer ?? "nobody"), not \(issuer)")
        }
        let clientID = configuration.clientID
        let audience = claims.audience
        guard audience.contains(clientID) else {
            throw OpenIDConnectError(.audienceMismatch, "\(what) is not for the client \(clientID)")
        }
        let authorizedParty = claims["azp"]?.stringValue
        if audience.count > 1, authorizedParty == nil {
            throw OpenIDConnectError(.audienceMismatch, "\(what) has several audiences and no azp")
        }
        if let authorizedParty, authorizedParty != clientID {
            throw OpenIDConnectError(.audienceMismatch, "\(what) was issued to another party (azp)")
        }
    }

    private func readUserInfo(metadata: OpenIDProviderMetadata, credentials: Credentials, _ claims: OpenIDClaims)
        async throws(OpenIDConnectError) -> OpenIDClaims
    {
        guard let endpoint = metadata.userInfoEndpoint else {
            throw OpenIDConnectError(
                .userInfoFailed, "the provider has no userinfo endpoint", failureClass: .misconfiguration)
        }
        let body = try await get(
            endpoint, what: "the userinfo endpoint", code: .userInfoFailed, bearer: credentials.accessToken,
            dpopKey: credentials.dpopKey)
        let object = try JSONObject.decode(
            [String: ClaimValue].self, from: body, what: "the userinfo answer", code: .userInfoFailed,
            failureClass: .transient)
        let userInfo = OpenIDClaims(object)
        guard let subject = userInfo.subject, subject == claims.subject else {
            throw OpenIDConnectError(.userInfoFailed, "the userinfo sub is not the ID token's")
        }
        return userInfo
    }

    /// The parameters of a query string; a parameter given twice makes it malformed.
    static func parseQuery(_ query: String) throws(OpenIDConnectError) -> [String: String] {
        var query = Substring(query)
        if query.hasPrefix("?") { query = query.dropFirst() }
        var parameters: [String: String] = [:]
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ text: Substring) throws(OpenIDConnectError) -> String {
                guard let decoded = text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding else {
                    throw OpenIDConnectError(.malformedCallback, "the callback's query is not percent-encoded")
                }
                return decoded
            }
            let name = try decode(parts[0])
            let value = parts.count > 1 ? try decode(parts[1]) : ""
            guard parameters[name] == nil else {
                throw OpenIDConnectError(.malformedCallback, "the callback has \(name) twice")
            }
            parameters[name] = value
        }
        return parameters
    }

    /// An OAuth error code as safe to show: its first 64 characters of `[A-Za-z0-9_.-]`.
    static func safeErrorCode(_ code: String) -> String {
        let safe = code.unicodeScalars.filter {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_.-".unicodeScalars.contains($0))
        }
        let text = String(String.UnicodeScalarView(safe.prefix(64)))
        return text.isEmpty ? "unknown" : text
    }

    /// The `error` of an RFC 6749 §5.2 error body, as ``safeErrorCode(_:)`` shows it; `nil` when the body is none.
    static func providerErrorCode(inBody body: Data) -> String? {
        guard let object = try? JSONObject.parse(body, what: "the error", code: .tokenExchangeFailed),
            let code = object["error"] as? String, !code.isEmpty
        else { return nil }
        return safeErrorCode(code)
    }

    /// The OAuth error code in a token-endpoint failure message ("…: invalid_grant (…)"), if any.
    static func providerErrorCode(in message: String) -> String? {
        guard let colon = message.range(of: ": ", options: .backwards) else { return nil }
        let code = message[colon.upperBound...].prefix { $0 != " " }
        return code.isEmpty || code.contains(where: { !($0.isLetter || $0 == "_") }) ? nil : String(code)
    }
}
#endif
