extension ClientCredentialsTokenManager {
    /// Settings of a ``ClientCredentialsTokenManager``. Every field has a default.
    ///
    /// The refresh settings mean what they mean for user sessions (``UserSessionController/Configuration``), with the
    /// same defaults: ``refreshLeadTime`` and ``proactiveRefreshWindow`` are upper bounds that shrink to a tenth and a
    /// quarter of each token's own lifetime, so tokens of every lifetime are requested once per lifetime.
    public struct Configuration: Sendable {
        /// A token that expires within this time is requested anew before it is handed out; callers wait for the one
        /// request. Default 60 s; at most a tenth of the token's lifetime.
        public var refreshLeadTime: Duration
        /// A token that expires within this time (but outside ``refreshLeadTime``) is still handed out while one
        /// request for its successor runs in the background. Default 5 minutes; at most a quarter of the token's
        /// lifetime. Must not be shorter than ``refreshLeadTime``.
        public var proactiveRefreshWindow: Duration
        /// The first delay after a failed request before the key asks again; it doubles, with jitter, up to
        /// ``maximumRetryDelay``. Meanwhile callers that need a new token get the last failure at once. Default 1 s.
        public var initialRetryDelay: Duration
        /// The longest retry delay. Default 60 s.
        public var maximumRetryDelay: Duration
        /// How many requests forced by refused tokens
        /// (``ClientCredentialsTokenManager/withAccessToken(for:isAuthenticationFailure:_:)``) within how long are
        /// a loop: the next one fails with ``UserSessionError/Code/refreshLoop`` instead. Default: more than 3 within
        /// 30 s (the window shrinks to the token's lifetime, at least 1 s).
        public var refreshLoopPolicy: UserSessionController.RefreshLoopPolicy
        /// The clock that judges expiry and stamps requests. Default ``SessionClock/system``.
        public var clock: SessionClock
        /// Where client-credentials tokens are kept across restarts and shared by a fleet, if anywhere. Default `nil`
        /// (in memory only). With a ``CoordinatedTokenStore`` (such as `PostgresTokenStore`) the request of each key
        /// runs under the store's refresh lease, so a whole fleet sends one request per expiry. Exchanged tokens are
        /// never stored.
        ///
        /// Records are named `client-token-` and 32 hex digits; give the manager a store (or a namespace) of its own
        /// rather than the one of your user sessions, so that listing stored users never lists them.
        public var store: (any TokenStore)?
        /// Who watches the manager, for logs and metrics (see ``UserSessionObserver/observeClientToken(_:)``).
        /// Default none.
        public var observers: [any UserSessionObserver]

        /// Creates a configuration.
        public init(
            refreshLeadTime: Duration = .seconds(60),
            proactiveRefreshWindow: Duration = .seconds(300),
            initialRetryDelay: Duration = .seconds(1),
            maximumRetryDelay: Duration = .seconds(60),
            refreshLoopPolicy: UserSessionController.RefreshLoopPolicy = .init(),
            clock: SessionClock = .system,
            store: (any TokenStore)? = nil,
            observers: [any UserSessionObserver] = []
        ) {
            self.refreshLeadTime = refreshLeadTime
            self.proactiveRefreshWindow = proactiveRefreshWindow
            self.initialRetryDelay = initialRetryDelay
            self.maximumRetryDelay = maximumRetryDelay
            self.refreshLoopPolicy = refreshLoopPolicy
            self.clock = clock
            self.store = store
            self.observers = observers
        }

        /// Checks that this configuration can work, by the rules of ``UserSessionController/Configuration/validate()``
        /// for the same fields.
        ///
        /// - Throws: ``UserSessionError/Code/invalidConfiguration`` naming the field.
        public func validate() throws(UserSessionError) {
            var controllerConfiguration = UserSessionController.Configuration(
                refreshLeadTime: refreshLeadTime, proactiveRefreshWindow: proactiveRefreshWindow,
                initialRetryDelay: initialRetryDelay, maximumRetryDelay: maximumRetryDelay,
                refreshLoopPolicy: refreshLoopPolicy, clock: clock)
            controllerConfiguration.observers = observers
            try controllerConfiguration.validate()
        }

        /// The user sessions' refresh rules, for these settings.
        var policy: RefreshStateMachine.Policy {
            RefreshStateMachine.Policy(
                leadTime: refreshLeadTime, softWindow: proactiveRefreshWindow, initialRetryDelay: initialRetryDelay,
                maximumRetryDelay: maximumRetryDelay, loopMaximum: refreshLoopPolicy.maximumRefreshes,
                loopWindow: refreshLoopPolicy.window)
        }
    }
}
