import Foundation

/// A snapshot of the controller's session: who, and in which state.
public struct UserSession: Sendable, Hashable, CustomStringConvertible {
    /// The state of a session.
    public enum State: String, Sendable, Hashable, CustomStringConvertible {
        /// No session has been opened yet.
        case undefined
        /// A user is logged in and the session's services are running.
        case opened
        /// The session was closed; stored credentials may remain for ``UserSessionController/restore()``.
        case closed
        /// Bootstrapping failed, or the credentials were revoked or could not be refreshed.
        case invalid

        public var description: String { rawValue }
    }

    /// The session identifier (the key of its stored credentials), or `nil` while ``State/undefined``.
    public var identifier: String?
    /// The state.
    public var state: State
    /// The user, or `nil` while ``State/undefined``.
    public var userInfo: UserInfo?
    /// When the session was opened, if it was.
    public var openedAt: Date?

    /// Creates a session snapshot.
    public init(identifier: String? = nil, state: State = .undefined, userInfo: UserInfo? = nil, openedAt: Date? = nil)
    {
        self.identifier = identifier
        self.state = state
        self.userInfo = userInfo
        self.openedAt = openedAt
    }

    /// Whether a user is logged in.
    public var isOpened: Bool { state == .opened }

    public var description: String {
        "UserSession(\(identifier.map { "\"\($0)\"" } ?? "nil"), \(state))"
    }
}
