import Foundation

@testable import UserSessions

/// A ``CredentialsGate`` wired to a scripted refresher, a scripted store, an event hub and a manual clock.
final class RefreshHarness: CredentialsGateOwner {
    let time: ManualTime
    let refresher: ScriptedRefresher?
    let store = ScriptedTokenStore()
    let hub = EventHub(defaultBufferSize: 10_000)
    let gate: CredentialsGate
    let events: AsyncStream<UserSessionEvent>
    let terminalGenerations = Locked<[UInt64]>([])
    let terminalCalls = ArrivalCounter()

    init(
        steps: [ScriptedRefresher.Step] = [], withRefresher: Bool = true,
        configure: (inout UserSessionController.Configuration) -> Void = { _ in }
    ) {
        let time = ManualTime()
        self.time = time
        let refresher = withRefresher ? ScriptedRefresher(steps: steps, now: { time.now }) : nil
        self.refresher = refresher
        var configuration = UserSessionController.Configuration(clock: time.clock)
        configure(&configuration)
        gate = CredentialsGate(refresher: refresher, store: store, events: hub, policy: configuration.refreshPolicy)
        events = hub.subscribe(bufferSize: 10_000)
        _ = gate.backgroundTasks
        gate.setOwner(self)
    }

    /// The ledger's view of the identifier the gate holds: passed on to the gate, as a controller does.
    func ledgerAdvanced(_ identifier: String) { gate.ledgerAdvanced(identifier) }

    /// Credentials `at-0` / `rt-0` expiring `expiresIn` seconds from now.
    func credentials(expiresIn: TimeInterval, refreshable: Bool = true) -> Credentials {
        Credentials(
            accessToken: "at-0", refreshToken: refreshable ? "rt-0" : nil,
            expiresAt: time.now.addingTimeInterval(expiresIn), grantedPermissions: ["read"])
    }

    func activate(expiresIn: TimeInterval, refreshable: Bool = true, generation: UInt64 = 1) {
        gate.activate(
            identifier: "user", userInfo: UserInfo(id: "user"),
            credentials: credentials(expiresIn: expiresIn, refreshable: refreshable), generation: generation)
    }

    var refreshCalls: Int { refresher?.calls ?? 0 }

    /// Waits for the latest background refresh or write retry to finish.
    func awaitBackgroundWork() async {
        let task = gate.backgroundTasks.last
        await task?.value
    }

    /// Yields until `count` callers wait for the refresh in flight.
    func awaitWaiters(_ count: Int) async {
        while gate.inspect({ $0.flights.waiters.count(where: { $0.continuation != nil }) }) < count {
            await Task.yield()
        }
    }

    /// Finishes the event stream and returns every event kind emitted so far (after the initial `.current`).
    func recordedEvents() async -> [UserSessionEvent] {
        hub.finish()
        var result: [UserSessionEvent] = []
        for await event in events where event.kind != .current { result.append(event) }
        return result
    }
}

extension RefreshHarness {
    /// The gate's call up for a terminal failure: recorded.
    func credentialsRevoked(generation: UInt64) async {
        terminalGenerations.withLock { $0.append(generation) }
        terminalCalls.arrive()
    }

    func recordRemovedElsewhere(generation: UInt64) async {}
}
