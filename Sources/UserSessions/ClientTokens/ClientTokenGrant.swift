import Foundation

/// The token request of one key: the client-credentials grant (RFC 6749 §4.4) or a token exchange (RFC 8693), with
/// the scopes and resource indicators (RFC 8707), sent through ``OAuth2TokenRefresher``'s client authentication and
/// transport, and its answer read as the refresher reads one.
///
/// A token endpoint that rejects the client (HTTP 401, or the RFC 6749 §5.2 error `invalid_client`) gives
/// ``UserSessionError/Code/clientRejected`` (terminal for the key); every other refusal gives
/// ``UserSessionError/Code/tokenRequestFailed`` with the refresher's classes, except that `invalid_grant` (a subject
/// token refused by an exchange) is a misconfiguration of that one request, never terminal for the key.
enum ClientTokenGrant: Sendable {
    /// RFC 6749 §4.4.
    case clientCredentials
    /// RFC 8693: exchanges the token `subjectToken` returns (the user's access token) for one for `audience`.
    case exchange(audience: String, subjectToken: @Sendable () async throws -> String)

    static let exchangeGrantType = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"

    /// Sends the request for `scopes` and `resources` through `refresher` and returns the credentials issued.
    func request(
        scopes: Set<String>, resources: Set<String>, through refresher: OAuth2TokenRefresher, clock: SessionClock
    ) async throws -> Credentials {
        var fields: [(String, String)]
        var secrets = [refresher.clientAuthentication.secret].compactMap { $0 }
        let source: Credentials.Source
        switch self {
        case .clientCredentials:
            fields = [("grant_type", "client_credentials")]
            source = .clientCredentials
        case .exchange(let audience, let subjectToken):
            let token = try await subjectToken()
            secrets.append(token)
            fields = [
                ("grant_type", Self.exchangeGrantType), ("subject_token", token),
                ("subject_token_type", Self.accessTokenType), ("requested_token_type", Self.accessTokenType),
                ("audience", audience),
            ]
            source = .tokenExchange
        }
        if !scopes.isEmpty { fields.append(("scope", scopes.sorted().joined(separator: " "))) }
        for resource in resources.sorted() { fields.append(("resource", resource)) }
        let sentAt = clock.now()
        let response = try await refresher.post(
            fields, to: refresher.tokenEndpoint, through: refresher.tokenClient, failureCode: .tokenRequestFailed)
        guard (200..<300).contains(response.statusCode) else {
            throw Self.failure(status: response.statusCode, body: response.body, secrets: secrets)
        }
        return try OAuth2TokenResponse.parseSuccess(response.body, previous: nil, sentAt: sentAt, source: source)
    }

    /// The classified error for a refusal of the token endpoint.
    static func failure(status: Int, body: Data, secrets: [String]) -> UserSessionError {
        var error = OAuth2TokenResponse.failure(
            status: status, body: body, secrets: secrets, endpoint: "the token endpoint", code: .tokenRequestFailed)
        let oauthError = OAuth2TokenResponse.parseError(body, secrets: secrets)?.code
        if status == 401 || (400..<500).contains(status) && oauthError == "invalid_client" {
            error.code = .clientRejected
            error.failureClass = .terminal
        } else if error.failureClass == .terminal {
            error.failureClass = .misconfiguration
        }
        return error
    }
}

extension Credentials.Source {
    /// From a client-credentials grant (RFC 6749 §4.4) of a ``ClientCredentialsTokenManager``.
    public static let clientCredentials = Credentials.Source(rawValue: "client_credentials")
    /// From a token exchange (RFC 8693) of a ``ClientCredentialsTokenManager``.
    public static let tokenExchange = Credentials.Source(rawValue: "token_exchange")
}
