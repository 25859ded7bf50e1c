import Foundation
import Testing

@testable import UserSessions

/// The refresh rules alone, synchronously: no tasks, no clocks, no locks. Every rule is checked through the
/// machine's inputs (what happened) and the actions they return.
struct RefreshStateMachineTests {
    static let start = 1_000_000.0

    /// A machine with the default policy (lead 60 s, soft window 300 s, retry 1…60 s, breaker 3 per 30 s) and an
    /// active session whose token expires at `start + expiresIn`, held in the ledger under `heldFence` (`signingIn`
    /// while its sign-in has not landed).
    static func machine(
        expiresIn: Double, refreshable: Bool = true, hasRefresher: Bool = true, heldFence: UInt64 = 0,
        signingIn: Bool = false
    ) -> RefreshStateMachine {
        var machine = RefreshStateMachine(
            policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: hasRefresher)
        let credentials = Credentials(
            accessToken: "at-0", refreshToken: refreshable ? "rt-0" : nil,
            expiresAt: Date(timeIntervalSinceReferenceDate: start + expiresIn))
        _ = machine.activated(
            identifier: "user", userInfo: UserInfo(id: "user"), credentials: credentials, generation: 7,
            heldFence: heldFence, signingIn: signingIn)
        return machine
    }

    static func refreshed(_ number: Int, expiresAt: Double) -> Credentials {
        Credentials(
            accessToken: "at-\(number)", refreshToken: "rt-\(number)",
            expiresAt: Date(timeIntervalSinceReferenceDate: expiresAt))
    }

    /// How an asynchronous request was answered, read from the actions of
    /// ``RefreshStateMachine/credentialsAsked(_:now:waiter:cancelled:)``.
    enum Answer {
        case serve(Credentials)
        /// The caller waits; `start` is the refresh it started, if it was the first.
        case wait(start: RefreshStateMachine.RefreshJob?)
        case fail(UserSessionError, loopTripped: Bool)
    }

    /// Feeds `request` at `now` from a caller without a continuation (nothing to resume: the answer is read from
    /// the actions).
    static func ask(
        _ machine: inout RefreshStateMachine, _ request: RefreshStateMachine.Request, now: Double, id: UInt64 = 1
    ) -> Answer {
        let (_, actions) = machine.credentialsAsked(
            request, now: now, waiter: .init(id: id, continuation: nil), cancelled: false)
        guard let (_, result) = actions.caller else { return .wait(start: actions.refresh) }
        switch result {
        case .success(let credentials):
            return .serve(credentials)
        case .failure(let error):
            let failure = (error as? UserSessionError) ?? UserSessionError(.wrongState, "not a UserSessionError")
            return .fail(failure, loopTripped: actions.loopTripped != nil)
        }
    }

    /// The refresh of `job` returned `new` and its write finished (`persisted` or not), as the gate feeds it:
    /// ``RefreshStateMachine/refreshReturned(flightID:newCredentials:)`` (holding the write turn), then
    /// ``RefreshStateMachine/commitWritten(flightID:newCredentials:revision:persistError:now:jitter:)``.
    @discardableResult
    static func commit(
        _ machine: inout RefreshStateMachine, _ job: RefreshStateMachine.RefreshJob, _ new: Credentials,
        persisted: Bool = true, now: Double, jitter: Double = 0
    ) -> (waiters: Int?, actions: RefreshStateMachine.Actions) {
        guard machine.refreshReturned(flightID: job.flightID, newCredentials: new) != nil else { return (nil, .none) }
        return machine.commitWritten(
            flightID: job.flightID, newCredentials: new,
            persistError: persisted ? nil : UserSessionError(.storeFailure, "disk full"), now: now, jitter: jitter)
    }

    @Test func deadlineIsTheStartOfTheSoftWindow() {
        let machine = Self.machine(expiresIn: 3600)
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
        #expect(machine.token == "at-0")
    }

    @Test func softWindowServesTokenAndStartsExactlyOneBackgroundRefresh() {
        var machine = Self.machine(expiresIn: 200)
        let (first, firstActions) = machine.tokenAsked(now: Self.start)
        #expect(first.token == "at-0")
        #expect(first.generation == 7)
        #expect(firstActions.refresh?.kind == .background)
        #expect(firstActions.refresh?.credentials.refreshToken == "rt-0")
        // While it runs, the hot path serves the token until the lead time starts.
        #expect(machine.nextActionAt == Self.start + 200 - 60)
        let (second, secondActions) = machine.tokenAsked(now: Self.start + 1)
        #expect(second.token == "at-0")
        #expect(secondActions.refresh == nil)
    }

    @Test func leadTimeMakesCallersWaitForOneRefresh() {
        var machine = Self.machine(expiresIn: 30)
        #expect(machine.tokenAsked(now: Self.start).0.token == nil)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start, id: 1) else {
            Issue.record("the first caller must start a refresh")
            return
        }
        #expect(job.kind == .demand)
        guard case .wait(nil) = Self.ask(&machine, .demand, now: Self.start, id: 2) else {
            Issue.record("later callers must join the refresh in flight")
            return
        }
        #expect(machine.flights.waiters.map(\.id) == [1, 2])
    }

    @Test func waitersAreKeptSortedAndCancelledByBinarySearch() async throws {
        // Real parked callers, so that finding a waiter (a continuation back) and missing one (`nil`) differ.
        let parked = ParkedCallers()
        let ids: [UInt64] = [5, 9, 6, 2]
        var callers: [UInt64: Task<String, any Error>] = [:]
        for id in ids { callers[id] = parked.park(id) }
        try await withHangGuard("the parked callers") { await parked.arrivals.wait(for: ids.count) }

        var machine = Self.machine(expiresIn: 30)
        _ = Self.ask(&machine, .demand, now: Self.start, id: 1)
        // Ids may arrive out of order: 6 and 2 are inserted in place by the binary search.
        for id in ids {
            let waiter = RefreshStateMachine.Waiter(id: id, continuation: .token(try #require(parked.continuation(id))))
            let (joined, _) = machine.tokenAwaited(now: Self.start, waiter: waiter)
            #expect(joined, "caller \(id) joins the refresh in flight")
        }
        #expect(machine.flights.waiters.map(\.id) == [1, 2, 5, 6, 9])

        let foundSix = machine.waiterCancelled(id: 6).caller
        let six = try #require(foundSix?.continuation, "a waiting caller is found")
        guard case .failure(let sixError) = foundSix?.result, sixError is CancellationError else {
            Issue.record("a cancelled waiter gets CancellationError")
            return
        }
        six.resume(throwing: CancellationError())
        #expect(machine.waiterCancelled(id: 6).caller == nil, "a tombstone is not found twice")
        for missing: UInt64 in [3, 4, 7, 10] {
            #expect(machine.waiterCancelled(id: missing).caller == nil, "id \(missing) never waited")
        }
        let foundNine = machine.waiterCancelled(id: 9).caller
        let nine = try #require(foundNine?.continuation, "the last waiter is found")
        nine.resume(returning: Self.refreshed(1, expiresAt: Self.start + 3600), token: "token for 9")
        #expect(machine.flights.waiters.map(\.id) == [1, 2, 5, 6, 9])
        #expect(machine.flights.waiters.map { $0.continuation == nil } == [true, false, false, true, true])

        // Each continuation found belonged to its own caller.
        #expect(try await callers[9]?.value == "token for 9")
        await #expect(throws: CancellationError.self) { try await callers[6]?.value }
        for waiter in machine.deactivated().waiters {
            waiter.continuation?.resume(
                returning: Self.refreshed(1, expiresAt: Self.start + 3600), token: "token for \(waiter.id)")
        }
        #expect(try await callers[2]?.value == "token for 2")
        #expect(try await callers[5]?.value == "token for 5")
    }

    @Test func aTokenRequestJoinsOnlyARefreshItMustWaitFor() {
        var machine = Self.machine(expiresIn: 30)
        let (beforeAnyFlight, _) = machine.tokenAwaited(now: Self.start, waiter: .init(id: 1, continuation: nil))
        #expect(!beforeAnyFlight, "nothing runs yet: the caller's request is decided instead")
        _ = Self.ask(&machine, .demand, now: Self.start, id: 2)
        let (outsideLeadTime, _) = machine.tokenAwaited(now: Self.start - 60, waiter: .init(id: 3, continuation: nil))
        #expect(!outsideLeadTime, "a token outside the lead time is served, not waited for")
        let (insideLeadTime, _) = machine.tokenAwaited(now: Self.start, waiter: .init(id: 4, continuation: nil))
        #expect(insideLeadTime)
        #expect(machine.flights.waiters.map(\.id) == [2, 4])
    }

    @Test func successCommitsPublishesAndClearsTheFlight() throws {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        let target = machine.refreshReturned(flightID: job.flightID, newCredentials: new)
        #expect(target?.stored.credentials == new)
        let (waiters, actions) = machine.commitWritten(
            flightID: job.flightID, newCredentials: new, persistError: nil, now: Self.start, jitter: 0.5)
        #expect(waiters == 1)
        #expect(actions.events.map(\.kind) == [.credentialsRefreshed])
        #expect(actions.waiters.map(\.id) == [1])
        #expect(machine.token == "at-1")
        #expect(!machine.flights.isRefreshing)
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
    }

    /// The retry of a failed write is the ledger's (``CredentialsLedgerUnitTests``): the session serves the new
    /// credentials, reports the failure, and its hot path is not interrupted by a retry schedule of its own.
    @Test func persistFailureKeepsNewCredentialsAndLeavesTheRetryToTheLedger() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        let (_, actions) = Self.commit(&machine, job, new, persisted: false, now: Self.start)
        #expect(actions.events.map(\.kind) == [.persistenceFailed, .credentialsRefreshed])
        #expect(machine.credentials?.refreshToken == "rt-1")
        #expect(machine.nextActionAt == Self.start + 3600 - 300)
        let (token, later) = machine.tokenAsked(now: Self.start + 0.5)
        #expect(token.token == "at-1")
        #expect(later.refresh == nil)
    }

    @Test func transientFailureBacksOffWithJitterAndCap() {
        var machine = Self.machine(expiresIn: 200)
        #expect(machine.backoff(attempt: 1, jitter: 0) == 0.5)
        #expect(machine.backoff(attempt: 1, jitter: 1) == 1)
        #expect(machine.backoff(attempt: 3, jitter: 1) == 4)
        #expect(machine.backoff(attempt: 30, jitter: 1) == 60)
        let job = machine.tokenAsked(now: Self.start).1.refresh
        let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
        let (report, _) = machine.refreshFailed(flightID: job?.flightID ?? 0, error: error, now: Self.start, jitter: 1)
        #expect(report?.invalidates == nil)
        #expect(machine.nextActionAt == Self.start + 1)
        let (early, earlyActions) = machine.tokenAsked(now: Self.start + 0.5)
        #expect(early.token == "at-0")
        #expect(earlyActions.refresh == nil)
        #expect(machine.tokenAsked(now: Self.start + 1).1.refresh != nil)
    }

    /// Issue 9, item 16: once the token has expired, refreshes that keep failing back off too. Before, every call
    /// started another refresh at once.
    @Test func expiredTokenBacksOffAfterAFailureAndRetriesOnceTheBackoffElapsed() {
        var machine = Self.machine(expiresIn: -1)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
        _ = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 1)
        guard case .fail(let early, false) = Self.ask(&machine, .demand, now: Self.start + 0.9) else {
            Issue.record("a call inside the backoff must get the last failure without a refresh")
            return
        }
        #expect(early.failureClass == .transient)
        #expect(!machine.flights.isRefreshing)
        guard case .wait(_?) = Self.ask(&machine, .demand, now: Self.start + 1) else {
            Issue.record("the first call after the backoff must retry")
            return
        }
    }

    @Test func misconfigurationStopsAutomaticRefreshes() {
        var machine = Self.machine(expiresIn: 200)
        let job = machine.tokenAsked(now: Self.start).1.refresh
        let error = UserSessionError(.refreshFailed, "bad client", failureClass: .misconfiguration)
        _ = machine.refreshFailed(flightID: job?.flightID ?? 0, error: error, now: Self.start, jitter: 0)
        // Served until expiry without any background attempt; then a caller's refresh is tried again.
        #expect(machine.nextActionAt == Self.start + 200)
        #expect(machine.tokenAsked(now: Self.start + 150).1.refresh == nil)
        guard case .serve = Self.ask(&machine, .demand, now: Self.start + 150) else {
            Issue.record("a valid token must still be served")
            return
        }
        guard case .wait(_?) = Self.ask(&machine, .demand, now: Self.start + 201) else {
            Issue.record("an expired token must be refreshed on demand")
            return
        }
    }

    @Test func terminalFailureFailsEveryLaterRequest() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let (report, actions) = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(report?.invalidates == 7)
        #expect(report?.waiters == 1)
        #expect(actions.waiters.map(\.id) == [1])
        #expect(machine.nextActionAt == -.infinity)
        guard case .fail(let failure, false) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected the terminal error")
            return
        }
        #expect(failure.failureClass == .terminal)
    }

    @Test func terminalFailureDuringRestoreDoesNotNotify() {
        var machine = Self.machine(expiresIn: -10)
        guard case .wait(let job?) = Self.ask(&machine, .restore, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let error = UserSessionError(.refreshFailed, "invalid_grant", failureClass: .terminal)
        let (report, actions) = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(report != nil)
        #expect(report?.invalidates == nil)
        #expect(actions.events.map(\.kind) == [.refreshFailed(.terminal)])
    }

    @Test func staleFlightIsDiscardedAfterDeactivateAndReactivate() throws {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        _ = machine.deactivated()
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        // A new session of another identifier: the ended session's flight is not current; its rotation is the
        // ledger's to write to "user"'s record, never the session's.
        _ = machine.activated(
            identifier: "other", userInfo: UserInfo(id: "other"), credentials: nil, generation: 8)
        #expect(machine.refreshReturned(flightID: job.flightID, newCredentials: new) == nil)
        #expect(machine.credentials == nil)
        let error = UserSessionError(.refreshFailed, "x", failureClass: .terminal)
        let (failure, failureActions) = machine.refreshFailed(
            flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(failure == nil)
        #expect(failureActions.events.isEmpty)
        #expect(machine.terminalError == nil)
    }

    @Test func loopBreakerRefusesTheFourthRefreshWithinTheWindow() {
        var machine = Self.machine(expiresIn: 3600)
        for number in 1...3 {
            guard case .wait(let job?) = Self.ask(&machine, .forced(replacing: nil), now: Self.start) else {
                Issue.record("refresh \(number) must be allowed")
                return
            }
            Self.commit(
                &machine, job, Self.refreshed(number, expiresAt: Self.start + 3600), now: Self.start + Double(number))
        }
        guard case .fail(let error, true) = Self.ask(&machine, .forced(replacing: nil), now: Self.start + 10) else {
            Issue.record("the breaker must trip")
            return
        }
        #expect(error.code == .refreshLoop)
        guard case .wait(_?) = Self.ask(&machine, .forced(replacing: nil), now: Self.start + 31.5) else {
            Issue.record("the oldest refresh left the window")
            return
        }
    }

    @Test func forcedRequestWithReplacedTokenServesCurrentCredentials() {
        var machine = Self.machine(expiresIn: 3600)
        guard case .serve(let credentials) = Self.ask(&machine, .forced(replacing: "old"), now: Self.start) else {
            Issue.record("expected the current credentials")
            return
        }
        #expect(credentials.accessToken == "at-0")
        #expect(!machine.flights.isRefreshing)
    }

    @Test func aReplayStaysWithItsSessionAndAMinimumValidityBeyondTheLifetimeFailsAtOnce() {
        var machine = Self.machine(expiresIn: 3600)
        guard
            case .fail(let replaced, false) = Self.ask(
                &machine, .replay(replacing: "at-0", generation: 6), now: Self.start)
        else {
            Issue.record("a replay of another session's token must fail")
            return
        }
        #expect(replaced.code == .sessionNotOpen)
        guard case .wait(_?) = Self.ask(&machine, .replay(replacing: "at-0", generation: 7), now: Self.start) else {
            Issue.record("a replay of the session's own current token refreshes")
            return
        }
        var known = RefreshStateMachine(
            policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: true)
        var lived = Self.refreshed(0, expiresAt: Self.start + 600)
        lived.lastRefreshedAt = Date(timeIntervalSinceReferenceDate: Self.start)
        _ = known.activated(identifier: "u", userInfo: UserInfo(id: "u"), credentials: lived, generation: 1)
        guard case .serve = Self.ask(&known, .minimumValidity(500), now: Self.start) else {
            Issue.record("a token valid long enough is served")
            return
        }
        guard case .fail(let unreachable, false) = Self.ask(&known, .minimumValidity(900), now: Self.start) else {
            Issue.record("a validity beyond the lifetime must fail without a refresh")
            return
        }
        #expect(unreachable.code == .minimumValidityUnreachable)
        #expect(!known.flights.isRefreshing)
    }

    @Test func noRefresherServesValidTokenAndFailsWhenExpired() {
        var machine = Self.machine(expiresIn: 30, hasRefresher: false)
        #expect(machine.tokenAsked(now: Self.start).0.token == "at-0")
        #expect(machine.nextActionAt == Self.start + 30)
        guard case .fail(let error, false) = Self.ask(&machine, .demand, now: Self.start + 30) else {
            Issue.record("expected an error")
            return
        }
        #expect(error.code == .noRefresher)
        guard case .fail(let restoreError, false) = Self.ask(&machine, .restore, now: Self.start + 30) else {
            Issue.record("expected an error")
            return
        }
        #expect(restoreError.code == .credentialsUnusable)
    }

    @Test func updateSupersedesTheFlightAndDescribesTheChange() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        var new = Self.refreshed(9, expiresAt: Self.start + 7200)
        new.grantedPermissions = ["read", "write"]
        #expect(machine.updateTarget(new)?.generation == 7)
        let actions = machine.credentialsUpdated(new, generation: 7)
        #expect(
            actions.events.map(\.kind) == [
                .credentialsUpdated(.init(extended: true, addedPermissions: ["read", "write"]))
            ])
        // The superseded refresh's waiter gets the new credentials.
        #expect(actions.waiters.map(\.id) == [1])
        guard case .success(let handed) = actions.waitersResult else {
            Issue.record("the waiters of a superseded refresh get the new credentials")
            return
        }
        #expect(handed == new)
        #expect(!machine.flights.isRefreshing)
        #expect(!machine.isCurrent(flightID: job.flightID))
        #expect(machine.token == "at-9")
        let stale = machine.credentialsUpdated(new, generation: 6)
        #expect(stale.events.isEmpty)
        #expect(stale.waiters.isEmpty)
    }

    /// The final flush writes what the ledger has not written for the session's identifier, under the session's
    /// fence and identity, and clears the credentials from memory; with nothing unwritten it writes nothing.
    @Test func deactivateFlushesWhatTheLedgerHasNotWritten() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        Self.commit(&machine, job, new, persisted: false, now: Self.start)
        let unwritten = StoredSession(userInfo: UserInfo(id: "user"), credentials: new)
        #expect(machine.finalFlushBegan(unwritten: unwritten).0 == nil, "no final flush while the session is active")
        _ = machine.deactivated()
        let (flush, _) = machine.finalFlushBegan(unwritten: unwritten)
        #expect(flush?.stored.credentials?.refreshToken == "rt-1")
        #expect(flush?.identifier == "user")
        #expect(flush?.ledgerFence == machine.ledgerFence)
        #expect(machine.credentials == nil)
        let (nothing, _) = machine.finalFlushBegan(unwritten: nil)
        #expect(nothing == nil)
    }

    /// A session whose sign-in has not landed writes under the signing-in fence, but its refreshes carry the fence
    /// of its hold, so that the ledger lets them lead only on the entry that hold was taken from; once the sign-in
    /// landed, both are the fence the sign-in made.
    @Test func aSessionSigningInRefreshesUnderItsHoldsFenceAndWritesUnderNone() {
        var machine = Self.machine(expiresIn: 30, heldFence: 7, signingIn: true)
        #expect(machine.ledgerFence == RefreshStateMachine.signingInFence)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        #expect(job.ledgerFence == RefreshStateMachine.signingInFence)
        #expect(job.heldFence == 7)
        _ = machine.signedIn(identifier: "user", revision: nil, ledgerFence: 9)
        #expect(machine.ledgerFence == 9)
        #expect(machine.heldFence == 9)
    }

    /// The session closed while its commit's write failed: nothing is reported, and the credentials are the
    /// ledger's to write (the write's failure left them unwritten there; the final flush reads them from it).
    @Test func aCommitWhoseSessionClosedDuringAFailedWriteReportsNothing() {
        var machine = Self.machine(expiresIn: 30)
        guard case .wait(let job?) = Self.ask(&machine, .demand, now: Self.start) else {
            Issue.record("expected a refresh")
            return
        }
        let new = Self.refreshed(1, expiresAt: Self.start + 3600)
        guard machine.refreshReturned(flightID: job.flightID, newCredentials: new) != nil else {
            Issue.record("expected the commit to write the session's record")
            return
        }
        _ = machine.deactivated()
        let (waiters, actions) = machine.commitWritten(
            flightID: job.flightID, newCredentials: new,
            persistError: UserSessionError(.storeFailure, "down"), now: Self.start, jitter: 0)
        #expect(waiters == nil)
        #expect(actions.events.isEmpty)
    }

    /// The record a session holds (its revision and refresh token) is kept only over a coordinated store, the one
    /// whose writes are conditional on it: a session of another store keeps none, whatever it activates, adopts or
    /// commits.
    @Test func onlyAMachineOfACoordinatedStoreKeepsTheRecordItHolds() {
        for coordinated in [false, true] {
            var machine = RefreshStateMachine(
                policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: true,
                coordinated: coordinated)
            let credentials = Credentials(
                accessToken: "at-0", refreshToken: "rt-0",
                expiresAt: Date(timeIntervalSinceReferenceDate: Self.start + 10))
            _ = machine.activated(
                identifier: "user", userInfo: UserInfo(id: "user"), credentials: credentials, generation: 1,
                revision: 3)
            #expect(machine.heldRevision == (coordinated ? 3 : nil))
            #expect(machine.base?.refreshToken == (coordinated ? "rt-0" : nil))
            let adopted = RevisedSession(
                session: StoredSession(
                    userInfo: UserInfo(id: "user"), credentials: Self.refreshed(1, expiresAt: Self.start + 3600)),
                revision: 5)
            #expect(machine.recordAdopted(adopted, generation: 1).0)
            #expect(machine.heldRevision == (coordinated ? 5 : nil))
            #expect(machine.base?.refreshToken == (coordinated ? "rt-1" : nil))
        }
    }
}

/// Parked callers, one per id, that a test hands to a state machine.
private final class ParkedCallers: Sendable {
    private let callers = Locked<[UInt64: Parked<String, any Error>]>([:])
    /// One arrival per caller that has parked.
    let arrivals = ArrivalCounter()

    /// Starts a caller that waits until it is resumed and returns what it was resumed with.
    func park(_ id: UInt64) -> Task<String, any Error> {
        Task {
            try await Parked.wait { (caller: Parked<String, any Error>) -> Result<String, any Error>? in
                callers.withLock { $0[id] = caller }
                arrivals.arrive()
                return nil
            }
        }
    }

    /// Caller `id`, once it has parked.
    func continuation(_ id: UInt64) -> Parked<String, any Error>? {
        callers.withLock { $0[id] }
    }
}
