#if Hummingbird
import Hummingbird
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsWeb

extension WebSessions {
    /// Mounts the sign-in routes under ``WebSessionConfiguration/routePrefix`` (here `/auth`): `GET /auth/login`,
    /// `GET /auth/callback`, `POST /auth/logout`, `POST /auth/backchannel-logout` and `GET /auth/user`, whose
    /// behaviour the web-session layer decides (see `WebSessions`):
    ///
    /// - `login` keeps the sealed pending sign-in in a short-lived `HttpOnly`, `SameSite=Lax` cookie and redirects
    ///   (302) to the provider; `returnTo` must be a local path (anything else becomes `/`).
    /// - `callback` completes the sign-in with that cookie (state, PKCE, ID token), issues a new session cookie (the
    ///   old record, if any, is deleted) and redirects (302) to `returnTo`; a failed sign-in is a 400 naming its code.
    /// - `logout` refuses a cross-site request (403), signs the user out, clears the cookie and redirects (303) to
    ///   the provider's end-session URL with a fresh `state`, or to the post-logout path.
    /// - `backchannel-logout` verifies the provider's logout token and ends the user's sessions (200, or 400).
    /// - `user` answers the signed-in user's claims as JSON (never a token), or a JSON 401.
    public func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        let group = router.group(RouterPath(configuration.routePrefix))
        for route in Route.allCases {
            group.on(RouterPath(route.rawValue), method: route.method) { request, _ in
                Response(await self.respond(to: WebRequest(request), on: route))
            }
        }
    }

    /// Opens `prototype`'s session in the registry and binds a new browser session to it: returns the cookie to
    /// set on the response. The callback route calls it after a sign-in; call it yourself for users signed in
    /// another way.
    ///
    /// The cookie's value is new (256 random bits); the record of the cookie `request` came with, if any, is
    /// deleted first, so a cookie planted before the sign-in never becomes a signed-in one (no session fixation).
    ///
    /// - Parameters:
    ///   - prototype: The signed-in user's session (its identifier, user info and credentials).
    ///   - subject: The ID token's `sub`; default the user info's `id`.
    ///   - sessionID: The ID token's `sid`, if any.
    ///   - request: The request whose cookie is replaced, if any.
    /// - Throws: What `UserSessionRegistry/open(_:)` throws; `WebSessionError` when the store fails.
    public func openBrowserSession(
        _ prototype: UserSessionPrototype, subject: String? = nil, sessionID: String? = nil,
        replacingCookieOf request: Request? = nil
    ) async throws -> Cookie {
        let cookie = try await openBrowserSession(
            prototype, subject: subject, sessionID: sessionID,
            replacingCookie: request.flatMap { WebRequest($0).cookie(configuration.cookieName) })
        return Cookie(cookie)
    }

    /// Checks, on the post-logout page, that the `state` the provider sent the browser back with is the one
    /// `POST <prefix>/logout` sent (kept in the cookie ``WebSessionConfiguration/signOutCookieName`` for 10 minutes):
    /// then the page knows the logout it confirms is the one this browser asked for, not a link from elsewhere.
    ///
    /// - Throws: `OpenIDConnectError` of code `postLogoutStateMismatch` when the query's
    ///   `state` or the cookie is missing, or they differ.
    public func verifyPostLogoutState(_ request: Request) throws(OpenIDConnectError) {
        try verifyPostLogoutState(WebRequest(request))
    }
}
#endif
