import Foundation

/// Owns the current ``UserSession``: opens, closes and restores it, starts and stops its services, keeps its
/// credentials fresh, and publishes every change as events.
///
/// One controller holds one session at a time; a server holds one controller per user.
///
/// - Important: Lifecycle calls (``open(_:)``, ``close()``, ``closeAndClear()``, ``restore()``,
///   ``restore(identifier:)``, ``shutdown()``) take effect in the order they were made, none is lost, and each
///   returns after its own effect, even though they suspend. The one exception to strict order: a close-like call
///   (``close()``, ``closeAndClear()``, ``shutdown()``) that arrives while an open or restore is still in progress
///   makes that open roll back and throw ``UserSessionError/Code/openRolledBack``; the close then runs in its turn.
///   Wrong call orders are typed ``UserSessionError``s, never traps.
public actor UserSessionController {
    /// The store that keeps credentials between runs.
    public nonisolated let store: any TokenStore
    /// The settings.
    public nonisolated let configuration: Configuration
    nonisolated let hub: EventHub
    nonisolated let gate: CredentialsGate
    /// The services started by the next open, in registration order.
    var services: [any UserSessionService]
    /// Grows by one with every session that is opened or restored; the gate uses it to discard late refreshes.
    var generation: UInt64 = 0
    /// The ordering of lifecycle calls; parked calls are continuations resumed on the actor.
    var lifecycle = LifecycleStateMachine<CheckedContinuation<Void, Never>>()
    /// The opened session, its generation and the services that started for it.
    var running: RunningSession?
    /// Cancels what the running open is waiting for (its service start or its restore refresh), if anything.
    var cancelOpeningWork: (@Sendable () -> Void)?
    /// Why ``configuration`` cannot work, if it cannot; opens and restores throw it.
    nonisolated let configurationError: UserSessionError?

    struct RunningSession {
        var session: UserSession
        var generation: UInt64
        var services: [any UserSessionService]
    }

    /// Creates a controller with no session (state ``UserSession/State/undefined``).
    ///
    /// - Parameters:
    ///   - store: Where credentials and the current identifier are persisted.
    ///   - refresher: Turns expiring credentials into fresh ones; `nil` when sessions carry no refreshable
    ///     credentials.
    ///   - services: Services started, in this order, by every open and restore; see ``register(_:)``.
    ///   - configuration: The settings. A configuration that cannot work (see
    ///     ``Configuration/validate()``) makes every ``open(_:)`` and restore throw
    ///     ``UserSessionError/Code/invalidConfiguration``; call ``Configuration/validate()`` where you build it to
    ///     fail at start-up instead.
    public init(
        store: any TokenStore,
        refresher: (any TokenRefresher)? = nil,
        services: [any UserSessionService] = [],
        configuration: Configuration = Configuration()
    ) {
        self.init(store: store, refresher: refresher, services: services, configuration: configuration, ledger: nil)
    }

    /// A controller whose credentials live in `ledger` (a registry's), or in the store instance's shared ledger
    /// when `nil`.
    init(
        store: any TokenStore,
        refresher: (any TokenRefresher)?,
        services: [any UserSessionService],
        configuration: Configuration,
        ledger: CredentialsLedger?
    ) {
        self.store = store
        self.configuration = configuration
        self.services = services
        do throws(UserSessionError) {
            try configuration.validate()
            configurationError = nil
        } catch {
            configurationError = error
        }
        let hub = EventHub(defaultBufferSize: configuration.eventBufferSize, observers: configuration.observers)
        self.hub = hub
        self.gate = CredentialsGate(
            refresher: refresher, store: store, ledger: ledger, events: hub, policy: configuration.refreshPolicy)
        gate.setTerminalFailureHandler { [weak self] generation in
            await self?.invalidate(generation: generation, reason: .credentialsRevoked)
        }
        gate.setStoreRemovedHandler { [weak self] generation in
            await self?.closeClearedElsewhere(generation: generation)
        }
    }

    /// The current session. Reading it never suspends.
    public nonisolated var session: UserSession { hub.session }

    /// A new subscription to the controller's events.
    ///
    /// The first element is ``UserSessionEvent/Kind/current`` with the session at the time of subscribing; then
    /// every event follows in the order the transitions happened (``UserSessionEvent/sequence`` grows by one per
    /// event). Each subscription buffers at most `bufferSize` (default
    /// ``Configuration/eventBufferSize``) unread events, dropping the oldest: a subscriber that stops reading never
    /// blocks the controller or other subscribers, and its last element is always the latest event. Stop iterating
    /// (or cancel the iterating task) to end the subscription. ``shutdown()`` finishes every stream.
    public nonisolated func events(bufferSize: Int? = nil) -> AsyncStream<UserSessionEvent> {
        hub.subscribe(bufferSize: bufferSize)
    }

    /// Adds a service, started after the already registered ones.
    ///
    /// It applies from the next open or restore; a session that is already open keeps the services it started with.
    public func register(_ service: any UserSessionService) {
        services.append(service)
    }

    // MARK: - Open

    /// Opens a session from `prototype` and returns it.
    ///
    /// In order: a session that is open is closed first (its services stop, event `.closed(.replaced)`); the
    /// credentials become available through ``accessToken()``; the user info and credentials are saved to
    /// ``store`` and the identifier is persisted for ``restore()``; the registered services start in registration
    /// order, each awaited; the event `.opened` is emitted.
    ///
    /// - Throws: ``UserSessionError`` with code
    ///   - ``UserSessionError/Code/invalidPrototype`` if the identifier is empty, longer than 1,024 UTF-8 bytes or
    ///     contains NUL (nothing changes);
    ///   - ``UserSessionError/Code/invalidConfiguration`` if ``configuration`` cannot work (nothing changes);
    ///   - ``UserSessionError/Code/shutdown`` after ``shutdown()``;
    ///   - ``UserSessionError/Code/storeFailure`` (or the store's own code) if persisting fails: nothing is opened;
    ///   - ``UserSessionError/Code/refreshFailed`` (terminal) if a refresh started meanwhile (by a token request)
    ///     finds the credentials revoked before the open completes: the session ends
    ///     ``UserSession/State/invalid`` (events `.refreshFailed(.terminal)` then
    ///     `.invalidated(.credentialsRevoked)`);
    ///   - ``UserSessionError/Code/serviceStartFailed`` if a service throws or is cancelled while starting: the
    ///     services started before it stop in reverse order, the session ends ``UserSession/State/invalid``
    ///     (events `.serviceStartFailed` then `.invalidated`), and the error names the service and carries the
    ///     cause;
    ///   - ``UserSessionError/Code/openRolledBack`` if a close-like call arrived before the open completed: the
    ///     started services stop in reverse order and the session ends ``UserSession/State/closed`` (event
    ///     `.closed(.rolledBack)`); stored credentials are kept, as by ``close()``.
    ///
    /// Cancelling the calling task cancels the store writes and the starting of services (the open fails as
    /// above); it never skips stopping the services that started. A close-like call arriving while the store
    /// writes cancels them too. A store that neither answers nor honours cancellation keeps the open (and the
    /// calls queued behind it) waiting: stores must bound their own I/O.
    ///
    /// The first write of the credentials is ordered with the session's refresh commits: a refresh that a token
    /// request starts while the open is still writing is written after it, never before.
    public func open(_ prototype: UserSessionPrototype) async throws -> UserSession {
        if let problem = Self.identifierProblem(prototype.identifier) {
            throw UserSessionError(.invalidPrototype, "the prototype's identifier \(problem)")
        }
        if let configurationError { throw configurationError }
        guard let ticket = try await enterTurn(.open) else { return hub.session }
        defer { leaveTurn(ticket) }

        let services = self.services
        await endRunningSession(state: .closed, event: .closed(.replaced))
        return try await openInTurn(
            .prototype(prototype), services: services, openedAt: configuration.clock.now())
    }

    // MARK: - Close

    /// Closes the session, keeping its stored credentials and persisted identifier so that ``restore()`` works
    /// later.
    ///
    /// Credentials stop being handed out first; then the services stop in reverse registration order, each within
    /// ``Configuration/serviceStopTimeout`` (an overrun is reported with `.serviceStopOverran` and left behind);
    /// then the session is ``UserSession/State/closed`` and `.closed(.requested)` is emitted. Stopping runs to the
    /// end even when the calling task is cancelled. Idempotent: without an opened session nothing happens and no
    /// event is emitted. An open or restore still in progress when `close()` is called is rolled back (it throws
    /// ``UserSessionError/Code/openRolledBack``). After ``shutdown()`` this returns once the shutdown is done.
    public func close() async {
        guard let ticket = try? await enterTurn(.close) else { return }
        defer { leaveTurn(ticket) }
        await endRunningSession(state: .closed, event: .closed(.requested))
    }

    /// Closes the session like ``close()`` (event `.closed(.cleared)`), then removes its stored credentials and,
    /// if it is the persisted current identifier, that identifier.
    ///
    /// - Important: The clear is final: no write of the session's credentials made before it lands after it. A
    ///   refresh still running for the session writes nothing; a write in progress is waited for (within
    ///   ``Configuration/storeTimeout``) before the removal; and a write that a store left running past that
    ///   deadline, ignoring cancellation, is undone when it lands (the record is removed again).
    ///
    /// Before the removal, the credentials are revoked at the server when the refresher can revoke, within
    /// ``Configuration/revocationTimeout`` (see ``Configuration/revokesOnSignOut``); a failure is reported with
    /// `.revocationFailed`, never thrown, and the removal goes ahead.
    ///
    /// Without an opened session it clears the last session this controller knew (closed, invalid or rolled
    /// back), or, if it knew none, the session whose identifier is persisted as current: calling it right after
    /// launch logs the stored user out without restoring first. Idempotent: clearing nothing is not an error.
    ///
    /// - Throws: ``UserSessionError`` with ``UserSessionError/Code/shutdown`` after ``shutdown()``, or the store's
    ///   error (``UserSessionError/Code/storeFailure`` for errors that are not ``UserSessionError``s) if removing
    ///   fails; the session is closed either way.
    public func closeAndClear() async throws {
        if lifecycle.isShutDown { throw Self.shutdownError }
        guard let ticket = try await enterTurn(.close) else { return }
        defer { leaveTurn(ticket) }
        let knownIdentifier = running?.session.identifier ?? hub.session.identifier
        let wasOpen = running != nil
        await endRunningSession(state: .closed, event: .closed(.cleared))
        do {
            let persisted = try await store.loadCurrentIdentifier()
            guard let target = knownIdentifier ?? persisted else { return }
            await revokeBeforeClearing(target, sessionWasOpen: wasOpen)
            try await gate.clear(identifier: target)
            try await configuration.dataDirectories?.removeDirectories(for: target)
            if let persisted, ExactIdentifier.areEqual(persisted, target) { try await store.saveCurrentIdentifier(nil) }
        } catch {
            throw Self.storeError(error, "could not clear the stored session")
        }
    }

    // MARK: - Shutdown

    /// Closes the session (event `.closed(.shutdown)`) and finishes every event stream, so every `for await` loop
    /// over ``events(bufferSize:)`` ends.
    ///
    /// Calls made before `shutdown()` still take effect first (an open in progress is rolled back). Afterwards
    /// ``open(_:)``, the restores and ``closeAndClear()`` throw ``UserSessionError/Code/shutdown``, ``close()`` does
    /// nothing, and new subscriptions yield their `.current` element and finish. Idempotent.
    public func shutdown() async {
        guard let ticket = try? await enterTurn(.shutdown) else { return }
        defer { leaveTurn(ticket) }
        await endRunningSession(state: .closed, event: .closed(.shutdown))
        hub.finish()
    }

    // MARK: - Invalidation

    /// Ends the session of `generation` as ``UserSession/State/invalid`` with `.invalidated(reason)`; the gate
    /// calls this (through its terminal-failure handler) when the credentials were revoked.
    ///
    /// Ignored when `generation` is not the opened session's. Stored credentials are kept (the gate decides what is
    /// persisted). An invalidation of a session that is still opening makes that open fail instead, without
    /// waiting for it, and one for a session that is being closed is dropped, so this never waits behind a call
    /// that waits for the gate.
    func invalidate(generation: UInt64, reason: UserSessionEvent.InvalidationReason) async {
        let entry = lifecycle.enter(.invalidate(generation: generation, reason: reason))
        guard let ticket = await takeTurn(entry) else { return }
        defer { leaveTurn(ticket) }
        guard let running, running.generation == generation else { return }
        await endRunningSession(state: .invalid, event: .invalidated(reason))
    }

    /// Closes the opened session of `generation` with `.closed(.clearedElsewhere)`: its record in a coordinated
    /// store was removed by another process. Ignored when that session is not the opened one (an opening session
    /// finds the record gone when it next reads it).
    func closeClearedElsewhere(generation: UInt64) async {
        guard running?.generation == generation else { return }
        guard let ticket = try? await enterTurn(.close) else { return }
        defer { leaveTurn(ticket) }
        guard let running, running.generation == generation else { return }
        await endRunningSession(state: .closed, event: .closed(.clearedElsewhere))
    }

    // MARK: - Internals

    /// Takes a ticket and waits for the turn. Runs synchronously up to the wait, so the ticket order is the call
    /// order. Returns `nil` when the call needs no turn.
    func enterTurn(_ call: LifecycleStateMachine<CheckedContinuation<Void, Never>>.Call)
        async throws(UserSessionError) -> LifecycleStateMachine<CheckedContinuation<Void, Never>>.Ticket?
    {
        let entry = lifecycle.enter(call)
        if case .rejectShutDown = entry.action { throw Self.shutdownError }
        return await takeTurn(entry)
    }

    private func takeTurn(
        _ entry: LifecycleStateMachine<CheckedContinuation<Void, Never>>.Entry
    ) async -> LifecycleStateMachine<CheckedContinuation<Void, Never>>.Ticket? {
        if entry.cancelStarting { cancelOpeningWork?() }
        switch entry.action {
        case .proceed(let ticket):
            return ticket
        case .wait(let ticket):
            await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                lifecycle.park(continuation, ticket: ticket)?.resumeVisibly()
            }
            return ticket
        case .rejectShutDown, .dropped:
            return nil
        }
    }

    func leaveTurn(_ ticket: LifecycleStateMachine<CheckedContinuation<Void, Never>>.Ticket) {
        lifecycle.leave(ticket)?.resumeVisibly()
    }

    /// Ends the opened session, if any: credentials first, then services in reverse order, then the event.
    func endRunningSession(state: UserSession.State, event: UserSessionEvent.Kind) async {
        guard let running else { return }
        lifecycle.beginEnding()
        await gate.deactivate()
        await stopServices(running.services, session: running.session)
        self.running = nil
        lifecycle.endActivity()
        var ended = running.session
        ended.state = state
        hub.emit(event, session: ended)
    }

    /// Stops `started` (in start order) in reverse order, shielded from the caller's cancellation: the stops run in
    /// an unstructured task, which cancelling the awaiting task does not cancel. Each stop has its deadline, so
    /// this returns within roughly `started.count × serviceStopTimeout`.
    func stopServices(_ started: [any UserSessionService], session: UserSession) async {
        guard !started.isEmpty else { return }
        let (timeout, clock) = (configuration.serviceStopTimeout, configuration.deadlineClock)
        let hub = self.hub
        let stopping = Task {
            await ServiceRunner.stopInReverse(started, session: session, timeout: timeout, clock: clock, hub: hub)
        }
        await stopping.value
    }

    static func storeError(_ error: any Error, _ message: String) -> UserSessionError {
        if let error = error as? UserSessionError { return error }
        return UserSessionError(.storeFailure, message, underlying: error)
    }

    static var shutdownError: UserSessionError {
        UserSessionError(.shutdown, "the controller was shut down")
    }

    static var wrongStateError: UserSessionError {
        UserSessionError(.wrongState, "a session is open; close it before restoring, or open the new one")
    }
}
