import Foundation
import Testing
import UserSessionsTestSupport

@testable import UserSessions

/// Seams between the gates of several controllers of one process and the ledger they share, over plain
/// (non-coordinated) stores: store calls of one identifier that overlap (a write that lost its turn to a close's
/// deadline landing while another write holds the turn), a refusal written like any other write, and a refresh of
/// credentials another controller replaced. Ordered by gates, arrival counters and a manual clock; never by sleeping.
struct LedgerOverlapSeamTests {
    /// The one-owner seams' bench (a gated store, a token family server, a manual clock), with a registry.
    typealias Bench = LedgerOneOwnerSeamTests.Bench

    // MARK: A. A refused rotation the ledger writes later is written marked refused

    /// The store is down when a refresh rotates alice's token (rt-0 -> rt-1): the rotation stays unwritten in the
    /// ledger, which retries it. The family is revoked and the next refresh of rt-1 is refused (`invalid_grant`). The
    /// refusal is the identifier's newest record from then on: whatever writes what the ledger holds unwritten once
    /// the store is back (its write loop, the closing session's final flush) writes rt-1 marked refused, never as if
    /// it were usable, so a later restore in this process (or any other instance) fails at once and rt-1 is never
    /// presented again.
    @Test func aRefusedRotationTheWriteLoopWritesLaterIsNotPresentedAgain() async throws {
        let bench = Bench()
        let first = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        bench.time.advance(by: 20)
        #expect(try await first.accessToken() == "alice/at-1")
        #expect(bench.ledger.hasPendingWork("alice"))

        bench.server.revoke("alice")
        _ = try? await first.refreshCredentials()
        try await bench.waitUntilInvalid(first)
        #expect(bench.server.presented == ["alice/rt-0", "alice/rt-1"])

        bench.store.failWrites(false)
        try await bench.waitUntilTheLedgerLetsGo("the ledger writes what it held unwritten")

        let stored = try #require(await bench.store.stored("alice"))
        // The store must never hold the refused token as if it were usable.
        #expect(stored.credentials?.refreshToken != "alice/rt-1" || stored.refreshTokenRefused)

        await bench.expectRestoreRefusedWithoutPresenting(presented: ["alice/rt-0", "alice/rt-1"])
    }

    // MARK: B. A refusal the store could not record stays known until the store has it

    /// The rotation rt-1 is in the store. The family is revoked and the store goes down for writes: the refresh of
    /// rt-1 is refused, and writing the refusal fails. The refusal is an unwritten record like any other: the ledger
    /// keeps it (and alice's entry) after the invalidated session let her go, and writes it once the store is back,
    /// so a restore in this process fails at once instead of presenting rt-1 again.
    @Test func aRefusalTheStoreCouldNotRecordIsStillKnownToThisProcess() async throws {
        let bench = Bench()
        let first = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        bench.time.advance(by: 20)
        #expect(try await first.accessToken() == "alice/at-1")
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-1")

        bench.server.revoke("alice")
        bench.store.failWrites(true)
        _ = try? await first.refreshCredentials()
        try await bench.waitUntilInvalid(first)
        #expect(bench.server.presented == ["alice/rt-0", "alice/rt-1"])
        bench.store.failWrites(false)
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")

        await bench.expectRestoreRefusedWithoutPresenting(presented: ["alice/rt-0", "alice/rt-1"])
    }

    // MARK: B'. A refusal's record never replaces a record written elsewhere

    /// The ledger writes a refusal over the refused record or an older version of it only. Another instance signed
    /// alice in again over the plain store (a new family) before this process's refresh of her old token was
    /// refused: the refusal's write finds that record and leaves it as it is, unmarked, and nothing is left to write;
    /// this process still fails the refused token at once without presenting it.
    @Test func aRefusalNeverOverwritesARecordWrittenElsewhere() async throws {
        let store = InMemoryTokenStore()
        let ledger = CredentialsLedger(store: store)
        let user = UserInfo(id: "alice")
        let old = Credentials(accessToken: "alice/at-0", refreshToken: "alice/rt-0", expiresAt: nil)
        let elsewhere = StoredSession(
            userInfo: user,
            credentials: Credentials(accessToken: "alice~1/at-0", refreshToken: "alice~1/rt-0", expiresAt: nil))
        try await store.save(elsewhere, identifier: "alice")
        let fence = ledger.hold("alice")
        let invalidGrant = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let refused = await ledger.refresh(identifier: "alice", userInfo: user, credentials: old, fence: fence) {
            .failure(invalidGrant)
        }
        #expect(refused.failureCode == .refreshFailed)
        #expect(try await store.load(identifier: "alice") == elsewhere)
        #expect(!ledger.hasPendingWork("alice"), "a record written elsewhere stands: nothing is left to write")

        let again = await ledger.refresh(identifier: "alice", userInfo: user, credentials: old, fence: fence) {
            Issue.record("a refused token is never presented again")
            return .failure(invalidGrant)
        }
        #expect(again.failureCode == .refreshTokenRefused)
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    // MARK: C. A late write that lands while a sign-in's or a sign-out's own store call is under way

    /// A store whose next save or removal of an identifier can be held before it acts or after it acted (so it has
    /// changed the record but not returned yet): two store calls of one identifier then overlap in a known order.
    final class OverlapStore: ForwardingTokenStore {
        enum Moment { case before, after }
        let base = InMemoryTokenStore()
        var forwardedTo: any TokenStore { base }
        private let saveHolds = Locked<[String: [(AsyncGate, Moment)]]>([:])
        private let removeHolds = Locked<[String: [(AsyncGate, Moment)]]>([:])
        let savesHeld = ArrivalCounter()
        let removesHeld = ArrivalCounter()
        /// The refresh token of every record saved, in the order the saves landed.
        private let savedTokens = Locked<[String?]>([])
        var saved: [String?] { savedTokens.withLock { $0 } }

        func holdNextSave(of identifier: String, _ moment: Moment) -> AsyncGate {
            let gate = AsyncGate()
            saveHolds.withLock { $0[identifier, default: []].append((gate, moment)) }
            return gate
        }

        func holdNextRemove(of identifier: String, _ moment: Moment) -> AsyncGate {
            let gate = AsyncGate()
            removeHolds.withLock { $0[identifier, default: []].append((gate, moment)) }
            return gate
        }

        private static func take(_ holds: borrowing Locked<[String: [(AsyncGate, Moment)]]>, _ id: String)
            -> (AsyncGate, Moment)?
        {
            holds.withLock { holds -> (AsyncGate, Moment)? in
                guard var queue = holds[id], !queue.isEmpty else { return nil }
                let first = queue.removeFirst()
                holds[id] = queue
                return first
            }
        }

        func save(_ session: StoredSession, identifier: String) async throws {
            let hold = Self.take(saveHolds, identifier)
            if let (gate, moment) = hold, moment == .before {
                savesHeld.arrive()
                await gate.wait()
            }
            try await base.save(session, identifier: identifier)
            savedTokens.withLock { $0.append(session.credentials?.refreshToken) }
            if let (gate, moment) = hold, moment == .after {
                savesHeld.arrive()
                await gate.wait()
            }
        }

        func remove(identifier: String) async throws {
            let hold = Self.take(removeHolds, identifier)
            if let (gate, moment) = hold, moment == .before {
                removesHeld.arrive()
                await gate.wait()
            }
            try await base.remove(identifier: identifier)
            if let (gate, moment) = hold, moment == .after {
                removesHeld.arrive()
                await gate.wait()
            }
        }

        func stored(_ identifier: String) async -> StoredSession? { try? await base.load(identifier: identifier) }
    }

    struct OverlapBench {
        let time = ManualTime()
        let server: TokenFamilyServer
        let store = OverlapStore()
        let flights = FlightEndProbe()
        let configuration: UserSessionController.Configuration

        init() {
            let time = self.time
            server = TokenFamilyServer(now: { time.now })
            var configuration = UserSessionController.Configuration(
                storeTimeout: .milliseconds(300), clock: time.clock)
            configuration.observers = [flights]
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

        /// Alice's session in `controller` refreshes (rt-0 -> rt-1); its commit's store call hangs before writing,
        /// and the session closes: the close gives up on the write after two store timeouts (the write loses its
        /// turn and will land late). Returns the gate holding that write.
        func refreshWhoseWriteOutlivesTheClose(_ controller: UserSessionController) async throws -> AsyncGate {
            _ = try await controller.open(server.signIn("alice", expiresIn: 10))
            let late = store.holdNextSave(of: "alice", .before)
            time.advance(by: 20)
            let asked = Task { try await controller.accessToken() }
            await store.savesHeld.wait(for: 1)
            await controller.close()
            _ = await asked.result
            #expect(server.presented == ["alice/rt-0"])
            return late
        }
    }

    /// Alice's controller closes while its commit of rt-1 hangs in the store (the write loses its turn). Another
    /// controller of the process signs her in again (a new family, alice~1). The hung write lands while the sign-in's
    /// own save has written the new record but not returned: the two cannot be ordered (the fence changes only once
    /// the sign-in returned). The late write is repaired in the turn after the sign-in, which writes the sign-in's
    /// record again: the store ends with the new family, not the older family's rt-1.
    @Test func aLateWriteLandingDuringASignInsOwnWriteDoesNotReplaceTheSignIn() async throws {
        let bench = OverlapBench()
        let first = bench.controller()
        let late = try await bench.refreshWhoseWriteOutlivesTheClose(first)

        let signInSave = bench.store.holdNextSave(of: "alice", .after)
        let second = bench.controller()
        let signIn = bench.server.signIn("alice", expiresIn: 3600)
        let open = Task { try await second.open(signIn) }
        await bench.store.savesHeld.wait(for: 2)
        #expect(await bench.store.stored("alice")?.credentials == signIn.credentials)
        // The late write lands now, over the sign-in's record, and its flight ends.
        late.open()
        try await withHangGuard("the late commit ends") { await bench.flights.ended.wait(for: 1) }
        signInSave.open()
        _ = try await open.value
        let ledger = bench.ledger
        try await withHangGuard("the ledger has nothing left to write") {
            await bench.time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }

        #expect(try await second.accessToken() == "alice~1/at-0")
        let storedToken = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(storedToken == "alice~1/rt-0")
        #expect(await bench.store.stored("alice")?.credentials == signIn.credentials)
        await second.close()
        let restarted = bench.controller()
        _ = try? await restarted.restore(identifier: "alice")
        let restoredToken = try await restarted.accessToken()
        #expect(restoredToken == "alice~1/at-0")
    }

    /// The same late write lands while a sign-out's removal has removed the record but not returned (through the
    /// registry, for a user it holds no controller of). The repair runs in the turn after the sign-out, under the
    /// fence the sign-out made: the record is removed again, and a restore finds nothing.
    @Test func aLateWriteLandingDuringASignOutsRemovalDoesNotReviveTheRecord() async throws {
        let bench = OverlapBench()
        let first = bench.controller()
        let late = try await bench.refreshWhoseWriteOutlivesTheClose(first)

        let registry = try bench.registry()
        let removal = bench.store.holdNextRemove(of: "alice", .after)
        let signOut = Task { try await registry.closeAndClear(identifier: "alice") }
        await bench.store.removesHeld.wait(for: 1)
        #expect(await bench.store.stored("alice") == nil)
        late.open()
        try await withHangGuard("the late commit ends") { await bench.flights.ended.wait(for: 1) }
        removal.open()
        try await signOut.value
        try await withHangGuard("the ledger lets alice go") {
            await bench.time.advanceOnEachSleep { bench.ledger.entryCount > 0 }
        }

        let revived = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(revived == nil)
        await #expect(throws: UserSessionError(.noStoredSession, "")) {
            try await bench.controller().restore(identifier: "alice")
        }
    }

    // MARK: D. A refresh of credentials another controller replaced is not written over them

    /// Two controllers of one store hold alice (one signed her in, the other restored her). The first refreshes rt-0;
    /// while the server holds the answer, the second hands over credentials obtained elsewhere (`updateCredentials`),
    /// which land in the store and become the ledger's newest. The first controller's refresh is then of credentials
    /// an update replaced, knowledge only: its commit publishes it without writing it over the update, then takes the
    /// credentials handed over (the user keeps one family), and once both controllers closed the store holds them.
    @Test func aRefreshOfCredentialsAnotherControllerReplacedIsNotWrittenOverTheUpdate() async throws {
        let bench = Bench()
        let (first, second) = (bench.controller(), bench.controller())
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        _ = try await second.restore(identifier: "alice")
        bench.server.holdRefreshes()
        bench.time.advance(by: 20)
        let asked = Task { try await first.accessToken() }
        await bench.server.started.wait(for: 1)
        let handedOver = Credentials(
            accessToken: "alice/at-elsewhere", refreshToken: "alice/rt-elsewhere",
            expiresAt: bench.time.now.addingTimeInterval(3600), source: .signIn)
        try await second.updateCredentials(handedOver)
        #expect(await bench.store.stored("alice")?.credentials == handedOver)
        bench.server.releaseRefreshes()
        _ = await asked.result
        // The commit publishes the refresh's result (the caller gets it), then takes what replaced it.
        try await withHangGuard("the first controller takes the credentials handed over") {
            while first.gate.currentCredentials() != handedOver { await Task.yield() }
        }
        await first.close()
        await second.close()
        try await bench.waitUntilTheLedgerLetsGo("the ledger lets alice go")

        let storedToken = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(storedToken == "alice/rt-elsewhere")
        #expect(await bench.store.stored("alice")?.credentials == handedOver)
    }

    /// What replaced a refresh while it ran is handed to its holder only within one sign-in: when the user signed in
    /// again on another controller meanwhile, the first controller's session (of the earlier sign-in) is never handed
    /// the new sign-in's credentials, not when its refresh returns and not when it presents that refresh's result.
    @Test func aSessionOfAnEarlierSignInIsNeverHandedTheCredentialsOfTheNextOne() async throws {
        let bench = Bench()
        let first = bench.controller()
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        bench.server.holdRefreshes()
        bench.time.advance(by: 20)
        let asked = Task { try await first.accessToken() }
        await bench.server.started.wait(for: 1)
        let second = bench.controller()
        _ = try await second.open(bench.server.signIn("alice", expiresIn: 3600))
        bench.server.releaseRefreshes()
        #expect(try await asked.value == "alice/at-1")
        await first.gate.backgroundTasks.last?.value
        #expect(first.gate.currentCredentials()?.refreshToken == "alice/rt-1")
        // Its next refresh presents its own alice/rt-1 to the server: the ledger does not answer it with alice~1's.
        let refreshed = try await first.refreshCredentials()
        #expect(refreshed.refreshToken == "alice/rt-2")
        #expect(try await second.accessToken() == "alice~1/at-0")
        await first.close()
        await second.close()
    }

    /// Three controllers of one store hold alice's rt-0 (one signed her in, two restored her). The first refreshes it
    /// (rt-0 -> rt-1) and the second joins that refresh; the first's commit hangs in the store, holding the write turn,
    /// so the second's commit waits for the turn. Meanwhile the third, told of rt-1, is forced to refresh it
    /// (rt-1 -> rt-2), and its commit queues behind the second's. When the first's write lands, the second's commit
    /// holds a record the ledger knows newer credentials of: it publishes its result without writing it (rt-1 is saved
    /// once, never again over what came after it) and takes rt-2. Before, it wrote rt-1 a second time, and the ledger
    /// then wrote rt-2 again to repair the store.
    @Test func aCommitWhoseResultAnotherRefreshWentOnFromIsNotWritten() async throws {
        let bench = OverlapBench()
        let (first, second, third) = (bench.controller(), bench.controller(), bench.controller())
        _ = try await first.open(bench.server.signIn("alice", expiresIn: 10))
        _ = try await second.restore(identifier: "alice")
        _ = try await third.restore(identifier: "alice")
        let firstWrite = bench.store.holdNextSave(of: "alice", .before)
        bench.time.advance(by: 20)
        let ledger = bench.ledger
        let (firstAsked, secondAsked) = try await leadAndJoinAHeldRefresh(
            first, second, server: bench.server, ledger: ledger)
        bench.server.releaseRefreshes()
        await bench.store.savesHeld.wait(for: 1)
        try await withHangGuard("the second controller's commit waits for the turn") {
            while ledger.writersWaiting("alice") < 1 { await Task.yield() }
        }
        // The third controller was told of rt-1; forced, it refreshes rt-1, and its commit waits behind the second's.
        #expect(third.gate.currentCredentials()?.refreshToken == "alice/rt-1")
        let thirdForced = Task { try await third.refreshCredentials() }
        try await withHangGuard("the third controller's commit waits for the turn") {
            while ledger.writersWaiting("alice") < 2 { await Task.yield() }
        }
        #expect(bench.server.presented == ["alice/rt-0", "alice/rt-1"])

        firstWrite.open()
        #expect(try await firstAsked.value == "alice/at-1")
        #expect(try await secondAsked.value == "alice/at-1")
        #expect(try await thirdForced.value.refreshToken == "alice/rt-2")
        try await withHangGuard("the ledger has nothing left to write") {
            await bench.time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        // The second controller took what its refresh led to.
        #expect(second.gate.currentCredentials()?.refreshToken == "alice/rt-2")
        #expect(bench.store.saved.filter { $0 == "alice/rt-1" }.count == 1)
        #expect(await bench.store.stored("alice")?.credentials?.refreshToken == "alice/rt-2")
        #expect(bench.server.presented == ["alice/rt-0", "alice/rt-1"])
        await first.close()
        await second.close()
        await third.close()
    }

    // MARK: C'. The same late writes landing after the sign-in's or the sign-out's call returned

    /// The late write of the seams above landing after the sign-in returned, when the turn is free: judged as it
    /// lands, it has the sign-in's record written again.
    @Test func aLateWriteLandingAfterASignInIsRepaired() async throws {
        let bench = OverlapBench()
        let first = bench.controller()
        let late = try await bench.refreshWhoseWriteOutlivesTheClose(first)
        let second = bench.controller()
        let signIn = bench.server.signIn("alice", expiresIn: 3600)
        _ = try await second.open(signIn)
        late.open()
        try await withHangGuard("the late commit ends") { await bench.flights.ended.wait(for: 1) }
        let ledger = bench.ledger
        try await withHangGuard("the ledger has nothing left to write") {
            await bench.time.advanceOnEachSleep { ledger.hasPendingWork("alice") }
        }
        let storedToken = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(storedToken == "alice~1/rt-0")
    }

    /// The same landing after the sign-out returned: the record is removed again.
    @Test func aLateWriteLandingAfterASignOutIsRemovedAgain() async throws {
        let bench = OverlapBench()
        let first = bench.controller()
        let late = try await bench.refreshWhoseWriteOutlivesTheClose(first)
        let registry = try bench.registry()
        try await registry.closeAndClear(identifier: "alice")
        late.open()
        try await withHangGuard("the late commit ends") { await bench.flights.ended.wait(for: 1) }
        try await withHangGuard("the ledger lets alice go") {
            await bench.time.advanceOnEachSleep { bench.ledger.entryCount > 0 }
        }
        let revived = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(revived == nil)
    }

    // MARK: F. A late write that lands while another controller's commit is in the store

    /// Alice's first controller closes while its commit of rt-1 hangs in the store (the write loses its turn). A
    /// second controller restores her (the ledger answers rt-1 over the spent rt-0 the store holds) and forces a
    /// refresh: rt-1 -> rt-2, whose commit writes rt-2 in the turn. The late rt-1 lands while that save has written
    /// rt-2 but not returned. The repair runs in the turn after the commit, once the commit's landing is known, and
    /// writes rt-2 again: the store ends with rt-2, and a restore after the ledger let alice go presents no spent
    /// token (no reuse revokes the family).
    @Test func aLateWriteLandingDuringAnotherControllersCommitDoesNotLeaveASpentTokenStored() async throws {
        let bench = OverlapBench()
        let first = bench.controller()
        let late = try await bench.refreshWhoseWriteOutlivesTheClose(first)

        let second = bench.controller()
        _ = try await second.restore(identifier: "alice")
        #expect(try await second.accessToken() == "alice/at-1")
        let commit = bench.store.holdNextSave(of: "alice", .after)
        let refreshed = Task { try await second.refreshCredentials() }
        await bench.store.savesHeld.wait(for: 2)
        late.open()
        try await withHangGuard("the late commit ends") { await bench.flights.ended.wait(for: 1) }
        commit.open()
        #expect(try await refreshed.value.refreshToken == "alice/rt-2")
        await second.close()
        let ledger = bench.ledger
        try await withHangGuard("the ledger lets alice go") {
            await bench.time.advanceOnEachSleep { ledger.entryCount > 0 }
        }

        let storedToken = await bench.store.stored("alice")?.credentials?.refreshToken
        #expect(storedToken == "alice/rt-2")
        let restarted = bench.controller()
        _ = try? await restarted.restore(identifier: "alice")
        bench.time.advance(by: 3600)
        _ = try? await restarted.accessToken()
        #expect(bench.server.reuses == 0)
    }
}

extension Result where Failure == UserSessionError {
    /// The code of the error this result failed with, if it failed.
    fileprivate var failureCode: UserSessionError.Code? {
        if case .failure(let error) = self { return error.code }
        return nil
    }
}

extension LedgerOneOwnerSeamTests.Bench {
    /// A restore of alice fails at once with `refreshTokenRefused`; when it opens a session after all, the session is
    /// asked for a token after its expiry, so that a refused token it holds would be presented. Either way the server
    /// saw only `presented`.
    func expectRestoreRefusedWithoutPresenting(
        presented: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let restarted = controller()
        await #expect(throws: UserSessionError(.refreshTokenRefused, ""), sourceLocation: sourceLocation) {
            try await restarted.restore(identifier: "alice")
        }
        if restarted.session.state == .opened {
            time.advance(by: 3600)
            _ = try? await restarted.accessToken()
        }
        #expect(
            server.presented == presented, "a refused token is never presented again", sourceLocation: sourceLocation)
    }

    func registry() throws -> UserSessionRegistry {
        try UserSessionRegistry(
            store: store, refresher: server, configuration: configuration, maximumOpenSessions: nil, idleTimeout: nil)
    }

    func waitUntilInvalid(_ controller: UserSessionController) async throws {
        try await withHangGuard("the session is invalidated") {
            while controller.session.state != .invalid { await Task.yield() }
        }
    }
}
