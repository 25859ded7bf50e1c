import Foundation
import Testing

@testable import UserSessions

/// Issue 6, item 3: faults during a refresh — the store failing, hanging or corrupting the commit write, and a
/// refresher that hangs forever or loses the response of a rotation. Every await is bounded by a hang guard.
struct FaultInjectionRefreshTests {
    /// Opens "user" with `at-0` / `rt-0` expiring in 10 s: inside the lead time, so the next `accessToken()` waits
    /// for a refresh.
    private func openExpiring(_ rig: FaultRig) async throws {
        let controller = rig.controller
        let prototype = rig.prototype(expiresIn: 10)
        _ = try await withHangGuard("open") { try await controller.open(prototype) }
    }

    // MARK: - The commit write

    @Test(arguments: StoreCallSite.allCases, StoreFault.allCases)
    func refreshCommitUnderStoreFault(site: StoreCallSite, fault: StoreFault) async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.injectAtNextCall(site, fault)
        let asking = Task { try await controller.accessToken() }
        // A commit writes the credentials and nothing else.
        let reached = site == .save

        switch (reached, fault) {
        case (true, .fail):
            // Kept in memory, handed out, reported; the next refresh uses the NEW refresh token.
            #expect(try await boundedResult("accessToken", asking).get() == "at-1")
            try await rig.waitForEvent(.credentialsRefreshed)
            #expect(rig.probe.kinds == [.opened, .refreshStarted, .persistenceFailed, .credentialsRefreshed])
            #expect(controller.credentials?.refreshToken == "rt-1")
            #expect(await rig.storedRefreshToken == "rt-0")
            let refreshed = try await withHangGuard("refresh") { try await controller.refreshCredentials() }
            #expect(refreshed.accessToken == "at-2")
            #expect(rig.refresher.received == ["rt-0", "rt-1"])
            #expect(await rig.storedRefreshToken == "rt-2")
        case (true, .hang), (true, .hangUntilCancelled):
            // Commit order: written first, so the waiter waits for the write. Closing fails it at once.
            try await withHangGuard("the store hang") { await rig.store.hangs.wait(for: 1) }
            let closing = Task { await controller.close() }
            #expect(try await boundedResult("accessToken", asking).errorCode == .sessionNotOpen)
            if fault == .hang {
                // `close()` waits for the write in progress (so a later remove cannot be undone by it).
                rig.store.releaseHangs()
                try await withHangGuard("close") { await closing.value }
                #expect(await rig.storedRefreshToken == "rt-1")
            } else {
                // The close waits `storeTimeout`, then cancels the background work: the write fails at once and
                // the close's final write stores the rotated credentials instead, so rt-1 is never lost.
                try await withHangGuard("close") { await closing.value }
                #expect(rig.refresher.validRefreshToken == "rt-1")
                #expect(await rig.storedRefreshToken == "rt-1")
            }
            try await rig.waitForEvent(.closed(.requested))
            #expect(controller.session.state == .closed)
            #expect(rig.count(.credentialsRefreshed) == 0)
        case (true, .corrupt):
            // The store cannot see a torn write; the next restore does.
            #expect(try await boundedResult("accessToken", asking).get() == "at-1")
            try await withHangGuard("close") { await controller.close() }
            let restoring = Task { try await rig.restarted().controller.restore() }
            #expect(try await boundedResult("restore", restoring).errorCode == .storeCorrupt)
        case (false, _):
            #expect(try await boundedResult("accessToken", asking).get() == "at-1")
            #expect(await rig.storedRefreshToken == "rt-1")
        }
        #expect(rig.store.injectedCount == (reached ? 1 : 0))
    }

    /// The store is down for two refreshes and one retry, then recovers: the newest credentials are in use all
    /// along, each refresh sends the refresh token of the one before, and the write is retried — driven by the
    /// clock passing the backoff and a token request — until it lands.
    @Test func rotatedRefreshTokensSurviveAStoreOutageAndArePersistedWhenItRecovers() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.injectAtNextCall(.save, .fail, persistent: true)

        #expect(try await withHangGuard("accessToken") { try await controller.accessToken() } == "at-1")
        let second = try await withHangGuard("refresh") { try await controller.refreshCredentials() }
        #expect(second.refreshToken == "rt-2")
        #expect(rig.refresher.received == ["rt-0", "rt-1"])
        #expect(try await controller.accessToken() == "at-2")
        #expect(await rig.storedRefreshToken == "rt-0")
        // Events reach the probe through its own reading task: wait for them rather than count what arrived so far.
        try await withHangGuard("two persistence failures reported") {
            await rig.probe.wait { events in events.count { $0.kind == .persistenceFailed } == 2 }
        }
        #expect(rig.count(.persistenceFailed) == 2)

        // A retry while the store is still down fails and is reported; the credentials stay in memory. The ledger's
        // write loop starts in a task of its own: the clock moves once it sleeps, or its backoff would start after
        // the move and never end.
        let attempts = rig.store.calls(.save)
        try await withHangGuard("the write loop sleeping") { await rig.time.sleeps.wait(for: 1) }
        rig.time.advance(by: 120)
        #expect(try await controller.accessToken() == "at-2")
        try await withHangGuard("the failed retry") {
            await rig.probe.wait { events in events.count { $0.kind == .persistenceFailed } == 3 }
        }
        #expect(rig.store.calls(.save) == attempts + 1)
        #expect(controller.credentials?.refreshToken == "rt-2")

        // Before the backoff elapses, token requests do not write.
        #expect(try await controller.accessToken() == "at-2")
        #expect(rig.store.calls(.save) == attempts + 1)

        rig.store.recover()
        let saves = rig.store.savesDone.count
        // The failed retry was reported before its loop went back to sleep: the clock moves once it has.
        try await withHangGuard("the write loop sleeping again") { await rig.time.sleeps.wait(for: 2) }
        rig.time.advance(by: 120)
        #expect(try await controller.accessToken() == "at-2")
        try await withHangGuard("the retry") { await rig.store.savesDone.wait(for: saves + 1) }
        #expect(await rig.storedRefreshToken == "rt-2")
        #expect(await rig.store.stored("user")?.credentials?.accessToken == "at-2")

        // Nothing left to write: closing writes nothing, and a restart restores the newest credentials.
        let writes = rig.store.calls(.save)
        try await withHangGuard("close") { await controller.close() }
        #expect(rig.store.calls(.save) == writes)
        let restarted = rig.restarted()
        _ = try await withHangGuard("restore") { try await restarted.controller.restore() }
        #expect(try await restarted.controller.accessToken() == "at-2")
        #expect(rig.store.injectedCount == 3)
    }

    // MARK: - A refresher that hangs forever

    @Test func aRefresherHangingForeverDoesNotKeepCloseFromReturningAndItsWaitersFail() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        // Never released: the first refresh hangs for the rest of the process, ignoring cancellation.
        rig.refresher.hang(onCall: 1)
        let waiters = (0..<8).map { _ in Task { try await controller.accessToken() } }
        try await withHangGuard("the refresh starting") { await rig.refresher.started.wait(for: 1) }

        try await withHangGuard("close") { await controller.close() }
        for waiter in waiters {
            #expect(try await boundedResult("a waiter", waiter).errorCode == .sessionNotOpen)
        }
        try await rig.waitForEvent(.closed(.requested))
        #expect(controller.session.state == .closed)
        #expect(rig.log.names("stopped:") == ["0"])
        #expect(rig.refresher.calls == 1)

        // The next session is served past the hung call; the hung one cannot hold up its open or its tokens. (It
        // must not refresh `rt-0` a second time while the hung call still presents it: that would be a reuse,
        // which the process-wide ledger refuses to send. A real sign-in brings a refresh token of its own.)
        let prototype = rig.prototype(expiresIn: 3600)
        _ = try await withHangGuard("reopen") { try await controller.open(prototype) }
        #expect(try await withHangGuard("accessToken") { try await controller.accessToken() } == "at-0")
        try await withHangGuard("shutdown") { await controller.shutdown() }
        #expect(controller.session.state == .closed)
    }

    /// Issue 9, item 9: a refresh released after `close()` is never served, published or announced, but its
    /// rotated credentials are written to the closed user's record, so the next restore sends the new refresh
    /// token (before, it was dropped, the restore sent the spent `rt-0` and the rotating server answered
    /// `invalid_grant`).
    @Test func aRefreshReleasedAfterCloseIsWrittenToTheUsersRecordButNeverServed() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.refresher.hang(onCall: 1)
        let waiter = Task { try await controller.accessToken() }
        try await withHangGuard("the refresh starting") { await rig.refresher.started.wait(for: 1) }
        try await withHangGuard("close") { await controller.close() }
        #expect(try await boundedResult("the waiter", waiter).errorCode == .sessionNotOpen)
        let saves = rig.store.savesDone.count
        rig.refresher.release()
        try await withHangGuard("the late write") { await rig.store.savesDone.wait(for: saves + 1) }
        #expect(await rig.storedRefreshToken == "rt-1")
        #expect(rig.count(.credentialsRefreshed) == 0)
        #expect(rig.probe.kinds.last == .closed(.requested))
        #expect(controller.credentials == nil)

        // The next session of this user, restored after the credentials expired, refreshes with rt-1.
        rig.time.advance(by: 7200)
        let restarted = rig.restarted()
        _ = try await withHangGuard("restore") { try await restarted.controller.restore() }
        #expect(rig.refresher.received == ["rt-0", "rt-1"])
        #expect(restarted.controller.session.state == .opened)
        #expect(try await restarted.controller.accessToken() == "at-2")
    }

    // MARK: - A rotation whose response is lost

    /// The server rotated the refresh token but the response never arrived: the next attempt, with the old refresh
    /// token, gets `invalid_grant`, and the session ends `invalid` instead of looping.
    @Test func aLostRotationResponseEndsInInvalidGrantAndAnInvalidSession() async throws {
        let rig = FaultRig()
        let controller = rig.controller
        try await openExpiring(rig)
        rig.refresher.loseResponse(onCall: 1)

        let first = Task { try await controller.accessToken() }
        let failure = try await boundedResult("accessToken", first)
        #expect(failure.errorCode == .refreshFailed)
        #expect(((try? failure.get()) == nil))
        if case .failure(let error as UserSessionError) = failure { #expect(error.failureClass == .transient) }
        #expect(controller.session.state == .opened)
        #expect(rig.refresher.validRefreshToken == "rt-1")

        // Past the backoff, the still-valid token is refreshed again — with the only refresh token we have.
        rig.time.advance(by: 2)
        let second = Task { try await controller.accessToken() }
        let terminal = try await boundedResult("accessToken", second)
        if case .failure(let error as UserSessionError) = terminal {
            #expect(error.failureClass == .terminal)
        } else {
            Issue.record("expected a terminal failure, got \(terminal)")
        }
        try await rig.waitForEvent(.invalidated(.credentialsRevoked))
        #expect(controller.session.state == .invalid)
        #expect(rig.log.names("stopped:") == ["0"])
        #expect(rig.refresher.received == ["rt-0", "rt-0"])
        #expect(
            rig.probe.kinds == [
                .opened, .refreshStarted, .refreshFailed(.transient), .refreshStarted, .refreshFailed(.terminal),
                .invalidated(.credentialsRevoked),
            ])
        await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
        // Stored data is kept (the gate never writes a failure); a restore then fails with the terminal error.
        #expect(await rig.storedRefreshToken == "rt-0")
    }

    @Test func aLostRotationResponseDuringRestoreOpensNothing() async throws {
        let first = FaultRig()
        let prototype = first.prototype()
        _ = try await withHangGuard("open") { try await first.controller.open(prototype) }
        try await withHangGuard("close") { await first.controller.close() }
        first.time.advance(by: 3601)
        first.refresher.loseResponse(onCall: 1)
        let rig = first.restarted()
        let controller = rig.controller

        let restoring = Task { try await controller.restore() }
        let transient = try await boundedResult("restore", restoring)
        #expect(transient.errorCode == .refreshFailed)
        #expect(controller.session.state == .undefined)

        let again = Task { try await controller.restore() }
        let terminal = try await boundedResult("restore", again)
        if case .failure(let error as UserSessionError) = terminal {
            #expect(error.failureClass == .terminal)
        } else {
            Issue.record("expected a terminal failure, got \(terminal)")
        }
        #expect(controller.session.state == .undefined)
        #expect(rig.log.all.isEmpty)
        #expect(rig.refresher.received == ["rt-0", "rt-0"])
    }

    // MARK: - The nth call

    /// A script of lifecycle and refresh calls, with one fault at the nth call to one site. Whatever fails, every
    /// call returns in bounded time with a typed error or its result, and afterwards a healthy store restores
    /// (or typed-refuses) without a crash.
    @Test(arguments: StoreCallSite.allCases, [StoreFault.fail, .corrupt])
    func everyNthCallOfAScriptSurvivesAFault(site: StoreCallSite, fault: StoreFault) async throws {
        var injected = 0
        for nth in 1...4 {
            let rig = FaultRig()
            rig.store.inject(FaultPlan(site: site, fault: fault, nth: nth))
            let controller = rig.controller
            let prototype = rig.prototype(expiresIn: 10)
            let steps: [(String, @Sendable () async throws -> Void)] = [
                ("open", { _ = try await controller.open(prototype) }),
                ("accessToken", { _ = try await controller.accessToken() }),
                ("close", { await controller.close() }),
                ("restore", { _ = try await controller.restore() }),
                ("refresh", { _ = try await controller.refreshCredentials() }),
                ("open again", { _ = try await controller.open(prototype) }),
                ("closeAndClear", { try await controller.closeAndClear() }),
                ("restore after clear", { _ = try await controller.restore() }),
            ]
            var cleared = false
            for (name, step) in steps {
                let task = Task { try await step() }
                let result = try await boundedResult("\(name) with \(fault) at \(site) #\(nth)", task)
                if case .failure(let error) = result {
                    #expect(error is UserSessionError, "\(name): \(error)")
                }
                if name == "closeAndClear" { cleared = result.isSuccess }
            }
            // A clear that succeeded leaves nothing to restore (a failed one may leave the session restorable).
            if cleared { #expect(controller.session.state != .opened) }
            injected += rig.store.injectedCount
            let restarted = rig.restarted()
            let restoring = Task { try await restarted.controller.restore() }
            let restored = try await boundedResult("restore after a restart", restoring)
            if case .failure(let error) = restored { #expect(error is UserSessionError) }
        }
        #expect(injected >= 1)
    }
}
