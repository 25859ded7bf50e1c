import Foundation
import Testing

@testable import UserSessions

/// Issue 9, registry item 5: open sessions are bounded; evicting closes and keeps the stored credentials.
struct RegistryBoundsTests {
    private static func registry(
        _ time: ManualTime, store: any TokenStore = InMemoryTokenStore(), refresher: (any TokenRefresher)? = nil,
        maximumOpenSessions: Int? = nil, idleTimeout: Duration? = nil
    ) throws -> UserSessionRegistry {
        try UserSessionRegistry(
            store: store, refresher: refresher, configuration: .init(clock: time.clock),
            maximumOpenSessions: maximumOpenSessions, idleTimeout: idleTimeout)
    }

    /// The least recently used open session is closed (not cleared) when one more opens; a token request counts as
    /// a use; the evicted user's next request restores it.
    @Test func maximumOpenSessionsClosesTheLeastRecentlyUsed() async throws {
        let time = ManualTime()
        let store = InMemoryTokenStore()
        let registry = try Self.registry(time, store: store, maximumOpenSessions: 2)
        let alice = try await registry.open(makePrototype("alice", now: time.now))
        time.advance(by: 10)
        let bob = try await registry.open(makePrototype("bob", now: time.now))
        time.advance(by: 10)
        _ = try await alice.accessToken()  // alice is now used more recently than bob
        time.advance(by: 10)

        try await registry.open(makePrototype("carol", now: time.now))
        #expect(registry.identifiers == ["alice", "carol"])
        #expect(bob.session.state == .closed)
        #expect(alice.session.state == .opened)
        #expect(try await store.storedIdentifiers() == ["alice", "bob", "carol"])

        time.advance(by: 10)
        let restoredBob = try await registry.session(for: "bob")  // restores; alice is now the least recent
        #expect(restoredBob !== bob && restoredBob.session.state == .opened)
        #expect(registry.identifiers == ["bob", "carol"])
        #expect(alice.session.state == .closed)
        await registry.shutdown()
    }

    /// `evictIdle()` closes open sessions that nobody looked up and nobody asked a token of for `idleTimeout`,
    /// judged by the configured clock.
    @Test func idleTimeoutClosesSessionsNobodyUsed() async throws {
        let time = ManualTime()
        let store = InMemoryTokenStore()
        let registry = try Self.registry(time, store: store, idleTimeout: .seconds(600))
        let alice = try await registry.open(makePrototype("alice", now: time.now))
        let bob = try await registry.open(makePrototype("bob", now: time.now))
        let carol = try await registry.open(makePrototype("carol", now: time.now))
        time.advance(by: 300)
        _ = try await alice.accessToken()
        #expect(registry.existingController(for: "carol") === carol)  // a lookup is a use too
        time.advance(by: 301)
        #expect(await registry.evictIdle() == 1)
        #expect(registry.identifiers == ["alice", "carol"])
        #expect(bob.session.state == .closed)
        #expect(try await store.storedIdentifiers() == ["alice", "bob", "carol"])
        #expect(try await registry.session(for: "bob").session.state == .opened)

        time.advance(by: 600)
        #expect(await registry.evictIdle() == 3)
        #expect(registry.count == 0)
        await registry.shutdown()
    }

    /// A session whose refresh is in flight is never evicted, however idle.
    @Test func aRefreshInFlightIsNeverEvicted() async throws {
        let time = ManualTime()
        let gate = AsyncGate()
        let refresher = ScriptedRefresher(steps: [.block(gate, then: .succeed)], now: { time.now })
        let registry = try Self.registry(time, refresher: refresher, idleTimeout: .seconds(600))
        let alice = try await registry.open(makePrototype("alice", now: time.now))
        time.advance(by: 3600)  // expired: the next request waits for a refresh
        let request = Task { try await alice.accessToken() }
        await refresher.started.wait(for: 1)
        time.advance(by: 700)
        #expect(await registry.evictIdle() == 0)
        gate.open()
        _ = try await request.value
        time.advance(by: 700)
        #expect(await registry.evictIdle() == 1)
        await registry.shutdown()
    }

    /// A session invalidated by a terminal refresh failure leaves the registry on its own.
    @Test func invalidatedSessionsLeaveOnTheirOwn() async throws {
        let time = ManualTime()
        let revoked = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let refresher = ScriptedRefresher(steps: [.fail(revoked)], now: { time.now })
        let registry = try Self.registry(time, refresher: refresher)
        let alice = try await registry.open(makePrototype("alice", now: time.now))
        let probe = EventProbe(alice)
        time.advance(by: 3600)
        await #expect(throws: UserSessionError(.refreshFailed, "")) { try await alice.accessToken() }
        await probe.waitUntilFinished()  // invalidated, then shut down by the registry
        #expect(probe.kinds.contains(.invalidated(.credentialsRevoked)))
        await yieldUntil { registry.count == 0 }  // dropped right after its shutdown
        await registry.shutdown()
    }

    @Test func nonsensicalBoundsAreTypedErrors() {
        let time = ManualTime()
        #expect(throws: UserSessionError(.invalidConfiguration, "")) {
            try Self.registry(time, maximumOpenSessions: 0)
        }
        #expect(throws: UserSessionError(.invalidConfiguration, "")) {
            try Self.registry(time, idleTimeout: .zero)
        }
    }
}
