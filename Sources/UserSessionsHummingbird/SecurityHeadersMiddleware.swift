#if Hummingbird
import HTTPTypes
import Hummingbird

/// Sets the headers that keep the application's own pages from being framed, sniffed or leaking their URL, on
/// every response that does not set them itself:
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
        SecurityHeaders.apply(to: &response, frameAncestors: frameAncestors, referrerPolicy: referrerPolicy)
        return response
    }
}

/// The headers of ``SecurityHeadersMiddleware``, for the pages the kit writes itself.
enum SecurityHeaders {
    // Both are valid field names, so the fallback is never taken.
    static let xFrameOptions = HTTPField.Name("X-Frame-Options") ?? .contentSecurityPolicyReportOnly
    static let referrerPolicy = HTTPField.Name("Referrer-Policy") ?? .contentSecurityPolicyReportOnly

    static func apply(to response: inout Response, frameAncestors: String, referrerPolicy policy: String) {
        if response.headers[.contentSecurityPolicy] == nil {
            response.headers[.contentSecurityPolicy] = "frame-ancestors " + frameAncestors
            if response.headers[xFrameOptions] == nil, frameAncestors == "'none'" {
                response.headers[xFrameOptions] = "DENY"
            }
        }
        if response.headers[.xContentTypeOptions] == nil { response.headers[.xContentTypeOptions] = "nosniff" }
        if response.headers[Self.referrerPolicy] == nil { response.headers[Self.referrerPolicy] = policy }
    }

    /// A small HTML page the kit writes (a failed sign-in), never cached, framed or sniffed.
    static func page(_ html: String, status: HTTPResponse.Status) -> Response {
        var response = Response(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                .contentSecurityPolicy: "default-src 'none'; frame-ancestors 'none'",
            ],
            body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
        apply(to: &response, frameAncestors: "'none'", referrerPolicy: "same-origin")
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
