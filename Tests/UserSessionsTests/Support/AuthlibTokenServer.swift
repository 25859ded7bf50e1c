import Foundation
import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `Fixtures/authlib_client_credentials.py` on 127.0.0.1, started for one test: an authorization server on Authlib,
/// whose own `ClientCredentialsGrant` and client authentication (basic and post) answer the token requests, with token
/// exchange (RFC 8693) as a custom Authlib grant.
final class AuthlibTokenServer: Sendable {
    struct Stats: Decodable, Sendable {
        /// Every POST to the token endpoint, answered or not.
        var tokenRequests: Int
        /// Tokens issued by the client-credentials grant.
        var clientCredentials: Int
        /// Tokens issued by the token-exchange grant.
        var tokenExchanges: Int
        /// Token requests Authlib answered with 401 `invalid_client`.
        var invalidClient: Int
        /// Token requests held by ``hold()`` now.
        var heldRequests: Int
        var lastScope: String?
        var lastAudience: String?
        var lastAuth: String?

        enum CodingKeys: String, CodingKey {
            case tokenRequests = "token_requests"
            case clientCredentials = "client_credentials"
            case tokenExchanges = "token_exchanges"
            case invalidClient = "invalid_client"
            case heldRequests = "held_requests"
            case lastScope = "last_scope"
            case lastAudience = "last_audience"
            case lastAuth = "last_auth"
        }
    }

    /// Whether python3 can import what the server needs (Authlib and Flask).
    static let isAvailable = FixtureServer.pythonCanImport("authlib, flask")

    /// Whether the server must run here: in CI (`CI=true`), or with `USER_SESSIONS_REQUIRE_AUTHLIB=1` or
    /// `USER_SESSIONS_REQUIRE_OIDC=1` (which the OpenID Connect provider's tests read too).
    static var isRequired: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["CI"] == "true" || environment["USER_SESSIONS_REQUIRE_AUTHLIB"] == "1"
            || environment["USER_SESSIONS_REQUIRE_OIDC"] == "1"
    }

    private let server: FixtureServer

    private init(_ server: FixtureServer) { self.server = server }

    /// Runs `body` with a fresh server started with `arguments` (such as `["--auth", "post"]`) and stops it afterwards.
    static func with<R>(_ arguments: [String] = [], _ body: (AuthlibTokenServer) async throws -> R) async throws -> R {
        try await FixtureServer.run(
            script: "authlib_client_credentials.py", arguments: arguments, timeout: .seconds(120)
        ) { server in
            try await body(AuthlibTokenServer(server))
        }
    }

    var tokenEndpoint: URL { server.url("/token") }

    private func call(_ method: String, _ path: String, json: [String: Any]? = nil) async throws -> Data {
        var request = URLRequest(url: server.url(path))
        request.httpMethod = method
        if let json { request.httpBody = try JSONSerialization.data(withJSONObject: json) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return data
    }

    func stats() async throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try await call("GET", "/stats"))
    }

    /// Token requests wait (counted in ``Stats/heldRequests``) until ``release()``.
    func hold() async throws { _ = try await call("POST", "/admin/hold") }

    func release() async throws { _ = try await call("POST", "/admin/release") }

    /// Sets the lifetime of the tokens issued from now on, or the mode (`["mode": "error500"]`).
    func configure(_ settings: [String: Any]) async throws {
        _ = try await call("POST", "/admin/config", json: settings)
    }

    /// Every token issued so far expires now.
    func expireAll() async throws { _ = try await call("POST", "/admin/expire") }

    /// A user's access token, for token exchange.
    func issueUserToken() async throws -> String {
        let object = try JSONSerialization.jsonObject(with: try await call("POST", "/admin/issue")) as? [String: String]
        guard let token = object?["access_token"] else {
            throw UserSessionError(.transportFailure, "bad issue response")
        }
        return token
    }
}
