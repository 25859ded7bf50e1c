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
    public struct Configuration: Sendable {
        /// How long each service's `stop` may take before it is reported and left behind. Default 10 s.
        public var serviceStopTimeout: Duration
        /// How long closing waits for a token-store write in progress, and for the last write of credentials that
        /// could not be stored before, each. A store that overruns it is reported with `.persistenceFailed` and left
        /// behind, so `close()` never hangs. Default 10 s.
        public var storeTimeout: Duration
        /// How many events each subscriber may have waiting before the oldest are dropped. Default 256.
        public var eventBufferSize: Int
        /// A token that expires within this time is refreshed before it is handed out; callers wait. Default 60 s.
        public var refreshLeadTime: Duration
        /// A token that expires within this time (but outside ``refreshLeadTime``) is still handed out while one
        /// refresh runs in the background. Default 5 minutes.
        public var proactiveRefreshWindow: Duration
        /// The first delay before a failed background refresh or a failed write is retried; it doubles, with
        /// jitter, up to ``maximumRetryDelay``. Default 1 s.
        public var initialRetryDelay: Duration
        /// The longest retry delay. Default 60 s.
        public var maximumRetryDelay: Duration
        /// The refresh-loop breaker. Default: more than 3 refreshes within 30 s.
        public var refreshLoopPolicy: RefreshLoopPolicy
        /// The clock used to judge expiry. Default ``SessionClock/system``.
        public var clock: SessionClock
        /// Whether `open` persists the session identifier for ``UserSessionController/restore()``. Default `true`;
        /// ``UserSessionRegistry`` turns it off for its controllers.
        public var persistsCurrentIdentifier: Bool
        /// Where sessions keep their own documents and caches, if anywhere. Default `nil` (none).
        public var dataDirectories: SessionDirectories?

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
            dataDirectories: SessionDirectories? = nil
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
        }
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
