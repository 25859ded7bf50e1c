import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A ``TokenRefresher`` for OAuth 2.0 token endpoints (RFC 6749 §6, the refresh-token grant).
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
/// ``UserSessionError/Code/malformedTokenResponse``) and a ``UserSessionError/failureClass``:
/// - ``RefreshFailureClass/terminal``: `invalid_grant` (the refresh token was rejected);
/// - ``RefreshFailureClass/misconfiguration``: `invalid_client`, `unauthorized_client`, `unsupported_grant_type`,
///   `invalid_scope`, `invalid_request`, any other error code, and other 4xx statuses (except 408 and 429);
/// - ``RefreshFailureClass/transient``: network errors, timeouts, 408, 429, 5xx, redirects, bodies larger than
///   ``maximumResponseSize``, and bodies that are not a valid JSON token response (including JSON with duplicate
///   members or nested more than 128 levels deep);
/// - ``RefreshFailureClass/cancelled``: the calling task was cancelled.
///
/// - Important: Redirects are never followed, so the refresh token and the client secret are only ever sent to
///   the configured endpoint. The endpoint must use HTTPS unless it is a loopback address. Errors carry the
///   OAuth `error` code and `error_description` only — never the tokens, the secret or the raw body.
public struct OAuth2TokenRefresher: TokenRefresher, Sendable {
    /// The token endpoint.
    public let tokenEndpoint: URL
    /// How the client authenticates.
    public let clientAuthentication: ClientAuthentication
    /// The scope to request, or `nil` to request the scope originally granted (RFC 6749 §6).
    public let scope: Set<String>?
    /// How long one request may take. Default 30 s.
    public let requestTimeout: Duration
    /// The largest response body read: 1 MiB. A token endpoint that sends more is cut off, and the refresh fails as
    /// transient with ``UserSessionError/Code/malformedTokenResponse``, without reading the rest.
    public static let maximumResponseSize = 1024 * 1024
    let clock: SessionClock
    let transport: OAuth2Transport

    /// Creates a refresher for `tokenEndpoint`.
    ///
    /// - Parameters:
    ///   - tokenEndpoint: The token endpoint; `https`, or `http` on a loopback host (`localhost`, `127.0.0.0/8`,
    ///     `::1`).
    ///   - clientAuthentication: How the client authenticates to the endpoint.
    ///   - scope: The scope to request; `nil` (the default) asks for the originally granted scope.
    ///   - requestTimeout: How long one request may take before it fails as transient. Default 30 s.
    ///   - clock: The clock that stamps when a request was sent (expiry is computed from it). Default
    ///     ``SessionClock/system``; pass the controller's clock in simulations.
    /// - Throws: ``UserSessionError/Code/insecureEndpoint`` for plain HTTP to a non-loopback host, or a URL that is
    ///   neither HTTP nor HTTPS.
    public init(
        tokenEndpoint: URL,
        clientAuthentication: ClientAuthentication,
        scope: Set<String>? = nil,
        requestTimeout: Duration = .seconds(30),
        clock: SessionClock = .system
    ) throws {
        try Self.checkSecure(tokenEndpoint)
        self.tokenEndpoint = tokenEndpoint
        self.clientAuthentication = clientAuthentication
        self.scope = scope
        self.requestTimeout = requestTimeout
        self.clock = clock
        self.transport = OAuth2Transport(
            timeout: max(0.001, requestTimeout.seconds), maximumResponseSize: Self.maximumResponseSize)
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
        let request = makeRequest(refreshToken: refreshToken)
        let secrets = [refreshToken, credentials.accessToken, clientAuthentication.secret].compactMap { $0 }
        let sentAt = clock.now()
        let data: Data
        let response: HTTPURLResponse
        do {
            (data, response) = try await transport.send(request)
        } catch {
            throw Self.transportError(error)
        }
        return try OAuth2TokenResponse.credentials(
            status: response.statusCode, body: data, previous: credentials, sentAt: sentAt, secrets: secrets)
    }

    func makeRequest(refreshToken: String) -> URLRequest {
        var fields = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope { fields.append(("scope", scope.sorted().joined(separator: " "))) }
        var request = URLRequest(url: tokenEndpoint, timeoutInterval: max(0.001, requestTimeout.seconds))
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("no-store", forHTTPHeaderField: "Cache-Control")
        switch clientAuthentication {
        case .clientSecretBasic(let id, let secret):
            // RFC 6749 §2.3.1: id and secret are form-urlencoded before they are joined and base64-encoded.
            let pair = FormURLEncoding.percentEncode(id) + ":" + FormURLEncoding.percentEncode(secret)
            request.setValue("Basic " + Data(pair.utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        case .clientSecretPost(let id, let secret):
            fields.append(("client_id", id))
            fields.append(("client_secret", secret))
        case .publicClient(let id):
            fields.append(("client_id", id))
        }
        request.httpBody = Data(FormURLEncoding.encode(fields).utf8)
        return request
    }

    static func transportError(_ error: any Error) -> UserSessionError {
        if error is CancellationError || Task.isCancelled {
            return UserSessionError(
                .refreshFailed, "the token request was cancelled", failureClass: .cancelled, underlying: error)
        }
        // The transport's own errors (a body over the size limit) are typed already.
        if let error = error as? UserSessionError { return error }
        if let error = error as? URLError {
            let what = error.code == .timedOut ? "timed out" : "failed (URLError \(error.code.rawValue))"
            return UserSessionError(
                .transportFailure, "the token request \(what)", failureClass: .transient, underlying: error)
        }
        return UserSessionError(
            .transportFailure, "the token request failed: \(String(describing: type(of: error)))",
            failureClass: .transient, underlying: error)
    }

    static func checkSecure(_ url: URL) throws {
        try SecureEndpoint.check(url, describedAs: "the token endpoint")
    }
}

extension OAuth2TokenRefresher {
    /// How the client authenticates to the token endpoint (RFC 6749 §2.3).
    ///
    /// Its descriptions never show the client secret.
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

        var secret: String? {
            switch self {
            case .clientSecretBasic(_, let secret), .clientSecretPost(_, let secret): return secret
            case .publicClient: return nil
            }
        }

        /// The kind of authentication and the client id; the secret shows as `<redacted>`.
        public var description: String {
            switch self {
            case .clientSecretBasic(let id, _): return "clientSecretBasic(id: \(id), secret: <redacted>)"
            case .clientSecretPost(let id, _): return "clientSecretPost(id: \(id), secret: <redacted>)"
            case .publicClient(let id): return "publicClient(id: \(id))"
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
