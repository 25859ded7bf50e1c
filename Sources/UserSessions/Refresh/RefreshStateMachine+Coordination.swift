import Foundation

/// The rules for a ``CoordinatedTokenStore``: which revision of the record the session holds, and adopting
/// credentials that another process put in the store.
extension RefreshStateMachine {
    /// A write of `target` landed as `revision` (a conditional write, or the overwrite of an opening session):
    /// when it was the active session's, that revision and its refresh token are now what the session holds.
    mutating func noteWritten(_ target: PersistTarget, revision: UInt64) {
        guard active, generation == target.generation, ExactIdentifier.areEqual(identifier, target.identifier)
        else { return }
        base = StoredBase(
            revision: max(base.revision ?? 0, revision), refreshToken: target.stored.credentials?.refreshToken)
    }

    /// The opening session's first write landed as `revision`.
    mutating func noteOpeningRevision(_ revision: UInt64, identifier: String) {
        guard active, ExactIdentifier.areEqual(self.identifier, identifier) else { return }
        base = StoredBase(revision: revision, refreshToken: credentials?.refreshToken)
    }

    /// The session's record was removed from the coordinated store by someone else: the session of `generation`
    /// stops refreshing (its controller closes it) and writes nothing back; the flight in progress, if any, is
    /// dropped. Returns the waiters to fail, or `nil` when that session is not the active one.
    mutating func clearedElsewhere(generation: UInt64) -> [Waiter]? {
        guard active, self.generation == generation else { return nil }
        let waiters = flights.terminate(Self.clearedElsewhereError)
        persistence.discard()
        recomputeDeadline()
        return waiters
    }

    static let clearedElsewhereError = UserSessionError(
        .sessionNotOpen, "the session's stored record was removed elsewhere; the session is closing")

    /// Whether `record`, read from the store for the active session of `generation`, holds credentials that
    /// replace the ones the session holds: a newer revision with other credentials than `held`.
    func storeIsNewer(_ record: RevisedSession, than held: Credentials?, generation: UInt64) -> Bool {
        guard active, self.generation == generation, let stored = record.session.credentials else { return false }
        if let heldRevision, record.revision <= heldRevision { return false }
        return stored != held
    }

    /// Publishes the credentials of `record` (already in the store) for the session of `generation`, without a
    /// refresh: another process rotated them. A refresh in flight is superseded (its waiters get these
    /// credentials). Returns `nil` when the session is not that one any more or the record is not newer than what
    /// the session holds (then nothing changes).
    mutating func adopt(_ record: RevisedSession, generation: UInt64) -> UpdateAction? {
        guard storeIsNewer(record, than: credentials, generation: generation),
            let newCredentials = record.session.credentials
        else { return nil }
        guard var action = update(newCredentials, generation: generation) else { return nil }
        if record.revision > 0 { base.revision = record.revision }
        base.refreshToken = newCredentials.refreshToken
        action.change.adoptedFromStore = true
        return action
    }

    /// The fallback for stores without coordination: a refresh of `flightID` that sent `sent` was refused as
    /// `invalid_grant`, and the store holds `stored` under `identifier`. Whether `stored` may take over: it has a
    /// refresh token other than the one sent (another process rotated it within the server's reuse grace period),
    /// and the flight is still the session's, whose identifier is still `identifier`.
    func mayRetryWithStored(flightID: UInt64, identifier: String, sent: Credentials, stored: Credentials) -> Bool {
        guard isCurrent(flightID: flightID), ExactIdentifier.areEqual(self.identifier, identifier) else { return false }
        return stored.refreshToken != nil && stored.refreshToken != sent.refreshToken
    }
}
