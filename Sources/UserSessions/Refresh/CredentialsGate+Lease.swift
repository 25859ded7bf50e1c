import Foundation

extension CredentialsGate {
    /// The flight over a ``CoordinatedTokenStore``: everything from reading the record to committing runs under
    /// the store's refresh lease for the identifier, so at most one process at a time presents a refresh token.
    ///
    /// Under the lease the record is read first. A record with a newer revision and other credentials than the
    /// ones this flight would send means another process already rotated them: they are adopted and the refresher
    /// is not called. Otherwise the refresher is called and its credentials are committed with a write
    /// conditional on the revision held (``conditionalWrite(_:store:overwrite:)``), still under the lease. A
    /// record that is gone means the session was cleared elsewhere: nothing is sent or written, and the session
    /// closes.
    func runLeasedFlight(
        _ job: RefreshStateMachine.RefreshJob, store: any CoordinatedTokenStore, startedAt: ContinuousClock.Instant
    ) async {
        let identifier = inspect { $0.identifier }
        do {
            try await store.withRefreshLease(identifier: identifier) {
                await self.flightUnderLease(job, identifier: identifier, store: store, startedAt: startedAt)
            }
        } catch {
            // The lease could not be taken (the store failed, or the flight was cancelled while waiting): nothing
            // was sent, so this is a failure like a transient one.
            await finish(job, outcome: .failure(Self.classify(error)), startedAt: startedAt)
        }
    }

    private func flightUnderLease(
        _ job: RefreshStateMachine.RefreshJob, identifier: String, store: any CoordinatedTokenStore,
        startedAt: ContinuousClock.Instant
    ) async {
        // While this flight waited for the lease it may have been superseded (an adoption) or its session may have
        // ended: it has sent nothing, so it sends nothing now.
        guard stillCurrent(job) else { return }
        let record: RevisedSession?
        do {
            record = try await store.loadRevised(identifier: identifier)
        } catch {
            await finish(job, outcome: .failure(Self.classify(error)), startedAt: startedAt)
            return
        }
        let adopt = record.map { record in
            inspect { $0.storeIsNewer(record, than: job.credentials, generation: job.generation) }
        }
        if adopt ?? true {
            let adoption = await withPersistSlot { _ in adoptHoldingSlot(record, generation: job.generation) }
            if case .none = adoption {
                // The session changed while this flight read the record: the flight is stale, or (its session
                // still active) refreshes after all, so its waiters never hang.
                guard inspect({ $0.isCurrent(flightID: job.flightID) }) else { return }
            } else {
                await finishAdoption(adoption, generation: job.generation)
                return
            }
        }
        // Checked once more right before sending: a change notification may have adopted the record another
        // process wrote (superseding this flight) while the record was read here; the refresh token this flight
        // holds is then spent, and presenting it again would be a reuse that revokes the whole token family.
        guard stillCurrent(job) else { return }
        await finish(job, outcome: await callRefresher(job.credentials, for: job), startedAt: startedAt)
    }

    /// Whether `job` is still the session's flight; a superseded or ended one is forgotten (it has sent nothing).
    private func stillCurrent(_ job: RefreshStateMachine.RefreshJob) -> Bool {
        modifyStateAndRunActions { $0.flightProceeds(flightID: job.flightID, announcing: false) }
    }
}
