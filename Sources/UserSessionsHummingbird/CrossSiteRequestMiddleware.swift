#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessionsWeb

/// Refuses cross-site requests (CSRF), on top of the cookie's `SameSite=Lax`, with the web-session layer's check.
///
/// - State-changing requests (every method but GET, HEAD and OPTIONS) must come from the application's own origin:
///   an `Origin` header other than the public URL's origin (`null` included), or `Sec-Fetch-Site` other than
///   `same-origin` or `none`, is refused with a JSON 403. Requests with neither header (not sent by a browser) pass.
/// - With `requiringHeader`, every request must also carry the CSRF header (`WebSessionConfiguration/csrfHeaderName`,
///   value `1`), which a cross-site form or a simple cross-site fetch cannot send: for APIs and the proxy.
///
/// Paths in `exemptPaths` (by default the back-channel logout route, which the provider calls server to server and
/// which is authenticated by its signed logout token) are not checked.
public struct CrossSiteRequestMiddleware<Context: RequestContext>: RouterMiddleware {
    let check: CrossSiteRequestCheck

    /// Checks requests against `origin` (such as `https://app.example.com`).
    public init(origin: String, requiringHeader header: String? = nil, exemptPaths: Set<String> = []) {
        check = CrossSiteRequestCheck(origin: origin, header: header, exemptPaths: exemptPaths)
    }

    init(check: CrossSiteRequestCheck) {
        self.check = check
    }

    /// Refuses the request with a 403 when it is cross-site (or lacks the header), otherwise runs the chain.
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if let refusal = check.refusal(of: WebRequest(request)) { return Response(refusal) }
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
            check: crossSiteRequestCheck(requiringHeader: requiringHeader, exemptPaths: exemptPaths))
    }
}
#endif
