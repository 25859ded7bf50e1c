import Foundation
import Testing

@testable import UserSessions

/// The ledger is the one writer that retries: a write of a session's own credentials that the store refused is
/// kept as unwritten in the identifier's entry and retried on the failed-write schedule by the ledger's write loop,
/// whether or not a controller still holds the identifier; a late write that landed over newer credentials has them
/// written again at once, and one that landed after a sign-out is removed again, under the sign-out's fence. Ordered
/// by a manual clock (the loop sleeps on it), the write turn and arrival counters.
struct LedgerRetryTests {
    static let user = UserInfo(id: "alice")

    static func session(_ tag: String) -> StoredSession {
        StoredSession(
            userInfo: user,
            credentials: Credentials(accessToken: "at-\(tag)", refreshToken: "rt-\(tag)", expiresAt: nil))
    }

    struct Bench {
        let time = ManualTime()
        let store = GatedStore()
        let ledger: CredentialsLedger
        let failures = ArrivalCounter()

        init() { ledger = CredentialsLedger(store: store) }

        /// The schedule of the session writing: the configuration's retry delays on the manual clock, each failed
        /// retry counted.
        var schedule: CredentialsLedger.Schedule {
            let failures = self.failures
            return CredentialsLedger.Schedule(
                clock: time.clock, policy: UserSessionController.Configuration().refreshPolicy.refresh
            ) { _ in failures.arrive() }
        }

        /// Leads a refresh of alice from `from` to `to` under `fence` (recorded as unwritten).
        func refresh(from: String, to: String, fence: UInt64) async {
            let result = await ledger.refresh(
                identifier: "alice", userInfo: LedgerRetryTests.user,
                credentials: Credentials(accessToken: "at-\(from)", refreshToken: "rt-\(from)", expiresAt: nil),
                fence: fence
            ) { .success(Credentials(accessToken: "at-\(to)", refreshToken: "rt-\(to)", expiresAt: nil)) }
            #expect((try? result.get())?.refreshToken == "rt-\(to)")
        }

        /// A session's write of `session` under `fence` that the store refused.
        func writeFailed(_ session: StoredSession, fence: UInt64) async throws {
            let turn = try #require(await ledger.enterWriteTurn("alice", fence: fence)).token
            ledger.writeFinished("alice", fence: fence, wrote: nil, failed: session, schedule: schedule, turn: turn)
            ledger.leaveWriteTurn("alice", token: turn)
        }

        /// Holds alice, refreshes her `rt-0` to `rt-1` and fails that rotation's write with the store down; returns
        /// the fence and the manual clock's sleeps once the write loop waits for its first retry.
        func failTheFirstWrite() async throws -> (fence: UInt64, sleeps: Int) {
            let fence = ledger.hold("alice")
            await refresh(from: "0", to: "1", fence: fence)
            store.failWrites(true)
            let sleeps = time.sleeps.count
            try await writeFailed(LedgerRetryTests.session("1"), fence: fence)
            try await withHangGuard("the first retry's wait") { await time.sleeps.wait(for: sleeps + 1) }
            return (fence, sleeps + 1)
        }

        /// Holds alice; a write of hers overruns a close's deadline and loses the write turn; then she signs out.
        /// Returns the fence and the turn of the write left behind.
        func signOutLeavingAWriteBehind() async throws -> (fence: UInt64, late: UInt64) {
            let fence = ledger.hold("alice")
            let late = try #require(await ledger.enterWriteTurn("alice", fence: fence)).token
            ledger.abandonWriteTurn("alice", token: late)
            try await ledger.signOut("alice") { try await store.remove(identifier: "alice") }
            return (fence, late)
        }

        /// The write of `session` under `fence` that lost its turn `turn` lands now, over newer credentials: waits
        /// until the ledger wrote `newest` again and has nothing left to do.
        func landLate(_ session: StoredSession, fence: UInt64, turn: UInt64, rewriting newest: StoredSession)
            async throws
        {
            try await store.save(session, identifier: "alice")
            ledger.writeFinished("alice", fence: fence, wrote: session, schedule: schedule, turn: turn)
            ledger.leaveWriteTurn("alice", token: turn)
            let (store, ledger) = (self.store, self.ledger)
            try await withHangGuard("the newest is written again") {
                while await store.stored("alice") != newest || ledger.hasPendingWork("alice") { await Task.yield() }
            }
            #expect(await store.stored("alice") == newest)
        }

        /// Lets alice go and waits until the ledger dropped her entry.
        func releaseAndWaitUntilDropped() async throws {
            ledger.release("alice")
            let ledger = self.ledger
            try await withHangGuard("the entry is dropped") { while ledger.entryCount > 0 { await Task.yield() } }
        }

        /// Waits until the store holds `tag`'s credentials for alice.
        func waitUntilStored(_ tag: String) async throws {
            let store = self.store
            try await withHangGuard("alice's record holds rt-\(tag)") {
                while await store.stored("alice")?.credentials?.refreshToken != "rt-\(tag)" { await Task.yield() }
            }
        }
    }

    @Test func aFailedWriteIsRetriedByTheLedgerWhileTheSessionStillHoldsTheIdentifier() async throws {
        let bench = Bench()
        let (_, sleeps) = try await bench.failTheFirstWrite()
        #expect(bench.ledger.unwrittenSession("alice") == Self.session("1"))
        #expect(bench.ledger.hasPendingWork("alice"))

        // The first retry, within the initial delay, fails too and is reported; the next waits twice as long.
        bench.time.advance(by: 1)
        try await withHangGuard("the first retry's failure") { await bench.failures.wait(for: 1) }
        try await withHangGuard("the second retry's wait") { await bench.time.sleeps.wait(for: sleeps + 1) }
        bench.store.failWrites(false)
        bench.time.advance(by: 2)
        try await bench.waitUntilStored("1")

        // Written while alice is still held: nothing is left, and the entry lives only as long as its holder.
        let ledger = bench.ledger
        try await withHangGuard("the write loop ends") { while ledger.hasPendingWork("alice") { await Task.yield() } }
        #expect(bench.ledger.unwrittenSession("alice") == nil)
        #expect(bench.failures.count == 1)
        try await bench.releaseAndWaitUntilDropped()
    }

    @Test func aRetryWritesTheNewestCredentialsNotTheOnesThatFailedFirst() async throws {
        let bench = Bench()
        let (fence, _) = try await bench.failTheFirstWrite()
        // A newer refresh while the retry waits; its write fails too.
        await bench.refresh(from: "1", to: "2", fence: fence)
        try await bench.writeFailed(Self.session("2"), fence: fence)
        // The first write's late report of its failure (an older version) changes nothing.
        try await bench.writeFailed(Self.session("1"), fence: fence)
        #expect(bench.ledger.unwrittenSession("alice") == Self.session("2"))

        bench.store.failWrites(false)
        bench.time.advance(by: 1)
        try await bench.waitUntilStored("2")
        try await bench.releaseAndWaitUntilDropped()
        #expect(await bench.store.stored("alice") == Self.session("2"))
    }

    @Test func aWriteThatLandsLateAfterASignInHasTheSignInsRecordWrittenAgainAtOnce() async throws {
        let bench = Bench()
        let fence = bench.ledger.hold("alice")
        // A write of the old session overran a close's deadline and lost its turn.
        let late = try #require(await bench.ledger.enterWriteTurn("alice", fence: fence)).token
        bench.ledger.abandonWriteTurn("alice", token: late)
        // The user signs in again; then the old write lands over the sign-in's record.
        let signedIn = Self.session("new")
        _ = try await bench.ledger.signIn("alice", session: signedIn) {
            try await bench.store.save(signedIn, identifier: "alice")
        }
        // No clock moves: the sign-in's record is written again now, not on the failed-write schedule.
        try await bench.landLate(Self.session("old"), fence: fence, turn: late, rewriting: signedIn)
    }

    /// A write that lost its turn to a close's deadline lands after a later write of other credentials (an update of
    /// the next session): it is older whatever it holds, and the later credentials are written again at once.
    @Test func aWriteThatLandsLateAfterALaterWriteHasTheLaterOneWrittenAgainAtOnce() async throws {
        let bench = Bench()
        let fence = bench.ledger.hold("alice")
        let late = try #require(await bench.ledger.enterWriteTurn("alice", fence: fence)).token
        bench.ledger.abandonWriteTurn("alice", token: late)
        let later = try #require(await bench.ledger.enterWriteTurn("alice", fence: fence)).token
        try await bench.store.save(Self.session("update"), identifier: "alice")
        bench.ledger.writeFinished("alice", fence: fence, wrote: Self.session("update"), turn: later)
        bench.ledger.leaveWriteTurn("alice", token: later)
        try await bench.landLate(Self.session("1"), fence: fence, turn: late, rewriting: Self.session("update"))
    }

    @Test func aWriteThatLandsLateAfterASignOutIsRemovedAgainButNeverASignInMadeSince() async throws {
        let bench = Bench()
        let (fence, late) = try await bench.signOutLeavingAWriteBehind()

        // Another write holds the turn; a sign-in waits for it; then the old write lands after the sign-out.
        let blocker = try #require(await bench.ledger.enterWriteTurn("alice", fence: nil)).token
        let signedIn = Self.session("new")
        let signIn = Task {
            try await bench.ledger.signIn("alice", session: signedIn) {
                try await bench.store.save(signedIn, identifier: "alice")
            }
        }
        let ledger = bench.ledger
        try await withHangGuard("the sign-in waits") { while ledger.writersWaiting("alice") < 1 { await Task.yield() } }
        try await bench.store.save(Self.session("old"), identifier: "alice")
        bench.ledger.writeFinished("alice", fence: fence, wrote: Self.session("old"), turn: late)
        bench.ledger.leaveWriteTurn("alice", token: late)
        // The removal waits for the turn behind the sign-in, which changes the fence first: it removes nothing.
        try await withHangGuard("the removal waits") { while ledger.writersWaiting("alice") < 2 { await Task.yield() } }
        bench.ledger.leaveWriteTurn("alice", token: blocker)
        _ = try await signIn.value
        try await withHangGuard("the removal is over") { while ledger.hasPendingWork("alice") { await Task.yield() } }
        #expect(await bench.store.stored("alice") == signedIn)
        #expect(bench.store.removes.count == 1, "only the sign-out removed the record")
    }

    @Test func aWriteThatLandsLateAfterASignOutIsRemovedAgain() async throws {
        let bench = Bench()
        let (fence, late) = try await bench.signOutLeavingAWriteBehind()
        try await bench.store.save(Self.session("old"), identifier: "alice")
        bench.ledger.writeFinished("alice", fence: fence, wrote: Self.session("old"), turn: late)
        bench.ledger.leaveWriteTurn("alice", token: late)
        let store = bench.store
        try await withHangGuard("the record is removed again") {
            while await store.stored("alice") != nil { await Task.yield() }
        }
        try await bench.releaseAndWaitUntilDropped()
    }

    /// The ledger remembers a bounded window of refreshes, but never forgets one whose spent refresh token the store
    /// may still hold: a rotation left unwritten through more refreshes than the window (a store down for two hours
    /// of five-minute tokens) is still read through by a restore that finds the old record, and still written
    /// (conditionally, over the record it replaces) once the store is back.
    @Test func aRotationUnwrittenThroughMoreRefreshesThanTheWindowIsStillReadThroughAndWritten() async throws {
        let time = ManualTime()
        let store = ScriptedCoordinatedStore()
        store.writeElsewhere(Self.session("0"), identifier: "alice")
        let ledger = CredentialsLedger(store: store)
        let fence = ledger.hold("alice")
        for step in 0..<24 {
            let result = await ledger.refresh(
                identifier: "alice", userInfo: Self.user, credentials: Self.session("\(step)").credentials!,
                fence: fence
            ) { .success(Self.session("\(step + 1)").credentials!) }
            #expect((try? result.get())?.refreshToken == "rt-\(step + 1)")
        }
        // A restore that reads the record the store still holds never presents its spent token.
        #expect(try ledger.readThrough(Self.session("0"), identifier: "alice", fence: fence) == Self.session("24"))

        ledger.release(
            "alice",
            schedule: CredentialsLedger.Schedule(
                clock: time.clock, policy: UserSessionController.Configuration().refreshPolicy.refresh))
        try await withHangGuard("the write loop's first wait") { await time.sleeps.wait(for: 1) }
        time.advance(by: 1)
        try await withHangGuard("the entry is dropped") { while ledger.entryCount > 0 { await Task.yield() } }
        #expect(store.record("alice")?.session == Self.session("24"), "the store holds the newest, not a spent token")
    }
}
