/// One change of the controller's state, delivered to every subscriber of
/// ``UserSessionController/events(bufferSize:)``.
///
/// Events never contain secrets.
public struct UserSessionEvent: Sendable, Hashable, CustomStringConvertible {
    /// Why a session was closed.
    public enum CloseReason: String, Sendable, Hashable {
        /// `close()` was called.
        case requested
        /// `closeAndClear()` was called; stored credentials were removed.
        case cleared
        /// Another session was opened in its place.
        case replaced
        /// An `open` was rolled back because `close()` arrived while services were starting.
        case rolledBack
        /// The controller was shut down.
        case shutdown
        /// The session's stored record was removed by another process or store instance sharing a
        /// ``CoordinatedTokenStore`` (for example by `closeAndClear()` there), or the user signed out on another
        /// controller or registry of this process sharing the store (any store). Nothing was written back.
        case clearedElsewhere
    }

    /// Why a session became invalid.
    public enum InvalidationReason: Sendable, Hashable {
        /// A service failed or was cancelled while starting.
        case serviceStartFailed(service: String)
        /// The refresh token was rejected (`invalid_grant`): the credentials were revoked. Also when another
        /// controller of the same process sharing the store had the same user's newest refresh token rejected:
        /// every session holding it ends at once, without presenting it again; and when a coordinated store reports
        /// that another instance had it rejected (the record is marked refused).
        case credentialsRevoked
        /// The credentials expired and could not be refreshed.
        case credentialsExpired
    }

    /// What changed when credentials were updated from outside.
    public struct CredentialsChange: Sendable, Hashable {
        /// The access token now expires later than before.
        public var extended: Bool
        /// Permissions granted now that were not before.
        public var addedPermissions: Set<String>
        /// Permissions no longer granted.
        public var removedPermissions: Set<String>
        /// The credentials were adopted from the token store, where another process (or another store instance)
        /// had put them, for example after it refreshed them: this controller did not call its refresher.
        public var adoptedFromStore: Bool

        /// Creates a change description.
        public init(
            extended: Bool, addedPermissions: Set<String> = [], removedPermissions: Set<String> = [],
            adoptedFromStore: Bool = false
        ) {
            self.extended = extended
            self.addedPermissions = addedPermissions
            self.removedPermissions = removedPermissions
            self.adoptedFromStore = adoptedFromStore
        }
    }

    /// What happened.
    public enum Kind: Sendable, Hashable {
        /// The first element of every subscription: the state at the time of subscribing.
        case current
        /// A session was opened.
        case opened
        /// A session was closed.
        case closed(CloseReason)
        /// A session became invalid.
        case invalidated(InvalidationReason)
        /// A refresh started.
        case refreshStarted
        /// A refresh succeeded and the new credentials are in use: this controller's, or one that another controller
        /// of the same user in this process made (over a plain token store, every controller holding the user takes
        /// the newest credentials at once).
        case credentialsRefreshed
        /// Credentials were replaced through ``UserSessionController/updateCredentials(_:)`` (of this controller, or of
        /// another controller of the same user in this process, over a plain token store), or adopted from the token
        /// store (``CredentialsChange/adoptedFromStore``) after another process rotated them.
        case credentialsUpdated(CredentialsChange)
        /// A refresh failed.
        case refreshFailed(RefreshFailureClass)
        /// The refresh-loop breaker tripped.
        case refreshLoopTripped
        /// Writing to the token store failed; the credentials are kept in memory and writing is retried.
        case persistenceFailed
        /// Stored data for the identifier is corrupt; it was kept, not deleted.
        case storeCorrupt(identifier: String)
        /// An attached service failed or was cancelled while starting.
        case serviceStartFailed(service: String)
        /// An attached service did not stop within its deadline and was left behind.
        case serviceStopOverran(service: String)
        /// Signing out could not revoke the credentials at the authorization server (RFC 7009): the server refused
        /// (``RefreshFailureClass/misconfiguration``, or ``RefreshFailureClass/transient`` for 5xx), did not answer
        /// within ``UserSessionController/Configuration/revocationTimeout`` (``RefreshFailureClass/transient``), or
        /// the caller was cancelled (``RefreshFailureClass/cancelled``). The local sign-out happened anyway; the
        /// credentials may still be valid at the server until they expire. ``UserSessionEvent/detail`` says why.
        case revocationFailed(RefreshFailureClass)
    }

    /// What happened.
    public var kind: Kind
    /// The session as it is after this event.
    public var session: UserSession
    /// A number that grows by one with every event the controller emits.
    public var sequence: UInt64
    /// Extra detail for people (never secrets), such as the error that caused a failure.
    public var detail: String?

    /// Creates an event.
    public init(kind: Kind, session: UserSession, sequence: UInt64, detail: String? = nil) {
        self.kind = kind
        self.session = session
        self.sequence = sequence
        self.detail = detail
    }

    public var description: String {
        "UserSessionEvent(#\(sequence) \(kind), \(session)\(detail.map { ", \($0)" } ?? ""))"
    }
}

extension UserSessionEvent.Kind: CustomStringConvertible {
    /// A short form for logs, such as `closed(cleared)` or `refreshFailed(transient)`.
    public var description: String {
        switch self {
        case .current: return "current"
        case .opened: return "opened"
        case .closed(let reason): return "closed(\(reason.rawValue))"
        case .invalidated(let reason): return "invalidated(\(reason))"
        case .refreshStarted: return "refreshStarted"
        case .credentialsRefreshed: return "credentialsRefreshed"
        case .credentialsUpdated(let change):
            var parts: [String] = []
            if change.adoptedFromStore { parts.append("adoptedFromStore") }
            if change.extended { parts.append("extended") }
            if !change.addedPermissions.isEmpty { parts.append("added: \(change.addedPermissions.sorted())") }
            if !change.removedPermissions.isEmpty { parts.append("removed: \(change.removedPermissions.sorted())") }
            return "credentialsUpdated(\(parts.joined(separator: ", ")))"
        case .refreshFailed(let failureClass): return "refreshFailed(\(failureClass))"
        case .refreshLoopTripped: return "refreshLoopTripped"
        case .persistenceFailed: return "persistenceFailed"
        case .storeCorrupt(let identifier): return "storeCorrupt(\(identifier))"
        case .serviceStartFailed(let service): return "serviceStartFailed(\(service))"
        case .serviceStopOverran(let service): return "serviceStopOverran(\(service))"
        case .revocationFailed(let failureClass): return "revocationFailed(\(failureClass))"
        }
    }
}

extension UserSessionEvent.InvalidationReason: CustomStringConvertible {
    /// A short form for logs, such as `credentialsRevoked`.
    public var description: String {
        switch self {
        case .serviceStartFailed(let service): return "serviceStartFailed(\(service))"
        case .credentialsRevoked: return "credentialsRevoked"
        case .credentialsExpired: return "credentialsExpired"
        }
    }
}
