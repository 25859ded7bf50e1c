import Foundation
import Testing

@testable import UserSessions

/// The waiting path of the gate: token waiters (`accessToken()`) and credentials waiters (`refreshCredentials()`,
/// replays, restore) parked on one refresh, and cancellation racing registration.
struct RefreshWaitingTests {
    /// Waiters still parked (cancelled ones stay as tombstones without a continuation).
    static func parkedWaiters(_ harness: RefreshHarness) -> Int {
        harness.gate.inspect { $0.flights.waiters.count(where: { $0.continuation != nil }) }
    }

    @Test func tokenAndCredentialsWaitersShareOneRefreshAndAllGetItsResult() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let first = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        let tokens = (0..<3).map { _ in Task { try await harness.gate.accessToken() } }
        let refreshes = (0..<2).map { _ in Task { try await harness.gate.refresh() } }
        await harness.awaitWaiters(6)
        refresherGate.open()
        #expect(try await first.value == "at-1")
        for token in tokens { #expect(try await token.value == "at-1") }
        for refresh in refreshes {
            let credentials = try await refresh.value
            #expect(credentials.accessToken == "at-1")
            #expect(credentials.refreshToken == "rt-1")
        }
        #expect(harness.refreshCalls == 1)
    }

    @Test func callerCancelledBeforeJoiningARefreshThrowsAndTheRefreshIsCommitted() async throws {
        let refresherGate = AsyncGate()
        let release = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let first = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        await harness.awaitWaiters(1)
        // Cancelled before it asks: its cancellation handler runs before it registers, so registering must notice.
        let late = Task {
            await release.wait()
            return try await harness.gate.accessToken()
        }
        while release.waiterCount < 1 { await Task.yield() }
        late.cancel()
        release.open()
        await #expect(throws: CancellationError.self) { try await late.value }
        #expect(Self.parkedWaiters(harness) == 1)
        refresherGate.open()
        #expect(try await first.value == "at-1")
        #expect(harness.refreshCalls == 1)
        #expect(harness.store.stored("user")?.credentials?.refreshToken == "rt-1")
    }

    @Test func cancelledCallerThatWouldStartARefreshThrowsWithoutStartingOne() async throws {
        let release = AsyncGate()
        let harness = RefreshHarness(steps: [.succeed])
        harness.activate(expiresIn: -1)
        let caller = Task {
            await release.wait()
            return try await harness.gate.accessToken()
        }
        while release.waiterCount < 1 { await Task.yield() }
        caller.cancel()
        release.open()
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(harness.refreshCalls == 0)
        #expect(try await harness.gate.accessToken() == "at-1")
        #expect(harness.refreshCalls == 1)
    }

    @Test func cancellingSomeTokenWaitersLeavesTheOthersParkedInOrder() async throws {
        let refresherGate = AsyncGate()
        let harness = RefreshHarness(steps: [.block(refresherGate, then: .succeed)])
        harness.activate(expiresIn: 10)
        let first = Task { try await harness.gate.accessToken() }
        await harness.refresher?.started.wait(for: 1)
        var callers: [Task<String, any Error>] = []
        for count in 1...6 {
            callers.append(Task { try await harness.gate.accessToken() })
            await harness.awaitWaiters(count + 1)
        }
        for index in [0, 2, 4] { callers[index].cancel() }
        for index in [0, 2, 4] {
            await #expect(throws: CancellationError.self) { try await callers[index].value }
        }
        #expect(Self.parkedWaiters(harness) == 4)
        let ids = harness.gate.inspect { $0.flights.waiters.map(\.id) }
        #expect(ids == ids.sorted())
        refresherGate.open()
        #expect(try await first.value == "at-1")
        for index in [1, 3, 5] { #expect(try await callers[index].value == "at-1") }
        #expect(harness.refreshCalls == 1)
    }

    @Test func joiningAFlightAgreesWithTheFullDecision() {
        let start = RefreshStateMachineTests.start
        var machine = RefreshStateMachineTests.machine(expiresIn: 30)
        // No flight yet: the full decision starts one.
        #expect(!machine.demandJoinsFlight(now: start))
        guard case .wait(_?) = RefreshStateMachineTests.ask(&machine, .demand, now: start) else {
            Issue.record("expected a new flight")
            return
        }
        // In the lead time (or expired) with a flight in progress: join it.
        #expect(machine.demandJoinsFlight(now: start))
        #expect(machine.demandJoinsFlight(now: start + 31))
        guard case .wait(nil) = RefreshStateMachineTests.ask(&machine, .demand, now: start) else {
            Issue.record("expected to join the flight")
            return
        }
        // Before the lead time the token is served even while a flight runs.
        #expect(!machine.demandJoinsFlight(now: start - 60))
        guard case .serve = RefreshStateMachineTests.ask(&machine, .demand, now: start - 60) else {
            Issue.record("expected the token to be served")
            return
        }
        _ = machine.deactivated()
        #expect(!machine.demandJoinsFlight(now: start))
    }
}
