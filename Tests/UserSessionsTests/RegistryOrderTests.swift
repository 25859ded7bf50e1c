import Foundation
import Synchronization
import Testing

@testable import UserSessions

/// A service whose starts from the `holdFrom`-th on wait for `hold`, and whose stops wait for `stopGate`; every
/// instance made by one factory shares the counters, so the script holds across controllers.
struct ScriptedStartService: UserSessionService {
    let name: String
    let starts: ArrivalCounter
    let stops: ArrivalCounter
    var holdFrom = Int.max
    var hold = CancellableHold()
    var stopGate: AsyncGate?

    func start(session: UserSession) async throws {
        starts.arrive()
        if starts.count >= holdFrom { try await hold.wait() }
    }

    func stop(session: UserSession) async {
        stops.arrive()
        await stopGate?.wait()
    }
}

/// Saves `prototype`'s user info and credentials under its identifier, as an earlier run would have.
func storeSession(_ prototype: UserSessionPrototype, in store: any TokenStore) async throws {
    try await store.save(
        StoredSession(userInfo: prototype.userInfo, credentials: prototype.credentials),
        identifier: prototype.identifier)
}

/// Lets a services factory reach the registry it belongs to (made after the factory).
final class RegistryHolder: Sendable {
    private let held = Locked<UserSessionRegistry?>(nil)
    init() {}
    var registry: UserSessionRegistry? {
        get { held.withLock { $0 } }
        set { held.withLock { $0 = newValue } }
    }
}

/// Issue 9, registry items 1, 3, 4 and 6: one owner per identifier.
struct RegistryOrderTests {
    /// Item 1: `close(identifier:)` then `open` for the same user leaves that user open and held. Before, the
    /// close's eviction shut the controller down under the later open, which was rolled back.
    @Test func closeThenOpenForOneUserLeavesItOpenAndHeld() async throws {
        let starts = ArrivalCounter()
        let stops = ArrivalCounter()
        let stopGate = AsyncGate()
        let hold = CancellableHold()
        let registry = UserSessionRegistry(store: InMemoryTokenStore()) { _ in
            [ScriptedStartService(name: "s", starts: starts, stops: stops, holdFrom: 2, hold: hold, stopGate: stopGate)]
        }
        let first = try await registry.open(makePrototype("alice"))

        let closing = Task { await registry.close(identifier: "alice") }
        await stops.wait(for: 1)  // the close is stopping alice's service
        let openingEnded = ArrivalCounter()
        let opening = Task {
            defer { openingEnded.arrive() }
            return try await registry.open(makePrototype("alice"))
        }
        // The open was called: it waits behind the close (in the registry, or, before, in the controller).
        await yieldUntil {
            if registry.pendingOperationCount(for: "alice") == 2 { return true }
            return await first.parkedCallCount == 1
        }
        stopGate.open()
        // The open is starting alice's service again (before, it could already have been rolled back).
        await yieldUntil { starts.count == 2 || openingEnded.count == 1 }
        hold.release()
        await closing.value

        let reopened = try await opening.value
        #expect(reopened.session.state == .opened)
        #expect(registry.existingController(for: "alice") === reopened)
        #expect(first.session.state == .closed)
        let probe = EventProbe(reopened)
        #expect(!probe.isFinished)
        await registry.shutdown()
    }

    /// Item 1: a get-or-restore called after a close waits for it and restores afterwards.
    @Test func sessionForAfterCloseWaitsAndRestores() async throws {
        let stops = ArrivalCounter()
        let stopGate = AsyncGate()
        let registry = UserSessionRegistry(store: InMemoryTokenStore()) { _ in
            [ScriptedStartService(name: "s", starts: ArrivalCounter(), stops: stops, stopGate: stopGate)]
        }
        let first = try await registry.open(makePrototype("alice"))
        let closing = Task { await registry.close(identifier: "alice") }
        await stops.wait(for: 1)
        let looking = Task { try await registry.session(for: "alice") }
        await yieldUntil { registry.pendingOperationCount(for: "alice") == 2 }
        stopGate.open()
        await closing.value
        let restored = try await looking.value
        #expect(restored !== first)
        #expect(restored.session.state == .opened)
        #expect(registry.existingController(for: "alice") === restored)
        await registry.shutdown()
    }

    /// Item 3: switch to bob while bob's services are still starting, then to carol: carol is current and
    /// persisted, bob is closed, and never were two users open.
    @Test func switchesTakeEffectInCallOrder() async throws {
        let store = InMemoryTokenStore()
        let bobStarts = ArrivalCounter()
        let carolStarts = ArrivalCounter()
        let bobHold = CancellableHold()
        let registry = UserSessionRegistry(store: store) { identifier in
            identifier == "bob"
                ? [
                    ScriptedStartService(
                        name: "b", starts: bobStarts, stops: ArrivalCounter(), holdFrom: 1, hold: bobHold)
                ]
                : [ScriptedStartService(name: "c", starts: carolStarts, stops: ArrivalCounter())]
        }
        let toBob = Task { try await registry.switchUser(to: makePrototype("bob")) }
        await bobStarts.wait(for: 1)
        let toCarol = Task { try await registry.switchUser(to: makePrototype("carol")) }
        // Called: it waits behind the switch to bob (before, it ran at once and opened carol).
        await yieldUntil { registry.pendingSwitchCount == 2 || carolStarts.count == 1 }
        bobHold.release()

        let bob = try await toBob.value
        let carol = try await toCarol.value
        #expect(bob.session.state == .closed)
        #expect(carol.session.state == .opened)
        #expect(registry.currentController === carol)
        #expect(try await store.loadCurrentIdentifier() == "carol")
        #expect(registry.identifiers == ["carol"])
        await registry.shutdown()
    }

    /// Item 4: `evictIdle()` leaves a controller alone while an open, a restore, or an open made directly on the
    /// controller is in progress. Before, it shut the controller down and the open was rolled back.
    @Test func evictIdleNeverTouchesAnOpenOrRestoreInProgress() async throws {
        let store = InMemoryTokenStore()
        try await storeSession(makePrototype("carol"), in: store)
        let starts = ArrivalCounter()
        let hold = CancellableHold()
        let registry = UserSessionRegistry(store: store) { _ in
            [ScriptedStartService(name: "s", starts: starts, stops: ArrivalCounter(), holdFrom: 1, hold: hold)]
        }
        let opening = Task { try await registry.open(makePrototype("alice")) }
        await starts.wait(for: 1)
        let bob = try registry.controller(for: "bob")
        let directOpening = Task { try await bob.open(makePrototype("bob")) }
        await starts.wait(for: 2)
        let restoring = Task { try await registry.session(for: "carol") }
        await starts.wait(for: 3)

        #expect(await registry.evictIdle() == 0)
        #expect(registry.identifiers == ["alice", "bob", "carol"])
        hold.release()
        #expect(try await opening.value.session.state == .opened)
        #expect(try await directOpening.value.state == .opened)
        #expect(try await restoring.value.session.state == .opened)
        #expect(await registry.evictIdle() == 0)
        #expect(registry.count == 3)
        await registry.shutdown()
    }

    /// Item 6: user code never runs under the registry's lock. A services factory that reads the registry used to
    /// trap with "Recursive call to lock Mutex".
    @Test func servicesFactoryMayCallTheRegistry() async throws {
        let holder = RegistryHolder()
        let seen = Locked<[Int]>([])
        let registry = UserSessionRegistry(store: InMemoryTokenStore()) { identifier in
            let registry = holder.registry
            seen.withLock { $0.append(registry?.count ?? -1) }
            _ = registry?.existingController(for: identifier)
            _ = registry?.identifiers
            return []
        }
        holder.registry = registry
        _ = try registry.controller(for: "alice")
        try await registry.open(makePrototype("bob"))
        #expect(seen.withLock { $0 } == [0, 1])
        #expect(registry.identifiers == ["alice", "bob"])
        await registry.shutdown()
    }
}
