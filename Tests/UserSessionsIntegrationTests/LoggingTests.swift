#if Logging
import InMemoryLogging
import Logging
import Testing
import UserSessions
import UserSessionsLogging

struct LoggingTests {
    /// A logger that keeps every line, at every level, in memory.
    static func capturingLogger() -> (Logger, InMemoryLogHandler) {
        var handler = InMemoryLogHandler()
        handler.logLevel = .trace
        return (Logger(label: "user-sessions-test", factory: { _ in handler }), handler)
    }

    /// Opens, refreshes, fails a refresh transiently, then terminally; returns the events the controller emitted.
    static func runEventfulSession(logger: Logger, probe: ObservationProbe) async throws {
        let refresher = ScriptedRefresher([
            .success(Fixtures.credentials(access: Fixtures.rotatedAccessToken, refresh: Fixtures.rotatedRefreshToken)),
            .failure(Fixtures.transientFailure()),
            .failure(LeakyError()),
            .failure(Fixtures.terminalFailure()),
        ])
        let controller = UserSessionController(
            store: InMemoryTokenStore(), refresher: refresher,
            configuration: Fixtures.configuration().logging(to: logger).observing(probe))
        _ = try await controller.open(Fixtures.prototype("alice"))
        try await controller.refreshCredentials()
        for _ in 0..<3 { await #expect(throws: UserSessionError.self) { try await controller.refreshCredentials() } }
        // The terminal failure's invalidation is logged before its refresh report arrives.
        _ = await probe.nextReports(4)
        await controller.shutdown()
    }

    @Test func everyEventIsLoggedOnceWithItsLevelAndStructuredMetadata() async throws {
        let (logger, handler) = Self.capturingLogger()
        let probe = ObservationProbe()
        try await Self.runEventfulSession(logger: logger, probe: probe)

        let eventLines = handler.entries.filter { $0.metadata["user_session.event.sequence"] != nil }
        let sequences = eventLines.compactMap { $0.metadata["user_session.event.sequence"].map { "\($0)" } }
        #expect(sequences == probe.events.map { "\($0.sequence)" })
        #expect(Set(sequences).count == sequences.count)
        for line in eventLines {
            #expect(line.metadata["user_session.identifier"] == "alice")
            #expect(line.metadata["user_session.generation"] == "1")
        }

        func levels(of event: String) -> [Logger.Level] {
            eventLines.filter { $0.metadata["user_session.event"] == .string(event) }.map(\.level)
        }
        #expect(levels(of: "opened") == [.info])
        #expect(levels(of: "refreshStarted") == [.debug, .debug, .debug, .debug])
        #expect(levels(of: "credentialsRefreshed") == [.debug])
        #expect(levels(of: "refreshFailed(transient)") == [.warning, .warning])
        #expect(levels(of: "refreshFailed(terminal)") == [.warning])
        #expect(levels(of: "invalidated(credentialsRevoked)") == [.warning])
        let terminal = eventLines.first { $0.metadata["user_session.event"] == "refreshFailed(terminal)" }
        #expect(terminal?.metadata["user_session.failure_class"] == "terminal")

        let reports = handler.entries.filter { $0.message == "refresh finished" }
        #expect(
            reports.map { $0.metadata["user_session.refresh.outcome"] } == ["succeeded", "failed", "failed", "failed"])
        #expect(reports.map { $0.metadata["user_session.refresh.waiters"] } == ["1", "1", "1", "1"])
    }

    @Test func noSecretReachesTheLogs() async throws {
        let (logger, handler) = Self.capturingLogger()
        let store = FlakyStore()
        let loggedStore = store.logging(to: logger)
        let controller = UserSessionController(
            store: loggedStore, refresher: ScriptedRefresher([.failure(LeakyError())]),
            configuration: Fixtures.configuration(), logger: logger)
        _ = try await controller.open(Fixtures.prototype("bob"))
        await #expect(throws: UserSessionError.self) { try await controller.refreshCredentials() }
        store.failsWrites = true
        try await controller.refreshCredentials()  // committed in memory; the write fails with a leaky error
        await #expect(throws: LeakyError.self) {
            try await loggedStore.save(
                .init(userInfo: .init(id: "bob"), credentials: Fixtures.credentials()), identifier: "bob")
        }
        store.failsWrites = false
        await controller.shutdown()

        #expect(handler.entries.contains { $0.metadata["user_session.event"] == "persistenceFailed" })
        #expect(handler.entries.contains { $0.message == "token store call failed" })
        let rendered = handler.entries.map { entry in
            "\(entry.level) \(entry.message) \(entry.metadata) \(entry.error.map { "\($0)" } ?? "")"
        }
        #expect(!rendered.isEmpty)
        for line in rendered {
            for secret in Fixtures.secrets { #expect(!line.contains(secret), "\(line)") }
        }
    }

    @Test func theStoreWrapperLogsFailuresAtWarningWithTheOperationAndIdentifier() async throws {
        let (logger, handler) = Self.capturingLogger()
        let store = FlakyStore()
        store.failsWrites = true
        let loggedStore = store.logging(to: logger)
        await #expect(throws: LeakyError.self) {
            try await loggedStore.save(.init(userInfo: .init(id: "carol"), credentials: nil), identifier: "carol")
        }
        _ = try await loggedStore.load(identifier: "carol")

        #expect(handler.entries.count == 2)
        let failure = try #require(handler.entries.first)
        #expect(failure.level == .warning)
        #expect(failure.metadata["user_session.store.operation"] == "save")
        #expect(failure.metadata["user_session.identifier"] == "carol")
        #expect(failure.metadata["user_session.error"] == "LeakyError")
        #expect(handler.entries.last?.level == .trace)
    }

    @Test func aFailedRevocationAtSignOutIsAWarningWithItsClassAndNoSecret() async throws {
        let (logger, handler) = Self.capturingLogger()
        let store = InMemoryTokenStore()
        let controller = UserSessionController(
            store: store, refresher: FailingRevoker(), configuration: Fixtures.configuration(), logger: logger)
        _ = try await controller.open(Fixtures.prototype("erin"))
        try await controller.closeAndClear()
        await controller.shutdown()
        // A user without a controller: the registry reports it itself.
        let registry = UserSessionRegistry(
            store: store, refresher: FailingRevoker(error: LeakyError()), configuration: Fixtures.configuration(),
            logger: logger)
        try await store.save(
            .init(userInfo: .init(id: "frank"), credentials: Fixtures.credentials()), identifier: "frank")
        try await registry.closeAndClear(identifier: "frank")
        await registry.shutdown()

        let failures = handler.entries.filter {
            $0.metadata["user_session.event"].map { "\($0)".hasPrefix("revocationFailed") } == true
        }
        #expect(failures.map(\.level) == [.warning, .warning])
        #expect(failures.map { $0.metadata["user_session.identifier"] } == ["erin", "frank"])
        #expect(failures.map { $0.metadata["user_session.failure_class"] } == ["misconfiguration", "transient"])
        #expect(try await store.storedIdentifiers().isEmpty)
        for entry in handler.entries {
            let line = "\(entry.level) \(entry.message) \(entry.metadata) \(entry.error.map { "\($0)" } ?? "")"
            for secret in Fixtures.secrets { #expect(!line.contains(secret), "\(line)") }
        }
    }

    @Test func anEventStreamIsLoggedUntilItFinishes() async throws {
        let (logger, handler) = Self.capturingLogger()
        let controller = UserSessionController(store: InMemoryTokenStore(), configuration: Fixtures.configuration())
        let events = controller.events(bufferSize: .max)
        _ = try await controller.open(Fixtures.prototype("dave"))
        await controller.close()
        await controller.shutdown()
        await UserSessionLogObserver(logger: logger).log(events: events)

        #expect(handler.entries.map(\.message) == ["session opened", "session closed"])
        #expect(handler.entries.map(\.level) == [.info, .info])
        #expect(handler.entries.last?.metadata["user_session.event"] == "closed(requested)")
    }
}

extension UserSessionController.Configuration {
    /// This configuration with `observer` added last.
    func observing(_ observer: any UserSessionObserver) -> Self {
        var configuration = self
        configuration.observers.append(observer)
        return configuration
    }
}
#endif
