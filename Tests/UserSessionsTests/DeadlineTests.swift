import Foundation
import Testing

@testable import UserSessions

/// The one deadline helper, timed by a manual clock: no test here waits for real time to pass.
struct DeadlineTests {
    @Test func waitGivesUpOnceTheClockPassesTheDeadlineAndLeavesTheTaskRunning() async throws {
        let time = ManualTime()
        let release = AsyncGate()
        let work = Task { await release.wait() }
        let waiting = Task { await Deadline.wait(for: work, timeout: .seconds(10), clock: time.deadlineClock) }
        try await withHangGuard("the deadline's timer") { await time.sleeps.wait(for: 1) }
        time.advance(by: 9)
        #expect(time.sleeperCount == 1)
        time.advance(by: 1)
        #expect(await waiting.value == false)
        // Left behind, not cancelled: it still finishes when released.
        #expect(!work.isCancelled)
        release.open()
        await work.value
    }

    @Test func waitAnswersInTimeAndCancelsItsTimer() async throws {
        let time = ManualTime()
        let work = Task {}
        #expect(await Deadline.wait(for: work, timeout: .seconds(10), clock: time.deadlineClock))
        // The timer was cancelled (or never slept): nothing is left sleeping on the clock.
        try await withHangGuard("the cancelled timer") {
            while time.sleeperCount > 0 { await Task.yield() }
        }
        time.advance(by: 60)
    }

    @Test func runCancelsAnOperationThatOverrunsAndThrowsTheTimeoutError() async throws {
        let time = ManualTime()
        let cancelled = AsyncGate()
        let running = Task {
            try await Deadline.run(
                within: .seconds(30), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
            ) {
                await withTaskCancellationHandler {
                    await cancelled.wait()
                } onCancel: {
                    cancelled.open()
                }
                return "finished"
            }
        }
        try await withHangGuard("the deadline's timer") { await time.sleeps.wait(for: 1) }
        time.advance(by: 30)
        await #expect(throws: HTTPTransportError(.timedOut)) { try await running.value }
    }

    @Test func runReturnsTheValueOfAnOperationThatFinishesInTime() async throws {
        let time = ManualTime()
        let value = try await Deadline.run(
            within: .seconds(30), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
        ) { 42 }
        #expect(value == 42)
    }

    /// An operation that ignores cancellation: it ends only when `release` opens.
    private static func stubborn(_ release: AsyncGate, started: ArrivalCounter) async -> String {
        started.arrive()
        await release.wait()
        return "late"
    }

    @Test func abandonReturnsAtTheDeadlineWithoutWaitingForAnOperationThatIgnoresCancellation() async throws {
        let time = ManualTime()
        let (release, started) = (AsyncGate(), ArrivalCounter())
        let running = Task {
            try await Deadline.abandon(
                after: .seconds(5), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
            ) { await Self.stubborn(release, started: started) }
        }
        try await withHangGuard("the operation and the deadline's timer") {
            await started.wait(for: 1)
            await time.sleeps.wait(for: 1)
        }
        time.advance(by: 5)
        await #expect(throws: HTTPTransportError(.timedOut)) { try await running.value }
        release.open()
    }

    @Test func abandonReturnsAtOnceWhenTheCallerIsCancelled() async throws {
        let time = ManualTime()
        let (release, started) = (AsyncGate(), ArrivalCounter())
        let running = Task {
            try await Deadline.abandon(
                after: .seconds(5), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
            ) { await Self.stubborn(release, started: started) }
        }
        try await withHangGuard("the operation") { await started.wait(for: 1) }
        running.cancel()
        await #expect(throws: CancellationError.self) { try await running.value }
        release.open()
    }

    @Test func abandonReturnsTheValueOrTheErrorOfAnOperationThatEndsInTime() async throws {
        let time = ManualTime()
        let value = try await Deadline.abandon(
            after: .seconds(5), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
        ) { 42 }
        #expect(value == 42)
        await #expect(throws: HTTPTransportError(.responseTooLarge)) {
            try await Deadline.abandon(
                after: .seconds(5), clock: time.deadlineClock, timedOut: { HTTPTransportError(.timedOut) }
            ) { () async throws -> Int in throw HTTPTransportError(.responseTooLarge) }
        }
    }
}
