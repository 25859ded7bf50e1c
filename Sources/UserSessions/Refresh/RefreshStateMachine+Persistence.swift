extension RefreshStateMachine {
    /// A write the gate must make once it holds the persistence slot.
    struct PersistJob: Equatable {
        let generation: UInt64
    }

    /// What to write, captured under the lock once the persistence slot is held.
    struct PersistTarget {
        let identifier: String
        let stored: StoredSession
        let version: UInt64
        /// The session the write belongs to.
        let generation: UInt64
        /// ``clearEpoch`` when the target was taken: a clear since then makes a late landing of it undone.
        let epoch: UInt64
        /// For a ``CoordinatedTokenStore``: the revision the write is conditional on (`nil`: a plain save).
        var baseRevision: UInt64? = nil
        /// The refresh token of the record at ``baseRevision``, as far as the session knows.
        var baseRefreshToken: String? = nil
        /// The ledger's sign-out fence the write is taken under: a sign-out of the identifier since makes the
        /// ledger refuse it (or undo it when it lands late).
        var ledgerFence: UInt64 = 0
    }

    /// A target for the active session's record.
    func target(_ credentials: Credentials, version: UInt64) -> PersistTarget {
        PersistTarget(
            identifier: identifier, stored: StoredSession(userInfo: userInfo, credentials: credentials),
            version: version, generation: generation, epoch: persistence.epoch, baseRevision: heldRevision,
            baseRefreshToken: base.refreshToken, ledgerFence: ledgerFence)
    }

    /// After `deactivate()`, once the persistence slot is held: the one last write of credentials that could not
    /// be stored before, if any. Clears them from memory.
    mutating func takeFinalFlush() -> PersistTarget? {
        guard !active else { return nil }
        defer { setCredentials(nil) }
        guard let version = persistence.takeFinalFlush(), let credentials else { return nil }
        return target(credentials, version: version)
    }

    // MARK: - Refreshes that outlive their session

    /// A refresh still running for a session that ended while keeping its stored record (`close()`, a replaced
    /// session, a cancelled or failed restore). Its result is never served, published or announced, but the
    /// server has already rotated the refresh token it sent, so its credentials are written to that session's
    /// own record — unless a `closeAndClear()` came since (``epoch``), or a newer session of the same identifier
    /// took the record over. A session restored from the record it sent adopts it instead (see ``activate``).
    struct Orphan {
        let identifier: String
        let userInfo: UserInfo
        let epoch: UInt64
        let flight: Flight
        /// The revision and refresh token of the record the session was based on: a late write is conditional on
        /// them, so it never recreates a record removed or replaced elsewhere.
        var baseRevision: UInt64?
        var baseRefreshToken: String?
        /// The ledger fence of the session: a sign-out of the identifier since (from anywhere) fences the write.
        var ledgerFence: UInt64 = 0
    }

    /// Keeps `flight` of the session that is ending as an orphan.
    mutating func orphan(_ flight: Flight) {
        orphans[flight.id] = Orphan(
            identifier: identifier, userInfo: userInfo, epoch: persistence.epoch, flight: flight,
            baseRevision: heldRevision, baseRefreshToken: base.refreshToken, ledgerFence: ledgerFence)
    }

    /// A session of `identifier` activates with `refreshToken`: an orphan refresh that sent that same refresh token
    /// becomes its flight (so it is not refreshed a second time with a token the server already rotated); other
    /// orphans of the identifier are dropped, since the new session now owns the record.
    mutating func adoptOrphan(identifier: String, refreshToken: String?) -> Flight? {
        guard !orphans.isEmpty else { return nil }
        var adopted: Flight?
        for (id, orphan) in orphans where ExactIdentifier.areEqual(orphan.identifier, identifier) {
            orphans.removeValue(forKey: id)
            if let refreshToken, orphan.flight.sentRefreshToken == refreshToken, adopted.map({ $0.id < id }) ?? true {
                adopted = orphan.flight
            }
        }
        return adopted
    }

    /// Once the persistence slot is held: where an orphan refresh's credentials go, or `nil` when they must not be
    /// written (cleared since, or taken over). Forgets the orphan either way.
    mutating func orphanCommitTarget(flightID: UInt64, newCredentials: Credentials) -> PersistTarget? {
        // Fenced per identifier by the ledger (``CredentialsLedger/writeBegins(_:fence:)``), not by this machine's
        // epoch: a clear of another identifier in this controller must not drop this user's rotation.
        guard let orphan = orphans.removeValue(forKey: flightID) else { return nil }
        return PersistTarget(
            identifier: orphan.identifier,
            stored: StoredSession(userInfo: orphan.userInfo, credentials: newCredentials), version: 0,
            generation: 0, epoch: persistence.epoch, baseRevision: orphan.baseRevision,
            baseRefreshToken: orphan.baseRefreshToken, ledgerFence: orphan.ledgerFence)
    }

    // MARK: - The clear fence

    /// `closeAndClear()` is about to remove `identifier`'s record (the session is already deactivated): no write
    /// taken before this point may land afterwards. Orphans of it are dropped, and any write whose target was
    /// taken before and lands late (a store that overran the close's deadline) is undone (``repairLateWrite(_:now:)``).
    mutating func beginClear(identifier: String) {
        persistence.fence()
        orphans = orphans.filter { !ExactIdentifier.areEqual($0.value.identifier, identifier) }
    }

    /// What a write that landed after its slot was taken away must do to repair the order of writes.
    enum WriteRepair: Equatable {
        case none
        /// Write the active session's newest credentials again: the write landed after a newer one.
        case rewrite(PersistJob)
    }

    /// A write of `target` whose slot ``PersistenceSlot/abandon()`` took away returned: what its late landing
    /// must repair.
    mutating func repairLateWrite(_ target: PersistTarget, now: Double) -> WriteRepair {
        let ownsRecord = active && ExactIdentifier.areEqual(identifier, target.identifier)
        if ownsRecord, generation != target.generation || target.epoch != persistence.epoch {
            // A newer session of this identifier may have written since: write its credentials again, now.
            persistence.mustRewrite(now: now)
            return schedulePersistRetryIfDue(now: now).map { .rewrite($0) } ?? .none
        }
        // A late write of a record this session does not own is the ledger's to repair: it knows whether that
        // identifier signed out since (``CredentialsLedger/writeFinished(_:fence:wrote:revision:schedule:)``).
        return .none
    }

    // MARK: - Retries

    /// Starts a retry of a failed write when one is due.
    mutating func schedulePersistRetryIfDue(now: Double) -> PersistJob? {
        guard active, persistence.retryIfDue(now: now) else { return nil }
        return PersistJob(generation: generation)
    }

    /// When the background retry timer should fire for the active session, if a write is waiting for one.
    var pendingRetryAt: Double? {
        guard active else { return nil }
        return persistence.pendingRetryAt
    }

    /// Once the slot is held for a retry: what to write (always the newest credentials), or `nil` if nothing is
    /// left to write for `generation`.
    mutating func persistRetryTarget(generation: UInt64) -> PersistTarget? {
        guard self.generation == generation else {
            recomputeDeadline()
            return nil
        }
        guard active, let credentials, let version = persistence.retryTarget() else {
            persistence.retryDropped()
            recomputeDeadline()
            return nil
        }
        return target(credentials, version: version)
    }

    /// A retried write of `version` finished.
    mutating func persistRetryFinished(
        generation: UInt64, version: UInt64, succeeded: Bool, now: Double, jitter: Double
    ) {
        guard self.generation == generation else { return }
        let policy = self.policy
        persistence.retryFinished(written: version, succeeded: succeeded, now: now) {
            policy.backoff(attempt: $0, jitter: jitter)
        }
        recomputeDeadline()
    }
}
