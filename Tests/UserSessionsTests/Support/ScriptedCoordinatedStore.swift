import Foundation

@testable import UserSessions

/// A ``CoordinatedTokenStore`` in memory whose "other processes" the test plays: it writes and removes records
/// as another process would, holds the refresh lease as another process would, and sends change notifications.
final class ScriptedCoordinatedStore: CoordinatedTokenStore {
    private struct State {
        var records: [String: RevisedSession] = [:]
        var nextRevision: UInt64 = 1
        var currentIdentifier: String?
        var conditionalSaves: [(identifier: String, expected: UInt64?, revision: UInt64?)] = []
        /// Who holds each lease: `true` for "another process".
        var leaseHolders: [String: Bool] = [:]
        var leaseQueue: [String: [CheckedContinuation<Void, Never>]] = [:]
        var leaseAcquisitions = 0
        var subscribers: [AsyncStream<TokenStoreChange>.Continuation] = []
        var failNextConditionalWithConflict = false
        var conflictsOnEveryConditionalSave = false
        /// Conditional saves still to fail as if the store were down.
        var failuresLeft = 0
    }
    private let state = Locked(State())
    /// One arrival per task that starts waiting for a lease someone else holds.
    let leaseWaits = ArrivalCounter()
    /// One arrival per ``changes()`` call.
    let subscriptions = ArrivalCounter()
    /// One arrival per lease released (after its body returned).
    let leaseReleases = ArrivalCounter()
    /// Where the next read waits (see ``pauseNextRead(until:)``).
    private let readPause = NextPassHold()
    /// One arrival per read held at the gate set by ``pauseNextRead(until:)``.
    var pausedReads: ArrivalCounter { readPause.held }

    init() {}

    // MARK: - What the test plays

    /// Another process writes `session` (the revision grows); returns the revision.
    @discardableResult
    func writeElsewhere(_ session: StoredSession, identifier: String, notify: Bool = false) -> UInt64 {
        let revision = state.withLock { state in
            let revision = state.nextRevision
            state.nextRevision += 1
            state.records[identifier] = RevisedSession(session: session, revision: revision)
            return revision
        }
        if notify { send(.saved(identifier: identifier, revision: revision)) }
        return revision
    }

    /// Another process removes the record.
    func removeElsewhere(_ identifier: String, notify: Bool = false) {
        _ = state.withLock { $0.records.removeValue(forKey: identifier) }
        if notify { send(.removed(identifier: identifier)) }
    }

    /// Sends `change` to every subscriber.
    func send(_ change: TokenStoreChange) {
        for subscriber in state.withLock({ $0.subscribers }) { subscriber.yield(change) }
    }

    /// Another process takes the lease of `identifier` (it must be free).
    func holdLeaseElsewhere(_ identifier: String) {
        state.withLock { $0.leaseHolders[identifier] = true }
    }

    /// Another process releases the lease of `identifier`; the next waiter gets it.
    func releaseLeaseElsewhere(_ identifier: String) {
        releaseLease(identifier)
    }

    /// Makes the next conditional save throw `revisionConflict` (as if another process wrote just before).
    func conflictOnNextConditionalSave() {
        state.withLock { $0.failNextConditionalWithConflict = true }
    }

    /// Makes the next `count` conditional saves fail with `storeFailure` (the store is down), writing nothing.
    func failNextSaves(_ count: Int) {
        state.withLock { $0.failuresLeft = count }
    }

    /// Makes every conditional save throw `revisionConflict` (as if other processes kept writing).
    func conflictOnEveryConditionalSave() {
        state.withLock { $0.conflictsOnEveryConditionalSave = true }
    }

    func record(_ identifier: String) -> RevisedSession? { state.withLock { $0.records[identifier] } }
    var conditionalSaves: [(identifier: String, expected: UInt64?, revision: UInt64?)] {
        state.withLock { $0.conditionalSaves }
    }
    var leaseAcquisitions: Int { state.withLock { $0.leaseAcquisitions } }

    // MARK: - CoordinatedTokenStore

    func loadRevised(identifier: String) async throws -> RevisedSession? {
        await readPause.pass()
        return state.withLock { $0.records[identifier] }
    }

    /// Holds the next ``loadRevised(identifier:)`` until `gate` opens; it then reads what is stored by then.
    func pauseNextRead(until gate: AsyncGate) {
        readPause.hold(until: gate)
    }

    func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        try state.withLock { state in
            if state.failuresLeft > 0 {
                state.failuresLeft -= 1
                state.conditionalSaves.append((identifier, expectedRevision, nil))
                throw UserSessionError(.storeFailure, "the store is down")
            }
            if state.failNextConditionalWithConflict || state.conflictsOnEveryConditionalSave {
                state.failNextConditionalWithConflict = false
                state.conditionalSaves.append((identifier, expectedRevision, nil))
                throw UserSessionError(.revisionConflict, "scripted conflict")
            }
            guard state.records[identifier]?.revision == expectedRevision else {
                state.conditionalSaves.append((identifier, expectedRevision, nil))
                throw UserSessionError(.revisionConflict, "scripted conflict")
            }
            let revision = state.nextRevision
            state.nextRevision += 1
            state.records[identifier] = RevisedSession(session: session, revision: revision)
            state.conditionalSaves.append((identifier, expectedRevision, revision))
            return revision
        }
    }

    func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if state.leaseHolders[identifier] == nil {
                    state.leaseHolders[identifier] = false
                    state.leaseAcquisitions += 1
                    return true
                }
                state.leaseQueue[identifier, default: []].append(continuation)
                return false
            }
            if granted {
                continuation.resumeVisibly()
            } else {
                leaseWaits.arrive()
            }
        }
        defer { releaseLease(identifier) }
        return try await body()
    }

    private func releaseLease(_ identifier: String) {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard var queue = state.leaseQueue[identifier], !queue.isEmpty else {
                state.leaseHolders.removeValue(forKey: identifier)
                return nil
            }
            let next = queue.removeFirst()
            state.leaseQueue[identifier] = queue
            state.leaseHolders[identifier] = false
            state.leaseAcquisitions += 1
            return next
        }
        next?.resumeVisibly()
        leaseReleases.arrive()
    }

    func changes() -> AsyncStream<TokenStoreChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: TokenStoreChange.self)
        state.withLock { $0.subscribers.append(continuation) }
        subscriptions.arrive()
        return stream
    }

    // MARK: - TokenStore

    func load(identifier: String) async throws -> StoredSession? {
        state.withLock { $0.records[identifier]?.session }
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        state.withLock { state in
            let revision = state.nextRevision
            state.nextRevision += 1
            state.records[identifier] = RevisedSession(session: session, revision: revision)
        }
    }

    func remove(identifier: String) async throws {
        _ = state.withLock { $0.records.removeValue(forKey: identifier) }
    }

    func loadCurrentIdentifier() async throws -> String? { state.withLock { $0.currentIdentifier } }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        state.withLock { $0.currentIdentifier = identifier }
    }

    func storedIdentifiers() async throws -> [String] { state.withLock { $0.records.keys.sorted() } }
}
