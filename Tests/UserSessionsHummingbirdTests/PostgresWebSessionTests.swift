#if Hummingbird && PostgreSQL
import Foundation
import Logging
import PostgresNIO
import Testing
import UserSessions
import UserSessionsHummingbird
import UserSessionsOpenIDConnect
import UserSessionsTestSupport
import UserSessionsPostgres

/// Browser records in PostgreSQL against the server of `USER_SESSIONS_POSTGRES_URL` (Scripts/with-postgres.sh);
/// skipped without one, except where `USER_SESSIONS_REQUIRE_POSTGRES=1` asks for it.
@Suite(
    .enabled(
        if: ProcessInfo.processInfo.environment["USER_SESSIONS_POSTGRES_URL"] != nil
            || ProcessInfo.processInfo.environment["USER_SESSIONS_REQUIRE_POSTGRES"] == "1",
        "USER_SESSIONS_POSTGRES_URL is not set"))
struct PostgresWebSessionTests {
    private func withClient(_ body: (PostgresClient, String) async throws -> Void) async throws {
        try await PostgresTestClient.withClient { client in
            try await body(client, String("w" + UUID().uuidString.lowercased().prefix(12)))
        }
    }

    private static func record(_ identifier: String, lastSeenAt: Date, absoluteExpiresAt: Date) -> WebSessionRecord {
        WebSessionRecord(
            identifier: identifier, subject: identifier, sessionID: nil, claims: ["sub": identifier],
            createdAt: lastSeenAt, lastSeenAt: lastSeenAt, absoluteExpiresAt: absoluteExpiresAt)
    }

    @Test func recordsAreKeptByTheCookiesHashAndRemovedByUserOrExpiry() async throws {
        try await withClient { client, namespace in
            let store = try PostgresWebSessionStore(
                client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
            let other = try PostgresWebSessionStore(
                client: client, namespace: namespace + "x", operationTimeout: PostgresTestClient.operationTimeout)
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let keys = (0..<3).compactMap { WebSessionKey(hash: String(repeating: "\($0)", count: 64)) }
            try #require(keys.count == 3)
            try await store.insert(Self.record("alice", lastSeenAt: now, absoluteExpiresAt: now + 3600), key: keys[0])
            try await store.insert(Self.record("alice", lastSeenAt: now, absoluteExpiresAt: now + 3600), key: keys[1])
            try await store.insert(
                Self.record("bob", lastSeenAt: now - 900, absoluteExpiresAt: now + 3600), key: keys[2])
            #expect(try await store.load(key: keys[0])?.identifier == "alice")
            #expect(try await other.load(key: keys[0]) == nil, "namespaces are separate")
            try await store.touch(key: keys[2], lastSeenAt: now - 100)
            #expect(try await store.load(key: keys[2])?.lastSeenAt == now - 100)
            #expect(try await store.removeExpired(now: now, idleTimeout: .seconds(600)) == 0)
            #expect(try await store.removeExpired(now: now + 550, idleTimeout: .seconds(600)) == 1, "bob idled")
            #expect(try await store.removeAll(identifier: "alice") == 2)
            #expect(try await store.load(key: keys[0]) == nil)
            #expect(try await store.load(key: keys[1]) == nil)
        }
    }

    @Test func aCorruptRowIsATypedError() async throws {
        try await withClient { client, namespace in
            let store = try PostgresWebSessionStore(
                client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
            let key = try #require(WebSessionKey(hash: String(repeating: "a", count: 64)))
            let now = Date()
            try await store.insert(Self.record("alice", lastSeenAt: now, absoluteExpiresAt: now + 60), key: key)
            let garbage = ByteBuffer(bytes: [0xFF, 0x00, 0x7B])
            try await client.query(
                "UPDATE user_sessions_web_sessions SET record = \(garbage) WHERE namespace = \(namespace)",
                logger: Logger(label: "tests", factory: { _ in SwiftLogNoOpLogHandler() }))
            await #expect(throws: WebSessionError(.storeCorrupt, "")) { try await store.load(key: key) }
            #expect(throws: WebSessionError.self) {
                try PostgresWebSessionStore(client: client, namespace: "Robert'); DROP TABLE")
            }
        }
    }

    // The shared deadline (PostgresOperationDeadline) is tested once, by the token store's
    // fault tests (a server that is down); a hung query here held a row lock that stalled every other suite's
    // table preparation past its deadline when the suites ran in parallel.
    @Test func aTimeoutThatIsNotPositiveIsRefused() async throws {
        try await withClient { client, namespace in
            #expect(throws: WebSessionError.self) {
                try PostgresWebSessionStore(client: client, namespace: namespace, operationTimeout: .zero)
            }
        }
    }

    @Test(.enabled(if: Provider.isAvailable, "python3 with authlib and flask"))
    func aBackChannelLogoutThroughOneInstanceEndsTheBrowsersSessionOnTheOther() async throws {
        try await withClient { client, namespace in
            try await Provider.with { provider in
                func instance() throws -> WebHarness {
                    try WebHarness(
                        openID: try provider.client(
                            stateStore: try PostgresOpenIDConnectStateStore(
                                client: client, namespace: namespace,
                                operationTimeout: PostgresTestClient.operationTimeout)),
                        tokenStore: try PostgresTokenStore(
                            client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout),
                        store: try PostgresWebSessionStore(
                            client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
                    )
                }
                let first = try instance()
                let second = try instance()
                try await first.run { firstClient in
                    try await second.run { secondClient in
                        let cookie = try await provider.signIn(through: firstClient).cookieValue("user_session")
                        var onFirst = firstClient
                        onFirst.cookie = cookie
                        var onSecond = secondClient
                        onSecond.cookie = cookie
                        #expect(try await onFirst.get("/auth/user").status == 200)
                        #expect(try await onSecond.get("/auth/user").status == 200, "the fleet shares the browser")
                        let receiver = try #require(
                            URL(string: firstClient.base.absoluteString + "/auth/backchannel-logout"))
                        #expect(try await provider.sendLogout(["sub": "248289761001"], to: receiver) == 200)
                        let refused = try await onSecond.get("/auth/user")
                        #expect(refused.status == 401, "the other instance refuses the cookie at its next request")
                        #expect(refused.setCookie?.contains("Max-Age=0") == true)
                        #expect(try await onFirst.get("/auth/user").status == 401)
                    }
                }
            }
        }
    }
}
#endif
