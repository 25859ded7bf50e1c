import Foundation
import Testing

@testable import UserSessions

/// The ledger's views of an identifier: who is told when a refresh or an update advances its newest credentials
/// (views are probes that record what they are told; the refreshes answer at once), and what a controller dropped
/// without letting go leaves behind.
struct LedgerViewsTests {
    final class View: CredentialsLedgerView {
        private let told = Locked(0)
        var count: Int { told.withLock { $0 } }
        func ledgerAdvanced(_ identifier: String) { told.withLock { $0 += 1 } }
    }

    static let user = UserInfo(id: "alice")

    static func credentials(_ version: Int) -> Credentials {
        Credentials(accessToken: "at-\(version)", refreshToken: "rt-\(version)", expiresAt: nil)
    }

    /// The newest credentials a view of alice holding `held` under `fence` is told to take, if any.
    static func newest(_ ledger: CredentialsLedger, _ held: Credentials, identifier: String, fence: UInt64)
        -> (credentials: Credentials, refreshedOnly: Bool)?
    {
        guard
            case .advanced(let newest, let refreshedOnly) = ledger.news(of: held, identifier: identifier, fence: fence)
        else { return nil }
        return (newest, refreshedOnly)
    }

    /// Refreshes version `version` of alice's credentials into the next one.
    static func refresh(_ ledger: CredentialsLedger, _ version: Int, fence: UInt64) async {
        let result = await ledger.refresh(
            identifier: "alice", userInfo: user, credentials: credentials(version), fence: fence
        ) { .success(credentials(version + 1)) }
        #expect((try? result.get()) == credentials(version + 1))
    }

    @Test func aRefreshTellsEachViewHoldingTheIdentifierOnceAndNobodyWhenOneViewHoldsIt() async {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let (first, second) = (View(), View())
        let fence = ledger.hold("alice", view: first)
        // Alone: the refresh is its own flight's news, nobody else's.
        await Self.refresh(ledger, 0, fence: fence)
        #expect(first.count == 0)

        // A second view, holding twice (a restore's hold, then its session's): each is told once per refresh.
        ledger.hold("alice", view: second)
        ledger.hold("alice", view: second)
        await Self.refresh(ledger, 1, fence: fence)
        #expect((first.count, second.count) == (1, 1))
        #expect(
            Self.newest(ledger, Self.credentials(1), identifier: "alice", fence: fence)?.credentials
                == Self.credentials(2))
        #expect(Self.newest(ledger, Self.credentials(0), identifier: "alice", fence: fence)?.refreshedOnly == true)

        // One release of the second view's two holds keeps it; the second lets it go.
        ledger.release("alice", view: second)
        await Self.refresh(ledger, 2, fence: fence)
        #expect((first.count, second.count) == (2, 2))
        ledger.release("alice", view: second)
        await Self.refresh(ledger, 3, fence: fence)
        #expect((first.count, second.count) == (2, 2))

        // The first view lets go while another holds: the other is no longer told alone, and a view that is gone
        // (its controller deallocated without letting go) is skipped.
        var gone: View? = View()
        ledger.hold("alice", view: gone!)
        ledger.hold("alice", view: second)
        gone = nil
        await Self.refresh(ledger, 4, fence: fence)
        #expect((first.count, second.count) == (3, 3))
        ledger.release("alice", view: first)
        await Self.refresh(ledger, 5, fence: fence)
        #expect((first.count, second.count) == (3, 3))
    }

    /// Credentials handed over map what their controller held to them in the section that learns they landed, so a
    /// refresh of what they replaced never leads after they landed, and the views are told only under their fence.
    /// Before, the mapping was a section of its own after the landing: a refresh of the replaced credentials asked
    /// between the two led, and its commit wrote its result over the credentials handed over (found by the schedule
    /// property test, about one run in thirty of one schedule).
    @Test func anUpdateMapsWhatItsControllerHeldWhereItLandsAndTellsTheViewsOnlyUnderItsFence() async {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let (first, second) = (View(), View())
        let fence = ledger.hold("alice", view: first)
        ledger.hold("alice", view: second)
        let handedOver = Credentials(accessToken: "at-x", refreshToken: "rt-x", expiresAt: nil)
        let record = StoredSession(userInfo: Self.user, credentials: handedOver)
        // Landed under a fence that no longer holds (a sign-in or a sign-out since): nothing is learned, nobody is
        // told.
        let stale = await ledger.takeWriteTurn("alice")
        ledger.writeFinished(
            "alice", fence: fence + 1_000, wrote: record, replacing: Self.credentials(0), turn: stale.token,
            leavesTurn: true)
        #expect(ledger.updated("alice", fence: fence + 1_000).isEmpty)
        #expect(Self.newest(ledger, Self.credentials(0), identifier: "alice", fence: fence) == nil)

        let turn = await ledger.takeWriteTurn("alice")
        ledger.writeFinished(
            "alice", fence: fence, wrote: record, replacing: Self.credentials(0), turn: turn.token, leavesTurn: true)
        // The replaced refresh token is never presented again in this process, from the landing on, before the views
        // are told: a refresh of it gets the newest.
        let answered = await ledger.refresh(
            identifier: "alice", userInfo: Self.user, credentials: Self.credentials(0), fence: fence
        ) { .failure(UserSessionError(.refreshFailed, "must not be called")) }
        #expect((try? answered.get()) == handedOver)
        let views = ledger.updated("alice", fence: fence)
        #expect(views.count == 2)
        let newest = Self.newest(ledger, Self.credentials(0), identifier: "alice", fence: fence)
        #expect(newest?.credentials == handedOver)
        #expect(newest?.refreshedOnly == false)
        // A view of another fence (an earlier sign-in) is never handed them.
        #expect(Self.newest(ledger, Self.credentials(0), identifier: "alice", fence: fence - 1) == nil)
        ledger.release("alice", view: first)
        ledger.release("alice", view: second)
    }

    /// A controller dropped without `close()` lets its user go in the ledger with it: the entry does not outlive every
    /// controller that held it, and another controller of the user is the only view told from then on.
    @Test func aControllerDroppedWithoutClosingLetsItsUserGoInTheLedger() async throws {
        let bench = LedgerSeamTests.Bench()
        var dropped: UserSessionController? = bench.controller()
        weak let gone = dropped
        _ = try await dropped?.open(bench.server.signIn("alice", expiresIn: 3600))
        let restored = bench.controller()
        _ = try await restored.restore(identifier: "alice")
        #expect(bench.ledger.entryCount == 1)

        dropped = nil
        // The opening's tasks let go of it as they finish.
        try await withHangGuard("the dropped controller goes") {
            while gone != nil { await Task.yield() }
        }
        await restored.close()
        #expect(bench.ledger.entryCount == 0, "the dropped controller's hold kept the entry")
    }

    /// A controller dropped without `close()` while its rotation is unwritten (the store was down): the ledger goes on
    /// writing it, so the store never keeps the refresh token the rotation spent.
    @Test func aRotationOfAControllerDroppedWithoutClosingStillReachesTheStore() async throws {
        let bench = LedgerSeamTests.Bench()
        var dropped: UserSessionController? = bench.controller()
        weak let gone = dropped
        _ = try await dropped?.open(bench.server.signIn("alice", expiresIn: 10))
        bench.store.failWrites(true)
        bench.time.advance(by: 20)
        #expect(try await dropped?.accessToken() == "alice/at-1")
        #expect(try await bench.store.base.load(identifier: "alice")?.credentials?.refreshToken == "alice/rt-0")

        dropped = nil
        try await withHangGuard("the dropped controller goes") {
            while gone != nil { await Task.yield() }
        }
        bench.store.failWrites(false)
        let (ledger, time) = (bench.ledger, bench.time)
        try await withHangGuard("the ledger writes the rotation and lets go") {
            await time.advanceOnEachSleep { ledger.entryCount > 0 }
        }
        #expect(try await bench.store.base.load(identifier: "alice")?.credentials?.refreshToken == "alice/rt-1")
        _ = try await bench.controller().restore(identifier: "alice")
        #expect(bench.server.reuses == 0)
    }
}
