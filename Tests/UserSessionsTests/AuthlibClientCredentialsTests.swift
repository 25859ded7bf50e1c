import Foundation
import Testing

@testable import UserSessions

/// Authlib's authorization server must run where CI runs the tests: a missing python module fails here instead of
/// skipping ``AuthlibClientCredentialsTests`` silently.
struct AuthlibRequirementTests {
    @Test func theAuthlibServerRunsWhereItIsRequired() {
        if AuthlibTokenServer.isRequired {
            #expect(
                AuthlibTokenServer.isAvailable, "python3 cannot import authlib and flask: pip install authlib flask")
        }
    }
}

/// `ClientCredentialsTokenManager` against Authlib's own client-credentials grant and client authentication
/// (Fixtures/authlib_client_credentials.py), on a manual clock: one request per expiry, keys, a rejected client.
@Suite(.enabled(if: AuthlibTokenServer.isAvailable, "python3 with authlib and flask"))
struct AuthlibClientCredentialsTests {
    static let secret = "authlib-secret"
    static let read = ClientCredentialsTokenManager.Key(scopes: ["orders.read"])

    static func manager(
        _ server: AuthlibTokenServer, time: ManualTime, authentication: OAuth2TokenRefresher.ClientAuthentication? = nil
    ) throws -> ClientCredentialsTokenManager {
        try ClientCredentialsTokenManager(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: authentication ?? .clientSecretBasic(id: "client", secret: secret),
            configuration: .init(clock: time.clock))
    }

    @Test func tenThousandCallersAtExpiryCauseExactlyOneTokenRequest() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            try await server.configure(["expires_in": 600])
            let first = try await tokens.accessToken(for: Self.read)
            #expect(try await server.stats().clientCredentials == 1)
            time.advance(by: 601)
            try await server.hold()
            let callers = 10_000
            // Every caller waits for the one request, which the server holds until all of them have arrived.
            let received = try await stampede(
                tokens, key: Self.read, callers: callers, heldRequests: { try await server.stats().heldRequests },
                release: { try await server.release() })
            #expect(received.count == callers)
            #expect(Set(received).count == 1)
            #expect(received.first != first)
            let stats = try await server.stats()
            #expect(stats.clientCredentials == 2)
            #expect(stats.tokenRequests == 2)
            #expect(stats.lastAuth == "basic")
        }
    }

    @Test func keysWithDifferentScopesNeverShareAToken() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            let read = try await tokens.accessToken(for: .init(scopes: ["orders.read"]))
            #expect(try await server.stats().lastScope == "orders.read")
            let write = try await tokens.accessToken(for: .init(scopes: ["orders.write"]))
            #expect(try await server.stats().lastScope == "orders.write")
            let both = try await tokens.accessToken(for: .init(scopes: ["orders.read", "orders.write"]))
            #expect(try await server.stats().lastScope == "orders.read orders.write")
            let none = try await tokens.accessToken()
            #expect(Set([read, write, both, none]).count == 4)
            #expect(try await tokens.accessToken(for: .init(scopes: ["orders.read"])) == read)
            #expect(try await tokens.accessToken(for: .init(scopes: ["orders.write"])) == write)
            #expect(try await server.stats().clientCredentials == 4)
        }
    }

    @Test func scopeOrderAndDuplicatesDoNotSplitTheCache() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            let first = try await tokens.accessToken(for: .init(scopes: Set(["b", "a"])))
            let second = try await tokens.accessToken(for: .init(scopes: Set(["a", "b", "a"])))
            let third = try await tokens.accessToken(for: .init(scopes: ["a", "b"]))
            #expect(first == second)
            #expect(second == third)
            let stats = try await server.stats()
            #expect(stats.clientCredentials == 1)
            #expect(stats.lastScope == "a b")
        }
    }

    @Test(arguments: ["basic", "post"])
    func invalidClientIsTerminalAndTyped(method: String) async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret, "--auth", method]) { server in
            let time = ManualTime()
            func authentication(_ secret: String) -> OAuth2TokenRefresher.ClientAuthentication {
                method == "post"
                    ? .clientSecretPost(id: "client", secret: secret) : .clientSecretBasic(id: "client", secret: secret)
            }
            let tokens = try Self.manager(server, time: time, authentication: authentication("wrong-secret"))
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(error?.code == .clientRejected)
            #expect(error?.failureClass == .terminal)
            #expect(error.map { "\($0)" }?.contains("wrong-secret") == false)
            #expect(try await server.stats().invalidClient == 1)
            // Terminal: however long it waits, nothing is sent again until the client is reconfigured.
            time.advance(by: 7200)
            let again = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(again?.code == .clientRejected)
            #expect(try await server.stats().tokenRequests == 1)
            try tokens.reconfigure(authentication(Self.secret))
            _ = try await tokens.accessToken(for: Self.read)
            let stats = try await server.stats()
            #expect(stats.tokenRequests == 2)
            #expect(stats.clientCredentials == 1)
            #expect(stats.lastAuth == method)
        }
    }

    @Test func aUsersTokenIsExchangedOncePerAudienceByTheAuthlibGrant() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            // The user's session holds an access token the server issued; it is never refreshed here.
            let refresher = try OAuth2TokenRefresher(
                tokenEndpoint: server.tokenEndpoint,
                clientAuthentication: .clientSecretBasic(id: "client", secret: Self.secret), clock: time.clock)
            var configuration = UserSessionController.Configuration(clock: time.clock, revokesOnSignOut: false)
            configuration.observers = [tokens.signOutObserver]
            let registry = UserSessionRegistry(
                store: InMemoryTokenStore(), refresher: refresher, configuration: configuration)
            let credentials = Credentials(
                accessToken: try await server.issueUserToken(), refreshToken: "unused",
                expiresAt: time.now.addingTimeInterval(3600))
            let alice = try await registry.open(
                UserSessionPrototype(userInfo: UserInfo(id: "alice"), credentials: credentials))
            let exchanged = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<100 {
                    group.addTask { try await tokens.exchangedToken(for: alice, audience: "https://billing.test") }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(exchanged.count == 1)
            var stats = try await server.stats()
            #expect(stats.tokenExchanges == 1)
            #expect(stats.lastAudience == "https://billing.test")
            #expect(try await tokens.accessToken() != exchanged.first)
            // A subject token the server no longer honours: Authlib's grant answers invalid_grant, a typed failure.
            try await server.expireAll()
            let error = await #expect(throws: UserSessionError.self) {
                try await tokens.exchangedToken(for: alice, audience: "https://shipping.test")
            }
            #expect(error?.code == .tokenRequestFailed)
            stats = try await server.stats()
            #expect(stats.tokenExchanges == 1)
            await registry.shutdown()
        }
    }
}
