import Foundation
import Testing

@testable import UserSessions

/// A `UserSessionController` refreshing through `OAuth2TokenRefresher` against a real token endpoint that rotates
/// refresh tokens and revokes a whole family when one is reused.
struct RefreshOAuthIntegrationTests {
    static let secret = "integration-secret"

    static func makeController(
        _ server: OAuthFixtureServer, time: ManualTime, store: any TokenStore = InMemoryTokenStore(),
        tokenEndpoint: URL? = nil
    ) async throws -> UserSessionController {
        let refresher = try OAuth2TokenRefresher(
            tokenEndpoint: tokenEndpoint ?? server.tokenEndpoint,
            clientAuthentication: .clientSecretBasic(id: "client", secret: secret), clock: time.clock)
        let controller = UserSessionController(
            store: store, refresher: refresher, configuration: .init(clock: time.clock))
        let (refreshToken, accessToken) = try await server.issue()
        let credentials = Credentials(
            accessToken: accessToken, refreshToken: refreshToken, expiresAt: time.now.addingTimeInterval(3600))
        _ = try await controller.open(UserSessionPrototype(userInfo: UserInfo(id: "alice"), credentials: credentials))
        return controller
    }

    @Test func thousandConcurrentCallersAcrossFiveExpiriesCauseFiveTokenRequests() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let store = InMemoryTokenStore()
            let controller = try await Self.makeController(server, time: time, store: store)
            for round in 1...5 {
                time.advance(by: 3601)
                let tokens = try await withThrowingTaskGroup(of: String.self) { group in
                    for _ in 0..<1_000 { group.addTask { try await controller.accessToken() } }
                    return try await group.reduce(into: Set<String>()) { $0.insert($1) }
                }
                #expect(tokens.count == 1)
                #expect(try await server.stats().tokenRequests == round)
                #expect(try await store.load(identifier: "alice")?.credentials?.accessToken == tokens.first)
            }
            let stats = try await server.stats()
            #expect(stats.tokenRequests == 5)
            #expect(stats.invalidGrant == 0)
            #expect(controller.session.state == .opened)
            #expect(try await controller.accessToken() == controller.credentials?.accessToken)
        }
    }

    @Test func serverSideRevocationMakesTheNextRefreshTerminal() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let controller = try await Self.makeController(server, time: time)
            let events = controller.events(bufferSize: 1_000)
            try await server.revokeAll()
            time.advance(by: 3601)
            let error = await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
            #expect(error?.failureClass == .terminal)
            // Revoked credentials are never sent again (the controller may already have closed the session).
            let again = await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
            #expect(again?.failureClass == .terminal || again?.code == .sessionNotOpen)
            #expect(try await server.stats().tokenRequests == 1)
            var kinds: [UserSessionEvent.Kind] = []
            for await event in events {
                kinds.append(event.kind)
                if event.kind == .refreshFailed(.terminal) { break }
            }
            #expect(kinds.suffix(2) == [.refreshStarted, .refreshFailed(.terminal)])
            // The session's own handling (invalid, services stopped) is in RefreshLifecycleIntegrationTests.
        }
    }

    @Test(arguments: [["mode": "error500"], ["mode": "garbage"]])
    func serverFailuresAreTransientAndTheSessionRecovers(settings: [String: String]) async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let controller = try await Self.makeController(server, time: time)
            try await server.configure(settings)
            time.advance(by: 3601)
            let error = await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
            #expect(error?.failureClass == .transient)
            #expect(controller.session.state == .opened)
            try await server.configure(["mode": "normal"])
            time.advance(by: 1)  // past the retry backoff of the expired token
            _ = try await controller.accessToken()
            let stats = try await server.stats()
            #expect(stats.tokenRequests == 2)
            #expect(stats.refreshes == 1)
        }
    }

    @Test func invalidClientIsMisconfigurationAndNoSecretLeaksIntoEventsOrErrors() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let controller = try await Self.makeController(server, time: time)
            let events = controller.events(bufferSize: 1_000)
            let issued = try #require(controller.credentials)
            // One good refresh, then a client the server no longer accepts.
            time.advance(by: 3601)
            _ = try await controller.accessToken()
            let refreshed = try #require(controller.credentials)
            try await server.configure(["mode": "invalid_client"])
            time.advance(by: 3601)
            let error = try #require(
                await #expect(throws: UserSessionError.self) { try await controller.accessToken() })
            #expect(error.failureClass == .misconfiguration)
            #expect(controller.session.state == .opened)
            await controller.shutdown()
            var renderings = ["\(error)", String(reflecting: error)]
            var dumped = ""
            dump(error, to: &dumped)
            renderings.append(dumped)
            for await event in events {
                renderings += ["\(event)", String(reflecting: event)]
            }
            #expect(renderings.contains { $0.contains("credentialsRefreshed") })
            #expect(renderings.contains { $0.contains("refreshFailed(misconfiguration)") })
            let secrets = [
                Self.secret, issued.accessToken, issued.refreshToken ?? "-", refreshed.accessToken,
                refreshed.refreshToken ?? "-",
            ]
            for rendering in renderings {
                for secret in secrets { #expect(!rendering.contains(secret), "\(rendering)") }
            }
        }
    }

    @Test func refusedConnectionIsTransient() async throws {
        let time = ManualTime()
        // The session's tokens come from the fixture; its refreshes go to a port that refuses every connection.
        let refusing = try RefusingLoopbackPort()
        defer { withExtendedLifetime(refusing) {} }
        let server = try await OAuthFixtureServer.start(["--client-secret", Self.secret])
        let controller = try await Self.makeController(server, time: time, tokenEndpoint: refusing.url("/token"))
        await server.stop()
        time.advance(by: 3601)
        let error = await #expect(throws: UserSessionError.self) { try await controller.accessToken() }
        #expect(error?.failureClass == .transient)
        #expect(controller.session.state == .opened)
    }
}
