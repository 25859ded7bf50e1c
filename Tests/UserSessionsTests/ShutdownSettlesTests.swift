import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// A shutdown is what a process does before it exits: it waits (within the store timeout) for what the package still
/// owes the store, so the next process never restores a refresh token the server rotated since. Against a server that
/// rotates refresh tokens and revokes the family on reuse (``TokenFamilyServer``); ordered by the ledger's probes and
/// manual clocks, never by sleeping.
struct ShutdownSettlesTests {
    /// A store, a token server, a session clock, and a clock of its own for the deadlines (moving it never expires a
    /// token).
    struct Bench {
        let time = ManualTime()
        let deadlines = ManualTime()
        let server: TokenFamilyServer
        let store = OutageStore()
        let configuration: UserSessionController.Configuration
        static let storeTimeout: Duration = .seconds(5)

        init() {
            let time = time
            server = TokenFamilyServer(now: { time.now })
            var configuration = UserSessionController.Configuration(storeTimeout: Self.storeTimeout, clock: time.clock)
            configuration.deadlineClock = deadlines.deadlineClock
            self.configuration = configuration
        }

        func controller() -> UserSessionController {
            UserSessionController(store: store, refresher: server, configuration: configuration)
        }

        func registry() throws -> UserSessionRegistry {
            try UserSessionRegistry(
                store: store, refresher: server, configuration: configuration, maximumOpenSessions: nil,
                idleTimeout: nil)
        }

        var ledger: CredentialsLedger { CredentialsLedger.shared(for: store) }

        /// Waits until a shutdown waits for `user`'s refresh or write: `controller`'s own, or, without one, the
        /// registry's for a user it holds no controller of.
        func waitUntilShutdownWaits(for user: String, of controller: UserSessionController? = nil) async throws {
            try await withHangGuard("the shutdown waits for \(user)'s refresh") {
                while !(controller?.gate.isSettlingBeforeExit ?? ledger.awaitsSettlement(user)) { await Task.yield() }
            }
        }

        /// Waits until the shutdown's deadline sleeps on ``deadlines``: the shutdown says it waits just before it
        /// arms its deadline, and moved in between, the clock would pass the deadline unseen and the shutdown would
        /// wait for ever.
        func waitUntilTheDeadlineIsArmed() async throws {
            try await withHangGuard("the shutdown's deadline is armed") {
                while deadlines.sleeperCount == 0 { await Task.yield() }
            }
        }

        /// Signs alice in through `registry` with a token about to expire, asks for one, holds the refresh at the
        /// server and closes her session: her refresh is the ledger's alone. Returns her controller.
        func refreshOutlivingAClose(in registry: UserSessionRegistry) async throws -> UserSessionController {
            let alice = try await registry.open(server.signIn("alice", expiresIn: 10))
            server.holdRefreshes()
            let request = Task { try await alice.accessToken() }
            await server.started.wait(for: 1)
            await registry.close(identifier: "alice")
            #expect(await request.result.errorCode == .sessionNotOpen)
            return alice
        }

        /// What the next process would restore for `user`: it must hold the refresh token her family accepts now.
        func expectTheNextProcessRestores(_ user: String, accessToken: String) async throws {
            let next = UserSessionController(
                store: store.base, refresher: server,
                configuration: UserSessionController.Configuration(clock: time.clock))
            _ = try await next.restore(identifier: user)
            #expect(try await next.accessToken() == accessToken)
            #expect(server.reuses == 0)
            await next.shutdown()
        }
    }

    @Test func aShutdownReturnsOnlyOnceTheRefreshInFlightIsStored() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        let request = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)

        let shutdown = Task {
            await controller.shutdown()
            // What a process that exits now leaves in the store.
            return await bench.store.storedToken("alice")
        }
        try await bench.waitUntilShutdownWaits(for: "alice", of: controller)
        #expect(await request.result.errorCode == .sessionNotOpen)
        bench.server.releaseRefreshes()

        #expect(await shutdown.value == "alice/rt-1")
        try await bench.expectTheNextProcessRestores("alice", accessToken: "alice/at-1")
    }

    @Test func aShutdownThatOverrunsTheStoreTimeoutSaysSoAndTheLedgerGoesOn() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let probe = EventProbe(controller)
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        let request = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)

        let shutdown = Task { await controller.shutdown() }
        try await bench.waitUntilShutdownWaits(for: "alice", of: controller)
        try await bench.waitUntilTheDeadlineIsArmed()
        bench.deadlines.advance(by: Bench.storeTimeout.seconds)
        await shutdown.value
        await probe.waitUntilFinished()
        let reported = probe.events.filter { $0.kind == .persistenceFailed }
        #expect(reported.count == 1)
        #expect(reported.first?.detail?.contains("lost if the process exits now") == true)
        #expect(await bench.store.storedToken("alice") == "alice/rt-0")
        _ = await request.result

        // The process lives on: the refresh returns and the ledger stores its rotation.
        bench.server.releaseRefreshes()
        try await withHangGuard("the ledger stores alice's rotation") {
            while await bench.store.storedToken("alice") != "alice/rt-1" { await Task.yield() }
        }
        try await bench.expectTheNextProcessRestores("alice", accessToken: "alice/at-1")
    }

    @Test func aShutdownWaitsForAWriteTheStoreRefusedUntilItTakesIt() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await controller.accessToken() == "alice/at-1")

        let shutdown = Task {
            await controller.shutdown()
            return await bench.store.storedToken("alice")
        }
        try await bench.waitUntilShutdownWaits(for: "alice", of: controller)
        bench.store.failWrites(false)
        // The ledger's write loop retries on the session clock.
        try await withHangGuard("the write loop retries") {
            await bench.time.advanceOnEachSleep { bench.ledger.hasPendingWork("alice") }
        }
        #expect(await shutdown.value == "alice/rt-1")
    }

    @Test func aRegistryShutdownWaitsForTheRefreshOfAUserItClosedBefore() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        _ = try await registry.open(bench.server.signIn("bob"))
        _ = try await bench.refreshOutlivingAClose(in: registry)

        let shutdown = Task {
            await registry.shutdown()
            return await bench.store.storedToken("alice")
        }
        try await bench.waitUntilShutdownWaits(for: "alice")
        bench.server.releaseRefreshes()
        #expect(await shutdown.value == "alice/rt-1")
        try await bench.expectTheNextProcessRestores("alice", accessToken: "alice/at-1")
    }

    @Test func aRegistryShutdownThatOverrunsReportsTheUserOnItsEvents() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        let events = registry.events()
        _ = try await bench.refreshOutlivingAClose(in: registry)

        let shutdown = Task { await registry.shutdown() }
        try await bench.waitUntilShutdownWaits(for: "alice")
        try await bench.waitUntilTheDeadlineIsArmed()
        bench.deadlines.advance(by: Bench.storeTimeout.seconds)
        await shutdown.value
        var reported: [UserSessionRegistry.Event] = []
        for await event in events where event.event.kind == .persistenceFailed { reported.append(event) }
        #expect(reported.map(\.identifier) == ["alice"])
        bench.server.releaseRefreshes()
        try await withHangGuard("the ledger stores alice's rotation") {
            while await bench.store.storedToken("alice") != "alice/rt-1" { await Task.yield() }
        }
    }

    @Test func anEvictionDoesNotWaitForTheLedger() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        let alice = try await bench.refreshOutlivingAClose(in: registry)
        // A controller the registry drops is shut down without the wait: the process goes on, and so does the ledger.
        try await withHangGuard("the dropped controller's shutdown returns") { await alice.shutdown(settling: false) }
        #expect(!bench.ledger.awaitsSettlement("alice"))
        #expect(bench.ledger.hasPendingWork("alice"))
        bench.server.releaseRefreshes()
        await registry.shutdown()
        #expect(await bench.store.storedToken("alice") == "alice/rt-1")
    }
}
