import Foundation

/// A ``TokenRefresher`` for OAuth 2.0 token endpoints (RFC 6749 §6, the refresh-token grant), which can also revoke
/// tokens (RFC 7009, see ``revoke(_:)``).
///
/// It sends a form-encoded `POST` with `grant_type=refresh_token`, the refresh token and, if configured, the
/// requested `scope`, authenticating the client as configured by ``ClientAuthentication``. It parses the JSON
/// response (`access_token`, `token_type`, `expires_in`, optional `refresh_token` and `scope`):
/// - the old refresh token is kept when the response carries none, and the old granted permissions when it
///   carries no `scope`;
/// - the expiry is computed from the time the request was *sent*, so a slow response never makes the token look
///   fresher than it is.
///
/// Failures are ``UserSessionError``s with code ``UserSessionError/Code/refreshFailed`` (or
/// ``UserSessionError/Code/malformedTokenResponse``, or ``UserSessionError/Code/transportFailure`` when no answer
/// came) and a ``UserSessionError/failureClass``:
/// - ``RefreshFailureClass/terminal``: `invalid_grant` (the refresh token was rejected);
/// - ``RefreshFailureClass/misconfiguration``: `invalid_client`, `unauthorized_client`, `unsupported_grant_type`,
///   `invalid_scope`, `invalid_request`, any other error code, and other 4xx statuses (except 408 and 429);
/// - ``RefreshFailureClass/transient``: network errors, timeouts, 408, 429, 5xx, redirects, bodies larger than
///   ``maximumResponseSize``, and bodies that are not a valid JSON token response (including JSON with duplicate
///   members or nested more than 128 levels deep);
/// - ``RefreshFailureClass/cancelled``: the calling task was cancelled.
/// The same reading of a response is available on its own as
/// ``credentials(fromTokenResponse:refreshing:sentAt:)``.
///
/// Requests go through an ``HTTPTransport`` (by default a ``URLSessionHTTPTransport``); the rules above, the size
/// limit, the refusal of redirects and the timeout hold whichever transport is used.
///
/// - Important: Redirects are never followed, so the refresh token and the client secret are only ever sent to
///   the configured endpoints. The endpoints must use HTTPS unless they are a loopback address. Errors carry the
///   OAuth `error` code and `error_description` only — never the tokens, the secret or the raw body.
public struct OAuth2TokenRefresher: TokenRefresher, Sendable {
    /// The token endpoint.
    public let tokenEndpoint: URL
    /// The RFC 7009 revocation endpoint, if any; without one ``revoke(_:)`` does nothing.
    public let revocationEndpoint: URL?
    /// How the client authenticates.
    public let clientAuthentication: ClientAuthentication
    /// The scope to request, or `nil` to request the scope originally granted (RFC 6749 §6).
    public let scope: Set<String>?
    /// How long one request may take. Default 30 s.
    public let requestTimeout: Duration
    /// The transport requests go through.
    public let transport: any HTTPTransport
    /// The DPoP proofs (RFC 9449) sent with the requests for credentials that carry a ``Credentials/dpopKey``, or
    /// `nil` for bearer tokens only. Credentials with a key and a refresher without proofs fail with
    /// ``UserSessionError/Code/dpopProofFailed`` (misconfiguration), never as an unbound request.
    public let dpop: DPoPProofs?
    /// The largest response body read: 1 MiB. An endpoint that sends more is cut off, and the refresh fails as
    /// transient with ``UserSessionError/Code/malformedTokenResponse``, without reading the rest.
    public static let maximumResponseSize = GuardedHTTPClient.maximumResponseBytes
    let clock: SessionClock
    package let tokenClient: GuardedHTTPClient
    let revocationClient: GuardedHTTPClient

    /// Creates a refresher for `tokenEndpoint`.
    ///
    /// - Parameters:
    ///   - tokenEndpoint: The token endpoint; `https`, or `http` on a loopback host (`localhost`, `127.0.0.0/8`,
    ///     `::1`).
    ///   - revocationEndpoint: The RFC 7009 token revocation endpoint, under the same rule; `nil` (the default)
    ///     makes ``revoke(_:)`` do nothing.
    ///   - clientAuthentication: How the client authenticates to the endpoints.
    ///   - scope: The scope to request; `nil` (the default) asks for the originally granted scope.
    ///   - requestTimeout: How long one request may take before it fails as transient. Default 30 s. Values that
    ///     are not positive mean 1 ms.
    ///   - clock: The clock that stamps when a request was sent (expiry is computed from it). Default
    ///     ``SessionClock/system``; pass the controller's clock in simulations.
    ///   - transport: The transport requests go through; `nil` (the default) creates a
    ///     ``URLSessionHTTPTransport``.
    ///   - dpop: The DPoP proofs for credentials bound to a key; `nil` (the default) for bearer tokens only.
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` for plain HTTP to a non-loopback host, or a URL that is
    ///   neither HTTP nor HTTPS.
    public init(
        tokenEndpoint: URL,
        revocationEndpoint: URL? = nil,
        clientAuthentication: ClientAuthentication,
        scope: Set<String>? = nil,
        requestTimeout: Duration = .seconds(30),
        clock: SessionClock = .system,
        transport: (any HTTPTransport)? = nil,
        dpop: DPoPProofs? = nil
    ) throws {
        try SecureEndpoint.check(tokenEndpoint, describedAs: "the token endpoint")
        if let revocationEndpoint {
            try SecureEndpoint.check(revocationEndpoint, describedAs: "the revocation endpoint")
        }
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.clientAuthentication = clientAuthentication
        self.scope = scope
        self.requestTimeout = requestTimeout
        self.clock = clock
        self.dpop = dpop
        let transport = transport ?? URLSessionHTTPTransport()
        self.transport = transport
        tokenClient = GuardedHTTPClient(transport: transport, endpointName: "the token endpoint")
        revocationClient = GuardedHTTPClient(transport: transport, endpointName: "the revocation endpoint")
    }

    /// Exchanges the refresh token in `credentials` for new credentials.
    ///
    /// - Throws: ``UserSessionError`` with a ``UserSessionError/failureClass`` as described on the type;
    ///   ``UserSessionError/Code/noRefresher`` (misconfiguration) when `credentials` has no refresh token.
    public func refresh(_ credentials: Credentials) async throws -> Credentials {
        guard let refreshToken = credentials.refreshToken, !refreshToken.isEmpty else {
            throw UserSessionError(
                .noRefresher, "the credentials have no refresh token", failureClass: .misconfiguration)
        }
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope { fields.append(("scope", scope.sorted().joined(separator: " "))) }
        let secrets = [refreshToken, credentials.accessToken, clientAuthentication.secret].compactMap { $0 }
        let sentAt = clock.now()
        let response = try await post(
            fields, to: tokenEndpoint, through: tokenClient, failureCode: .refreshFailed, dpopKey: credentials.dpopKey)
        return try OAuth2TokenResponse.credentials(
            status: response.statusCode, body: response.body, previous: credentials, sentAt: sentAt,
            secrets: secrets)
    }

    /// Reads a token endpoint's answer to a refresh-token grant exactly as ``refresh(_:)`` does: the new credentials,
    /// or the ``UserSessionError`` with the ``UserSessionError/failureClass`` described on the type (RFC 6749 §5.2).
    ///
    /// Use it when you send the request yourself. `previous` supplies the refresh token and granted permissions the
    /// response may leave out, and its tokens are kept out of error messages.
    ///
    /// - Parameters:
    ///   - response: The response; a 3xx counts as a refused redirect (transient).
    ///   - previous: The credentials that were refreshed.
    ///   - sentAt: When the request was sent; the expiry counts from here.
    public static func credentials(
        fromTokenResponse response: HTTPTransportResponse, refreshing previous: Credentials, sentAt: Date
    ) throws -> Credentials {
        try OAuth2TokenResponse.credentials(
            status: response.statusCode, body: response.body, previous: previous, sentAt: sentAt,
            secrets: [previous.accessToken, previous.refreshToken].compactMap { $0 })
    }

    /// Sends `fields` as a form, with the client's authentication and, for credentials bound to `dpopKey`, a DPoP
    /// proof; returns the answer whatever its status (except 3xx).
    ///
    /// A server that refuses the proof's nonce (`use_dpop_nonce`, with a new `DPoP-Nonce`) is asked once more with
    /// a new proof and a new client assertion; it refused the first request whole, so nothing was spent.
    package func post(
        _ fields: [(String, String)], to endpoint: URL, through client: GuardedHTTPClient,
        failureCode: UserSessionError.Code, dpopKey: DPoPKey? = nil
    ) async throws -> HTTPTransportResponse {
        try await DPoPProofs.answeringNonceChallenge(with: dpopKey == nil ? nil : dpop, from: endpoint) {
            try await postOnce(fields, to: endpoint, through: client, failureCode: failureCode, dpopKey: dpopKey)
        }
    }

    private func postOnce(
        _ fields: [(String, String)], to endpoint: URL, through client: GuardedHTTPClient,
        failureCode: UserSessionError.Code, dpopKey: DPoPKey?
    ) async throws -> HTTPTransportResponse {
        var fields = fields
        var headers: HTTPTransportHeaders = [
            ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"),
            ("Cache-Control", "no-store"),
        ]
        switch clientAuthentication {
        case .clientSecretBasic(let id, let secret):
            // RFC 6749 §2.3.1: id and secret are form-urlencoded before they are joined and base64-encoded.
            let pair = FormURLEncoding.percentEncode(id) + ":" + FormURLEncoding.percentEncode(secret)
            headers.add(name: "Authorization", value: "Basic " + Data(pair.utf8).base64EncodedString())
        case .clientSecretPost(let id, let secret):
            fields.append(("client_id", id))
            fields.append(("client_secret", secret))
        case .publicClient(let id):
            fields.append(("client_id", id))
        case .privateKeyJWT(let id, let audience, let signer):
            let assertion = try await Self.assertion(from: signer, id: id, audience: audience.value(for: endpoint))
            fields += [
                ("client_id", id), ("client_assertion_type", Self.jwtBearerAssertionType),
                ("client_assertion", assertion),
            ]
        }
        if let dpopKey {
            let proofs = try DPoPProofs.required(dpop, by: "the refresher")
            headers.add(name: "DPoP", value: try await proofs.proof(key: dpopKey, method: "POST", url: endpoint))
        }
        do {
            var response = try await client.send(
                .post, endpoint, headers: headers, body: Data(FormURLEncoding.encode(fields).utf8),
                timeout: requestTimeout)
            // A server may echo what it was sent in an error description: the assertion and the proof are
            // credentials until they expire, and are never read back.
            if let assertion = fields.first(where: { $0.0 == "client_assertion" })?.1 {
                response.body = Self.redacting(Data(assertion.utf8), in: response.body)
            }
            if let proof = headers["DPoP"] { response.body = Self.redacting(Data(proof.utf8), in: response.body) }
            return response
        } catch let failure as HTTPExchangeFailure {
            throw Self.error(for: failure, code: failureCode)
        }
    }

    /// `client_assertion_type` of a JWT client assertion (RFC 7523 §2.2).
    static let jwtBearerAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

    /// A fresh assertion from `signer`; its failure is a misconfiguration that names only the error's type, since
    /// the signer's errors are not ours to trust with the key.
    static func assertion(from signer: any ClientAssertionSigner, id: String, audience: String) async throws -> String {
        do {
            return try await signer.makeClientAssertion(clientID: id, audience: audience)
        } catch is CancellationError {
            throw UserSessionError(
                .invalidConfiguration, "cancelled while making the client assertion", failureClass: .cancelled)
        } catch {
            throw UserSessionError(
                .invalidConfiguration, "the client assertion could not be made (\(type(of: error)))",
                failureClass: .misconfiguration)
        }
    }

    /// `body` with every occurrence of `secret` replaced by `<redacted>`.
    static func redacting(_ secret: Data, in body: Data) -> Data {
        guard !secret.isEmpty, body.range(of: secret) != nil else { return body }
        var body = body
        while let range = body.range(of: secret) { body.replaceSubrange(range, with: Data("<redacted>".utf8)) }
        return body
    }

    /// The error for an exchange that brought no usable answer: `code` for a redirect (and a body over the limit,
    /// which is ``UserSessionError/Code/malformedTokenResponse`` for refreshes), `transportFailure` when no answer came.
    package static func error(for failure: HTTPExchangeFailure, code: UserSessionError.Code) -> UserSessionError {
        switch failure.kind {
        case .cancelled:
            return UserSessionError(code, failure.message, failureClass: .cancelled, underlying: failure.underlying)
        case .responseTooLarge:
            let tooLargeCode = code == .refreshFailed ? .malformedTokenResponse : code
            return UserSessionError(tooLargeCode, failure.message, failureClass: .transient)
        case .redirected:
            return UserSessionError(code, failure.message, failureClass: .transient)
        case .timedOut, .failed:
            return UserSessionError(
                .transportFailure, failure.message, failureClass: .transient, underlying: failure.underlying)
        }
    }
}

extension OAuth2TokenRefresher {
    /// How the client authenticates to the token endpoint (RFC 6749 §2.3).
    ///
    /// Its descriptions never show the client secret or the signing key.
    public enum ClientAuthentication: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// HTTP Basic authentication (`client_secret_basic`): the form-urlencoded id and secret, joined by `:`,
        /// base64-encoded in the `Authorization` header.
        case clientSecretBasic(id: String, secret: String)
        /// The id and secret as `client_id` and `client_secret` form fields (`client_secret_post`).
        case clientSecretPost(id: String, secret: String)
        /// A public client: `client_id` only.
        case publicClient(id: String)
        /// `private_key_jwt` (RFC 7523 §2.2, OpenID Connect Core §9): `client_id` and a fresh assertion from
        /// `signer`, addressed to `audience`, with every request. FAPI 2.0 requires
        /// ``ClientAssertionAudience/issuer(_:)``. The `OpenIDConnect` trait's `PrivateKeyJWTSigner` signs with
        /// jwt-kit.
        case privateKeyJWT(id: String, audience: ClientAssertionAudience, signer: any ClientAssertionSigner)

        package var secret: String? {
            switch self {
            case .clientSecretBasic(_, let secret), .clientSecretPost(_, let secret): return secret
            case .publicClient, .privateKeyJWT: return nil
            }
        }

        /// The client id, whichever the method.
        package var clientID: String {
            switch self {
            case .clientSecretBasic(let id, _), .clientSecretPost(let id, _), .publicClient(let id),
                .privateKeyJWT(let id, _, _):
                id
            }
        }

        /// The kind of authentication and the client id; the secret shows as `<redacted>`, the signer by its type.
        public var description: String {
            switch self {
            case .clientSecretBasic(let id, _): return "clientSecretBasic(id: \(id), secret: <redacted>)"
            case .clientSecretPost(let id, _): return "clientSecretPost(id: \(id), secret: <redacted>)"
            case .publicClient(let id): return "publicClient(id: \(id))"
            case .privateKeyJWT(let id, let audience, let signer):
                return "privateKeyJWT(id: \(id), audience: \(audience), signer: \(type(of: signer)))"
            }
        }

        /// Equal when the method, the client id, the secret or audience, and the signer (the same instance) are.
        public static func == (lhs: Self, rhs: Self) -> Bool {
            switch (lhs, rhs) {
            case (.clientSecretBasic(let a, let b), .clientSecretBasic(let c, let d)),
                (.clientSecretPost(let a, let b), .clientSecretPost(let c, let d)):
                return a == c && b == d
            case (.publicClient(let a), .publicClient(let b)): return a == b
            case (.privateKeyJWT(let a, let b, let c), .privateKeyJWT(let d, let e, let f)):
                return a == d && b == e && c === f
            default: return false
            }
        }

        /// Hashes what ``==(_:_:)`` compares.
        public func hash(into hasher: inout Hasher) {
            switch self {
            case .clientSecretBasic(let id, let secret):
                hasher.combine(0)
                hasher.combine(id)
                hasher.combine(secret)
            case .clientSecretPost(let id, let secret):
                hasher.combine(1)
                hasher.combine(id)
                hasher.combine(secret)
            case .publicClient(let id):
                hasher.combine(2)
                hasher.combine(id)
            case .privateKeyJWT(let id, let audience, let signer):
                hasher.combine(3)
                hasher.combine(id)
                hasher.combine(audience)
                hasher.combine(ObjectIdentifier(signer))
            }
        }

        /// Same as ``description``: without the secret.
        public var debugDescription: String { description }

        /// A mirror without the secret, for `dump` and `String(reflecting:)`.
        public var customMirror: Mirror {
            Mirror(self, children: ["value": description], displayStyle: .enum)
        }
    }
}

extension OAuth2TokenRefresher: CustomStringConvertible {
    /// A description without secrets.
    public var description: String {
        "OAuth2TokenRefresher(\(tokenEndpoint.absoluteString), \(clientAuthentication))"
    }
}

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
            failureCode: .revocationFailed, dpopKey: credentials.dpopKey)
        guard (200..<300).contains(response.statusCode) else {
            let secrets = [credentials.accessToken, credentials.refreshToken, clientAuthentication.secret]
            throw OAuth2TokenResponse.failure(
                status: response.statusCode, body: response.body, secrets: secrets.compactMap { $0 },
                endpoint: "the revocation endpoint", code: .revocationFailed)
        }
    }
}
