import Foundation
import UserSessions

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Runs `Fixtures/oauth_server.py` on 127.0.0.1 for one test and stops it afterwards.
///
/// A thin layer over ``FixtureServer`` with the OAuth server's admin calls.
package final class OAuthFixtureServer: Sendable {
    package struct Stats: Decodable, Sendable {
        package var tokenRequests: Int
        package var refreshes: Int
        package var invalidGrant: Int
        package var invalidClient: Int
        package var reuseDetected: Int
        package var redirectTargetHits: Int
        package var redirectTargetSawSecret: Int
        package var lastAuth: String?
        package var lastScope: String?
        package var revocations: Int
        package var lastTokenTypeHint: String?
        /// Client-credentials grants answered (RFC 6749 §4.4).
        package var clientCredentials: Int
        /// Token exchanges answered (RFC 8693).
        package var tokenExchanges: Int
        /// The resource indicators of the last client-credentials grant, sorted.
        package var lastResources: [String]?
        /// The audience of the last token exchange.
        package var lastAudience: String?
        /// Token requests held by ``hold()`` now.
        package var heldRequests: Int
        /// Client-credentials grants for a scope whose last token had more than half its lifetime left.
        package var prematureGrants: Int
        /// The `traceparent` header of the last token request, if it had one.
        package var lastTraceparent: String?
        /// The most token requests the fixture was answering at once since ``resetPeakInFlight()``.
        package var peakInFlight: Int
        /// The DPoP thumbprint of each successful refresh's proof (`nil` for a refresh without one), in order.
        package var refreshJkts: [String?]
        /// Refreshes refused for their DPoP proof.
        package var dpopRefused: Int

        enum CodingKeys: String, CodingKey {
            case tokenRequests = "token_requests"
            case refreshes
            case invalidGrant = "invalid_grant"
            case invalidClient = "invalid_client"
            case reuseDetected = "reuse_detected"
            case redirectTargetHits = "redirect_target_hits"
            case redirectTargetSawSecret = "redirect_target_saw_secret"
            case lastAuth = "last_auth"
            case lastScope = "last_scope"
            case revocations
            case lastTokenTypeHint = "last_token_type_hint"
            case clientCredentials = "client_credentials"
            case tokenExchanges = "token_exchanges"
            case lastResources = "last_resources"
            case lastAudience = "last_audience"
            case heldRequests = "held_requests"
            case prematureGrants = "premature_grants"
            case refreshJkts = "refresh_jkts"
            case dpopRefused = "dpop_refused"
            case lastTraceparent = "last_traceparent"
            case peakInFlight = "peak_in_flight"
        }
    }

    private let server: FixtureServer

    private init(_ server: FixtureServer) {
        self.server = server
    }

    /// The port the server listens on.
    package var port: Int { server.port }

    /// Starts the server with extra command-line `arguments` (for example `["--auth", "post"]`).
    package static func start(_ arguments: [String] = []) async throws -> OAuthFixtureServer {
        OAuthFixtureServer(try await FixtureServer.start(script: "oauth_server.py", arguments: arguments))
    }

    /// Runs `body` with a fresh server and stops it afterwards, whatever happens.
    package static func with<R>(_ arguments: [String] = [], _ body: (OAuthFixtureServer) async throws -> R) async throws
        -> R
    {
        try await FixtureServer.run(script: "oauth_server.py", arguments: arguments) { server in
            try await body(OAuthFixtureServer(server))
        }
    }

    /// Terminates the server and waits for it to exit.
    package func stop() async {
        await server.stop()
    }

    package var baseURL: URL { server.baseURL }
    package var tokenEndpoint: URL { baseURL.appendingPathComponent("token") }
    package var revocationEndpoint: URL { baseURL.appendingPathComponent("revoke") }

    private func request(_ method: String, _ path: String, json: [String: Any]? = nil) async throws -> Data {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = method
        if let json { request.httpBody = try JSONSerialization.data(withJSONObject: json) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return data
    }

    /// A new token family: its first refresh and access tokens.
    package func issue() async throws -> (refreshToken: String, accessToken: String) {
        let data = try await request("POST", "admin/issue")
        let object = try JSONSerialization.jsonObject(with: data) as? [String: String]
        guard let refresh = object?["refresh_token"], let access = object?["access_token"] else {
            throw UserSessionError(.transportFailure, "bad issue response")
        }
        return (refresh, access)
    }

    /// `count` new token families at once: their first refresh and access tokens.
    package func issue(count: Int) async throws -> [(refreshToken: String, accessToken: String)] {
        let data = try await request("POST", "admin/issue", json: ["count": count])
        let object = try JSONSerialization.jsonObject(with: data) as? [String: [[String]]]
        let families = (object?["families"] ?? []).compactMap { $0.count == 2 ? ($0[0], $0[1]) : nil }
        guard families.count == count else { throw UserSessionError(.transportFailure, "bad issue response") }
        return families
    }

    /// Token requests wait (counted in ``Stats/heldRequests``) until ``release()``.
    package func hold() async throws { _ = try await request("POST", "admin/hold") }

    /// Lets held token requests (and later ones) through.
    package func release() async throws { _ = try await request("POST", "admin/release") }

    /// Revokes every token family.
    /// ``Stats/peakInFlight`` counts from now.
    package func resetPeakInFlight() async throws { _ = try await request("POST", "admin/reset_peak") }

    package func revokeAll() async throws { _ = try await request("POST", "admin/revoke") }

    /// Sets the server's mode and settings, such as `["mode": "error500"]` or `["expires_in": "120"]`.
    package func configure(_ settings: [String: Any]) async throws {
        _ = try await request("POST", "admin/mode", json: settings)
    }

    /// Whether the server would still honour `token` (a refresh or an access token).
    package func isActive(_ token: String) async throws -> Bool {
        var request = URLRequest(url: baseURL.appendingPathComponent("introspect"))
        request.httpMethod = "POST"
        request.httpBody = Data(
            ("token=" + (token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")).utf8)
        let (data, _) = try await URLSession.shared.data(for: request)
        return (try JSONSerialization.jsonObject(with: data) as? [String: Bool])?["active"] == true
    }

    package func stats() async throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try await request("GET", "stats"))
    }
}
