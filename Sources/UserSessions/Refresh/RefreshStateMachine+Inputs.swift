import Foundation

/// The inputs ``CredentialsGate`` feeds the machine through its funnel
/// (``CredentialsGate/modifyStateAndRunActions(ordered:_:)``): one `mutating func` per thing that happened, each
/// returning the ``Actions`` it calls for (and a value where the gate needs one). They turn the machine's decisions
/// (``decide(_:now:)``, ``refreshFailed(flightID:error:now:jitter:)``, ``commit(flightID:newCredentials:persisted:now:jitter:)``, …),
/// which the unit tests check one by one, into what the gate performs.
extension RefreshStateMachine {
    // MARK: - Sessions

    /// A session opens (see ``activate(identifier:userInfo:credentials:generation:adoptingOrphans:revision:)``):
    /// waiters left from an earlier one fail.
    mutating func activated(
        identifier: String, userInfo: UserInfo, credentials: Credentials?, generation: UInt64, restoring: Bool,
        revision: UInt64?, ledgerFence: UInt64 = 0
    ) -> Actions {
        let leftovers = activate(
            identifier: identifier, userInfo: userInfo, credentials: credentials, generation: generation,
            adoptingOrphans: restoring, revision: revision, ledgerFence: ledgerFence)
        return .resume(leftovers, with: .failure(Self.notOpenError))
    }

    /// The opening write of a sign-in landed: the session's writes are taken under the ledger's new fence.
    mutating func signedIn(ledgerFence: UInt64) -> Actions {
        if active { self.ledgerFence = ledgerFence }
        return .none
    }

    /// The session was restored from an unwritten rotation the ledger held: the store must get it.
    mutating func unwrittenRotationAdopted(now: Double) -> Actions {
        guard active else { return .none }
        persistence.mustRewrite(now: now)
        return Actions(retry: schedulePersistRetryIfDue(now: now))
    }

    /// The session stops (see ``deactivate()``): its waiters fail.
    mutating func deactivated() -> Actions {
        .resume(deactivate(), with: .failure(Self.notOpenError))
    }

    /// Whether the session of `generation` is the active one.
    func isActive(generation: UInt64) -> Bool {
        active && self.generation == generation
    }

    // MARK: - Token requests

    /// A synchronous token request past ``nextActionAt`` (see ``tokenRequested(now:)``): the token, if it can be
    /// served, with the generation of its session.
    mutating func tokenAsked(now: Double) -> ((token: String?, generation: UInt64), Actions) {
        let outcome = tokenRequested(now: now)
        return ((outcome.token, generation), Actions(refresh: outcome.refresh, retry: outcome.persist))
    }

    /// A token request joins the refresh in flight when it must wait for it (``demandJoinsFlight(now:)``);
    /// returns whether it joined.
    mutating func joinFlight(now: Double, waiterID: UInt64, continuation: WaiterContinuation) -> (Bool, Actions) {
        guard demandJoinsFlight(now: now) else { return (false, .none) }
        register(waiterID: waiterID, continuation: continuation)
        return (true, .none)
    }

    /// An asynchronous `request` (see ``decide(_:now:)``): the caller is served or failed at once, or waits (a
    /// refresh starts when it is the first). Returns the generation it was decided for. A caller whose task is
    /// already `cancelled` gets `CancellationError`.
    mutating func requested(
        _ request: Request, now: Double, waiterID: UInt64, continuation: WaiterContinuation, cancelled: Bool
    ) -> (UInt64, Actions) {
        let generation = generation
        if cancelled { return (generation, Actions(caller: (continuation, .failure(CancellationError())))) }
        switch decide(request, now: now) {
        case .serve(let credentials):
            return (generation, Actions(caller: (continuation, .success(credentials))))
        case .wait(let job):
            register(waiterID: waiterID, continuation: continuation)
            return (generation, Actions(refresh: job))
        case .fail(let error, let loopTripped):
            let trip = loopTripped ? (generation, error.message) : nil
            return (generation, Actions(loopTripped: trip, caller: (continuation, .failure(error))))
        }
    }

    /// A waiter's task was cancelled: it gets `CancellationError`, if it is still waiting.
    mutating func waiterCancelled(id: UInt64) -> Actions {
        Actions(caller: cancelWaiter(id: id).map { ($0, .failure(CancellationError())) })
    }

    // MARK: - Flights

    /// The flight `flightID` is about to do its next step (announce itself, send its refresh token): whether it is
    /// still the session's. One that is not is forgotten, orphan or not: it has sent nothing. With `announcing`,
    /// a current one emits `.refreshStarted`.
    mutating func flightProceeds(flightID: UInt64, announcing: Bool) -> (Bool, Actions) {
        guard isCurrent(flightID: flightID) else {
            orphans.removeValue(forKey: flightID)
            return (false, .none)
        }
        return (true, announcing ? Actions(events: [.init(kind: .refreshStarted)]) : .none)
    }

    /// How a failed flight was reported.
    struct FailureReport {
        /// How many waiters got the failure.
        var waiters: Int
        /// The generation whose session the gate must invalidate (a terminal failure), if any.
        var invalidates: UInt64?
    }

    /// The refresh of `flightID` failed (see ``refreshFailed(flightID:error:now:jitter:)``): `.refreshFailed` is
    /// emitted and the waiters fail. `nil` for a stale flight: nothing is reported.
    mutating func flightFailed(flightID: UInt64, error: UserSessionError, now: Double, jitter: Double)
        -> (FailureReport?, Actions)
    {
        guard let failure = refreshFailed(flightID: flightID, error: error, now: now, jitter: jitter) else {
            return (nil, .none)
        }
        var actions = Actions.resume(failure.waiters, with: .failure(error))
        actions.events = [.init(kind: .refreshFailed(error.failureClass ?? .transient), detail: error.message)]
        let report = FailureReport(
            waiters: failure.waiters.count, invalidates: failure.notifyTerminal ? failure.generation : nil)
        return (report, actions)
    }

    /// Once the persistence slot is held for the commit of `flightID`: the active session's target (see
    /// ``commitTarget(flightID:newCredentials:)``), or else the orphan's (``orphanCommitTarget(flightID:newCredentials:)``).
    mutating func commitTargets(flightID: UInt64, newCredentials: Credentials)
        -> ((session: PersistTarget?, orphan: PersistTarget?), Actions)
    {
        if let target = commitTarget(flightID: flightID, newCredentials: newCredentials) {
            return ((target, nil), .none)
        }
        return ((nil, orphanCommitTarget(flightID: flightID, newCredentials: newCredentials)), .none)
    }

    /// The write of a refresh's credentials returned (`persistError` when it failed): publish them (see
    /// ``commit(flightID:newCredentials:persisted:now:jitter:)``), emit `.persistenceFailed` (and arm the retry)
    /// when the write failed, then `.credentialsRefreshed`, and resume the waiters. Returns how many there were,
    /// or `nil` when the flight became stale.
    mutating func flightCommitted(
        flightID: UInt64, newCredentials: Credentials, persistError: (any Error)?, now: Double, jitter: Double
    ) -> (Int?, Actions) {
        guard
            let commit = commit(
                flightID: flightID, newCredentials: newCredentials, persisted: persistError == nil, now: now,
                jitter: jitter)
        else { return (nil, .none) }
        var actions = Actions.resume(commit.waiters, with: .success(newCredentials))
        if let persistError {
            actions.events.append(.init(kind: .persistenceFailed, detail: Self.describePersistFailure(persistError)))
            actions.armRetryTimer = true
        }
        actions.events.append(.init(kind: .credentialsRefreshed))
        return (commit.waiters.count, actions)
    }

    // MARK: - Credentials from elsewhere

    /// Credentials handed over explicitly were written (see ``update(_:generation:)``): `.credentialsUpdated`, and
    /// the waiters of a superseded refresh get them.
    mutating func credentialsUpdated(_ credentials: Credentials, generation: UInt64) -> Actions {
        guard let update = update(credentials, generation: generation) else { return .none }
        var actions = Actions.resume(update.waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(update.change))]
        return actions
    }

    /// The session of `generation` adopts `record`, which another process stored (see ``adopt(_:generation:)``);
    /// returns whether it did.
    mutating func recordAdopted(_ record: RevisedSession, generation: UInt64) -> (Bool, Actions) {
        guard let adoption = adopt(record, generation: generation), let credentials = record.session.credentials
        else { return (false, .none) }
        var actions = Actions.resume(adoption.waiters, with: .success(credentials))
        actions.events = [.init(kind: .credentialsUpdated(adoption.change), detail: "adopted from the token store")]
        return (true, actions)
    }

    /// The session of `generation` found its record removed elsewhere (see ``clearedElsewhere(generation:)``): its
    /// waiters fail. Returns whether it was the active session (which the controller must then close).
    mutating func recordRemoved(generation: UInt64) -> (Bool, Actions) {
        guard let waiters = clearedElsewhere(generation: generation) else { return (false, .none) }
        return (true, .resume(waiters, with: .failure(Self.clearedElsewhereError)))
    }

    // MARK: - Writes

    /// A writer asks for the persistence slot: its ticket, and whether it holds the slot now (else it queues with
    /// ``PersistenceSlot/enqueue(ticket:continuation:)``).
    mutating func slotRequested() -> ((ticket: UInt64, granted: Bool), Actions) {
        let ticket = slot.makeTicket()
        return ((ticket, slot.tryAcquire(ticket: ticket)), .none)
    }

    /// `closeAndClear()` is about to remove `identifier`'s record (see ``beginClear(identifier:)``).
    mutating func clearBegun(identifier: String) -> Actions {
        beginClear(identifier: identifier)
        return .none
    }

    /// A write of `target` landed as `revision` in a coordinated store (see ``noteWritten(_:revision:)``).
    mutating func written(_ target: PersistTarget, revision: UInt64) -> Actions {
        noteWritten(target, revision: revision)
        return .none
    }

    /// The opening session's first write landed as `revision` (see ``noteOpeningRevision(_:identifier:)``).
    mutating func openingWritten(revision: UInt64, identifier: String) -> Actions {
        noteOpeningRevision(revision, identifier: identifier)
        return .none
    }

    /// Once the slot is held for a retry of the session of `generation`: what to write (see
    /// ``persistRetryTarget(generation:)``).
    mutating func retryTargetTaken(generation: UInt64) -> (PersistTarget?, Actions) {
        (persistRetryTarget(generation: generation), .none)
    }

    /// A retried write found a newer record in a coordinated store, which stands: the retry is dropped.
    mutating func retrySuperseded() -> Actions {
        persistence.retryDropped()
        return .none
    }

    /// Once the slot is held after `deactivate()`: the final flush's target (see ``takeFinalFlush()``).
    mutating func finalFlushTaken() -> (PersistTarget?, Actions) {
        (takeFinalFlush(), .none)
    }

    /// A write of `target` in the slot of `ticket` returned. If its slot had been taken away, its late landing is
    /// repaired (see ``repairLateWrite(_:now:)``).
    mutating func writeReturned(_ target: PersistTarget, ticket: UInt64, now: Double) -> Actions {
        guard slot.finishWrite(ticket: ticket) else { return .none }
        switch repairLateWrite(target, now: now) {
        case .none: return .none
        case .rewrite(let job): return Actions(retry: job)
        }
    }

    /// A retried write of `version` for the session of `generation` returned (see
    /// ``persistRetryFinished(generation:version:succeeded:now:jitter:)``); a failure is reported while that
    /// session is active, and the next retry armed.
    mutating func writeRetried(
        generation: UInt64, version: UInt64, error: (any Error)?, now: Double, jitter: Double
    ) -> Actions {
        persistRetryFinished(
            generation: generation, version: version, succeeded: error == nil, now: now, jitter: jitter)
        guard let error else { return .none }
        var actions = Actions(armRetryTimer: true)
        if isActive(generation: generation) {
            actions.events = [.init(kind: .persistenceFailed, detail: Self.describePersistFailure(error))]
        }
        return actions
    }

    static func describePersistFailure(_ error: any Error) -> String {
        if let error = error as? UserSessionError { return "writing credentials failed: \(error)" }
        return "writing credentials failed: \(String(describing: type(of: error)))"
    }
}
