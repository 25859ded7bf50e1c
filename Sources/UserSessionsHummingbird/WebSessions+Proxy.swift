#if Hummingbird
import HTTPTypes
import Hummingbird
import UserSessionsWeb

extension WebSessions {
    /// Mounts `proxy` at `path` (such as `/upstream`) on `router`: every method of `<path>/**` is forwarded as the
    /// signed-in user, with the header rules and limits of `TokenForwardingProxy`.
    ///
    /// The routes are behind a ``CrossSiteRequestMiddleware`` that requires the CSRF header (403 JSON without it)
    /// and a ``WebSessionMiddleware`` with `WebSessionRequirement/api` (401 JSON without a session; 503 and the
    /// session kept when a refresh fails for a passing reason; signed out when it fails for good).
    public func addProxy<Context: WebSessionRequestContext>(
        _ proxy: TokenForwardingProxy, at path: String, to router: Router<Context>
    ) {
        let mount = TokenForwardingProxy.mountPoint(path)
        let group = router.group(RouterPath(mount))
            .add(middleware: crossSiteRequestMiddleware(requiringHeader: true) as CrossSiteRequestMiddleware<Context>)
            .add(middleware: middleware(.api) as WebSessionMiddleware<Context>)
        let csrfHeader = configuration.csrfHeaderName
        let handler: @Sendable (Request, Context) async throws -> Response = { request, context in
            let session = try context.requireIdentity()
            return Response(
                try await proxy.forward(WebRequest(request), mount: mount, session: session, csrfHeader: csrfHeader))
        }
        for method in TokenForwardingProxy.methods {
            group.on("**", method: method, use: handler)
        }
    }
}
#endif
