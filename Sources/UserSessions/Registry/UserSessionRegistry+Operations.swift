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
        try Self.check(identifier)
        let key = ExactIdentifier(identifier)
        let now = now()
        if let controller = state.withLock({ $0.openIdleController(key, now: now) }) { return controller }

        let waiterID = waiterIDs.wrappingAdd(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await withVisibleCheckedThrowingContinuation {
                (continuation: CheckedContinuation<UserSessionController, any Error>) in
                // Decided under the lock; the continuation is resumed after it is released.
                enum Step {
                    case answer(Result<UserSessionController, any Error>)
                    case wait
                    case lead(flight: UInt64, ticket: Ticket, runsNow: Bool)
                }
                let step = state.withLock { state -> Step in
                    if state.isShutDown { return .answer(.failure(Self.shutdownError)) }
                    if Task.isCancelled { return .answer(.failure(CancellationError())) }
                    if let controller = state.openIdleController(key, now: now) { return .answer(.success(controller)) }
                    if let flight = state.lanes.joinableFlight(.user(key)) {
                        state.flights[flight]?.waiters[waiterID] = continuation
                        return .wait
                    }
                    let flight = state.startFlight(waiterID: waiterID, continuation)
                    let (ticket, runsNow) = state.lanes.enter(.user(key), flight: flight)
                    return .lead(flight: flight, ticket: ticket, runsNow: runsNow)
                }
                switch step {
                case .answer(let result): continuation.resumeVisibly(with: result)
                case .wait: break
                case .lead(let flight, let ticket, let runsNow):
                    // Unstructured, so that no caller's cancellation reaches the restore the others wait for.
                    Task {
                        await self.runFlight(flight, ticket, runsNow: runsNow, identifier: identifier)
                    }
                }
            }
        } onCancel: {
            state.withLock { $0.removeFlightWaiter(waiterID) }?.resumeVisibly(throwing: CancellationError())
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
        if let problem = UserSessionController.identifierProblem(prototype.identifier) {
            throw UserSessionError(.invalidPrototype, "the prototype's identifier \(problem)")
        }
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
        try Self.check(identifier)
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
                // Fences the identifier for every controller of the process: a refresh of an evicted controller
                // still in flight, or a write the ledger still retries, never brings the record back.
                ledger.signedOut(identifier: identifier)
                try await store.remove(identifier: identifier)
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
        let controller = try heldOrNewController(for: identifier, key: key)
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
            if let held = state.withLock({ $0.entries[key]?.controller }), held.session.isOpened {
                result = .success(held)
            } else {
                result = .success(try await restoreInTurn(identifier, key: key))
            }
        } catch {
            result = .failure(error)
        }
        state.withLock { $0.lanes.closeFlight(flight, in: .user(key)) }
        leave(ticket)
        if case .success = result { await enforceMaximumOpenSessions(sparing: key) }
        let waiters = state.withLock { $0.flights.removeValue(forKey: flight)?.waiters } ?? [:]
        for waiter in waiters.values { waiter.resumeVisibly(with: result) }
    }
}
