import Foundation

/// The pipeline an open and a restore share once their preliminaries are done: activating the credentials, the
/// opening step, persisting, starting the services, committing or unwinding.
extension UserSessionController {
    /// What an opening session starts from.
    enum OpeningSource {
        /// A prototype handed to ``open(_:)``: its credentials are written to the store first.
        case prototype(UserSessionPrototype)
        /// A session read by a restore, at `revision` of a coordinated store; `needsRefresh` when its credentials
        /// expired (they are refreshable) and are refreshed before the restore goes on.
        case stored(StoredSession, identifier: String, revision: UInt64?, needsRefresh: Bool)

        var identifier: String {
            switch self {
            case .prototype(let prototype): prototype.identifier
            case .stored(_, let identifier, _, _): identifier
            }
        }

        var userInfo: UserInfo {
            switch self {
            case .prototype(let prototype): prototype.userInfo
            case .stored(let stored, _, _, _): stored.userInfo
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
        lifecycle.beginOpening()
        generation += 1
        let generation = generation
        let identifier = source.identifier
        let session = UserSession(
            identifier: identifier, state: .opened, userInfo: source.userInfo, openedAt: openedAt)
        lifecycle.openingActivated(generation: generation)
        do {
            try await activateAndRunFirstStep(source, generation: generation)
        } catch {
            throw await unwindOpening(session, failure: error)
        }
        let (store, configuration) = (self.store, self.configuration)
        do {
            try await runOpeningStep {
                try await Self.persistCurrentIdentifierAndCreateDirectories(
                    identifier, store: store, configuration: configuration)
            }
        } catch {
            throw await unwindOpening(session, failure: Self.storeError(error, source.persistFailure))
        }
        return try await startServicesAndCommit(session, services: services, generation: generation)
    }

    /// Makes the credentials of `source` readable through the gate, then runs its opening step (cancellable, see
    /// ``runOpeningStep(_:)``). Throws the error to unwind with.
    private func activateAndRunFirstStep(_ source: OpeningSource, generation: UInt64) async throws {
        let gate = self.gate
        switch source {
        case .prototype(let prototype):
            // The slot is taken before the credentials become readable, so no refresh commit of this session can
            // be written before its first write; it is released before any unwind, whose `deactivate()` takes it.
            do {
                try await gate.withPersistSlot { _ in
                    gate.activate(
                        identifier: prototype.identifier, userInfo: prototype.userInfo,
                        credentials: prototype.credentials, generation: generation)
                    try await runOpeningStep {
                        try await gate.writeOpening(
                            StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials),
                            identifier: prototype.identifier)
                    }
                }
            } catch {
                throw Self.storeError(error, source.persistFailure)
            }

        case .stored(let stored, let identifier, let revision, let needsRefresh):
            gate.activate(
                identifier: identifier, userInfo: stored.userInfo, credentials: stored.credentials,
                generation: generation, restoring: true, revision: revision)
            // Only the wait is cancelled: the shared refresh keeps running and commits its result. One that
            // outlives a failed or cancelled restore still writes its rotated credentials to this user's record
            // (the gate keeps it as an orphan), so the next restore sends the new refresh token.
            if needsRefresh { try await runOpeningStep { try await gate.ensureUsable() } }
        }
    }

    /// The last steps of persisting an opening session: its identifier for ``restore()`` (unless
    /// ``Configuration/persistsCurrentIdentifier`` is off) and its data directories (if configured).
    static func persistCurrentIdentifierAndCreateDirectories(
        _ identifier: String, store: any TokenStore, configuration: Configuration
    ) async throws {
        if configuration.persistsCurrentIdentifier {
            try await store.saveCurrentIdentifier(identifier)
        }
        try await configuration.dataDirectories?.createDirectories(for: identifier)
    }

    /// Runs a step of an opening session in a task of its own, so that a close arriving meanwhile (through
    /// `cancelOpeningWork`) or the caller's cancellation cancels it: a store that never answers but honours
    /// cancellation cannot keep the open, and the close queued behind it, waiting forever. A store that ignores
    /// cancellation is still awaited, so that its write never lands after a later `closeAndClear()` removed it.
    func runOpeningStep(_ step: @escaping @Sendable () async throws -> Void) async throws {
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
    func startServicesAndCommit(
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
    func unwindOpening(_ session: UserSession, failure: any Error) async -> any Error {
        let terminal = gate.inspect { $0.terminalError }
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
    func rolledBack(_ session: UserSession) -> UserSessionError {
        lifecycle.endActivity()
        var closed = session
        closed.state = .closed
        hub.emit(.closed(.rolledBack), session: closed)
        return UserSessionError(
            .openRolledBack, "a close arrived while the session was opening; the open was rolled back")
    }
}
