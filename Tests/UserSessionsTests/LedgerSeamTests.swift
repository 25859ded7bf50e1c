import Dispatch
import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// The ten seams of issue 17, each against a token server that rotates refresh tokens and revokes the family on
/// reuse (``TokenFamilyServer``): credentials belong to the identifier (``CredentialsLedger``), not to the
/// controller that happened to hold them. Ordered by gates, arrival counters and a manual clock; never by sleeping.
struct LedgerSeamTests {
    /// A store, a token server, a manual clock and a probe of flight ends, shared by every controller made here.
    struct Bench {
        let time: ManualTime
        let server: TokenFamilyServer
        let store: OutageStore
        let flights = FlightEndProbe()
        let configuration: UserSessionController.Configuration

        init(store: OutageStore = OutageStore()) {
            let time = ManualTime()
            self.time = time
            self.store = store
            server = TokenFamilyServer(now: { time.now })
            var configuration = UserSessionController.Configuration(
                storeTimeout: .milliseconds(500), clock: time.clock)
            configuration.observers = [flights]
            self.configuration = configuration
        }

        func controller() -> UserSessionController {
            UserSessionController(store: store, refresher: server, configuration: configuration)
        }

        func registry(idleTimeout: Duration? = nil) throws -> UserSessionRegistry {
            try UserSessionRegistry(
                store: store, refresher: server, configuration: configuration, maximumOpenSessions: nil,
                idleTimeout: idleTimeout)
        }

        var ledger: CredentialsLedger { CredentialsLedger.shared(for: store) }

        /// Advances the clock past each retry's backoff until `user`'s stored refresh token is `token`: the ledger
        /// or a gate retries the write on the session clock.
        func waitUntilStored(_ user: String, _ token: String) async throws {
            try await withHangGuard("\(user)'s \(token) reaches the store") {
                await time.advanceOnEachSleep { await store.storedToken(user) != token }
            }
        }
    }

    // MARK: 1. A sign-out of another user in the same controller

    @Test func aSignOutOfAnotherUserDoesNotDropTheRotationOfARefreshThatOutlivedItsSession() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        let waiter = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)
        await controller.close()
        #expect(await waiter.result.errorCode == .sessionNotOpen)
        _ = try await controller.open(bench.server.signIn("bob"))
        try await controller.closeAndClear()
        bench.server.releaseRefreshes()
        try await withHangGuard("alice's late commit") { await bench.flights.ended.wait(for: 1) }

        #expect(await bench.store.storedToken("alice") == "alice/rt-1")
        let restarted = bench.controller()
        _ = try await restarted.restore(identifier: "alice")
        #expect(try await restarted.accessToken() == "alice/at-1")
        #expect(bench.server.reuses == 0)
    }

    // MARK: 2. Eviction while the store is down

    @Test func evictingIdleSessionsWhileTheStoreIsDownLosesNoRotation() async throws {
        let bench = Bench()
        let registry = try bench.registry(idleTimeout: .seconds(60))
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await alice.accessToken() == "alice/at-1")
        let savesBefore = bench.store.saves.count
        bench.time.advance(by: 120)
        // The idle timeout passed, and so did the failed write's backoff: its retry fails too and lets go of the
        // write turn before the eviction runs (without this order, the eviction could see the retry still in
        // progress and skip the session, which hides the seam).
        await bench.store.saves.wait(for: savesBefore + 1)
        try await withHangGuard("the retry lets go of the write turn") {
            while alice.gate.ledger.writeTurnIsHeld("alice") { await Task.yield() }
        }
        _ = await registry.evictIdle()

        let again = try await registry.session(for: "alice")
        #expect(try await again.accessToken() == "alice/at-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
        bench.store.failWrites(false)
        try await bench.waitUntilStored("alice", "alice/rt-1")
    }

    // MARK: 3. Close while the store is down

    @Test func aRotationTheStoreRefusedAtCommitAndAtCloseIsAdoptedByTheNextRestore() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await controller.accessToken() == "alice/at-1")
        await controller.close()

        let restarted = bench.controller()
        _ = try await restarted.restore(identifier: "alice")
        #expect(try await restarted.accessToken() == "alice/at-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
        bench.store.failWrites(false)
        try await bench.waitUntilStored("alice", "alice/rt-1")
    }

    @Test func theLedgerKeepsWritingAnUnwrittenRotationAfterEveryControllerClosed() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await controller.accessToken() == "alice/at-1")
        await controller.shutdown()
        #expect(bench.ledger.hasPendingWork("alice"))
        bench.store.failWrites(false)
        try await bench.waitUntilStored("alice", "alice/rt-1")
        try await withHangGuard("the ledger forgets alice") {
            while bench.ledger.hasPendingWork("alice") { await Task.yield() }
        }
    }

    // MARK: 4. registry.close while a refresh is in flight

    @Test func aRestoreAfterRegistryCloseJoinsTheRefreshInFlightInsteadOfSendingTheTokenAgain() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        let first = Task { try await alice.accessToken() }
        await bench.server.started.wait(for: 1)
        await registry.close(identifier: "alice")
        #expect(await first.result.errorCode == .sessionNotOpen)

        let second = Task { try await registry.session(for: "alice").accessToken() }
        let ledger = bench.ledger
        try await withHangGuard("the restore joins the refresh in flight") {
            while ledger.joinedWaiters("alice") < 1 { await Task.yield() }
        }
        bench.server.releaseRefreshes()
        #expect(try await second.value == "alice/at-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
    }

    // MARK: 5. registry.closeAndClear without a live controller

    @Test func aSignOutThroughTheRegistryFencesTheRefreshOfAnEvictedController() async throws {
        let bench = Bench()
        try await signOutThroughTheRegistryFencesTheEvictedRefresh(bench, registry: try bench.registry())
    }

    /// The same over a store that is a value (a wrapper struct has no instance for a ledger to key on): the
    /// registry's controllers and its sign-out share the registry's ledger all the same.
    @Test func aSignOutThroughTheRegistryFencesTheEvictedRefreshAlsoOverAValueTypeStore() async throws {
        let bench = Bench()
        let registry = try UserSessionRegistry(
            store: PlainTokenStore(bench.store), refresher: bench.server, configuration: bench.configuration,
            maximumOpenSessions: nil, idleTimeout: nil)
        try await signOutThroughTheRegistryFencesTheEvictedRefresh(bench, registry: registry)
    }

    private func signOutThroughTheRegistryFencesTheEvictedRefresh(
        _ bench: Bench, registry: UserSessionRegistry
    ) async throws {
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        let waiter = Task { try await alice.accessToken() }
        await bench.server.started.wait(for: 1)
        await registry.close(identifier: "alice")
        _ = await waiter.result
        try await registry.closeAndClear(identifier: "alice")
        bench.server.releaseRefreshes()
        try await withHangGuard("the evicted controller's late commit") { await bench.flights.ended.wait(for: 1) }

        #expect(try await bench.store.base.load(identifier: "alice") == nil)
        await #expect(throws: UserSessionError(.noStoredSession, "")) { try await registry.session(for: "alice") }
    }

    // MARK: 6. A late rotation with a coordinated store

    @Test func aLateRotationIsConditionalOnTheRevisionItsSessionHeld() async throws {
        let time = ManualTime()
        let server = TokenFamilyServer(now: { time.now })
        let store = ScriptedCoordinatedStore()
        let flights = FlightEndProbe()
        var configuration = UserSessionController.Configuration(storeTimeout: .milliseconds(500), clock: time.clock)
        configuration.observers = [flights]
        let controller = UserSessionController(store: store, refresher: server, configuration: configuration)
        _ = try await controller.open(server.signIn("alice", expiresIn: 10))
        server.holdRefreshes()
        let waiter = Task { try await controller.accessToken() }
        await server.started.wait(for: 1)
        await controller.close()
        _ = await waiter.result
        store.removeElsewhere("alice")
        server.releaseRefreshes()
        try await withHangGuard("the late commit") { await flights.ended.wait(for: 1) }

        #expect(store.record("alice") == nil)
    }

    // MARK: 7. Identifiers compare by bytes

    @Test func clearingTheComposedUserKeepsTheDecomposedCurrentUser() async throws {
        let decomposed = "cafe\u{301}"
        let composed = "caf\u{E9}"
        let bench = Bench()
        let registry = try bench.registry()
        _ = try await registry.switchUser(to: bench.server.signIn(decomposed))
        let other = try await registry.open(bench.server.signIn(composed))
        try await other.closeAndClear()

        let current = try #require(try await bench.store.loadCurrentIdentifier())
        #expect(Array(current.utf8) == Array(decomposed.utf8))
    }

    // MARK: 8. withAccessToken is activity

    @Test func aUserWhoOnlyCallsWithAccessTokenIsNotIdle() async throws {
        let bench = Bench()
        let registry = try bench.registry(idleTimeout: .seconds(60))
        let alice = try await registry.open(bench.server.signIn("alice"))
        for _ in 0..<3 {
            bench.time.advance(by: 40)
            let token = try await alice.withAccessToken(isAuthenticationFailure: { _ in false }) { $0 }
            #expect(token == "alice/at-0")
        }
        #expect(await registry.evictIdle() == 0)
        #expect(alice.session.state == .opened)
    }

    // MARK: 9. No user code under a lock

    /// An observer that blocks on the refresh's start until the test lets it go: a close that waited for it (an
    /// observer called under the gate's event-order lock) could not return first.
    final class BlockingObserver: UserSessionObserver {
        let entered = ArrivalCounter()
        private let release = DispatchSemaphore(value: 0)
        private let timedOut = Locked(false)

        func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
            guard event.kind == .refreshStarted else { return }
            entered.arrive()
            // Bounded, so that a lock held around this call fails the test instead of hanging the process. Generous:
            // this blocks one of the cooperative pool's threads, and on a loaded 2-core machine running every suite
            // at once the close needs more than 5 s of the other one.
            if release.wait(timeout: .now() + 120) == .timedOut { timedOut.withLock { $0 = true } }
        }

        func letGo() { release.signal() }
        var didTimeOut: Bool { timedOut.withLock { $0 } }
    }

    @Test func aBlockingObserverDoesNotStallTheClose() async throws {
        let bench = Bench()
        let observer = BlockingObserver()
        var configuration = bench.configuration
        configuration.observers = [observer]
        let controller = UserSessionController(
            store: bench.store, refresher: bench.server, configuration: configuration)
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        let waiter = Task { try await controller.accessToken() }
        await observer.entered.wait(for: 1)
        await controller.close()
        observer.letGo()
        _ = await waiter.result
        #expect(!observer.didTimeOut)
    }

    // MARK: 10. A refused refresh token is recorded once

    @Test func aRefusedRefreshTokenIsRecordedSoNoRestoreContactsTheServerAgain() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.revoke("alice")
        await #expect(throws: UserSessionError(.refreshFailed, "")) { try await alice.accessToken() }
        #expect(bench.server.calls == 1)

        // Recorded in the store, for every instance.
        #expect(try await bench.store.base.load(identifier: "alice")?.refreshTokenRefused == true)
        // This process: get-or-restore fails at once.
        try await withHangGuard("the invalidated session is gone") {
            while alice.session.state != .invalid { await Task.yield() }
        }
        await registry.close(identifier: "alice")
        await #expect(throws: UserSessionError(.refreshTokenRefused, "")) { try await registry.session(for: "alice") }
        // Another instance (another store object over the same records): the same, from the store's record.
        let elsewhere = UserSessionController(store: PlainTokenStore(bench.store.base), refresher: bench.server)
        await #expect(throws: UserSessionError(.refreshTokenRefused, "")) {
            try await elsewhere.restore(identifier: "alice")
        }
        #expect(bench.server.calls == 1)

        // Until the user signs in again.
        let signedIn = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        #expect(try await signedIn.accessToken() == "alice~1/at-1")
        #expect(try await bench.store.base.load(identifier: "alice")?.refreshTokenRefused == false)
    }
}
