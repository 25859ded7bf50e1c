#if Logging
import Logging
import UserSessions

/// Logs what controllers and registries do through swift-log: every event once, at a level that fits it, with
/// structured metadata and never a secret.
///
/// Add it to ``UserSessionController/Configuration/observers`` (or use the `logger:` initializers of
/// `UserSessionController` and `UserSessionRegistry`), or feed it event streams with ``log(events:)``: use one way
/// or the other, not both, or events are logged twice.
///
/// Levels: routine changes (opened, closed, refreshed) at `debug` or `info`; a transient or terminal refresh
/// failure, an invalidation, a service that overran its stop deadline and a failed revocation at sign-out at
/// `warning`; a misconfigured client, a
/// refresh loop, a failed or corrupt store and a service that failed to start at `error`. Metadata keys:
/// `user_session.identifier`, `user_session.generation`, `user_session.event.sequence`, `user_session.event`,
/// `user_session.state`, `user_session.failure_class`, `user_session.detail`, and for refreshes
/// `user_session.refresh.outcome`, `user_session.refresh.duration` and `user_session.refresh.waiters`.
public struct UserSessionLogObserver: UserSessionObserver {
    /// Where the lines go.
    public var logger: Logger

    /// Creates an observer that logs to `logger`.
    public init(logger: Logger) {
        self.logger = logger
    }

    public func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        log(event, generation: context.generation)
    }

    public func observeRefresh(_ report: UserSessionRefreshReport) {
        var metadata: Logger.Metadata = [
            MetadataKey.generation: "\(report.generation)",
            MetadataKey.refreshOutcome: "\(report.outcome)",
            MetadataKey.refreshDuration: "\(report.duration)",
            MetadataKey.refreshWaiters: "\(report.waiters)",
        ]
        metadata[MetadataKey.identifier] = report.identifier.map { "\($0)" }
        metadata[MetadataKey.failureClass] = report.failureClass.map { "\($0)" }
        logger.debug("refresh finished", metadata: metadata)
    }

    public func observeReplay(_ report: UserSessionReplayReport) {
        logger.debug(
            "replaying an operation that failed authentication",
            metadata: report.identifier.map { [MetadataKey.identifier: "\($0)"] })
    }

    public func observeEviction(_ report: UserSessionEvictionReport) {
        logger.debug("controller evicted", metadata: [MetadataKey.identifier: "\(report.identifier)"])
    }

    /// Logs what a ``UserSessions/ClientCredentialsTokenManager`` did: a token issued, adopted, forgotten or replayed
    /// at `debug`; a transient failure at `warning`; a misconfiguration, a rejected client and a failed store at
    /// `error`. Metadata: `client_token.event`, `client_token.client_id`, `client_token.scopes`,
    /// `client_token.resources`, `client_token.audience`, `user_session.identifier` (the user of a token exchange),
    /// `client_token.waiters`, `client_token.duration`, `user_session.detail`; never a token.
    public func observeClientToken(_ event: ClientTokenEvent) {
        let (level, message): (Logger.Level, String) =
            switch event.kind {
            case .tokenIssued: (.debug, "client token issued")
            case .tokenAdopted: (.debug, "client token adopted from the store")
            case .forgotten: (.debug, "client token forgotten")
            case .replayed: (.debug, "replaying an operation with another client token")
            case .requestFailed(.cancelled): (.debug, "client token request cancelled")
            case .requestFailed(.transient): (.warning, "client token request failed")
            case .requestFailed: (.error, "client token request failed")
            case .clientRejected: (.error, "the token endpoint rejected the client; its keys ask no more")
            case .persistenceFailed: (.error, "storing or reading a client token failed")
            }
        var metadata: Logger.Metadata = [
            MetadataKey.clientTokenEvent: "\(event.kind)",
            MetadataKey.clientID: "\(event.clientID)",
            MetadataKey.scopes: "\(event.scopes.joined(separator: " "))",
            MetadataKey.waiters: "\(event.waiters)",
        ]
        if !event.resources.isEmpty { metadata[MetadataKey.resources] = "\(event.resources.joined(separator: " "))" }
        metadata[MetadataKey.audience] = event.audience.map { "\($0)" }
        metadata[MetadataKey.identifier] = event.subject.map { "\($0)" }
        metadata[MetadataKey.clientTokenDuration] = event.duration.map { "\($0)" }
        metadata[MetadataKey.detail] = event.detail.map { "\($0)" }
        logger.log(level: level, "\(message)", metadata: metadata)
    }

    /// Logs one event, as the observer does. The `.current` element that starts every subscription is not an
    /// event and is not logged.
    ///
    /// - Parameter generation: The session generation, when known (observers know it; event streams do not).
    public func log(_ event: UserSessionEvent, generation: UInt64? = nil) {
        guard let (level, message) = Self.levelAndMessage(event.kind) else { return }
        var metadata: Logger.Metadata = [
            MetadataKey.sequence: "\(event.sequence)",
            MetadataKey.event: "\(event.kind)",
            MetadataKey.state: "\(event.session.state)",
        ]
        metadata[MetadataKey.identifier] = event.session.identifier.map { "\($0)" }
        metadata[MetadataKey.generation] = generation.map { "\($0)" }
        metadata[MetadataKey.detail] = event.detail.map { "\($0)" }
        switch event.kind {
        case .refreshFailed(let failureClass), .revocationFailed(let failureClass):
            metadata[MetadataKey.failureClass] = "\(failureClass)"
        default:
            break
        }
        logger.log(level: level, "\(message)", metadata: metadata)
    }

    /// Logs every event of `events` (for example ``UserSessionController/events(bufferSize:)``) until it finishes.
    ///
    /// Subscribe with a large buffer (`events(bufferSize: .max)`) if no event may be missed: a subscription with a
    /// small buffer drops the oldest events of a slow reader.
    public func log<Events: AsyncSequence<UserSessionEvent, Never>>(events: Events) async {
        for await event in events { log(event) }
    }

    /// The level and message of an event kind, or `nil` for `.current`.
    static func levelAndMessage(_ kind: UserSessionEvent.Kind) -> (Logger.Level, String)? {
        switch kind {
        case .current: return nil
        case .opened: return (.info, "session opened")
        case .closed: return (.info, "session closed")
        case .invalidated(.serviceStartFailed): return (.error, "session invalidated")
        case .invalidated: return (.warning, "session invalidated")
        case .refreshStarted: return (.debug, "refresh started")
        case .credentialsRefreshed: return (.debug, "credentials refreshed")
        case .credentialsUpdated: return (.info, "credentials updated")
        case .refreshFailed(.cancelled): return (.debug, "refresh cancelled")
        case .refreshFailed(.misconfiguration): return (.error, "refresh failed")
        case .refreshFailed: return (.warning, "refresh failed")
        case .refreshLoopTripped: return (.error, "refresh loop breaker tripped")
        case .persistenceFailed: return (.error, "writing credentials to the token store failed")
        case .storeCorrupt: return (.error, "stored session is corrupt; it was kept")
        case .serviceStartFailed: return (.error, "service failed to start")
        case .serviceStopOverran: return (.warning, "service overran its stop deadline; left behind")
        case .revocationFailed: return (.warning, "revoking the credentials at sign-out failed; signed out locally")
        }
    }
}

/// The metadata keys of the package's log lines.
enum MetadataKey {
    static let identifier = "user_session.identifier"
    static let generation = "user_session.generation"
    static let sequence = "user_session.event.sequence"
    static let event = "user_session.event"
    static let state = "user_session.state"
    static let failureClass = "user_session.failure_class"
    static let detail = "user_session.detail"
    static let refreshOutcome = "user_session.refresh.outcome"
    static let refreshDuration = "user_session.refresh.duration"
    static let refreshWaiters = "user_session.refresh.waiters"
    static let storeOperation = "user_session.store.operation"
    static let error = "user_session.error"
    static let clientTokenEvent = "client_token.event"
    static let clientID = "client_token.client_id"
    static let scopes = "client_token.scopes"
    static let resources = "client_token.resources"
    static let audience = "client_token.audience"
    static let waiters = "client_token.waiters"
    static let clientTokenDuration = "client_token.duration"
}
#endif
