#if Sealing
import UserSessions

extension SealedTokenStore {
    /// How many times a record that another writer keeps changing is read and sealed again before the call gives up.
    static var resealAttempts: Int { 5 }

    /// Seals every stored record that an older key sealed again with the ring's current key, so that the older keys
    /// can be retired.
    ///
    /// Lists the records with the base store's `storedIdentifiers()`. Each record is read, opened and written back
    /// sealed with the current key; over a `CoordinatedTokenStore` the write is conditional on the
    /// revision read, so a refresh that writes the record meanwhile is never overwritten with older credentials (the
    /// refresh sealed with the current key anyway). Each record is resealed in its identifier's write turn, shared
    /// with every controller given this store instance, so writes of this process never interleave with it; over a
    /// plain store, run it while no other process writes.
    /// A record that does not open is left as it is and listed in ``SealedTokenStoreResealReport/unopenable``. A
    /// record another process changed each of the times it was read and sealed again (a coordinated store only) is
    /// left to its writers and listed in ``SealedTokenStoreResealReport/changedElsewhere``; the others are still
    /// resealed, and a later run reseals it.
    ///
    /// - Throws: the base store's errors, such as `UserSessionError.Code.storeFailure` from a store
    ///   that cannot list its records (the remote token cache).
    public func resealAll() async throws -> SealedTokenStoreResealReport {
        var report = SealedTokenStoreResealReport()
        for identifier in try await base.storedIdentifiers() {
            do {
                switch try await reseal(identifier: identifier) {
                case .resealed: report.resealed.append(identifier)
                case .alreadyCurrent: report.alreadyCurrent.append(identifier)
                case .changedElsewhere: report.changedElsewhere.append(identifier)
                }
            } catch let error as UserSessionError
                where error.code == .storeCorrupt || error.code == .unsupportedFormatVersion
            {
                report.unopenable.append(identifier)
            }
        }
        return report
    }

    /// What resealing one record did.
    private enum Resealed {
        case resealed
        /// Nothing to do: sealed with the current key already, holding no credentials, or gone.
        case alreadyCurrent
        /// Another writer changed the record every time it was read (``resealAttempts`` times).
        case changedElsewhere
    }

    /// Seals the record of `identifier` again with the current key.
    ///
    /// A write like any other of this process: it runs in the identifier's write turn of the ledger every
    /// controller given this store shares, so a refresh of this process never commits between its read and its
    /// write, and a sign-out never comes between them either.
    private func reseal(identifier: String) async throws -> Resealed {
        try await IdentifierWriteTurn.run(store: self, identifier: identifier) {
            try await resealInTurn(identifier: identifier)
        }
    }

    private func resealInTurn(identifier: String) async throws -> Resealed {
        if let coordinated = base as? any CoordinatedTokenStore {
            return try await reseal(identifier: identifier, conditionallyIn: coordinated)
        }
        guard let stored = try await base.load(identifier: identifier), !isSealedWithCurrentKey(stored) else {
            return .alreadyCurrent
        }
        let opened = try open(stored, identifier: identifier)
        try await base.save(try seal(opened, identifier: identifier), identifier: identifier)
        return .resealed
    }

    private func reseal(identifier: String, conditionallyIn store: any CoordinatedTokenStore) async throws
        -> Resealed
    {
        for _ in 1...Self.resealAttempts {
            guard let revised = try await store.loadRevised(identifier: identifier),
                !isSealedWithCurrentKey(revised.session)
            else { return .alreadyCurrent }
            let opened = try open(revised.session, identifier: identifier)
            do {
                _ = try await store.save(
                    try seal(opened, identifier: identifier), identifier: identifier,
                    expectedRevision: revised.revision)
                return .resealed
            } catch let error as UserSessionError where error.code == .revisionConflict {
                continue
            }
        }
        return .changedElsewhere
    }
}
#endif
