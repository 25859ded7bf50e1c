import Foundation
import Testing

@testable import UserSessions

/// The machine's inputs as the gate's funnel feeds them: each returns the actions the gate performs afterwards.
/// Synchronous, like ``RefreshStateMachineTests``.
struct RefreshMachineInputsTests {
    static let start = RefreshStateMachineTests.start

    private static func kinds(_ actions: RefreshStateMachine.Actions) -> [UserSessionEvent.Kind] {
        actions.events.map(\.kind)
    }

    /// The retry of the write is the ledger's (``CredentialsLedgerUnitTests``): the machine reports the failure and
    /// serves the new credentials.
    @Test func aCommitWhoseWriteFailedReportsTheFailureBeforeTheRefresh() throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 200)
        let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
        let new = RefreshStateMachineTests.refreshed(1, expiresAt: Self.start + 3600)
        let target = machine.refreshReturned(flightID: job.flightID, newCredentials: new)
        #expect(target?.stored.credentials?.refreshToken == "rt-1")
        let (waiters, actions) = machine.commitWritten(
            flightID: job.flightID, newCredentials: new, persistError: UserSessionError(.storeFailure, "disk full"),
            now: Self.start, jitter: 0)
        #expect(waiters == 0)
        #expect(Self.kinds(actions) == [.persistenceFailed, .credentialsRefreshed])
        #expect(machine.token == "at-1")
    }

    @Test func aWrittenCommitOnlyAnnouncesTheRefresh() throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 200)
        let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
        let new = RefreshStateMachineTests.refreshed(1, expiresAt: Self.start + 3600)
        #expect(machine.refreshReturned(flightID: job.flightID, newCredentials: new) != nil)
        let (_, actions) = machine.commitWritten(
            flightID: job.flightID, newCredentials: new, persistError: nil, now: Self.start, jitter: 0)
        #expect(Self.kinds(actions) == [.credentialsRefreshed])
        #expect(machine.token == "at-1")
    }

    @Test func aTerminalFailureNamesTheSessionToInvalidateAndATransientOneDoesNot() throws {
        for (failureClass, invalidates) in [(RefreshFailureClass.terminal, UInt64(7)), (.transient, nil)] {
            var machine = RefreshStateMachineTests.machine(expiresIn: 200)
            let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
            let error = UserSessionError(.refreshFailed, "refused", failureClass: failureClass)
            let (report, actions) = machine.refreshFailed(
                flightID: job.flightID, error: error, now: Self.start, jitter: 0)
            #expect(report?.invalidates == invalidates)
            #expect(Self.kinds(actions) == [.refreshFailed(failureClass)])
        }
    }

    @Test func aStaleFlightReportsNothing() throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 200)
        let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
        let waiters = machine.deactivated()
        #expect(waiters.waiters.isEmpty)
        let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
        let (report, actions) = machine.refreshFailed(flightID: job.flightID, error: error, now: Self.start, jitter: 0)
        #expect(report == nil)
        #expect(actions.events.isEmpty)
    }

    @Test func aFlightThatNoLongerBelongsToTheSessionIsForgottenBeforeItSends() throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 200)
        let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
        let (goesOn, announced) = machine.flightProceeds(flightID: job.flightID, announcing: true)
        #expect(goesOn)
        #expect(Self.kinds(announced) == [.refreshStarted])
        _ = machine.deactivated()
        let (stale, silent) = machine.flightProceeds(flightID: job.flightID, announcing: true)
        #expect(!stale)
        #expect(silent.events.isEmpty)
    }

    @Test func aRequestFromACancelledTaskGetsCancellationWithoutStartingARefresh() async throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 30)
        var startedRefresh = true
        let result: Bool
        do {
            _ = try await Parked.wait { (parked: Parked<Credentials, any Error>) -> Result<Credentials, any Error>? in
                let (_, actions) = machine.credentialsAsked(
                    .demand, now: Self.start, waiter: .init(id: 1, continuation: .credentials(parked)),
                    cancelled: true)
                startedRefresh = actions.refresh != nil
                if let (caller, result) = actions.caller, let caller, case .failure(let error) = result {
                    caller.resume(throwing: error)
                    return nil
                }
                return .failure(UserSessionError(.wrongState, "no caller action"))
            }
            result = false
        } catch {
            result = error is CancellationError
        }
        #expect(!startedRefresh)
        #expect(result)
        #expect(!machine.flights.isRefreshing)
    }

    @Test func theSessionsDataFollowsItsPhase() {
        var machine = RefreshStateMachineTests.machine(expiresIn: 3600)
        guard case .active(let identity) = machine.phase else {
            Issue.record("an activated machine is active")
            return
        }
        #expect(identity.identifier == "user")
        #expect(machine.generation == 7)
        _ = machine.deactivated()
        guard case .ended(let ended) = machine.phase else {
            Issue.record("a deactivated machine has ended")
            return
        }
        #expect(ended.identifier == "user")
        #expect(machine.generation == 7)  // the ended session's, until the next activation
        #expect(!machine.active)
        #expect(machine.nextActionAt == -.infinity)
        #expect(machine.credentials?.accessToken == "at-0")
    }

    // MARK: - Identifiers compare by their bytes

    static let composed = "caf\u{E9}"
    static let decomposed = "cafe\u{301}"

    /// A machine whose active session is `identifier` (generation 2), with credentials in the soft window.
    static func machine(activeAs identifier: String) -> RefreshStateMachine {
        var machine = RefreshStateMachine(
            policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: true)
        _ = machine.activated(
            identifier: identifier, userInfo: UserInfo(id: identifier),
            credentials: RefreshStateMachineTests.refreshed(0, expiresAt: start + 200), generation: 2)
        return machine
    }

    /// `"café"` composed and decomposed are equal Swift strings but two users to every store. A late write of the
    /// composed user's record, landing after that user signed out, is removed again by the ledger, which fences
    /// per identifier by bytes; the decomposed user's writes are not fenced by it, and the machine itself never
    /// removes or rewrites a record: what a late write changed is the ledger's to repair.
    @Test func aLateWriteOfAClearedUserIsUndoneWhateverUserLooksAlike() async throws {
        #expect(Self.composed == Self.decomposed)
        // The composed user's write held the write turn, overran the close's deadline and lost the turn; the
        // composed user signed out; then the write landed late.
        let store = InMemoryTokenStore()
        let ledger = CredentialsLedger(store: store)
        let composedFence = ledger.hold(Self.composed)
        let decomposedFence = ledger.hold(Self.decomposed)
        let composedTurn = try #require(await ledger.enterWriteTurn(Self.composed, fence: composedFence)).token
        ledger.abandonWriteTurn(Self.composed, token: composedTurn)
        ledger.signedOut(identifier: Self.composed)
        let written = StoredSession(
            userInfo: UserInfo(id: "user"),
            credentials: Credentials(accessToken: "at", refreshToken: "rt", expiresAt: nil))
        try await store.save(written, identifier: Self.composed)
        try await store.save(written, identifier: Self.decomposed)
        ledger.writeFinished(Self.composed, fence: composedFence, wrote: written, turn: composedTurn)
        ledger.leaveWriteTurn(Self.composed, token: composedTurn)
        let decomposedTurn = try #require(await ledger.enterWriteTurn(Self.decomposed, fence: decomposedFence)).token
        ledger.writeFinished(Self.decomposed, fence: decomposedFence, wrote: written, turn: decomposedTurn)
        ledger.leaveWriteTurn(Self.decomposed, token: decomposedTurn)
        try await withHangGuard("the composed user's record is removed again") {
            while try await store.load(identifier: Self.composed) != nil { await Task.yield() }
        }
        #expect(try await store.load(identifier: Self.decomposed) == written)
        #expect(!ledger.hasPendingWork(Self.composed))
    }

    /// A flight whose session ended has no target: nobody here writes its rotation, the ledger does.
    @Test func aStaleFlightHasNoTarget() throws {
        var machine = RefreshStateMachineTests.machine(expiresIn: 200)
        let job = try #require(machine.tokenAsked(now: Self.start).1.refresh)
        _ = machine.deactivated()
        _ = machine.finalFlushBegan(unwritten: nil)
        _ = machine.activated(
            identifier: "user", userInfo: UserInfo(id: "user"), credentials: nil, generation: 9, revision: nil)
        let target = machine.refreshReturned(
            flightID: job.flightID, newCredentials: RefreshStateMachineTests.refreshed(1, expiresAt: Self.start + 3600))
        #expect(target == nil)
    }
}
