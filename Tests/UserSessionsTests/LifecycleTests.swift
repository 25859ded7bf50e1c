import Foundation
import Testing

@testable import UserSessions

struct LifecycleTests {
    @Test func newControllerIsUndefinedAndFirstEventDescribesIt() async {
        let controller = UserSessionController(store: InMemoryTokenStore())
        #expect(controller.session.state == .undefined)
        let probe = EventProbe(controller)
        await probe.wait { !$0.isEmpty }
        #expect(probe.events.first?.kind == .current)
        #expect(probe.events.first?.session.state == .undefined)
        await controller.shutdown()
    }

    @Test func openStartsServicesPersistsAndEmitsOpened() async throws {
        let store = InMemoryTokenStore()
        let log = ServiceLog()
        let controller = UserSessionController(store: store, services: makeServices(2, log: log))
        let probe = EventProbe(controller)
        let prototype = makePrototype("alice")

        let session = try await controller.open(prototype)

        #expect(session.state == .opened)
        #expect(session.identifier == "alice")
        #expect(session.userInfo == prototype.userInfo)
        #expect(controller.session == session)
        #expect(controller.credentials == prototype.credentials)
        #expect(log.all == ["start:0", "started:0", "start:1", "started:1"])
        #expect(try await store.loadCurrentIdentifier() == "alice")
        #expect(try await store.load(identifier: "alice")?.credentials == prototype.credentials)
        await probe.wait(for: .opened)
        #expect(probe.kinds == [.opened])
        #expect(probe.events.last?.session == session)
        await controller.shutdown()
    }

    @Test func closeKeepsStoredCredentialsAndIsIdempotent() async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store)
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        await controller.close()
        await controller.close()

        #expect(controller.session.state == .closed)
        #expect(controller.session.identifier == "alice")
        #expect(controller.credentials == nil)
        #expect(try await store.load(identifier: "alice") != nil)
        #expect(try await store.loadCurrentIdentifier() == "alice")
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.opened, .closed(.requested)])
    }

    @Test func openingWhileOpenClosesTheOldSessionFirst() async throws {
        let log = ServiceLog()
        let controller = UserSessionController(store: InMemoryTokenStore(), services: makeServices(2, log: log))
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        let bob = try await controller.open(makePrototype("bob"))

        #expect(bob.identifier == "bob")
        #expect(
            log.all == [
                "start:0", "started:0", "start:1", "started:1",
                "stop:1", "stopped:1", "stop:0", "stopped:0",
                "start:0", "started:0", "start:1", "started:1",
            ])
        await probe.wait { $0.count == 4 }
        let lifecycle = probe.events.dropFirst()
        #expect(lifecycle.map(\.kind) == [.opened, .closed(.replaced), .opened])
        #expect(lifecycle.map(\.session.identifier) == ["alice", "alice", "bob"])
        #expect(lifecycle.map(\.session.state) == [.opened, .closed, .opened])
        await controller.shutdown()
    }

    @Test func closeAndClearRemovesStoredSessionAndIdentifier() async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store)
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        try await controller.closeAndClear()
        try await controller.closeAndClear()

        #expect(controller.session.state == .closed)
        #expect(try await store.load(identifier: "alice") == nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
        #expect(await controller.canRestore == false)
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.opened, .closed(.cleared)])
    }

    @Test func closeAndClearOnAFreshControllerClearsThePersistedSession() async throws {
        let store = InMemoryTokenStore()
        let first = UserSessionController(store: store)
        _ = try await first.open(makePrototype("alice"))
        _ = try await first.open(makePrototype("bob"))
        await first.shutdown()

        let second = UserSessionController(store: store)
        let probe = EventProbe(second)
        try await second.closeAndClear()

        #expect(try await store.load(identifier: "bob") == nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
        #expect(try await store.load(identifier: "alice") != nil)
        #expect(second.session.state == .undefined)
        await second.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds.isEmpty)
    }

    @Test func closeAndClearAfterCloseClearsTheClosedSession() async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store)
        _ = try await controller.open(makePrototype("alice"))
        await controller.close()

        try await controller.closeAndClear()

        #expect(try await store.load(identifier: "alice") == nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
        await controller.shutdown()
    }

    @Test(arguments: ["", "a\u{0}b", String(repeating: "x", count: 1025)])
    func openRejectsAnInvalidPrototype(identifier: String) async throws {
        let store = InMemoryTokenStore()
        let controller = UserSessionController(store: store)
        let prototype = UserSessionPrototype(identifier: identifier, userInfo: UserInfo(id: "u"))

        await #expect(throws: UserSessionError(.invalidPrototype, "")) {
            try await controller.open(prototype)
        }
        #expect(controller.session.state == .undefined)
        #expect(try await store.storedIdentifiers().isEmpty)
        await controller.shutdown()
    }

    @Test func openAcceptsAnIdentifierOf1024Bytes() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let identifier = String(repeating: "x", count: 1024)
        let session = try await controller.open(
            UserSessionPrototype(identifier: identifier, userInfo: UserInfo(id: "u")))
        #expect(session.identifier == identifier)
        await controller.shutdown()
    }

    @Test func openFailsWithoutOpeningWhenPersistingFails() async throws {
        let store = FaultyTokenStore()
        store.setFaults { $0.save = UserSessionError(.storeFailure, "disk full") }
        let log = ServiceLog()
        let controller = UserSessionController(store: store, services: makeServices(1, log: log))

        await #expect(throws: UserSessionError(.storeFailure, "")) {
            try await controller.open(makePrototype("alice"))
        }
        #expect(controller.session.state == .undefined)
        #expect(controller.credentials == nil)
        #expect(log.all.isEmpty)
        await controller.shutdown()
    }

    @Test func restoreWhileOpenedIsWrongState() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        _ = try await controller.open(makePrototype("alice"))

        await #expect(throws: UserSessionError(.wrongState, "")) { try await controller.restore() }
        await #expect(throws: UserSessionError(.wrongState, "")) { try await controller.restore(identifier: "alice") }
        #expect(controller.session.state == .opened)
        await controller.shutdown()
    }

    @Test func restoreWithNothingPersistedReturnsNil() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        #expect(try await controller.restore() == nil)
        #expect(controller.session.state == .undefined)
        #expect(await controller.canRestore == false)
        await controller.shutdown()
    }

    @Test func restoreOfAnUnknownOrInvalidIdentifierThrows() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        await #expect(throws: UserSessionError(.noStoredSession, "")) {
            try await controller.restore(identifier: "nobody")
        }
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) { try await controller.restore(identifier: "") }
        await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
            try await controller.restore(identifier: "a\u{0}")
        }
        #expect(controller.session.state == .undefined)
        await controller.shutdown()
    }

    @Test func restoreAfterRestartReopensWithUserInfoAndServices() async throws {
        let store = InMemoryTokenStore()
        let prototype = makePrototype("alice")
        let first = UserSessionController(store: store)
        _ = try await first.open(prototype)
        await first.shutdown()

        let log = ServiceLog()
        let second = UserSessionController(store: store, services: makeServices(2, log: log))
        #expect(await second.canRestore)
        let probe = EventProbe(second)
        let restored = try await second.restore()

        #expect(restored?.identifier == "alice")
        #expect(restored?.userInfo == prototype.userInfo)
        #expect(restored?.state == .opened)
        #expect(second.session == restored)
        #expect(second.credentials == prototype.credentials)
        #expect(log.names("started:") == ["0", "1"])
        await probe.wait(for: .opened)
        await second.shutdown()
    }

    @Test func restoreOfExpiredUnrefreshableCredentialsOpensNothing() async throws {
        let time = ManualTime()
        let store = InMemoryTokenStore()
        let configuration = UserSessionController.Configuration(clock: time.clock)
        let first = UserSessionController(store: store, configuration: configuration)
        _ = try await first.open(makePrototype("alice", now: time.now, refreshable: false))
        await first.shutdown()
        time.advance(by: 7200)

        let log = ServiceLog()
        let second = UserSessionController(
            store: store, services: makeServices(1, log: log), configuration: configuration)
        #expect(await second.canRestore == false)
        await #expect(throws: UserSessionError(.credentialsUnusable, "")) { try await second.restore() }
        #expect(second.session.state == .undefined)
        #expect(second.credentials == nil)
        #expect(log.all.isEmpty)
        #expect(try await store.load(identifier: "alice") != nil)
        await second.shutdown()
    }

    @Test func restoreOfExpiredRefreshableCredentialsRefreshesThenOpens() async throws {
        let time = ManualTime()
        let store = InMemoryTokenStore()
        let configuration = UserSessionController.Configuration(clock: time.clock)
        let first = UserSessionController(store: store, configuration: configuration)
        _ = try await first.open(makePrototype("alice", now: time.now))
        await first.shutdown()
        time.advance(by: 7200)

        let refresher = LifecycleTestRefresher(now: { time.now })
        let second = UserSessionController(store: store, refresher: refresher, configuration: configuration)
        #expect(await second.canRestore)
        let restored = try await second.restore()

        #expect(restored?.state == .opened)
        #expect(try await second.accessToken().isEmpty == false)
        await second.shutdown()
    }

    @Test func restoreOfCorruptDataEmitsAnEventAndKeepsTheData() async throws {
        let store = FaultyTokenStore()
        try await store.base.save(StoredSession(userInfo: UserInfo(id: "alice"), credentials: nil), identifier: "alice")
        try await store.base.saveCurrentIdentifier("alice")
        store.setFaults { $0.load = UserSessionError(.storeCorrupt, "truncated") }
        let controller = UserSessionController(store: store)
        let probe = EventProbe(controller)

        await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await controller.restore() }
        #expect(await controller.canRestore == false)

        await probe.wait(for: .storeCorrupt(identifier: "alice"))
        #expect(controller.session.state == .undefined)
        #expect(try await store.base.load(identifier: "alice") != nil)
        await controller.shutdown()
    }

    @Test func canRestoreHasNoSideEffects() async throws {
        let store = InMemoryTokenStore()
        let first = UserSessionController(store: store)
        _ = try await first.open(makePrototype("alice"))
        await first.shutdown()

        let second = UserSessionController(store: store)
        let probe = EventProbe(second)
        #expect(await second.canRestore)
        #expect(await second.canRestore)
        await second.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds.isEmpty)
        #expect(second.session.state == .undefined)
        #expect(try await store.loadCurrentIdentifier() == "alice")
    }

    @Test func canRestoreIsFalseWhenTheStoreFails() async throws {
        let store = FaultyTokenStore()
        try await store.base.save(StoredSession(userInfo: UserInfo(id: "alice"), credentials: nil), identifier: "alice")
        try await store.base.saveCurrentIdentifier("alice")
        let controller = UserSessionController(store: store)
        #expect(await controller.canRestore)
        store.setFaults { $0.loadCurrentIdentifier = UserSessionError(.storeFailure, "io") }
        #expect(await controller.canRestore == false)
        await controller.shutdown()
    }

    @Test func invalidationOfTheCurrentGenerationStopsServicesAndKeepsStoredCredentials() async throws {
        let store = InMemoryTokenStore()
        let log = ServiceLog()
        let controller = UserSessionController(store: store, services: makeServices(3, log: log))
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))
        let generation = await controller.generation

        await controller.invalidate(generation: generation - 1, reason: .credentialsRevoked)
        #expect(controller.session.state == .opened)

        await controller.invalidate(generation: generation, reason: .credentialsRevoked)
        #expect(controller.session.state == .invalid)
        #expect(controller.credentials == nil)
        #expect(log.names("stop:") == ["2", "1", "0"])
        #expect(try await store.load(identifier: "alice") != nil)

        await controller.invalidate(generation: generation, reason: .credentialsRevoked)
        await controller.close()
        #expect(controller.session.state == .invalid)
        await controller.shutdown()
        await probe.waitUntilFinished()
        #expect(probe.kinds == [.opened, .invalidated(.credentialsRevoked)])
    }

    @Test func anInvalidSessionCanBeReplacedByOpening() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        _ = try await controller.open(makePrototype("alice"))
        await controller.invalidate(generation: await controller.generation, reason: .credentialsExpired)
        #expect(controller.session.state == .invalid)

        let session = try await controller.open(makePrototype("alice"))
        #expect(session.state == .opened)
        #expect(await controller.canRestore)
        await controller.shutdown()
    }

    @Test func shutdownFinishesStreamsAndRejectsLaterCalls() async throws {
        let controller = UserSessionController(store: InMemoryTokenStore())
        let probe = EventProbe(controller)
        _ = try await controller.open(makePrototype("alice"))

        await controller.shutdown()
        await controller.shutdown()

        await probe.waitUntilFinished()
        #expect(probe.kinds == [.opened, .closed(.shutdown)])
        #expect(controller.session.state == .closed)
        await #expect(throws: UserSessionError(.shutdown, "")) { try await controller.open(makePrototype("bob")) }
        await #expect(throws: UserSessionError(.shutdown, "")) { try await controller.restore() }
        await #expect(throws: UserSessionError(.shutdown, "")) { try await controller.restore(identifier: "alice") }
        await #expect(throws: UserSessionError(.shutdown, "")) { try await controller.closeAndClear() }
        await controller.close()

        let late = EventProbe(controller)
        await late.waitUntilFinished()
        #expect(late.events.map(\.kind) == [.current])
        #expect(late.events.first?.session.state == .closed)
    }
}
