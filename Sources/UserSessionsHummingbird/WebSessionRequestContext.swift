#if Hummingbird
import Hummingbird
import HummingbirdAuth
import UserSessionsWeb

/// A request context that carries the signed-in user, for ``WebSessionMiddleware``: hummingbird-auth's
/// `AuthRequestContext` whose identity is a `WebSession`, so `context.requireIdentity()` and hummingbird-auth's
/// middleware work with it.
public protocol WebSessionRequestContext: AuthRequestContext where Identity == WebSession {}

/// The request context of an application whose only need is the signed-in user.
public struct BasicWebSessionRequestContext: WebSessionRequestContext, RequestContext {
    /// Hummingbird's core context.
    public var coreContext: CoreRequestContextStorage
    /// The signed-in user, set by ``WebSessionMiddleware``.
    public var identity: WebSession?

    /// A context for a new request.
    public init(source: Source) {
        coreContext = .init(source: source)
        identity = nil
    }
}
#endif
