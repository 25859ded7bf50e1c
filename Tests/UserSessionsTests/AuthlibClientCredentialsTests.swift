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
/// (Fixtures/authlib_client_credentials.py), on a manual clock: one request per expiry, keys, a rejected client, backoff
/// after a server error, a restart over a stored token.
@Suite(.enabled(if: AuthlibTokenServer.isAvailable, "python3 with authlib and flask"))
struct AuthlibClientCredentialsTests {
    static let secret = "authlib-secret"
    static let read = ClientCredentialsTokenManager.Key(scopes: ["orders.read"])

    static func manager(
        _ server: AuthlibTokenServer, time: ManualTime, store: (any TokenStore)? = nil,
        authentication: OAuth2TokenRefresher.ClientAuthentication? = nil
    ) throws -> ClientCredentialsTokenManager {
        try ClientCredentialsTokenManager(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: authentication ?? .clientSecretBasic(id: "client", secret: secret),
            configuration: .init(clock: time.clock, store: store))
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

    @Test func aServerErrorBacksOffAndIsRetriedAfterTheDelay() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            try await server.configure(["mode": "error500"])
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(error?.code == .tokenRequestFailed)
            #expect(error?.failureClass == .transient)
            var stats = try await server.stats()
            #expect(stats.tokenRequests == 1)
            #expect(stats.clientCredentials == 0)
            // Within the backoff every caller gets the transient failure at once and nothing is sent.
            try await server.configure(["mode": "normal"])
            for _ in 0..<5 {
                let again = await #expect(throws: UserSessionError.self) {
                    try await tokens.accessToken(for: Self.read)
                }
                #expect(again?.failureClass == .transient)
            }
            time.advance(by: 0.49)  // the first delay is half of initialRetryDelay (1 s) plus jitter: 0.5-1 s
            await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            stats = try await server.stats()
            #expect(stats.tokenRequests == 1)
            #expect(stats.clientCredentials == 0)
            // After the delay one request is sent and Authlib's grant issues the token.
            time.advance(by: 0.52)
            let token = try await tokens.accessToken(for: Self.read)
            #expect(try await tokens.accessToken(for: Self.read) == token)
            stats = try await server.stats()
            #expect(stats.tokenRequests == 2)
            #expect(stats.clientCredentials == 1)
            #expect(stats.lastScope == "orders.read")
        }
    }

    @Test func aRestartWithAValidStoredTokenMakesNoRequest() async throws {
        try await AuthlibTokenServer.with(["--client-secret", Self.secret]) { server in
            let directory = FileManager.default.temporaryDirectory.appending(path: "authlib-cc-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let time = ManualTime()
            let before = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            let token = try await before.accessToken(for: Self.read)
            #expect(try await server.stats().clientCredentials == 1)
            // A new process: a new manager over the same directory, while the stored token is fresh.
            time.advance(by: 1800)
            let after = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            #expect(try await after.accessToken(for: Self.read) == token)
            var stats = try await server.stats()
            #expect(stats.tokenRequests == 1)
            #expect(stats.clientCredentials == 1)
            // Once the stored token is inside its lead time, Authlib's grant is asked once, and the next process
            // reads the renewed token from the directory.
            time.advance(by: 1800 - 30)
            let renewed = try await after.accessToken(for: Self.read)
            #expect(renewed != token)
            #expect(try await server.stats().clientCredentials == 2)
            let third = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            #expect(try await third.accessToken(for: Self.read) == renewed)
            stats = try await server.stats()
            #expect(stats.tokenRequests == 2)
            #expect(stats.clientCredentials == 2)
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
