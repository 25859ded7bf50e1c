#if Hummingbird || Vapor
import HTTPTypes

/// The cross-site request (CSRF) check of every adapter's middleware and of the logout route, on top of the
/// cookie's `SameSite=Lax`.
///
/// - State-changing requests (every method but GET, HEAD and OPTIONS) must come from the application's own origin:
///   an `Origin` header other than the public URL's origin (`null` included), or `Sec-Fetch-Site` other than
///   `same-origin` or `none`, is refused with a JSON 403. Requests with neither header (not sent by a browser) pass.
/// - With a `header`, every request must also carry it with the value `1`, which a cross-site form or a simple
///   cross-site fetch cannot send: for APIs and the proxy.
/// - Paths in `exemptPaths` (the back-channel logout route, which the provider calls server to server and which is
///   authenticated by its signed logout token) are not checked.
package struct CrossSiteRequestCheck: Sendable {
    /// The origin requests must come from.
    package let origin: String
    /// The header every request must carry with the value `1`, if any.
    package let header: String?
    /// The paths not checked.
    package let exemptPaths: Set<String>

    /// A check against `origin` (such as `https://app.example.com`).
    package init(origin: String, header: String? = nil, exemptPaths: Set<String> = []) {
        self.origin = origin
        self.header = header
        self.exemptPaths = exemptPaths
    }

    /// A 403 for a request that is cross-site or lacks the header, or `nil`.
    package func refusal(of request: WebRequest) -> WebResponse? {
        if exemptPaths.contains(request.path) { return nil }
        if let header {
            guard let name = HTTPField.Name(header), request.headers[name] == "1" else {
                return .json(["error": "csrf", "detail": "the \(header) header is missing"], status: .forbidden)
            }
        }
        let safe = request.method == .get || request.method == .head || request.method == .options
        if safe { return nil }
        if let name = HTTPField.Name("Sec-Fetch-Site"), let site = request.headers[name]?.lowercased(),
            site != "same-origin", site != "none"
        {
            return .json(["error": "csrf", "detail": "cross-site request"], status: .forbidden)
        }
        if let requestOrigin = request.headers[.origin], requestOrigin.lowercased() != origin.lowercased() {
            return .json(["error": "csrf", "detail": "cross-origin request"], status: .forbidden)
        }
        return nil
    }
}

extension WebSessions {
    /// The check for the public URL's origin, which exempts the back-channel logout route; with `requiringHeader`,
    /// every request must carry the CSRF header too.
    package func crossSiteRequestCheck(requiringHeader: Bool, exemptPaths: Set<String>) -> CrossSiteRequestCheck {
        CrossSiteRequestCheck(
            origin: configuration.origin, header: requiringHeader ? configuration.csrfHeaderName : nil,
            exemptPaths: exemptPaths.union([configuration.routePrefix + "/backchannel-logout"]))
    }
}
#endif
