#if Metrics
import CoreMetrics
import MetricsTestKit
import Testing
import UserSessions
import UserSessionsMetrics

struct MetricsTests {
    static func controller(
        refresher: ScriptedRefresher = ScriptedRefresher(), store: any TokenStore = InMemoryTokenStore(),
        metrics: TestMetrics, probe: ObservationProbe,
        configure: (inout UserSessionController.Configuration) -> Void = { _ in }
    ) -> UserSessionController {
        var configuration = Fixtures.configuration().metrics(UserSessionMetrics(factory: metrics))
        configuration.observers.append(probe)
        configure(&configuration)
        return UserSessionController(store: store, refresher: refresher, configuration: configuration)
    }

    @Test func refreshesAreCountedByOutcomeAndFailureClassAndTimed() async throws {
        let metrics = TestMetrics()
        let probe = ObservationProbe()
        let refresher = ScriptedRefresher([
            .success(Fixtures.credentials()), .failure(Fixtures.transientFailure()), .failure(LeakyError()),
            .failure(Fixtures.terminalFailure()),
        ])
        let controller = Self.controller(refresher: refresher, metrics: metrics, probe: probe)
        _ = try await controller.open(Fixtures.prototype("alice"))
        try await controller.refreshCredentials()
        for _ in 0..<3 { await #expect(throws: UserSessionError.self) { try await controller.refreshCredentials() } }
        _ = await probe.nextReports(4)

        func refreshes(_ dimensions: [(String, String)]) -> Int64 {
            metrics.counterTotal(label: "user_sessions_refreshes_total", dimensions: dimensions)
        }
        #expect(refreshes([("outcome", "succeeded")]) == 1)
        #expect(refreshes([("outcome", "failed"), ("failure_class", "transient")]) == 2)
        #expect(refreshes([("outcome", "failed"), ("failure_class", "terminal")]) == 1)
        #expect(refreshes([("outcome", "failed"), ("failure_class", "misconfiguration")]) == 0)
        let succeeded = try metrics.expectTimer("user_sessions_refresh_duration", [("outcome", "succeeded")])
        let failed = try metrics.expectTimer("user_sessions_refresh_duration", [("outcome", "failed")])
        #expect(succeeded.values.count == 1)
        #expect(failed.values.count == 3)
        #expect(succeeded.values.allSatisfy { $0 >= 0 })
        // Opened, then invalidated by the terminal failure.
        #expect(try metrics.expectMeter("user_sessions_open").values == [1, 0])
        await controller.shutdown()
    }

    @Test func failedRevocationsAtSignOutAreCountedByFailureClass() async throws {
        let metrics = TestMetrics()
        let probe = ObservationProbe()
        let store = InMemoryTokenStore()
        var configuration = Fixtures.configuration().metrics(UserSessionMetrics(factory: metrics))
        configuration.observers.append(probe)
        let controller = UserSessionController(store: store, refresher: FailingRevoker(), configuration: configuration)
        _ = try await controller.open(Fixtures.prototype("alice"))
        try await controller.closeAndClear()
        await controller.shutdown()
        let registry = UserSessionRegistry(
            store: store, refresher: FailingRevoker(error: LeakyError()), configuration: configuration)
        try await store.save(.init(userInfo: .init(id: "bob"), credentials: Fixtures.credentials()), identifier: "bob")
        try await registry.closeAndClear(identifier: "bob")
        await registry.shutdown()

        func failures(_ failureClass: String) -> Int64 {
            metrics.counterTotal(
                label: "user_sessions_revocation_failures_total", dimensions: [("failure_class", failureClass)])
        }
        #expect(failures("misconfiguration") == 1)
        #expect(failures("transient") == 1)
        #expect(failures("cancelled") == 0)
        // The registry's own event leaves the open-sessions gauge alone: opened once, closed once.
        #expect(try metrics.expectMeter("user_sessions_open").values == [1, 0])
    }

    @Test func everyCallerOfASharedRefreshIsCountedAsAWaiter() async throws {
        let metrics = TestMetrics()
        let probe = ObservationProbe()
        let refresher = ScriptedRefresher()
        let controller = Self.controller(refresher: refresher, metrics: metrics, probe: probe)
        _ = try await controller.open(Fixtures.prototype("alice"))
        let callers = 200
        await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<callers { group.addTask { try await controller.refreshCredentials() } }
        }
        let reports = await probe.nextReports(refresher.calls)
        // However the callers were grouped into flights, each got exactly one flight's result.
        #expect(reports.map(\.waiters).reduce(0, +) == callers)
        #expect(metrics.counterTotal(label: "user_sessions_refresh_waiters_total") == Int64(callers))
        #expect(
            metrics.counterTotal(label: "user_sessions_refreshes_total", dimensions: [("outcome", "succeeded")])
                == Int64(refresher.calls))
        await controller.shutdown()
    }

    @Test func replaysLoopTripsAndPersistenceFailuresAreCounted() async throws {
        let metrics = TestMetrics()
        let probe = ObservationProbe()
        let store = FlakyStore()
        let controller = Self.controller(store: store, metrics: metrics, probe: probe) {
            $0.refreshLoopPolicy = .init(maximumRefreshes: 2, window: .seconds(3600))
        }
        _ = try await controller.open(Fixtures.prototype("alice"))

        struct Unauthorized: Error {}
        var attempts = 0
        let token = try await controller.withAccessToken(isAuthenticationFailure: { $0 is Unauthorized }) { token in
            attempts += 1
            if attempts == 1 { throw Unauthorized() }
            return token
        }
        #expect(token == Fixtures.rotatedAccessToken)
        #expect(metrics.counterTotal(label: "user_sessions_replays_total") == 1)

        store.failsWrites = true
        try await controller.refreshCredentials()
        #expect(metrics.counterTotal(label: "user_sessions_persistence_failures_total") == 1)
        store.failsWrites = false

        await #expect(throws: UserSessionError.self) { try await controller.refreshCredentials() }
        #expect(metrics.counterTotal(label: "user_sessions_refresh_loop_trips_total") == 1)
        await controller.shutdown()
    }

    @Test func openSessionsAndEvictionsFollowTheRegistry() async throws {
        let metrics = TestMetrics()
        let registry = UserSessionRegistry(
            store: InMemoryTokenStore(),
            configuration: Fixtures.configuration().metrics(UserSessionMetrics(factory: metrics)))
        try await registry.open(Fixtures.prototype("alice"))
        try await registry.open(Fixtures.prototype("bob"))
        try await registry.open(Fixtures.prototype("bob"))  // replaced: closed then opened again
        let open = try metrics.expectMeter("user_sessions_open")
        #expect(open.lastValue == 2)
        await registry.close(identifier: "alice")
        #expect(open.lastValue == 1)
        #expect(metrics.counterTotal(label: "user_sessions_evictions_total") == 1)
        _ = try registry.controller(for: "carol")  // never opened
        #expect(await registry.evictIdle() == 1)
        #expect(metrics.counterTotal(label: "user_sessions_evictions_total") == 2)
        await registry.shutdown()
        #expect(open.lastValue == 0)
        #expect(metrics.counterTotal(label: "user_sessions_evictions_total") == 2)
    }

    @Test func noDimensionCarriesAnIdentifier() async throws {
        let metrics = TestMetrics()
        let registry = UserSessionRegistry(
            store: InMemoryTokenStore(), refresher: ScriptedRefresher(),
            configuration: Fixtures.configuration().metrics(UserSessionMetrics(factory: metrics)))
        let controller = try await registry.open(Fixtures.prototype("identifier-7c1e"))
        try await controller.refreshCredentials()
        await registry.close(identifier: "identifier-7c1e")
        let dimensions =
            metrics.counters.flatMap(\.dimensions) + metrics.timers.flatMap(\.dimensions)
            + metrics.meters.flatMap(\.dimensions)
        #expect(!dimensions.isEmpty)
        for (key, value) in dimensions {
            #expect(!value.contains("identifier-7c1e"), "\(key)")
            for secret in Fixtures.secrets { #expect(!value.contains(secret)) }
        }
        #expect(Set(dimensions.map(\.0)).isSubset(of: ["outcome", "failure_class"]))
    }
}
#endif
