#if OpenIDConnect && PostgreSQL
import Foundation
import PostgresNIO
import Testing
import UserSessions
import UserSessionsOpenIDConnect
import UserSessionsTestSupport

/// The PostgreSQL state store against the server of `USER_SESSIONS_POSTGRES_URL` (Scripts/with-postgres.sh); skipped
/// without one, except where `USER_SESSIONS_REQUIRE_POSTGRES=1` asks for it.
@Suite(
    .enabled(
        if: ProcessInfo.processInfo.environment["USER_SESSIONS_POSTGRES_URL"] != nil
            || ProcessInfo.processInfo.environment["USER_SESSIONS_REQUIRE_POSTGRES"] == "1",
        "USER_SESSIONS_POSTGRES_URL is not set"))
struct PostgresStateStoreTests {
    private func withClient(_ body: (PostgresClient) async throws -> Void) async throws {
        try await PostgresTestClient.withClient { client in try await body(client) }
    }

    @Test func thePostgresStoreConforms() async throws {
        try await withClient { client in
            let namespace = "t" + UUID().uuidString.lowercased().prefix(12)
            try await StateStoreConformance.check(
                try PostgresOpenIDConnectStateStore(
                    client: client, namespace: String(namespace), operationTimeout: PostgresTestClient.operationTimeout)
            )
        }
    }

    @Test func twoInstancesShareOnePendingSignIn() async throws {
        try await withClient { client in
            let namespace = String("t" + UUID().uuidString.lowercased().prefix(12))
            let first = try PostgresOpenIDConnectStateStore(
                client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
            let second = try PostgresOpenIDConnectStateStore(
                client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
            let other = try PostgresOpenIDConnectStateStore(
                client: client, namespace: namespace + "x", operationTimeout: PostgresTestClient.operationTimeout)
            let now = Date()
            try await first.insert(StateStoreConformance.pending("shared", now: now), limit: 5, now: now)
            #expect(try await other.take(state: "shared", now: now) == nil, "namespaces are separate")
            #expect(try await second.take(state: "shared", now: now)?.nonce == "n-shared")
            #expect(try await first.take(state: "shared", now: now) == nil)
        }
    }

    @Test(.enabled(if: OpenIDProviderFixture.isAvailable, "python3 with authlib and flask"))
    func aSignInStartedOnOneInstanceCompletesAndSignsOutOnAnother() async throws {
        try await withClient { client in
            let namespace = String("t" + UUID().uuidString.lowercased().prefix(12))
            try await OpenIDProviderFixture.with { provider in
                let first = try provider.client(
                    stateStore: try PostgresOpenIDConnectStateStore(
                        client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout),
                    configure: FleetKeys.inStateStore)
                let second = try provider.client(
                    stateStore: try PostgresOpenIDConnectStateStore(
                        client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout),
                    configure: FleetKeys.inStateStore)
                let query = try await provider.callback(for: first)
                let signIn = try await second.completeSignIn(query)
                await expectRefusal(.stateUnknown) { _ = try await first.completeSignIn(query) }
                try await withRegistry { registry in
                    _ = try await registry.open(signIn.prototype)
                    let token = try await provider.logoutToken(["sid": try #require(signIn.claims.sessionID)])
                    #expect(try await first.handleBackChannelLogout(logoutToken: token, registry: registry).count == 1)
                    #expect(try await registry.storedIdentifiers().isEmpty)
                    await expectRefusal(.logoutTokenReplayed) {
                        try await second.handleBackChannelLogout(logoutToken: token, registry: registry)
                    }
                }
            }
        }
    }

    @Test func aBadNamespaceIsRefused() async throws {
        try await withClient { client in
            #expect(throws: OpenIDConnectError.self) {
                try PostgresOpenIDConnectStateStore(client: client, namespace: "Robert'); DROP TABLE")
            }
        }
    }
}
#endif
