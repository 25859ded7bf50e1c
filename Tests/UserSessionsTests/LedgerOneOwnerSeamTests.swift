import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// The seams issue 25 found between the gate and the ledger (seam 1, a reseal, is in the sealing tests): every write
/// for an identifier passes the ledger's fence in the identifier's write turn, a sign-in changes the fence exactly
/// as a sign-out does, a sign-out that failed loses nothing, and whoever holds credentials older than the ledger's
/// adopts them, rotated or not. Ordered by gates held inside the store, arrival counters and a manual clock.
struct LedgerOneOwnerSeamTests {
    struct Bench {
        let time = ManualTime()
        let server: TokenFamilyServer
        let store = GatedStore()
        let configuration: UserSessionController.Configuration

        init() {
            let time = self.time
            server = TokenFamilyServer(now: { time.now })
            configuration = UserSessionController.Configuration(storeTimeout: .milliseconds(500), clock: time.clock)
        }

        func controller() -> UserSessionController {
            UserSessionController(store: store, refresher: server, configuration: configuration)
        }

        /// Alice signed in (tokens valid for an hour) on one controller and restored on another: two views of her.
        func aliceOnTwoControllers() async throws -> (signedIn: UserSessionController, restored: UserSessionController)
        {
            let (signedIn, restored) = (controller(), controller())
            _ = try await signedIn.open(server.signIn("alice", expiresIn: 3600))
            _ = try await restored.restore(identifier: "alice")
            return (signedIn, restored)
        }

        var ledger: CredentialsLedger { CredentialsLedger.shared(for: store) }

        /// Alice signs in on `controller` (tokens valid for 10 s) while the store holds her sign-in's write; meanwhile
        /// her session, readable already, asks for a token after they expired, and the server holds the refresh.
        /// Returns the write to let go, the open, and the token request.
        func signInWhileItsSessionRefreshes(on controller: UserSessionController) async -> (
            write: AsyncGate, open: Task<UserSession, any Error>, request: Task<String, any Error>
        ) {
            let write = store.holdNextSave(of: "alice")
            let open = Task { try await controller.open(server.signIn("alice", expiresIn: 10)) }
            await store.savesHeld.wait(for: 1)
            server.holdRefreshes()
            time.advance(by: 20)
            let request = Task { try await controller.accessToken() }
            await server.started.wait(for: 1)
            return (write, open, request)
        }

        /// Waits until `task` finished, or until a write of `identifier` waits for the identifier's write turn (held
        /// by a store call the test holds): the two orders a late write can take.
        func waitUntilDoneOrQueued<T: Sendable>(_ task: Task<T, any Error>, done: ArrivalCounter, _ identifier: String)
            async throws
        {
            let ledger = self.ledger
            try await withHangGuard("the call returns or waits for the write turn") {
                while done.count == 0 && ledger.writersWaiting(identifier) == 0 { await Task.yield() }
            }
        }

        /// Advances the clock at each sleep (the ledger's write loop backs off on it) until the ledger holds no entry:
        /// what it had to write reached the store, or was given up.
        func waitUntilTheLedgerLetsGo(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let (ledger, time) = (self.ledger, self.time)
            try await withHangGuard(what, sourceLocation: sourceLocation) {
                await time.advanceOnEachSleep { ledger.entryCount > 0 }
            }
        }
    }

    // MARK: A restore that reads the record of a sign-in under way

    @Test func aRestoreThatReadsTheRecordOfASignInMadeDuringItsReadWritesItsRotations() async throws {
        let bench = Bench()
        let restoring = bench.controller()
        // The restore holds the identifier (and takes its fence) before its read, which waits for the sign-in.
        let read = bench.store.holdNextLoad(of: "alice", beforeReading: true)
        let restore = Task { try await restoring.restore(identifier: "alice") }
        await bench.store.loadsHeld.wait(for: 1)
        let signingIn = bench.controller()
        _ = try await signingIn.open(bench.server.signIn("alice", expiresIn: 10))
        await signingIn.close()
        // The restore reads the sign-in's record, written under the fence the sign-in made: its session must be
        // fenced by that one, not by the one it took before the sign-in (whose writes the sign-in refuses).
        read.open()
        _ = try await restore.value
        bench.time.advance(by: 20)
        #expect(try await restoring.accessToken() == "alice/at-1")
        await restoring.close()
        // The rotation reached the store: the spent token is never read back and presented again.
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-1")
        #expect(bench.ledger.entryCount == 0)
        _ = try await bench.controller().restore(identifier: "alice")
        #expect(bench.server.reuses == 0)
    }

    // MARK: An open whose first write failed

    @Test func anOpenWhoseFirstWriteFailedLeavesNothingToWriteNotEvenARefreshMadeWhileItOpened() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let flights = controller.gate.backgroundTasks
        // The sign-in's write is held; meanwhile its credentials are already served, and refreshed on demand.
        let save = bench.store.holdNextSave(of: "alice")
        let open = Task { try await controller.open(bench.server.signIn("alice", expiresIn: 10)) }
        await bench.store.savesHeld.wait(for: 1)
        bench.time.advance(by: 20)
        let asked = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)
        // The store goes down: the sign-in is refused and the open fails.
        bench.store.failWrites(true)
        save.open()
        await #expect(throws: UserSessionError.self) { try await open.value }
        _ = await asked.result
        await flights.last?.value
        bench.store.failWrites(false)
        // Its refresh belonged to a sign-in that never happened: nothing is left to write, by the gate or the ledger,
        // and the store never gets a record for alice.
        #expect(!bench.ledger.hasPendingWork("alice"))
        #expect(bench.ledger.entryCount == 0)
        #expect(await bench.store.stored("alice") == nil)
    }

    // MARK: A refresh made while its session signed in, whose write the store refused

    @Test func aRefreshMadeWhileItsSessionSignedInReachesTheStoreAfterItsWriteFailedAndTheSessionClosed()
        async throws
    {
        let bench = Bench()
        let controller = bench.controller()
        // The sign-in's write is held; meanwhile its credentials are served, and refreshed on demand: the refresh
        // runs under the fence of a session signing in, so the ledger learns its rotation only as knowledge.
        let signIn = bench.store.holdNextSave(of: "alice")
        let open = Task { try await controller.open(bench.server.signIn("alice", expiresIn: 10)) }
        await bench.store.savesHeld.wait(for: 1)
        let commit = bench.store.holdNextSave(of: "alice")
        bench.time.advance(by: 20)
        let asked = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)
        // The sign-in lands; the refresh's own write is held, and the store goes down before it is made.
        signIn.open()
        _ = try await open.value
        await bench.store.savesHeld.wait(for: 2)
        bench.store.failWrites(true)
        commit.open()
        #expect(try await asked.value == "alice/at-1")
        // The session closes with the store still down: its final write fails too.
        await controller.close()
        bench.store.failWrites(false)
        try await bench.waitUntilTheLedgerLetsGo("the ledger writes what the closed session could not")

        // The store holds the rotation, not the refresh token it spent: a restore never presents that one again.
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-1")
        let restarted = bench.controller()
        _ = try await restarted.restore(identifier: "alice")
        bench.time.advance(by: 3600)
        #expect(try await restarted.accessToken() == "alice/at-2")
        #expect(bench.server.reuses == 0)
    }

    /// Waits until alice's record (or `identifier`'s) holds `token`.
    static func waitUntilStored(_ bench: Bench, _ identifier: String, _ token: String) async throws {
        let store = bench.store
        try await withHangGuard("\(identifier)'s record holds \(token)") {
            while await store.stored(identifier)?.credentials?.refreshToken != token { await Task.yield() }
        }
    }

    /// A refresh that outlived its session, which was still signing in when it started: its rotation reaches the
    /// record the sign-in made (the ledger holds the sign-in's credentials as current, and this refresh presented
    /// exactly those), though the session closed before the refresher answered.
    @Test func aRefreshOfASessionSigningInThatOutlivesItReachesTheRecordItsSignInMade() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let (signIn, open, asked) = await bench.signInWhileItsSessionRefreshes(on: controller)
        signIn.open()
        _ = try await open.value
        await controller.close()
        _ = await asked.result
        bench.server.releaseRefreshes()
        try await Self.waitUntilStored(bench, "alice", "alice/rt-1")
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")
        let restarted = bench.controller()
        _ = try await restarted.restore(identifier: "alice")
        bench.time.advance(by: 3600)
        #expect(try await restarted.accessToken() == "alice/at-2")
        #expect(bench.server.reuses == 0)
    }

    /// `"café"` composed and decomposed are equal Swift strings but two users to every store. A refresh of the
    /// composed user that outlives its session writes its rotation to the composed user's record, whoever the
    /// controller serves next, even the decomposed user.
    @Test func aRefreshThatOutlivesItsSessionWritesToItsOwnUserWhateverUserLooksAlike() async throws {
        let (composed, decomposed) = ("caf\u{E9}", "cafe\u{301}")
        #expect(composed == decomposed)
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn(composed, expiresIn: 10))
        bench.server.holdRefreshes()
        bench.time.advance(by: 20)
        let asked = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)
        await controller.close()
        _ = await asked.result
        // (The fixture server names families by Swift string, so the decomposed user's family is a second one of
        // "café"; the store tells the two users apart by bytes.)
        let second = bench.server.signIn(decomposed, expiresIn: 3600)
        _ = try await controller.open(second)
        bench.server.releaseRefreshes()
        try await Self.waitUntilStored(bench, composed, "\(composed)/rt-1")
        #expect(await bench.store.stored(decomposed)?.credentials == second.credentials)
        #expect(try await controller.accessToken() == second.credentials?.accessToken)
    }

    /// Credentials handed over while a refresh of the older ones is at the server supersede it: the refresh's
    /// rotation is newer than what it presented, not than the update, so it is never written over the update's
    /// record, not when the refresh returns and not after the session closed (before, the ledger wrote it once
    /// nobody held the user).
    @Test func aRefreshAnUpdateSupersededIsNeverWrittenOverTheUpdate() async throws {
        let bench = Bench()
        let controller = bench.controller()
        let flights = controller.gate.backgroundTasks
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        bench.time.advance(by: 20)
        let asked = Task { try await controller.accessToken() }
        await bench.server.started.wait(for: 1)
        let handedOver = Credentials(
            accessToken: "alice/at-elsewhere", refreshToken: "alice/rt-elsewhere",
            expiresAt: bench.time.now.addingTimeInterval(3600), source: .signIn)
        try await controller.updateCredentials(handedOver)
        #expect(try await asked.value == "alice/at-elsewhere")
        bench.server.releaseRefreshes()
        await flights.last?.value
        await controller.close()
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")
        #expect(await bench.store.stored("alice")?.credentials == handedOver)
    }

    @Test func anUpdateTheStoreRefusedIsNeverWrittenLaterNotEvenAfterTheSessionClosed() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 3600))
        // Credentials handed over while the store is down: the update throws, and nothing changes.
        bench.store.failWrites(true)
        let handedOver = Credentials(
            accessToken: "alice/at-elsewhere", refreshToken: "alice/rt-elsewhere",
            expiresAt: bench.time.now.addingTimeInterval(3600), source: .signIn)
        await #expect(throws: UserSessionError.self) { try await controller.updateCredentials(handedOver) }
        #expect(try await controller.accessToken() == "alice/at-0")
        await controller.close()
        bench.store.failWrites(false)
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")

        // The ledger learns of the failed writes of a session's own credentials only: an update the caller was told
        // failed never lands later.
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-0")
    }

    // MARK: 2. A refusal recorded while the user signs in again

    @Test func aRefusalRecordedWhileTheUserSignsInAgainElsewhereDoesNotOverwriteTheSignIn() async throws {
        let bench = Bench()
        let first = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        // The refusal's load reads the old record and is held there; its save comes after.
        let load = bench.store.holdNextLoad(of: "alice")
        bench.server.revoke("alice")
        let refused = Task { try await first.accessToken() }
        await bench.store.loadsHeld.wait(for: 1)

        // The refusal holds the identifier's write turn from before its load: the sign-in, whenever it comes, writes
        // after the refusal's save. (Before the turn, the sign-in landed first and the refusal's save over it.)
        let signIn = Task { try await bench.controller().open(bench.server.signIn("alice", expiresIn: 3600)) }
        #expect(bench.ledger.hasPendingWork("alice"))
        load.open()
        _ = try await signIn.value
        // The refused controller fails, or (when its look at the store after the refusal comes after the sign-in
        // landed) adopts the new sign-in's credentials as a replacement made elsewhere: never the refused ones.
        switch await refused.result {
        case .success(let token): #expect(token == "alice~1/at-0")
        case .failure(let error): #expect((error as? UserSessionError)?.code == .refreshFailed)
        }

        let stored = try #require(await bench.store.stored("alice"))
        #expect(stored.credentials?.refreshToken == "alice~1/rt-0")
        #expect(!stored.refreshTokenRefused)
        let elsewhere = UserSessionController(
            store: PlainTokenStore(bench.store.base), refresher: bench.server, configuration: bench.configuration)
        _ = try await elsewhere.restore(identifier: "alice")
        #expect(try await elsewhere.accessToken() == "alice~1/at-0")
    }

    // MARK: 3. A late retry after a sign-out and a sign-in

    @Test func aRetryThatLandsAfterASignOutAndASignInDoesNotReplaceTheSignIn() async throws {
        let bench = Bench()
        let registry = try UserSessionRegistry(
            store: bench.store, refresher: bench.server, configuration: bench.configuration,
            maximumOpenSessions: nil, idleTimeout: nil)
        let alice = try await registry.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        #expect(try await alice.accessToken() == "alice/at-1")
        await registry.close(identifier: "alice")
        #expect(bench.ledger.hasPendingWork("alice"))
        // The store is back; the ledger's retry reaches it and is held before it writes.
        bench.store.failWrites(false)
        let save = bench.store.holdNextSave(of: "alice")
        try await withHangGuard("the ledger's retry reaches the store") {
            await bench.time.advanceOnEachSleep { bench.store.savesHeld.count < 1 }
        }

        let done = ArrivalCounter()
        let signOutAndIn = Task {
            defer { done.arrive() }
            try await registry.closeAndClear(identifier: "alice")
            return try await registry.open(bench.server.signIn("alice", expiresIn: 3600))
        }
        try await bench.waitUntilDoneOrQueued(signOutAndIn, done: done, "alice")
        save.open()
        let again = try await signOutAndIn.value
        let ledger = bench.ledger
        try await withHangGuard("the late retry is over") {
            while ledger.hasPendingWork("alice") { await Task.yield() }
        }

        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice~1/rt-0")
        #expect(try await again.accessToken() == "alice~1/at-0")
        #expect(bench.server.reuses == 0)
    }

    // MARK: 4. A sign-out that failed

    @Test func aSignOutTheStoreRefusedLosesNoRotation() async throws {
        let bench = Bench()
        let controller = bench.controller()
        _ = try await controller.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        bench.store.failRemoves(true)
        #expect(try await controller.accessToken() == "alice/at-1")
        await #expect(throws: UserSessionError(.storeFailure, "")) { try await controller.closeAndClear() }
        // Still signed in: the store holds her record, and the rotation it has not taken reaches it once it is back.
        bench.store.failWrites(false)
        bench.store.failRemoves(false)
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")

        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-1")
        let restarted = bench.controller()
        _ = try? await restarted.restore(identifier: "alice")
        #expect((try? await restarted.accessToken()) == "alice/at-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
    }

    // MARK: 5. A server that does not rotate refresh tokens

    @Test func twoControllersOfOneStoreRefreshOncePerExpiryAgainstAServerThatDoesNotRotate() async throws {
        let time = ManualTime()
        let server = NonRotatingServer(now: { time.now })
        let store = InMemoryTokenStore()
        let configuration = UserSessionController.Configuration(storeTimeout: .milliseconds(500), clock: time.clock)
        let first = UserSessionController(store: store, refresher: server, configuration: configuration)
        let second = UserSessionController(store: store, refresher: server, configuration: configuration)
        _ = try await first.open(server.signIn("alice", expiresIn: 3600))
        _ = try await second.restore(identifier: "alice")
        #expect(try await second.accessToken() == "alice/at-0")

        // Both reach the lead time; the first refreshes, and a second later the other asks.
        time.advance(by: 3595)
        #expect(try await first.accessToken() == "alice/at-1")
        time.advance(by: 1)
        #expect(try await second.accessToken() == "alice/at-1")
        #expect(server.calls == 1)
    }

    // MARK: A rotation is written once, by the controller that ran its refresh

    /// Two controllers of one store reach the lead time together: the second joins the first's refresh, and its
    /// commit, which waits for the write turn behind the first's, finds the rotation in the store and writes nothing.
    @Test func aControllerThatJoinedAnotherControllersRefreshDoesNotWriteTheRotationAgain() async throws {
        let bench = Bench()
        let (first, second) = try await bench.aliceOnTwoControllers()
        bench.time.advance(by: 3595)
        let (leader, joiner) = try await leadAndJoinAHeldRefresh(
            first, second, server: bench.server, ledger: bench.ledger)
        let savesBefore = bench.store.saves.count
        bench.server.releaseRefreshes()
        #expect(try await leader.value == "alice/at-1")
        #expect(try await joiner.value == "alice/at-1")
        #expect(bench.store.saves.count == savesBefore + 1, "one write of the rotation")
        #expect(try await bench.store.base.load(identifier: "alice")?.credentials?.refreshToken == "alice/rt-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
    }

    /// The second controller asks after the first's refresh was committed: it already serves the rotation (the ledger
    /// told it, its refresh token being spent) and writes nothing. When the first's write failed, the ledger's retry
    /// writes the rotation, once.
    @Test(arguments: [false, true])
    func aControllerAnsweredWithARotationWritesItOnlyWhenTheStoreLacksIt(_ firstWriteFails: Bool) async throws {
        let bench = Bench()
        let (first, second) = try await bench.aliceOnTwoControllers()
        bench.time.advance(by: 3595)
        bench.store.failWrites(firstWriteFails)
        #expect(try await first.accessToken() == "alice/at-1")
        bench.store.failWrites(false)
        let savesBefore = bench.store.saves.count
        #expect(try await second.accessToken() == "alice/at-1")
        let (ledger, time) = (bench.ledger, bench.time)
        try await withHangGuard("the ledger writes what the first controller could not") {
            await time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        #expect(bench.store.saves.count == savesBefore + (firstWriteFails ? 1 : 0))
        #expect(try await bench.store.base.load(identifier: "alice")?.credentials?.refreshToken == "alice/rt-1")
        #expect(bench.server.calls == 1)
        #expect(bench.server.reuses == 0)
    }

    // MARK: An idle controller of the same user, whatever the number of refreshes made meanwhile

    /// The ledger tells every controller holding the user when another one's refresh advances her newest credentials:
    /// an idle controller takes them then, so it never presents the refresh token spent since, however many refreshes
    /// the other one makes while it stays idle. Before, it learned them only at its own next refresh, from the
    /// ledger's window of the last 16 rotations: after 17 of them, it presented its spent token and the server revoked
    /// the family.
    @Test func anIdleControllerNeverPresentsATokenAnotherControllerSpentHoweverManyRefreshesAgo() async throws {
        let bench = Bench()
        let (busy, idle) = try await bench.aliceOnTwoControllers()
        let (events, leaderEvents) = (EventProbe(idle), EventProbe(busy))
        let refreshes = CredentialsLedger.Entry.rotationWindow + 4
        for round in 1...refreshes {
            bench.time.advance(by: 3600)
            #expect(try await busy.accessToken() == "alice/at-\(round)")
        }
        // The idle controller already serves the newest, told by the ledger: no refresh of its own.
        #expect(idle.gate.currentCredentials()?.refreshToken == "alice/rt-\(refreshes)")
        // Each announced there as a refresh, and once, as its own, by the controller whose refreshes they were.
        try await withHangGuard("the idle controller announces each refresh") {
            await events.wait { $0.filter { $0.kind == .credentialsRefreshed }.count == refreshes }
        }
        try await withHangGuard("the busy controller announces each refresh") {
            await leaderEvents.wait { $0.filter { $0.kind == .credentialsRefreshed }.count == refreshes }
        }
        #expect(!leaderEvents.kinds.contains { if case .credentialsUpdated = $0 { true } else { false } })
        #expect(!events.kinds.contains { if case .credentialsUpdated = $0 { true } else { false } })
        bench.time.advance(by: 3600)
        #expect(try await idle.accessToken() == "alice/at-\(refreshes + 1)")
        #expect(bench.server.reuses == 0)
        #expect(bench.server.calls == refreshes + 1)
        await busy.close()
        await idle.close()
    }

    /// The server refuses the user's refresh token for good on one controller. Every other controller of the user in
    /// the process holds the same token, dead as well: its session ends at once, as the refusing one's does
    /// (`.invalidated(.credentialsRevoked)`), instead of reporting her signed in until its own next refresh presents
    /// the token again.
    @Test func aRefusalOnOneControllerEndsTheSessionOfAnIdleControllerHoldingTheSameToken() async throws {
        let bench = Bench()
        let (refusing, idle) = try await bench.aliceOnTwoControllers()
        let events = EventProbe(idle)
        bench.server.revoke("alice")
        await #expect(throws: UserSessionError.self) { try await refusing.refreshCredentials() }
        try await withHangGuard("the idle controller's session ends") {
            await events.wait { $0.contains { $0.kind == .invalidated(.credentialsRevoked) } }
        }
        #expect(idle.session.state == .invalid)
        await #expect(throws: UserSessionError.self) { try await idle.accessToken() }
        #expect(bench.server.calls == 1, "the refused token was presented again")
        await refusing.close()
        await idle.close()
    }

    /// The user signs out on one controller (`closeAndClear()`), or through a registry that holds no controller of
    /// hers. Every other controller of the process holding her closes, as one over a coordinated store closes when
    /// another instance removed her record (`.closed(.clearedElsewhere)`), instead of reporting her signed in and
    /// serving her tokens until it closes.
    @Test(arguments: [false, true])
    func aSignOutElsewhereInTheProcessClosesEveryOtherControllerHoldingTheUser(_ throughARegistry: Bool) async throws {
        let bench = Bench()
        let (signingOut, other) = try await bench.aliceOnTwoControllers()
        let events = EventProbe(other)
        if throughARegistry {
            await signingOut.close()
            let registry = UserSessionRegistry(
                store: bench.store, refresher: bench.server, configuration: bench.configuration)
            try await registry.closeAndClear(identifier: "alice")
        } else {
            try await signingOut.closeAndClear()
        }
        try await withHangGuard("the other controller's session closes") {
            await events.wait { $0.contains { $0.kind == .closed(.clearedElsewhere) } }
        }
        #expect(other.session.state == .closed)
        await #expect(throws: UserSessionError.self) { try await other.accessToken() }
        #expect(await bench.store.stored("alice") == nil)
        #expect(bench.ledger.entryCount == 0)
        #expect(bench.server.calls == 0)
    }

    /// Credentials handed over on one controller replace what every controller of the user holds: the other, idle
    /// one is told and serves them, and at the next expiry the user's one family is refreshed once. Before, the idle
    /// controller kept the older family and refreshed it, its commit wrote that family over the update in the store,
    /// and the user had two families alive, each controller writing its own over the other's.
    ///
    /// Whether the ledger knew the credentials replaced (a controller signed her in) or not (both restored her after a
    /// restart).
    @Test(arguments: [false, true])
    func credentialsHandedOverOnOneControllerReplaceWhatAnIdleControllerOfTheUserHolds(_ bothRestored: Bool)
        async throws
    {
        let bench = Bench()
        let (idle, updating) = (bench.controller(), bench.controller())
        if bothRestored {
            let signIn = bench.server.signIn("alice", expiresIn: 3600)
            try await bench.store.save(
                StoredSession(userInfo: signIn.userInfo, credentials: signIn.credentials), identifier: "alice")
            _ = try await idle.restore(identifier: "alice")
        } else {
            _ = try await idle.open(bench.server.signIn("alice", expiresIn: 3600))
        }
        _ = try await updating.restore(identifier: "alice")
        let events = EventProbe(idle)
        // A new sign-in elsewhere (another family), handed over to the updating controller.
        let handedOver = try #require(bench.server.signIn("alice", expiresIn: 3600).credentials)
        try await updating.updateCredentials(handedOver)
        #expect(try await idle.accessToken() == "alice~1/at-0")
        try await withHangGuard("the idle controller announces the credentials handed over") {
            await events.wait { $0.contains { if case .credentialsUpdated = $0.kind { true } else { false } } }
        }
        bench.time.advance(by: 3600)
        #expect(try await idle.accessToken() == "alice~1/at-1")
        #expect(try await updating.accessToken() == "alice~1/at-1")
        #expect(bench.server.presented == ["alice~1/rt-0"], "one refresh of the one family")
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice~1/rt-1")
        await idle.close()
        await updating.close()
    }

    // MARK: One backoff per user

    /// The token endpoint is down. Alice's expired token fails to refresh on one controller: every controller of hers
    /// backs off with it, failing at once with that failure instead of asking the failing server again, and once the
    /// backoff is over one refresh serves them all.
    @Test func aRefreshThatFailedOnOneControllerBacksOffEveryControllerOfTheUser() async throws {
        let bench = Bench()
        let (first, second) = try await bench.aliceOnTwoControllers()
        try await expectOneBackoffForTheUser(first, second, server: bench.server, time: bench.time) {
            // Nor does a controller that restores her now: its refresh is answered with the failure, unsent.
            let third = bench.controller()
            await #expect(throws: UserSessionError.self) { try await third.restore(identifier: "alice") }
            #expect(bench.server.calls == 1, "a restore asked the failing server again")
        }
    }

    /// Alice's token is near its expiry on two controllers; the first one's refresh in the background fails. The other
    /// serves its still-valid token through the backoff instead of asking the failing server again.
    @Test func aBackgroundRefreshThatFailedOnOneControllerKeepsTheOthersServingTheValidToken() async throws {
        let bench = Bench()
        let flights = FlightEndProbe()
        var configuration = bench.configuration
        configuration.observers = [flights]
        let first = UserSessionController(store: bench.store, refresher: bench.server, configuration: configuration)
        let second = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 3600))
        _ = try await second.restore(identifier: "alice")
        bench.server.setDown(true)
        // Inside the soft window: the first controller serves its token and refreshes in the background, which fails.
        bench.time.advance(by: 3400)
        #expect(try await first.accessToken() == "alice/at-0")
        try await withHangGuard("the first controller's background refresh fails") { await flights.ended.wait(for: 1) }
        // A refresh the other controller started now would wait in the server: none runs, and none was sent.
        bench.server.holdRefreshes()
        #expect(try await second.accessToken() == "alice/at-0")
        #expect(!second.gate.inspect { $0.flights.isRefreshing }, "another controller of the user asked again")
        bench.server.releaseRefreshes()
        #expect(bench.server.calls == 1)
        await first.close()
        await second.close()
    }
}
