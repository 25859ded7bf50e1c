/// Watches what controllers and registries do, as it happens: the hook for logs and metrics.
///
/// Add observers to ``UserSessionController/Configuration/observers``; the controllers of a
/// ``UserSessionRegistry`` share its configuration, so they share its observers. The products
/// `UserSessionsLogging` (trait `Logging`) and `UserSessionsMetrics` (trait `Metrics`) provide observers for
/// swift-log and swift-metrics; this protocol itself needs no other package.
///
/// Unlike a subscription to ``UserSessionController/events(bufferSize:)``, an observer misses nothing and needs no
/// task of its own: it sees every event exactly once (not the `.current` element that starts a subscription), plus
/// what events do not carry: how long refreshes took and how many callers shared them, replays and evictions.
///
/// - Important: Every method is called synchronously on the task that made the change, after the change and
///   outside every lock of the package, and may be called concurrently from several tasks, for one controller too
///   (order events by ``UserSessionEvent/sequence``). Keep them fast and never block: they run on the path of the
///   change, for example before the callers waiting for a refresh are resumed. Nothing passed to them contains a
///   secret. Every method but ``observe(_:context:)`` has a default that does nothing.
public protocol UserSessionObserver: Sendable {
    /// A controller emitted `event`.
    func observe(_ event: UserSessionEvent, context: UserSessionEventContext)
    /// A refresh finished: committed, failed, or discarded because its session ended meanwhile.
    func observeRefresh(_ report: UserSessionRefreshReport)
    /// ``UserSessionController/withAccessToken(isAuthenticationFailure:_:)`` is replaying an operation that failed
    /// authentication.
    func observeReplay(_ report: UserSessionReplayReport)
    /// A registry dropped a controller whose session was not open (its credentials stay stored).
    func observeEviction(_ report: UserSessionEvictionReport)
    /// A ``ClientCredentialsTokenManager`` whose configuration lists this observer obtained, adopted or forgot a token
    /// of the server's own, or a request for one failed.
    func observeClientToken(_ event: ClientTokenEvent)
}

extension UserSessionObserver {
    public func observeRefresh(_ report: UserSessionRefreshReport) {}
    public func observeReplay(_ report: UserSessionReplayReport) {}
    public func observeEviction(_ report: UserSessionEvictionReport) {}
    public func observeClientToken(_ event: ClientTokenEvent) {}
}

/// What an observer learns about an event besides the event itself.
public struct UserSessionEventContext: Sendable, Hashable {
    /// The controller's session generation when the event was emitted: it grows by one with every open and
    /// restore, so it tells two sessions of one user apart.
    public var generation: UInt64
    /// The session's state before the event (``UserSessionEvent/session`` has the state after it).
    public var previousState: UserSession.State

    /// Creates a context.
    public init(generation: UInt64, previousState: UserSession.State) {
        self.generation = generation
        self.previousState = previousState
    }
}

/// How one refresh went.
public struct UserSessionRefreshReport: Sendable, Hashable {
    /// How a refresh ended.
    public enum Outcome: String, Sendable, Hashable, CustomStringConvertible {
        /// The new credentials were committed.
        case succeeded
        /// The refresher failed; ``UserSessionRefreshReport/failureClass`` says how.
        case failed
        /// The session ended (or was superseded) while the refresh ran, so its result was not served.
        case discarded

        public var description: String { rawValue }
    }

    /// The identifier of the session that was refreshed, if it was still known.
    public var identifier: String?
    /// The generation of the session that was refreshed (see ``UserSessionEventContext/generation``).
    public var generation: UInt64
    /// How it ended.
    public var outcome: Outcome
    /// The failure class when ``outcome`` is ``Outcome/failed``.
    public var failureClass: RefreshFailureClass?
    /// From calling the refresher to committing (or failing) its result.
    public var duration: Duration
    /// How many callers were waiting for this refresh and got its result (they shared one refresh).
    public var waiters: Int

    /// Creates a report.
    public init(
        identifier: String?, generation: UInt64, outcome: Outcome, failureClass: RefreshFailureClass? = nil,
        duration: Duration, waiters: Int
    ) {
        self.identifier = identifier
        self.generation = generation
        self.outcome = outcome
        self.failureClass = failureClass
        self.duration = duration
        self.waiters = waiters
    }
}

/// An operation replayed after an authentication failure.
public struct UserSessionReplayReport: Sendable, Hashable {
    /// The session's identifier.
    public var identifier: String?

    /// Creates a report.
    public init(identifier: String?) {
        self.identifier = identifier
    }
}

/// A controller that a registry dropped.
public struct UserSessionEvictionReport: Sendable, Hashable {
    /// The identifier of the user whose controller was dropped.
    public var identifier: String

    /// Creates a report.
    public init(identifier: String) {
        self.identifier = identifier
    }
}

extension Array where Element == any UserSessionObserver {
    /// Calls `body` with every observer, in order.
    func notify(_ body: (any UserSessionObserver) -> Void) {
        for observer in self { body(observer) }
    }
}
