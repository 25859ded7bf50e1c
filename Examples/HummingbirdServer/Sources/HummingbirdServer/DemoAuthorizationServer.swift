import Foundation
import Hummingbird
import Synchronization

/// A stand-in for the real authorization server and API, served by the same process so the example runs alone:
///
/// - `POST /oauth/token`: the refresh-token grant (RFC 6749 §6) that ``UserSessions/OAuth2TokenRefresher`` sends.
///   Refresh tokens rotate on every use. A refresh token starting with `rt-revoked` is refused with `invalid_grant`
///   (a terminal failure), one starting with `rt-unavailable` with a 503 (a transient failure).
/// - `GET /upstream/profile`: "the API" the example calls for its users, with `Authorization: Bearer`. It accepts
///   the access tokens `/oauth/token` issued and answers 401 to anything else.
final class DemoAuthorizationServer: Sendable {
    private struct State {
        var spentRefreshTokens: Set<String> = []
        var accessTokens: [String: String] = [:]  // access token -> the refresh token's family
        var issued = 0
    }

    private let state = Mutex(State())

    func addRoutes(to router: Router<some RequestContext>) {
        router.post("/oauth/token") { request, context in
            let body = try await request.body.collect(upTo: 64 * 1024)
            let form = Self.form(String(buffer: body))
            return self.grant(form)
        }
        router.get("/upstream/profile") { request, _ in
            let token = request.headers[.authorization].flatMap { header in
                header.hasPrefix("Bearer ") ? String(header.dropFirst(7)) : nil
            }
            guard let token, let family = self.state.withLock({ $0.accessTokens[token] }) else {
                return Self.json(.unauthorized, #"{"error": "invalid_token"}"#)
            }
            return Self.json(.ok, #"{"profile": "the profile of \#(family)"}"#)
        }
    }

    private func grant(_ form: [String: String]) -> Response {
        guard form["grant_type"] == "refresh_token", let refreshToken = form["refresh_token"] else {
            return Self.json(.badRequest, #"{"error": "unsupported_grant_type"}"#)
        }
        if refreshToken.hasPrefix("rt-unavailable") {
            return Self.json(.serviceUnavailable, #"{"error": "temporarily_unavailable"}"#)
        }
        let issued = state.withLock { state -> (access: String, refresh: String)? in
            guard !refreshToken.hasPrefix("rt-revoked"), state.spentRefreshTokens.insert(refreshToken).inserted else {
                return nil
            }
            state.issued += 1
            let family = String(refreshToken.split(separator: "~").first ?? "rt")
            let access = "at-\(state.issued)-\(UUID().uuidString)"
            state.accessTokens[access] = String(family.dropFirst(3))
            return (access, "\(family)~\(state.issued)")
        }
        guard let issued else { return Self.json(.badRequest, #"{"error": "invalid_grant"}"#) }
        return Self.json(
            .ok,
            #"{"access_token": "\#(issued.access)", "refresh_token": "\#(issued.refresh)", "#
                + #""token_type": "Bearer", "expires_in": 3600}"#)
    }

    private static func form(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }

    private static func json(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}
