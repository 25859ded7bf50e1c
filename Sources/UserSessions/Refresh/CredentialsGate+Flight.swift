import Foundation

extension CredentialsGate {
    /// Runs a refresh in an unstructured task, so that no caller's cancellation can cancel it: a rotated refresh
    /// token must always be committed.
    func startFlight(_ job: RefreshStateMachine.RefreshJob) {
        runInBackground { await self.runFlight(job) }
    }

    private func runFlight(_ job: RefreshStateMachine.RefreshJob) async {
        // Announced only while the flight is current, ordered against `deactivate()`. A flight that ended before
        // it got here has sent nothing, so it does not call the refresher at all.
        let started = modifyStateAndRunActions(ordered: true) {
            $0.flightProceeds(flightID: job.flightID, announcing: true)
        }
        guard started else { return }
        let startedAt = ContinuousClock.now
        if let coordinatedStore {
            await runLeasedFlight(job, store: coordinatedStore, startedAt: startedAt)
            return
        }
        var outcome = await callRefresher(job.credentials, for: job)
        if case .failure(let error) = outcome, error.failureClass == .terminal,
            let stored = await storedReplacement(for: job)
        {
            // The fallback for stores without coordination: another process already rotated the refresh token we
            // sent (a server with a reuse grace period answered `invalid_grant`). Adopt what it stored, refreshing
            // once with it when it is expired too.
            if !stored.credentials.isExpired(at: clock.now()) {
                let adoption = await withPersistSlot { _ in
                    adoptHoldingSlot(RevisedSession(session: stored.session, revision: 0), generation: job.generation)
                }
                if case .none = adoption {
                    await finish(job, outcome: outcome, startedAt: startedAt)
                } else {
                    await finishAdoption(adoption, generation: job.generation)
                }
                return
            }
            outcome = await callRefresher(stored.credentials, for: job)
        }
        await finish(job, outcome: outcome, startedAt: startedAt)
    }

    /// Refreshes `credentials` for `job`'s identifier through the ledger: once per refresh token in the process (a
    /// refresh of another controller presenting the same token is joined, a token already rotated gets the
    /// rotation, a refused one fails at once).
    func callRefresher(_ credentials: Credentials, for job: RefreshStateMachine.RefreshJob) async
        -> Result<Credentials, UserSessionError>
    {
        await ledger.refresh(
            identifier: job.identifier, userInfo: job.userInfo, credentials: credentials, fence: job.ledgerFence
        ) {
            await callRefresher(credentials)
        }
    }

    /// Calls the refresher (or fails without one).
    private func callRefresher(_ credentials: Credentials) async -> Result<Credentials, UserSessionError> {
        guard let refresher else {
            return .failure(
                UserSessionError(.noRefresher, "no refresher is configured", failureClass: .misconfiguration))
        }
        do {
            return .success(try await refresher.refresh(credentials))
        } catch {
            return .failure(Self.classify(error))
        }
    }

    /// Commits or fails the flight with what the refresher returned, and reports it.
    func finish(
        _ job: RefreshStateMachine.RefreshJob, outcome: Result<Credentials, UserSessionError>,
        startedAt: ContinuousClock.Instant
    ) async {
        let waiters: Int?
        switch outcome {
        case .success(let credentials): waiters = await commit(job, credentials)
        case .failure(let error): waiters = await fail(job, error)
        }
        reportFlight(job, outcome: outcome, waiters: waiters, duration: ContinuousClock.now - startedAt)
    }

    /// For a store without coordination, after `invalid_grant`: the stored session when it holds credentials
    /// with another refresh token than the one `job` sent (and the flight is still the session's), else `nil`.
    private func storedReplacement(for job: RefreshStateMachine.RefreshJob) async
        -> (session: StoredSession, credentials: Credentials)?
    {
        let identifier = inspect { $0.identifier }
        guard let stored = try? await store.load(identifier: identifier), let credentials = stored.credentials,
            inspect({
                $0.mayRetryWithStored(
                    flightID: job.flightID, identifier: identifier, sent: job.credentials, stored: credentials)
            })
        else { return nil }
        return (stored, credentials)
    }

    /// Tells the observers how a flight ended (`waiters` is `nil` for a stale flight).
    private func reportFlight(
        _ job: RefreshStateMachine.RefreshJob, outcome: Result<Credentials, UserSessionError>, waiters: Int?,
        duration: Duration
    ) {
        guard !events.observers.isEmpty else { return }
        var report = UserSessionRefreshReport(
            identifier: events.session.identifier, generation: job.generation, outcome: .discarded,
            duration: duration, waiters: waiters ?? 0)
        if waiters != nil {
            switch outcome {
            case .success: report.outcome = .succeeded
            case .failure(let error):
                report.outcome = .failed
                report.failureClass = error.failureClass ?? .transient
            }
        }
        events.observers.notify { $0.observeRefresh(report) }
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

    /// Returns how many waiters got the failure, or `nil` when the flight was stale.
    private func fail(_ job: RefreshStateMachine.RefreshJob, _ error: UserSessionError) async -> Int? {
        let now = clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        let report = modifyStateAndRunActions(ordered: true) {
            $0.flightFailed(flightID: job.flightID, error: error, now: now, jitter: jitter)
        }
        guard let report else { return nil }
        if let generation = report.invalidates, let handler = currentTerminalFailureHandler() {
            await handler(generation)
        }
        return report.waiters
    }

    /// Commit order: persist, publish to readers, emit, resume waiters. A flight that became stale at any point
    /// (deactivated, replaced, superseded) publishes nothing; if its session ended keeping its record, its
    /// credentials are still written there (an orphan), silently. Returns how many waiters got the credentials, or
    /// `nil` when the flight was stale.
    private func commit(_ job: RefreshStateMachine.RefreshJob, _ credentials: Credentials) async -> Int? {
        // Cheap early exit, so a flight whose result goes nowhere does not even queue for the slot.
        let wanted = inspect { $0.isCurrent(flightID: job.flightID) || $0.orphans[job.flightID] != nil }
        guard wanted else { return nil }
        let step = await withPersistSlot { ticket in await commitHoldingSlot(job, credentials, ticket: ticket) }
        switch step {
        case .stale:
            return nil
        case .superseded(.none):
            // Only a store whose revisions went backwards gets here: the flight's waiters must not hang.
            return await fail(
                job,
                UserSessionError(
                    .revisionConflict, "the token store's record changed during the refresh", failureClass: .transient))
        case .superseded(let adoption):
            await finishAdoption(adoption, generation: job.generation)
            return nil
        case .committed(let waiters):
            return waiters
        }
    }

    /// How a commit ended in the persistence slot.
    private enum CommitStep {
        /// The flight went stale: nothing is published (an orphan's credentials were written to its record).
        case stale
        /// A coordinated store held a newer record (or none): it stands; this is what was adopted instead.
        case superseded(Adoption)
        /// Written (or not, reported), published, announced, and this many waiters resumed.
        case committed(waiters: Int)
    }

    /// The part of `commit` that holds the persistence slot. The events are emitted before the slot is released,
    /// so `deactivate()` (which waits for the slot) returns only after them.
    private func commitHoldingSlot(_ job: RefreshStateMachine.RefreshJob, _ credentials: Credentials, ticket: UInt64)
        async -> CommitStep
    {
        // Checked again while holding the slot: `deactivate()` may have run while this task waited.
        let targets = modifyStateAndRunActions {
            $0.commitTargets(flightID: job.flightID, newCredentials: credentials)
        }
        guard let target = targets.session else {
            if let orphan = targets.orphan {
                _ = await write(orphan, ticket: ticket)
            } else {
                // Nobody here writes this rotation: the ledger does, on its schedule, unless the store has it.
                ledger.ensureWritten(job.identifier, schedule: ledgerSchedule)
            }
            return .stale
        }
        let written = await writeOutcome(target, ticket: ticket)
        if case .superseded(let record) = written {
            return .superseded(adoptHoldingSlot(record, generation: job.generation))
        }
        let now = clock.nowSeconds()
        let jitter = Double.random(in: 0...1)
        let waiters = modifyStateAndRunActions {
            $0.flightCommitted(
                flightID: job.flightID, newCredentials: credentials, persistError: written.error, now: now,
                jitter: jitter)
        }
        return waiters.map { .committed(waiters: $0) } ?? .stale
    }
}
