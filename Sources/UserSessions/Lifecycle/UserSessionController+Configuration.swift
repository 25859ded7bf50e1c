extension UserSessionController {
    /// How many refreshes within how long trip the refresh-loop breaker.
    public struct RefreshLoopPolicy: Sendable, Hashable {
        /// More than this many refreshes within ``window`` trip the breaker.
        public var maximumRefreshes: Int
        /// The sliding window.
        public var window: Duration

        /// Creates a policy; the default trips on a fourth refresh within 30 seconds.
        public init(maximumRefreshes: Int = 3, window: Duration = .seconds(30)) {
            self.maximumRefreshes = maximumRefreshes
            self.window = window
        }
    }

    /// Settings of a controller. Every field has a default.
    ///
    /// The defaults work for tokens of every lifetime: ``refreshLeadTime`` and ``proactiveRefreshWindow`` are upper
    /// bounds that shrink to a tenth and a quarter of each token's own lifetime when it is known (from
    /// ``Credentials/lastRefreshedAt``, or the time its refresh started), and the refresh-loop breaker's window
    /// shrinks to that lifetime (at least 1 s). So a 2-s, a 60-s or a 300-s token is refreshed once, when about
    /// three quarters of its life have passed, and never trips the breaker. A configuration that cannot work is a
    /// typed error: see ``validate()``.
    public struct Configuration: Sendable {
        /// How long each service's `stop` may take before it is reported and left behind. Default 10 s.
        public var serviceStopTimeout: Duration
        /// How long closing waits for a token-store write in progress, and for the last write of credentials that
        /// could not be stored before, each. A store that overruns it is reported with `.persistenceFailed` and left
        /// behind, so `close()` never hangs. Default 10 s.
        public var storeTimeout: Duration
        /// How many events each subscriber may have waiting before the oldest are dropped. Default 256.
        public var eventBufferSize: Int
        /// A token that expires within this time is refreshed before it is handed out; callers wait. Default 60 s;
        /// at most a tenth of the token's lifetime when that is known.
        public var refreshLeadTime: Duration
        /// A token that expires within this time (but outside ``refreshLeadTime``) is still handed out while one
        /// refresh runs in the background. Default 5 minutes; at most a quarter of the token's lifetime when that
        /// is known. Must not be shorter than ``refreshLeadTime``.
        public var proactiveRefreshWindow: Duration
        /// The first delay before a failed refresh or a failed write is retried; it doubles, with jitter, up to
        /// ``maximumRetryDelay``. Default 1 s. A failed write is retried in the background on this schedule
        /// (timed by ``clock``) whether or not anyone asks for a token; while an expired token's refresh is backing
        /// off, token requests get the last failure at once instead of calling the refresher again.
        public var initialRetryDelay: Duration
        /// The longest retry delay. Default 60 s.
        public var maximumRetryDelay: Duration
        /// The refresh-loop breaker. Default: more than 3 refreshes within 30 s.
        public var refreshLoopPolicy: RefreshLoopPolicy
        /// The clock used to judge expiry and to time retries. Default ``SessionClock/system``.
        public var clock: SessionClock
        /// Whether `open` persists the session identifier for ``UserSessionController/restore()``. Default `true`;
        /// ``UserSessionRegistry`` turns it off for its controllers.
        public var persistsCurrentIdentifier: Bool
        /// Where sessions keep their own documents and caches, if anywhere. Default `nil` (none).
        public var dataDirectories: SessionDirectories?
        /// Who watches the controller as it works, for logs and metrics (see ``UserSessionObserver``). Default none.
        public var observers: [any UserSessionObserver] = []
        /// What runs around refreshes, restores and revocations, for tracing (see ``UserSessionInstrumentation``).
        /// Default `nil` (none).
        public var instrumentation: (any UserSessionInstrumentation)? = nil
        /// Whether signing out (``UserSessionController/closeAndClear()``,
        /// ``UserSessionRegistry/closeAndClear(identifier:)``) first revokes the credentials at the authorization
        /// server, through ``TokenRefresher/revoke(_:)`` (RFC 7009), so they stop working everywhere. Default `true`;
        /// it does something only when the refresher can revoke (``TokenRefresher/canRevoke``; for
        /// ``OAuth2TokenRefresher``, when it has a revocation endpoint). A failed revocation is reported with
        /// `.revocationFailed` and never stops the local sign-out. A refresh that was on its way back when the user
        /// signed out (the server had rotated the refresh token the sign-out revoked, which a server may ignore) has
        /// its result revoked too when it arrives; and a sign-out revokes the newest credentials the process knows
        /// for the user first (a rotation the store has not taken yet), then the older ones it holds or reads.
        public var revokesOnSignOut: Bool
        /// How long signing out waits for the revocation (reading the stored credentials if needed, then the
        /// request) before it reports `.revocationFailed(.transient)`, cancels it and removes the credentials
        /// locally anyway. Timed by ``clock``. Default 5 s.
        public var revocationTimeout: Duration
        /// What the service-stop deadline waits on: real time, or a test's manual clock.
        var deadlineClock: DeadlineClock = .realTime

        /// Creates a configuration.
        public init(
            serviceStopTimeout: Duration = .seconds(10),
            storeTimeout: Duration = .seconds(10),
            eventBufferSize: Int = 256,
            refreshLeadTime: Duration = .seconds(60),
            proactiveRefreshWindow: Duration = .seconds(300),
            initialRetryDelay: Duration = .seconds(1),
            maximumRetryDelay: Duration = .seconds(60),
            refreshLoopPolicy: RefreshLoopPolicy = RefreshLoopPolicy(),
            clock: SessionClock = .system,
            persistsCurrentIdentifier: Bool = true,
            dataDirectories: SessionDirectories? = nil,
            revokesOnSignOut: Bool = true,
            revocationTimeout: Duration = .seconds(5)
        ) {
            self.serviceStopTimeout = serviceStopTimeout
            self.storeTimeout = storeTimeout
            self.eventBufferSize = eventBufferSize
            self.refreshLeadTime = refreshLeadTime
            self.proactiveRefreshWindow = proactiveRefreshWindow
            self.initialRetryDelay = initialRetryDelay
            self.maximumRetryDelay = maximumRetryDelay
            self.refreshLoopPolicy = refreshLoopPolicy
            self.clock = clock
            self.persistsCurrentIdentifier = persistsCurrentIdentifier
            self.dataDirectories = dataDirectories
            self.revokesOnSignOut = revokesOnSignOut
            self.revocationTimeout = revocationTimeout
        }

        /// Checks that this configuration can work.
        ///
        /// ``UserSessionController`` runs this when it is created; with a configuration that fails it, every open
        /// and restore throws the same error. Call it where you build the configuration to fail at start-up.
        ///
        /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/invalidConfiguration`` naming the field
        ///   when a timeout or retry delay is not positive, ``eventBufferSize`` is below 1, ``refreshLeadTime`` is
        ///   negative or longer than ``proactiveRefreshWindow``, ``maximumRetryDelay`` is shorter than
        ///   ``initialRetryDelay``, or ``refreshLoopPolicy`` allows fewer than 1 refresh or has a window that is
        ///   not positive.
        public func validate() throws(UserSessionError) {
            try Self.require(serviceStopTimeout > .zero, "serviceStopTimeout must be positive")
            try Self.require(storeTimeout > .zero, "storeTimeout must be positive")
            try Self.require(eventBufferSize >= 1, "eventBufferSize must be at least 1")
            try Self.require(refreshLeadTime >= .zero, "refreshLeadTime must not be negative")
            try Self.require(
                proactiveRefreshWindow >= refreshLeadTime,
                "proactiveRefreshWindow must not be shorter than refreshLeadTime")
            try Self.require(initialRetryDelay > .zero, "initialRetryDelay must be positive")
            try Self.require(
                maximumRetryDelay >= initialRetryDelay, "maximumRetryDelay must not be shorter than initialRetryDelay")
            try Self.require(
                refreshLoopPolicy.maximumRefreshes >= 1, "refreshLoopPolicy.maximumRefreshes must be at least 1")
            try Self.require(refreshLoopPolicy.window > .zero, "refreshLoopPolicy.window must be positive")
            try Self.require(revocationTimeout > .zero, "revocationTimeout must be positive")
        }

        private static func require(_ condition: Bool, _ message: String) throws(UserSessionError) {
            if !condition { throw UserSessionError(.invalidConfiguration, "invalid configuration: \(message)") }
        }
    }
}

extension UserSessionController.Configuration {
    /// What the credentials gate needs of this configuration, and nothing else: the refresh rules as plain values,
    /// the store's deadline and the clocks.
    var refreshPolicy: CredentialsGate.Policy {
        CredentialsGate.Policy(
            refresh: RefreshStateMachine.Policy(
                leadTime: refreshLeadTime, softWindow: proactiveRefreshWindow, initialRetryDelay: initialRetryDelay,
                maximumRetryDelay: maximumRetryDelay, loopMaximum: refreshLoopPolicy.maximumRefreshes,
                loopWindow: refreshLoopPolicy.window),
            storeTimeout: storeTimeout, clock: clock, deadlineClock: deadlineClock)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
