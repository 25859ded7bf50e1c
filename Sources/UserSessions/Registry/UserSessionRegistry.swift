import Synchronization

/// One ``UserSessionController`` per user, for server code acting for many users at once, and the "current user"
/// switch for apps acting for one.
///
/// Controllers are created on demand and share the registry's store, refresher, services factory and
/// configuration. Looking a controller up never suspends. A server answers each request with
/// ``session(for:)``: it returns the user's open controller, or restores the user's stored session once however
/// many requests ask for it at the same time.
///
/// - Important: Every registry operation for one identifier (``open(_:)``, ``restore(identifier:)``,
///   ``session(for:)``, ``close(identifier:)``, ``closeAndClear(identifier:)``, and the evictions) takes effect in
///   the order the calls were made, each after the one before it has finished: `close(identifier:)` then
///   `open(_:)` for one user leaves that user open and held. Operations for different users run concurrently.
///   ``switchUser(to:)`` and ``restoreCurrentUser()`` take effect in call order among themselves.
/// - Important: Memory follows the open sessions, not the users ever seen: closed controllers are evicted, invalid
///   ones leave on their own, ``maximumOpenSessions`` bounds the open ones (the least recently used is closed)
///   and ``idleTimeout`` closes the idle ones at each ``evictIdle()``. Evicting closes a session and keeps its
///   stored credentials, so the user's next ``session(for:)`` restores it. Nothing in progress (an open, a
///   restore, a refresh or its write) is ever evicted. An evicted controller is shut down, so every event stream
///   of it finishes and it refuses new sessions; look controllers up again instead of keeping them.
/// - Important: User code never runs under the registry's lock: the services factory and event consumers may call
///   the registry.
/// - Important: Controllers made by a registry do not persist the "current identifier" on `open`; only
///   ``switchUser(to:)`` does, so that many users opening sessions on a server never fight over it.
/// - Important: Identifiers are compared by their UTF-8 bytes, never normalized, as every ``TokenStore`` compares
///   them: `"caf\u{E9}"` (NFC) and `"cafe\u{301}"` (NFD) are equal Swift strings but two users, with two
///   controllers and two stored sessions. Normalize identifiers before they reach the registry if your identity
///   provider can spell one user both ways.
public final class UserSessionRegistry: Sendable {
    /// The store every controller shares.
    public let store: any TokenStore
    /// The refresher every controller shares.
    public let refresher: (any TokenRefresher)?
    /// The configuration every controller shares; its ``UserSessionController/Configuration/clock`` also measures
    /// idleness.
    public let configuration: UserSessionController.Configuration
    /// At most this many sessions stay open: when one more opens, the least recently used open session (by the
    /// later of its last lookup through the registry and its last token request) is closed. `nil`: no bound.
    public let maximumOpenSessions: Int?
    /// ``evictIdle()`` closes open sessions that nobody looked up through the registry and nobody asked a token
    /// of for this long. `nil`: sessions are never closed for being idle.
    public let idleTimeout: Duration?
    let makeServices: @Sendable (String) -> [any UserSessionService]
    /// The one owner of every user's credentials for this registry's controllers, handed to each controller it
    /// makes: so they share it even when the store is a value (a wrapper struct), which has no instance to key on.
    let ledger: CredentialsLedger
    let state = Locked(RegistryState())
    let relay: RegistryEventRelay
    /// Ids of callers waiting for a get-or-restore, allocated outside the lock for their cancellation handlers.
    let waiterIDs = Atomic<UInt64>(0)

    /// Creates a registry whose open sessions are not bounded.
    ///
    /// - Parameters:
    ///   - store: Where every user's credentials live.
    ///   - refresher: How every user's credentials are refreshed.
    ///   - configuration: The settings of every controller.
    ///   - services: Makes the services attached to a user's session, given its identifier. It runs outside the
    ///     registry's lock and may call the registry. When two lookups create the same user's controller at once
    ///     it may run twice; the services of the controller that is not kept are never started.
    public convenience init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        configuration: UserSessionController.Configuration = UserSessionController.Configuration(),
        services: @escaping @Sendable (String) -> [any UserSessionService] = { _ in [] }
    ) {
        self.init(
            validatedStore: store, refresher: refresher, configuration: configuration, maximumOpenSessions: nil,
            idleTimeout: nil, services: services)
    }

    /// Creates a registry that bounds its open sessions.
    ///
    /// - Parameters:
    ///   - store: Where every user's credentials live.
    ///   - refresher: How every user's credentials are refreshed.
    ///   - configuration: The settings of every controller.
    ///   - maximumOpenSessions: See ``maximumOpenSessions``; at least 1, or `nil`.
    ///   - idleTimeout: See ``idleTimeout``; longer than zero, or `nil`.
    ///   - services: As in ``init(store:refresher:configuration:services:)``.
    /// - Throws: ``UserSessionError/Code/invalidConfiguration`` for a bound below 1 or a timeout that is not
    ///   positive.
    public convenience init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        configuration: UserSessionController.Configuration = UserSessionController.Configuration(),
        maximumOpenSessions: Int?,
        idleTimeout: Duration?,
        services: @escaping @Sendable (String) -> [any UserSessionService] = { _ in [] }
    ) throws {
        if let maximumOpenSessions, maximumOpenSessions < 1 {
            throw UserSessionError(.invalidConfiguration, "maximumOpenSessions must be at least 1")
        }
        if let idleTimeout, idleTimeout <= .zero {
            throw UserSessionError(.invalidConfiguration, "idleTimeout must be longer than zero")
        }
        self.init(
            validatedStore: store, refresher: refresher, configuration: configuration,
            maximumOpenSessions: maximumOpenSessions, idleTimeout: idleTimeout, services: services)
    }

    private init(
        validatedStore store: any TokenStore,
        refresher: (any TokenRefresher)?,
        configuration: UserSessionController.Configuration,
        maximumOpenSessions: Int?,
        idleTimeout: Duration?,
        services: @escaping @Sendable (String) -> [any UserSessionService]
    ) {
        self.store = store
        self.ledger = CredentialsLedger.shared(for: store)
        self.refresher = refresher
        var configuration = configuration
        configuration.persistsCurrentIdentifier = false
        self.configuration = configuration
        self.maximumOpenSessions = maximumOpenSessions
        self.idleTimeout = idleTimeout
        self.makeServices = services
        self.relay = RegistryEventRelay(controllerBufferSize: configuration.eventBufferSize)
    }

    // MARK: Lookup

    /// The controller for `identifier`, created (with no session open yet) if there is none. Counts as a use of
    /// its session for ``maximumOpenSessions`` and ``idleTimeout``.
    ///
    /// Servers answering requests want ``session(for:)`` instead, which also opens the session.
    ///
    /// - Throws: ``UserSessionError/Code/invalidIdentifier`` for an empty, over-long or NUL-containing identifier;
    ///   ``UserSessionError/Code/shutdown`` after ``shutdown()``.
    public func controller(for identifier: String) throws -> UserSessionController {
        try Self.check(identifier)
        return try heldOrNewController(for: identifier, key: ExactIdentifier(identifier))
    }

    /// The controller for `identifier` if the registry holds one. Counts as a use of its session.
    public func existingController(for identifier: String) -> UserSessionController? {
        let now = now()
        return state.withLock { $0.lookUp(ExactIdentifier(identifier), now: now) }
    }

    /// The identifiers of the controllers the registry holds now.
    public var identifiers: [String] { state.withLock { $0.entries.keys.map(\.value).sorted() } }

    /// How many controllers the registry holds now.
    public var count: Int { state.withLock { $0.entries.count } }

    /// The stored identifiers: those that have credentials in the store, whether or not their sessions are open.
    public func storedIdentifiers() async throws -> [String] {
        try await store.storedIdentifiers()
    }

    // MARK: Internals

    /// The held controller for `key`, or a new one held from now on.
    func heldOrNewController(for identifier: String, key: ExactIdentifier) throws -> UserSessionController {
        let now = now()
        if let held = try state.withLock({ state -> UserSessionController? in
            guard !state.isShutDown else { throw Self.shutdownError }
            return state.lookUp(key, now: now)
        }) {
            return held
        }
        // The factory is user code: it runs outside the lock (it may call the registry).
        let candidate = UserSessionController(
            store: store, refresher: refresher, services: makeServices(identifier), configuration: configuration,
            ledger: ledger)
        let (controller, entryID) = try state.withLock { state -> (UserSessionController, UInt64?) in
            guard !state.isShutDown else { throw Self.shutdownError }
            if let held = state.lookUp(key, now: now) { return (held, nil) }
            let entryID = state.insert(candidate, for: key, now: now)
            // Under the lock, so that a subscriber's forwarder exists before anyone can open the controller.
            relay.attach(candidate, identifier: identifier, entryID: entryID)
            return (candidate, entryID)
        }
        if let entryID { leaveWhenInvalidated(controller, key: key, entryID: entryID) }
        return controller
    }

    /// Drops the controller held for `key` if it is still `controller` and its session is not open, and shuts it
    /// down so that its subscribers' streams finish (nobody can reach it through the registry any more). Called in
    /// the identifier's turn.
    func removeIfNotOpened(_ key: ExactIdentifier, _ controller: UserSessionController) async {
        let entryID = state.withLock { state -> UInt64? in
            guard let entry = state.entries[key], entry.controller === controller, !controller.session.isOpened,
                state.remove(key, entryID: entry.id)
            else { return nil }
            return entry.id
        }
        guard let entryID else { return }
        relay.detach(entryID)
        reportEviction(key.value)
        await controller.shutdown()
    }

    /// Tells the observers that the registry dropped `identifier`'s controller.
    func reportEviction(_ identifier: String) {
        let report = UserSessionEvictionReport(identifier: identifier)
        configuration.observers.notify { $0.observeEviction(report) }
    }

    func now() -> Double { configuration.clock.nowSeconds() }

    /// Throws ``UserSessionError/Code/invalidIdentifier`` for an identifier no session can have.
    static func check(_ identifier: String) throws(UserSessionError) {
        if let problem = UserSessionController.identifierProblem(identifier) {
            throw UserSessionError(.invalidIdentifier, "the identifier \(problem)")
        }
    }

    static var shutdownError: UserSessionError { UserSessionError(.shutdown, "the registry was shut down") }
}
