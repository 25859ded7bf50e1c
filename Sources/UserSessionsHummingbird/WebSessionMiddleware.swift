#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessions
import UserSessionsWeb

/// Resolves the browser's cookie to the signed-in user for the application's own routes, and puts it in the
/// request context (`context.identity`, a `WebSession`).
///
/// The record of the cookie is read from the shared store at every request (so a sign-out through another
/// instance is seen at once), then the user's controller comes from the registry's get-or-restore
/// (`UserSessionRegistry/session(for:)`). What happens is decided by the web-session layer, the same for every
/// framework:
///
/// - Without a session: navigations (GET with `Accept: text/html`) are redirected to `<prefix>/login?returnTo=…`,
///   other requests get a JSON 401 (`WebSessionRequirement/required`); `WebSessionRequirement/api` always answers
///   the 401, and `WebSessionRequirement/optional` lets the request through without an identity.
/// - When the user's session ends for good while resolving it or in the route (a terminal refresh failure: the
///   refresh token was revoked), the browser is signed out: its records are deleted, the cookie cleared, and the
///   request answered as one without a session.
/// - When it fails for a passing reason (the provider or a store is unreachable), the answer is a JSON 503 with
///   `Retry-After`, and the browser stays signed in.
/// - A response to a signed-in user carries `Cache-Control: no-store` unless the route set a `Cache-Control` of
///   its own (or ``noStore`` is off): after signing out, the back button never shows the signed-in page from the
///   browser's cache.
public struct WebSessionMiddleware<Context: WebSessionRequestContext>: RouterMiddleware {
    /// What a route needs of the browser.
    public typealias Requirement = WebSessionRequirement

    /// The web sessions the cookie is resolved with.
    public let sessions: WebSessions
    /// What the routes behind this middleware need.
    public let requirement: Requirement
    /// Whether responses to a signed-in user get `Cache-Control: no-store` when the route set no `Cache-Control`.
    /// Default `true`; a route opts out by setting its own `Cache-Control`.
    public let noStore: Bool

    /// A middleware resolving cookies with `sessions`.
    public init(_ sessions: WebSessions, requirement: Requirement = .required, noStore: Bool = true) {
        self.sessions = sessions
        self.requirement = requirement
        self.noStore = noStore
    }

    /// Resolves the cookie, then runs the rest of the chain with the user in `context.identity`.
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let webRequest = WebRequest(request)
        switch await sessions.admit(webRequest, requirement: requirement) {
        case .respond(let answer):
            return Response(answer)
        case .proceed(let session, let clearCookie):
            var context = context
            context.identity = session
            do {
                var response = try await next(request, context)
                sessions.finish(&response.headers, session: session, clearCookie: clearCookie, noStore: noStore)
                return response
            } catch let error as UserSessionError {
                guard let session else { throw error }
                return Response(
                    await sessions.recover(from: error, of: session, request: webRequest, requirement: requirement))
            }
        }
    }
}

extension WebSessions {
    /// A ``WebSessionMiddleware`` over these sessions.
    public func middleware<Context: WebSessionRequestContext>(
        _ requirement: WebSessionRequirement = .required, noStore: Bool = true
    ) -> WebSessionMiddleware<Context> {
        WebSessionMiddleware(self, requirement: requirement, noStore: noStore)
    }
}
#endif
