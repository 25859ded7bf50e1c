#if Hummingbird
import Foundation
import HTTPTypes
import Hummingbird
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect

/// The token-forwarding proxy against a real upstream: a second Hummingbird server on 127.0.0.1.
struct ProxyTests {
    /// What the upstream saw and how it answers.
    final class Upstream: Sendable {
        let profileRequests = Locked(0)
        let acceptedToken = Locked("token-1")
        let release = OneShot<Bool>()
        /// Where it listens, once it does.
        let base = Locked<URL?>(nil)

        var router: Router<BasicRequestContext> {
            let router = Router()
            router.on("api/echo", method: .post) { request, _ in try await Self.echo(request) }
            router.on("api/echo", method: .get) { request, _ in try await Self.echo(request) }
            router.get("api/profile") { request, _ -> Response in
                self.profileRequests.withLock { $0 += 1 }
                let accepted = self.acceptedToken.withLock { $0 }
                guard request.headers[.authorization] == "Bearer " + accepted else {
                    return Response(
                        status: .unauthorized, headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""])
                }
                return Response(
                    status: .ok, headers: [.setCookie: "upstream=1; Path=/", .contentType: "application/json"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: "{\"sub\":\"248289761001\"}")))
            }
            router.get("api/big") { _, _ in String(repeating: "x", count: 100_000) }
            router.get("api/moved") { _, _ in Response(status: .found, headers: [.location: "http://127.0.0.1:9/x"]) }
            router.get("api/hang") { _, _ -> String in
                _ = await self.release.value
                return "late"
            }
            router.get("secret") { _, _ in "outside the allow-list" }
            return router
        }

        static func echo(_ request: Request) async throws -> Response {
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName, default: ""] += field.value }
            let answer: [String: Any] = [
                "headers": headers, "method": request.method.rawValue, "bytes": body.readableBytes,
                "query": request.uri.query ?? "",
            ]
            let data = try JSONSerialization.data(withJSONObject: answer)
            return Response(
                status: .ok,
                headers: [
                    .contentType: "application/json", .setCookie: "tracker=1; Path=/", .connection: "X-Hop",
                    HTTPField.Name("X-Hop") ?? .via: "1", HTTPField.Name("X-Upstream") ?? .via: "kept",
                ],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
        }
    }

    /// Runs the upstream, then the application with a proxy to `<upstream>/api`.
    ///
    /// `timeout` is the proxy's deadline for the upstream. Tests that do not wait for it to pass keep it long: the
    /// whole suite runs in parallel on a small machine, where a short deadline could pass before a healthy upstream
    /// answers.
    func withProxy(
        refresher: ScriptedRefresher = ScriptedRefresher([.token("token-2")]), timeout: Duration = .seconds(30),
        signedIn prototype: UserSessionPrototype = alice(),
        _ body: (Client, WebHarness, Upstream) async throws -> Void
    ) async throws {
        let upstream = Upstream()
        try await withLiveServer(upstream.router) { upstreamBase in
            upstream.base.withLock { $0 = upstreamBase }
            let proxy = try TokenForwardingProxy(
                upstream: upstreamBase.appending(path: "api"),
                configuration: .init(maximumRequestBytes: 1024, maximumResponseBytes: 64 * 1024, timeout: timeout))
            let harness = try WebHarness(refresher: refresher)
            try await harness.run(upstream: proxy) { client in
                var browser = client
                browser.cookie = try await harness.signInAlice(prototype)
                try await body(browser, harness, upstream)
            }
            upstream.release.fulfil(true)
        }
    }

    @Test func theProxyForwardsTheUsersTokenAndNoCookieOrHopByHopHeader() async throws {
        try await withProxy { browser, _, _ in
            let reply = try await browser.send(
                "POST", "/upstream/echo?q=1",
                headers: [
                    ("X-CSRF", "1"), ("Origin", browser.origin), ("Authorization", "Basic c2VjcmV0"),
                    ("Proxy-Authorization", "Basic c2VjcmV0"), ("Connection", "X-Drop-Me"), ("X-Drop-Me", "1"),
                    ("Keep-Alive", "timeout=5"), ("X-Custom", "kept"), ("Content-Type", "text/plain"),
                ], body: Data("hello".utf8))
            #expect(reply.status == 200)
            let headers = try #require(reply.json["headers"] as? [String: String])
            #expect(headers["authorization"] == "Bearer token-1", "the user's token, not the browser's header")
            for name in ["cookie", "proxy-authorization", "x-drop-me", "keep-alive", "x-csrf", "origin"] {
                #expect(headers[name] == nil, "\(name) is not forwarded")
            }
            #expect(headers["x-custom"] == "kept" && headers["content-type"] == "text/plain")
            #expect(reply.json["bytes"] as? Int == 5 && reply.json["query"] as? String == "q=1")
            #expect(reply.headers["Set-Cookie"] == nil, "the upstream cannot set cookies on the application")
            #expect(reply.headers["X-Hop"] == nil, "a header the upstream's Connection names is dropped")
            #expect(reply.headers["X-Upstream"] == "kept")
        }
    }

    /// A session bound with DPoP (issue 27): the proxy sends `Authorization: DPoP` and a proof it signed for the
    /// upstream request (its method, its URL without the query, the token's hash), never the browser's own proof.
    @Test func theProxySignsADPoPProofForABoundSession() async throws {
        let signer = DPoPSigner()
        let refresher = ScriptedRefresher([.token("token-2")], dpop: DPoPProofs(signer: signer))
        let key = try signer.makeKey(.es256)
        var prototype = alice()
        prototype.credentials?.dpopKey = key
        prototype.credentials?.tokenType = "DPoP"
        try await withProxy(refresher: refresher, signedIn: prototype) { browser, _, upstream in
            let reply = try await browser.send(
                "POST", "/upstream/echo?q=1",
                headers: [("X-CSRF", "1"), ("Origin", browser.origin), ("DPoP", "forged.by.browser")],
                body: Data("hello".utf8))
            #expect(reply.status == 200)
            let headers = try #require(reply.json["headers"] as? [String: String])
            #expect(headers["authorization"] == "DPoP token-1")
            let proof = try #require(headers["dpop"])
            let parts = proof.split(separator: ".")
            #expect(parts.count == 3 && proof != "forged.by.browser")
            let header = try Self.jsonPart(parts[0])
            let claims = try Self.jsonPart(parts[1])
            #expect(header["typ"] as? String == "dpop+jwt" && header["alg"] as? String == "ES256")
            #expect((header["jwk"] as? [String: Any])?["d"] == nil, "only the public key")
            #expect(claims["htm"] as? String == "POST")
            let echo = try #require(upstream.base.withLock { $0 }).appending(path: "api/echo")
            #expect(claims["htu"] as? String == echo.absoluteString)
            #expect(claims["ath"] as? String == "PwiqzhIu4jaEMsHKI6BJvGQLr78A_fM6UkKfOLoS2_k", "SHA-256 of token-1")
            #expect(refresher.refreshes == 0)
        }
    }

    /// A JWS part's JSON object.
    static func jsonPart(_ part: Substring) throws -> [String: Any] {
        let data = try #require(CanonicalBase64.decodeURL(part.utf8))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func theProxyNeedsTheCSRFHeaderASessionAndASameOriginCaller() async throws {
        try await withProxy { browser, _, upstream in
            #expect(try await browser.get("/upstream/profile").status == 403, "no X-CSRF")
            #expect(try await browser.get("/upstream/profile", headers: [("X-CSRF", "0")]).status == 403)
            let crossSite = try await browser.send(
                "POST", "/upstream/echo", headers: [("X-CSRF", "1"), ("Origin", "http://evil.example")])
            #expect(crossSite.status == 403)
            let anonymous = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")], cookie: .some(nil))
            #expect(anonymous.status == 401 && anonymous.json["error"] as? String == "unauthenticated")
            #expect(upstream.profileRequests.withLock { $0 } == 0, "nothing refused reached the upstream")
            #expect(try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")]).status == 200)
        }
    }

    @Test func aRefusedTokenIsRefreshedAndTheCallReplayedOnce() async throws {
        let refresher = ScriptedRefresher([.token("token-2")])
        try await withProxy(refresher: refresher) { browser, _, upstream in
            upstream.acceptedToken.withLock { $0 = "token-2" }
            let reply = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")])
            #expect(reply.status == 200 && reply.json["sub"] as? String == "248289761001")
            #expect(refresher.refreshes == 1)
            #expect(upstream.profileRequests.withLock { $0 } == 2, "the call and one replay")

            upstream.acceptedToken.withLock { $0 = "never" }
            let refused = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")])
            #expect(refused.status == 401, "a second 401 is passed on")
            #expect(upstream.profileRequests.withLock { $0 } == 4, "one replay, not more")
            #expect(refresher.refreshes == 2)
        }
    }

    @Test func theProxyCapsBodiesAndTimeAndStaysUnderItsUpstream() async throws {
        // The one test that waits for the deadline to pass (`/upstream/hang`).
        try await withProxy(timeout: .seconds(5)) { browser, _, _ in
            let csrf = [("X-CSRF", "1"), ("Origin", browser.origin)]
            let large = try await browser.send("POST", "/upstream/echo", headers: csrf, body: Data(count: 2048))
            #expect(large.status == 413)
            #expect(try await browser.get("/upstream/big", headers: csrf).status == 502, "answer over the cap")
            #expect(try await browser.get("/upstream/moved", headers: csrf).status == 502, "no redirect followed")
            #expect(try await browser.get("/upstream/hang", headers: csrf).status == 504, "the deadline passed")
            for escape in ["/upstream/%2e%2e/secret", "/upstream/a%2Fb", "/upstream/a%5Cb", "/upstream/x/../../secret"]
            {
                let reply = try await browser.get(escape, headers: csrf)
                #expect(reply.status == 400 || reply.status == 404, "\(escape): \(reply.status)")
                #expect(!reply.text.contains("outside the allow-list"))
            }
        }
        let insecure = try #require(URL(string: "http://api.example.com"))
        #expect(throws: WebSessionError(.invalidConfiguration, "")) { try TokenForwardingProxy(upstream: insecure) }
        let withQuery = try #require(URL(string: "https://api.example.com/v1?key=1"))
        #expect(throws: WebSessionError(.invalidConfiguration, "")) { try TokenForwardingProxy(upstream: withQuery) }
    }
}
#endif
