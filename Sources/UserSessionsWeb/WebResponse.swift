#if Hummingbird || Vapor
import Foundation
import HTTPTypes

/// An answer the web-session layer decided, free of any framework: each adapter (Hummingbird, Vapor) turns it into
/// its own response as it is, status, header fields (`Set-Cookie` included) and body.
package struct WebResponse: Sendable {
    /// The status.
    package var status: HTTPResponse.Status
    /// The header fields.
    package var headers: HTTPFields
    /// The body.
    package var body: [UInt8]

    /// A response.
    package init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Adds `cookie` as a `Set-Cookie` field.
    package mutating func setCookie(_ cookie: WebSessionCookie) {
        headers.append(HTTPField(name: .setCookie, value: cookie.headerValue))
    }

    /// A JSON response that is never cached.
    package static func json(_ object: [String: String], status: HTTPResponse.Status) -> WebResponse {
        let data = (try? JSONEncoder.webSessions.encode(object)) ?? Data("{}".utf8)
        return WebResponse(
            status: status, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"],
            body: Array(data))
    }

    /// A redirect that is never cached.
    package static func redirect(to location: String, status: HTTPResponse.Status) -> WebResponse {
        WebResponse(status: status, headers: [.location: location, .cacheControl: "no-store"])
    }

    /// The answer when the user's session cannot be resolved for now: 503 with `Retry-After`.
    package static func unavailable() -> WebResponse {
        var response = json(["error": "temporarily_unavailable"], status: .serviceUnavailable)
        response.headers[.retryAfter] = "5"
        return response
    }
}
#endif
