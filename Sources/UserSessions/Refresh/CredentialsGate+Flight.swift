import Foundation

extension CredentialsGate {
    /// Runs a refresh in an unstructured task, so that no caller's cancellation can cancel it: a rotated refresh
    /// token must always be committed.
    func startFlight(_ job: RefreshStateMachine.RefreshJob) {
        runInBackground { await self.runFlight(job) }
    }

    private func runFlight(_ job: RefreshStateMachine.RefreshJob) async {
        events.emit(.refreshStarted, session: nil, detail: nil)
        let outcome: Result<Credentials, UserSessionError>
        if let refresher {
            do {
                outcome = .success(try await refresher.refresh(job.credentials))
            } catch {
                outcome = .failure(Self.classify(error))
            }
        } else {
            outcome = .failure(
                UserSessionError(.noRefresher, "no refresher is configured", failureClass: .misconfiguration))
        }
        switch outcome {
        case .success(let credentials): await commit(job, credentials)
        case .failure(let error): await fail(job, error)
        }
    }

    /// Maps what a refresher threw onto a failure class.
    static func classify(_ error: any Error) -> UserSessionError {
        if let error = error as? UserSessionError {
            if error.failureClass != nil { return error }
            return UserSessionError(
                .refreshFailed, "refresh failed: \(error.message)", failureClass: .transient, underlying: error)
        }
        if error is CancellationError {
            return UserSessionError(
                .refreshFailed, "the refresh was cancelled", failureClass: .cancelled, underlying: error)
        }
        // Other errors may print secrets; only their type is described.
        return UserSessionError(
            .refreshFailed, "the refresher threw \(String(describing: type(of: error)))", failureClass: .transient,
            underlying: error)
    }

    private func fail(_ job: RefreshStateMachine.RefreshJob, _ error: UserSessionError) async {
        let now = configuration.clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        guard
            let action = state.withLock({
                $0.refreshFailed(flightID: job.flightID, error: error, now: now, jitter: jitter)
            })
        else { return }
        events.emit(.refreshFailed(error.failureClass ?? .transient), session: nil, detail: error.message)
        Self.resume(action.waiters, with: .failure(error))
        if action.notifyTerminal, let handler = currentTerminalFailureHandler() {
            await handler(action.generation)
        }
    }

    /// Commit order: persist, publish to readers, emit, resume waiters. A flight that became stale at any point
    /// (deactivated, replaced, superseded) writes nothing and publishes nothing.
    private func commit(_ job: RefreshStateMachine.RefreshJob, _ credentials: Credentials) async {
        // Cheap early exit, so a stale flight does not even queue for the slot.
        guard state.withLock({ $0.isCurrent(flightID: job.flightID) }) else { return }
        await acquirePersistSlot()
        // Checked again while holding the slot: `deactivate()` may have run while this task waited.
        guard let target = state.withLock({ $0.commitTarget(flightID: job.flightID, newCredentials: credentials) })
        else {
            releasePersistSlot()
            return
        }
        let persistError = await write(target)
        let now = configuration.clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        let action = state.withLock {
            $0.commit(
                flightID: job.flightID, newCredentials: credentials, persisted: persistError == nil, now: now,
                jitter: jitter)
        }
        guard let action else {
            releasePersistSlot()
            return
        }
        if let persistError {
            events.emit(.persistenceFailed, session: nil, detail: Self.describePersistFailure(persistError))
        }
        events.emit(.credentialsRefreshed, session: nil, detail: nil)
        // Released after the events, so `deactivate()` (which waits for the slot) returns only after them.
        releasePersistSlot()
        Self.resume(action.waiters, with: .success(credentials))
    }

    /// Writes `target` to the store; returns the error when the write failed.
    func write(_ target: RefreshStateMachine.PersistTarget) async -> (any Error)? {
        do {
            try await store.save(target.stored, identifier: target.identifier)
            return nil
        } catch {
            return error
        }
    }

    /// Retries a failed write in the background.
    func startPersistRetry(_ job: RefreshStateMachine.PersistJob) {
        runInBackground { await self.runPersistRetry(job) }
    }

    private func runPersistRetry(_ job: RefreshStateMachine.PersistJob) async {
        await acquirePersistSlot()
        guard let target = state.withLock({ $0.persistRetryTarget(generation: job.generation) }) else {
            releasePersistSlot()
            return
        }
        let persistError = await write(target)
        let now = configuration.clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        state.withLock {
            $0.persistRetryFinished(
                generation: job.generation, version: target.version, succeeded: persistError == nil, now: now,
                jitter: jitter)
        }
        if let persistError {
            events.emit(.persistenceFailed, session: nil, detail: Self.describePersistFailure(persistError))
        }
        releasePersistSlot()
    }

    /// Publishes credentials obtained elsewhere: written first, then published, then the event, then the waiters
    /// of a superseded refresh get them.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when no session is open; the store's error when the
    ///   write fails (then nothing changes).
    func update(_ credentials: Credentials) async throws {
        await acquirePersistSlot()
        guard let (generation, target) = state.withLock({ $0.updateTarget(credentials) }) else {
            releasePersistSlot()
            throw RefreshStateMachine.notOpenError
        }
        do {
            try await store.save(target.stored, identifier: target.identifier)
        } catch {
            releasePersistSlot()
            throw error
        }
        guard let action = state.withLock({ $0.update(credentials, generation: generation) }) else {
            releasePersistSlot()
            throw RefreshStateMachine.notOpenError
        }
        events.emit(.credentialsUpdated(action.change), session: nil, detail: nil)
        releasePersistSlot()
        Self.resume(action.waiters, with: .success(credentials))
    }
}
