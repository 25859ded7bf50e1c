/// A stored session together with the revision its store gave it.
///
/// Revisions belong to one identifier: every write of that identifier's record makes the revision grow, and a
/// removed record starts again from a revision above every earlier one (a store never reuses a revision for one
/// identifier while any process may still hold it).
public struct RevisedSession: Sendable, Hashable {
    /// The stored session.
    public var session: StoredSession
    /// The revision of the record that holds it. Always at least 1.
    public var revision: UInt64

    /// Creates a revised session.
    public init(session: StoredSession, revision: UInt64) {
        self.session = session
        self.revision = revision
    }
}

/// A change another process (or another store instance) made to a coordinated store.
public enum TokenStoreChange: Sendable, Hashable {
    /// The record of `identifier` was written and now has `revision`.
    case saved(identifier: String, revision: UInt64)
    /// The record of `identifier` was removed (for example by `closeAndClear()` on another instance).
    case removed(identifier: String)
    /// Changes may have been missed (the notification channel was interrupted and is back): reload every identifier
    /// that is held.
    case resynchronize
}

/// A token store shared by several processes that keeps their refreshes single-flight across all of them.
///
/// A controller whose store conforms uses the three capabilities below; other stores are used as plain
/// ``TokenStore``s.
/// - A **refresh lease** per identifier: at most one process at a time refreshes that identifier's credentials.
///   The process that gets the lease reads the record first and adopts credentials another process has already
///   rotated instead of presenting the same refresh token a second time (which a server that detects refresh-token
///   reuse answers by revoking the whole token family).
/// - A **conditional write**: a save that names the revision it was based on fails with
///   ``UserSessionError/Code/revisionConflict`` when the record has moved on since.
/// - **Change notifications**, so that a process that holds a session learns of rotations and removals made
///   elsewhere without polling.
///
/// See the article "Implementing a TokenStore".
public protocol CoordinatedTokenStore: TokenStore {
    /// Returns the stored session for `identifier` with its revision, or `nil` when nothing is stored.
    func loadRevised(identifier: String) async throws -> RevisedSession?

    /// Saves `session` under `identifier` only when the record's revision is still `expectedRevision` (`nil`: only
    /// when nothing is stored), and returns the new revision.
    ///
    /// - Throws: ``UserSessionError/Code/revisionConflict`` when the record has another revision; the stored record
    ///   is left as it was.
    func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64

    /// Runs `body` while this process holds the refresh lease of `identifier`, and releases the lease when `body`
    /// returns or throws.
    ///
    /// At most one holder exists per identifier across every process sharing the store. A holder that dies or
    /// loses its connection to the store blocks the others for no longer than the store's documented lease
    /// deadline. Waiting for the lease ends with a thrown `CancellationError` when the calling task is cancelled.
    func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result

    /// The changes other processes make from now on, until the stream's consumer stops iterating.
    ///
    /// The store may also report changes made through this instance. Every subscriber gets every change (a stream
    /// per call); a subscriber that falls behind gets ``TokenStoreChange/resynchronize`` in place of what it missed.
    func changes() -> AsyncStream<TokenStoreChange>
}
