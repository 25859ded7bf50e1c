import Foundation
import Testing

@testable import UserSessions

/// The write of a rotation a refresh's leader recorded in the ledger: it stays unwritten (and the entry alive) until a
/// write in the identifier's write turn lands it, and a fence change after the refresher returned (a sign-out or a
/// sign-in) refuses that write on its way into the turn.
struct LedgerRotationWriteTests {
    static let user = UserInfo(id: "alice")
    static let sent = Credentials(accessToken: "at-0", refreshToken: "rt-0", expiresAt: nil)
    static let rotated = Credentials(accessToken: "at-1", refreshToken: "rt-1", expiresAt: nil)

    /// Leads a refresh of alice's `rt-0` under `fence` that returns `rt-1`; `during` runs while the refresher is
    /// "at the server".
    func refresh(_ ledger: CredentialsLedger, fence: UInt64, during: () -> Void = {}) async {
        let result = await ledger.refresh(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence
        ) {
            during()
            return .success(Self.rotated)
        }
        #expect((try? result.get()) == Self.rotated)
    }

    /// Refreshes alice's `credentials` under `fence` against a server that answers with the rotation, counting in
    /// `asked` whether it was asked.
    func presenting(
        _ credentials: Credentials, _ ledger: CredentialsLedger, fence: UInt64, heldFence: UInt64? = nil,
        asked: inout Int
    ) async -> Result<Credentials, UserSessionError> {
        await ledger.refresh(
            identifier: "alice", userInfo: Self.user, credentials: credentials, fence: fence, heldFence: heldFence
        ) {
            asked += 1
            return .success(Self.rotated)
        }
    }

    /// A session took its fence and let go: the entry was dropped, and a restore made a new one since. Returns the
    /// fence of the session that let go and the restore's.
    func entryMadeAgain(_ ledger: CredentialsLedger) -> (letGo: UInt64, restore: UInt64) {
        let fence = ledger.hold("alice")
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
        let restoreFence = ledger.hold("alice")
        #expect(restoreFence > fence)
        return (fence, restoreFence)
    }

    /// A closing session's last flush has nothing to wait for or write exactly while no write holds the identifier's
    /// turn and nothing of it is unwritten; another identifier's state does not count.
    @Test func anIdentifierIsSettledOnlyWithNoWriteInItsTurnAndNothingUnwritten() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        #expect(ledger.isSettled("alice"), "an identifier the ledger holds nothing for")
        let fence = ledger.hold("alice")
        #expect(ledger.isSettled("alice"), "held, with nothing written or pending")

        let grant = await ledger.takeWriteTurn("alice")
        #expect(!ledger.isSettled("alice"), "a write holds the turn")
        #expect(ledger.isSettled("bob"))
        ledger.leaveWriteTurn("alice", token: grant.token)
        #expect(ledger.isSettled("alice"), "the write left the turn")

        await refresh(ledger, fence: fence)
        #expect(!ledger.isSettled("alice"), "a rotation the store has not taken")
        #expect(ledger.unwrittenSession("alice")?.credentials == Self.rotated)
        ledger.release("alice")
    }

    /// A sign-out or a sign-in is a fenced write like a commit: two critical sections of the entry, one that takes
    /// the turn (or, for a caller holding it, only marks the write) and one that applies the new fence, clears the mark
    /// and hands the turn on. A write the store refused changes no fence and frees the turn in its second section.
    @Test func aSignOutOrASignInTakesTwoSectionsOfTheEntry() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        ledger.hold("alice")
        func sections(_ operation: () async throws -> Void) async rethrows -> Int {
            let before = ledger.sectionsTaken.load(ordering: .relaxed)
            try await operation()
            return ledger.sectionsTaken.load(ordering: .relaxed) - before
        }

        let first = ledger.fence("alice")
        let signOut = try await sections {
            try await ledger.signOut("alice") { #expect(ledger.writeTurnIsHeld("alice")) }
        }
        #expect(signOut == 2)
        #expect(ledger.fence("alice") != first)
        #expect(!ledger.writeTurnIsHeld("alice"))

        var signedInFence: UInt64 = 0
        let signIn = try await sections {
            (_, signedInFence) = try await ledger.signIn(
                "alice", session: StoredSession(userInfo: Self.user, credentials: Self.sent)
            ) {}
        }
        #expect(signIn == 2)
        #expect(signedInFence == ledger.fence("alice"))

        let refused = await sections {
            await #expect(throws: UserSessionError.self) {
                try await ledger.signOut("alice") { throw UserSessionError(.storeFailure, "the store is down") }
            }
        }
        #expect(refused == 2)
        #expect(ledger.fence("alice") == signedInFence, "a sign-out the store refused changes nothing")
        #expect(!ledger.writeTurnIsHeld("alice"))

        let held = await ledger.takeWriteTurn("alice")
        let signInHoldingTurn = try await sections {
            _ = try await ledger.signIn("alice", holdingTurn: true) {}
        }
        #expect(signInHoldingTurn == 2)
        #expect(ledger.writeTurnIsHeld("alice"), "a caller that held the turn keeps it")
        ledger.leaveWriteTurn("alice", token: held.token)
        ledger.release("alice")
    }

    /// The commit of a refresh that found the write turn free takes two critical sections of the entry: the one that
    /// records the rotation also grants the leader the turn, and the one that lands the write hands it on.
    @Test func aLeaderThatFindsTheTurnFreeGetsItWithTheRotationAndLeavesItWithTheLanding() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let (result, turn) = await ledger.refreshTakingTurn(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence, takingTurn: true
        ) { .success(Self.rotated) }
        #expect((try? result.get()) == Self.rotated)
        let granted = try #require(turn, "the free turn comes back with the rotation")
        #expect(granted.fence == fence)
        #expect(ledger.writeTurnIsHeld("alice"))
        // A writer arriving now waits behind the commit.
        let next = Task { await ledger.takeWriteTurn("alice") }
        try await withHangGuard("the next writer queues") {
            while ledger.writersWaiting("alice") < 1 { await Task.yield() }
        }
        ledger.writeFinished(
            "alice", fence: fence, wrote: StoredSession(userInfo: Self.user, credentials: Self.rotated),
            turn: granted.token, leavesTurn: true)
        let handedOn = await next.value
        #expect(handedOn.token != granted.token)
        ledger.leaveWriteTurn("alice", token: handedOn.token)
        #expect(!ledger.hasPendingWork("alice"), "landed, and the turn is free")
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    /// Once the server answered, a commit takes two critical sections of the entry: the one that records the
    /// rotation and grants the free turn, and the one that lands the write and hands the turn on.
    @Test func aCommitTakesTwoSectionsOfTheEntryOnceTheServerAnswered() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let atAnswer = Locked(0)
        let (_, turn) = await ledger.refreshTakingTurn(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence, takingTurn: true
        ) {
            atAnswer.withLock { $0 = ledger.sectionsTaken.load(ordering: .relaxed) }
            return .success(Self.rotated)
        }
        let granted = try #require(turn)
        ledger.writeFinished(
            "alice", fence: fence, wrote: StoredSession(userInfo: Self.user, credentials: Self.rotated),
            turn: granted.token, leavesTurn: true)
        #expect(ledger.sectionsTaken.load(ordering: .relaxed) - atAnswer.withLock { $0 } == 2)
        #expect(!ledger.hasPendingWork("alice"), "landed, and the turn is free")
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    /// No turn comes back from a refresh that failed, that was joined or answered without a call, or that found the
    /// turn held: the caller then waits for the turn like any writer.
    @Test func noTurnComesBackWhenTheTurnIsBusyOrTheRefreshFailed() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let failed = await ledger.refreshTakingTurn(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence, takingTurn: true
        ) { .failure(UserSessionError(.refreshFailed, "down", failureClass: .transient)) }
        #expect(failed.turn == nil)
        #expect(!ledger.writeTurnIsHeld("alice"))
        let holder = await ledger.takeWriteTurn("alice")
        let busy = await ledger.refreshTakingTurn(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence, takingTurn: true
        ) { .success(Self.rotated) }
        #expect((try? busy.result.get()) == Self.rotated)
        #expect(busy.turn == nil)
        // Answered from what the ledger knows (the token is spent): no call, no turn.
        let answered = await ledger.refreshTakingTurn(
            identifier: "alice", userInfo: Self.user, credentials: Self.sent, fence: fence, takingTurn: true
        ) {
            Issue.record("a spent token is never presented")
            return .success(Self.rotated)
        }
        #expect((try? answered.result.get()) == Self.rotated)
        #expect(answered.turn == nil)
        ledger.leaveWriteTurn("alice", token: holder.token)
        #expect(!ledger.writeTurnIsHeld("alice"))
    }

    /// A commit that did not lead its refresh leaves the turn without writing only when the store holds its very
    /// record (landed under the turn's fence, and nothing unwritten since), or when the ledger knows newer
    /// credentials reached from its record (never written over the newest). In every other case it keeps the turn, to
    /// write.
    @Test func aCommitThatDidNotLeadLeavesWithoutWritingOnlyWhatLandedUnderItsFence() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let rotated = StoredSession(userInfo: Self.user, credentials: Self.rotated)
        await refresh(ledger, fence: fence)

        // Recorded, not landed yet: the commit writes.
        var turn = await ledger.takeWriteTurn("alice")
        #expect(ledger.leaveIfNothingToWrite("alice", rotated, turn: turn) == nil)
        #expect(ledger.writeTurnIsHeld("alice"))
        // The write failed: still unwritten.
        ledger.writeFinished("alice", fence: fence, wrote: nil, failed: rotated, turn: turn.token, leavesTurn: true)
        turn = await ledger.takeWriteTurn("alice")
        #expect(ledger.leaveIfNothingToWrite("alice", rotated, turn: turn) == nil)
        // It landed.
        ledger.writeFinished("alice", fence: fence, wrote: rotated, turn: turn.token, leavesTurn: true)
        turn = await ledger.takeWriteTurn("alice")
        // Another record (the same credentials for another view of the user) is not what landed.
        let otherUserInfo = StoredSession(userInfo: UserInfo(id: "alice", name: "Alice"), credentials: Self.rotated)
        #expect(ledger.leaveIfNothingToWrite("alice", otherUserInfo, turn: turn) == nil)
        #expect(ledger.writeTurnIsHeld("alice"))
        // The very record: the turn is left in the same section.
        #expect(ledger.leaveIfNothingToWrite("alice", rotated, turn: turn) == .landed)
        #expect(!ledger.writeTurnIsHeld("alice"))
        // A turn that is no longer held (left already) leaves nothing.
        #expect(ledger.leaveIfNothingToWrite("alice", rotated, turn: turn) == nil)
        // Older credentials, which the refresh rotated, are superseded: not what landed, and never written over the
        // newest; the turn is left in the same section too.
        turn = await ledger.takeWriteTurn("alice")
        let older = StoredSession(userInfo: Self.user, credentials: Self.sent)
        #expect(ledger.leaveIfNothingToWrite("alice", older, turn: turn) == .superseded)
        #expect(!ledger.writeTurnIsHeld("alice"))

        // A turn granted before a sign-in: its fence is not the entry's any more.
        turn = await ledger.takeWriteTurn("alice")
        ledger.signedIn("alice", session: rotated)
        #expect(ledger.leaveIfNothingToWrite("alice", rotated, turn: turn) == nil)
        ledger.leaveWriteTurn("alice", token: turn.token)
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    @Test func aRecordedRotationIsPendingUntilAWriteInTheTurnLandsIt() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        await refresh(ledger, fence: fence)
        // Unwritten: pending until a write lands it.
        #expect(ledger.hasPendingWork("alice"))
        let turn = try #require(await ledger.enterWriteTurn("alice", fence: fence)).token
        ledger.writeFinished(
            "alice", fence: fence, wrote: StoredSession(userInfo: Self.user, credentials: Self.rotated), turn: turn)
        ledger.leaveWriteTurn("alice", token: turn)
        #expect(!ledger.hasPendingWork("alice"))
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    /// What changes the fence after the refresher returned: a sign-out (from anywhere) or a new sign-in.
    enum FenceChange: CaseIterable, Sendable {
        case signedOut, signedIn

        func apply(to ledger: CredentialsLedger) {
            switch self {
            case .signedOut: ledger.signedOut(identifier: "alice")
            case .signedIn: ledger.signedIn("alice")
            }
        }
    }

    @Test(arguments: FenceChange.allCases)
    func aFenceChangeAfterTheRefresherReturnedRefusesTheWriteAndLeavesNothingPending(_ change: FenceChange)
        async throws
    {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        await refresh(ledger, fence: fence)
        change.apply(to: ledger)
        #expect(await ledger.enterWriteTurn("alice", fence: fence) == nil)
        #expect(!ledger.hasPendingWork("alice"))
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    @Test func aRotationItsLeaderDidNotWriteIsNotLost() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        await refresh(ledger, fence: fence)
        // Still unwritten, so still pending, and a restore reading the spent token gets the rotation.
        #expect(ledger.hasPendingWork("alice"))
        let stored = StoredSession(userInfo: Self.user, credentials: Self.sent)
        let read = try #require(try ledger.readThrough(stored, identifier: "alice", fence: fence))
        #expect(read.credentials == Self.rotated)
        // Any writer under the fence may write it.
        let turn = try #require(await ledger.enterWriteTurn("alice", fence: fence)).token
        ledger.writeFinished(
            "alice", fence: fence, wrote: StoredSession(userInfo: Self.user, credentials: Self.rotated), turn: turn)
        ledger.leaveWriteTurn("alice", token: turn)
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    @Test func aRefreshWhoseUserSignedOutWhileItWasInFlightLeavesNothingToWrite() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        await refresh(ledger, fence: fence) { ledger.signedOut(identifier: "alice") }
        // Nothing is written for a signed-out user, but the spent token is never presented again.
        #expect(!ledger.hasPendingWork("alice"))
        let stored = StoredSession(userInfo: Self.user, credentials: Self.sent)
        let read = try #require(try ledger.readThrough(stored, identifier: "alice", fence: ledger.fence("alice")))
        #expect(read.credentials == Self.rotated)
        ledger.release("alice")
    }

    /// Writes of one identifier take the turn one at a time, in arrival order; a waiting write whose fence changed
    /// meanwhile is refused when its turn comes.
    @Test func writesTakeTheTurnInArrivalOrderAndAFencedWaiterIsRefused() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        let first = try #require(await ledger.enterWriteTurn("alice", fence: fence)).token
        let fenced = Task { await ledger.enterWriteTurn("alice", fence: fence) }
        try await withHangGuard("the fenced write queues") {
            while ledger.writersWaiting("alice") < 1 { await Task.yield() }
        }
        let unconditional = Task { await ledger.enterWriteTurn("alice", fence: nil) }
        try await withHangGuard("the unconditional write queues") {
            while ledger.writersWaiting("alice") < 2 { await Task.yield() }
        }
        ledger.signedOut(identifier: "alice")
        ledger.leaveWriteTurn("alice", token: first)
        #expect(await fenced.value == nil)
        let next = try #require(await unconditional.value).token
        #expect(ledger.hasPendingWork("alice"))
        ledger.leaveWriteTurn("alice", token: next)
        #expect(!ledger.hasPendingWork("alice"))
        ledger.release("alice")
        #expect(ledger.entryCount == 0)
    }

    /// Credentials older than a refresh the server refused (a store that lags behind a write it failed, read back
    /// as a "replacement") get the refusal, never that refresh's result: found by the secrets test, whose refresh
    /// after a failed write presented the stored credentials again and was handed expired credentials as fresh.
    @Test func credentialsOlderThanARefusedRefreshGetTheRefusalNotItsResult() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let fence = ledger.hold("alice")
        await refresh(ledger, fence: fence)
        var asked = 0
        let refused = await ledger.refresh(
            identifier: "alice", userInfo: Self.user, credentials: Self.rotated, fence: fence
        ) {
            asked += 1
            return .failure(UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal))
        }
        #expect(refused.errorCode == .refreshFailed)
        #expect(asked == 1)

        let older = await presenting(Self.sent, ledger, fence: fence, asked: &asked)
        #expect(older.errorCode == .refreshTokenRefused)
        #expect(asked == 1, "nothing is sent for credentials whose newest refresh was refused")
        let stored = StoredSession(userInfo: Self.user, credentials: Self.sent)
        #expect(throws: UserSessionError(.refreshTokenRefused, "")) {
            try ledger.readThrough(stored, identifier: "alice", fence: ledger.fence("alice"))
        }
        ledger.release("alice")
    }

    @Test func aSessionThatLetTheIdentifierGoNeverLeadsARefreshOfTheEntryMadeAfterIt() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let (fence, restoreFence) = entryMadeAgain(ledger)
        var asked = 0
        let orphan = await presenting(Self.sent, ledger, fence: fence, asked: &asked)
        // Its rotation would belong to no live session (fenced, unwritten): the token it holds is never sent.
        #expect(orphan.errorCode == .sessionNotOpen)
        #expect(asked == 0)
        // A session of the new entry refreshes as usual.
        let current = await presenting(Self.sent, ledger, fence: restoreFence, asked: &asked)
        #expect(current.errorCode == nil)
        #expect(asked == 1)
        #expect(ledger.hasPendingWork("alice"))
        ledger.release("alice")
    }

    /// The same for a session that was still signing in: it writes under the signing-in fence, which no entry is
    /// born after, so the rule reads the fence of its hold. Before, a refresh under fence 0 was let through whatever
    /// entry it found, and one that outlived its session by a moment (checked current, then the session closed and
    /// a restore made the entry again) sent a token whose rotation nobody would write.
    @Test func aSessionSigningInThatLetTheIdentifierGoNeverLeadsARefreshOfTheEntryMadeAfterIt() async throws {
        let ledger = CredentialsLedger(store: InMemoryTokenStore())
        let (held, restoreFence) = entryMadeAgain(ledger)
        let signingIn = RefreshStateMachine.signingInFence
        var asked = 0
        let orphan = await presenting(Self.sent, ledger, fence: signingIn, heldFence: held, asked: &asked)
        #expect(orphan.errorCode == .sessionNotOpen)
        #expect(asked == 0)
        // Without a held fence, the signing-in fence is no pass either.
        let unheld = await presenting(Self.sent, ledger, fence: signingIn, asked: &asked)
        #expect(unheld.errorCode == .sessionNotOpen)
        #expect(asked == 0)
        // A session signing in that holds the entry refreshes; its result is fenced (knowledge only).
        let holding = await presenting(Self.sent, ledger, fence: signingIn, heldFence: restoreFence, asked: &asked)
        #expect((try? holding.get()) == Self.rotated)
        #expect(asked == 1)
        ledger.release("alice")
    }
}
