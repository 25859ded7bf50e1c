import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// Seams between the gate and the ledger over coordinated stores: several controllers of one store instance, and
/// several store instances (standing in for processes, each with its own ledger) over the same records. Ordered by
/// gates, arrival counters and a manual clock; never by sleeping.
struct CoordinatedLedgerSeamTests {
    static func configuration(_ time: ManualTime, observers: [any UserSessionObserver] = [])
        -> UserSessionController.Configuration
    {
        var configuration = UserSessionController.Configuration(storeTimeout: .milliseconds(500), clock: time.clock)
        configuration.observers = observers
        return configuration
    }

    static func scratch() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appending(
            path: "coordinated-ledger-seams-\(UUID().uuidString)", directoryHint: .isDirectory)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Alice's sessions over one scripted coordinated store, refreshed by a token family server on a manual clock;
    /// the flights' ends are counted.
    struct Bench {
        let time = ManualTime()
        let server: TokenFamilyServer
        let store = ScriptedCoordinatedStore()
        let flights = FlightEndProbe()
        let configuration: UserSessionController.Configuration

        init() {
            let time = self.time
            server = TokenFamilyServer(now: { time.now })
            configuration = CoordinatedLedgerSeamTests.configuration(time, observers: [flights])
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

        /// Advances the clock at each sleep until the ledger has nothing left to do for alice.
        func waitUntilTheLedgerIsDone() async throws {
            let (ledger, time) = (CredentialsLedger.shared(for: store), self.time)
            try await withHangGuard("the ledger is done with alice") {
                await time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
            }
        }
    }

    // MARK: Adopted credentials are the ledger's newest

    /// An adoption tells the ledger what the store holds. The session adopts a rotation another process stored (its
    /// leased flight reads the record first and finds it newer), then refreshes the adopted credentials and closes
    /// while that refresh is at the server. The stale flight's rotation is the ledger's to write: it refreshed the
    /// identifier's newest credentials, so the ledger writes it and the store never keeps the refresh token the
    /// server just spent (which the next restore would present again, revoking the family).
    @Test func aRefreshOfAdoptedCredentialsThatOutlivesItsSessionReachesTheStore() async throws {
        let bench = Bench()
        let (time, server, store, flights) = (bench.time, bench.server, bench.store, bench.flights)
        let controller = bench.controller()
        let signIn = server.signIn("alice", expiresIn: 3600)
        _ = try await controller.open(signIn)

        // Another process rotates alice's credentials (under the lease) and stores them.
        let rotated = try await server.refresh(try #require(signIn.credentials))
        store.writeElsewhere(StoredSession(userInfo: UserInfo(id: "alice"), credentials: rotated), identifier: "alice")
        // This process's forced refresh reads the record under the lease and adopts it: nothing is sent.
        #expect(try await controller.refreshCredentials().refreshToken == "alice/rt-1")
        #expect(server.calls == 1)

        // The next refresh presents the adopted alice/rt-1; the session closes while it is at the server.
        server.holdRefreshes()
        let ended = flights.ended.count
        let asked = Task { try await controller.refreshCredentials() }
        await server.started.wait(for: 2)
        await controller.close()
        _ = await asked.result
        server.releaseRefreshes()
        try await withHangGuard("the stale flight ends") { await flights.ended.wait(for: ended + 1) }
        try await bench.waitUntilTheLedgerIsDone()

        // The server spent alice/rt-1: the store must hold alice/rt-2.
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice/rt-2")

        // What follows when it does not: the next restore presents the spent token, and the family is revoked.
        let restarted = bench.controller()
        _ = try await restarted.restore(identifier: "alice")
        time.advance(by: 7200)
        _ = try? await restarted.accessToken()
        #expect(server.reuses == 0)
        await restarted.close()
    }

    /// The same guarantee across two processes sharing a file store directory (two ``FileTokenStore`` instances,
    /// each with its own ledger, sharing the `flock` lease): B refreshes and stores the rotation; A's leased flight
    /// adopts it, then A refreshes again and closes while that refresh is at the server. A's ledger writes that
    /// rotation, so B's next leased flight reads it and never presents the refresh token A spent: one refresh token
    /// is sent once across the instances.
    @Test func twoFileStoreInstancesNeverPresentOneRefreshTokenTwice() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let time = ManualTime()
        let server = TokenFamilyServer(now: { time.now })
        let flightsA = FlightEndProbe()
        let storeA = FileTokenStore(directory: directory)
        let storeB = FileTokenStore(directory: directory)
        let a = UserSessionController(
            store: storeA, refresher: server, configuration: Self.configuration(time, observers: [flightsA]))
        let b = UserSessionController(store: storeB, refresher: server, configuration: Self.configuration(time))
        _ = try await a.open(server.signIn("alice", expiresIn: 3600))
        _ = try await b.restore(identifier: "alice")

        // B refreshes first: alice/rt-0 → alice/rt-1, stored.
        #expect(try await b.refreshCredentials().refreshToken == "alice/rt-1")
        // A's forced refresh finds that newer record under the lease and adopts it.
        #expect(try await a.refreshCredentials().refreshToken == "alice/rt-1")
        #expect(server.calls == 1)

        // A refreshes alice/rt-1 and closes while the refresh is at the server (holding the lease).
        server.holdRefreshes()
        let ended = flightsA.ended.count
        let asked = Task { try await a.refreshCredentials() }
        await server.started.wait(for: 2)
        await a.close()
        _ = await asked.result
        server.releaseRefreshes()
        try await withHangGuard("A's stale flight ends") { await flightsA.ended.wait(for: ended + 1) }
        let ledgerA = CredentialsLedger.shared(for: storeA)
        try await withHangGuard("A's ledger is done with alice") {
            await time.advanceOnEachSleep { ledgerA.hasPendingWork("alice") }
        }
        #expect(try await storeB.load(identifier: "alice")?.credentials?.refreshToken == "alice/rt-2")

        // B's next refresh takes the lease and reads the record first.
        _ = try? await b.refreshCredentials()
        #expect(server.reuses == 0)
        #expect(server.presented.filter { $0 == "alice/rt-1" }.count == 1)
        await b.close()
    }

    /// The control for the seams above: the session refreshes the credentials it signed in with and closes while
    /// that refresh is at the server; the ledger writes the rotation.
    @Test func aRefreshOfSignedInCredentialsThatOutlivesItsSessionReachesTheStore() async throws {
        let bench = Bench()
        let (server, store, flights) = (bench.server, bench.store, bench.flights)
        let controller = bench.controller()
        _ = try await controller.open(server.signIn("alice", expiresIn: 3600))
        server.holdRefreshes()
        let asked = Task { try await controller.refreshCredentials() }
        await server.started.wait(for: 1)
        await controller.close()
        _ = await asked.result
        server.releaseRefreshes()
        try await withHangGuard("the stale flight ends") { await flights.ended.wait(for: 1) }
        try await bench.waitUntilTheLedgerIsDone()
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice/rt-1")
    }

    /// A refusal of adopted credentials is recorded: the session adopted a rotation another process stored, then the
    /// server refuses the adopted refresh token (`invalid_grant`). The refusal is of the identifier's newest
    /// credentials, so it is recorded in the record, and a later restore fails at once without presenting the
    /// refused token again (Fleets.md: "the refusal is recorded once, in the row, by the first instance that gets
    /// it, and in that process's ledger: every later restore ... throws refreshTokenRefused at once, without
    /// contacting the authorization server").
    @Test func aRefusalOfAdoptedCredentialsIsRecordedInTheRecord() async throws {
        let bench = Bench()
        let (time, server, store) = (bench.time, bench.server, bench.store)
        let controller = bench.controller()
        let signIn = server.signIn("alice", expiresIn: 3600)
        _ = try await controller.open(signIn)
        let rotated = try await server.refresh(try #require(signIn.credentials))
        store.writeElsewhere(StoredSession(userInfo: UserInfo(id: "alice"), credentials: rotated), identifier: "alice")
        #expect(try await controller.refreshCredentials().refreshToken == "alice/rt-1")

        // The family is revoked (by an operator, say); this session's next refresh is refused.
        server.revoke("alice")
        let refused = await Result(awaiting: { try await controller.refreshCredentials() })
        #expect(refused.errorCode == .refreshFailed)
        #expect(server.calls == 2)
        try await withHangGuard("the refused session is closed") {
            while controller.session.state == .opened { await Task.yield() }
        }
        #expect(store.record("alice")?.session.refreshTokenRefused == true)

        // A later restore (this process, or any other) must fail at once without presenting alice/rt-1 again.
        time.advance(by: 7200)
        let restarted = bench.controller()
        let restored = await Result(awaiting: { try await restarted.restore(identifier: "alice") })
        #expect(restored.errorCode == .refreshTokenRefused)
        #expect(server.calls == 2, "the refused alice/rt-1 was presented again")
        await restarted.close()
    }

    /// A refusal another process recorded is never presented again here either: that process's refresh was refused
    /// (`invalid_grant`) and it marked the record refused. This session still holds alice/rt-0; its next leased flight
    /// reads the record, finds the refusal, and fails at once with ``UserSessionError/Code/refreshTokenRefused`` (the
    /// session is invalidated), without contacting the server. The refused token is alice/rt-0 itself, or a newer
    /// rotation the other process made of it (and stored) before its next refresh was refused.
    @Test(arguments: [false, true])
    func aRefusalAnotherProcessRecordedIsNotPresentedAgainByASessionStillHoldingTheToken(_ ofARotation: Bool)
        async throws
    {
        let bench = Bench()
        let (server, store) = (bench.server, bench.store)
        let controller = bench.controller()
        let signIn = server.signIn("alice", expiresIn: 3600)
        _ = try await controller.open(signIn)
        var refused = try #require(signIn.credentials)
        if ofARotation {
            refused = try await server.refresh(refused)
            server.revoke("alice")
        }
        store.writeElsewhere(
            StoredSession(userInfo: UserInfo(id: "alice"), credentials: refused, refreshTokenRefused: true),
            identifier: "alice")

        let refreshed = await Result(awaiting: { try await controller.refreshCredentials() })
        #expect(refreshed.errorCode == .refreshTokenRefused)
        #expect(server.presented == (ofARotation ? ["alice/rt-0"] : []), "a refused token was presented again")
        try await withHangGuard("the refused session is invalidated") {
            while controller.session.state == .opened { await Task.yield() }
        }
        // The record keeps the refusal: nothing of this process wrote over it.
        #expect(store.record("alice")?.session.refreshTokenRefused == true)
    }

    /// Over a coordinated store the ledger tells no controller of another's refresh: each takes it from the record,
    /// with the revision its own conditional writes need. A controller idle while another refreshes the user more
    /// than the rotations window's 16 times adopts the newest record at its next refresh (its leased flight reads the
    /// record first) and never presents its spent token.
    @Test func anIdleControllerOverACoordinatedStoreAdoptsTheNewestRecordHoweverManyRefreshesAgo() async throws {
        let bench = Bench()
        let (time, server, store) = (bench.time, bench.server, bench.store)
        let (busy, idle) = try await bench.aliceOnTwoControllers()
        let refreshes = CredentialsLedger.Entry.rotationWindow + 4
        for round in 1...refreshes {
            time.advance(by: 3600)
            #expect(try await busy.accessToken() == "alice/at-\(round)")
        }
        #expect(idle.gate.currentCredentials()?.refreshToken == "alice/rt-0", "nobody is told over a coordinated store")
        #expect(try await idle.accessToken() == "alice/at-\(refreshes)")
        #expect(server.calls == refreshes)
        #expect(server.reuses == 0)
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice/rt-\(refreshes)")
        await busy.close()
        await idle.close()
    }

    /// Over a coordinated store too, the server's refusal of the user's refresh token on one controller ends the
    /// session of every other controller of the process holding it, at once: a refusal needs no revision.
    @Test func aRefusalOnOneControllerEndsTheSessionOfAnIdleControllerOverACoordinatedStoreToo() async throws {
        let bench = Bench()
        let (server, store) = (bench.server, bench.store)
        let (refusing, idle) = try await bench.aliceOnTwoControllers()
        let events = EventProbe(idle)
        server.revoke("alice")
        await #expect(throws: UserSessionError.self) { try await refusing.refreshCredentials() }
        try await withHangGuard("the idle controller's session ends") {
            await events.wait { $0.contains { $0.kind == .invalidated(.credentialsRevoked) } }
        }
        #expect(idle.session.state == .invalid)
        #expect(server.calls == 1, "the refused token was presented again")
        #expect(store.record("alice")?.session.refreshTokenRefused == true)
        await refusing.close()
        await idle.close()
    }

    /// Another process had alice's refresh token refused for good and marked her record refused: the store's change
    /// notice ends her session here at once, as a refusal on a controller of this process does, instead of serving her
    /// until its next refresh finds the mark. Nothing is presented to the server from here.
    @Test func aRefusalAnotherProcessRecordedEndsTheSessionAsSoonAsTheStoreReportsIt() async throws {
        let bench = Bench()
        let (server, store) = (bench.server, bench.store)
        let controller = bench.controller()
        let signIn = server.signIn("alice", expiresIn: 3600)
        _ = try await controller.open(signIn)
        await store.subscriptions.wait(for: 1)
        let events = EventProbe(controller)
        let refused = StoredSession(userInfo: UserInfo(id: "alice"), credentials: signIn.credentials)
        store.writeElsewhere(refused.markedRefused(), identifier: "alice", notify: true)
        try await withHangGuard("the session ends on the store's notice") {
            await events.wait { $0.contains { $0.kind == .invalidated(.credentialsRevoked) } }
        }
        #expect(controller.session.state == .invalid)
        await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
        #expect(server.calls == 0, "nothing was presented from this process")
        #expect(store.record("alice")?.session.refreshTokenRefused == true, "the mark stays")
        await controller.close()
    }

    /// The same when the other process had rotated alice's credentials before their refusal: the record holds newer
    /// credentials than this session's, marked refused. This session's refresh token is spent and the family's newest
    /// refused, so the session ends too, and so does every other controller of this process holding her.
    @Test func aRefusalOfCredentialsAnotherProcessRotatedEndsEverySessionOfTheUserHere() async throws {
        let bench = Bench()
        let (server, store) = (bench.server, bench.store)
        let (first, second) = try await bench.aliceOnTwoControllers()
        await store.subscriptions.wait(for: 2)
        let (firstEvents, secondEvents) = (EventProbe(first), EventProbe(second))
        let held = try #require(first.credentials)
        let rotated = try await server.refresh(held)
        let presented = server.calls
        store.writeElsewhere(
            StoredSession(userInfo: UserInfo(id: "alice"), credentials: rotated).markedRefused(), identifier: "alice",
            notify: true)
        try await withHangGuard("both sessions end on the store's notice") {
            await firstEvents.wait { $0.contains { $0.kind == .invalidated(.credentialsRevoked) } }
            await secondEvents.wait { $0.contains { $0.kind == .invalidated(.credentialsRevoked) } }
        }
        #expect(first.session.state == .invalid && second.session.state == .invalid)
        #expect(server.calls == presented, "nothing was presented from this process")
        #expect(store.record("alice")?.session.refreshTokenRefused == true)
        await first.close()
        await second.close()
    }

    /// A sign-out on one controller closes every other controller of the process holding the user over a
    /// coordinated store as well, whether or not the store reports the removal to the instance that made it (this
    /// one does not).
    @Test func aSignOutOnOneControllerClosesAnotherOverACoordinatedStoreToo() async throws {
        let bench = Bench()
        let store = bench.store
        let (signingOut, other) = try await bench.aliceOnTwoControllers()
        let events = EventProbe(other)
        try await signingOut.closeAndClear()
        try await withHangGuard("the other controller's session closes") {
            await events.wait { $0.contains { $0.kind == .closed(.clearedElsewhere) } }
        }
        #expect(other.session.state == .closed)
        #expect(store.record("alice") == nil)
        await other.close()
    }

    /// Another process signed the user out: it removed her record without a notice this process saw. The first
    /// controller here to read the store finds no record and closes; every other controller of the process holding
    /// her closes with it, instead of serving her until its own next read of the store.
    @Test func aSignOutOneControllerFindsInTheStoreClosesTheOthersHoldingTheUser() async throws {
        let bench = Bench()
        let (server, store) = (bench.server, bench.store)
        let (reading, other) = try await bench.aliceOnTwoControllers()
        let (events, readerEvents) = (EventProbe(other), EventProbe(reading))
        store.removeElsewhere("alice")
        await #expect(throws: UserSessionError.self) { try await reading.refreshCredentials() }
        try await withHangGuard("both sessions close") {
            await readerEvents.wait { $0.contains { $0.kind == .closed(.clearedElsewhere) } }
            await events.wait { $0.contains { $0.kind == .closed(.clearedElsewhere) } }
        }
        #expect(other.session.state == .closed)
        #expect(server.calls == 0)
        #expect(store.record("alice") == nil)
    }

    // MARK: A leased flight acts on what it read in the write turn

    /// A leased flight reads the record again in the write turn before it adopts. A first sign-in over a
    /// coordinated store (nothing stored yet): while its opening write holds the identifier's write turn, the
    /// session's credentials are already served, and a token request after their expiry starts a refresh, whose
    /// leased flight reads no record yet and waits for the turn. Once the sign-in landed, the flight reads the
    /// sign-in's record in the turn and refreshes: the user is not taken for signed out (a new fence dropping the
    /// session's writes) and the fresh session is not closed as `clearedElsewhere`.
    @Test func aRefreshDuringAFirstSignInDoesNotTakeTheMissingRecordForASignOut() async throws {
        let bench = Bench()
        let (time, server, store) = (bench.time, bench.server, bench.store)
        let controller = bench.controller()
        let probe = EventProbe(controller)
        // The opening's write reads the revision first: that read is held.
        let read = AsyncGate()
        store.pauseNextRead(until: read)
        let open = Task { try await controller.open(server.signIn("alice", expiresIn: 10)) }
        await store.pausedReads.wait(for: 1)
        // The credentials are served while the sign-in is written; they expire, and a caller asks for a token.
        time.advance(by: 20)
        let asked = Task { try await controller.accessToken() }
        let ledger = CredentialsLedger.shared(for: store)
        try await withHangGuard("the refresh waits for the write turn") {
            while ledger.writersWaiting("alice") < 1 { await Task.yield() }
        }
        read.open()
        _ = try await open.value
        let token = await asked.result
        #expect(store.record("alice") != nil, "the sign-in's record is stored")
        #expect((try? token.get()) == "alice/at-1")
        let again = await Result(awaiting: { try await controller.accessToken() })
        #expect(again.isSuccess, "the freshly opened session serves tokens")
        #expect(!probe.kinds.contains(.closed(.clearedElsewhere)))
        await controller.close()
    }

    /// The same read before the turn, where it would fence a sign-in: alice was signed out elsewhere (her record
    /// removed) and signs in again here (a second controller of the same store). A refresh of the first
    /// controller's session, still open here, reads "no record" while the sign-in's write is in progress and waits
    /// for the write turn. Read again in the turn, the sign-in's record stands: the ledger's fence is not renewed as
    /// for a sign-out, the new session's rotations reach the store, and no restore presents a spent token.
    @Test func aStaleNoRecordReadDoesNotFenceTheSignInThatFollowedIt() async throws {
        let bench = Bench()
        let (time, server, store) = (bench.time, bench.server, bench.store)
        let (first, second) = (bench.controller(), bench.controller())
        _ = try await first.open(server.signIn("alice", expiresIn: 10))
        // Signed out elsewhere (no notification reaches this process).
        store.removeElsewhere("alice")

        // alice signs in again here; the sign-in's write reads the revision first, and that read is held.
        let read = AsyncGate()
        store.pauseNextRead(until: read)
        let signIn = server.signIn("alice", expiresIn: 3600)
        let open = Task { try await second.open(signIn) }
        await store.pausedReads.wait(for: 1)
        // The first session's token expires; its refresh reads the record (none) and waits for the write turn.
        time.advance(by: 20)
        let asked = Task { try await first.accessToken() }
        let ledger = CredentialsLedger.shared(for: store)
        try await withHangGuard("the first session's refresh waits for the write turn") {
            while ledger.writersWaiting("alice") < 1 { await Task.yield() }
        }
        read.open()
        _ = try await open.value
        _ = await asked.result
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice~1/rt-0")

        // The new session refreshes: its rotation must reach the store.
        time.advance(by: 3600)
        #expect(try await second.accessToken() == "alice~1/at-1")
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice~1/rt-1")
        await second.close()
        await first.close()
        try await withHangGuard("the ledger is done with alice") {
            await time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        #expect(store.record("alice")?.session.credentials?.refreshToken == "alice~1/rt-1")

        let restarted = bench.controller()
        _ = try? await restarted.restore(identifier: "alice")
        time.advance(by: 7200)
        _ = try? await restarted.accessToken()
        #expect(server.reuses == 0)
        await restarted.close()
    }

    // MARK: A server that does not rotate, and a write the coordinated store refused

    /// Over a coordinated store, the ledger's retry of a refresh result the store refused writes over a record that
    /// holds credentials a refresh known here replaced, also when the server did not rotate the refresh token (the
    /// record holds the same refresh token with the expired access token): the store gets the refresh's result, as
    /// over a plain store, and another instance does not refresh again.
    @Test func theLedgerWritesANonRotatingRefreshTheCoordinatedStoreRefusedOnce() async throws {
        let time = ManualTime()
        let server = NonRotatingServer(now: { time.now })
        let store = ScriptedCoordinatedStore()
        let configuration = Self.configuration(time)
        let controller = UserSessionController(store: store, refresher: server, configuration: configuration)
        _ = try await controller.open(server.signIn("alice", expiresIn: 60))
        store.failNextSaves(1)
        #expect(try await controller.refreshCredentials().accessToken == "alice/at-1")
        #expect(store.record("alice")?.session.credentials?.accessToken == "alice/at-0")

        // The store is back; the ledger retries on its schedule.
        let ledger = CredentialsLedger.shared(for: store)
        try await withHangGuard("the ledger's retry") {
            await time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        #expect(store.record("alice")?.session.credentials?.accessToken == "alice/at-1")

        // The session closes; another instance restores from the store once alice/at-0 expired (alice/at-1 is
        // valid for most of an hour still).
        await controller.close()
        time.advance(by: 60)
        let elsewhere = UserSessionController(store: store, refresher: server, configuration: configuration)
        _ = try await elsewhere.restore(identifier: "alice")
        #expect(try await elsewhere.accessToken() == "alice/at-1")
        #expect(server.calls == 1, "one refresh per expiry")
        await elsewhere.close()
    }

    /// The control: over a plain store the same retry lands.
    @Test func theLedgerWritesANonRotatingRefreshAPlainStoreRefusedOnce() async throws {
        let time = ManualTime()
        let server = NonRotatingServer(now: { time.now })
        let store = OutageStore()
        let configuration = Self.configuration(time)
        let controller = UserSessionController(store: store, refresher: server, configuration: configuration)
        _ = try await controller.open(server.signIn("alice", expiresIn: 3600))
        store.failWrites(true)
        #expect(try await controller.refreshCredentials().accessToken == "alice/at-1")
        store.failWrites(false)
        let ledger = CredentialsLedger.shared(for: store)
        try await withHangGuard("the ledger's retry") {
            await time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        #expect(try await store.base.load(identifier: "alice")?.credentials?.accessToken == "alice/at-1")
        await controller.close()
    }

    // MARK: One backoff per user, under the lease too

    /// Over a coordinated store a refresh runs under the store's lease, and still through the ledger: a transient
    /// failure on one controller backs off the other controller of the user too, which fails at once instead of
    /// taking the lease and asking the failing server again.
    @Test func aTransientFailureUnderTheLeaseBacksOffEveryControllerOfTheUser() async throws {
        let bench = Bench()
        let (first, second) = try await bench.aliceOnTwoControllers()
        try await expectOneBackoffForTheUser(first, second, server: bench.server, time: bench.time)
    }
}

extension Result where Failure == any Error {
    /// The outcome of `body`: what it returned, or what it threw.
    fileprivate init(awaiting body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
