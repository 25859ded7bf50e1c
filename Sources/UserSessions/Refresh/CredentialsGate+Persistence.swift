import Foundation

extension CredentialsGate {
    // MARK: - The persistence slot

    /// Runs `body` holding the persistence slot (``PersistenceSlot``), waiting for it in arrival order, and
    /// releases it when `body` returns or throws. `body` gets the slot's ticket, for ``write(_:ticket:)``.
    ///
    /// The only way to hold the slot. It runs on the caller's executor, so an actor can hold the slot while it
    /// works on its own state (the controller activates an opening session inside it).
    nonisolated(nonsending) func withPersistSlot<Value>(_ body: (UInt64) async throws -> Value) async rethrows
        -> Value
    {
        let ticket = await acquirePersistSlot()
        defer { releasePersistSlot(ticket) }
        return try await body(ticket)
    }

    private func acquirePersistSlot() async -> UInt64 {
        let (ticket, granted) = modifyStateAndRunActions { $0.slotRequested() }
        if granted { return ticket }
        await withVisibleUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            // Stored in the queue exactly once or resumed here; the releaser removes it before resuming it.
            modifyStateAndRunActions { .init(slot: $0.slot.enqueue(ticket: ticket, continuation: continuation)) }
        }
        return ticket
    }

    private func releasePersistSlot(_ ticket: UInt64) {
        modifyStateAndRunActions { .init(slot: $0.slot.release(ticket: ticket)) }
    }

    /// Writes `target` to the store while holding the slot of `ticket`; returns the error when the write failed.
    ///
    /// If `deactivate()` took the slot away while the store overran its deadline, the write has landed out of
    /// order: it is repaired here, by removing the record again when a clear came since, or by writing the
    /// active session's newer credentials again.
    ///
    /// With a ``CoordinatedTokenStore`` the write is conditional on the revision the session holds; see
    /// ``writeOutcome(_:ticket:overwrite:)``, which also says when the store held something newer.
    func write(_ target: RefreshStateMachine.PersistTarget, ticket: UInt64) async -> (any Error)? {
        await writeOutcome(target, ticket: ticket).error
    }

    /// Like ``write(_:ticket:)``, telling a write that was superseded by a newer record in a coordinated store
    /// (which is left as it is) from one that was written or failed. With `overwrite`, a coordinated write
    /// replaces whatever is stored (used for credentials the caller hands over explicitly).
    func writeOutcome(_ target: RefreshStateMachine.PersistTarget, ticket: UInt64, overwrite: Bool = false) async
        -> WriteOutcome
    {
        // The ledger refuses a write taken before a sign-out of its identifier, from wherever it came.
        guard ledger.writeBegins(target.identifier, fence: target.ledgerFence) else {
            let now = clock.nowSeconds()
            modifyStateAndRunActions { $0.writeReturned(target, ticket: ticket, now: now) }
            return .failed(UserSessionError(.sessionNotOpen, "the user signed out; the write was dropped"))
        }
        var outcome: WriteOutcome
        do {
            if let coordinated = coordinatedStore, overwrite || target.baseRevision != nil {
                outcome = try await conditionalWrite(target, store: coordinated, overwrite: overwrite)
            } else {
                try await store.save(target.stored, identifier: target.identifier)
                outcome = .written
            }
        } catch {
            outcome = .failed(error)
        }
        // What the store holds now, as far as this write knows: its own credentials, or a newer record's.
        let wrote: Credentials? =
            switch outcome {
            case .written: target.stored.credentials
            case .superseded(let record): record?.session.credentials
            case .failed: nil
            }
        // No record where one was expected: the user signed out elsewhere, for every controller of this process too.
        if case .superseded(.none) = outcome { ledger.signedOut(identifier: target.identifier) }
        let landing = ledger.writeFinished(
            target.identifier, fence: target.ledgerFence, wrote: wrote, schedule: ledgerSchedule)
        let now = clock.nowSeconds()
        modifyStateAndRunActions { machine -> RefreshStateMachine.Actions in
            var actions = machine.writeReturned(target, ticket: ticket, now: now)
            // Landed after a sign-out of its identifier (a store that overran the close's deadline): undone.
            if landing == .removeAgain { actions.removeAgain = target.identifier }
            return actions
        }
        return outcome
    }

    /// Removes `identifier`'s record once more, after a write left behind by a close landed after the clear.
    func removeAgain(_ identifier: String) async {
        await withPersistSlot { _ in
            let owned = inspect { $0.active && ExactIdentifier.areEqual($0.identifier, identifier) }
            if !owned { try? await store.remove(identifier: identifier) }
        }
    }

    // MARK: - Writes of the lifecycle

    /// The opening session's first write. The controller makes it holding the slot (``withPersistSlot(_:)``), which
    /// it takes before the session's credentials become readable: nothing of the new session (a refresh commit)
    /// can then be written before it.
    func writeOpening(_ stored: StoredSession, identifier: String) async throws {
        if let coordinatedStore {
            let revision = try await Self.overwrite(stored, identifier: identifier, store: coordinatedStore)
            modifyStateAndRunActions { $0.openingWritten(revision: revision, identifier: identifier) }
        } else {
            try await store.save(stored, identifier: identifier)
        }
        // A sign-in, once the store has it: it replaces whatever the ledger held for the identifier (a failed
        // sign-in replaces nothing), and this session's writes are taken under the new fence.
        let fence = ledger.signedIn(identifier)
        modifyStateAndRunActions { $0.signedIn(ledgerFence: fence) }
    }

    /// `closeAndClear()`'s removal of `identifier`'s record (its session is already deactivated), fenced against
    /// every write: no write taken before it can land after it.
    ///
    /// The fence has three parts. The clear epoch is bumped first, so a refresh of the ended session that is
    /// still running (an orphan) writes nothing. The removal then waits for the persistence slot, so a write in
    /// progress lands before it. And a write that overran the close's deadline (its slot was taken away) and
    /// lands after the removal finds the epoch changed and removes the record again (``write(_:ticket:)``).
    func clear(identifier: String) async throws {
        ledger.signedOut(identifier: identifier)
        modifyStateAndRunActions { $0.clearBegun(identifier: identifier) }
        try await withPersistSlot { _ in try await store.remove(identifier: identifier) }
    }

    /// Publishes credentials obtained elsewhere: written first, then published, then the event, then the waiters
    /// of a superseded refresh get them.
    ///
    /// If the session ends while the write is in progress, the write stands (it went to that session's own
    /// record, which a close keeps and a clear removes after it) and this returns normally; nothing is
    /// published or announced.
    ///
    /// - Throws: ``UserSessionError/Code/sessionNotOpen`` when no session is open (nothing is written); the
    ///   store's error when the write fails (then nothing changes).
    func update(_ credentials: Credentials) async throws {
        try await withPersistSlot { ticket in
            guard let (generation, target) = inspect({ $0.updateTarget(credentials) }) else {
                throw RefreshStateMachine.notOpenError
            }
            if let error = await writeOutcome(target, ticket: ticket, overwrite: true).error { throw error }
            // Emitted holding the slot, so `deactivate()` (which waits for it) returns only after the event.
            modifyStateAndRunActions { $0.credentialsUpdated(credentials, generation: generation) }
        }
    }

    // MARK: - Retries of failed writes

    /// The session was restored from a rotation the ledger held and the store has not taken yet: it is written now,
    /// and retried on the failed-write schedule until the store takes it.
    func rotationAdoptedUnwritten() {
        let now = clock.nowSeconds()
        modifyStateAndRunActions { $0.unwrittenRotationAdopted(now: now) }
    }

    /// Retries a failed write in the background.
    func startPersistRetry(_ job: RefreshStateMachine.PersistJob) {
        runInBackground { await self.runPersistRetry(job) }
    }

    private func runPersistRetry(_ job: RefreshStateMachine.PersistJob) async {
        let adoption = await withPersistSlot { ticket -> Adoption in
            let target = modifyStateAndRunActions { $0.retryTargetTaken(generation: job.generation) }
            guard let target else { return .none }
            let outcome = await writeOutcome(target, ticket: ticket)
            if case .superseded(let record) = outcome {
                // Another process wrote a newer record (or removed it) since: that one stands.
                let adoption = adoptHoldingSlot(record, generation: job.generation)
                modifyStateAndRunActions { $0.retrySuperseded() }
                return adoption
            }
            let now = clock.nowSeconds()
            let jitter = Double.random(in: 0...1)
            modifyStateAndRunActions(ordered: true) {
                $0.writeRetried(
                    generation: job.generation, version: target.version, error: outcome.error, now: now, jitter: jitter)
            }
            return .none
        }
        await finishAdoption(adoption, generation: job.generation)
    }

    /// Starts the background timer for the next retry of a failed write, if one is waiting: it fires when the
    /// session's clock reaches the retry time (initial delay, then doubling, with jitter), whether or not anyone
    /// asks for a token. A token request past that time starts the retry too; only one runs.
    func armRetryTimer() {
        guard let retryAt = inspect({ $0.pendingRetryAt }) else { return }
        let clock = self.clock
        let timer = Task { [weak self] in
            guard (try? await clock.sleep(until: retryAt)) != nil, let self else { return }
            let now = clock.nowSeconds()
            self.modifyStateAndRunActions { .init(retry: $0.schedulePersistRetryIfDue(now: now)) }
        }
        retryTimer.replace(with: timer)
    }

    func disarmRetryTimer() {
        retryTimer.replace(with: nil)
    }
}
