import Foundation

/// The gate over a ``CoordinatedTokenStore``: conditional writes, adopting what another process stored, and the
/// subscription to the store's changes. Nothing here runs on the hot path.
extension CredentialsGate {
    /// How a write ended.
    enum WriteOutcome {
        case written
        case failed(any Error)
        /// A coordinated store holds a newer record than the one the write was based on (or none: it was removed
        /// elsewhere). Nothing was written; that record stands.
        case superseded(RevisedSession?)

        /// The error of a failed write; `nil` otherwise.
        var error: (any Error)? {
            if case .failed(let error) = self { return error }
            return nil
        }
    }

    /// At most this many conditional attempts for one write (each conflict that leaves the write ours to make
    /// reloads the revision and tries again).
    static let conditionalWriteAttempts = 4

    /// Writes `target` conditionally on the revision the session holds.
    ///
    /// On a conflict the record is read back: a record equal to the target counts as written; a record that
    /// still holds the refresh token the session's write was based on (rewritten by someone who held nothing
    /// newer) is written over, conditionally on its revision; anything else is newer than the target (another
    /// process rotated the credentials or signed the user in again) and supersedes it; no record means the
    /// session was cleared elsewhere. With `overwrite`, whatever is stored is replaced.
    func conditionalWrite(
        _ target: RefreshStateMachine.PersistTarget, store: any CoordinatedTokenStore, overwrite: Bool
    ) async throws -> WriteOutcome {
        if overwrite {
            let revision = try await Self.overwrite(target.stored, identifier: target.identifier, store: store)
            noteWritten(target, revision: revision)
            return .written
        }
        var expected = target.baseRevision
        for _ in 0..<Self.conditionalWriteAttempts {
            do {
                let revision = try await store.save(
                    target.stored, identifier: target.identifier, expectedRevision: expected)
                noteWritten(target, revision: revision)
                return .written
            } catch let error as UserSessionError where error.code == .revisionConflict {
                guard let record = try await store.loadRevised(identifier: target.identifier) else {
                    return .superseded(nil)
                }
                if record.session == target.stored {
                    noteWritten(target, revision: record.revision)
                    return .written
                }
                let newer = record.revision > (target.baseRevision ?? 0)
                guard !newer || record.session.credentials?.refreshToken == target.baseRefreshToken else {
                    return .superseded(record)
                }
                expected = record.revision
            }
        }
        throw UserSessionError(
            .storeFailure, "the stored record kept changing during \(Self.conditionalWriteAttempts) conditional writes")
    }

    private func noteWritten(_ target: RefreshStateMachine.PersistTarget, revision: UInt64) {
        modifyStateAndRunActions { $0.written(target, revision: revision) }
    }

    /// Replaces whatever is stored under `identifier` with `stored`, conditionally on the revision read just
    /// before (so a concurrent writer makes it try again, never interleave); returns the new revision.
    static func overwrite(_ stored: StoredSession, identifier: String, store: any CoordinatedTokenStore) async throws
        -> UInt64
    {
        var expected: UInt64?
        do {
            expected = try await store.loadRevised(identifier: identifier)?.revision
        } catch let error as UserSessionError
            where error.code == .storeCorrupt || error.code == .unsupportedFormatVersion
        {
            // Unreadable data is replaced, as a plain save always did; its revision is read back.
            try await store.save(stored, identifier: identifier)
            return try await store.loadRevised(identifier: identifier)?.revision ?? 0
        }
        // Every attempt but the last retries a conflict with the revision read again; the last one throws it.
        for _ in 1..<conditionalWriteAttempts {
            do {
                return try await store.save(stored, identifier: identifier, expectedRevision: expected)
            } catch let error as UserSessionError where error.code == .revisionConflict {
                expected = try await store.loadRevised(identifier: identifier)?.revision
            }
        }
        return try await store.save(stored, identifier: identifier, expectedRevision: expected)
    }

    // MARK: - Adopting what the store holds

    /// What adopting a record (or its absence) did.
    enum Adoption {
        case none
        /// Credentials were adopted (the event emitted, the waiters resumed).
        case adopted
        /// The record was removed elsewhere (the waiters failed): the session must close.
        case removed
    }

    /// While holding the persistence slot: adopts `record` (newer credentials another process stored) for the
    /// session of `generation`, or, for `nil`, stops that session because its record was removed elsewhere.
    /// Hand the result to ``finishAdoption(_:generation:)`` after releasing the slot.
    func adoptHoldingSlot(_ record: RevisedSession?, generation: UInt64) -> Adoption {
        guard let record else {
            // Signed out elsewhere (another instance removed the record): fenced here too.
            if let identifier = inspect({ $0.generation == generation ? $0.identifier : nil }) {
                ledger.signedOut(identifier: identifier)
            }
            let removed = modifyStateAndRunActions { $0.recordRemoved(generation: generation) }
            return removed ? .removed : .none
        }
        let adopted = modifyStateAndRunActions { $0.recordAdopted(record, generation: generation) }
        return adopted ? .adopted : .none
    }

    /// After the persistence slot is released: a session whose record was removed elsewhere is closed by its
    /// controller.
    func finishAdoption(_ adoption: Adoption, generation: UInt64) async {
        guard case .removed = adoption, let handler = storeRemovedHandler.withLock({ $0 }) else { return }
        await handler(generation)
    }

    /// Reads the record of the active session of `generation` and adopts it when it is newer than what the
    /// session holds, or closes the session when it is gone. Ordered with the session's own writes (it takes the
    /// persistence slot). Returns whether something was adopted or the session was found cleared.
    @discardableResult
    func reloadFromStore(generation: UInt64) async -> Bool {
        guard let coordinatedStore else { return false }
        let adoption = await withPersistSlot { _ -> Adoption? in
            guard
                let (identifier, held) = inspect({ machine -> (String, Credentials?)? in
                    machine.active && machine.generation == generation
                        ? (machine.identifier, machine.credentials) : nil
                })
            else { return nil }
            let record: RevisedSession?
            do {
                record = try await coordinatedStore.loadRevised(identifier: identifier)
            } catch {
                emitWhileActive(
                    .persistenceFailed, generation: generation,
                    detail: "could not read the token store after a change notification: "
                        + RefreshStateMachine.describePersistFailure(error))
                return nil
            }
            let newer = record.map { record in
                inspect { $0.storeIsNewer(record, than: held, generation: generation) }
            }
            guard newer ?? true else { return nil }
            return adoptHoldingSlot(record, generation: generation)
        }
        guard let adoption else { return false }
        await finishAdoption(adoption, generation: generation)
        return true
    }

    // MARK: - Change notifications

    /// Subscribes to the coordinated store's changes for the session of `generation` (until ``stopWatchingStore()``).
    func startWatchingStore(identifier: String, generation: UInt64) {
        guard let coordinatedStore else { return }
        let stream = coordinatedStore.changes()
        let task = Task { [weak self] in
            for await change in stream {
                guard let self else { return }
                await self.storeChanged(change, identifier: identifier, generation: generation)
            }
        }
        changeSubscription.replace(with: task)
    }

    func stopWatchingStore() {
        changeSubscription.replace(with: nil)
    }

    private func storeChanged(_ change: TokenStoreChange, identifier: String, generation: UInt64) async {
        switch change {
        case .saved(let changed, let revision):
            guard ExactIdentifier.areEqual(changed, identifier) else { return }
            let held = inspect { $0.generation == generation ? $0.heldRevision : nil }
            if let held, revision <= held { return }
        case .removed(let changed):
            guard ExactIdentifier.areEqual(changed, identifier) else { return }
        case .resynchronize:
            break
        }
        await reloadFromStore(generation: generation)
    }
}
