import Foundation
import Testing

@testable import UserSessions

/// `ClientCredentialsTokenManager` against a real token endpoint on 127.0.0.1 (Fixtures/oauth_server.py, its
/// client-credentials grant), on a manual clock: one request per expiry, keys, failure classes, persistence.
struct ClientCredentialsTests {
    static let secret = "cc-secret"

    static func manager(
        _ server: OAuthFixtureServer, time: ManualTime, store: (any TokenStore)? = nil,
        authentication: OAuth2TokenRefresher.ClientAuthentication? = nil, observers: [any UserSessionObserver] = []
    ) throws -> ClientCredentialsTokenManager {
        try ClientCredentialsTokenManager(
            tokenEndpoint: server.tokenEndpoint,
            clientAuthentication: authentication ?? .clientSecretBasic(id: "client", secret: secret),
            configuration: .init(clock: time.clock, store: store, observers: observers))
    }

    static let read = ClientCredentialsTokenManager.Key(scopes: ["orders.read"])

    @Test func tenThousandCallersAtExpiryCauseExactlyOneTokenRequest() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            let first = try await tokens.accessToken(for: Self.read)
            #expect(try await server.stats().clientCredentials == 1)
            time.advance(by: 3601)
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
        }
    }

    @Test func keysWithDifferentScopesNeverShareAToken() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            let read = try await tokens.accessToken(for: .init(scopes: ["orders.read"]))
            #expect(try await server.stats().lastScope == "orders.read")
            let write = try await tokens.accessToken(for: .init(scopes: ["orders.write"]))
            #expect(try await server.stats().lastScope == "orders.write")
            let both = try await tokens.accessToken(for: .init(scopes: ["orders.read", "orders.write"]))
            let none = try await tokens.accessToken()
            #expect(Set([read, write, both, none]).count == 4)
            #expect(try await tokens.accessToken(for: .init(scopes: ["orders.read"])) == read)
            #expect(try await tokens.accessToken(for: .init(scopes: ["orders.write"])) == write)
            let resource = try await tokens.accessToken(
                for: .init(scopes: ["orders.read"], resources: ["https://orders.example.com/"]))
            #expect(resource != read)
            #expect(try await server.stats().lastResources == ["https://orders.example.com/"])
            #expect(try await server.stats().clientCredentials == 5)
        }
    }

    @Test func scopeOrderAndDuplicatesDoNotSplitTheCache() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            let first = try await tokens.accessToken(
                for: .init(scopes: Set(["b", "a"]), resources: ["https://x.test/"]))
            let second = try await tokens.accessToken(
                for: .init(scopes: Set(["a", "b", "a"]), resources: Set(["https://x.test/", "https://x.test/"])))
            #expect(first == second)
            let stats = try await server.stats()
            #expect(stats.clientCredentials == 1)
            // The scope is sent sorted, so two processes send the same request for one key.
            #expect(stats.lastScope == "a b")
        }
    }

    @Test func aServerErrorBacksOffAndIsRetriedAfterTheDelay() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            try await server.configure(["mode": "error500"])
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(error?.code == .tokenRequestFailed)
            #expect(error?.failureClass == .transient)
            // Within the backoff the last failure comes back at once; nothing is sent.
            for _ in 0..<5 {
                let again = await #expect(throws: UserSessionError.self) {
                    try await tokens.accessToken(for: Self.read)
                }
                #expect(again?.failureClass == .transient)
            }
            #expect(try await server.stats().tokenRequests == 1)
            try await server.configure(["mode": "normal"])
            time.advance(by: 1.01)  // the first delay is at most initialRetryDelay (1 s)
            _ = try await tokens.accessToken(for: Self.read)
            #expect(try await server.stats().tokenRequests == 2)
        }
    }

    @Test func invalidClientIsTerminalForTheKeyAndTypedUntilReconfigured() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret, "--auth", "post"]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(
                server, time: time, authentication: .clientSecretPost(id: "client", secret: "wrong-secret"))
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(error?.code == .clientRejected)
            #expect(error?.failureClass == .terminal)
            #expect(error.map { "\($0)" }?.contains("wrong-secret") == false)
            time.advance(by: 7200)
            let again = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: Self.read) }
            #expect(again?.code == .clientRejected)
            #expect(try await server.stats().tokenRequests == 1)
            #expect(throws: UserSessionError.self) {
                try tokens.reconfigure(.clientSecretPost(id: "another-client", secret: Self.secret))
            }
            try tokens.reconfigure(.clientSecretPost(id: "client", secret: Self.secret))
            _ = try await tokens.accessToken(for: Self.read)
            let stats = try await server.stats()
            #expect(stats.tokenRequests == 2)
            #expect(stats.lastAuth == "post")
        }
    }

    @Test func aMisconfiguredScopeIsReportedAndNotRetriedInALoop() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            let forbidden = ClientCredentialsTokenManager.Key(scopes: ["forbidden"])
            let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: forbidden) }
            #expect(error?.code == .tokenRequestFailed)
            #expect(error?.failureClass == .misconfiguration)
            for _ in 0..<10 { _ = try? await tokens.accessToken(for: forbidden) }
            #expect(try await server.stats().tokenRequests == 1)
            // Another key is not affected.
            _ = try await tokens.accessToken(for: Self.read)
            #expect(try await server.stats().tokenRequests == 2)
        }
    }

    @Test func aRestartWithAValidStoredTokenMakesNoRequest() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let directory = FileManager.default.temporaryDirectory.appending(path: "cc-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let time = ManualTime()
            let before = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            let token = try await before.accessToken(for: Self.read)
            #expect(try await server.stats().tokenRequests == 1)

            // A new process: a new manager on the same directory.
            time.advance(by: 1800)
            let after = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            #expect(try await after.accessToken(for: Self.read) == token)
            #expect(try await server.stats().tokenRequests == 1)
            // Once the stored token is inside its lead time, it is requested anew (once) and stored.
            time.advance(by: 1800 - 30)
            let renewed = try await after.accessToken(for: Self.read)
            #expect(renewed != token)
            #expect(try await server.stats().tokenRequests == 2)
            let third = try Self.manager(server, time: time, store: FileTokenStore(directory: directory))
            #expect(try await third.accessToken(for: Self.read) == renewed)
            #expect(try await server.stats().tokenRequests == 2)
        }
    }

    @Test func aStoreThatFailsToWriteIsReportedAndTheTokenIsStillServed() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let store = ScriptedTokenStore()
            store.failNextSaves(1)
            let probe = ClientTokenProbe()
            let tokens = try Self.manager(server, time: ManualTime(), store: store, observers: [probe])
            let token = try await tokens.accessToken(for: Self.read)
            #expect(try await tokens.accessToken(for: Self.read) == token)
            #expect(probe.events.map(\.kind) == [.persistenceFailed, .tokenIssued])
            #expect(probe.events.first?.detail?.contains("storeFailure") == true)
            #expect(store.saveCount == 0)
            #expect(try await server.stats().clientCredentials == 1)
        }
    }

    @Test func storedRecordsHaveSafeNamesAndAreAdoptedOnlyForTheirOwnKey() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let store = InMemoryTokenStore()
            let tokens = try Self.manager(server, time: ManualTime(), store: store)
            let hostile = ClientCredentialsTokenManager.Key(
                scopes: ["../../etc", "a'b;DROP", "x|s5:y"], resources: ["https://api.test/?q='--"])
            _ = try await tokens.accessToken(for: hostile)
            let identifiers = try await store.storedIdentifiers()
            #expect(identifiers.count == 1)
            let name = try #require(identifiers.first)
            #expect(name.hasPrefix("client-token-"))
            #expect(name.utf8.count == 13 + 32)
            #expect(name.dropFirst(13).allSatisfy { $0.isHexDigit && !$0.isUppercase })
            // A record under that name for another key (a collision, or a tampered store) is never adopted.
            var stored = try #require(try await store.load(identifier: name))
            stored.userInfo.attributes["key"] = "client-token-v1|another key"
            try await store.save(stored, identifier: name)
            let restarted = try Self.manager(server, time: ManualTime(), store: store)
            let token = try await restarted.accessToken(for: hostile)
            #expect(token != stored.credentials?.accessToken)
            #expect(try await server.stats().clientCredentials == 2)
        }
    }

    @Test func scopesAndResourcesThatCannotBeSentAreTypedErrorsAndNothingIsSent() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            let keys: [ClientCredentialsTokenManager.Key] = [
                .init(scopes: ["two words"]), .init(scopes: [""]), .init(scopes: ["quote\"d"]),
                .init(scopes: ["caf\u{E9}"]), .init(scopes: ["nul\u{0}"]), .init(resources: ["relative/path"]),
                .init(resources: ["https://api.test/#fragment"]), .init(resources: ["https://api.test/ space"]),
            ]
            for key in keys {
                let error = await #expect(throws: UserSessionError.self) { try await tokens.accessToken(for: key) }
                #expect(error?.code == .invalidTokenRequest)
            }
            #expect(try await server.stats().tokenRequests == 0)
        }
    }

    @Test func anOperationRefusedWithTheTokenIsReplayedOnceWithANewOne() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            struct Unauthorized: Error {}
            let used = Locked([String]())
            let result = try await tokens.withAccessToken(
                for: Self.read, isAuthenticationFailure: { $0 is Unauthorized }
            ) { token in
                let count = used.withLock {
                    $0.append(token); return $0.count
                }
                if count == 1 { throw Unauthorized() }
                return token
            }
            let tokensUsed = used.withLock { $0 }
            #expect(tokensUsed.count == 2)
            #expect(tokensUsed[0] != tokensUsed[1])
            #expect(result == tokensUsed[1])
            #expect(try await server.stats().clientCredentials == 2)
            // An operation that keeps failing is replayed once, and its error comes back.
            await #expect(throws: Unauthorized.self) {
                try await tokens.withAccessToken(for: Self.read, isAuthenticationFailure: { $0 is Unauthorized }) {
                    _ in throw Unauthorized()
                }
            }
            #expect(try await server.stats().clientCredentials == 3)
            // Other errors pass through without a request.
            struct Other: Error {}
            await #expect(throws: Other.self) {
                try await tokens.withAccessToken(for: Self.read, isAuthenticationFailure: { $0 is Unauthorized }) {
                    _ in throw Other()
                }
            }
            #expect(try await server.stats().clientCredentials == 3)
        }
    }

    @Test func aTokenInItsProactiveWindowIsServedWhileOneRequestRunsInTheBackground() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let tokens = try Self.manager(server, time: time)
            let old = try await tokens.accessToken(for: Self.read)
            // A 3600-s token: the proactive window is 300 s, the lead time 60 s.
            time.advance(by: 3600 - 200)
            try await server.hold()
            for _ in 0..<100 { #expect(try await tokens.accessToken(for: Self.read) == old) }
            while try await server.stats().heldRequests < 1 { await Task.yield() }
            try await server.release()
            var new = old
            while new == old { new = try await tokens.accessToken(for: Self.read) }
            #expect(try await server.stats().clientCredentials == 2)
        }
    }

    @Test func aCancelledCallerStopsWaitingAndTheTokenIsStillKept() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let tokens = try Self.manager(server, time: ManualTime())
            try await server.hold()
            let waiter = Task { try await tokens.accessToken(for: Self.read) }
            while tokens.waiterCount(Self.read) < 1 { await Task.yield() }
            waiter.cancel()
            await #expect(throws: CancellationError.self) { try await waiter.value }
            try await server.release()
            let token = try await tokens.accessToken(for: Self.read)
            #expect(token.hasPrefix("cc-"))
            #expect(try await server.stats().clientCredentials == 1)
        }
    }

    @Test func eventsNameTheKeyAndNeverTheToken() async throws {
        try await OAuthFixtureServer.with(["--client-secret", Self.secret]) { server in
            let time = ManualTime()
            let probe = ClientTokenProbe()
            let tokens = try Self.manager(server, time: time, observers: [probe])
            let token = try await tokens.accessToken(for: Self.read)
            try await server.configure(["mode": "error500"])
            time.advance(by: 3601)
            _ = try? await tokens.accessToken(for: Self.read)
            try await tokens.forget(Self.read)
            try await server.configure(["mode": "invalid_client"])
            time.advance(by: 100)
            _ = try? await tokens.accessToken(for: Self.read)
            let events = probe.events
            #expect(events.map(\.kind) == [.tokenIssued, .requestFailed(.transient), .forgotten, .clientRejected])
            #expect(events.allSatisfy { $0.scopes == ["orders.read"] && $0.clientID == "client" })
            #expect(events[0].expiresAt == time.now.addingTimeInterval(-3701 + 3600))
            for event in events {
                #expect(!"\(event)".contains(token))
                #expect(!"\(event)".contains(Self.secret))
            }
        }
    }
}

/// Collects the client-token events a manager shows its observers.
final class ClientTokenProbe: UserSessionObserver {
    private let collected = Locked([ClientTokenEvent]())

    func observe(_ event: UserSessionEvent, context: UserSessionEventContext) {}

    func observeClientToken(_ event: ClientTokenEvent) {
        collected.withLock { $0.append(event) }
    }

    var events: [ClientTokenEvent] { collected.withLock { $0 } }
}
