import Foundation
import Testing

@testable import UserSessions

/// Sign-out revokes at the authorization server (RFC 7009): `closeAndClear()` and the registry's
/// `closeAndClear(identifier:)` against the fixture server's `/revoke`, checked through its `/introspect`.
struct SignOutRevocationTests {
    static let secret = "revocation-secret"

    static func refresher(_ server: OAuthFixtureServer, revocation: Bool = true) throws -> OAuth2TokenRefresher {
        try OAuth2TokenRefresher(
            tokenEndpoint: server.tokenEndpoint, revocationEndpoint: revocation ? server.revocationEndpoint : nil,
            clientAuthentication: .clientSecretBasic(id: "client", secret: secret))
    }

    /// A configuration whose revocation deadline is far away. These tests read how the fixture answered, which
    /// must arrive before the deadline: on a loaded machine the default 5 s was sometimes too short, and the event
    /// then said transient (timed out) instead of what the server answered. The deadline's own behaviour is tested
    /// with a manual clock.
    static var patient: UserSessionController.Configuration {
        var configuration = UserSessionController.Configuration()
        configuration.revocationTimeout = .seconds(60)
        return configuration
    }

    static func with<R>(_ body: (OAuthFixtureServer) async throws -> R) async throws -> R {
        try await OAuthFixtureServer.with(["--client-secret", secret], body)
    }

    /// A session of `identifier` with a fresh token family of `server`.
    static func prototype(
        _ server: OAuthFixtureServer, _ identifier: String = "alice", refreshable: Bool = true
    ) async throws -> (UserSessionPrototype, refreshToken: String, accessToken: String) {
        let (refreshToken, accessToken) = try await server.issue()
        let credentials = Credentials(
            accessToken: accessToken, refreshToken: refreshable ? refreshToken : nil,
            expiresAt: Date().addingTimeInterval(3600))
        return (
            UserSessionPrototype(userInfo: UserInfo(id: identifier), credentials: credentials), refreshToken,
            accessToken
        )
    }

    /// Shuts `controller` down and waits until `probe` got every event it emitted.
    static func finish(_ controller: UserSessionController, _ probe: EventProbe) async {
        await controller.shutdown()
        await probe.waitUntilFinished()
    }

    static func isRevocationFailure(_ kind: UserSessionEvent.Kind) -> Bool {
        if case .revocationFailed = kind { return true }
        return false
    }

    /// Every rendering of `events` (descriptions, details, dumps) contains none of `secrets`.
    static func expectNoSecrets(in events: [UserSessionEvent], _ secrets: [String]) {
        for event in events {
            SecretsTests.expectNoSecrets(in: event, "event \(event.kind)", also: secrets)
        }
    }

    // MARK: - The controller

    @Test func closeAndClearRevokesTheRefreshTokenBeforeRemovingItLocally() async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            let controller = UserSessionController(
                store: store, refresher: try Self.refresher(server), configuration: Self.patient)
            let probe = EventProbe(controller)
            let (prototype, refreshToken, accessToken) = try await Self.prototype(server)
            _ = try await controller.open(prototype)
            #expect(try await server.isActive(refreshToken))

            try await controller.closeAndClear()

            #expect(try await server.isActive(refreshToken) == false)
            #expect(try await server.isActive(accessToken) == false)
            let stats = try await server.stats()
            #expect(stats.revocations == 1)
            #expect(stats.lastTokenTypeHint == "refresh_token")
            #expect(try await store.load(identifier: "alice") == nil)
            await Self.finish(controller, probe)
            #expect(probe.kinds == [.opened, .closed(.cleared)])
        }
    }

    @Test func withoutARefreshTokenTheAccessTokenIsRevoked() async throws {
        try await Self.with { server in
            let controller = UserSessionController(
                store: InMemoryTokenStore(), refresher: try Self.refresher(server), configuration: Self.patient)
            let (prototype, refreshToken, accessToken) = try await Self.prototype(server, refreshable: false)
            _ = try await controller.open(prototype)
            try await controller.closeAndClear()
            #expect(try await server.isActive(accessToken) == false)
            #expect(try await server.stats().lastTokenTypeHint == "access_token")
            // Only that access token was sent: its family's refresh token was never this session's.
            #expect(try await server.isActive(refreshToken))
            await controller.shutdown()
        }
    }

    @Test(arguments: [false, true])
    func revocationOffOrNoEndpointLeavesTheTokenActiveAndStillSignsOut(hasEndpoint: Bool) async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            var configuration = Self.patient
            // With an endpoint, revocation is turned off; without one, it is on but the refresher cannot revoke.
            configuration.revokesOnSignOut = !hasEndpoint
            let refresher = try Self.refresher(server, revocation: hasEndpoint)
            #expect(refresher.canRevoke == hasEndpoint)
            let controller = UserSessionController(store: store, refresher: refresher, configuration: configuration)
            let probe = EventProbe(controller)
            let (prototype, refreshToken, _) = try await Self.prototype(server)
            _ = try await controller.open(prototype)

            try await controller.closeAndClear()

            #expect(try await server.isActive(refreshToken))
            #expect(try await server.stats().revocations == 0)
            #expect(try await store.load(identifier: "alice") == nil)
            await Self.finish(controller, probe)
            #expect(probe.kinds == [.opened, .closed(.cleared)])
        }
    }

    @Test func aClosedSessionAndAStoredUserAfterARestartAreRevokedFromTheStore() async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            let refresher = try Self.refresher(server)

            // Closed first, then cleared: the credentials are read back from the store.
            let first = UserSessionController(store: store, refresher: refresher, configuration: Self.patient)
            let (alice, aliceToken, _) = try await Self.prototype(server, "alice")
            _ = try await first.open(alice)
            await first.close()
            try await first.closeAndClear()
            #expect(try await server.isActive(aliceToken) == false)
            #expect(try await store.load(identifier: "alice") == nil)
            await first.shutdown()

            // Right after a "launch": a new controller signs the persisted user out without restoring.
            let before = UserSessionController(store: store, refresher: refresher, configuration: Self.patient)
            let (bob, bobToken, _) = try await Self.prototype(server, "bob")
            _ = try await before.open(bob)
            await before.shutdown()
            let relaunched = UserSessionController(store: store, refresher: refresher, configuration: Self.patient)
            try await relaunched.closeAndClear()
            #expect(try await server.isActive(bobToken) == false)
            #expect(try await store.load(identifier: "bob") == nil)
            #expect(try await store.loadCurrentIdentifier() == nil)
            #expect(try await server.stats().revocations == 2)
            await relaunched.shutdown()
        }
    }

    @Test func aHangingEndpointIsCutOffAtTheBoundAndTheSignOutGoesAhead() async throws {
        try await Self.with { server in
            let time = ManualTime()
            let store = InMemoryTokenStore()
            let configuration = UserSessionController.Configuration(clock: time.clock, revocationTimeout: .seconds(5))
            let controller = UserSessionController(
                store: store, refresher: try Self.refresher(server), configuration: configuration)
            let probe = EventProbe(controller)
            let (prototype, refreshToken, accessToken) = try await Self.prototype(server)
            _ = try await controller.open(prototype)
            // Every later /token and /revoke request is held for a minute before it is answered.
            try await server.configure(["delay": 60])

            let signOut = Task { try await controller.closeAndClear() }
            // The revocation's deadline is the only timer on the manual clock.
            await time.sleeps.wait(for: 1)
            // Revocation comes before the removal: the credentials are still stored while it waits.
            #expect(try await store.load(identifier: "alice")?.credentials?.refreshToken == refreshToken)
            time.advance(by: 4.9)
            #expect(try await store.load(identifier: "alice") != nil)
            time.advance(by: 0.1)
            try await signOut.value

            #expect(try await store.load(identifier: "alice") == nil)
            await Self.finish(controller, probe)
            #expect(probe.kinds == [.opened, .closed(.cleared), .revocationFailed(.transient)])
            let failure = try #require(probe.events.last)
            #expect(failure.session.identifier == "alice")
            #expect(failure.session.state == .closed)
            #expect(failure.detail?.contains("\(Duration.seconds(5))") == true)
            Self.expectNoSecrets(in: probe.events, [refreshToken, accessToken, Self.secret])
            // The server never answered, so the token stays valid there.
            #expect(try await server.isActive(refreshToken))
        }
    }

    @Test func cancellingTheCallerCutsTheRevocationShortWithoutUndoingTheSignOut() async throws {
        try await Self.with { server in
            let time = ManualTime()
            let store = InMemoryTokenStore()
            let controller = UserSessionController(
                store: store, refresher: try Self.refresher(server), configuration: .init(clock: time.clock))
            let probe = EventProbe(controller)
            let (prototype, refreshToken, _) = try await Self.prototype(server)
            _ = try await controller.open(prototype)
            try await server.configure(["delay": 60])

            let signOut = Task { try await controller.closeAndClear() }
            await time.sleeps.wait(for: 1)
            signOut.cancel()
            try await signOut.value

            #expect(try await store.load(identifier: "alice") == nil)
            await Self.finish(controller, probe)
            #expect(probe.kinds == [.opened, .closed(.cleared), .revocationFailed(.cancelled)])
            #expect(try await server.isActive(refreshToken))
        }
    }

    @Test(arguments: ExpectedFailure.fixtureAnswers)
    func anErrorAnswerIsReportedWithItsClassAndTheSignOutGoesAhead(
        settings: [String: any Sendable], expected: RefreshFailureClass
    ) async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            let controller = UserSessionController(
                store: store, refresher: try Self.refresher(server), configuration: Self.patient)
            let probe = EventProbe(controller)
            let (prototype, refreshToken, accessToken) = try await Self.prototype(server)
            _ = try await controller.open(prototype)
            try await server.configure(settings)

            try await controller.closeAndClear()

            #expect(try await store.load(identifier: "alice") == nil)
            #expect(try await store.loadCurrentIdentifier() == nil)
            #expect(controller.session.state == .closed)
            await Self.finish(controller, probe)
            #expect(probe.kinds == [.opened, .closed(.cleared), .revocationFailed(expected)])
            #expect(probe.events.last?.detail?.isEmpty == false)
            Self.expectNoSecrets(in: probe.events, [refreshToken, accessToken, Self.secret])
            #expect(try await server.isActive(refreshToken))
            // The user stays signed out: a restart restores nothing.
            #expect(try await UserSessionController(store: store).restore() == nil)
        }
    }

    @Test func aRefresherThatPutsTheTokenInItsErrorNeverGetsItIntoTheEvent() async throws {
        let token = SecretsTests.refreshToken
        for error in [
            UserSessionError(.revocationFailed, "rejected \(token) for good", failureClass: .misconfiguration),
            SecretsTests.LeakyError(token: token),
        ] as [any Error] {
            let refresher = LeakyRevoker(error: error)
            let controller = UserSessionController(store: InMemoryTokenStore(), refresher: refresher)
            let probe = EventProbe(controller)
            _ = try await controller.open(SecretsTests.prototype)
            try await controller.closeAndClear()
            #expect(refresher.revoked == [token])
            await Self.finish(controller, probe)
            #expect(probe.kinds.contains(where: Self.isRevocationFailure))
            let detail = probe.events.last?.detail ?? ""
            #expect(detail.contains(error is UserSessionError ? "rejected <redacted> for good" : "LeakyError"))
            Self.expectNoSecrets(in: probe.events, [])
        }
    }

    // MARK: - The registry

    @Test func theRegistryRevokesForAHeldControllerAndForAStoredUserWithoutOne() async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            let registry = UserSessionRegistry(
                store: store, refresher: try Self.refresher(server), configuration: Self.patient)
            let (alice, aliceToken, _) = try await Self.prototype(server, "alice")
            _ = try await registry.open(alice)
            let (bob, bobToken, _) = try await Self.prototype(server, "bob")
            try await store.save(StoredSession(userInfo: bob.userInfo, credentials: bob.credentials), identifier: "bob")
            #expect(registry.existingController(for: "bob") == nil)

            try await registry.closeAndClear(identifier: "alice")
            try await registry.closeAndClear(identifier: "bob")

            #expect(try await server.isActive(aliceToken) == false)
            #expect(try await server.isActive(bobToken) == false)
            #expect(try await store.storedIdentifiers().isEmpty)
            // Clearing a user with nothing stored sends nothing.
            try await registry.closeAndClear(identifier: "carol")
            #expect(try await server.stats().revocations == 2)
            await registry.shutdown()
        }
    }

    @Test func aFailedRevocationForAStoredUserIsARegistryEventAndTheDataIsGone() async throws {
        try await Self.with { server in
            let store = InMemoryTokenStore()
            let observer = RecordingObserver()
            var configuration = Self.patient
            configuration.observers = [observer]
            let registry = UserSessionRegistry(
                store: store, refresher: try Self.refresher(server), configuration: configuration)
            let events = registry.events()
            let (bob, bobToken, bobAccess) = try await Self.prototype(server, "bob")
            try await store.save(StoredSession(userInfo: bob.userInfo, credentials: bob.credentials), identifier: "bob")
            try await server.configure(["mode": "invalid_client"])

            try await registry.closeAndClear(identifier: "bob")

            #expect(try await store.load(identifier: "bob") == nil)
            var iterator = events.makeAsyncIterator()
            let event = try #require(await iterator.next())
            #expect(event.identifier == "bob")
            #expect(event.event.kind == .revocationFailed(.misconfiguration))
            #expect(event.event.session.identifier == "bob")
            #expect(observer.kinds == [.revocationFailed(.misconfiguration)])
            Self.expectNoSecrets(in: [event.event], [bobToken, bobAccess, Self.secret])
            SecretsTests.expectNoSecrets(in: event, "registry event", also: [bobToken, bobAccess, Self.secret])
            #expect(try await server.isActive(bobToken))
            await registry.shutdown()
        }
    }
}

/// A refresher that can revoke, and whose revocation fails with `error` (which may print the token).
final class LeakyRevoker: TokenRefresher {
    let error: any Error
    private let tokens = Locked<[String]>([])

    init(error: any Error) {
        self.error = error
    }

    /// The refresh tokens it was asked to revoke.
    var revoked: [String] { tokens.withLock { $0 } }

    var canRevoke: Bool { true }

    func refresh(_ credentials: Credentials) async throws -> Credentials { credentials }

    func revoke(_ credentials: Credentials) async throws {
        tokens.withLock { $0.append(credentials.refreshToken ?? credentials.accessToken) }
        throw error
    }
}

/// An observer that records the kinds of the events it sees.
final class RecordingObserver: UserSessionObserver {
    private let seen = Locked<[UserSessionEvent.Kind]>([])

    var kinds: [UserSessionEvent.Kind] { seen.withLock { $0 } }

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {
        seen.withLock { $0.append(event.kind) }
    }
}
