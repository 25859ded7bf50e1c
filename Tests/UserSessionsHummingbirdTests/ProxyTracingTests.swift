#if Hummingbird && Tracing
import Foundation
import Hummingbird
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect
import UserSessionsTestSupport
import UserSessionsTracing

/// The proxy's span for each proxied request, and the trace context it carries upstream, against a real upstream on
/// 127.0.0.1 (``ProxyTests/Upstream``), with a tracer the test owns.
struct ProxyTracingTests {
    /// Runs the application (sign-in routes, the CSRF middleware, the proxy at `/upstream`) with a traced registry,
    /// and alice signed in.
    func withTracedProxy(
        _ tracer: RecordingTracer, refresher: ScriptedRefresher,
        _ body: (Client, ProxyTests.Upstream) async throws -> Void
    ) async throws {
        let upstream = ProxyTests.Upstream()
        try await withLiveServer(upstream.router) { upstreamBase in
            let proxy = try TokenForwardingProxy(upstream: upstreamBase.appending(path: "api"))
            let registry = UserSessionRegistry(
                store: InMemoryTokenStore(), refresher: refresher,
                configuration: UserSessionController.Configuration().tracing(UserSessionTracing(tracer: tracer)))
            let openID = try OpenIDConnectClient(
                issuer: try #require(URL(string: "http://127.0.0.1:9")),
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                    redirectURI: Provider.redirectURI))
            let sessions = try WebSessions(
                openID: openID, registry: registry, store: InMemoryWebSessionStore(),
                configuration: WebSessionConfiguration(publicURL: try #require(URL(string: "http://127.0.0.1:8080"))))
            let router = Router(context: BasicWebSessionRequestContext.self)
            router.add(middleware: sessions.crossSiteRequestMiddleware())
            sessions.addRoutes(to: router)
            sessions.addProxy(proxy, at: "/upstream", to: router)
            try await withLiveServer(router) { base in
                var browser = Client(base: base)
                browser.cookie = try await sessions.openBrowserSession(alice(), sessionID: "sid-1").value
                try await body(browser, upstream)
            }
            await registry.shutdown()
            upstream.release.fulfil(true)
        }
    }

    @Test func aProxiedRequestIsASpanWhoseContextTheUpstreamReceives() async throws {
        let tracer = RecordingTracer()
        try await withTracedProxy(tracer, refresher: ScriptedRefresher([.token("token-2")])) { browser, _ in
            let reply = try await browser.get(
                "/upstream/echo?q=secret-query", headers: [("X-CSRF", "1"), ("traceparent", "00-browser-made-01")])
            #expect(reply.status == 200)
            let span = try #require(await tracer.waitForSpans(named: "user_sessions.proxy").first)
            #expect(span.attribute("http.request.method") == "GET")
            #expect(span.attribute("server.address") == "127.0.0.1")
            #expect(span.attribute("url.path") == "/api/echo")
            #expect(span.attribute("http.response.status_code") == "200")
            #expect(!span.failed)
            #expect(!span.allText.contains("secret-query") && !span.allText.contains("token-1"))
            let headers = try #require(reply.json["headers"] as? [String: String])
            #expect(
                headers["traceparent"] == "00-\(span.ids.traceID)-\(span.ids.spanID)-01", "the browser's is replaced")
        }
    }

    @Test func aRefreshAfterA401IsAChildOfTheProxiedRequestsSpan() async throws {
        let tracer = RecordingTracer()
        try await withTracedProxy(tracer, refresher: ScriptedRefresher([.token("token-2")])) { browser, upstream in
            upstream.acceptedToken.withLock { $0 = "token-2" }
            let reply = try await browser.get("/upstream/profile", headers: [("X-CSRF", "1")])
            #expect(reply.status == 200)
            let span = try #require(await tracer.waitForSpans(named: "user_sessions.proxy").first)
            let refresh = try #require(await tracer.waitForSpans(named: "user_sessions.refresh").first)
            #expect(refresh.ids.parentSpanID == span.ids.spanID)
            #expect(refresh.attribute("user_sessions.refresh.outcome") == "succeeded")
            #expect(upstream.profileRequests.withLock { $0 } == 2, "the call and its replay")
            for recorded in tracer.endedSpans {
                #expect(!recorded.allText.contains("token-1") && !recorded.allText.contains("token-2"))
            }
        }
    }
}
#endif
