#if Vapor
import Foundation
import Testing
import UserSessions
import UserSessionsVapor
import Vapor

/// The token-forwarding proxy through a real Vapor server on 127.0.0.1, to an upstream Vapor server on 127.0.0.1
/// that answers with what it received.
struct VaporProxyTests {
    /// Runs an upstream that echoes the request's path, query and headers (and sets a cookie it must not pass on).
    func withUpstream<R>(_ body: (URL) async throws -> R) async throws -> R {
        try await withVaporServer(
            { app in
                app.on(.GET, "api", "**") { request async -> Response in
                    var received: [String: String] = ["path": request.url.path, "query": request.url.query ?? ""]
                    for (name, value) in request.headers { received[name.lowercased()] = value }
                    let data = (try? JSONSerialization.data(withJSONObject: received)) ?? Data()
                    return Response(
                        status: .ok,
                        headers: ["Content-Type": "application/json", "Set-Cookie": "tracker=1; Path=/"],
                        body: .init(data: data))
                }
            }, body)
    }

    @Test func theProxyForwardsWithTheUsersTokenAndWithoutTheBrowsersSecrets() async throws {
        try await withUpstream { upstreamBase in
            let harness = try VaporHarness()
            let proxy = try TokenForwardingProxy(upstream: upstreamBase.appending(path: "api"))
            try await harness.run(upstream: proxy) { client in
                var browser = client
                browser.cookie = try await harness.signInAlice()
                let reply = try await browser.get(
                    "/upstream/items?limit=2", headers: [("X-CSRF", "1"), ("Authorization", "Bearer planted")])
                #expect(reply.status == 200)
                let received = reply.json
                #expect(received["path"] as? String == "/api/items" && received["query"] as? String == "limit=2")
                #expect(received["authorization"] as? String == "Bearer token-1", "the user's token, not the browser's")
                #expect(received["cookie"] == nil, "the browser's cookie stays with the application")
                #expect(received["x-csrf"] == nil)
                #expect(reply.headers["Set-Cookie"] == nil, "the upstream cannot set cookies on the application")
                #expect(reply.headers["Cache-Control"] == "no-store")
            }
        }
    }

    @Test func theProxyRequiresTheCSRFHeaderAndASessionAndRefusesPathsLeavingTheUpstream() async throws {
        try await withUpstream { upstreamBase in
            let harness = try VaporHarness()
            let proxy = try TokenForwardingProxy(upstream: upstreamBase.appending(path: "api"))
            try await harness.run(upstream: proxy) { client in
                var browser = client
                browser.cookie = try await harness.signInAlice()
                let noHeader = try await browser.get("/upstream/items")
                #expect(noHeader.status == 403 && noHeader.json["error"] as? String == "csrf")
                let noSession = try await client.get("/upstream/items", headers: [("X-CSRF", "1")])
                #expect(noSession.status == 401, "a JSON 401, never a redirect, for the proxy")
                let escaping = try await browser.get("/upstream/..%2Fadmin", headers: [("X-CSRF", "1")])
                #expect(escaping.status == 400 && escaping.json["error"] as? String == "invalid_path")
            }
        }
    }
}
#endif
