#if Hummingbird || Vapor
import HTTPTypes
import UserSessions

extension WebSessions {
    /// What the web-session middleware of every adapter does with a request before the route runs.
    ///
    /// - Without a session: navigations (GET with `Accept: text/html`) are redirected to `<prefix>/login?returnTo=…`,
    ///   other requests get a JSON 401 (``WebSessionRequirement/required``); ``WebSessionRequirement/api`` always
    ///   answers the 401, and ``WebSessionRequirement/optional`` lets the request through without an identity.
    /// - When the user's session cannot be resolved for a passing reason (the provider or a store is unreachable),
    ///   the answer is a JSON 503 with `Retry-After`, and the browser stays signed in.
    package enum Admission: Sendable {
        /// Answer the request with this response; the route does not run.
        case respond(WebResponse)
        /// Run the route with this user (or none, for ``WebSessionRequirement/optional``), then pass its response
        /// to ``WebSessions/finish(_:session:clearCookie:noStore:)``.
        case proceed(WebSession?, clearCookie: Bool)
    }

    /// Resolves the request's cookie and decides whether the route runs, and as whom.
    package func admit(_ request: WebRequest, requirement: WebSessionRequirement) async -> Admission {
        switch await resolve(request) {
        case .unavailable:
            return .respond(.unavailable())
        case .signedOut(let clearCookie):
            guard requirement == .optional else {
                return .respond(unauthenticated(request, clearCookie: clearCookie, api: requirement == .api))
            }
            return .proceed(nil, clearCookie: clearCookie)
        case .session(let session):
            return .proceed(session, clearCookie: false)
        }
    }

    /// Completes the route's response: clears a cookie that led nowhere; gives a response to a signed-in user
    /// `Cache-Control: no-store` unless the route set a `Cache-Control` of its own (or `noStore` is off), so that after
    /// signing out the back button never shows the signed-in page from the browser's cache.
    package func finish(_ headers: inout HTTPFields, session: WebSession?, clearCookie: Bool, noStore: Bool) {
        if clearCookie { headers.append(HTTPField(name: .setCookie, value: clearedCookie().headerValue)) }
        if session != nil, noStore, headers[.cacheControl] == nil { headers[.cacheControl] = "no-store" }
    }

    /// The answer when the route of a signed-in user threw `error`: when it ends the user's session for good (a
    /// terminal refresh failure: the refresh token was revoked), the browser is signed out (its records deleted,
    /// the cookie cleared) and the request answered as one without a session; otherwise a JSON 503.
    package func recover(
        from error: UserSessionError, of session: WebSession, request: WebRequest, requirement: WebSessionRequirement
    ) async -> WebResponse {
        switch await handle(error, identifier: session.identifier) {
        case .signedOut: unauthenticated(request, clearCookie: true, api: requirement != .required)
        case .unavailable: .unavailable()
        }
    }
}
#endif
