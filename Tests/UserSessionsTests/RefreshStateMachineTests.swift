import Foundation
import Testing

@testable import UserSessions

/// The refresh rules alone, synchronously: no tasks, no clocks, no locks.
struct RefreshStateMachineTests {
    static let start = 1_000_000.0

    /// A machine with the default policy (lead 60 s, soft window 300 s, retry 1…60 s, breaker 3 per 30 s) and an
    /// active session whose token expires at `start + expiresIn`.
    static func machine(expiresIn: Double, refreshable: Bool = true, hasRefresher: Bool = true)
        -> RefreshStateMachine
    {
        var machine = RefreshStateMachine(
            policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: hasRefresher)
        let credentials = Credentials(
            accessToken: "at-0", refreshToken: refreshable ? "rt-0" : nil,
            expiresAt: Date(timeIntervalSinceReferenceDate: start + expiresIn))
        _ = machine.activate(
            identifier: "user", userInfo: UserInfo(id: "user"), credentials: credentials, generation: 7)
        return machine
    }

    static func refreshed(_ number: Int, expiresAt: Double) -> Credentials {
        Credentials(
            accessToken: "at-\(number)", refreshToken: "rt-\(number)",
            expiresAt: Date(timeIntervalSinceReferenceDate: expiresAt))
    }

    @Test func deadlineIsTheStartOfTheSoftWindow() {
        let machine = Self.machine(expiresIn: 3600)
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
        #expect(machine.token == "at-0")
    }

    @Test func softWindowServesTokenAndStartsExactlyOneBackgroundRefresh() {
        var machine = Self.machine(expiresIn: 200)
        let first = machine.tokenRequested(now: Self.start)
        #expect(first.token == "at-0")
        #expect(first.refresh?.kind == .background)
        #expect(first.refresh?.credentials.refreshToken == "rt-0")
        // While it runs, the hot path serves the token until the lead time starts.
        #expect(machine.nextActionAt == Self.start + 200 - 60)
        let second = machine.tokenRequested(now: Self.start + 1)
        #expect(second.token == "at-0")
        #expect(second.refresh == nil)
    }

    @Test func leadTimeMakesCallersWaitForOneRefresh() {
        var machine = Self.machine(expiresIn: 30)
        #expect(machine.tokenRequested(now: Self.start).token == nil)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("the first caller must start a refresh")
            return
        }
        #expect(job.kind == .demand)
        guard case .wait(nil) = machine.decide(.demand, now: Self.start) else {
            Issue.record("later callers must join the refresh in flight")
            return
        }
    }

    @Test func waitersAreKeptSortedAndCancelledByBinarySearch() async throws {
        // Real parked callers, so that finding a waiter (a continuation back) and missing one (`nil`) differ.
        let parked = ParkedCallers()
        let ids: [UInt64] = [5, 9, 6, 2]
        var callers: [UInt64: Task<String, any Error>] = [:]
        for id in ids { callers[id] = parked.park(id) }
        try await withHangGuard("the parked callers") { await parked.arrivals.wait(for: ids.count) }

        var machine = Self.machine(expiresIn: 30)
        _ = machine.decide(.demand, now: Self.start)
        // Ids may arrive out of order: 6 and 2 are inserted in place by the binary search.
        for id in ids { machine.register(waiterID: id, continuation: .token(try #require(parked.continuation(id)))) }
        #expect(machine.flights.waiters.map(\.id) == [2, 5, 6, 9])

        let foundSix = machine.cancelWaiter(id: 6)
        let six = try #require(foundSix, "a waiting caller is found")
        six.resume(throwing: CancellationError())
        #expect(machine.cancelWaiter(id: 6) == nil, "a tombstone is not found twice")
        for missing: UInt64 in [1, 3, 7, 10] {
            #expect(machine.cancelWaiter(id: missing) == nil, "id \(missing) never waited")
        }
        let foundNine = machine.cancelWaiter(id: 9)
        let nine = try #require(foundNine, "the last waiter is found")
        nine.resume(returning: Self.refreshed(1, expiresAt: Self.start + 3600), token: "token for 9")
        #expect(machine.flights.waiters.map(\.id) == [2, 5, 6, 9])
        #expect(machine.flights.waiters.map { $0.continuation == nil } == [false, false, true, true])

        // Each continuation found belonged to its own caller.
        #expect(try await callers[9]?.value == "token for 9")
        await #expect(throws: CancellationError.self) { try await callers[6]?.value }
        for waiter in machine.deactivate() {
            waiter.continuation?.resume(
                returning: Self.refreshed(1, expiresAt: Self.start + 3600), token: "token for \(waiter.id)")
        }
        #expect(try await callers[2]?.value == "token for 2")
        #expect(try await callers[5]?.value == "token for 5")
    }

    @Test func successCommitsPublishesAndClearsTheFlight() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        #expect(machine.commitTarget(flightID: job.flightID, newCredentials: new)?.stored.credentials == new)
        let action = machine.commit(
            flightID: job.flightID, newCredentials: new, persisted: true, now: Self.start, jitter: 0.5)
        #expect(action?.persistenceFailed == false)
        #expect(machine.token == "at-1")
        #expect(!machine.flights.isRefreshing)
        #expect(!machine.isDirty)
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
    }

    @Test func persistFailureKeepsNewCredentialsAndSchedulesARetry() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        let action = machine.commit(
            flightID: job.flightID, newCredentials: new, persisted: false, now: Self.start, jitter: 0)
        #expect(action?.persistenceFailed == true)
        #expect(machine.credentials?.refreshToken == "rt-1")
        #expect(machine.isDirty)
        // Backoff 1 s with jitter 0 gives 0.5 s.
        #expect(machine.nextActionAt == Self.start + 0.5)
        let early = machine.tokenRequested(now: Self.start + 0.4)
        #expect(early.persist == nil)
        #expect(early.refresh == nil)
        let retry = machine.tokenRequested(now: Self.start + 0.5)
        #expect(retry.token == "at-1")
        #expect(retry.persist != nil)
        // Only one retry at a time; the hot path goes back to the soft-window deadline meanwhile.
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
        let target = machine.persistRetryTarget(generation: 7)
        #expect(target?.stored.credentials?.refreshToken == "rt-1")
        machine.persistRetryFinished(
            generation: 7, version: target?.version ?? 0, succeeded: true, now: Self.start + 1, jitter: 0)
        #expect(!machine.isDirty)
    }

    @Test func transientFailureBacksOffWithJitterAndCap() {
        var machine = Self.machine(expiresIn: 200)
        #expect(machine.backoff(attempt: 1, jitter: 0) == 0.5)
        #expect(machine.backoff(attempt: 1, jitter: 1) == 1)
        #expect(machine.backoff(attempt: 3, jitter: 1) == 4)
        #expect(machine.backoff(attempt: 30, jitter: 1) == 60)
        let job = machine.tokenRequested(now: Self.start).refresh
        let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
        let action = machine.refreshFailed(
            flightID: job?.flightID ?? 0, error: error, now: Self.start, jitter: 1)
        #expect(action?.notifyTerminal == false)
        #expect(machine.nextActionAt == Self.start + 1)
        let early = machine.tokenRequested(now: Self.start + 0.5)
        #expect(early.token == "at-0")
        #expect(early.refresh == nil)
        let due = machine.tokenRequested(now: Self.start + 1)
        #expect(due.refresh != nil)
    }

    /// Issue 9, item 16: once the token has expired, refreshes that keep failing back off too. Before, every call
    /// started another refresh at once.
    @Test func expiredTokenBacksOffAfterAFailureAndRetriesOnceTheBackoffElapsed() {
        var machine = Self.machine(expiresIn: -1)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
        _ = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 1)
        guard case .fail(let early, false) = machine.decide(.demand, now: Self.start + 0.9) else {
            Issue.record("a call inside the backoff must get the last failure without a refresh")
            return
        }
        #expect(early.failureClass == .transient)
        #expect(!machine.flights.isRefreshing)
        guard case .wait(_?) = machine.decide(.demand, now: Self.start + 1) else {
            Issue.record("the first call after the backoff must retry")
            return
        }
    }

    @Test func misconfigurationStopsAutomaticRefreshes() {
        var machine = Self.machine(expiresIn: 200)
        let job = machine.tokenRequested(now: Self.start).refresh
        let error = UserSessionError(.refreshFailed, "bad client", failureClass: .misconfiguration)
        _ = machine.refreshFailed(flightID: job?.flightID ?? 0, error: error, now: Self.start, jitter: 0)
        // Served until expiry without any background attempt; then a caller's refresh is tried again.
        #expect(machine.nextActionAt == Self.start + 200)
        let later = machine.tokenRequested(now: Self.start + 150)
        #expect(later.refresh == nil)
        guard case .serve = machine.decide(.demand, now: Self.start + 150) else {
            Issue.record("a valid token must still be served")
            return
        }
        guard case .wait(_?) = machine.decide(.demand, now: Self.start + 201) else {
            Issue.record("an expired token must be refreshed on demand")
            return
        }
    }

    @Test func terminalFailureFailsEveryLaterRequest() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let action = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(action?.notifyTerminal == true)
        #expect(action?.generation == 7)
        #expect(machine.nextActionAt == -.infinity)
        guard case .fail(let failure, false) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected the terminal error")
            return
        }
        #expect(failure.failureClass == .terminal)
    }

    @Test func terminalFailureDuringRestoreDoesNotNotify() {
        var machine = Self.machine(expiresIn: -10)
        guard case .wait(let job?) = machine.decide(.restore, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let action = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(action?.notifyTerminal == false)
    }

    @Test func staleFlightIsDiscardedAfterDeactivateAndReactivate() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        _ = machine.deactivate()
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        #expect(machine.commitTarget(flightID: job.flightID, newCredentials: new) == nil)
        _ = machine.activate(
            identifier: "other", userInfo: UserInfo(id: "other"), credentials: nil, generation: 8)
        #expect(machine.commitTarget(flightID: job.flightID, newCredentials: new) == nil)
        let commit = machine.commit(
            flightID: job.flightID, newCredentials: new, persisted: true, now: Self.start, jitter: 0)
        #expect(commit == nil)
        let error = UserSessionError(.refreshFailed, "x", failureClass: .terminal)
        let failure = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(failure == nil)
        #expect(machine.terminalError == nil)
    }

    @Test func loopBreakerRefusesTheFourthRefreshWithinTheWindow() {
        var machine = Self.machine(expiresIn: 3600)
        for number in 1...3 {
            guard case .wait(let job?) = machine.decide(.forced(replacing: nil), now: Self.start) else {
                Issue.record("refresh \(number) must be allowed")
                return
            }
            _ = machine.commit(
                flightID: job.flightID, newCredentials: Self.refreshed(number, expiresAt: Self.start + 3600),
                persisted: true, now: Self.start + Double(number), jitter: 0)
        }
        guard case .fail(let error, true) = machine.decide(.forced(replacing: nil), now: Self.start + 10) else {
            Issue.record("the breaker must trip")
            return
        }
        #expect(error.code == .refreshLoop)
        guard case .wait(_?) = machine.decide(.forced(replacing: nil), now: Self.start + 31.5) else {
            Issue.record("the oldest refresh left the window")
            return
        }
    }

    @Test func forcedRequestWithReplacedTokenServesCurrentCredentials() {
        var machine = Self.machine(expiresIn: 3600)
        guard case .serve(let credentials) = machine.decide(.forced(replacing: "old"), now: Self.start) else {
            Issue.record("expected the current credentials")
            return
        }
        #expect(credentials.accessToken == "at-0")
        #expect(!machine.flights.isRefreshing)
    }

    @Test func noRefresherServesValidTokenAndFailsWhenExpired() {
        var machine = Self.machine(expiresIn: 30, hasRefresher: false)
        #expect(machine.tokenRequested(now: Self.start).token == "at-0")
        #expect(machine.nextActionAt == Self.start + 30)
        guard case .fail(let error, false) = machine.decide(.demand, now: Self.start + 30) else {
            Issue.record("expected an error")
            return
        }
        #expect(error.code == .noRefresher)
        guard case .fail(let restoreError, false) = machine.decide(.restore, now: Self.start + 30) else {
            Issue.record("expected an error")
            return
        }
        #expect(restoreError.code == .credentialsUnusable)
    }

    @Test func updateSupersedesTheFlightAndDescribesTheChange() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        var new = Self.refreshed(9, expiresAt: Self.start + 7200)
        new.grantedPermissions = ["read", "write"]
        let action = machine.update(new, generation: 7)
        #expect(action?.change == .init(extended: true, addedPermissions: ["read", "write"]))
        #expect(!machine.flights.isRefreshing)
        #expect(!machine.isCurrent(flightID: job.flightID))
        #expect(machine.token == "at-9")
        let stale = machine.update(new, generation: 6)
        #expect(stale == nil)
    }

    @Test func persistSlotIsFreedWhenNobodyWaits() {
        var slot = PersistenceSlot()
        let firstTicket = slot.makeTicket()
        let first = slot.tryAcquire(ticket: firstTicket)
        let next = slot.release(ticket: firstTicket)
        #expect(first)
        guard case .none = next else {
            Issue.record("nobody was queued")
            return
        }
        #expect(!slot.isHeld)
    }

    @Test func persistSlotIsKeptForTheNextWriterInLineUntilItWaits() async {
        var slot = PersistenceSlot()
        let firstTicket = slot.makeTicket()
        let secondTicket = slot.makeTicket()
        let first = slot.tryAcquire(ticket: firstTicket)
        let second = slot.tryAcquire(ticket: secondTicket)
        #expect(first)
        #expect(!second)
        // The second writer has not enqueued its continuation yet: nobody to resume, and nobody else gets the slot.
        guard case .none = slot.release(ticket: firstTicket) else {
            Issue.record("nobody was waiting")
            return
        }
        #expect(slot.isHeld)
        let third = slot.tryAcquire(ticket: slot.makeTicket())
        #expect(!third)
        // Nor can an overrun be blamed on it: it has not written.
        guard case .none = slot.abandon() else {
            Issue.record("nobody was waiting")
            return
        }
        let blamed = slot.finishWrite(ticket: secondTicket)
        #expect(!blamed)
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            guard case .resume(let own) = slot.enqueue(ticket: secondTicket, continuation: continuation) else {
                Issue.record("the slot was the second writer's already")
                continuation.resume()
                return
            }
            own.resume()
        }
        #expect(slot.tryAcquire(ticket: secondTicket))
    }

    @Test func deactivateFlushesDirtyCredentialsOnce() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = machine.decide(.demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        _ = machine.commit(
            flightID: job.flightID, newCredentials: Self.refreshed(1, expiresAt: Self.start + 3600),
            persisted: false, now: Self.start, jitter: 0)
        _ = machine.deactivate()
        let flush = machine.takeFinalFlush()
        let again = machine.takeFinalFlush()
        #expect(flush?.stored.credentials?.refreshToken == "rt-1")
        #expect(again == nil)
        #expect(machine.credentials == nil)
    }
}

/// Callers parked on unsafe continuations, one per id, whose continuations a test hands to a state machine.
private final class ParkedCallers: Sendable {
    private let continuations = Locked<[UInt64: UnsafeContinuation<String, any Error>]>([:])
    /// One arrival per caller that has parked.
    let arrivals = ArrivalCounter()

    /// Starts a caller that waits for its continuation to be resumed and returns what it was resumed with.
    func park(_ id: UInt64) -> Task<String, any Error> {
        Task {
            try await withVisibleUnsafeThrowingContinuation { continuation in
                continuations.withLock { $0[id] = continuation }
                arrivals.arrive()
            }
        }
    }

    /// The continuation of caller `id`, once it has parked.
    func continuation(_ id: UInt64) -> UnsafeContinuation<String, any Error>? {
        continuations.withLock { $0[id] }
    }
}
