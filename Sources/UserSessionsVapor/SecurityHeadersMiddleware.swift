#if Vapor
import UserSessionsWeb
import Vapor

/// Sets the headers that keep the application's own pages from being framed, sniffed or leaking their URL, on
/// every response that does not set them itself (the web-session layer's headers, the same as Hummingbird's):
/// `Content-Security-Policy: frame-ancestors 'none'` and `X-Frame-Options: DENY` (only when the response has no
/// `Content-Security-Policy` of its own), `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin`.
///
/// Add it first: `app.middleware.use(sessions.securityHeadersMiddleware(), at: .beginning)`.
public struct SecurityHeadersMiddleware: AsyncMiddleware, Sendable {
    /// The sources allowed to frame the pages (the `frame-ancestors` directive). Default `'none'`.
    public var frameAncestors: String
    /// The `Referrer-Policy`. Default `same-origin`.
    public var referrerPolicy: String

    /// A middleware with the given policies.
    public init(frameAncestors: String = "'none'", referrerPolicy: String = "same-origin") {
        self.frameAncestors = frameAncestors
        self.referrerPolicy = referrerPolicy
    }

    /// Runs the rest of the chain, then adds the headers the response does not set.
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        let response = try await next.respond(to: request)
        var headers = VaporTranslation.fields(response.headers)
        SecurityHeaders.apply(to: &headers, frameAncestors: frameAncestors, referrerPolicy: referrerPolicy)
        response.headers = VaporTranslation.headers(headers)
        return response
    }
}

extension WebSessions {
    /// A ``SecurityHeadersMiddleware`` with the default policies (no framing, `nosniff`, `same-origin`).
    public func securityHeadersMiddleware() -> SecurityHeadersMiddleware {
        SecurityHeadersMiddleware()
    }
}
#endif
