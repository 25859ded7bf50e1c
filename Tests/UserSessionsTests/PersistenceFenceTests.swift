import Foundation
import Testing

@testable import UserSessions

/// Issue 9, items 10, 13 and 16: the order of writes, the `closeAndClear()` fence, background retries of failed
/// writes, and a write that overran the close's deadline (DESIGN.md, refresh contract 13).
struct PersistenceFenceTests {
    /// Opens "user" with a one-hour token 10 s from expiry: the next `accessToken()` waits for a refresh.
    private func openExpiring(_ rig: FaultRig) async throws {
        let controller = rig.controller
        _ = controller.gate.backgroundTasks
        let prototype = rig.prototype(expiresIn: 10)
        _ = try await withHangGuard("open") { try await controller.open(prototype) }
    }

    // MARK: - Item 10: closeAndClear is final

    /// A commit write that the store keeps running past `storeTimeout`, ignoring cancellation, lands after the
    /// clear: the record is removed again, so the cleared credentials never come back. Before, they reappeared.
    @Test func aCommitWriteLeftBehindByCloseAndClearNeverOutlivesTheClear() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.injectAtNextCall(.save, .hang)
        let asking = Task { try await controller.accessToken() }
        try await withHangGuard("the commit write") { await rig.store.hangs.wait(for: 1) }
        try await withHangGuard("closeAndClear") { try await controller.closeAndClear() }
        #expect(try await boundedResult("accessToken", asking).errorCode == .sessionNotOpen)
        #expect(await rig.store.stored("user") == nil)
        let removes = rig.store.removesDone.count

        // The store finally lets the abandoned write land; the fence removes it again.
        rig.store.releaseHangs()
        try await withHangGuard("the late write") { await rig.store.savesDone.wait(for: 2) }
        try await withHangGuard("the second removal") { await rig.store.removesDone.wait(for: removes + 1) }
        #expect(await rig.store.stored("user") == nil)
        let restoring = Task { try await rig.restarted().controller.restore(identifier: "user") }
        #expect(try await boundedResult("restore", restoring).errorCode == .noStoredSession)
    }

    /// A refresh still running when `closeAndClear()` runs writes nothing when it returns.
    @Test func aRefreshFinishingAfterCloseAndClearWritesNothing() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.refresher.hang(onCall: 1)
        let asking = Task { try await controller.accessToken() }
        try await withHangGuard("the refresh") { await rig.refresher.started.wait(for: 1) }
        try await withHangGuard("closeAndClear") { try await controller.closeAndClear() }
        #expect(try await boundedResult("accessToken", asking).errorCode == .sessionNotOpen)
        let saves = rig.store.calls(.save)
        rig.refresher.release()
        try await withHangGuard("the refresh finishing") { await rig.refresher.finished.wait(for: 1) }
        let late = controller.gate.backgroundTasks.last
        try await withHangGuard("the late commit") { await late?.value }
        #expect(rig.store.calls(.save) == saves)
        #expect(await rig.store.stored("user") == nil)
        #expect(!controller.gate.ledger.hasPendingWork("user"))
    }

    // MARK: - Item 16: a write left behind does not hold the persistence slot for ever

    /// After `close()` gave up on a commit write that ignores cancellation, the next session on the same
    /// controller commits its refreshes (before, its commit waited for the slot for ever). When the abandoned
    /// write finally lands over the newer record, the newer credentials are written again.
    @Test func theNextSessionCommitsAfterCloseGaveUpOnAWrite() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.injectAtNextCall(.save, .hang)
        let asking = Task { try await controller.accessToken() }
        try await withHangGuard("the commit write") { await rig.store.hangs.wait(for: 1) }
        try await withHangGuard("close") { await controller.close() }
        _ = try await boundedResult("accessToken", asking)

        // The server rotated rt-0 → rt-1 in the abandoned commit; the user signs in again with rt-1.
        let time = rig.time
        let again = UserSessionPrototype(
            userInfo: UserInfo(id: "user"),
            credentials: Credentials(
                accessToken: "at-again", refreshToken: "rt-1", expiresAt: time.now + 10,
                lastRefreshedAt: time.now - 3590))
        _ = try await withHangGuard("reopen") { try await controller.open(again) }
        #expect(try await withHangGuard("accessToken") { try await controller.accessToken() } == "at-2")
        #expect(await rig.storedRefreshToken == "rt-2")

        let saves = rig.store.savesDone.count
        rig.store.releaseHangs()
        // The abandoned rt-1 write lands, then the repair writes rt-2 again.
        try await withHangGuard("the late write and its repair") { await rig.store.savesDone.wait(for: saves + 2) }
        #expect(await rig.storedRefreshToken == "rt-2")
        #expect(rig.store.saves.last?.session.credentials?.refreshToken == "rt-2")
    }

    // MARK: - Item 13: failed writes are retried in the background

    /// A failed write is retried on its schedule (initial delay 1 s with jitter, then doubling), driven by the
    /// session's clock, while nobody asks for a token. Before, the write waited for the next `accessToken()` or the
    /// close, and a second instance started meanwhile restored the spent refresh token.
    @Test func aFailedWriteIsRetriedOnItsScheduleWithoutTokenRequests() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.injectAtNextCall(.save, .fail, persistent: true)
        #expect(try await withHangGuard("accessToken") { try await controller.accessToken() } == "at-1")
        try await rig.waitForEvent(.persistenceFailed)
        let attempts = rig.store.calls(.save)

        // First retry: between 0.5 s and 1 s after the failure.
        try await withHangGuard("the ledger's retry wait") { await rig.time.sleeps.wait(for: 1) }
        rig.time.advance(by: 0.49)
        #expect(rig.store.calls(.save) == attempts)
        rig.time.advance(by: 0.51)
        try await withHangGuard("the first retry failing") {
            await rig.probe.wait { events in events.count { $0.kind == .persistenceFailed } == 2 }
        }
        #expect(rig.store.calls(.save) == attempts + 1)

        // Second retry: the delay doubled, between 1 s and 2 s.
        try await withHangGuard("the ledger's retry wait") { await rig.time.sleeps.wait(for: 2) }
        rig.time.advance(by: 0.99)
        #expect(rig.store.calls(.save) == attempts + 1)
        rig.store.recover()
        let saves = rig.store.savesDone.count
        rig.time.advance(by: 1.01)
        try await withHangGuard("the second retry") { await rig.store.savesDone.wait(for: saves + 1) }
        #expect(await rig.storedRefreshToken == "rt-1")
        #expect(rig.refresher.calls == 1)

        // A second instance started now restores the new refresh token.
        try await withHangGuard("close") { await controller.close() }
        rig.time.advance(by: 7200)
        let restarted = rig.restarted()
        _ = try await withHangGuard("restore") { try await restarted.controller.restore() }
        #expect(rig.refresher.received == ["rt-0", "rt-1"])
    }

    // MARK: - Item 16: no refresh event after the session ended

    /// A refresh whose task only starts running after its session was deactivated announces nothing and does not
    /// call the refresher (it has sent nothing yet). Before, `.refreshStarted` followed `.closed`.
    @Test func aFlightThatStartsAfterDeactivationIsNeitherRunNorAnnounced() async throws {
        let harness = RefreshHarness()
        harness.activate(expiresIn: 200)
        // The machine's own input, without running its actions: the flight is started by hand below.
        let actions = harness.gate.modifyStateAndRunActions {
            ($0.tokenAsked(now: harness.time.now.timeIntervalSinceReferenceDate).1, .none)
        }
        let job = try #require(actions.refresh)
        await harness.gate.deactivate()
        harness.gate.startFlight(job)
        await harness.awaitBackgroundWork()
        #expect(harness.refreshCalls == 0)
        #expect(await harness.recordedEvents().map(\.kind) == [])
    }

    /// A refresh that fails after its session was deactivated reports nothing.
    @Test func aRefreshFailingAfterDeactivationIsNotReported() async throws {
        let gate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(gate, then: ScriptedRefresher.failure(.transient))])
        harness.activate(expiresIn: 10)
        let waiter = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        await harness.gate.deactivate()
        gate.open()
        await harness.awaitBackgroundWork()
        _ = await waiter.result
        #expect(await harness.recordedEvents().map(\.kind) == [.refreshStarted])
    }
}
