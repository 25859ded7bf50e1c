import Foundation
import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs `Fixtures/oauth_server.py` on 127.0.0.1 for one test and stops it afterwards.
///
/// A thin layer over ``FixtureServer`` with the OAuth server's admin calls.
final class OAuthFixtureServer: Sendable {
    struct Stats: Decodable, Sendable {
        var tokenRequests: Int
        var refreshes: Int
        var invalidGrant: Int
        var invalidClient: Int
        var reuseDetected: Int
        var redirectTargetHits: Int
        var lastAuth: String?
        var lastScope: String?

        enum CodingKeys: String, CodingKey {
            case tokenRequests = "token_requests"
            case refreshes
            case invalidGrant = "invalid_grant"
            case invalidClient = "invalid_client"
            case reuseDetected = "reuse_detected"
            case redirectTargetHits = "redirect_target_hits"
            case lastAuth = "last_auth"
            case lastScope = "last_scope"
        }
    }

    private let server: FixtureServer

    private init(_ server: FixtureServer) {
        self.server = server
    }

    /// The port the server listens on.
    var port: Int { server.port }

    /// Starts the server with extra command-line `arguments` (for example `["--auth", "post"]`).
    static func start(_ arguments: [String] = []) async throws -> OAuthFixtureServer {
        OAuthFixtureServer(try await FixtureServer.start(script: "oauth_server.py", arguments: arguments))
    }

    /// Runs `body` with a fresh server and stops it afterwards, whatever happens.
    static func with<R>(_ arguments: [String] = [], _ body: (OAuthFixtureServer) async throws -> R) async throws -> R {
        try await FixtureServer.run(script: "oauth_server.py", arguments: arguments) { server in
            try await body(OAuthFixtureServer(server))
        }
    }

    /// Terminates the server and waits for it to exit.
    func stop() async {
        await server.stop()
    }

    var baseURL: URL { server.baseURL }
    var tokenEndpoint: URL { baseURL.appendingPathComponent("token") }

    private func request(_ method: String, _ path: String, json: [String: Any]? = nil) async throws -> Data {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = method
        if let json { request.httpBody = try JSONSerialization.data(withJSONObject: json) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return data
    }

    /// A new token family: its first refresh and access tokens.
    func issue() async throws -> (refreshToken: String, accessToken: String) {
        let data = try await request("POST", "admin/issue")
        let object = try JSONSerialization.jsonObject(with: data) as? [String: String]
        guard let refresh = object?["refresh_token"], let access = object?["access_token"] else {
            throw UserSessionError(.transportFailure, "bad issue response")
        }
        return (refresh, access)
    }

    /// Revokes every token family.
    func revokeAll() async throws { _ = try await request("POST", "admin/revoke") }

    /// Sets the server's mode and settings, such as `["mode": "error500"]` or `["expires_in": "120"]`.
    func configure(_ settings: [String: Any]) async throws {
        _ = try await request("POST", "admin/mode", json: settings)
    }

    func stats() async throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try await request("GET", "stats"))
    }
}
