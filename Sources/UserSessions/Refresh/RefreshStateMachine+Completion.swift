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
        guard active, let flight, flight.id == flightID else { return nil }
        self.flight = nil
        let waiters = takeWaiters()
        var notifyTerminal = false
        switch error.failureClass ?? .transient {
        case .terminal:
            terminalError = error
            // A restore is still deciding whether to open at all; it throws instead of invalidating.
            notifyTerminal = flight.kind != .restore
        case .misconfiguration:
            automaticRefreshBlocked = true
            failureCount += 1
            retryAt = now + backoff(attempt: failureCount, jitter: jitter)
        case .transient, .cancelled:
            failureCount += 1
            retryAt = now + backoff(attempt: failureCount, jitter: jitter)
        }
        recomputeDeadline()
        return FailureAction(waiters: waiters, error: error, notifyTerminal: notifyTerminal, generation: generation)
    }

    /// Whether the result of `flightID` would still be used.
    func isCurrent(flightID: UInt64) -> Bool {
        active && flight?.id == flightID
    }

    /// The refresh of `flightID` returned new credentials and the persistence slot is held: what to write, or
    /// `nil` when the flight became stale (then nothing is written).
    mutating func commitTarget(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        guard isCurrent(flightID: flightID) else { return nil }
        // From here on the write belongs to the session even if it deactivates before the write returns: the
        // server has already rotated the refresh token, so these credentials must reach the store one way or
        // another (see `commit`).
        writingFlightID = flightID
        return PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: newCredentials),
            version: version + 1)
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
        let wroteForThisSession = writingFlightID == flightID
        writingFlightID = nil
        guard isCurrent(flightID: flightID) else {
            // The session deactivated while the write was in progress (`deactivate()` waits for it). If the write
            // failed, hand the credentials to `deactivate()`'s final flush rather than drop the rotated token.
            if wroteForThisSession, !persisted, !active {
                credentials = newCredentials
                version += 1
            }
            return nil
        }
        flight = nil
        setCredentials(newCredentials)
        failureCount = 0
        retryAt = -.infinity
        automaticRefreshBlocked = false
        successTimes.append(now)
        if persisted {
            persistedVersion = version
            persistFailures = 0
            persistRetryAt = .infinity
        } else {
            notePersistFailure(now: now, jitter: jitter)
        }
        recomputeDeadline()
        return CommitAction(waiters: takeWaiters(), persistenceFailed: !persisted)
    }

    // MARK: - Persistence retries

    /// Starts a retry of a failed write when one is due.
    mutating func schedulePersistRetryIfDue(now: Double) -> PersistJob? {
        guard active, isDirty, !persistRetryScheduled, now >= persistRetryAt else { return nil }
        persistRetryScheduled = true
        return PersistJob(generation: generation)
    }

    /// Once the slot is held for a retry: what to write (always the newest credentials), or `nil` if nothing is
    /// left to write for `generation`.
    mutating func persistRetryTarget(generation: UInt64) -> PersistTarget? {
        guard active, self.generation == generation, isDirty, let credentials else {
            if self.generation == generation { persistRetryScheduled = false }
            recomputeDeadline()
            return nil
        }
        return PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: credentials),
            version: version)
    }

    /// A retried write of `version` finished.
    mutating func persistRetryFinished(
        generation: UInt64, version: UInt64, succeeded: Bool, now: Double, jitter: Double
    ) {
        guard self.generation == generation else { return }
        persistRetryScheduled = false
        if succeeded {
            persistedVersion = max(persistedVersion, version)
            if !isDirty {
                persistFailures = 0
                persistRetryAt = .infinity
            }
        } else {
            notePersistFailure(now: now, jitter: jitter)
        }
        recomputeDeadline()
    }

    private mutating func notePersistFailure(now: Double, jitter: Double) {
        persistFailures += 1
        persistRetryAt = now + backoff(attempt: persistFailures, jitter: jitter)
    }

    /// Tries to take the persistence slot; `false` means the caller must queue with ``enqueueForPersistSlot(_:)``.
    mutating func tryAcquirePersistSlot() -> Bool {
        guard !persistSlotHeld else { return false }
        persistSlotHeld = true
        return true
    }

    /// Queues for the slot, or returns `true` (without storing the continuation) when it was free.
    mutating func acquirePersistSlot(_ continuation: UnsafeContinuation<Void, Never>) -> Bool {
        if tryAcquirePersistSlot() { return true }
        persistSlotQueue.append(continuation)
        return false
    }

    /// Releases the slot, handing it to the next task in line (returned, to be resumed outside the lock).
    mutating func releasePersistSlot() -> UnsafeContinuation<Void, Never>? {
        guard !persistSlotQueue.isEmpty else {
            persistSlotHeld = false
            return nil
        }
        return persistSlotQueue.removeFirst()
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
        let target = PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: newCredentials),
            version: version + 1)
        return (generation, target)
    }

    /// Publishes credentials obtained elsewhere (already written to the store). A refresh in flight is
    /// superseded: its result will be discarded and its waiters get these credentials.
    mutating func update(_ newCredentials: Credentials, generation: UInt64) -> UpdateAction? {
        guard active, self.generation == generation else { return nil }
        let old = credentials
        let oldExpiry = expiresAt
        setCredentials(newCredentials)
        persistedVersion = version
        persistFailures = 0
        persistRetryAt = .infinity
        flight = nil
        terminalError = nil
        failureCount = 0
        retryAt = -.infinity
        automaticRefreshBlocked = false
        recomputeDeadline()
        let oldGranted = old?.grantedPermissions ?? []
        let change = UserSessionEvent.CredentialsChange(
            extended: expiresAt > oldExpiry,
            addedPermissions: newCredentials.grantedPermissions.subtracting(oldGranted),
            removedPermissions: oldGranted.subtracting(newCredentials.grantedPermissions))
        return UpdateAction(change: change, waiters: takeWaiters())
    }
}
