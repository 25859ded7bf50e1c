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
public actor UserSessionController: CredentialsGateOwner {
    /// The store that keeps credentials between runs.
    public nonisolated var store: any TokenStore { settings.store }
    /// The settings.
    public nonisolated var configuration: Configuration { settings.configuration }
    /// The configuration with what is derived from it, shared with the other controllers of a registry. Held by the
    /// gate, like the event hub: the controller keeps neither a second time.
    nonisolated var settings: ControllerSettings { gate.settings }
    /// The session's events and its current state.
    nonisolated var hub: EventHub { gate.events }
    @usableFromInline nonisolated let gate: CredentialsGate
    /// The services started by the next open, in registration order.
    var services: [any UserSessionService]
    /// The ordering of lifecycle calls: the turnstile, whose parked calls are resumed on the actor. It also counts the
    /// sessions opened or restored (``generation``).
    var lifecycle = Turnstile()
    /// Grows by one with every session that is opened or restored; the gate uses it to discard late refreshes.
    var generation: UInt64 { lifecycle.lastGeneration }
    typealias Turnstile = LifecycleStateMachine<Parked<Void, Never>>
    /// The services started for the opened session, `nil` while no session is opened. The session itself is the
    /// hub's current one (``session``), and its generation the turnstile's opened one
    /// (``LifecycleStateMachine/openedGeneration``): `.opened` set both, and nothing changes them until it ends.
    var runningServices: [any UserSessionService]?
    /// What the running open is waiting for (a step of its own, or its services' start), if anything: a close that
    /// arrives meanwhile cancels it. One task type for both (a step returns `nil`), so the field is one word.
    var openingWork: Task<ServiceStartOutcome?, any Error>?
    /// Why ``configuration`` cannot work, if it cannot; opens and restores throw it.
    nonisolated var configurationError: UserSessionError? { settings.configurationError }

    /// Throws ``configurationError``, if any. Not inlined: a call's async frame need not hold the error.
    @inline(never)
    nonisolated func checkConfigured() throws(UserSessionError) {
        if let configurationError { throw configurationError }
    }

    /// The registry holding this controller, if one made it: told when a terminal refresh failure invalidated the
    /// session, so that it lets the controller go. It keeps the controller under its sessions' identifier (a
    /// registry opens and restores only its key's sessions in it, so the key is not kept twice), as the entry
    /// ``registryEntryID``. Both are set when the controller is made, so reading them takes no lock.
    nonisolated weak let registry: UserSessionRegistry?
    /// The registry's entry for this controller (0 without a registry).
    nonisolated let registryEntryID: UInt64

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
        self.init(
            settings: ControllerSettings(store: store, refresher: refresher, configuration: configuration),
            services: services)
    }

    /// A controller made from `settings` (a registry's, shared by its controllers); a registry making it passes
    /// itself and the entry it keeps the controller as.
    init(
        settings: ControllerSettings, services: [any UserSessionService], registry: UserSessionRegistry? = nil,
        entryID: UInt64 = 0
    ) {
        self.services = services
        self.registry = registry
        registryEntryID = entryID
        self.gate = CredentialsGate(settings: settings, events: EventHub(options: settings.eventOptions))
        gate.setOwner(self)
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
        try Self.check(prototype)
        try checkConfigured()
        guard let ticket = try await enterTurn(.open) else { return hub.session }
        defer { leaveTurn(ticket) }

        let services = self.services
        await endRunningSession(state: .closed, event: .closed(.replaced))
        return try await openInTurn(
            .prototype(prototype), services: services, openedAt: settings.configuration.clock.now())
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
        let knownIdentifier = hub.session.identifier
        let wasOpen = runningServices != nil
        await endRunningSession(state: .closed, event: .closed(.cleared))
        do {
            let persisted = try await store.loadCurrentIdentifier()
            guard let target = knownIdentifier ?? persisted else { return }
            await revokeBeforeClearing(target, sessionWasOpen: wasOpen)
            try await gate.clear(identifier: target)
            try await settings.configuration.dataDirectories?.removeDirectories(for: target)
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
    ///
    /// A shutdown is what a process does before it exits, so it also waits, within
    /// ``Configuration/storeTimeout``, for what the package still owes the store for the session's user: a refresh
    /// in flight returns and its rotated credentials are written. Otherwise the next process would restore a refresh
    /// token the server has rotated since, and a server that detects reuse would revoke the user's sessions. Past the
    /// deadline (the store is down, the token endpoint does not answer) it emits `.persistenceFailed` and goes on.
    public func shutdown() async {
        await shutdown(settling: true)
    }

    /// ``shutdown()``; without `settling`, it does not wait for the ledger's work for the user (the registry drops
    /// a controller it no longer holds this way: the process goes on, and so does the ledger).
    func shutdown(settling: Bool) async {
        guard let ticket = try? await enterTurn(.shutdown) else { return }
        defer { leaveTurn(ticket) }
        let identifier = hub.session.identifier
        await endRunningSession(state: .closed, event: .closed(.shutdown))
        if settling, let identifier { await gate.settleBeforeExit(identifier) }
        hub.finish()
    }

    // MARK: - Invalidation

    /// The gate's call up when the credentials were revoked: the session of `generation` becomes invalid, then the
    /// registry holding the controller, if any, lets it go.
    func credentialsRevoked(generation: UInt64) async {
        await invalidate(generation: generation, reason: .credentialsRevoked)
        guard let registry, let identifier = hub.session.identifier else { return }
        await registry.removeIfInvalid(ExactIdentifier(identifier), entryID: registryEntryID)
    }

    /// The gate's call up when a coordinated store's record was removed elsewhere.
    func recordRemovedElsewhere(generation: UInt64) async {
        await closeClearedElsewhere(generation: generation)
    }

    /// Ends the session of `generation` as ``UserSession/State/invalid`` with `.invalidated(reason)`; the gate
    /// calls this (through ``credentialsRevoked(generation:)``) when the credentials were revoked.
    ///
    /// Ignored when `generation` is not the opened session's. Stored credentials are kept (the gate decides what is
    /// persisted). An invalidation of a session that is still opening makes that open fail instead, without
    /// waiting for it, and one for a session that is being closed is dropped, so this never waits behind a call
    /// that waits for the gate.
    func invalidate(generation: UInt64, reason: Turnstile.Invalidation) async {
        let entry = lifecycle.enter(.invalidate(generation: generation, reason: reason))
        guard let ticket = await takeTurn(entry) else { return }
        defer { leaveTurn(ticket) }
        guard lifecycle.openedGeneration == generation else { return }
        await endRunningSession(state: .invalid, event: .invalidated(reason.reason))
    }

    /// Closes the opened session of `generation` with `.closed(.clearedElsewhere)`: its record in a coordinated
    /// store was removed by another process. Ignored when that session is not the opened one (an opening session
    /// finds the record gone when it next reads it).
    func closeClearedElsewhere(generation: UInt64) async {
        guard lifecycle.openedGeneration == generation else { return }
        guard let ticket = try? await enterTurn(.close) else { return }
        defer { leaveTurn(ticket) }
        guard lifecycle.openedGeneration == generation else { return }
        await endRunningSession(state: .closed, event: .closed(.clearedElsewhere))
    }

    // MARK: - Internals

    /// Takes a ticket and waits for the turn. Runs synchronously up to the wait, so the ticket order is the call
    /// order. Returns `nil` when the call needs no turn.
    func enterTurn(_ call: Turnstile.Call) async throws(UserSessionError) -> Turnstile.Ticket? {
        let entry = lifecycle.enter(call)
        if case .rejectShutDown = entry.action { throw Self.shutdownError }
        return await takeTurn(entry)
    }

    private func takeTurn(_ entry: Turnstile.Entry) async -> Turnstile.Ticket? {
        if entry.cancelStarting { openingWork?.cancel() }
        switch entry.action {
        case .proceed(let ticket):
            return ticket
        case .wait(let ticket):
            await Parked.wait(handingBack: { lifecycle.park($0, ticket: ticket) })
            return ticket
        case .rejectShutDown, .dropped:
            return nil
        }
    }

    func leaveTurn(_ ticket: Turnstile.Ticket) {
        lifecycle.leave(ticket)?.resume()
    }

    /// Ends the opened session, if any: credentials first, then services in reverse order, then the event.
    func endRunningSession(state: UserSession.State, event: UserSessionEvent.Kind) async {
        guard let services = runningServices else { return }
        lifecycle.beginEnding()
        let session = hub.session
        await gate.deactivate()
        await stopServices(services, session: session)
        runningServices = nil
        lifecycle.endActivity()
        var ended = session
        ended.state = state
        hub.emit(event, session: ended)
    }

    /// Stops `started` (in start order) in reverse order, shielded from the caller's cancellation: the stops run in
    /// an unstructured task, which cancelling the awaiting task does not cancel. Each stop has its deadline, so
    /// this returns within roughly `started.count × serviceStopTimeout`.
    func stopServices(_ started: [any UserSessionService], session: UserSession) async {
        guard !started.isEmpty else { return }
        let (timeout, clock) = (settings.configuration.serviceStopTimeout, settings.configuration.deadlineClock)
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

/// The pipeline an open and a restore share once their preliminaries are done: activating the credentials, the
/// opening step, persisting, starting the services, committing or unwinding.
extension UserSessionController {
    /// What an opening session starts from.
    enum OpeningSource {
        /// A prototype handed to ``open(_:)``: its credentials are written to the store first.
        case prototype(UserSessionPrototype)
        /// A session read by a restore, at `revision` of a coordinated store; `needsRefresh` when its credentials
        /// expired (they are refreshable) and are refreshed before the restore goes on. The restore holds the
        /// identifier in the ledger under `fence` since before its read; the gate takes that hold over.
        case stored(StoredSession, identifier: String, revision: UInt64?, needsRefresh: Bool, fence: UInt64)

        var identifier: String {
            switch self {
            case .prototype(let prototype): prototype.identifier
            case .stored(_, let identifier, _, _, _): identifier
            }
        }

        var userInfo: UserInfo {
            switch self {
            case .prototype(let prototype): prototype.userInfo
            case .stored(let stored, _, _, _, _): stored.userInfo
            }
        }

        /// The message of the error thrown when persisting the current identifier or the directories fails.
        var persistFailure: String {
            switch self {
            case .prototype: "could not persist the session"
            case .stored: "could not persist the current identifier"
            }
        }
    }

    /// Opens a session from `source` and returns it: the one pipeline of ``open(_:)`` and the restores, run in
    /// their turn once no session is opened (the caller closed it or checked).
    ///
    /// In order: the session's credentials become readable through the gate; the source's opening step runs (the
    /// prototype's first write, or the stored credentials' refresh); the identifier and the directories are
    /// persisted; the services start and the open commits. A failure before the services unwinds the open.
    func openInTurn(
        _ source: OpeningSource,
        services: [any UserSessionService],
        openedAt: Date
    ) async throws -> UserSession {
        let generation = lifecycle.beginOpening()
        let identifier = source.identifier
        let session = UserSession(
            identifier: identifier, state: .opened, userInfo: source.userInfo, openedAt: openedAt)
        lifecycle.openingActivated()
        do {
            try await activateAndRunFirstStep(source, generation: generation)
        } catch {
            throw await unwindOpening(session, failure: error)
        }
        // The shared settings, not a copy of the configuration: a registry's first request for a user gets here.
        let settings = self.settings
        if Self.persistsOnOpening(settings.configuration) {
            do {
                try await runOpeningStep {
                    try await Self.persistCurrentIdentifierAndCreateDirectories(
                        identifier, store: settings.store, configuration: settings.configuration)
                }
            } catch {
                throw await unwindOpening(session, failure: Self.storeError(error, source.persistFailure))
            }
        }
        return try await startServicesAndCommit(session, services: services)
    }

    /// Makes the credentials of `source` readable through the gate, then runs its opening step (cancellable, see
    /// ``runOpeningStep(_:)``). Throws the error to unwind with.
    private func activateAndRunFirstStep(_ source: OpeningSource, generation: UInt64) async throws {
        switch source {
        case .prototype(let prototype):
            try await activateAndWriteSignIn(prototype, generation: generation)

        case .stored(let stored, let identifier, let revision, let needsRefresh, let fence):
            gate.activate(
                identifier: identifier, userInfo: stored.userInfo, credentials: stored.credentials,
                generation: generation, revision: revision, heldFence: fence)
            // Only the wait is cancelled: the shared refresh keeps running and commits its result. One that
            // outlives a failed or cancelled restore still has its rotated credentials written to this user's record
            // (by the ledger), so the next restore sends the new refresh token.
            if needsRefresh { try await refreshOpeningCredentials() }
        }
    }

    /// The opening step of an open: the prototype's credentials become readable and are written to the store. The
    /// identifier's write turn is taken before the credentials become readable, so no refresh commit of this session
    /// can be written before its first write; it is left before any unwind, whose `deactivate()` takes it. Once it is
    /// left, the ledger may forget what the sign-in made it keep (``CredentialsGate/signInSettled(identifier:)``).
    private func activateAndWriteSignIn(_ prototype: UserSessionPrototype, generation: UInt64) async throws {
        let gate = self.gate
        do {
            try await gate.withWriteTurn(prototype.identifier) { _ in
                gate.activate(
                    identifier: prototype.identifier, userInfo: prototype.userInfo,
                    credentials: prototype.credentials, generation: generation, signingIn: true)
                try await runOpeningStep {
                    try await gate.writeOpening(
                        StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials),
                        identifier: prototype.identifier)
                }
            }
        } catch {
            throw Self.storeError(error, OpeningSource.prototype(prototype).persistFailure)
        }
        gate.signInSettled(identifier: prototype.identifier)
    }

    /// The opening step of a restore whose stored credentials expired: they are refreshed before it goes on.
    private func refreshOpeningCredentials() async throws {
        let gate = self.gate
        try await runOpeningStep { try await gate.ensureUsable() }
    }

    /// Whether an opening session has last steps to persist (``persistCurrentIdentifierAndCreateDirectories``):
    /// a registry's controllers persist no current identifier, and without data directories there is nothing to do.
    static func persistsOnOpening(_ configuration: Configuration) -> Bool {
        configuration.persistsCurrentIdentifier || configuration.dataDirectories != nil
    }

    /// The last steps of persisting an opening session: its identifier for ``restore()`` (unless
    /// ``Configuration/persistsCurrentIdentifier`` is off) and its data directories (if configured). Nothing to do
    /// unless ``persistsOnOpening(_:)``.
    static func persistCurrentIdentifierAndCreateDirectories(
        _ identifier: String, store: any TokenStore, configuration: Configuration
    ) async throws {
        if configuration.persistsCurrentIdentifier {
            try await store.saveCurrentIdentifier(identifier)
        }
        try await configuration.dataDirectories?.createDirectories(for: identifier)
    }

    /// Runs a step of an opening session in a task of its own, so that a close arriving meanwhile (through
    /// ``openingWork``) or the caller's cancellation cancels it: a store that never answers but honours
    /// cancellation cannot keep the open, and the close queued behind it, waiting forever. A store that ignores
    /// cancellation is still awaited, so that its write never lands after a later `closeAndClear()` removed it.
    func runOpeningStep(_ step: @escaping @Sendable () async throws -> Void) async throws {
        _ = try await awaitOpeningWork(
            Task {
                try await step()
                return nil
            }
        ).get()
    }

    /// Waits for `work`, a step of the running open or its services' start, as ``openingWork``: a close arriving
    /// meanwhile cancels it, and so does the caller's cancellation.
    private func awaitOpeningWork(_ work: Task<ServiceStartOutcome?, any Error>) async
        -> Result<ServiceStartOutcome?, any Error>
    {
        openingWork = work
        defer { openingWork = nil }
        return await withTaskCancellationHandler {
            await work.result
        } onCancel: {
            work.cancel()
        }
    }

    /// Starts `services` for `session` and commits the open, or unwinds it. Runs in the open's turn, after
    /// ``LifecycleStateMachine/beginOpening()`` and the gate's activation.
    ///
    /// The commit, the path of every open and restore, is all this frame holds; starting the services and unwinding
    /// run in functions of their own, so that an open without services (a server's restore) carries neither their
    /// state nor their errors in its frame (an async frame that outgrows the task's slab costs an allocation).
    func startServicesAndCommit(_ session: UserSession, services: [any UserSessionService]) async throws
        -> UserSession
    {
        let outcome: ServiceStartOutcome
        if lifecycle.openingVerdict != .proceed || services.isEmpty {
            outcome = .started([])
        } else {
            outcome = await startServices(services, session: session)
        }
        guard case .proceed = lifecycle.openingVerdict, case .started(let started) = outcome else {
            throw await abandonOpening(session, outcome: outcome)
        }
        runningServices = started
        lifecycle.opened()
        hub.emit(.opened, session: session)
        return session
    }

    /// Starts `services` for an opening `session` in an unstructured task, so that a close arriving through the
    /// turnstile can cancel it; the caller's cancellation is forwarded to it as well.
    private func startServices(_ services: [any UserSessionService], session: UserSession) async
        -> ServiceStartOutcome
    {
        let result = await awaitOpeningWork(Task { await ServiceRunner.start(services, session: session) })
        guard case .success(let outcome?) = result else {
            preconditionFailure("a service start neither throws nor returns nil")
        }
        return outcome
    }

    /// Unwinds an opening `session` whose services started with `outcome` and which does not commit: a close
    /// arrived (rolled back), its credentials were revoked meanwhile (invalid), or a service failed to start
    /// (invalid). Stops what started and returns the error to throw.
    private func abandonOpening(_ session: UserSession, outcome: ServiceStartOutcome) async -> UserSessionError {
        let started: [any UserSessionService]
        switch outcome {
        case .started(let all): started = all
        case .failed(_, _, let partial): started = partial
        }

        switch lifecycle.openingVerdict {
        case .rollBack:
            await gate.deactivate()
            await stopServices(started, session: session)
            return rolledBack(session)

        case .invalidate(let reason):
            await stopServices(started, session: session)
            await gate.deactivate()
            return invalidatedWhileOpening(session, reason: reason)

        case .proceed:
            // Only a service that failed to start gets here: every other outcome committed.
            guard case .failed(let service, let error, _) = outcome else {
                preconditionFailure("an opening whose services all started was abandoned")
            }
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
            return UserSessionError(
                .serviceStartFailed, "service \"\(name)\" \(verb)", serviceName: name, underlying: error)
        }
    }

    /// Unwinds an open or restore whose step before the services failed with `failure`: deactivates the gate and
    /// returns the error to throw, as decided by what arrived meanwhile. A close rolls it back; a terminal refresh
    /// failure of its credentials (reported by the gate, which cancelled the step) ends it
    /// ``UserSession/State/invalid`` and the refresh failure is thrown, not the cancelled step's error.
    func unwindOpening(_ session: UserSession, failure: any Error) async -> any Error {
        let terminal = gate.inspect { $0.terminalError }
        await gate.deactivate()
        switch lifecycle.openingVerdict {
        case .rollBack:
            return rolledBack(session)
        case .invalidate(let reason):
            let revoked = invalidatedWhileOpening(session, reason: reason)
            return terminal ?? revoked
        case .proceed:
            lifecycle.endActivity()
            return failure
        }
    }

    /// Ends an open whose credentials were revoked while it was opening (gate deactivated and services stopped
    /// already): `session` ends ``UserSession/State/invalid`` for `reason`. Returns the error to throw when the
    /// refresh's own is not at hand.
    func invalidatedWhileOpening(
        _ session: UserSession, reason: UserSessionEvent.InvalidationReason
    ) -> UserSessionError {
        lifecycle.endActivity()
        var invalid = session
        invalid.state = .invalid
        hub.emit(.invalidated(reason), session: invalid)
        return UserSessionError(
            .refreshFailed, "the credentials were revoked while the session was opening", failureClass: .terminal)
    }

    /// Ends a rolled-back open (gate deactivated and services stopped already) and returns the error to throw.
    func rolledBack(_ session: UserSession) -> UserSessionError {
        lifecycle.endActivity()
        var closed = session
        closed.state = .closed
        hub.emit(.closed(.rolledBack), session: closed)
        return UserSessionError(
            .openRolledBack, "a close arrived while the session was opening; the open was rolled back")
    }
}

extension UserSessionController {
    /// Restores the session whose identifier the last open persisted, or returns `nil` when none is persisted.
    ///
    /// Works like ``restore(identifier:)`` with the persisted identifier.
    ///
    /// - Throws: What ``restore(identifier:)`` throws; a persisted identifier with nothing stored under it throws
    ///   ``UserSessionError/Code/noStoredSession``; a persisted identifier that no open could have stored (empty,
    ///   over-long, containing NUL: the store returned damaged data) throws ``UserSessionError/Code/storeCorrupt``.
    public func restore() async throws -> UserSession? {
        try checkConfigured()
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard runningServices == nil else { throw Self.wrongStateError }
        guard let identifier = try await loadCurrentIdentifier() else { return nil }
        return try await restoreInTurn(identifier: identifier)
    }

    /// The identifier the last open persisted, if any.
    ///
    /// - Throws: The store's failure; ``UserSessionError/Code/storeCorrupt`` for an identifier no open could have
    ///   persisted (the store returned damaged data, never handed on to `load`).
    private func loadCurrentIdentifier() async throws -> String? {
        let identifier: String?
        do {
            identifier = try await store.loadCurrentIdentifier()
        } catch {
            throw Self.storeError(error, "could not read the current identifier")
        }
        guard let identifier, Self.identifierProblem(identifier) != nil else { return identifier }
        throw UserSessionError(.storeCorrupt, "the persisted current identifier is unusable")
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
        try Self.check(identifier)
        try checkConfigured()
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard runningServices == nil else { throw Self.wrongStateError }
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
            return !credentials.isExpired(at: settings.configuration.clock.now()) || credentials.isRefreshable
        }
    }

    /// The part of restore that runs in the caller's turn, once no session is opened: reads and checks the stored
    /// session, then opens it through ``openInTurn(_:services:openedAt:)``.
    func restoreInTurn(identifier: String) async throws -> UserSession {
        try await settings.configuration.instrumentation.measure(.restore) {
            try await restoreStoredSession(identifier: identifier)
        }
    }

    /// Reads `identifier`'s record (with its revision from a coordinated store).
    ///
    /// - Throws: ``UserSessionError/Code/noStoredSession`` when nothing is stored, and the store's failure as a
    ///   ``UserSessionError`` (`storeCorrupt` is announced).
    private func readStoredRecord(_ identifier: String) async throws -> (StoredSession, UInt64?) {
        let loaded: StoredSession?
        var revision: UInt64?
        do {
            if let coordinated = gate.coordinatedStore {
                let revised = try await coordinated.loadRevised(identifier: identifier)
                (loaded, revision) = (revised?.session, revised?.revision)
            } else {
                loaded = try await store.load(identifier: identifier)
            }
        } catch {
            throw readFailure(error, identifier: identifier)
        }
        guard let record = loaded else { throw Self.nothingStored() }
        return (record, revision)
    }

    /// The error of a read that found nothing stored. Not inlined, like ``readFailure(_:identifier:)``: the read's
    /// async frame need not hold an error it rarely throws.
    @inline(never)
    private static func nothingStored() -> UserSessionError {
        UserSessionError(.noStoredSession, "nothing is stored under the identifier")
    }

    /// The error a failed read of `identifier`'s record throws; a corrupt record is announced.
    @inline(never)
    private func readFailure(_ error: any Error, identifier: String) -> UserSessionError {
        let failure = Self.storeError(error, "could not read the stored session")
        if failure.code == .storeCorrupt { hub.emit(.storeCorrupt(identifier: identifier)) }
        return failure
    }

    /// ``restoreInTurn(identifier:)`` without its measurement.
    private func restoreStoredSession(identifier: String) async throws -> UserSession {
        // Held from before the read until the session's gate takes the hold over: a rotation the store has not
        // taken yet, or a refresh in flight, cannot leave the ledger in between. Released here if nothing opens.
        let fence = gate.ledger.hold(identifier, view: self)
        var handedOver = false
        defer { if !handedOver { gate.releaseInLedger(identifier) } }
        let (record, revision) = try await readStoredRecord(identifier)
        // Read through the ledger: an unwritten rotation replaces the spent token the store still holds (the ledger
        // goes on writing it), and a refused refresh token fails at once without contacting the server.
        let read: (stored: StoredSession, revision: UInt64?, fence: UInt64)
        if let stored = try gate.ledger.readThrough(record, identifier: identifier, fence: fence) {
            read = (stored, revision, fence)
        } else {
            read = try await readAgainInWriteTurn(identifier)
        }
        let now = settings.configuration.clock.now()
        let needsRefresh = try Self.needsRefresh(read.stored, at: now)
        handedOver = true
        return try await openInTurn(
            .stored(
                read.stored, identifier: identifier, revision: read.revision, needsRefresh: needsRefresh,
                fence: read.fence),
            services: services, openedAt: now)
    }

    /// A sign-in or a sign-out raced a restore's read of `identifier`: it reads again in the write turn, where none
    /// can interleave, so the session's fence is the one its record was written under.
    private func readAgainInWriteTurn(_ identifier: String) async throws
        -> (stored: StoredSession, revision: UInt64?, fence: UInt64)
    {
        let turn = await gate.ledger.takeWriteTurn(identifier)
        defer { gate.ledger.leaveWriteTurn(identifier, token: turn.token) }
        let (record, revision) = try await readStoredRecord(identifier)
        guard let stored = try gate.ledger.readThrough(record, identifier: identifier, fence: turn.fence) else {
            throw UserSessionError(.storeFailure, "the stored session changed while it was read")
        }
        return (stored, revision, turn.fence)
    }

    /// Whether `stored`, read by a restore at `now`, must be refreshed before it opens (its credentials expired).
    ///
    /// - Throws: ``UserSessionError/Code/credentialsUnusable`` when they expired and cannot be refreshed.
    private static func needsRefresh(_ stored: StoredSession, at now: Date) throws(UserSessionError) -> Bool {
        guard let credentials = stored.credentials, credentials.isExpired(at: now) else { return false }
        guard credentials.isRefreshable else {
            throw UserSessionError(.credentialsUnusable, "the stored credentials expired and cannot be refreshed")
        }
        return true
    }
}

extension UserSessionController {
    /// A valid access token for the open session, refreshing it first when it is about to expire.
    ///
    /// This is the hot path of every request: while the token is fresh it is returned after one clock read and
    /// one short lock, without hopping onto the controller's executor and without suspending.
    ///
    /// - Inside the proactive window (``Configuration/proactiveRefreshWindow``) the still-valid token is returned
    ///   at once and one refresh starts in the background; callers never see its outcome.
    /// - Inside the lead time (``Configuration/refreshLeadTime``) or after expiry, callers wait for a single-flight
    ///   refresh: however many call at once, the refresher runs once and all of them get its result. A caller that
    ///   waited for a refresh that failed gets that failure, even if the old token had a few seconds left. After a
    ///   failed refresh, a token that is still valid is served again until the retry backoff elapses.
    ///
    /// - Important: Cancelling the calling task makes this call throw `CancellationError` at once; the refresh it
    ///   was waiting for keeps running and its result is committed, so a rotated refresh token is never lost.
    /// - Throws: ``UserSessionError`` with code ``UserSessionError/Code/sessionNotOpen`` when no session is open;
    ///   ``UserSessionError/Code/refreshFailed`` (see ``UserSessionError/failureClass``) when the refresh this call
    ///   waited for failed; ``UserSessionError/Code/noRefresher`` when the token expired and cannot be refreshed;
    ///   ``UserSessionError/Code/refreshLoop`` when the refresh-loop breaker refused a needed refresh;
    ///   `CancellationError` when the calling task was cancelled.
    @inlinable
    nonisolated(nonsending) public func accessToken() async throws -> String {
        // The gate's one token path, with its hot half inlined into the caller: no async call while the token is
        // fresh.
        if let fresh = gate.freshToken() { return fresh.token }
        return try await gate.waitForCurrentToken().token
    }

    /// Runs `operation` with a valid access token, and replays it once if it fails authentication.
    ///
    /// If `operation` throws an error for which `isAuthenticationFailure` returns `true` (for example an HTTP 401):
    /// - if the token it used is still the current one, the credentials are refreshed once (a forced refresh
    ///   through the same single-flight gate, so concurrent replays share one refresh) and `operation` runs again
    ///   with the new token;
    /// - if the token had already been replaced meanwhile, `operation` runs again with the current token without
    ///   a refresh.
    ///
    /// A second authentication failure is thrown to the caller, as is any error that is not an authentication
    /// failure (untouched, on the first attempt). Both closures run in the caller's isolation and are not
    /// retained after this call returns.
    ///
    /// - Important: A replay belongs to the session whose token the first attempt used. If that session was
    ///   closed, replaced (another ``open(_:)``) or invalidated meanwhile, the authentication failure is not
    ///   replayed: this throws ``UserSessionError/Code/sessionNotOpen``, so an operation never runs with another
    ///   user's credentials.
    /// - Note: A token bound with DPoP (``Credentials/dpopKey``) is refused without a proof of its key. For requests
    ///   that may carry one, use ``withAuthorization(method:url:_:)``, which hands your closure the `Authorization`
    ///   and `DPoP` headers for the request (and a bearer header otherwise).
    ///
    /// - Throws: what ``accessToken()`` throws; what `operation` throws; when the refresh needed for the replay
    ///   fails, that refresh's error (``UserSessionError/Code/refreshFailed``, or
    ///   ``UserSessionError/Code/refreshLoop`` when refreshes keep failing to help);
    ///   ``UserSessionError/Code/sessionNotOpen`` when the session of the first attempt ended before the replay.
    nonisolated(nonsending) public func withAccessToken<R>(
        isAuthenticationFailure: (any Error) -> Bool,
        _ operation: (String) async throws -> R
    ) async throws -> R {
        let (token, generation) = try await gate.token()
        do {
            return try await operation(token)
        } catch {
            guard isAuthenticationFailure(error) else { throw error }
            let replacement = try await gate.replacementCredentials(after: token, generation: generation)
            let replay = UserSessionReplayReport(identifier: hub.session.identifier)
            hub.observers.notify { $0.observeReplay(replay) }
            return try await operation(replacement.accessToken)
        }
    }

    /// A valid access token that stays valid for at least `minimumValidity`, refreshing first (through the same
    /// single-flight gate as ``accessToken()``) when the current one expires sooner.
    ///
    /// Use it before work that outlives a request, such as a long upload. A token that does not expire always
    /// qualifies; a negative `minimumValidity` counts as zero.
    ///
    /// - Important: This refreshes at most once per call and never loops. When the token's lifetime is known
    ///   (from ``Credentials/lastRefreshedAt``, or its refresh) and is shorter than `minimumValidity`, it throws
    ///   ``UserSessionError/Code/minimumValidityUnreachable`` without refreshing, since a new token would live no
    ///   longer; when the lifetime is unknown, it refreshes once and throws the same error if the new token still
    ///   expires too soon (the new token is kept and served to other callers).
    /// - Throws: ``UserSessionError/Code/minimumValidityUnreachable`` as above; otherwise what
    ///   ``refreshCredentials()`` throws (``UserSessionError/Code/sessionNotOpen``,
    ///   ``UserSessionError/Code/noRefresher``, ``UserSessionError/Code/refreshLoop``,
    ///   ``UserSessionError/Code/refreshFailed``), and `CancellationError` when the calling task is cancelled
    ///   while waiting (the refresh goes on and is committed).
    nonisolated(nonsending) public func accessToken(minimumValidity: Duration) async throws -> String {
        try await gate.token(.minimumValidity(minimumValidity.seconds)).token
    }

    /// Refreshes the credentials now, through the single-flight gate, and returns the new ones.
    ///
    /// If a refresh is already in flight, this call joins it instead of starting another. The new credentials
    /// are persisted, published and announced with ``UserSessionEvent/Kind/credentialsRefreshed`` before this
    /// returns.
    ///
    /// - Important: Cancelling the calling task throws `CancellationError` at once; the refresh continues and is
    ///   committed.
    /// - Throws: ``UserSessionError/Code/sessionNotOpen``; ``UserSessionError/Code/noRefresher`` when there is no
    ///   refresher or no refresh token; ``UserSessionError/Code/refreshLoop`` when the refresh-loop breaker
    ///   tripped; the refresh's error (``UserSessionError/Code/refreshFailed`` with its failure class).
    @discardableResult
    nonisolated(nonsending) public func refreshCredentials() async throws -> Credentials {
        try await gate.refresh()
    }

    /// Replaces the session's credentials with ones obtained elsewhere (for example after re-authorizing with
    /// more permissions).
    ///
    /// The credentials are written to the ``store`` first, then handed out to readers, then announced with
    /// ``UserSessionEvent/Kind/credentialsUpdated(_:)`` saying whether the token was extended and which
    /// permissions were added or removed. A refresh in flight is superseded: its result is discarded and its
    /// waiters get these credentials.
    ///
    /// If the session ends while the write is in progress, the write stands (the credentials went to that
    /// session's own record) and this returns normally, without publishing them or emitting an event.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when no session is open (nothing is written), or when a
    ///   ``CoordinatedTokenStore`` no longer holds the session's record (another instance signed the user out before
    ///   this one heard of it: nothing is written, and the session closes with `.closed(.clearedElsewhere)`); the
    ///   store's error when writing fails, in which case nothing changes.
    nonisolated(nonsending) public func updateCredentials(_ credentials: Credentials) async throws {
        try await gate.update(credentials)
    }

    /// The current credentials, or `nil` when no session is open.
    public nonisolated var credentials: Credentials? { gate.currentCredentials() }
}

extension UserSessionController {
    /// ``closeAndClear()``'s revocation, after the session ended and before its credentials are removed, within
    /// ``Configuration/revocationTimeout``.
    ///
    /// When a session was open (`sessionWasOpen`), its last credentials in memory are revoked: they are the newest
    /// this controller saw (a refresh that committed while it closed included), newer than the stored ones if a
    /// write failed. Otherwise the credentials stored under `identifier` are, if they can be loaded. A failure is
    /// reported with `.revocationFailed`, never thrown: the removal goes ahead either way.
    func revokeBeforeClearing(_ identifier: String, sessionWasOpen: Bool) async {
        guard SignOutRevocation.isEnabled(configuration, gate.refresher) else { return }
        // Ending the session stops serving the credentials but keeps them in the gate until the next open.
        let credentials = sessionWasOpen ? gate.inspect { $0.credentials } : nil
        guard
            let failure = await SignOutRevocation.run(
                refresher: gate.refresher, credentials: credentials, newest: gate.ledger.newest(identifier),
                identifier: identifier, store: store, configuration: configuration)
        else { return }
        hub.emit(.revocationFailed(failure.failureClass), session: nil, detail: failure.detail)
    }
}

extension UserSessionController {
    /// Shuts the controller down, as ``shutdown()`` does, if nothing is in progress in it: no lifecycle call
    /// running or waiting, no refresh in flight, no write of credentials in progress. Returns whether it did.
    ///
    /// The check and the start of the shutdown happen in one step on the actor (the shutdown takes its turn before
    /// its first suspension), so an open or restore is never rolled back by it: one that was called before is seen
    /// by the check, and one called after finds the controller shut down.
    func shutdownIfIdle() async -> Bool {
        guard lifecycle.isIdle, !gate.hasWorkInProgress else { return false }
        await shutdown(settling: false)
        return true
    }

    /// When a token of this controller was last asked for, in seconds since the reference date (to the second).
    nonisolated var lastTokenDemand: Double { gate.lastTokenDemand }
}

extension UserSessionController: CredentialsLedgerView {
    /// The ledger tells the controller holding `identifier` that another one advanced its newest credentials; the
    /// controller's gate takes them (``CredentialsGate/ledgerAdvanced(_:)``).
    nonisolated func ledgerAdvanced(_ identifier: String) {
        gate.ledgerAdvanced(identifier)
    }
}
