import Foundation

extension RefreshStateMachine {
    /// What to do after a refresh failed.
    struct FailureAction {
        var waiters: [Waiter]
        var error: UserSessionError
        /// The session's credentials were revoked: call the terminal-failure handler for `generation`.
        var notifyTerminal: Bool
        var generation: UInt64
    }

    /// The refresh of `flightID` failed with `error` (whose ``UserSessionError/failureClass`` is set). Returns
    /// `nil` when the flight is stale (the session was deactivated, replaced, or its credentials updated): then
    /// nothing is reported.
    mutating func refreshFailed(flightID: UInt64, error: UserSessionError, now: Double, jitter: Double)
        -> FailureAction?
    {
        guard isCurrent(flightID: flightID) else {
            // An orphan's failure is never reported: its session ended.
            orphans.removeValue(forKey: flightID)
            return nil
        }
        let failureClass = error.failureClass ?? .transient
        let policy = self.policy
        let (flight, waiters) = flights.failed(error, failureClass: failureClass, now: now) {
            policy.backoff(attempt: $0, jitter: jitter)
        }
        // A restore is still deciding whether to open at all; it throws instead of invalidating.
        let notifyTerminal = failureClass == .terminal && flight.kind != .restore
        recomputeDeadline()
        return FailureAction(waiters: waiters, error: error, notifyTerminal: notifyTerminal, generation: generation)
    }

    /// Whether the result of `flightID` would still be used.
    func isCurrent(flightID: UInt64) -> Bool {
        active && flights.isCurrent(flightID)
    }

    /// The refresh of `flightID` returned new credentials and the persistence slot is held: what to write, or
    /// `nil` when the flight became stale (then nothing is written).
    mutating func commitTarget(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        guard isCurrent(flightID: flightID) else { return nil }
        // From here on the write belongs to the session even if it deactivates before the write returns: the
        // server has already rotated the refresh token, so these credentials must reach the store one way or
        // another (see `commit`).
        persistence.beginCommit(flightID: flightID)
        return target(newCredentials, version: persistence.version + 1)
    }

    /// What to do after new credentials were committed.
    struct CommitAction {
        var waiters: [Waiter]
        var persistenceFailed: Bool
    }

    /// The write of a refresh's credentials finished (`persisted` says whether it succeeded): publish them.
    /// Returns `nil` when the flight became stale during the write (its waiters were already failed).
    mutating func commit(flightID: UInt64, newCredentials: Credentials, persisted: Bool, now: Double, jitter: Double)
        -> CommitAction?
    {
        let wroteForThisSession = persistence.endCommit(flightID: flightID)
        guard isCurrent(flightID: flightID) else {
            // The session deactivated while the write was in progress (`deactivate()` waits for it). If the write
            // failed, hand the credentials to `deactivate()`'s final flush rather than drop the rotated token.
            if wroteForThisSession, !persisted, !active {
                setCredentials(newCredentials)
                persistence.keepForFinalFlush()
            }
            return nil
        }
        let (flight, waiters) = flights.succeeded()
        setCredentials(newCredentials, issuedAt: flight.startedAt)
        breaker.recordSuccess(at: now)
        let policy = self.policy
        persistence.published(written: persisted, now: now) { policy.backoff(attempt: $0, jitter: jitter) }
        recomputeDeadline()
        return CommitAction(waiters: waiters, persistenceFailed: !persisted)
    }

    // MARK: - Credentials from elsewhere

    /// What to do after ``UserSessionController/updateCredentials(_:)`` published new credentials.
    struct UpdateAction {
        var change: UserSessionEvent.CredentialsChange
        /// Waiters of a refresh that was superseded; they get the new credentials.
        var waiters: [Waiter]
    }

    /// The identity the update must be written under, when a session of this generation is active.
    func updateTarget(_ newCredentials: Credentials) -> (generation: UInt64, target: PersistTarget)? {
        guard active else { return nil }
        return (generation, target(newCredentials, version: persistence.version + 1))
    }

    /// Publishes credentials obtained elsewhere (already written to the store). A refresh in flight is
    /// superseded: its result will be discarded and its waiters get these credentials.
    mutating func update(_ newCredentials: Credentials, generation: UInt64) -> UpdateAction? {
        guard active, self.generation == generation else { return nil }
        let old = credentials
        let oldExpiry = expiresAt
        setCredentials(newCredentials)
        persistence.publishedStored()
        let waiters = flights.reset()
        recomputeDeadline()
        let oldGranted = old?.grantedPermissions ?? []
        let change = UserSessionEvent.CredentialsChange(
            extended: expiresAt > oldExpiry,
            addedPermissions: newCredentials.grantedPermissions.subtracting(oldGranted),
            removedPermissions: oldGranted.subtracting(newCredentials.grantedPermissions))
        return UpdateAction(change: change, waiters: waiters)
    }
}
