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
    var ledger: CredentialsLedger { settings.ledger }
    /// What every controller of the registry is made from, resolved once (configuration, policy, ledger,
    /// refresher).
    let settings: ControllerSettings
    let state = Locked(RegistryState())
    let relay: RegistryEventRelay
    /// Ids of callers waiting for a get-or-restore, allocated outside the lock for their cancellation handlers.
    let waiterIDs = Atomic<UInt64>(0)
    /// The ids of the registry's entries, one per controller it makes (a controller that did not become an entry
    /// leaves a gap): a controller knows its entry from the start, and leaves the registry through it when a terminal
    /// refresh failure invalidates its session (``removeIfInvalid(_:entryID:)``).
    let entryIDs = Atomic<UInt64>(0)

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
        self.refresher = refresher
        var configuration = configuration
        configuration.persistsCurrentIdentifier = false
        self.configuration = configuration
        self.settings = ControllerSettings(store: store, refresher: refresher, configuration: configuration)
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
        try UserSessionController.check(identifier)
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
        // The factory is user code: it runs outside the lock (it may call the registry). The controller knows the entry
        // it is made for, which it becomes unless another call held one for `key` first.
        let entryID = entryIDs.wrappingAdd(1, ordering: .relaxed).newValue
        let candidate = UserSessionController(
            settings: settings, services: makeServices(identifier), registry: self, entryID: entryID)
        let inserted = try state.withLock { state -> UserSessionController? in
            guard !state.isShutDown else { throw Self.shutdownError }
            if let held = state.lookUp(key, now: now) { return held }
            state.insert(candidate, for: key, now: now)
            return nil
        }
        if let held = inserted { return held }
        // After the lock, before the controller is handed out: a registry call opens it only after this.
        relay.attach(.init(entryID: entryID, identifier: identifier, controller: candidate))
        return candidate
    }

    /// Drops the controller held for `key` if it is still `controller` and its session is not open, and shuts it
    /// down so that its subscribers' streams finish (nobody can reach it through the registry any more). Called in
    /// the identifier's turn.
    func removeIfNotOpened(_ key: ExactIdentifier, _ controller: UserSessionController) async {
        let removed = state.withLock { state -> Bool in
            guard let entry = state.entries[key], entry.controller === controller, !controller.session.isOpened
            else { return false }
            return state.remove(key, entryID: entry.id)
        }
        guard removed else { return }
        reportEviction(key.value)
        await controller.shutdown(settling: false)
    }

    /// Tells the observers that the registry dropped `identifier`'s controller.
    func reportEviction(_ identifier: String) {
        let report = UserSessionEvictionReport(identifier: identifier)
        configuration.observers.notify { $0.observeEviction(report) }
    }

    func now() -> Double { configuration.clock.nowSeconds() }

    static var shutdownError: UserSessionError { UserSessionError(.shutdown, "the registry was shut down") }
}

extension UserSessionRegistry {
    /// The open controller of `identifier`'s user: the held one if its session is open, otherwise its stored
    /// session restored into it. The call for server requests.
    ///
    /// Single-flight: however many calls ask for a user whose session is not open at the same time, the store is
    /// read once and the session restored once (refreshing its credentials at most once), and all of them get the
    /// same opened controller, or all the same error. A call made while an earlier operation for the user (an open,
    /// a close, …) is still in progress gets its outcome from after that operation, in call order. While the
    /// session is open and nothing is in progress for the user, this returns without suspending for long: one
    /// short critical section, no store access.
    ///
    /// The restore runs in a task of its own: cancelling one caller makes that call throw `CancellationError` at
    /// once and never cancels the restore the others are waiting for.
    ///
    /// - Throws: ``UserSessionError`` with code
    ///   - ``UserSessionError/Code/noStoredSession`` when nothing is stored under `identifier` (the user must sign
    ///     in; then ``open(_:)``);
    ///   - ``UserSessionError/Code/invalidIdentifier`` for an empty, over-long or NUL-containing identifier;
    ///   - ``UserSessionError/Code/shutdown`` after ``shutdown()``;
    ///   - what ``UserSessionController/restore(identifier:)`` throws otherwise (unusable credentials, a corrupt
    ///     record, a store or refresh failure, a service that failed to start).
    ///   `CancellationError` when the calling task is cancelled while waiting.
    public func session(for identifier: String) async throws -> UserSessionController {
        try UserSessionController.check(identifier)
        let key = ExactIdentifier(identifier)
        let now = now()
        if let controller = state.withLock({ $0.openIdleController(key, now: now) }) { return controller }

        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await Parked.wait { (caller: Parked<UserSessionController, any Error>) in
                // Decided under the lock; an answer is given after it is released.
                enum Step {
                    case answer(Result<UserSessionController, any Error>)
                    case wait
                    case lead(flight: UInt64, ticket: Ticket, runsNow: Bool)
                }
                let step = state.withLock { state -> Step in
                    if state.isShutDown { return .answer(.failure(Self.shutdownError)) }
                    if Task.isCancelled { return .answer(.failure(CancellationError())) }
                    if let controller = state.openIdleController(key, now: now) { return .answer(.success(controller)) }
                    if let flight = state.joinableFlight(.user(key)), state.flights.join(flight, id: waiterID, caller) {
                        return .wait
                    }
                    let flight = state.startFlight(waiterID: waiterID, caller)
                    let (ticket, runsNow) = state.enterLane(.user(key), flight: flight)
                    return .lead(flight: flight, ticket: ticket, runsNow: runsNow)
                }
                switch step {
                case .answer(let result): return result
                case .wait: return nil
                case .lead(let flight, let ticket, let runsNow):
                    // Unstructured, so that no caller's cancellation reaches the restore the others wait for.
                    Task {
                        await self.runFlight(flight, ticket, runsNow: runsNow, identifier: identifier)
                    }
                    return nil
                }
            }
        } onCancel: {
            state.withLock { $0.removeFlightWaiter(waiterID) }?.resume(throwing: CancellationError())
        }
    }

    /// Opens a session for `prototype` in its user's controller and returns that controller.
    ///
    /// If the user already has an open session it is replaced, as ``UserSessionController/open(_:)`` does. Runs in
    /// the identifier's turn (see the type's documentation); when it brings the open sessions over
    /// ``maximumOpenSessions``, the least recently used one is closed before this returns.
    ///
    /// - Throws: What `open` throws (``UserSessionError/Code/invalidPrototype`` for an unusable identifier);
    ///   ``UserSessionError/Code/shutdown`` after ``shutdown()``. On failure the controller is evicted unless its
    ///   session is open.
    @discardableResult
    public func open(_ prototype: UserSessionPrototype) async throws -> UserSessionController {
        try UserSessionController.check(prototype)
        let key = ExactIdentifier(prototype.identifier)
        let controller = try await withTurn(.user(key)) { try await openInTurn(prototype, key: key) }
        await enforceMaximumOpenSessions(sparing: key)
        return controller
    }

    /// Restores the session stored under `identifier` into its controller.
    ///
    /// Runs in the identifier's turn. Unlike ``session(for:)`` it is not single-flight and does not accept an
    /// open session: it is the explicit step, for code that knows the user is not open.
    ///
    /// - Returns: The controller, or `nil` when nothing usable is stored: nothing at all
    ///   (``UserSessionError/Code/noStoredSession``) or credentials that expired and cannot be refreshed
    ///   (``UserSessionError/Code/credentialsUnusable``). Either way the user must sign in again, and the
    ///   controller is evicted.
    /// - Throws: Every other error of ``UserSessionController/restore(identifier:)``, such as
    ///   ``UserSessionError/Code/wrongState`` when the session is already open, ``UserSessionError/Code/storeCorrupt``
    ///   or a refresh failure; ``UserSessionError/Code/invalidIdentifier``; ``UserSessionError/Code/shutdown``.
    public func restore(identifier: String) async throws -> UserSessionController? {
        try UserSessionController.check(identifier)
        let key = ExactIdentifier(identifier)
        let controller = try await withTurn(.user(key)) { () -> UserSessionController? in
            do {
                return try await restoreInTurn(identifier, key: key)
            } catch let error as UserSessionError
                where error.code == .noStoredSession
                || error.code == .credentialsUnusable
            {
                return nil
            }
        }
        if controller != nil { await enforceMaximumOpenSessions(sparing: key) }
        return controller
    }

    /// Closes `identifier`'s session, keeping its stored credentials, and evicts its controller. Runs in the
    /// identifier's turn.
    public func close(identifier: String) async {
        let key = ExactIdentifier(identifier)
        await withTurn(.user(key)) {
            guard let controller = state.withLock({ $0.entries[key]?.controller }) else { return }
            await controller.close()
            await removeIfNotOpened(key, controller)
        }
    }

    /// Closes `identifier`'s session, removes its stored credentials and data, and evicts its controller. Runs in
    /// the identifier's turn.
    ///
    /// Works for users without a controller too: their stored credentials and data directories are removed. If
    /// `identifier` is the current user, there is no current user afterwards (also after a restart).
    ///
    /// Like ``UserSessionController/closeAndClear()``, it first revokes the credentials at the authorization server
    /// when ``UserSessionController/Configuration/revokesOnSignOut`` is on and the refresher can revoke; for a user
    /// without a controller, the stored credentials are loaded for that (if they can be), and a failure is
    /// delivered through ``events(bufferSize:)`` and the observers as `.revocationFailed`. Either way the
    /// credentials are removed.
    public func closeAndClear(identifier: String) async throws {
        let key = ExactIdentifier(identifier)
        try await withTurn(.user(key)) {
            if let controller = state.withLock({ $0.entries[key]?.controller }) {
                do {
                    try await controller.closeAndClear()
                } catch {
                    await removeIfNotOpened(key, controller)
                    throw error
                }
                await removeIfNotOpened(key, controller)
            } else {
                await revokeStoredCredentials(of: identifier)
                // Fences the identifier for every controller of the process once the store removed the record: a
                // refresh of an evicted controller still in flight, or a write the ledger still retries, never
                // brings the record back, and a removal the store refused loses nothing.
                try await ledger.signOut(identifier) { try await store.remove(identifier: identifier) }
                try await configuration.dataDirectories?.removeDirectories(for: identifier)
            }
            // Checked and reset in one critical section, so a `switchUser` in between is never undone.
            let wasCurrent = state.withLock { state -> Bool in
                guard let current = state.currentIdentifier, ExactIdentifier.areEqual(current, identifier) else {
                    return false
                }
                state.currentIdentifier = nil
                return true
            }
            if wasCurrent { try await store.saveCurrentIdentifier(nil) }
        }
    }

    // MARK: Internals

    /// Restores `identifier` into its (held or new) controller; on failure the controller is evicted unless its
    /// session is open. Called in the identifier's turn.
    func restoreInTurn(_ identifier: String, key: ExactIdentifier) async throws -> UserSessionController {
        try await inController(identifier, key: key) { _ = try await $0.restore(identifier: identifier) }
    }

    /// Opens `prototype` in its (held or new) controller; on failure the controller is evicted unless its session
    /// is open. Called in the identifier's turn.
    func openInTurn(_ prototype: UserSessionPrototype, key: ExactIdentifier) async throws -> UserSessionController {
        try await inController(prototype.identifier, key: key) { _ = try await $0.open(prototype) }
    }

    private func inController(
        _ identifier: String, key: ExactIdentifier, _ step: (UserSessionController) async throws -> Void
    ) async throws -> UserSessionController {
        try await inController(try heldOrNewController(for: identifier, key: key), key: key, step)
    }

    private func inController(
        _ controller: UserSessionController, key: ExactIdentifier,
        _ step: (UserSessionController) async throws -> Void
    ) async throws -> UserSessionController {
        do {
            try await step(controller)
        } catch {
            await removeIfNotOpened(key, controller)
            throw error
        }
        return controller
    }

    /// The work of one get-or-restore flight: in the identifier's turn, the held open controller or a restore;
    /// then the bound on open sessions; then every waiter gets the outcome.
    private func runFlight(_ flight: UInt64, _ ticket: Ticket, runsNow: Bool, identifier: String) async {
        if !runsNow { await waitForTurn(ticket) }
        let key = ExactIdentifier(identifier)
        let result: Result<UserSessionController, any Error>
        do {
            let controller = try heldOrNewController(for: identifier, key: key)
            if controller.session.isOpened {
                result = .success(controller)
            } else {
                result = .success(
                    try await inController(controller, key: key) { _ = try await $0.restore(identifier: identifier) })
            }
        } catch {
            result = .failure(error)
        }
        // The turn ends and, unless the bound on open sessions must be enforced first, the waiters are taken, in one
        // critical section.
        let enforcesBound = maximumOpenSessions != nil && (try? result.get()) != nil
        let (next, taken) = state.withLock { state in
            state.closeFlight(flight, in: .user(key))
            let next = state.leaveLane(ticket)
            return (next, enforcesBound ? nil : state.flights.land(flight))
        }
        next?.resume()
        var waiters = taken ?? FlightWaiters()
        if enforcesBound {
            await enforceMaximumOpenSessions(sparing: key)
            waiters = state.withLock { $0.flights.land(flight) }
        }
        // In the order they came.
        waiters.forEachWaiting { $0.resume(with: result) }
    }
}

extension UserSessionRegistry {
    typealias LaneKey = RegistryState.LaneKey
    typealias Ticket = RegistryState.Lanes.Ticket

    /// Runs `body` in its turn in `key`'s lane: after every operation called before it for that lane has finished,
    /// and before any called after it starts.
    ///
    /// The ticket is taken synchronously when this is called, before the first suspension, so the lane's order is
    /// the call order. Waiting for the turn is not cut short by cancellation: `body` still runs (and the
    /// controller calls in it see the cancellation), so that every operation that was called takes effect.
    func withTurn<Value>(
        _ key: LaneKey,
        _ body: () async throws -> Value
    ) async rethrows -> Value {
        let (ticket, runsNow) = state.withLock { $0.enterLane(key) }
        if !runsNow { await waitForTurn(ticket) }
        defer { leave(ticket) }
        return try await body()
    }

    /// Suspends until `ticket` is at the head of its lane.
    func waitForTurn(_ ticket: Ticket) async {
        await Parked.wait(handingBack: { waiter in state.withLock { $0.parkInLane(waiter, for: ticket) } })
    }

    /// Ends the turn of `ticket` and resumes the next operation in its lane.
    func leave(_ ticket: Ticket) {
        state.withLock { $0.leaveLane(ticket) }?.resume()
    }

    /// How many operations for `identifier` are running or waiting (for tests).
    func pendingOperationCount(for identifier: String) -> Int {
        state.withLock { $0.lanes.count(.user(ExactIdentifier(identifier))) }
    }

    /// How many `switchUser(to:)` and `restoreCurrentUser()` calls are running or waiting (for tests).
    var pendingSwitchCount: Int { state.withLock { $0.lanes.count(.switching) } }
}

extension UserSessionRegistry {
    /// The controller of the current user, set by ``switchUser(to:)`` or ``restoreCurrentUser()``.
    public var currentController: UserSessionController? {
        state.withLock { state in state.currentIdentifier.flatMap { state.entries[ExactIdentifier($0)]?.controller } }
    }

    /// Makes `prototype`'s user the current one: the previous current user's session is closed first (its services
    /// stop first), then the new session opens and its identifier is persisted for ``restoreCurrentUser()``.
    ///
    /// Switches take effect in call order, each after the one before it has finished: switching to bob and then
    /// to carol leaves carol current and persisted and bob closed, even if bob's services were still starting when
    /// the second call was made. Switching never leaves two switched-to users open. The close and the open take
    /// their turns in the two users' lanes when the switch runs, and the new user's lane is held until its
    /// identifier is persisted.
    ///
    /// - Throws: What ``open(_:)`` throws (the previous user stays closed), or the store's error when persisting
    ///   the identifier fails.
    @discardableResult
    public func switchUser(to prototype: UserSessionPrototype) async throws -> UserSessionController {
        try UserSessionController.check(prototype)
        let key = ExactIdentifier(prototype.identifier)
        return try await withTurn(.switching) {
            let previous = state.withLock { $0.currentIdentifier }
            if let previous, !ExactIdentifier.areEqual(previous, prototype.identifier) {
                await close(identifier: previous)
            }
            let controller = try await withTurn(.user(key)) {
                let controller = try await openInTurn(prototype, key: key)
                state.withLock { $0.currentIdentifier = prototype.identifier }
                try await store.saveCurrentIdentifier(prototype.identifier)
                return controller
            }
            await enforceMaximumOpenSessions(sparing: key)
            return controller
        }
    }

    /// Restores the user persisted by the last ``switchUser(to:)`` and makes it current.
    ///
    /// Takes its turn among the switches, like ``switchUser(to:)``.
    ///
    /// - Returns: The controller, or `nil` when no user is persisted or nothing usable is stored for it (see
    ///   ``restore(identifier:)``).
    /// - Throws: What ``restore(identifier:)`` throws; the store's error when reading the identifier fails.
    public func restoreCurrentUser() async throws -> UserSessionController? {
        try await withTurn(.switching) {
            guard let identifier = try await store.loadCurrentIdentifier() else { return nil }
            guard let controller = try await restore(identifier: identifier) else { return nil }
            state.withLock { $0.currentIdentifier = identifier }
            return controller
        }
    }
}

extension UserSessionRegistry {
    /// Evicts what the registry need not hold, and returns how many controllers it evicted:
    /// - every controller whose session is not open (closed, invalid, or never opened);
    /// - with ``idleTimeout``, every open session that nobody looked up through the registry and nobody asked a
    ///   token of for that long, judged by ``UserSessionController/Configuration/clock``;
    /// - with ``maximumOpenSessions``, the least recently used open sessions beyond the bound.
    ///
    /// Evicting closes the session (event `.closed(.shutdown)`), keeps its stored credentials, shuts the
    /// controller down and drops it, so the user's next ``session(for:)`` restores. A controller with anything in
    /// progress is left alone: an operation of the registry for its identifier running or waiting, a lifecycle
    /// call of its own (an open or restore made directly on it), a refresh in flight or a write of its
    /// credentials. The registry runs no timer: call this periodically (for example every minute) to apply
    /// ``idleTimeout``.
    @discardableResult
    public func evictIdle() async -> Int {
        let now = now()
        let timeout = idleTimeout?.seconds
        let victims = state.withLock { state in
            state.isShutDown
                ? []
                : state.claimVictims(now: now, unopened: true, idleTimeout: timeout, maximumOpen: maximumOpenSessions)
        }
        return await evict(victims)
    }

    /// Shuts every controller down (closing their sessions and finishing their event streams), then finishes the
    /// streams of ``events(bufferSize:)`` after every controller's last event, and refuses new work: later calls
    /// throw ``UserSessionError/Code/shutdown`` (``close(identifier:)`` does nothing).
    ///
    /// Like ``UserSessionController/shutdown()``, it waits, within ``UserSessionController/Configuration/storeTimeout``,
    /// for what the package still owes the store: a refresh in flight returns and its rotated credentials are
    /// written, for the users of its controllers and for users whose controllers it closed or evicted before, so the
    /// next process never restores a refresh token the server rotated since. A user whose work overruns the deadline
    /// gets `.persistenceFailed` on ``events(bufferSize:)``.
    public func shutdown() async {
        let (controllers, held) = state.withLock { state in
            state.isShutDown = true
            defer { state.entries.removeAll() }
            return (state.entries.values.map(\.controller), Set(state.entries.keys))
        }
        // Users no controller holds any more, with a refresh still in flight or a write still owed.
        let orphans = ledger.identifiersWithPendingWork().filter { !held.contains(ExactIdentifier($0)) }
        await withTaskGroup(of: Void.self) { group in
            for controller in controllers { group.addTask { await controller.shutdown() } }
            for identifier in orphans { group.addTask { await self.settleBeforeExit(identifier) } }
        }
        await relay.finish()
    }

    /// The ledger's work for `identifier`, which no controller of the registry holds, settles within the store
    /// timeout, or the subscribers hear that it did not (``shutdown()``).
    private func settleBeforeExit(_ identifier: String) async {
        let (timeout, clock) = (configuration.storeTimeout, configuration.deadlineClock)
        guard !(await ledger.settled(identifier, within: timeout, clock: clock)) else { return }
        let event = UserSessionEvent(
            kind: .persistenceFailed, session: UserSession(identifier: identifier, state: .closed), sequence: 0,
            detail: CredentialsLedger.unsettledAtShutdown(timeout))
        relay.publish(Event(identifier: identifier, event: event))
    }

    // MARK: Internals

    /// Closes the least recently used open sessions beyond ``maximumOpenSessions``, never `sparing`'s.
    func enforceMaximumOpenSessions(sparing key: ExactIdentifier) async {
        guard let maximumOpenSessions else { return }
        let victims = state.withLock { state -> [RegistryState.Victim] in
            // Cheap check first: the bound cannot be exceeded by fewer held controllers.
            guard !state.isShutDown, state.entries.count > maximumOpenSessions else { return [] }
            return state.claimVictims(
                now: 0, unopened: false, idleTimeout: nil, maximumOpen: maximumOpenSessions, sparing: key)
        }
        _ = await evict(victims)
    }

    /// Evicts the claimed `victims` concurrently; returns how many were evicted.
    private func evict(_ victims: [RegistryState.Victim]) async -> Int {
        guard !victims.isEmpty else { return 0 }
        return await withTaskGroup(of: Bool.self) { group in
            for victim in victims { group.addTask { await self.evict(victim) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
    }

    /// Shuts `victim` down if nothing is in progress in it and drops it; then ends the turn it was claimed with.
    private func evict(_ victim: RegistryState.Victim) async -> Bool {
        defer { leave(victim.ticket) }
        guard await victim.controller.shutdownIfIdle() else { return false }
        _ = state.withLock { $0.remove(victim.key, entryID: victim.entryID) }
        reportEviction(victim.key.value)
        return true
    }

    /// Drops the controller held as `entryID` for `key` if its session is invalid, in the identifier's turn.
    func removeIfInvalid(_ key: ExactIdentifier, entryID: UInt64) async {
        await withTurn(.user(key)) {
            guard let entry = state.withLock({ $0.entries[key] }), entry.id == entryID,
                entry.controller.session.state == .invalid, await entry.controller.shutdownIfIdle()
            else { return }
            _ = state.withLock { $0.remove(key, entryID: entryID) }
        }
    }
}

extension UserSessionRegistry {
    /// ``closeAndClear(identifier:)``'s revocation for a user without a controller: revokes the credentials stored
    /// under `identifier`, if they can be loaded, within the configuration's
    /// ``UserSessionController/Configuration/revocationTimeout``.
    ///
    /// A failure is delivered to the subscribers of ``events(bufferSize:)`` and to the observers as a
    /// `.revocationFailed` event of that identifier. No controller emitted it, so its session is a closed session
    /// of that identifier and its ``UserSessionEvent/sequence`` is 0; observers get generation 0.
    func revokeStoredCredentials(of identifier: String) async {
        guard
            let failure = await SignOutRevocation.run(
                refresher: refresher, credentials: nil, newest: ledger.newest(identifier), identifier: identifier,
                store: store, configuration: configuration)
        else { return }
        let event = UserSessionEvent(
            kind: .revocationFailed(failure.failureClass),
            session: UserSession(identifier: identifier, state: .closed), sequence: 0, detail: failure.detail)
        relay.publish(Event(identifier: identifier, event: event))
        let context = UserSessionEventContext(generation: 0, previousState: .closed)
        configuration.observers.notify { $0.observe(event, context: context) }
    }
}
