#if Hummingbird || Vapor

/// What a route needs of the browser, for each adapter's web-session middleware.
public enum WebSessionRequirement: Sendable, Hashable {
    /// A signed-in user; navigations without one are redirected to the login route, other requests get a 401.
    case required
    /// A signed-in user; every request without one gets a JSON 401 (for APIs and the proxy).
    case api
    /// The user when there is one; requests without one reach the route with no identity.
    case optional
}
#endif
