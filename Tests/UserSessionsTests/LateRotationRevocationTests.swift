import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// A sign-out while a refresh is on its way back: the server rotated the refresh token, the sign-out revoked the one
/// the session held (spent already, so a server that ignores the revocation of an invalid token, as RFC 7009 §2.2
/// allows, keeps the grant alive), and the answer arrives after it. The rotation the sign-out dropped is revoked too.
/// Ordered by gates and arrival counters, never by sleeping.
struct LateRotationRevocationTests {
    /// ``TokenFamilyServer`` behind a network whose answers can be held after the server rotated, revoking as a
    /// lenient server does: the family's valid refresh token revokes the family, any other token changes nothing.
    final class LateAnswers: TokenRefresher {
        let server: TokenFamilyServer
        private let gate = AsyncGate()
        private let revokedTokens = Locked<[String]>([])
        /// While set, revocations fail as an endpoint answering 503 does.
        let failing = Locked(false)
        /// While set, revocations wait for ``answerRevocations()`` (one arrival each on ``revoking`` first).
        let holdingRevocations = Locked(false)
        private let revocationGate = AsyncGate()
        let revoking = ArrivalCounter()

        /// Lets the held revocations (and every later one) through.
        func answerRevocations() { revocationGate.open() }
        /// One arrival per refresh the server answered (before the answer is held).
        let rotated = ArrivalCounter()

        init(_ server: TokenFamilyServer) { self.server = server }

        /// The refresh tokens revoked, in order.
        var revoked: [String] { revokedTokens.withLock { $0 } }

        /// Lets the held answers (and every later one) through.
        func answer() { gate.open() }

        func refresh(_ credentials: Credentials) async throws -> Credentials {
            let answer = try await server.refresh(credentials)
            rotated.arrive()
            await gate.wait()
            return answer
        }

        var canRevoke: Bool { true }

        func revoke(_ credentials: Credentials) async throws {
            guard let token = credentials.refreshToken else { return }
            revoking.arrive()
            if holdingRevocations.withLock({ $0 }) { await revocationGate.wait() }
            if failing.withLock({ $0 }) {
                throw UserSessionError(
                    .refreshFailed, "the revocation endpoint answered 503", failureClass: .transient)
            }
            revokedTokens.withLock { $0.append(token) }
            let family = String(token.prefix { $0 != "/" })
            if server.validRefreshToken(of: family) == token { server.revoke(family) }
        }
    }

    struct Bench {
        let time = ManualTime()
        let deadlines = ManualTime()
        let server: TokenFamilyServer
        let refresher: LateAnswers
        let store = OutageStore()
        let configuration: UserSessionController.Configuration

        init() {
            let time = time
            server = TokenFamilyServer(now: { time.now })
            refresher = LateAnswers(server)
            var configuration = UserSessionController.Configuration(storeTimeout: .seconds(5), clock: time.clock)
            // Deadlines that pass only when a test moves them (none does): a slow run never cuts a wait short.
            configuration.deadlineClock = deadlines.deadlineClock
            self.configuration = configuration
        }

        func controller() -> UserSessionController {
            UserSessionController(store: store, refresher: refresher, configuration: configuration)
        }

        func registry() throws -> UserSessionRegistry {
            try UserSessionRegistry(
                store: store, refresher: refresher, configuration: configuration, maximumOpenSessions: nil,
                idleTimeout: nil)
        }

        /// Signs alice in on `controller` with a token about to expire and asks for one: returns the request once
        /// the server rotated her refresh token, its answer held on the way back.
        func refreshOnItsWayBack(on controller: UserSessionController) async throws -> Task<String, any Error> {
            _ = try await controller.open(server.signIn("alice", expiresIn: 10))
            return try await refreshOnItsWayBack(of: controller)
        }

        /// Signs alice in on `controller`, lets her refresh reach the server, and signs her out before its answer
        /// arrives: her request fails, and the sign-out revoked the refresh token that refresh had spent.
        func signOutWhileARefreshIsOnItsWayBack(on controller: UserSessionController) async throws {
            let request = try await refreshOnItsWayBack(on: controller)
            try await controller.closeAndClear()
            #expect(await request.result.errorCode == .sessionNotOpen)
        }

        /// Asks `controller`, whose session is open already, for a token: returns as above.
        func refreshOnItsWayBack(of controller: UserSessionController) async throws -> Task<String, any Error> {
            let request = Task { try await controller.accessToken() }
            await refresher.rotated.wait(for: 1)
            return request
        }

        /// Waits until the server holds no valid refresh token of `family`.
        func waitUntilRevoked(_ family: String) async throws {
            try await withHangGuard("\(family)'s grant is revoked") {
                while server.validRefreshToken(of: family) != nil { await Task.yield() }
            }
        }
    }

    @Test func aSignOutWhileTheRefreshIsOnItsWayBackRevokesTheRotationItDropped() async throws {
        let bench = Bench()
        let controller = bench.controller()
        try await bench.signOutWhileARefreshIsOnItsWayBack(on: controller)
        // The sign-out revoked what the session held: spent, so the server kept the grant.
        #expect(bench.refresher.revoked == ["alice/rt-0"])
        #expect(bench.server.validRefreshToken(of: "alice") == "alice/rt-1")

        bench.refresher.answer()
        try await bench.waitUntilRevoked("alice")
        #expect(bench.refresher.revoked == ["alice/rt-0", "alice/rt-1"])
        #expect(await bench.store.storedToken("alice") == nil)
    }

    @Test func aSignOutFollowedByASignInStillRevokesTheRotationTheSignOutDropped() async throws {
        let bench = Bench()
        let controller = bench.controller()
        try await bench.signOutWhileARefreshIsOnItsWayBack(on: controller)
        // She signs in again before the answer arrives: a new grant, which the late answer must not touch.
        _ = try await controller.open(bench.server.signIn("alice"))

        bench.refresher.answer()
        try await bench.waitUntilRevoked("alice")
        #expect(bench.refresher.revoked == ["alice/rt-0", "alice/rt-1"])
        #expect(bench.server.validRefreshToken(of: "alice~1") == "alice~1/rt-0")
        #expect(controller.credentials?.refreshToken == "alice~1/rt-0")
        #expect(await bench.store.storedToken("alice") == "alice~1/rt-0")
    }

    @Test func aShutdownWaitsForTheRevocationOfTheDroppedRotation() async throws {
        let bench = Bench()
        let controller = bench.controller()
        try await bench.signOutWhileARefreshIsOnItsWayBack(on: controller)

        // The process exits after this shutdown: the dropped rotation must be revoked by then.
        bench.refresher.holdingRevocations.withLock { $0 = true }
        let shutdown = Task {
            await controller.shutdown()
            return bench.server.validRefreshToken(of: "alice")
        }
        try await withHangGuard("the shutdown waits for the refresh") {
            while !controller.gate.isSettlingBeforeExit { await Task.yield() }
        }
        bench.refresher.answer()
        // The revocation of the dropped rotation starts as the refresh ends; the shutdown is still waiting.
        await bench.refresher.revoking.wait(for: 2)
        #expect(controller.gate.isSettlingBeforeExit)
        bench.refresher.answerRevocations()
        #expect(await shutdown.value == nil)
        #expect(bench.refresher.revoked == ["alice/rt-0", "alice/rt-1"])
    }

    @Test func aSignOutThroughTheRegistryRevokesTheRotationOfARefreshThatOutlivedItsController() async throws {
        let bench = Bench()
        let registry = try bench.registry()
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        let request = try await bench.refreshOnItsWayBack(of: alice)
        await registry.close(identifier: "alice")
        #expect(await request.result.errorCode == .sessionNotOpen)

        try await registry.closeAndClear(identifier: "alice")
        bench.refresher.answer()
        try await bench.waitUntilRevoked("alice")
        #expect(bench.refresher.revoked.last == "alice/rt-1")
        #expect(await bench.store.storedToken("alice") == nil)
        await registry.shutdown()
    }

    @Test func aLateRevocationThatFailsIsReportedWithoutTheToken() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let probe = EventProbe(controller)
        try await bench.signOutWhileARefreshIsOnItsWayBack(on: controller)

        bench.refresher.failing.withLock { $0 = true }
        bench.refresher.answer()
        await probe.wait { events in events.contains { $0.kind == .revocationFailed(.transient) } }
        let reported = probe.events.filter { $0.kind == .revocationFailed(.transient) }
        #expect(reported.count == 1)
        #expect(reported.first?.detail?.contains("503") == true)
        #expect(reported.first?.detail?.contains("rt-1") == false)
        #expect(bench.server.validRefreshToken(of: "alice") == "alice/rt-1")
    }

    @Test func aSignOutRevokesTheRotationTheStoreHasNotTakenYet() async throws {
        let bench = Bench()
        bench.refresher.answer()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await controller.accessToken() == "alice/at-1")
        // Closed with the rotation unwritten: the store still holds the refresh token it spent.
        await controller.close()
        #expect(await bench.store.storedToken("alice") == "alice/rt-0")

        try await controller.closeAndClear()
        #expect(bench.refresher.revoked == ["alice/rt-1", "alice/rt-0"])
        #expect(bench.server.validRefreshToken(of: "alice") == nil)
        #expect(await bench.store.storedToken("alice") == nil)
    }

    @Test func aSignOutThroughTheRegistryRevokesTheRotationTheStoreHasNotTakenYet() async throws {
        let bench = Bench()
        bench.refresher.answer()
        let registry = try bench.registry()
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await alice.accessToken() == "alice/at-1")
        await registry.close(identifier: "alice")

        try await registry.closeAndClear(identifier: "alice")
        #expect(bench.refresher.revoked.first == "alice/rt-1")
        #expect(bench.server.validRefreshToken(of: "alice") == nil)
        await registry.shutdown()
    }

    /// A coordinated store whose change notifications never arrive: the commit, not a notification, finds the record
    /// another process removed.
    struct UnheardStore: CoordinatedTokenStore, ForwardingTokenStore {
        let base: CoordinatedOutageStore
        var forwardedTo: any TokenStore { base }
        func loadRevised(identifier: String) async throws -> RevisedSession? {
            try await base.loadRevised(identifier: identifier)
        }
        func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
            try await base.save(session, identifier: identifier, expectedRevision: expectedRevision)
        }
        func withRefreshLease<Result: Sendable>(
            identifier: String, _ body: @Sendable () async throws -> Result
        ) async throws -> Result {
            try await base.withRefreshLease(identifier: identifier, body)
        }
        func changes() -> AsyncStream<TokenStoreChange> { AsyncStream { _ in } }
    }

    @Test func aSignOutInAnotherProcessRevokesTheRotationThisProcessWasCommitting() async throws {
        let bench = Bench()
        let database = CoordinatedOutageStore()
        let here = UnheardStore(base: database)
        let controller = UserSessionController(
            store: here, refresher: bench.refresher, configuration: bench.configuration)
        let request = try await bench.refreshOnItsWayBack(on: controller)

        // Another process signs her out: it revokes the refresh token it reads (spent: ignored) and removes her record.
        let elsewhere = try UserSessionRegistry(
            store: database.anotherProcess(), refresher: bench.refresher, configuration: bench.configuration,
            maximumOpenSessions: nil, idleTimeout: nil)
        try await elsewhere.closeAndClear(identifier: "alice")
        #expect(bench.refresher.revoked == ["alice/rt-0"])

        bench.refresher.answer()
        _ = await request.result
        try await bench.waitUntilRevoked("alice")
        #expect(bench.refresher.revoked == ["alice/rt-0", "alice/rt-1"])
        #expect(database.record("alice") == nil)
        await elsewhere.shutdown()
        await controller.shutdown()
    }

    @Test func aCloseKeepsTheRotationItDoesNotRevokeIt() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let request = try await bench.refreshOnItsWayBack(on: controller)
        await controller.close()
        #expect(await request.result.errorCode == .sessionNotOpen)

        bench.refresher.answer()
        // The ledger stores the rotation of the closed session: the user is still signed in.
        try await withHangGuard("alice's rotation is stored") {
            while await bench.store.storedToken("alice") != "alice/rt-1" { await Task.yield() }
        }
        let restored = bench.controller()
        _ = try await restored.restore(identifier: "alice")
        #expect(try await restored.accessToken() == "alice/at-1")
        #expect(bench.refresher.revoked.isEmpty)
        #expect(bench.server.validRefreshToken(of: "alice") == "alice/rt-1")
    }

    @Test func aSignOutWithoutRevocationLeavesTheDroppedRotationAlone() async throws {
        let bench = Bench()
        var configuration = bench.configuration
        configuration.revokesOnSignOut = false
        let controller = UserSessionController(
            store: bench.store, refresher: bench.refresher, configuration: configuration)
        try await bench.signOutWhileARefreshIsOnItsWayBack(on: controller)
        bench.refresher.answer()
        // The flight ends once the ledger forgets alice (its entry goes when nothing is in flight).
        let ledger = CredentialsLedger.shared(for: bench.store)
        try await withHangGuard("alice's refresh returns") {
            while ledger.hasPendingWork("alice") { await Task.yield() }
        }
        #expect(bench.refresher.revoked.isEmpty)
    }
}
