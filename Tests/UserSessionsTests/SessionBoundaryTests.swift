import Foundation
import Testing

@testable import UserSessions

/// Issue 9, "Refresh and lifecycle holes": work of a session never crosses into another session, and a rotation is
/// never thrown away when its session ends (DESIGN.md, refresh contract 9 and 12).
struct SessionBoundaryTests {
    struct Unauthorized: Error {}

    /// A one-hour token for `user`, expiring `expiresIn` seconds from now.
    static func prototype(_ user: String, expiresIn: TimeInterval = 3600, time: ManualTime) -> UserSessionPrototype {
        UserSessionPrototype(
            userInfo: UserInfo(id: user),
            credentials: Credentials(
                accessToken: "at-\(user)", refreshToken: "rt-\(user)",
                expiresAt: time.now.addingTimeInterval(expiresIn),
                lastRefreshedAt: time.now.addingTimeInterval(expiresIn - 3600)))
    }

    // MARK: - Item 8: a replay belongs to its session

    /// Alice's operation fails authentication after `open(bob)` replaced her session: it must not be replayed with
    /// bob's token (before, it was: user A's request ran with user B's credentials).
    @Test func aReplayAfterTheSessionWasReplacedThrowsInsteadOfUsingAnotherUsersToken() async throws {
        let time = ManualTime()
        let refresher = ScriptedRefresher(now: { time.now })
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher, configuration: .init(clock: time.clock))
        _ = try await controller.open(Self.prototype("alice", time: time))
        let inOperation = ArrivalCounter()
        let proceed = AsyncGate()
        let seen = Locked<[String]>([])
        let operation = Task {
            try await controller.withAccessToken(isAuthenticationFailure: { $0 is Unauthorized }) { token in
                seen.withLock { $0.append(token) }
                if token == "at-alice" {
                    inOperation.arrive()
                    await proceed.wait()
                    throw Unauthorized()
                }
                return token
            }
        }
        try await withHangGuard("alice's operation") { await inOperation.wait(for: 1) }
        _ = try await controller.open(Self.prototype("bob", time: time))
        proceed.open()
        let result = try await boundedResult("alice's operation", operation)
        #expect(result.errorCode == .sessionNotOpen)
        #expect(seen.withLock { $0 } == ["at-alice"])
        #expect(refresher.calls == 0)
        #expect(try await controller.accessToken() == "at-bob")
    }

    /// The same after a close: no replay with a session that no longer exists, even if its token is unchanged.
    @Test func aReplayAfterCloseThrowsSessionNotOpen() async throws {
        let time = ManualTime()
        let refresher = ScriptedRefresher(now: { time.now })
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher, configuration: .init(clock: time.clock))
        _ = try await controller.open(Self.prototype("alice", time: time))
        let replaying = Task {
            try await controller.withAccessToken(isAuthenticationFailure: { $0 is Unauthorized }) { _ -> String in
                await controller.close()
                throw Unauthorized()
            }
        }
        #expect(try await boundedResult("the operation", replaying).errorCode == .sessionNotOpen)
        #expect(refresher.calls == 0)
    }

    // MARK: - Item 9: a cancelled restore keeps the rotation

    /// Stored credentials are expired; the restore's refresh rotates rt-0 → rt-1 slowly; the restoring task is
    /// cancelled. rt-1 must reach the store, so the next restore sends rt-1 (before, rt-0 was sent again, and a
    /// rotating server answered `invalid_grant`).
    @Test func aCancelledRestoreStillWritesTheRotatedCredentials() async throws {
        let rig = FaultRig()
        _ = try await withHangGuard("open") { try await rig.controller.open(rig.prototype()) }
        await rig.controller.close()
        rig.time.advance(by: 7200)
        rig.refresher.hang(onCall: 1)
        let saves = rig.store.savesDone.count

        let restarted = rig.restarted()
        let restoring = Task { try await restarted.controller.restore() }
        try await withHangGuard("the restore's refresh") { await rig.refresher.started.wait(for: 1) }
        restoring.cancel()
        let outcome = try await boundedResult("the cancelled restore", restoring)
        #expect(!outcome.isSuccess)
        #expect(restarted.controller.session.state != .opened)
        rig.refresher.release()
        try await withHangGuard("the late write") { await rig.store.savesDone.wait(for: saves + 1) }
        #expect(await rig.storedRefreshToken == "rt-1")
        #expect(restarted.count(.credentialsRefreshed) == 0)
        #expect(restarted.controller.credentials == nil)

        let again = rig.restarted()
        _ = try await withHangGuard("the next restore") { try await again.controller.restore() }
        #expect(try await again.controller.accessToken() == "at-1")
        #expect(rig.refresher.received == ["rt-0"])
    }

    /// A restore that starts while the cancelled restore's refresh is still running adopts that refresh instead of
    /// sending rt-0 a second time.
    @Test func aRestoreWhileAnEarlierRestoresRefreshRunsJoinsIt() async throws {
        let rig = FaultRig()
        _ = try await withHangGuard("open") { try await rig.controller.open(rig.prototype()) }
        await rig.controller.close()
        rig.time.advance(by: 7200)
        rig.refresher.hang(onCall: 1)
        let controller = rig.controller
        let first = Task { try await controller.restore() }
        try await withHangGuard("the first refresh") { await rig.refresher.started.wait(for: 1) }
        first.cancel()
        _ = try await boundedResult("the cancelled restore", first)
        let second = Task { try await controller.restore() }
        // The second restore waits for the same refresh; release it only once the restore is waiting.
        try await withHangGuard("the second restore waiting") {
            while !controller.gate.inspect({ $0.flights.waiters.contains { $0.continuation != nil } }) {
                await Task.yield()
            }
        }
        rig.refresher.release()
        #expect(try await boundedResult("the second restore", second).isSuccess)
        #expect(rig.refresher.received == ["rt-0"])
        #expect(try await controller.accessToken() == "at-1")
        #expect(await rig.storedRefreshToken == "rt-1")
    }

    /// A refresh of alice still in flight when bob's session replaces hers is written to alice's record only; bob's
    /// session and record are untouched.
    @Test func aLateRotationIsNeverWrittenOverAnotherUsersRecord() async throws {
        let time = ManualTime()
        let gate = AsyncGate()
        let refresher = ScriptedRefresher(steps: [.block(gate, then: .succeed)], now: { time.now })
        let store = ScriptedTokenStore()
        let controller = UserSessionController(
            store: store, refresher: refresher, configuration: .init(clock: time.clock))
        let probe = EventProbe(controller)
        _ = try await controller.open(Self.prototype("alice", expiresIn: 10, time: time))
        let waiter = Task { try await controller.accessToken() }
        await refresher.started.wait(for: 1)
        _ = try await controller.open(Self.prototype("bob", time: time))
        #expect(try await boundedResult("alice's waiter", waiter).errorCode == .sessionNotOpen)
        gate.open()
        await refresher.finished.wait(for: 1)
        try await withHangGuard("the late write") {
            while store.stored("alice")?.credentials?.refreshToken != "rt-1" { await Task.yield() }
        }
        #expect(store.stored("bob")?.credentials?.refreshToken == "rt-bob")
        #expect(store.saves.map(\.identifier) == ["alice", "bob", "alice"])
        #expect(try await controller.accessToken() == "at-bob")
        #expect(!probe.kinds.contains(.credentialsRefreshed))
    }

    // MARK: - Item 11: a terminal failure during open's write

    /// A token request during the open finds the credentials revoked while open's store write is in progress: the
    /// open throws that refresh failure, the session ends invalid, and the events say so. Before, open threw
    /// `storeFailure` ("CancellationError"), the state stayed `undefined` and no invalidation was emitted.
    @Test func aTerminalFailureDuringOpensWriteInvalidatesAndOpenThrowsIt() async throws {
        let store = FaultPlanStore([FaultPlan(site: .save, fault: .hangUntilCancelled)])
        let time = ManualTime()
        let refresher = RotatingRefresher(validRefreshToken: "rt-elsewhere", now: { time.now })
        let controller = UserSessionController(
            store: store, refresher: refresher, configuration: .init(clock: time.clock))
        let probe = EventProbe(controller)
        let opening = Task { try await controller.open(Self.prototype("user", expiresIn: 10, time: time)) }
        try await withHangGuard("open's write") { await store.hangs.wait(for: 1) }
        let asking = Task { try await controller.accessToken() }
        let opened = try await boundedResult("open", opening)
        guard case .failure(let error as UserSessionError) = opened else {
            Issue.record("open must throw the refresh failure, got \(opened)")
            return
        }
        #expect(error.code == .refreshFailed)
        #expect(error.failureClass == .terminal)
        #expect(try await boundedResult("accessToken", asking).errorCode == .refreshFailed)
        #expect(controller.session.state == .invalid)
        #expect(probe.kinds == [.refreshStarted, .refreshFailed(.terminal), .invalidated(.credentialsRevoked)])
    }

    // MARK: - Item 12: open's first write is ordered with refresh commits

    /// A refresh started by a token request while open's write is slow commits after it: the store ends with the
    /// rotated credentials (before, the slow open-save landed last and stored a refresh token already rotated away).
    @Test func opensFirstWriteNeverLandsAfterARefreshCommit() async throws {
        let store = FaultPlanStore([FaultPlan(site: .save, fault: .hang)])
        let time = ManualTime()
        let refresher = RotatingRefresher(validRefreshToken: "rt-user", now: { time.now })
        let controller = UserSessionController(
            store: store, refresher: refresher, configuration: .init(clock: time.clock))
        let opening = Task { try await controller.open(Self.prototype("user", expiresIn: 10, time: time)) }
        try await withHangGuard("open's write") { await store.hangs.wait(for: 1) }
        let asking = Task { try await controller.accessToken() }
        try await withHangGuard("the refresh") { await refresher.finished.wait(for: 1) }
        store.releaseHangs()
        #expect(try await boundedResult("open", opening).isSuccess)
        #expect(try await boundedResult("accessToken", asking).get() == "at-1")
        try await withHangGuard("both writes") { await store.savesDone.wait(for: 2) }
        #expect(store.saves.map { $0.session.credentials?.refreshToken } == ["rt-user", "rt-1"])
        #expect(await store.stored("user")?.credentials?.refreshToken == "rt-1")
    }

    // MARK: - Item 16: updateCredentials racing a close

    /// `updateCredentials` whose write is in progress when the session closes: the write stands (it went to that
    /// user's record) and the call returns normally instead of throwing `sessionNotOpen` after writing; nothing is
    /// published or announced after `.closed`.
    @Test func anUpdateWhoseSessionClosesDuringItsWriteDoesNotThrowAfterWriting() async throws {
        let store = FaultPlanStore()
        let time = ManualTime()
        let controller = UserSessionController(store: store, configuration: .init(clock: time.clock))
        let probe = EventProbe(controller)
        _ = try await controller.open(Self.prototype("user", time: time))
        store.inject(FaultPlan(site: .save, fault: .hang, nth: store.calls(.save) + 1))
        let new = Credentials(accessToken: "at-new", refreshToken: "rt-new", expiresAt: time.now + 3600)
        let updating = Task { try await controller.updateCredentials(new) }
        try await withHangGuard("the update's write") { await store.hangs.wait(for: 1) }
        let closing = Task { await controller.close() }
        try await withHangGuard("the close starting") {
            while controller.credentials != nil { await Task.yield() }
        }
        store.releaseHangs()
        #expect(try await boundedResult("update", updating).isSuccess)
        try await withHangGuard("close") { await closing.value }
        #expect(await store.stored("user")?.credentials?.refreshToken == "rt-new")
        #expect(probe.kinds == [.opened, .closed(.requested)])
    }
}
