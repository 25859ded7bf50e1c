#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessionsWeb

/// Sets the headers that keep the application's own pages from being framed, sniffed or leaking their URL, on
/// every response that does not set them itself (the web-session layer's headers, the same for every framework):
///
/// - `Content-Security-Policy: frame-ancestors 'none'` and `X-Frame-Options: DENY`: no other site can frame a page
///   (clickjacking a signed-in user). Only when the response has no `Content-Security-Policy` of its own: an
///   application that writes its own policy must include `frame-ancestors` in it.
/// - `X-Content-Type-Options: nosniff`: a response is never read as another type than it says.
/// - `Referrer-Policy: same-origin`: a page's URL (which may hold a `returnTo`, or a code during sign-in) never
///   goes to another site in `Referer`. Not `no-referrer`: with it, browsers send `Origin: null` on the page's own
///   form POSTs, which the cross-site check must refuse.
///
/// Add it first: `router.add(middleware: sessions.securityHeadersMiddleware())`. It does not write a full
/// Content-Security-Policy for the application's pages (which scripts and styles they load is the application's to
/// say), nor rate-limit anything.
public struct SecurityHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
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
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var response = try await next(request, context)
        SecurityHeaders.apply(to: &response.headers, frameAncestors: frameAncestors, referrerPolicy: referrerPolicy)
        return response
    }
}

extension WebSessions {
    /// A ``SecurityHeadersMiddleware`` with the default policies (no framing, `nosniff`, `same-origin`).
    public func securityHeadersMiddleware<Context: RequestContext>() -> SecurityHeadersMiddleware<Context> {
        SecurityHeadersMiddleware()
    }
}
#endif
