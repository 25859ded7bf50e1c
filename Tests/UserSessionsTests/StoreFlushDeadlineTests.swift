import Foundation
import Testing

@testable import UserSessions

/// The close's wait for a write in progress is timed by the policy's ``DeadlineClock``: a manual clock decides when
/// it gives up, and no real time passes.
struct StoreFlushDeadlineTests {
    static func credentials(_ index: Int, time: ManualTime) -> Credentials {
        Credentials(
            accessToken: "at-\(index)", refreshToken: "rt-\(index)", expiresAt: time.now.addingTimeInterval(3600))
    }

    /// The common close, with no write in progress or waiting and nothing unwritten, has nothing to wait for: it
    /// arms no deadline (no timer task per closed session) and still ends the session's credentials.
    @Test func aCloseWithNothingToWaitForOrWriteArmsNoDeadline() async throws {
        let time = ManualTime()
        let store = InMemoryTokenStore()
        let hub = EventHub(defaultBufferSize: 100)
        var configuration = UserSessionController.Configuration(storeTimeout: .seconds(60), clock: time.clock)
        configuration.deadlineClock = time.deadlineClock
        let gate = CredentialsGate(refresher: nil, store: store, events: hub, policy: configuration.refreshPolicy)
        gate.activate(
            identifier: "user", userInfo: UserInfo(id: "user"), credentials: Self.credentials(0, time: time),
            generation: 1)
        try await gate.update(Self.credentials(1, time: time))
        #expect(try await store.load(identifier: "user")?.credentials == Self.credentials(1, time: time))
        let sleepsBefore = time.sleeps.count

        await gate.deactivate()

        #expect(time.sleeps.count == sleepsBefore, "no deadline was armed for a flush with nothing to do")
        #expect(time.sleeperCount == 0)
        #expect(gate.currentCredentials() == nil)
        #expect(try await store.load(identifier: "user")?.credentials == Self.credentials(1, time: time))
    }

    @Test func aCloseLeavesAHangingWriteBehindOnlyWhenTheDeadlineClockPassesTwice() async throws {
        let time = ManualTime()
        let store = FaultPlanStore([FaultPlan(site: .save, fault: .hang)])
        let hub = EventHub(defaultBufferSize: 100)
        // Far longer than the hang guard: only the manual clock can end these waits within it.
        var configuration = UserSessionController.Configuration(storeTimeout: .seconds(60), clock: time.clock)
        configuration.deadlineClock = time.deadlineClock
        let gate = CredentialsGate(refresher: nil, store: store, events: hub, policy: configuration.refreshPolicy)
        let events = hub.subscribe(bufferSize: 100)
        gate.activate(
            identifier: "user", userInfo: UserInfo(id: "user"), credentials: Self.credentials(0, time: time),
            generation: 1)

        // A write that holds the persistence slot and never returns on its own.
        let updating = Task { try await gate.update(Self.credentials(1, time: time)) }
        try await withHangGuard("the hanging write") { await store.hangs.wait(for: 1) }

        let closed = ArrivalCounter()
        let closing = Task {
            await gate.deactivate()
            closed.arrive()
        }
        try await withHangGuard("the first deadline") { await time.sleeps.wait(for: 1) }
        time.advance(by: 59)
        #expect(closed.count == 0, "the close waits while the clock is short of the deadline")
        time.advance(by: 1)
        try await withHangGuard("the second deadline") { await time.sleeps.wait(for: 2) }
        #expect(closed.count == 0, "after the first deadline the close cancels the work and waits once more")
        time.advance(by: 60)
        try await withHangGuard("the close") { await closing.value }

        var sawPersistenceFailed = false
        for await event in events where event.kind == .persistenceFailed {
            sawPersistenceFailed = true
            break
        }
        #expect(sawPersistenceFailed)

        // The write left behind lands later; the session is closed, so nothing is published.
        store.releaseHangs()
        try await withHangGuard("the late write") { try await updating.value }
        #expect(gate.currentCredentials() == nil)
    }
}
