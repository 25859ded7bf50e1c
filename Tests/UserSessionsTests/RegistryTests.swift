import Foundation
import Testing

@testable import UserSessions

struct RegistryTests {
    @Test func controllersAreCreatedOnDemandOnePerIdentifier() throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let first = try registry.controller(for: "alice")
        #expect(try registry.controller(for: "alice") === first)
        #expect(try registry.controller(for: "bob") !== first)
        #expect(registry.identifiers == ["alice", "bob"])
    }

    @Test func controllersShareTheStoreAndDoNotPersistTheCurrentIdentifier() async throws {
        let store = InMemoryTokenStore()
        let registry = UserSessionRegistry(store: store)
        try await registry.open(makePrototype("alice"))
        try await registry.open(makePrototype("bob"))
        #expect(try await registry.storedIdentifiers() == ["alice", "bob"])
        #expect(try await store.loadCurrentIdentifier() == nil)
        #expect(registry.existingController(for: "alice")?.session.state == .opened)
        #expect(registry.existingController(for: "bob")?.session.state == .opened)
    }

    @Test func servicesFactoryAttachesServicesPerUser() async throws {
        let log = ServiceLog()
        let registry = UserSessionRegistry(store: InMemoryTokenStore()) { identifier in
            [RecordingService("sync-\(identifier)", log: log)]
        }
        try await registry.open(makePrototype("alice"))
        await registry.close(identifier: "alice")
        #expect(log.all == ["start:sync-alice", "started:sync-alice", "stop:sync-alice", "stopped:sync-alice"])
    }

    @Test func closingEvictsTheControllerButKeepsStoredCredentials() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let alice = try await registry.open(makePrototype("alice"))
        let probe = EventProbe(alice)
        await registry.close(identifier: "alice")
        #expect(registry.count == 0)
        await probe.waitUntilFinished()  // an evicted controller is shut down: its streams finish
        #expect(try await registry.storedIdentifiers() == ["alice"])
        let restored = try #require(try await registry.restore(identifier: "alice"))
        #expect(restored.session.state == .opened)
        #expect(restored.session.userInfo?.name == "User alice")
    }

    @Test func closeAndClearRemovesStoredCredentialsWithOrWithoutAController() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let probe = EventProbe(try await registry.open(makePrototype("alice")))
        try await registry.open(makePrototype("bob"))
        await registry.close(identifier: "bob")
        try await registry.closeAndClear(identifier: "alice")
        try await registry.closeAndClear(identifier: "bob")
        try await registry.closeAndClear(identifier: "bob")  // idempotent
        await probe.waitUntilFinished()
        #expect(try await registry.storedIdentifiers() == [])
        #expect(registry.count == 0)
    }

    @Test func evictIdleDropsOnlyControllersWithoutAnOpenSession() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        try await registry.open(makePrototype("alice"))
        _ = try registry.controller(for: "never-opened")
        let bob = try await registry.open(makePrototype("bob"))
        await bob.close()  // closed behind the registry's back
        #expect(await registry.evictIdle() == 2)
        #expect(registry.identifiers == ["alice"])
    }

    @Test func failedOpenDoesNotLeaveAControllerBehind() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore()) { _ in
            var failing = RecordingService("failing", log: ServiceLog())
            failing.startFailure = ServiceBoom()
            return [failing]
        }
        await #expect(throws: UserSessionError(.serviceStartFailed, "")) {
            try await registry.open(makePrototype("alice"))
        }
        #expect(registry.count == 0)
    }

    @Test func switchUserClosesThePreviousUserFirstAndPersistsTheNewOne() async throws {
        let store = InMemoryTokenStore()
        let log = ServiceLog()
        let registry = UserSessionRegistry(store: store) { identifier in
            [RecordingService(identifier, log: log)]
        }
        let alice = try await registry.switchUser(to: makePrototype("alice"))
        #expect(registry.currentController === alice)
        let bob = try await registry.switchUser(to: makePrototype("bob"))
        #expect(registry.currentController === bob)
        #expect(alice.session.state == .closed)
        let stoppedAlice = try #require(log.all.firstIndex(of: "stopped:alice"))
        let startBob = try #require(log.all.firstIndex(of: "start:bob"))
        #expect(stoppedAlice < startBob)
        #expect(try await store.loadCurrentIdentifier() == "bob")

        // A restart: a new registry on the same store restores the current user.
        await registry.shutdown()
        let restarted = UserSessionRegistry(store: store)
        let restored = try #require(try await restarted.restoreCurrentUser())
        #expect(restored.session.identifier == "bob")
        #expect(restarted.currentController === restored)
    }

    @Test func shutdownClosesEveryControllerAndRefusesNewOnes() async throws {
        let registry = UserSessionRegistry(store: InMemoryTokenStore())
        let alice = try await registry.open(makePrototype("alice"))
        let probe = EventProbe(alice)
        await registry.shutdown()
        await probe.waitUntilFinished()
        #expect(alice.session.state == .closed)
        #expect(throws: UserSessionError(.shutdown, "")) { try registry.controller(for: "alice") }
    }
}

/// Counts refreshes per user; each refresh rotates the tokens and moves the expiry an hour past `time`.
private final class PerUserRefresher: TokenRefresher {
    private let counts = Locked<[String: Int]>([:])
    let time: ManualTime

    init(time: ManualTime) { self.time = time }

    func refresh(_ credentials: Credentials) async throws -> Credentials {
        let user = String(credentials.accessToken.split(separator: ":")[0])
        let count = counts.withLock { counts -> Int in
            counts[user, default: 0] += 1
            return counts[user, default: 0]
        }
        await Task.yield()  // let other callers pile up behind the gate
        var next = credentials
        next.accessToken = "\(user):\(count)"
        next.refreshToken = "refresh-\(user)-\(count)"
        next.expiresAt = time.now.addingTimeInterval(3600)
        next.source = .refresh
        return next
    }

    var all: [String: Int] { counts.withLock { $0 } }
}

struct RegistryScaleTests {
    @Test func tenThousandUsersRefreshConcurrentlyWithOneRefreshPerUserPerExpiry() async throws {
        let users = 10_000
        let callersPerUser = 3
        let time = ManualTime()
        let refresher = PerUserRefresher(time: time)
        let registry = UserSessionRegistry(
            store: InMemoryTokenStore(), refresher: refresher, configuration: .init(clock: time.clock))
        let controllers = try await withThrowingTaskGroup(of: UserSessionController.self) { group in
            for index in 0..<users {
                group.addTask {
                    let credentials = Credentials(
                        accessToken: "u\(index):0", refreshToken: "refresh-u\(index)-0",
                        expiresAt: time.now.addingTimeInterval(3600))
                    return try await registry.open(
                        UserSessionPrototype(userInfo: UserInfo(id: "u\(index)"), credentials: credentials))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(registry.count == users)

        for expiry in 1...2 {
            time.advance(by: 3600)  // every user's token is now expired
            try await withThrowingTaskGroup(of: Void.self) { group in
                for controller in controllers {
                    for _ in 0..<callersPerUser {
                        group.addTask {
                            let token = try await controller.accessToken()
                            #expect(token.hasSuffix(":\(expiry)"))
                        }
                    }
                }
                try await group.waitForAll()
            }
            let counts = refresher.all
            #expect(counts.count == users)
            #expect(counts.values.allSatisfy { $0 == expiry })
        }
        #expect(controllers.allSatisfy { $0.session.state == .opened })
        await registry.shutdown()
    }
}
