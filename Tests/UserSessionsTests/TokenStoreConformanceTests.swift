import Foundation
import Testing

@testable import UserSessions

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
