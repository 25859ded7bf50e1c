#if Hummingbird
import HTTPTypes
import Hummingbird

/// Refuses cross-site requests (CSRF), on top of the cookie's `SameSite=Lax`.
///
/// - State-changing requests (every method but GET, HEAD and OPTIONS) must come from the application's own origin:
///   an `Origin` header other than the public URL's origin (`null` included), or `Sec-Fetch-Site` other than
///   `same-origin` or `none`, is refused with a JSON 403. Requests with neither header (not sent by a browser) pass.
/// - With `requiringHeader`, every request must also carry the CSRF header (``WebSessionConfiguration/csrfHeaderName``,
///   value `1`), which a cross-site form or a simple cross-site fetch cannot send: for APIs and the proxy.
///
/// Paths in `exemptPaths` (by default the back-channel logout route, which the provider calls server to server and
/// which is authenticated by its signed logout token) are not checked.
public struct CrossSiteRequestMiddleware<Context: RequestContext>: RouterMiddleware {
    let check: CrossSiteRequestCheck
    let exemptPaths: Set<String>

    /// Checks requests against `origin` (such as `https://app.example.com`).
    public init(origin: String, requiringHeader header: String? = nil, exemptPaths: Set<String> = []) {
        check = CrossSiteRequestCheck(origin: origin, header: header)
        self.exemptPaths = exemptPaths
    }

    /// Refuses the request with a 403 when it is cross-site (or lacks the header), otherwise runs the chain.
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if exemptPaths.contains(request.uri.path) { return try await next(request, context) }
        if let refusal = check.refusal(of: request) { return refusal }
        return try await next(request, context)
    }
}

extension WebSessions {
    /// A ``CrossSiteRequestMiddleware`` for the public URL's origin, which exempts the back-channel logout route;
    /// with `requiringHeader`, every request must carry the CSRF header too.
    public func crossSiteRequestMiddleware<Context: RequestContext>(
        requiringHeader: Bool = false, exemptPaths: Set<String> = []
    ) -> CrossSiteRequestMiddleware<Context> {
        CrossSiteRequestMiddleware(
            origin: configuration.origin, requiringHeader: requiringHeader ? configuration.csrfHeaderName : nil,
            exemptPaths: exemptPaths.union([configuration.routePrefix + "/backchannel-logout"]))
    }
}

/// The checks of ``CrossSiteRequestMiddleware``, shared with the logout route.
struct CrossSiteRequestCheck: Sendable {
    /// The origin requests must come from.
    let origin: String
    /// The header every request must carry with the value `1`, if any.
    var header: String? = nil

    /// A 403 for a request that is cross-site or lacks the header, or `nil`.
    func refusal(of request: Request) -> Response? {
        if let header {
            guard let name = HTTPField.Name(header), request.headers[name] == "1" else {
                return WebSessions.json(
                    ["error": "csrf", "detail": "the \(header) header is missing"], status: .forbidden)
            }
        }
        let safe = request.method == .get || request.method == .head || request.method == .options
        if safe { return nil }
        if let name = HTTPField.Name("Sec-Fetch-Site"), let site = request.headers[name]?.lowercased(),
            site != "same-origin", site != "none"
        {
            return WebSessions.json(["error": "csrf", "detail": "cross-site request"], status: .forbidden)
        }
        if let requestOrigin = request.headers[.origin], requestOrigin.lowercased() != origin.lowercased() {
            return WebSessions.json(["error": "csrf", "detail": "cross-origin request"], status: .forbidden)
        }
        return nil
    }
}

#endif
