#if Vapor
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsWeb
import Vapor

extension WebSessions {
    /// Mounts the sign-in routes under `WebSessionConfiguration.routePrefix` (here `/auth`):
    /// `GET /auth/login`, `GET /auth/callback`, `POST /auth/logout`, `POST /auth/backchannel-logout` and
    /// `GET /auth/user`, whose behaviour the web-session layer decides (the same as with Hummingbird):
    ///
    /// - `login` keeps the sealed pending sign-in in a short-lived `HttpOnly`, `SameSite=Lax` cookie and redirects
    ///   (302) to the provider; `returnTo` must be a local path (anything else becomes `/`).
    /// - `callback` completes the sign-in with that cookie (state, PKCE, ID token), issues a new session cookie (the
    ///   old record, if any, is deleted) and redirects (302) to `returnTo`; a failed sign-in is a 400 naming its code.
    /// - `logout` refuses a cross-site request (403), signs the user out, clears the cookie and redirects (303) to
    ///   the provider's end-session URL with a fresh `state`, or to the post-logout path.
    /// - `backchannel-logout` verifies the provider's logout token and ends the user's sessions (200, or 400).
    /// - `user` answers the signed-in user's claims as JSON (never a token), or a JSON 401.
    ///
    /// The bodies are read by the layer, up to its own limits, so the routes stream them (Vapor's default body
    /// limit does not apply).
    public func addRoutes(to routes: any RoutesBuilder) {
        let group = routes.grouped(Self.pathComponents(configuration.routePrefix))
        for route in Route.allCases {
            group.on(VaporTranslation.method(route.method), PathComponent(stringLiteral: route.rawValue), body: .stream)
            { request async -> Response in
                VaporTranslation.response(await self.respond(to: WebRequest(request), on: route))
            }
        }
    }

    /// Opens `prototype`'s session in the registry and binds a new browser session to it: returns the cookie to
    /// set on the response (`response.headers.add(name: .setCookie, value: cookie.headerValue)`). The callback
    /// route calls it after a sign-in; call it yourself for users signed in another way.
    ///
    /// The cookie's value is new (256 random bits); the record of the cookie `request` came with, if any, is
    /// deleted first, so a cookie planted before the sign-in never becomes a signed-in one (no session fixation).
    ///
    /// - Throws: What `UserSessionRegistry/open(_:)` throws; `WebSessionError` when the store fails.
    public func openBrowserSession(
        _ prototype: UserSessionPrototype, subject: String? = nil, sessionID: String? = nil,
        replacingCookieOf request: Request
    ) async throws -> WebSessionCookie {
        try await openBrowserSession(
            prototype, subject: subject, sessionID: sessionID,
            replacingCookie: WebRequest(request).cookie(configuration.cookieName))
    }

    /// Checks, on the post-logout page, that the `state` the provider sent the browser back with is the one
    /// `POST <prefix>/logout` sent (kept in the cookie `WebSessionConfiguration.signOutCookieName`
    /// for 10 minutes).
    ///
    /// - Throws: `OpenIDConnectError` of code `postLogoutStateMismatch` when the query's `state` or the cookie is
    ///   missing, or they differ.
    public func verifyPostLogoutState(_ request: Request) throws(OpenIDConnectError) {
        try verifyPostLogoutState(WebRequest(request))
    }

    /// Mounts `proxy` at `path` (such as `/upstream`) on `routes`: every method of `<path>/**` is forwarded as the
    /// signed-in user, with the header rules and limits of `TokenForwardingProxy`.
    ///
    /// The routes are behind a ``CrossSiteRequestMiddleware`` that requires the CSRF header (403 JSON without it)
    /// and a ``WebSessionMiddleware`` with `WebSessionRequirement/api` (401 JSON without a session; 503 and the
    /// session kept when a refresh fails for a passing reason; signed out when it fails for good).
    public func addProxy(_ proxy: TokenForwardingProxy, at path: String, to routes: any RoutesBuilder) {
        let mount = TokenForwardingProxy.mountPoint(path)
        let group = routes.grouped(Self.pathComponents(mount))
            .grouped(crossSiteRequestMiddleware(requiringHeader: true), middleware(.api))
        let csrfHeader = configuration.csrfHeaderName
        for method in TokenForwardingProxy.methods {
            group.on(VaporTranslation.method(method), "**", body: .stream) { request async throws -> Response in
                let session = try request.auth.require(WebSession.self)
                return VaporTranslation.response(
                    try await proxy.forward(
                        WebRequest(request), mount: mount, session: session, csrfHeader: csrfHeader))
            }
        }
    }

    /// The path components of a prefix such as `/auth` (none for `""`).
    static func pathComponents(_ prefix: String) -> [PathComponent] {
        prefix.split(separator: "/").map { PathComponent(stringLiteral: String($0)) }
    }
}
#endif
