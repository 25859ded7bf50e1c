#if Vapor
import UserSessions
import UserSessionsWeb
import Vapor

/// Resolves the browser's cookie to the signed-in user for the application's own routes, and logs it in to
/// `req.auth` (a `WebSession`: read it with `try req.auth.require(WebSession.self)`).
///
/// The record of the cookie is read from the shared store at every request (so a sign-out through another
/// instance is seen at once), then the user's controller comes from the registry's get-or-restore
/// (`UserSessionRegistry/session(for:)`). What happens is decided by the web-session layer, the same as with
/// Hummingbird:
///
/// - Without a session: navigations (GET with `Accept: text/html`) are redirected to `<prefix>/login?returnTo=…`,
///   other requests get a JSON 401 (`WebSessionRequirement/required`); `WebSessionRequirement/api` always answers
///   the 401, and `WebSessionRequirement/optional` lets the request through without a user in `req.auth`.
/// - When the user's session ends for good while resolving it or in the route (a terminal refresh failure: the
///   refresh token was revoked), the browser is signed out: its records are deleted, the cookie cleared, and the
///   request answered as one without a session.
/// - When it fails for a passing reason (the provider or a store is unreachable), the answer is a JSON 503 with
///   `Retry-After`, and the browser stays signed in.
/// - A response to a signed-in user carries `Cache-Control: no-store` unless the route set a `Cache-Control` of
///   its own (or ``noStore`` is off).
public struct WebSessionMiddleware: AsyncMiddleware, Sendable {
    /// The web sessions the cookie is resolved with.
    public let sessions: WebSessions
    /// What the routes behind this middleware need.
    public let requirement: WebSessionRequirement
    /// Whether responses to a signed-in user get `Cache-Control: no-store` when the route set no `Cache-Control`.
    /// Default `true`; a route opts out by setting its own `Cache-Control`.
    public let noStore: Bool

    /// A middleware resolving cookies with `sessions`.
    public init(_ sessions: WebSessions, requirement: WebSessionRequirement = .required, noStore: Bool = true) {
        self.sessions = sessions
        self.requirement = requirement
        self.noStore = noStore
    }

    /// Resolves the cookie, then runs the rest of the chain with the user in `req.auth`.
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        let webRequest = WebRequest(request)
        switch await sessions.admit(webRequest, requirement: requirement) {
        case .respond(let answer):
            return VaporTranslation.response(answer)
        case .proceed(let session, let clearCookie):
            if let session { request.auth.login(session) }
            do {
                let response = try await next.respond(to: request)
                var headers = VaporTranslation.fields(response.headers)
                sessions.finish(&headers, session: session, clearCookie: clearCookie, noStore: noStore)
                response.headers = VaporTranslation.headers(headers)
                return response
            } catch let error as UserSessionError {
                guard let session else { throw error }
                return VaporTranslation.response(
                    await sessions.recover(from: error, of: session, request: webRequest, requirement: requirement))
            }
        }
    }
}

extension WebSessions {
    /// A ``WebSessionMiddleware`` over these sessions.
    public func middleware(_ requirement: WebSessionRequirement = .required, noStore: Bool = true)
        -> WebSessionMiddleware
    {
        WebSessionMiddleware(self, requirement: requirement, noStore: noStore)
    }
}
#endif
