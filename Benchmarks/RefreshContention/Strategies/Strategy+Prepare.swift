import Foundation
import UserSessions

/// What one run gives a strategy: its clock, the shared refresher and the initial token.
struct Scenario: Sendable {
    var clock: BenchClock
    var refresher: SimulatedRefresher
    var initialToken: String
    var initialExpiresAt: Double
    /// Passed to the controller; `nil` keeps the controller's defaults (lead time and proactive window).
    var refreshWindows: (leadTime: Duration, proactiveWindow: Duration)?
}

/// A ready strategy and how to dispose of it.
struct PreparedSource: Sendable {
    var source: any TokenSource
    var tearDown: @Sendable () async -> Void
}

extension Strategy {
    /// Builds the strategy for `scenario`; for ``userSessionController`` this opens a session.
    func prepare(_ scenario: Scenario) async throws -> PreparedSource {
        let token = scenario.initialToken
        let expiresAt = scenario.initialExpiresAt
        let clock = scenario.clock
        let refresher = scenario.refresher
        switch self {
        case .bareMutexRead:
            return PreparedSource(source: BareMutexRead(token: token), tearDown: {})
        case .naiveActor:
            return PreparedSource(
                source: NaiveActor(token: token, expiresAt: expiresAt, clock: clock, refresher: refresher),
                tearDown: {})
        case .actorCachedTask:
            return PreparedSource(
                source: ActorCachedTask(token: token, expiresAt: expiresAt, clock: clock, refresher: refresher),
                tearDown: {})
        case .lockedContinuationQueue:
            return PreparedSource(
                source: LockedContinuationQueue(token: token, expiresAt: expiresAt, clock: clock, refresher: refresher),
                tearDown: {})
        case .userSessionController, .userSessionControllerDefault:
            return try await prepareController(scenario, defaults: self == .userSessionControllerDefault)
        }
    }

    /// Opens a session on a controller that refreshes through the scenario's refresher.
    private func prepareController(_ scenario: Scenario, defaults: Bool) async throws -> PreparedSource {
        var configuration = UserSessionController.Configuration(clock: scenario.clock.sessionClock)
        if !defaults {
            // The storm refreshes hundreds of times a second; keep the loop breaker out of the way.
            configuration.refreshLoopPolicy = .init(maximumRefreshes: Int.max, window: .seconds(1))
            if let windows = scenario.refreshWindows {
                configuration.refreshLeadTime = windows.leadTime
                configuration.proactiveRefreshWindow = windows.proactiveWindow
            }
        }
        let controller = UserSessionController(
            store: InMemoryTokenStore(),
            refresher: SimulatedTokenRefresher(simulated: scenario.refresher),
            configuration: configuration
        )
        let credentials = Credentials(
            accessToken: scenario.initialToken, refreshToken: "bench-refresh-token",
            expiresAt: Date(timeIntervalSinceReferenceDate: scenario.initialExpiresAt))
        _ = try await controller.open(UserSessionPrototype(userInfo: UserInfo(id: "bench"), credentials: credentials))
        return PreparedSource(
            source: ControllerSource(controller: controller), tearDown: { await controller.shutdown() })
    }
}
