import Foundation

@testable import UserSessions

/// A ``CoordinatedTokenStore`` in memory that behaves as a shared database would for the processes using it, all of
/// which are this one: records keyed by the identifier's exact bytes (`"caf\u{E9}"` and `"cafe\u{301}"` are two
/// users), a revision per write, conditional writes, a FIFO refresh lease per identifier whose waiters can be
/// cancelled, and a change notification for every write and removal, this process's own included (as a PostgreSQL
/// `NOTIFY` reaches its sender's listener too). Its writes fail while ``failWrites(_:)`` is set and its removals
/// while ``failRemovals(_:)`` is, as ``OutageStore``'s do: a store that is down.
final class CoordinatedOutageStore: CoordinatedTokenStore {
    private struct Lease {
        /// Waiting for the lease, in arrival order: an id (for cancellation) and the waiter.
        var queue: [(id: UInt64, waiter: CheckedContinuation<Void, any Error>)] = []
    }

    private struct State {
        var records: [[UInt8]: RevisedSession] = [:]
        var nextRevision: UInt64 = 1
        var currentIdentifier: String?
        var failing = false
        var failingRemovals = false
        /// The identifiers whose lease is held, with who waits for it.
        var leases: [[UInt8]: Lease] = [:]
        var nextWaiterID: UInt64 = 1
        var subscribers: [AsyncStream<TokenStoreChange>.Continuation] = []
        var leasesTaken = 0
        var conditionalWrites = 0
        /// For each lease released, in order: the refresh token the record held at that moment.
        var storedAtLeaseRelease: [String?] = []
    }

    /// The database: shared by the stores ``anotherProcess()`` makes.
    private final class Database: Sendable {
        let state = Locked(State())
        let leaseReleases = ArrivalCounter()
    }

    private let database: Database
    /// One arrival per refresh lease released, by any store over this database (after the record's token was noted):
    /// counts the same leases as ``leasesTaken``.
    var leaseReleases: ArrivalCounter { database.leaseReleases }

    init() { database = Database() }

    private init(sharing database: Database) { self.database = database }

    /// A store over the same records, leases and notifications, as another process connected to the same database
    /// would hold: the package keeps a ledger per store object, so its controllers behave as another process's.
    func anotherProcess() -> CoordinatedOutageStore { CoordinatedOutageStore(sharing: database) }

    private static func key(_ identifier: String) -> [UInt8] { Array(identifier.utf8) }

    /// While `fail`, every write (plain or conditional) throws `storeFailure` and changes nothing.
    func failWrites(_ fail: Bool) { database.state.withLock { $0.failing = fail } }

    /// While `fail`, removals fail too (a sign-out then throws `storeFailure` and the record stays).
    func failRemovals(_ fail: Bool) { database.state.withLock { $0.failingRemovals = fail } }

    /// The record of `identifier`, read without going through the protocol.
    func record(_ identifier: String) -> RevisedSession? {
        database.state.withLock { $0.records[Self.key(identifier)] }
    }

    /// How many times a refresh lease was taken, and how many conditional writes landed: a test checks that its
    /// schedules went through the coordinated paths at all.
    var leasesTaken: Int { database.state.withLock { $0.leasesTaken } }
    var conditionalWrites: Int { database.state.withLock { $0.conditionalWrites } }

    /// For each refresh lease released, in order, the refresh token its identifier's record held at that moment:
    /// what the next holder, in any process, reads first.
    var storedAtLeaseRelease: [String?] { database.state.withLock { $0.storedAtLeaseRelease } }

    /// Sends `change` to every subscriber (after the lock is released).
    private func notify(_ change: TokenStoreChange) {
        for subscriber in database.state.withLock({ $0.subscribers }) { subscriber.yield(change) }
    }

    /// Tells every subscriber to read again, as a change hub whose listener fell behind does.
    func notifyResynchronize() { notify(.resynchronize) }

    private static var down: UserSessionError { UserSessionError(.storeFailure, "the store is down") }

    // MARK: - CoordinatedTokenStore

    func loadRevised(identifier: String) async throws -> RevisedSession? { record(identifier) }

    func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        let revision = try database.state.withLock { state -> UInt64 in
            if state.failing { throw Self.down }
            guard state.records[Self.key(identifier)]?.revision == expectedRevision else {
                throw UserSessionError(.revisionConflict, "the record changed")
            }
            state.conditionalWrites += 1
            return Self.write(session, identifier, in: &state)
        }
        notify(.saved(identifier: identifier, revision: revision))
        return revision
    }

    private static func write(_ session: StoredSession, _ identifier: String, in state: inout State) -> UInt64 {
        let revision = state.nextRevision
        state.nextRevision += 1
        state.records[key(identifier)] = RevisedSession(session: session, revision: revision)
        return revision
    }

    func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        let key = Self.key(identifier)
        let id = database.state.withLock { state -> UInt64 in
            defer { state.nextWaiterID += 1 }
            return state.nextWaiterID
        }
        try await withTaskCancellationHandler {
            try await withVisibleCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
                // Checked under the lock the cancellation handler takes: a cancellation before this enqueues nothing.
                let granted = database.state.withLock { state -> Bool? in
                    if Task.isCancelled { return nil }
                    guard var lease = state.leases[key] else {
                        state.leases[key] = Lease()
                        state.leasesTaken += 1
                        return true
                    }
                    lease.queue.append((id, waiter))
                    state.leases[key] = lease
                    return false
                }
                switch granted {
                case nil: waiter.resumeVisibly(throwing: CancellationError())
                case true: waiter.resumeVisibly()
                case false: break
                }
            }
        } onCancel: {
            let waiter = database.state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard var lease = state.leases[key], let index = lease.queue.firstIndex(where: { $0.id == id }) else {
                    return nil
                }
                let waiter = lease.queue.remove(at: index).waiter
                state.leases[key] = lease
                return waiter
            }
            waiter?.resumeVisibly(throwing: CancellationError())
        }
        defer { releaseLease(key) }
        return try await body()
    }

    /// Hands `key`'s lease to its next waiter, or frees it.
    private func releaseLease(_ key: [UInt8]) {
        let next = database.state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.storedAtLeaseRelease.append(state.records[key]?.session.credentials?.refreshToken)
            guard var lease = state.leases[key], !lease.queue.isEmpty else {
                state.leases[key] = nil
                return nil
            }
            let next = lease.queue.removeFirst().waiter
            state.leases[key] = lease
            state.leasesTaken += 1
            return next
        }
        next?.resumeVisibly()
        leaseReleases.arrive()
    }

    func changes() -> AsyncStream<TokenStoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: TokenStoreChange.self)
        database.state.withLock { $0.subscribers.append(continuation) }
        return stream
    }

    // MARK: - TokenStore

    func load(identifier: String) async throws -> StoredSession? { record(identifier)?.session }

    func save(_ session: StoredSession, identifier: String) async throws {
        let revision = try database.state.withLock { state -> UInt64 in
            if state.failing { throw Self.down }
            return Self.write(session, identifier, in: &state)
        }
        notify(.saved(identifier: identifier, revision: revision))
    }

    func remove(identifier: String) async throws {
        let removed = try database.state.withLock { state -> Bool in
            if state.failingRemovals { throw Self.down }
            return state.records.removeValue(forKey: Self.key(identifier)) != nil
        }
        if removed { notify(.removed(identifier: identifier)) }
    }

    func loadCurrentIdentifier() async throws -> String? { database.state.withLock { $0.currentIdentifier } }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        database.state.withLock { $0.currentIdentifier = identifier }
    }

    func storedIdentifiers() async throws -> [String] {
        database.state.withLock { state in state.records.keys.map { String(decoding: $0, as: UTF8.self) }.sorted() }
    }
}
