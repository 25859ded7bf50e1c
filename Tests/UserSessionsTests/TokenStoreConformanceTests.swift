import Foundation
import Testing

@testable import UserSessions

/// Checks every `TokenStore` must pass. Copy them for a store of your own (see "Implementing a TokenStore").
enum TokenStoreConformance {
    static let nastyToken = "a&b=c+d%e f\u{00e9}\u{1F510}/?#"

    static func sample(_ id: String, token: String = nastyToken) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: id, email: "\(id)@example.com", name: "User \(id)"),
            credentials: Credentials(
                accessToken: token, refreshToken: "r-" + token,
                expiresAt: Date(timeIntervalSince1970: 1_900_000_000.5),
                lastRefreshedAt: Date(timeIntervalSince1970: 1_800_000_000.25), source: .refresh,
                grantedPermissions: ["read", "write"], declinedPermissions: ["admin"]))
    }

    /// Round trips, replacement, removal, the current identifier and listing.
    static func check(_ store: some TokenStore, lists: Bool = true) async throws {
        #expect(try await store.load(identifier: "alice") == nil)
        try await store.save(sample("alice"), identifier: "alice")
        let loaded = try #require(try await store.load(identifier: "alice"))
        #expect(loaded.userInfo == sample("alice").userInfo)
        #expect(loaded.credentials?.accessToken == nastyToken)
        #expect(loaded.credentials?.refreshToken == "r-" + nastyToken)
        #expect(loaded.credentials?.grantedPermissions == ["read", "write"])
        #expect(loaded.credentials?.declinedPermissions == ["admin"])
        let expiry = try #require(loaded.credentials?.expiresAt)
        #expect(abs(expiry.timeIntervalSince1970 - 1_900_000_000.5) < 0.001)

        try await store.save(sample("alice", token: "second"), identifier: "alice")
        #expect(try await store.load(identifier: "alice")?.credentials?.accessToken == "second")

        try await store.save(sample("bob"), identifier: "bob")
        if lists {
            #expect(try await store.storedIdentifiers().sorted() == ["alice", "bob"])
        }

        try await store.remove(identifier: "alice")
        #expect(try await store.load(identifier: "alice") == nil)
        try await store.remove(identifier: "alice")  // removing nothing is not an error
        #expect(try await store.load(identifier: "bob") != nil)

        #expect(try await store.loadCurrentIdentifier() == nil)
        try await store.saveCurrentIdentifier("bob")
        #expect(try await store.loadCurrentIdentifier() == "bob")
        try await store.saveCurrentIdentifier(nil)
        #expect(try await store.loadCurrentIdentifier() == nil)
    }
}

struct TokenStoreConformanceTests {
    @Test func inMemoryStorePassesTheConformanceChecks() async throws {
        try await TokenStoreConformance.check(InMemoryTokenStore())
    }

    @Test func fileStorePassesTheConformanceChecks() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("conformance-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await TokenStoreConformance.check(FileTokenStore(directory: directory))
    }

    @Test func remoteStorePassesTheConformanceChecksAgainstARealServer() async throws {
        try await FixtureServer.run(script: "token_cache_server.py") { server in
            // The remote protocol cannot list identifiers.
            try await TokenStoreConformance.check(RemoteTokenStore(endpoint: server.url("/token_cache")), lists: false)
        }
    }

    @Test func articleExampleStorePassesTheConformanceChecks() async throws {
        try await TokenStoreConformance.check(KeyValueTokenStore(client: InMemoryKeyValueClient()))
    }

    @Test func articleExampleStoreReportsCorruptionAndKeepsTheData() async throws {
        let client = InMemoryKeyValueClient()
        let store = KeyValueTokenStore(client: client)
        try await store.save(TokenStoreConformance.sample("carol"), identifier: "carol")
        let key = try #require(try await client.keys(prefix: "user-sessions/session/").first)
        client.corrupt(key)
        await #expect(throws: UserSessionError(.storeCorrupt, "")) {
            try await store.load(identifier: "carol")
        }
        #expect(try await client.get(key) != nil)
    }
}
