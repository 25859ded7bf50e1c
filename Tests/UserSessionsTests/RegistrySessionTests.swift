import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// Counts the calls a registry makes to a store; `load` may wait for a gate.
final class CountingTokenStore: ForwardingTokenStore {
    let base = InMemoryTokenStore()
    var forwardedTo: any TokenStore { base }
    let loads = ArrivalCounter()
    private let loadGate = Locked<AsyncGate?>(nil)

    init() {}

    /// Makes every later `load` wait for `gate` (after it was counted).
    func holdLoads(at gate: AsyncGate) { loadGate.withLock { $0 = gate } }

    func load(identifier: String) async throws -> StoredSession? {
        loads.arrive()
        await loadGate.withLock { $0 }?.wait()
        return try await base.load(identifier: identifier)
    }
}

extension UserSessionRegistry {
    /// How many `session(for:)` calls wait for a get-or-restore in progress.
    var sessionWaiterCount: Int { state.withLock { $0.flights.waiterCount } }
}

/// Issue 9, registry item 2: race-free get-or-restore, and one behaviour for `restore(identifier:)`.
struct RegistrySessionTests {
    /// 1,000 concurrent first requests for one stored user, whose credentials expired: one store load, one
    /// refresh, one restore (one service start), and every caller gets the same opened controller.
    @Test func thousandConcurrentFirstRequestsRestoreOnce() async throws {
        let time = ManualTime()
        let store = CountingTokenStore()
        try await storeSession(makePrototype("alice", now: time.now.addingTimeInterval(-7200)), in: store)
        let refresher = ScriptedRefresher(now: { time.now })
        let starts = ArrivalCounter()
        let registry = UserSessionRegistry(store: store, refresher: refresher, configuration: .init(clock: time.clock))
        {
            _ in [ScriptedStartService(name: "s", starts: starts, stops: ArrivalCounter())]
        }
        let gate = AsyncGate()
        store.holdLoads(at: gate)
        let callers = 1_000
        try await withThrowingTaskGroup(of: UserSessionController.self) { group in
            for _ in 0..<callers { group.addTask { try await registry.session(for: "alice") } }
            await yieldUntil { registry.sessionWaiterCount == callers }  // all of them are waiting for the restore
            gate.open()
            var controllers: [UserSessionController] = []
            for try await controller in group { controllers.append(controller) }
            #expect(controllers.count == callers)
            #expect(controllers.allSatisfy { $0 === controllers[0] && $0.session.state == .opened })
        }
        #expect(store.loads.count == 1)
        #expect(refresher.calls == 1)
        #expect(starts.count == 1)
        #expect(registry.count == 1)
        // Once open, it is served without the store.
        #expect(try await registry.session(for: "alice") === registry.existingController(for: "alice"))
        #expect(store.loads.count == 1)
        await registry.shutdown()
    }

    /// Unknown users are a typed `noStoredSession`, shared by concurrent callers (one load), and leave nothing
    /// behind.
    @Test func unknownUserIsNoStoredSessionAndLeavesNothingBehind() async throws {
        let store = CountingTokenStore()
        let registry = UserSessionRegistry(store: store)
        let gate = AsyncGate()
        store.holdLoads(at: gate)
        await withTaskGroup(of: (any Error)?.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    do {
                        _ = try await registry.session(for: "nobody")
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            await yieldUntil { registry.sessionWaiterCount == 100 }
            gate.open()
            for await error in group { #expect((error as? UserSessionError)?.code == .noStoredSession) }
        }
        #expect(store.loads.count == 1)
        #expect(registry.count == 0)
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) { try await registry.session(for: "") }
        #expect(throws: UserSessionError(.invalidIdentifier, "")) { try registry.controller(for: "a\u{0}b") }
        await registry.shutdown()
        await #expect(throws: UserSessionError(.shutdown, "")) { try await registry.session(for: "nobody") }
    }

    /// A cancelled caller gets `CancellationError` at once; the restore the others wait for goes on.
    @Test func cancellingOneCallerDoesNotCancelTheRestore() async throws {
        let store = CountingTokenStore()
        try await storeSession(makePrototype("alice"), in: store)
        let registry = UserSessionRegistry(store: store)
        let gate = AsyncGate()
        store.holdLoads(at: gate)
        let first = Task { try await registry.session(for: "alice") }
        let second = Task { try await registry.session(for: "alice") }
        await yieldUntil { registry.sessionWaiterCount == 2 }
        first.cancel()
        await #expect(throws: CancellationError.self) { try await first.value }
        gate.open()
        #expect(try await second.value.session.state == .opened)
        #expect(store.loads.count == 1)
        await registry.shutdown()
    }

    /// `restore(identifier:)` returns `nil` when nothing usable is stored (nothing, or expired credentials that
    /// cannot be refreshed) and throws for anything else. Before, it threw `noStoredSession` despite its doc.
    @Test func restoreReturnsNilWhenNothingUsableIsStored() async throws {
        let time = ManualTime()
        let store = FaultyTokenStore()
        try await storeSession(
            makePrototype("stale", now: time.now.addingTimeInterval(-7200), refreshable: false), in: store)
        try await storeSession(makePrototype("alice", now: time.now), in: store)
        let registry = UserSessionRegistry(store: store, configuration: .init(clock: time.clock))

        #expect(try await registry.restore(identifier: "nobody") == nil)
        #expect(try await registry.restore(identifier: "stale") == nil)
        #expect(registry.count == 0)
        let alice = try #require(try await registry.restore(identifier: "alice"))
        #expect(alice.session.state == .opened)
        await #expect(throws: UserSessionError(.wrongState, "")) { try await registry.restore(identifier: "alice") }
        store.setFaults { $0.load = UserSessionError(.storeCorrupt, "damaged") }
        await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await registry.restore(identifier: "bob") }
        #expect(registry.identifiers == ["alice"])
        await registry.shutdown()
    }
}
