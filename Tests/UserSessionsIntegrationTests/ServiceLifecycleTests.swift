#if ServiceLifecycle
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing
import UserSessions
import UserSessionsServiceLifecycle

/// Stands in for an HTTP server that uses the registry: it runs until graceful shutdown, and records whether
/// alice's session was still open when it was asked to stop.
final class ProbeServer: Service {
    let registry: UserSessionRegistry
    let started: AsyncStream<Void>
    private let startedContinuation: AsyncStream<Void>.Continuation
    private let sessionOpenAtShutdown = Locked<Bool?>(nil)

    init(registry: UserSessionRegistry) {
        self.registry = registry
        (started, startedContinuation) = AsyncStream.makeStream()
    }

    var sawOpenSessionAtShutdown: Bool? { sessionOpenAtShutdown.withLock { $0 } }

    func run() async throws {
        startedContinuation.yield()
        try? await gracefulShutdown()
        let isOpened = registry.existingController(for: "alice")?.session.isOpened ?? false
        sessionOpenAtShutdown.withLock { $0 = isOpened }
    }
}

struct ServiceLifecycleTests {
    static func openRegistry(store: any TokenStore, refresher: ScriptedRefresher? = nil) async throws
        -> UserSessionRegistry
    {
        var configuration = Fixtures.configuration()
        // Only the final flush may write what failed before (the background retry never comes in a test's time).
        configuration.initialRetryDelay = .seconds(3600)
        configuration.maximumRetryDelay = .seconds(3600)
        let registry = UserSessionRegistry(store: store, refresher: refresher, configuration: configuration)
        try await registry.open(Fixtures.prototype("alice"))
        try await registry.open(Fixtures.prototype("bob"))
        return registry
    }

    /// Collects a stream to its end: returns only if the stream finishes.
    static func collect(_ events: AsyncStream<UserSessionEvent>) async -> [UserSessionEvent.Kind] {
        var kinds: [UserSessionEvent.Kind] = []
        for await event in events { kinds.append(event.kind) }
        return kinds
    }

    @Test func gracefulShutdownClosesEverySessionAfterTheServicesListedAfterIt() async throws {
        let store = InMemoryTokenStore()
        let registry = try await Self.openRegistry(store: store)
        let alice = try #require(registry.existingController(for: "alice"))
        let bob = try #require(registry.existingController(for: "bob"))
        let streams = [alice.events(bufferSize: .max), bob.events(bufferSize: .max)]
        let server = ProbeServer(registry: registry)
        let group = ServiceGroup(services: [registry, server], gracefulShutdownSignals: [], cancellationSignals: [])

        await group.triggerGracefulShutdown()
        try await group.run()

        #expect(server.sawOpenSessionAtShutdown == true)
        #expect(alice.session.state == .closed)
        #expect(bob.session.state == .closed)
        for stream in streams {
            #expect(await Self.collect(stream) == [.current, .closed(.shutdown)])
        }
        #expect(try await store.load(identifier: "alice")?.credentials?.accessToken == Fixtures.accessToken)
        #expect(try await store.load(identifier: "bob")?.credentials?.accessToken == Fixtures.accessToken)
        #expect(throws: UserSessionError.self) { try registry.controller(for: "carol") }
    }

    @Test func gracefulShutdownFlushesAWriteThatFailedBefore() async throws {
        let store = FlakyStore()
        let registry = try await Self.openRegistry(store: store, refresher: ScriptedRefresher())
        let alice = try #require(registry.existingController(for: "alice"))
        store.failsWrites = true
        try await alice.refreshCredentials()
        #expect(try await store.load(identifier: "alice")?.credentials?.accessToken == Fixtures.accessToken)
        store.failsWrites = false

        let group = ServiceGroup(services: [registry], gracefulShutdownSignals: [], cancellationSignals: [])
        await group.triggerGracefulShutdown()
        try await group.run()

        #expect(try await store.load(identifier: "alice")?.credentials?.accessToken == Fixtures.rotatedAccessToken)
    }

    @Test(arguments: [true, false])
    func cancellingTheGroupShutsTheRegistryDownWithoutATrap(registryFirst: Bool) async throws {
        let store = InMemoryTokenStore()
        let registry = try await Self.openRegistry(store: store)
        let alice = try #require(registry.existingController(for: "alice"))
        let stream = alice.events(bufferSize: .max)
        let server = ProbeServer(registry: registry)
        let services: [any Service] = registryFirst ? [registry, server] : [server, registry]
        let group = ServiceGroup(services: services, gracefulShutdownSignals: [], cancellationSignals: [])

        let running = Task { try await group.run() }
        for await _ in server.started { break }
        running.cancel()
        _ = await running.result  // the group may report the cancellation; it must end, and never trap

        #expect(alice.session.state == .closed)
        #expect(await Self.collect(stream) == [.current, .closed(.shutdown)])
        #expect(try await store.load(identifier: "alice")?.credentials != nil)
        #expect(throws: UserSessionError.self) { try registry.controller(for: "alice") }
    }

    @Test func aControllerRunsAsAServiceUntilGracefulShutdown() async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store, configuration: Fixtures.configuration())
        _ = try await controller.open(Fixtures.prototype("alice"))
        let stream = controller.events(bufferSize: .max)

        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await controller.run() }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }

        #expect(controller.session.state == .closed)
        #expect(await Self.collect(stream) == [.current, .closed(.shutdown)])
        #expect(try await store.load(identifier: "alice")?.credentials != nil)
    }
}
#endif
