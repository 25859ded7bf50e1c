#if Hummingbird || Vapor
import HTTPTypes

/// The headers that keep the application's own pages from being framed, sniffed or leaking their URL; each
/// adapter's security-headers middleware applies them to every response that does not set them itself:
///
/// - `Content-Security-Policy: frame-ancestors 'none'` and `X-Frame-Options: DENY`: no other site can frame a page
///   (clickjacking a signed-in user). Only when the response has no `Content-Security-Policy` of its own: an
///   application that writes its own policy must include `frame-ancestors` in it.
/// - `X-Content-Type-Options: nosniff`: a response is never read as another type than it says.
/// - `Referrer-Policy: same-origin`: a page's URL (which may hold a `returnTo`, or a code during sign-in) never
///   goes to another site in `Referer`. Not `no-referrer`: with it, browsers send `Origin: null` on the page's own
///   form POSTs, which the cross-site check must refuse.
package enum SecurityHeaders {
    // Both are valid field names, so the fallback is never taken.
    static let xFrameOptions = HTTPField.Name("X-Frame-Options") ?? .contentSecurityPolicyReportOnly
    static let referrerPolicy = HTTPField.Name("Referrer-Policy") ?? .contentSecurityPolicyReportOnly

    /// Adds to `headers` the fields they do not set.
    package static func apply(to headers: inout HTTPFields, frameAncestors: String, referrerPolicy policy: String) {
        if headers[.contentSecurityPolicy] == nil {
            headers[.contentSecurityPolicy] = "frame-ancestors " + frameAncestors
            if headers[xFrameOptions] == nil, frameAncestors == "'none'" {
                headers[xFrameOptions] = "DENY"
            }
        }
        if headers[.xContentTypeOptions] == nil { headers[.xContentTypeOptions] = "nosniff" }
        if headers[Self.referrerPolicy] == nil { headers[Self.referrerPolicy] = policy }
    }

    /// A small HTML page the layer writes (a failed sign-in), never cached, framed or sniffed.
    package static func page(_ html: String, status: HTTPResponse.Status) -> WebResponse {
        var response = WebResponse(
            status: status,
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                .contentSecurityPolicy: "default-src 'none'; frame-ancestors 'none'",
            ],
            body: Array(html.utf8))
        apply(to: &response.headers, frameAncestors: "'none'", referrerPolicy: "same-origin")
        return response
    }
}
#endif
