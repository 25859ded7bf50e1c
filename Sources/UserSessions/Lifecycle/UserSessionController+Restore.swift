import Foundation

extension UserSessionController {
    /// Restores the session whose identifier the last open persisted, or returns `nil` when none is persisted.
    ///
    /// Works like ``restore(identifier:)`` with the persisted identifier.
    ///
    /// - Throws: What ``restore(identifier:)`` throws; a persisted identifier with nothing stored under it throws
    ///   ``UserSessionError/Code/noStoredSession``; a persisted identifier that no open could have stored (empty,
    ///   over-long, containing NUL: the store returned damaged data) throws ``UserSessionError/Code/storeCorrupt``.
    public func restore() async throws -> UserSession? {
        if let configurationError { throw configurationError }
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard running == nil else { throw Self.wrongStateError }
        let identifier: String?
        do {
            identifier = try await store.loadCurrentIdentifier()
        } catch {
            throw Self.storeError(error, "could not read the current identifier")
        }
        guard let identifier else { return nil }
        // No open persists such an identifier: the store returned damaged data. Never hand it on to `load`.
        if Self.identifierProblem(identifier) != nil {
            throw UserSessionError(.storeCorrupt, "the persisted current identifier is unusable")
        }
        return try await restoreInTurn(identifier: identifier)
    }

    /// Restores the session stored under `identifier` and returns it (never `nil`).
    ///
    /// Stored credentials must be usable: valid, or expired but refreshable, in which case they are refreshed
    /// first through the single-flight gate. Then the identifier is persisted as current, the services start as in
    /// ``open(_:)`` and `.opened` is emitted. If anything fails before that, nothing is opened.
    ///
    /// - Throws: ``UserSessionError`` with code
    ///   - ``UserSessionError/Code/invalidIdentifier`` for an empty, over-long or NUL-containing identifier;
    ///   - ``UserSessionError/Code/wrongState`` while a session is opened (close it first, or use ``open(_:)``);
    ///   - ``UserSessionError/Code/shutdown`` after ``shutdown()``;
    ///   - ``UserSessionError/Code/noStoredSession`` when nothing is stored under `identifier`;
    ///   - ``UserSessionError/Code/storeCorrupt`` when the stored data is unreadable (event `.storeCorrupt`; the
    ///     data is kept), or another store error;
    ///   - ``UserSessionError/Code/credentialsUnusable`` when the credentials are expired and not refreshable;
    ///   - the refresh error when refreshing fails (a terminal failure ends the session
    ///     ``UserSession/State/invalid`` with `.invalidated(.credentialsRevoked)`);
    ///   - ``UserSessionError/Code/serviceStartFailed`` and ``UserSessionError/Code/openRolledBack`` as ``open(_:)``.
    public func restore(identifier: String) async throws -> UserSession? {
        if let problem = Self.identifierProblem(identifier) {
            throw UserSessionError(.invalidIdentifier, "the identifier \(problem)")
        }
        if let configurationError { throw configurationError }
        guard let ticket = try await enterTurn(.open) else { return nil }
        defer { leaveTurn(ticket) }
        guard running == nil else { throw Self.wrongStateError }
        return try await restoreInTurn(identifier: identifier)
    }

    /// Whether stored data would let ``restore()`` open a session: a current identifier is persisted and its
    /// stored credentials are usable (valid, or refreshable), or it has none.
    ///
    /// Reads the store only: no side effects, no events; store errors answer `false`. It does not consider whether
    /// a session is open now.
    public nonisolated var canRestore: Bool {
        get async {
            guard let identifier = try? await store.loadCurrentIdentifier(),
                let stored = try? await store.load(identifier: identifier)
            else { return false }
            guard let credentials = stored.credentials else { return true }
            return !credentials.isExpired(at: configuration.clock.now()) || credentials.isRefreshable
        }
    }

    /// The part of restore that runs in the caller's turn, once no session is opened: reads and checks the stored
    /// session, then opens it through ``openInTurn(_:services:openedAt:)``.
    func restoreInTurn(identifier: String) async throws -> UserSession {
        // Held from before the read until the session holds it itself: a rotation the store has not taken yet, or
        // a refresh in flight, cannot leave the ledger in between.
        gate.ledger.hold(identifier)
        defer { gate.ledger.release(identifier, schedule: gate.ledgerSchedule) }
        let loaded: StoredSession?
        var revision: UInt64?
        do {
            if let coordinated = gate.coordinatedStore {
                let revised = try await coordinated.loadRevised(identifier: identifier)
                (loaded, revision) = (revised?.session, revised?.revision)
            } else {
                loaded = try await store.load(identifier: identifier)
            }
        } catch {
            let failure = Self.storeError(error, "could not read the stored session")
            if failure.code == .storeCorrupt { hub.emit(.storeCorrupt(identifier: identifier)) }
            throw failure
        }
        guard let record = loaded else {
            throw UserSessionError(.noStoredSession, "nothing is stored under the identifier")
        }
        // Read through the ledger: an unwritten rotation replaces the spent token the store still holds, and a
        // refused refresh token fails at once without contacting the server.
        let (stored, adopted) = try gate.ledger.readThrough(record, identifier: identifier)
        let now = configuration.clock.now()
        var needsRefresh = false
        if let credentials = stored.credentials, credentials.isExpired(at: now) {
            guard credentials.isRefreshable else {
                throw UserSessionError(.credentialsUnusable, "the stored credentials expired and cannot be refreshed")
            }
            needsRefresh = true
        }
        let session = try await openInTurn(
            .stored(stored, identifier: identifier, revision: revision, needsRefresh: needsRefresh),
            services: services, openedAt: now)
        // The adopted rotation is not in the store yet: this session writes it, on the failed-write schedule.
        if adopted { gate.rotationAdoptedUnwritten() }
        return session
    }
}
