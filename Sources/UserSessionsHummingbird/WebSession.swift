#if Hummingbird
import Hummingbird
import HummingbirdAuth
import UserSessions

/// The signed-in user of a request: the user's open controller (from the registry's get-or-restore) and the
/// browser's record. ``WebSessionMiddleware`` puts it in the request context as its `identity`.
public struct WebSession: Sendable {
    /// The user's controller: `try await session.controller.withAccessToken { … }` calls an API as the user.
    public let controller: UserSessionController
    /// The browser's record (whose session, its claims, when it ends).
    public let record: WebSessionRecord
    /// The key of the browser's record.
    let key: WebSessionKey

    /// The user's session identifier in the registry.
    public var identifier: String { record.identifier }
}

/// A request context that carries the signed-in user, for ``WebSessionMiddleware``: hummingbird-auth's
/// `AuthRequestContext` whose identity is a ``WebSession``, so `context.requireIdentity()` and hummingbird-auth's
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
