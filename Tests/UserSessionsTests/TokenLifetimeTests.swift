import Foundation
import Testing

@testable import UserSessions

/// Issue 9, item 14, and issue 12's per-call freshness: token lifetimes of every size under the default
/// configuration, `accessToken(minimumValidity:)`, and configurations that cannot work (DESIGN.md, refresh 11).
struct TokenLifetimeTests {
    /// A controller with the default configuration (on a manual clock) whose refresher issues tokens living
    /// `lifetime` seconds, opened with such a token issued now (or of unknown issue time).
    static func makeController(
        lifetime: TimeInterval, issueTimeKnown: Bool = true
    ) async throws -> (UserSessionController, ScriptedRefresher, ManualTime, EventProbe) {
        let time = ManualTime()
        let refresher = ScriptedRefresher(lifetime: lifetime, now: { time.now })
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher, configuration: .init(clock: time.clock))
        let probe = EventProbe(controller)
        _ = controller.gate.backgroundTasks
        let credentials = Credentials(
            accessToken: "at-0", refreshToken: "rt-0", expiresAt: time.now + lifetime,
            lastRefreshedAt: issueTimeKnown ? time.now : nil)
        _ = try await controller.open(UserSessionPrototype(userInfo: UserInfo(id: "user"), credentials: credentials))
        return (controller, refresher, time, probe)
    }

    /// Waits for the refresh or write retry the last token request started, if any.
    static func settle(_ controller: UserSessionController) async {
        await controller.gate.backgroundTasks.last?.value
    }

    // MARK: - Item 14

    /// A steady stream of token requests over ten lifetimes: every token handed out is valid, each token is
    /// refreshed once (about three quarters into its life), and the loop breaker never trips. Before, a 300-s
    /// token sat inside the 300-s proactive window from its first use, so every refresh started the next one until
    /// the breaker tripped; 2-s tokens refreshed on every call and threw `refreshLoop`.
    @Test(arguments: [1.0, 2, 10, 60, 300, 3600, 86_400])
    func everyLifetimeRefreshesOncePerTokenUnderTheDefaults(lifetime: Double) async throws {
        let (controller, refresher, time, probe) = try await Self.makeController(lifetime: lifetime)
        let step = lifetime / 20
        for _ in 0..<200 {
            time.advance(by: step)
            let token = try await controller.accessToken()
            await Self.settle(controller)
            let expiry = try #require(controller.credentials?.expiresAt)
            #expect(expiry > time.now, "a token handed out must still be valid")
            #expect(token.hasPrefix("at-"))
        }
        // Ten lifetimes, one refresh per token when three quarters of it have passed: 10 / 0.75 ≈ 13.
        #expect(refresher.calls >= 10)
        #expect(refresher.calls <= 14)
        let sent = refresher.received.map(\.refreshToken)
        #expect(Set(sent).count == sent.count, "no token is refreshed twice")
        #expect(!probe.kinds.contains(.refreshLoopTripped))
    }

    /// The windows that follow from a lifetime, synchronously.
    @Test func leadTimeSoftWindowAndBreakerWindowScaleToTheLifetime() {
        func windows(_ lifetime: Double?) -> (Double, Double, Double) {
            var machine = RefreshStateMachine(
                policy: UserSessionController.Configuration().refreshPolicy.refresh, hasRefresher: true)
            let credentials = Credentials(
                accessToken: "at", refreshToken: "rt", expiresAt: Date(timeIntervalSinceReferenceDate: 1_000),
                lastRefreshedAt: lifetime.map { Date(timeIntervalSinceReferenceDate: 1_000 - $0) })
            _ = machine.activated(identifier: "u", userInfo: UserInfo(id: "u"), credentials: credentials, generation: 1)
            return (machine.leadTime, machine.softWindow, machine.loopWindow)
        }
        #expect(windows(2) == (0.2, 0.5, 2))
        #expect(windows(60) == (6, 15, 30))
        #expect(windows(300) == (30, 75, 30))
        #expect(windows(3600) == (60, 300, 30))
        #expect(windows(0.5) == (0.05, 0.125, 1))
        // Unknown issue time: the configured values.
        #expect(windows(nil) == (60, 300, 30))
    }

    /// A token whose issue time is unknown is refreshed by the configured lead time once; the refreshed token's
    /// lifetime is then known (counted from when the refresh started) and the windows scale from there.
    @Test func aTokenOfUnknownLifetimeIsRefreshedOnceThenScaled() async throws {
        let (controller, refresher, time, probe) = try await Self.makeController(lifetime: 2, issueTimeKnown: false)
        #expect(try await controller.accessToken() == "at-1")
        for _ in 0..<20 {
            time.advance(by: 0.1)
            _ = try await controller.accessToken()
            await Self.settle(controller)
        }
        #expect(refresher.calls == 2)
        #expect(!probe.kinds.contains(.refreshLoopTripped))
    }

    // MARK: - Configurations that cannot work

    @Test func theDefaultConfigurationIsValid() throws {
        try UserSessionController.Configuration().validate()
    }

    @Test(arguments: [
        "serviceStopTimeout", "storeTimeout", "eventBufferSize", "refreshLeadTime", "proactiveRefreshWindow",
        "initialRetryDelay", "maximumRetryDelay", "maximumRefreshes", "window", "revocationTimeout",
    ])
    func aConfigurationThatCannotWorkIsATypedError(field: String) async throws {
        var configuration = UserSessionController.Configuration()
        switch field {
        case "serviceStopTimeout": configuration.serviceStopTimeout = .zero
        case "storeTimeout": configuration.storeTimeout = .seconds(-1)
        case "eventBufferSize": configuration.eventBufferSize = 0
        case "refreshLeadTime": configuration.refreshLeadTime = .seconds(-5)
        case "proactiveRefreshWindow": configuration.proactiveRefreshWindow = .seconds(30)
        case "initialRetryDelay": configuration.initialRetryDelay = .zero
        case "maximumRetryDelay": configuration.maximumRetryDelay = .milliseconds(500)
        case "maximumRefreshes": configuration.refreshLoopPolicy.maximumRefreshes = 0
        case "revocationTimeout": configuration.revocationTimeout = .zero
        default: configuration.refreshLoopPolicy.window = .zero
        }
        let error = #expect(throws: UserSessionError.self) { try configuration.validate() }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains(field) == true)

        // The controller refuses to open or restore with it, before touching the store.
        let store = FaultPlanStore()
        let controller = UserSessionController(store: store, configuration: configuration)
        let prototype = UserSessionPrototype(userInfo: UserInfo(id: "u"), credentials: Credentials(accessToken: "at"))
        await #expect(throws: UserSessionError(.invalidConfiguration, "")) { try await controller.open(prototype) }
        await #expect(throws: UserSessionError(.invalidConfiguration, "")) { try await controller.restore() }
        await #expect(throws: UserSessionError(.invalidConfiguration, "")) {
            try await controller.restore(identifier: "u")
        }
        #expect(store.calls(.save) == 0)
        #expect(controller.session.state == .undefined)
    }

    // MARK: - Per-call freshness

    @Test func aTokenValidLongEnoughIsServedWithoutARefresh() async throws {
        let (controller, refresher, _, _) = try await Self.makeController(lifetime: 3600)
        #expect(try await controller.accessToken(minimumValidity: .seconds(600)) == "at-0")
        #expect(refresher.calls == 0)
    }

    @Test func aTokenExpiringTooSoonIsRefreshedOnceForManyCallers() async throws {
        let (controller, refresher, time, _) = try await Self.makeController(lifetime: 3600)
        time.advance(by: 3000)  // 600 s left: outside the windows, but less than the 900 s asked for
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<50 { group.addTask { try await controller.accessToken(minimumValidity: .seconds(900)) } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(Set(tokens) == ["at-1"])
        #expect(refresher.calls == 1)
        #expect(try await controller.accessToken() == "at-1")
    }

    /// A validity longer than the tokens' whole (known) lifetime cannot be met: it throws at once, without
    /// refreshing, however often it is asked — never a loop.
    @Test func aValidityLongerThanTheLifetimeThrowsWithoutRefreshing() async throws {
        let (controller, refresher, _, probe) = try await Self.makeController(lifetime: 60)
        for _ in 0..<10 {
            await #expect(throws: UserSessionError(.minimumValidityUnreachable, "")) {
                try await controller.accessToken(minimumValidity: .seconds(120))
            }
        }
        #expect(refresher.calls == 0)
        #expect(try await controller.accessToken() == "at-0")
        #expect(!probe.kinds.contains(.refreshLoopTripped))
    }

    /// With an unknown lifetime it refreshes once to find out, then throws; later calls throw without refreshing.
    @Test func aValidityLongerThanAnUnknownLifetimeRefreshesOnceThenThrows() async throws {
        let (controller, refresher, _, _) = try await Self.makeController(lifetime: 60, issueTimeKnown: false)
        for _ in 0..<5 {
            await #expect(throws: UserSessionError(.minimumValidityUnreachable, "")) {
                try await controller.accessToken(minimumValidity: .seconds(120))
            }
        }
        #expect(refresher.calls == 1)
        #expect(try await controller.accessToken() == "at-1")
    }

    @Test func aTokenThatNeverExpiresAlwaysQualifies() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let prototype = UserSessionPrototype(userInfo: UserInfo(id: "u"), credentials: Credentials(accessToken: "at"))
        _ = try await controller.open(prototype)
        #expect(try await controller.accessToken(minimumValidity: .seconds(86_400 * 365)) == "at")
        await controller.close()
        await #expect(throws: UserSessionError(.sessionNotOpen, "")) {
            try await controller.accessToken(minimumValidity: .seconds(1))
        }
    }
}
