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
    private var running: RunningSession?
    /// Cancels what the running open is waiting for (its service start or its restore refresh), if anything.
    private var cancelOpeningWork: (@Sendable () -> Void)?
    /// Why ``configuration`` cannot work, if it cannot; opens and restores throw it.
    nonisolated let configurationError: UserSessionError?

    private struct RunningSession {
        var session: UserSession
        var generation: UInt64
        var services: [any UserSessionService]
    }

    /// The longest accepted session identifier, in UTF-8 bytes.
    static let maximumIdentifierLength = 1024

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
        self.gate = CredentialsGate(refresher: refresher, store: store, events: hub, configuration: configuration)
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

        lifecycle.beginOpening()
        generation += 1
        let generation = generation
        let session = UserSession(
            identifier: prototype.identifier, state: .opened, userInfo: prototype.userInfo,
            openedAt: configuration.clock.now())
        lifecycle.openingActivated(generation: generation)
        let (store, configuration, gate) = (self.store, self.configuration, self.gate)
        // Reserved before the credentials become readable, so no refresh commit of this session can be written
        // before this first write.
        let slot = await gate.reserveOpeningWrite()
        gate.activate(
            identifier: prototype.identifier, userInfo: prototype.userInfo, credentials: prototype.credentials,
            generation: generation)
        do {
            try await runOpeningStep {
                try await gate.writeOpening(
                    StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials),
                    identifier: prototype.identifier, ticket: slot)
                try await Self.persistCurrentIdentifierAndCreateDirectories(
                    prototype.identifier, store: store, configuration: configuration)
            }
        } catch {
            throw await unwindOpening(session, failure: Self.storeError(error, "could not persist the session"))
        }
        return try await startServicesAndCommit(session, services: services, generation: generation)
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
        await endRunningSession(state: .closed, event: .closed(.cleared))
        do {
            let persisted = try await store.loadCurrentIdentifier()
            guard let target = knownIdentifier ?? persisted else { return }
            try await gate.clear(identifier: target)
            try configuration.dataDirectories?.remove(for: target)
            if persisted == target { try await store.saveCurrentIdentifier(nil) }
        } catch {
            throw Self.storeError(error, "could not clear the stored session")
        }
    }

    // MARK: - Restore

    /// Restores the session whose identifier the last open persisted, or returns `nil` when none is persisted.
    ///
    /// Works like ``restore(identifier:)`` with the persisted identifier.
    ///
    /// - Throws: What ``restore(identifier:)`` throws; a persisted identifier with nothing stored under it throws
    ///   ``UserSessionError/Code/noStoredSession``; a persisted identifier that no open could have stored (empty,
    ///   over-long, containing NUL: the store returned damaged data) throws ``UserSessionError/Code/storeCorrupt``.
    public func restore() async throws -> UserSession? {
        if let configurationError { throw configurationError }
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard running == nil else { throw Self.wrongStateError }
        let identifier: String?
        do {
            identifier = try await store.loadCurrentIdentifier()
        } catch {
            throw Self.storeError(error, "could not read the current identifier")
        }
        guard let identifier else { return nil }
        // No open persists such an identifier: the store returned damaged data. Never hand it on to `load`.
        if Self.identifierProblem(identifier) != nil {
            throw UserSessionError(.storeCorrupt, "the persisted current identifier is unusable")
        }
        return try await restoreInTurn(identifier: identifier)
    }

    /// Restores the session stored under `identifier` and returns it (never `nil`).
    ///
    /// Stored credentials must be usable: valid, or expired but refreshable, in which case they are refreshed
    /// first through the single-flight gate. Then the identifier is persisted as current, the services start as in
    /// ``open(_:)`` and `.opened` is emitted. If anything fails before that, nothing is opened.
    ///
    /// - Throws: ``UserSessionError`` with code
    ///   - ``UserSessionError/Code/invalidIdentifier`` for an empty, over-long or NUL-containing identifier;
    ///   - ``UserSessionError/Code/wrongState`` while a session is opened (close it first, or use ``open(_:)``);
    ///   - ``UserSessionError/Code/shutdown`` after ``shutdown()``;
    ///   - ``UserSessionError/Code/noStoredSession`` when nothing is stored under `identifier`;
    ///   - ``UserSessionError/Code/storeCorrupt`` when the stored data is unreadable (event `.storeCorrupt`; the
    ///     data is kept), or another store error;
    ///   - ``UserSessionError/Code/credentialsUnusable`` when the credentials are expired and not refreshable;
    ///   - the refresh error when refreshing fails (a terminal failure ends the session
    ///     ``UserSession/State/invalid`` with `.invalidated(.credentialsRevoked)`);
    ///   - ``UserSessionError/Code/serviceStartFailed`` and ``UserSessionError/Code/openRolledBack`` as ``open(_:)``.
    public func restore(identifier: String) async throws -> UserSession? {
        if let problem = Self.identifierProblem(identifier) {
            throw UserSessionError(.invalidIdentifier, "the identifier \(problem)")
        }
        if let configurationError { throw configurationError }
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard running == nil else { throw Self.wrongStateError }
        return try await restoreInTurn(identifier: identifier)
    }

    /// Whether stored data would let ``restore()`` open a session: a current identifier is persisted and its
    /// stored credentials are usable (valid, or refreshable), or it has none.
    ///
    /// Reads the store only: no side effects, no events; store errors answer `false`. It does not consider whether
    /// a session is open now.
    public nonisolated var canRestore: Bool {
        get async {
            guard let identifier = try? await store.loadCurrentIdentifier(),
                let stored = try? await store.load(identifier: identifier)
            else { return false }
            guard let credentials = stored.credentials else { return true }
            return !credentials.isExpired(at: configuration.clock.now()) || credentials.isRefreshable
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
    private func enterTurn(_ call: LifecycleStateMachine<CheckedContinuation<Void, Never>>.Call)
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
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                lifecycle.park(continuation, ticket: ticket)?.resume()
            }
            return ticket
        case .rejectShutDown, .dropped:
            return nil
        }
    }

    private func leaveTurn(_ ticket: LifecycleStateMachine<CheckedContinuation<Void, Never>>.Ticket) {
        lifecycle.leave(ticket)?.resume()
    }

    /// The part of restore that runs in the caller's turn, once no session is opened.
    private func restoreInTurn(identifier: String) async throws -> UserSession {
        let stored: StoredSession?
        var revision: UInt64?
        do {
            if let coordinated = store as? any CoordinatedTokenStore {
                let revised = try await coordinated.loadRevised(identifier: identifier)
                (stored, revision) = (revised?.session, revised?.revision)
            } else {
                stored = try await store.load(identifier: identifier)
            }
        } catch {
            let failure = Self.storeError(error, "could not read the stored session")
            if failure.code == .storeCorrupt { hub.emit(.storeCorrupt(identifier: identifier)) }
            throw failure
        }
        guard let stored else {
            throw UserSessionError(.noStoredSession, "nothing is stored under the identifier")
        }
        let now = configuration.clock.now()
        var needsRefresh = false
        if let credentials = stored.credentials, credentials.isExpired(at: now) {
            guard credentials.isRefreshable else {
                throw UserSessionError(.credentialsUnusable, "the stored credentials expired and cannot be refreshed")
            }
            needsRefresh = true
        }

        let services = self.services
        lifecycle.beginOpening()
        generation += 1
        let generation = generation
        let session = UserSession(identifier: identifier, state: .opened, userInfo: stored.userInfo, openedAt: now)
        lifecycle.openingActivated(generation: generation)
        gate.activate(
            identifier: identifier, userInfo: stored.userInfo, credentials: stored.credentials, generation: generation,
            restoring: true, revision: revision)

        if needsRefresh {
            // In a task of its own so that a close arriving now (or the caller's cancellation) stops the wait at
            // once; the shared refresh itself keeps running and commits its result.
            let gate = self.gate
            let refreshing = Task { try await gate.ensureUsable() }
            cancelOpeningWork = { refreshing.cancel() }
            let result = await withTaskCancellationHandler {
                await refreshing.result
            } onCancel: {
                refreshing.cancel()
            }
            cancelOpeningWork = nil
            // A refresh that outlives a failed or cancelled restore still writes its rotated credentials to this
            // user's record (the gate keeps it as an orphan), so the next restore sends the new refresh token.
            if case .failure(let error) = result { throw await unwindOpening(session, failure: error) }
        }
        let (store, configuration) = (self.store, self.configuration)
        do {
            try await runOpeningStep {
                try await Self.persistCurrentIdentifierAndCreateDirectories(
                    identifier, store: store, configuration: configuration)
            }
        } catch {
            throw await unwindOpening(
                session, failure: Self.storeError(error, "could not persist the current identifier"))
        }
        return try await startServicesAndCommit(session, services: services, generation: generation)
    }

    /// The last steps of persisting an opening session: its identifier for ``restore()`` (unless
    /// ``Configuration/persistsCurrentIdentifier`` is off) and its data directories (if configured).
    private static func persistCurrentIdentifierAndCreateDirectories(
        _ identifier: String, store: any TokenStore, configuration: Configuration
    ) async throws {
        if configuration.persistsCurrentIdentifier {
            try await store.saveCurrentIdentifier(identifier)
        }
        try configuration.dataDirectories?.create(for: identifier)
    }

    /// Runs a store step of an opening session in a task of its own, so that a close arriving meanwhile (through
    /// `cancelOpeningWork`) or the caller's cancellation cancels it: a store that never answers but honours
    /// cancellation cannot keep the open, and the close queued behind it, waiting forever. A store that ignores
    /// cancellation is still awaited, so that its write never lands after a later `closeAndClear()` removed it.
    private func runOpeningStep(_ step: @escaping @Sendable () async throws -> Void) async throws {
        let task = Task { try await step() }
        cancelOpeningWork = { task.cancel() }
        defer { cancelOpeningWork = nil }
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// Starts `services` for `session` and commits the open, or unwinds it. Runs in the open's turn, after
    /// ``LifecycleStateMachine/beginOpening()`` and the gate's activation.
    private func startServicesAndCommit(
        _ session: UserSession,
        services: [any UserSessionService],
        generation: UInt64
    ) async throws -> UserSession {
        let outcome: ServiceStartOutcome
        if lifecycle.openingVerdict != .proceed || services.isEmpty {
            outcome = .started([])
        } else {
            // An unstructured task, so that a close arriving through the turnstile can cancel it; the caller's
            // cancellation is forwarded to it as well.
            let starting = Task { await ServiceRunner.start(services, session: session) }
            cancelOpeningWork = { starting.cancel() }
            outcome = await withTaskCancellationHandler {
                await starting.value
            } onCancel: {
                starting.cancel()
            }
            cancelOpeningWork = nil
        }

        let started: [any UserSessionService]
        switch outcome {
        case .started(let all): started = all
        case .failed(_, _, let partial): started = partial
        }

        switch lifecycle.openingVerdict {
        case .rollBack:
            await gate.deactivate()
            await stopServices(started, session: session)
            throw rolledBack(session)

        case .invalidate(let reason):
            await stopServices(started, session: session)
            await gate.deactivate()
            lifecycle.endActivity()
            var invalid = session
            invalid.state = .invalid
            hub.emit(.invalidated(reason), session: invalid)
            throw UserSessionError(
                .refreshFailed, "the credentials were revoked while the session was opening", failureClass: .terminal)

        case .proceed:
            if case .failed(let service, let error, _) = outcome {
                await stopServices(started, session: session)
                await gate.deactivate()
                lifecycle.endActivity()
                let name = service.name
                var invalid = session
                invalid.state = .invalid
                let cause = "cause: \(String(describing: type(of: error)))"
                hub.emit(.serviceStartFailed(service: name), session: invalid, detail: cause)
                hub.emit(.invalidated(.serviceStartFailed(service: name)), session: invalid)
                let verb = error is CancellationError ? "was cancelled while starting" : "failed to start"
                throw UserSessionError(
                    .serviceStartFailed, "service \"\(name)\" \(verb)", serviceName: name, underlying: error)
            }
            running = RunningSession(session: session, generation: generation, services: started)
            lifecycle.opened(generation: generation)
            hub.emit(.opened, session: session)
            return session
        }
    }

    /// Unwinds an open or restore whose step before the services failed with `failure`: deactivates the gate and
    /// returns the error to throw, as decided by what arrived meanwhile. A close rolls it back; a terminal refresh
    /// failure of its credentials (reported by the gate, which cancelled the step) ends it
    /// ``UserSession/State/invalid`` and the refresh failure is thrown, not the cancelled step's error.
    private func unwindOpening(_ session: UserSession, failure: any Error) async -> any Error {
        let terminal = gate.state.withLock { $0.terminalError }
        await gate.deactivate()
        switch lifecycle.openingVerdict {
        case .rollBack:
            return rolledBack(session)
        case .invalidate(let reason):
            lifecycle.endActivity()
            var invalid = session
            invalid.state = .invalid
            hub.emit(.invalidated(reason), session: invalid)
            return terminal
                ?? UserSessionError(
                    .refreshFailed, "the credentials were revoked while the session was opening",
                    failureClass: .terminal)
        case .proceed:
            lifecycle.endActivity()
            return failure
        }
    }

    /// Ends a rolled-back open (gate deactivated and services stopped already) and returns the error to throw.
    private func rolledBack(_ session: UserSession) -> UserSessionError {
        lifecycle.endActivity()
        var closed = session
        closed.state = .closed
        hub.emit(.closed(.rolledBack), session: closed)
        return UserSessionError(
            .openRolledBack, "a close arrived while the session was opening; the open was rolled back")
    }

    /// Ends the opened session, if any: credentials first, then services in reverse order, then the event.
    private func endRunningSession(state: UserSession.State, event: UserSessionEvent.Kind) async {
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
    private func stopServices(_ started: [any UserSessionService], session: UserSession) async {
        guard !started.isEmpty else { return }
        let timeout = configuration.serviceStopTimeout
        let hub = self.hub
        let stopping = Task {
            await ServiceRunner.stopInReverse(started, session: session, timeout: timeout, hub: hub)
        }
        await stopping.value
    }

    /// Why `identifier` is not acceptable, or `nil`.
    static func identifierProblem(_ identifier: String) -> String? {
        IdentifierEncoding.problem(with: identifier, maximumLength: maximumIdentifierLength)
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
