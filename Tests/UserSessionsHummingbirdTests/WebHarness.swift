#if Hummingbird
import Foundation
import Hummingbird
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect

/// The application the tests run: the sign-in routes under `/auth`, the CSRF middleware for every route, pages
/// behind the session middleware under `/app`, and the proxy at `/upstream` when an upstream is given.
struct WebHarness {
    let sessions: WebSessions
    let registry: UserSessionRegistry

    /// Web sessions over `openID` (default: a client of a provider that is never contacted) and a registry over
    /// `tokenStore` with `refresher`.
    init(
        openID: OpenIDConnectClient? = nil, tokenStore: any TokenStore = InMemoryTokenStore(),
        refresher: (any TokenRefresher)? = nil, store: any WebSessionStore = InMemoryWebSessionStore(),
        configure: (inout WebSessionConfiguration) -> Void = { _ in }
    ) throws {
        registry = UserSessionRegistry(store: tokenStore, refresher: refresher)
        let unused = try #require(URL(string: "http://127.0.0.1:9"))
        let openID =
            try openID
            ?? OpenIDConnectClient(
                issuer: unused,
                configuration: OpenIDConnectConfiguration(
                    clientAuthentication: .clientSecretBasic(id: "web-app", secret: "web-secret"),
                    redirectURI: Provider.redirectURI))
        var configuration = WebSessionConfiguration(publicURL: try #require(URL(string: "http://127.0.0.1:8080")))
        configure(&configuration)
        sessions = try WebSessions(openID: openID, registry: registry, store: store, configuration: configuration)
    }

    func router(upstream: TokenForwardingProxy? = nil) -> Router<BasicWebSessionRequestContext> {
        let router = Router(context: BasicWebSessionRequestContext.self)
        router.add(middleware: sessions.crossSiteRequestMiddleware())
        sessions.addRoutes(to: router)
        let app = router.group("app").add(middleware: sessions.middleware(.required))
        app.get("page") { _, context in
            "hello " + (try context.requireIdentity().record.claims["name"] ?? "?")
        }
        app.get("token") { _, context in
            _ = try await context.requireIdentity().controller.accessToken()
            return "fresh"
        }
        router.post("change") { _, _ in "changed" }
        if let upstream { sessions.addProxy(upstream, at: "/upstream", to: router) }
        return router
    }

    /// Runs the application on a free port for `body`, then shuts the registry down.
    func run<R>(upstream: TokenForwardingProxy? = nil, _ body: (Client) async throws -> R) async throws -> R {
        let result = try await withLiveServer(router(upstream: upstream)) { base in try await body(Client(base: base)) }
        await registry.shutdown()
        return result
    }

    /// Opens alice's session without a provider; returns the cookie's value.
    func signInAlice(_ prototype: UserSessionPrototype = alice()) async throws -> String {
        let cookie = try await sessions.openBrowserSession(prototype, sessionID: "sid-1")
        return cookie.value
    }
}
#endif
