import Foundation
import Testing

@testable import UserSessions

/// The single-flight gate with a scripted refresher, a scripted store and a manual clock.
struct RefreshGateTests {
    @Test func freshTokenIsServedWithoutRefresh() async throws {
        let harness = RefreshHarness()
        harness.activate(expiresIn: 3600)
        #expect(harness.gate.freshToken()?.token == "at-0")
        #expect(try await harness.gate.accessToken() == "at-0")
        #expect(harness.refreshCalls == 0)
    }

    @Test func oneHundredThousandConcurrentWaitersCauseExactlyOneRefresh() async throws {
        let release = AsyncGate()
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let callers = 100_000
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<callers {
                group.addTask {
                    await release.wait()
                    return try await harness.gate.accessToken()
                }
            }
            while release.waiterCount < callers { await Task.yield() }
            release.open()
            await harness.awaitWaiters(callers)
            refresherGate.open()
            var tokens: [String: Int] = [:]
            for try await token in group { tokens[token, default: 0] += 1 }
            return tokens
        }
        #expect(tokens == ["at-1": callers])
        #expect(harness.refreshCalls == 1)
        #expect(harness.store.saves.map(\.session.credentials?.refreshToken) == ["rt-1"])
    }

    @Test func cancelledFirstWaiterLeavesOthersWaitingAndTheRefreshIsCommitted() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let first = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        let others = (0..<3).map { _ in Task { try await harness.gate.accessToken() } }
        await harness.awaitWaiters(4)
        first.cancel()
        await #expect(throws: CancellationError.self) { try await first.value }
        await harness.awaitWaiters(3)
        refresherGate.open()
        for other in others { #expect(try await other.value == "at-1") }
        #expect(harness.refreshCalls == 1)
        #expect(harness.store.stored("user")?.credentials?.refreshToken == "rt-1")
        #expect(try await harness.gate.accessToken() == "at-1")
    }

    /// Issue 9, item 9: the late result of a refresh whose session ended is never served or announced, but it is
    /// written to that session's own record (the server already rotated the refresh token), never to the record
    /// of the session that replaced it.
    @Test func deactivateDuringRefreshWritesTheLateResultOnlyToItsOwnRecord() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let waiter = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        let flight = await harness.gate.backgroundTasks.last(afterStarting: 1)
        await harness.gate.deactivate()
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await waiter.value }
        // A new session opens before the old refresh returns.
        harness.gate.activate(
            identifier: "next", userInfo: UserInfo(id: "next"),
            credentials: Credentials(accessToken: "next-at", expiresAt: harness.time.now.addingTimeInterval(3600)),
            generation: 2)
        refresherGate.open()
        await flight.value
        #expect(harness.refresher?.finished.count == 1)
        #expect(harness.store.saves.map(\.identifier) == ["user"])
        #expect(harness.store.stored("user")?.credentials?.refreshToken == "rt-1")
        #expect(harness.store.stored("next") == nil)
        #expect(harness.gate.freshToken()?.token == "next-at")
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(!kinds.contains(.credentialsRefreshed))
    }

    @Test func persistFailureKeepsCredentialsInMemoryAndRetriesLater() async throws {
        let harness = RefreshHarness()
        harness.activate(expiresIn: 10)
        harness.store.failNextSaves(2)
        let sleeps = harness.time.sleeps.count
        #expect(try await harness.gate.accessToken() == "at-1")
        #expect(harness.store.saveCount == 0)
        #expect(harness.gate.currentCredentials()?.refreshToken == "rt-1")
        // The ledger retries the write: the first retry is due within the initial delay (1 s, with jitter); it fails
        // too.
        try await withHangGuard("the first retry's wait") { await harness.time.sleeps.wait(for: sleeps + 1) }
        harness.time.advance(by: 1)
        try await withHangGuard("the second retry's wait") { await harness.time.sleeps.wait(for: sleeps + 2) }
        #expect(harness.gate.freshToken()?.token == "at-1")
        #expect(harness.store.saveCount == 0)
        // The second retry (within 2 s) succeeds.
        harness.time.advance(by: 2)
        #expect(harness.gate.freshToken()?.token == "at-1")
        let store = harness.store
        try await withHangGuard("the second retry") {
            while store.stored("user")?.credentials?.refreshToken == nil { await Task.yield() }
        }
        #expect(harness.store.stored("user")?.credentials?.refreshToken == "rt-1")
        // The next refresh spends rt-1, never the spent rt-0.
        harness.time.advance(by: 3600)
        #expect(try await harness.gate.accessToken() == "at-2")
        #expect(harness.refresher?.received.map(\.refreshToken) == ["rt-0", "rt-1"])
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds.filter { $0 == .persistenceFailed }.count == 2)
        #expect(kinds.prefix(3) == [.refreshStarted, .persistenceFailed, .credentialsRefreshed])
    }

    @Test func deactivateFlushesCredentialsThatCouldNotBeWritten() async throws {
        let harness = RefreshHarness()
        harness.activate(expiresIn: 10)
        harness.store.failNextSaves(1)
        #expect(try await harness.gate.accessToken() == "at-1")
        #expect(harness.store.saveCount == 0)
        await harness.gate.deactivate()
        #expect(harness.store.stored("user")?.credentials?.refreshToken == "rt-1")
    }

    @Test func terminalFailureFailsWaitersAndCallsTheHandler() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.terminal)])
        harness.activate(expiresIn: -1, generation: 5)
        let error = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(error?.failureClass == .terminal)
        await harness.terminalCalls.wait(for: 1)
        #expect(harness.terminalGenerations.withLock { $0 } == [5])
        // Later requests fail at once, without another refresh.
        let again = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(again?.failureClass == .terminal)
        #expect(harness.refreshCalls == 1)
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds == [.refreshStarted, .refreshFailed(.terminal)])
    }

    @Test func transientFailureKeepsTheSessionUsableAndTheNextCallRetries() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.transient), .succeed])
        harness.activate(expiresIn: -1)
        let error = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(error?.failureClass == .transient)
        // Inside the backoff (at most the 1-s initial delay), the expired token is not refreshed again.
        let early = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(early?.failureClass == .transient)
        #expect(harness.refreshCalls == 1)
        harness.time.advance(by: 1)
        #expect(try await harness.gate.accessToken() == "at-2")
        #expect(harness.refreshCalls == 2)
        #expect(harness.terminalCalls.count == 0)
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds.contains(.refreshFailed(.transient)))
    }

    @Test func errorsOtherThanUserSessionErrorAreTransientAndCancellationIsNotTerminal() async throws {
        struct Boom: Error {}
        let harness = RefreshHarness(steps: [.fail(Boom()), .fail(CancellationError()), .succeed])
        harness.activate(expiresIn: -1)
        let first = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(first?.failureClass == .transient)
        harness.time.advance(by: 1)
        let second = await #expect(throws: UserSessionError.self) { try await harness.gate.accessToken() }
        #expect(second?.failureClass == .cancelled)
        harness.time.advance(by: 2)
        #expect(try await harness.gate.accessToken() == "at-3")
        #expect(harness.terminalCalls.count == 0)
    }

    @Test func softWindowServesTheOldTokenAndStartsExactlyOneBackgroundRefresh() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 200)
        for _ in 0..<50 { #expect(try await harness.gate.accessToken() == "at-0") }
        await harness.refresher?.started.wait(for: 1)
        #expect(harness.refreshCalls == 1)
        refresherGate.open()
        await harness.awaitBackgroundWork()
        #expect(try await harness.gate.accessToken() == "at-1")
        #expect(harness.refreshCalls == 1)
    }

    @Test func failedBackgroundRefreshIsNeverSeenAndBacksOff() async throws {
        let harness = RefreshHarness(steps: [ScriptedRefresher.failure(.transient)])
        harness.activate(expiresIn: 200)
        #expect(harness.gate.freshToken()?.token == "at-0")
        await harness.awaitBackgroundWork()
        #expect(harness.refreshCalls == 1)
        // Within the backoff the token is served without another attempt.
        #expect(try await harness.gate.accessToken() == "at-0")
        #expect(harness.refreshCalls == 1)
        harness.time.advance(by: 1)
        #expect(try await harness.gate.accessToken() == "at-0")
        await harness.awaitBackgroundWork()
        #expect(harness.refreshCalls == 2)
        #expect(try await harness.gate.accessToken() == "at-2")
    }

    @Test func loopBreakerTripsWithoutCallingTheRefresher() async throws {
        let harness = RefreshHarness()
        harness.activate(expiresIn: 3600)
        for number in 1...3 { #expect(try await harness.gate.refresh().accessToken == "at-\(number)") }
        let error = await #expect(throws: UserSessionError.self) { try await harness.gate.refresh() }
        #expect(error?.code == .refreshLoop)
        #expect(harness.refreshCalls == 3)
        harness.time.advance(by: 31)
        #expect(try await harness.gate.refresh().accessToken == "at-4")
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds.filter { $0 == .refreshLoopTripped }.count == 1)
    }

    @Test func withoutRefresherValidTokensAreServedAndExpiredOnesFail() async throws {
        let harness = RefreshHarness(withRefresher: false)
        harness.activate(expiresIn: 30)
        #expect(try await harness.gate.accessToken() == "at-0")
        harness.time.advance(by: 31)
        await #expect(throws: UserSessionError(.noRefresher, "")) { try await harness.gate.accessToken() }
        await #expect(throws: UserSessionError(.credentialsUnusable, "")) { try await harness.gate.ensureUsable() }
    }

    @Test func ensureUsableRefreshesExpiredCredentialsWithoutCallingTheTerminalHandler() async throws {
        let harness = RefreshHarness(steps: [.succeed, ScriptedRefresher.failure(.terminal)])
        harness.activate(expiresIn: -1)
        try await harness.gate.ensureUsable()
        #expect(harness.gate.currentCredentials()?.accessToken == "at-1")
        // Nothing stored, so the invalid_grant fallback finds no rotated token to adopt. The new session holds a
        // refresh token of its own (`rt-0` is spent: the ledger would answer it with its rotation, at-1), so the
        // refresher is asked, and refuses.
        try await harness.store.remove(identifier: "user")
        var other = harness.credentials(expiresIn: -1)
        other.refreshToken = "rt-other"
        harness.gate.activate(identifier: "user", userInfo: UserInfo(id: "user"), credentials: other, generation: 2)
        await #expect(throws: UserSessionError(.refreshFailed, "")) { try await harness.gate.ensureUsable() }
        #expect(harness.terminalCalls.count == 0)
    }

    @Test func requestsWithoutAnOpenSessionFail() async throws {
        let harness = RefreshHarness()
        #expect(harness.gate.freshToken()?.token == nil)
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) { try await harness.gate.accessToken() }
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) {
            try await harness.gate.update(harness.credentials(expiresIn: 10))
        }
    }

    @Test func updateSupersedesARefreshInFlightAndDescribesTheChange() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let waiter = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        let flight = await harness.gate.backgroundTasks.last(afterStarting: 1)
        await harness.awaitWaiters(1)
        let updated = Credentials(
            accessToken: "at-new", refreshToken: "rt-new", expiresAt: harness.time.now.addingTimeInterval(7200),
            grantedPermissions: ["read", "write"])
        try await harness.gate.update(updated)
        #expect(try await waiter.value == "at-new")
        refresherGate.open()
        await flight.value
        #expect(harness.store.saves.map(\.session.credentials?.accessToken) == ["at-new"])
        #expect(harness.gate.currentCredentials()?.accessToken == "at-new")
        let kinds = await harness.recordedEvents().map(\.kind)
        #expect(kinds == [.refreshStarted, .credentialsUpdated(.init(extended: true, addedPermissions: ["write"]))])
    }
}
