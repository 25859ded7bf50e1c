import Foundation

/// The steps an open and a restore share once their credentials are active: persisting, starting the services,
/// committing or unwinding.
extension UserSessionController {
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

    /// Runs a store step of an opening session in a task of its own, so that a close arriving meanwhile (through
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
