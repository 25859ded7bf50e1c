import Foundation
import Synchronization

/// ``FileTokenStore`` as a ``CoordinatedTokenStore``: processes on one machine sharing a directory (several
/// workers, an app and its extension) refresh each identifier's credentials once per expiry between them.
///
/// - Lease: an advisory `flock` on `<name>.lease` next to the identifier's record (mode `0600`). The kernel
///   releases it when its holder closes it or dies (even by `SIGKILL`), so a dead holder blocks the others for no
///   time at all; there is no deadline to wait out. A waiter polls for it every few milliseconds (1 ms, doubling
///   to 25 ms), sleeping in between, so waiting blocks no thread; cancelling the waiting task ends the wait.
/// - Revisions: every write of a record stores its revision in the file (format version 2; a version-1 file
///   reads as revision 1). A revision is one more than the previous one and at least the wall-clock time in
///   microseconds, so a record written after a removal starts above the removed one's. Writes and removals, plain
///   or conditional, run under an exclusive `flock` on the directory itself, held only for one read-compare-write.
/// - Changes: file stores do not notify. ``changes()`` returns a stream that ends at once; processes learn of
///   each other's rotations when they next refresh, under the lease, by reading the record first.
///
/// Lease files are created by the first refresh of an identifier and never deleted (deleting one while another
/// process waits on it would let two holders in); they are empty, and listings ignore them. Locks work between
/// processes on one machine only, not over network file systems that do not support `flock`.
extension FileTokenStore: CoordinatedTokenStore {
    /// The stored session of `identifier` with its revision, or `nil`.
    ///
    /// - Throws: what ``load(identifier:)`` throws.
    public func loadRevised(identifier: String) async throws -> RevisedSession? {
        let name = try IdentifierEncoding.name(for: identifier)
        return try await run { try self.loadRevisedNow(identifier: identifier, name: name) }
    }

    /// Atomically replaces the file of `identifier` when its revision is `expectedRevision` (`nil`: when there is
    /// no file), and returns the new revision.
    ///
    /// - Throws: ``UserSessionError/Code/revisionConflict`` when the file has another revision (it is left as it
    ///   was); otherwise what ``save(_:identifier:)`` throws. A corrupt file counts as revision 0.
    public func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        let name = try IdentifierEncoding.name(for: identifier)
        return try await run {
            try self.saveNow(session, identifier: identifier, name: name, expectedRevision: .some(expectedRevision))
        }
    }

    /// Runs `body` while holding the `flock` lease of `identifier` (see the extension's documentation).
    ///
    /// - Throws: `CancellationError` when the calling task is cancelled while waiting; ``UserSessionError`` with
    ///   ``UserSessionError/Code/storeFailure`` when the lock file cannot be opened; what `body` throws.
    public func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        let name = try IdentifierEncoding.name(for: identifier)
        let file = Self.label(for: identifier) + " (its lease)"
        let lockPath = path + "/" + name.value + ".lease"
        let descriptor = try await run {
            try self.mapErrors(file: file) {
                try PrivateFiles.makeDirectory(self.path)
                return try FileLocks.open(lockPath)
            }
        }
        do {
            var pause: UInt64 = 1_000_000
            while try await !run({
                try self.mapErrors(file: file) { try FileLocks.tryLock(descriptor, path: lockPath) }
            }) {
                try await Task.sleep(nanoseconds: pause)
                pause = min(pause * 2, 25_000_000)
            }
        } catch {
            await release(descriptor)
            throw error
        }
        let outcome: Swift.Result<Result, any Error>
        do {
            outcome = .success(try await body())
        } catch {
            outcome = .failure(error)
        }
        await release(descriptor)
        return try outcome.get()
    }

    /// Closes a lease descriptor (which releases its lock) on the store's queue.
    private func release(_ descriptor: Int32) async {
        _ = try? await run { FileLocks.close(descriptor) }
    }

    /// File stores do not notify: a stream that ends at once. Processes sharing the directory adopt each other's
    /// rotations under the lease, at their next refresh.
    public func changes() -> AsyncStream<TokenStoreChange> {
        AsyncStream { $0.finish() }
    }

    /// Runs `body` holding the store's write lock: an exclusive `flock` on the directory itself (blocking, on the
    /// store's queue; held for one read-compare-write). A missing directory is created first.
    func withWriteLock<Value>(file: String, _ body: () throws -> Value) throws -> Value {
        let descriptor = try mapErrors(file: file) {
            try PrivateFiles.makeDirectory(path)
            return try FileLocks.lockDirectory(path)
        }
        defer { FileLocks.close(descriptor) }
        return try body()
    }

    /// The revision of a write that follows `current`: one more, at least the wall clock in microseconds since
    /// 2001 (so that a record written after a removal, by any process, starts above the removed one's revision
    /// unless the clock went back by more than the time in between), and above every revision this process issued
    /// before.
    static func nextRevision(after current: UInt64) -> UInt64 {
        let microseconds = UInt64(max(0, Date().timeIntervalSinceReferenceDate * 1_000_000))
        let candidate = max(current + 1, microseconds)
        while true {
            let last = lastIssuedRevision.load(ordering: .relaxed)
            let next = max(candidate, last + 1)
            if lastIssuedRevision.compareExchange(expected: last, desired: next, ordering: .relaxed).exchanged {
                return next
            }
        }
    }
}

/// The last revision a ``FileTokenStore`` of this process issued (see ``FileTokenStore/nextRevision(after:)``).
private let lastIssuedRevision = Atomic<UInt64>(0)
