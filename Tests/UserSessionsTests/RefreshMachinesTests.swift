import Foundation
import Testing

@testable import UserSessions

/// The refresh core's three small machines, input by input, synchronously: no tasks, no clocks.
struct RefreshMachinesTests {
    static let error = UserSessionError(.refreshFailed, "down", failureClass: .transient)
    /// A delay that names its attempt: attempt `n` backs off `10 * n` seconds.
    static func delay(_ attempt: Int) -> Double { Double(attempt) * 10 }

    // MARK: - FlightMachine

    @Test func aFailedFlightBacksOffAndTheNextCarriesTheCountOn() {
        var flights = FlightMachine()
        let first = flights.started(.demand, now: 100)
        #expect(flights.isCurrent(first))
        let failed = flights.failed(Self.error, failureClass: .transient, now: 100, delay: Self.delay)
        #expect(failed.flight.id == first)
        #expect(!flights.isRefreshing)
        #expect(flights.retryAt == 110)
        #expect(flights.backoff?.failures == 1)
        #expect(flights.backoff?.lastFailure == Self.error)

        let second = flights.started(.forced, now: 105)
        #expect(second == first + 1)
        // While it runs, no backoff is visible: nothing waits on it.
        #expect(flights.retryAt == -.infinity)
        _ = flights.failed(Self.error, failureClass: .cancelled, now: 200, delay: Self.delay)
        #expect(flights.backoff?.failures == 2)
        #expect(flights.retryAt == 220)

        _ = flights.started(.background, now: 300)
        let succeeded = flights.succeeded()
        #expect(succeeded.flight.kind == .background)
        #expect(flights.backoff == nil)
        #expect(flights.retryAt == -.infinity)
    }

    @Test func aBackoffSharedByTheLedgerIsTakenWhenNothingRunsOrBacksOffLonger() {
        let shared = FlightMachine.Backoff(
            failures: 2, retryAt: 50, lastFailure: Self.error, blocksAutomaticRefresh: false)
        var flights = FlightMachine()
        let taken = flights.backedOffElsewhere(shared)
        #expect(taken && flights.backoff === shared && flights.retryAt == 50)

        // A refresh of its own that runs, or a backoff of its own that lasts longer, is kept.
        var running = FlightMachine()
        _ = running.started(.demand, now: 0)
        let takenWhileRunning = running.backedOffElsewhere(shared)
        #expect(!takenWhileRunning && running.isRefreshing)
        var longer = FlightMachine()
        _ = longer.started(.demand, now: 45)
        _ = longer.failed(Self.error, failureClass: .transient, now: 45, delay: Self.delay)
        let takenOverLonger = longer.backedOffElsewhere(shared)
        #expect(!takenOverLonger && longer.retryAt == 55)

        // A session's own transient failure backs off by the shared backoff, not a count of its own.
        var failing = FlightMachine()
        _ = failing.started(.demand, now: 0)
        _ = failing.failed(Self.error, failureClass: .transient, now: 0, shared: shared, delay: Self.delay)
        #expect(failing.backoff === shared)
    }

    @Test func aSharedBackoffNeverLiftsAMisconfigurationsBlock() {
        let shared = FlightMachine.Backoff(
            failures: 1, retryAt: 50, lastFailure: Self.error, blocksAutomaticRefresh: false)
        var flights = FlightMachine()
        _ = flights.started(.demand, now: 0)
        _ = flights.failed(Self.error, failureClass: .misconfiguration, now: 0, delay: Self.delay)
        let taken = flights.backedOffElsewhere(shared)
        #expect(!taken && flights.blocksAutomaticRefresh)
        _ = flights.started(.forced, now: 1)
        _ = flights.failed(Self.error, failureClass: .transient, now: 1, shared: shared, delay: Self.delay)
        #expect(flights.blocksAutomaticRefresh)
    }

    @Test func aMisconfigurationBlocksAutomaticRefreshesUntilTheCredentialsChange() {
        var flights = FlightMachine()
        _ = flights.started(.demand, now: 0)
        _ = flights.failed(Self.error, failureClass: .misconfiguration, now: 0, delay: Self.delay)
        #expect(flights.blocksAutomaticRefresh)
        // A forced refresh that then fails transiently does not lift the block.
        _ = flights.started(.forced, now: 1)
        _ = flights.failed(Self.error, failureClass: .transient, now: 1, delay: Self.delay)
        #expect(flights.blocksAutomaticRefresh)
        let superseded = flights.credentialsChanged()
        #expect(superseded.isEmpty)
        #expect(!flights.blocksAutomaticRefresh)
    }

    @Test func aTerminalFailureEndsRefreshesUntilTheCredentialsChange() {
        var flights = FlightMachine()
        _ = flights.started(.demand, now: 0)
        let revoked = UserSessionError(.refreshFailed, "revoked", failureClass: .terminal)
        _ = flights.failed(revoked, failureClass: .terminal, now: 0, delay: Self.delay)
        #expect(flights.terminalError == revoked)
        #expect(flights.isTerminated)
        #expect(flights.backoff == nil)
        _ = flights.credentialsChanged()
        #expect(!flights.isTerminated)
    }

    @Test func endingTheSessionKeepsTheBackoffItsFlightStartedFrom() {
        var flights = FlightMachine()
        _ = flights.started(.demand, now: 0)
        _ = flights.failed(Self.error, failureClass: .transient, now: 0, delay: Self.delay)
        let id = flights.started(.forced, now: 1)
        let abandoned = flights.sessionEnded()
        #expect(abandoned.flight?.id == id)
        #expect(abandoned.waiters.isEmpty)
        #expect(flights.backoff?.failures == 1)
        // Nothing runs any more: a second end finds nothing.
        let abandonedAgain = flights.sessionEnded()
        #expect(abandonedAgain.flight == nil)
    }

    @Test func aSessionEndedFromOutsideIsTerminatedInAnyState() {
        let removed = UserSessionError(.sessionNotOpen, "removed elsewhere")
        var idle = FlightMachine()
        #expect(idle.terminated(by: removed).isEmpty)
        #expect(idle.terminalError == removed)
        var failed = FlightMachine()
        _ = failed.started(.demand, now: 0)
        _ = failed.failed(Self.error, failureClass: .transient, now: 0, delay: Self.delay)
        _ = failed.terminated(by: removed)
        #expect(failed.isTerminated)
        #expect(failed.backoff == nil)
        // Ending the session changes nothing then; only new credentials start over.
        #expect(failed.sessionEnded().flight == nil)
        #expect(failed.isTerminated)
        _ = failed.credentialsChanged()
        #expect(!failed.isTerminated)
    }
}
