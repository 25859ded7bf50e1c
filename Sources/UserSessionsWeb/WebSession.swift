#if Hummingbird || Vapor
import UserSessions

/// The signed-in user of a request: the user's open controller (from the registry's get-or-restore) and the
/// browser's record. Each adapter's middleware puts it where its framework keeps the request's user (Hummingbird's
/// `context.identity`, Vapor's `req.auth`).
public struct WebSession: Sendable {
    /// The user's controller: `try await session.controller.withAccessToken { … }` calls an API as the user.
    public let controller: UserSessionController
    /// The browser's record (whose session, its claims, when it ends).
    public let record: WebSessionRecord
    /// The key of the browser's record.
    package let key: WebSessionKey

    package init(controller: UserSessionController, record: WebSessionRecord, key: WebSessionKey) {
        self.controller = controller
        self.record = record
        self.key = key
    }

    /// The user's session identifier in the registry.
    public var identifier: String { record.identifier }
}
#endif
