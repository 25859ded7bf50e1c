#if Sealing
import UserSessions

/// Over a coordinated store, the sealed store coordinates the same way: revisions are the base store's, the lease is
/// its lease, and its change notifications pass through unchanged (they carry identifiers and revisions only).
extension SealedTokenStore: CoordinatedTokenStore where Base: CoordinatedTokenStore {
    public func loadRevised(identifier: String) async throws -> RevisedSession? {
        guard let revised = try await base.loadRevised(identifier: identifier) else { return nil }
        return RevisedSession(session: try open(revised.session, identifier: identifier), revision: revised.revision)
    }

    public func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        try await base.save(
            try seal(session, identifier: identifier), identifier: identifier, expectedRevision: expectedRevision)
    }

    public func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        try await base.withRefreshLease(identifier: identifier, body)
    }

    public func changes() -> AsyncStream<TokenStoreChange> {
        base.changes()
    }
}
#endif
