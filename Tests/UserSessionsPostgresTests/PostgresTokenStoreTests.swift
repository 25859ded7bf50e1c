#if PostgreSQL
import Foundation
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsTestSupport

/// Storage, revisions, hostile identifiers, schema and faults against a real PostgreSQL.
@Suite(.enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct PostgresTokenStoreTests {
    static func withStore<Value: Sendable>(
        schema: String, namespace: String = PostgresTestServer.uniqueNamespace(),
        _ body: (PostgresTokenStore) async throws -> Value
    ) async throws -> Value {
        try await PostgresTestServer.withClient(schema: schema) { client in
            try await body(
                PostgresTokenStore(
                    client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout))
        }
    }

    @Test func passesTheTokenStoreConformanceChecks() async throws {
        try await PostgresTestServer.withSchema { schema, _ in
            try await Self.withStore(schema: schema) { store in
                try await TokenStoreConformance.check(store)
            }
        }
    }

    @Test func namespacesKeepTheirSessionsAndCurrentIdentifiersApart() async throws {
        try await PostgresTestServer.withSchema { schema, _ in
            try await PostgresTestServer.withClient(schema: schema) { client in
                let first = try PostgresTokenStore(
                    client: client, namespace: "app-one", operationTimeout: PostgresTestClient.operationTimeout)
                let second = try PostgresTokenStore(
                    client: client, namespace: "app-two", operationTimeout: PostgresTestClient.operationTimeout)
                try await first.save(TokenStoreConformance.sample("alice"), identifier: "alice")
                try await first.saveCurrentIdentifier("alice")
                #expect(try await second.load(identifier: "alice") == nil)
                #expect(try await second.loadCurrentIdentifier() == nil)
                #expect(try await second.storedIdentifiers() == [])
                #expect(try await first.storedIdentifiers() == ["alice"])
            }
        }
    }

    @Test func namespacesOutsideTheAllowedCharactersAreRefused() async throws {
        try await PostgresTestServer.withClient(schema: nil) { client in
            for namespace in ["", "App", "a\"b", "a;b", String(repeating: "a", count: 41), "caf\u{E9}"] {
                #expect(throws: UserSessionError(.invalidConfiguration, "")) {
                    try PostgresTokenStore(
                        client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
                }
            }
        }
    }

    @Test func revisionsGrowAcrossSavesRemovalsAndNewSaves() async throws {
        try await PostgresTestServer.withSchema { schema, _ in
            try await Self.withStore(schema: schema) { store in
                let session = TokenStoreConformance.sample("alice")
                let first = try await store.save(session, identifier: "alice", expectedRevision: nil)
                #expect(try await store.loadRevised(identifier: "alice")?.revision == first)
                let second = try await store.save(session, identifier: "alice", expectedRevision: first)
                #expect(second > first)
                try await store.save(session, identifier: "alice")
                let third = try #require(try await store.loadRevised(identifier: "alice")?.revision)
                #expect(third > second)
                try await store.remove(identifier: "alice")
                #expect(try await store.loadRevised(identifier: "alice") == nil)
                let fourth = try await store.save(session, identifier: "alice", expectedRevision: nil)
                #expect(fourth > third, "a revision is never reused after a removal")
            }
        }
    }

    @Test func conditionalWritesConflictAndLeaveTheRowAsItWas() async throws {
        try await PostgresTestServer.withSchema { schema, _ in
            try await Self.withStore(schema: schema) { store in
                let original = TokenStoreConformance.sample("alice", token: "original")
                let revision = try await store.save(original, identifier: "alice", expectedRevision: nil)
                let other = TokenStoreConformance.sample("alice", token: "other")
                await #expect(throws: UserSessionError(.revisionConflict, "")) {
                    try await store.save(other, identifier: "alice", expectedRevision: nil)
                }
                await #expect(throws: UserSessionError(.revisionConflict, "")) {
                    try await store.save(other, identifier: "alice", expectedRevision: revision + 1)
                }
                await #expect(throws: UserSessionError(.revisionConflict, "")) {
                    try await store.save(other, identifier: "bob", expectedRevision: 1)
                }
                await #expect(throws: UserSessionError(.revisionConflict, "")) {
                    try await store.save(other, identifier: "alice", expectedRevision: UInt64.max)
                }
                let stored = try #require(try await store.loadRevised(identifier: "alice"))
                #expect(stored.revision == revision)
                #expect(stored.session.credentials?.accessToken == "original")
                #expect(try await store.load(identifier: "bob") == nil)
            }
        }
    }

    @Test func hostileIdentifiersAreBoundValuesComparedByBytes() async throws {
        let nfc = "caf\u{E9}"
        let nfd = "cafe\u{301}"
        let hostile = [
            "o'brien", "a\"b", "back\\slash", "'; DROP TABLE user_sessions_tokens; --", "$1", "%_*", "\u{1F510}",
            nfc, nfd, String(repeating: "x\u{E9}'", count: 3500),
        ]
        try await PostgresTestServer.withSchema { schema, _ in
            try await Self.withStore(schema: schema) { store in
                for (index, identifier) in hostile.enumerated() {
                    try await store.save(TokenStoreConformance.sample("user\(index)"), identifier: identifier)
                }
                for (index, identifier) in hostile.enumerated() {
                    #expect(try await store.load(identifier: identifier)?.userInfo.id == "user\(index)")
                }
                // Canonically equivalent identifiers stay two users.
                #expect(nfc == nfd)
                #expect(try await store.load(identifier: nfc)?.userInfo.id != store.load(identifier: nfd)?.userInfo.id)
                let listed = try await store.storedIdentifiers()
                #expect(listed.count == hostile.count)
                #expect(Set(listed.map { Array($0.utf8) }) == Set(hostile.map { Array($0.utf8) }))
                try await store.saveCurrentIdentifier(nfd)
                let current = try #require(try await store.loadCurrentIdentifier())
                #expect(Array(current.utf8) == Array(nfd.utf8))
                for bad in ["", "a\u{0}b", String(repeating: "a", count: 64 * 1024 + 1)] {
                    await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
                        try await store.save(TokenStoreConformance.sample("x"), identifier: bad)
                    }
                    await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
                        try await store.load(identifier: bad)
                    }
                    await #expect(throws: UserSessionError(.invalidIdentifier, "")) {
                        try await store.withRefreshLease(identifier: bad) {}
                    }
                }
            }
        }
    }

    @Test func twoInstancesMigratingAtOnceBothSucceedWithOneSchema() async throws {
        try await PostgresTestServer.withSchema { schema, admin in
            try await PostgresTestServer.withClient(schema: schema) { firstClient in
                try await PostgresTestServer.withClient(schema: schema) { secondClient in
                    let first = try PostgresTokenStore(
                        client: firstClient, namespace: "app", operationTimeout: PostgresTestClient.operationTimeout)
                    let second = try PostgresTokenStore(
                        client: secondClient, namespace: "app", operationTimeout: PostgresTestClient.operationTimeout)
                    async let firstReady: Void = first.prepare()
                    async let secondReady: Void = second.prepare()
                    _ = try await (firstReady, secondReady)
                    try await first.save(TokenStoreConformance.sample("alice"), identifier: "alice")
                    #expect(try await second.load(identifier: "alice") != nil)
                }
            }
            let versions = try await PostgresTestServer.integers(
                admin, "SELECT version::bigint FROM user_sessions_schema")
            #expect(versions == [Int64(PostgresTokenStore.schemaVersion)])
        }
    }

    @Test func aSchemaFromANewerReleaseIsATypedError() async throws {
        try await PostgresTestServer.withSchema { schema, admin in
            try await Self.withStore(schema: schema) { store in try await store.prepare() }
            try await admin.query("UPDATE user_sessions_schema SET version = version + 1")
            try await Self.withStore(schema: schema) { store in
                await #expect(throws: UserSessionError(.unsupportedFormatVersion, "")) { try await store.prepare() }
                await #expect(throws: UserSessionError(.unsupportedFormatVersion, "")) {
                    try await store.load(identifier: "alice")
                }
            }
        }
    }

    @Test func corruptRowsAreStoreCorruptAndKept() async throws {
        try await PostgresTestServer.withSchema { schema, admin in
            try await Self.withStore(schema: schema) { store in
                try await store.save(TokenStoreConformance.sample("alice"), identifier: "alice")
                try await store.save(TokenStoreConformance.sample("bob"), identifier: "bob")
                try await store.save(TokenStoreConformance.sample("carol"), identifier: "carol")
                let garbage = ByteBuffer(bytes: Array("{\"format\": \"swift-user-sessions.token\", \"vers".utf8))
                try await admin.query("UPDATE user_sessions_tokens SET record = \(garbage) WHERE identifier = 'alice'")
                // A valid record of another identifier, copied over bob's row.
                try await admin.query(
                    """
                    UPDATE user_sessions_tokens SET record = (SELECT record FROM user_sessions_tokens
                    WHERE identifier = 'carol') WHERE identifier = 'bob'
                    """)
                let newer = ByteBuffer(bytes: Array("{\"format\": \"swift-user-sessions.token\", \"version\": 9}".utf8))
                try await admin.query("UPDATE user_sessions_tokens SET record = \(newer) WHERE identifier = 'carol'")
                await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await store.load(identifier: "alice") }
                await #expect(throws: UserSessionError(.storeCorrupt, "")) { try await store.load(identifier: "bob") }
                await #expect(throws: UserSessionError(.unsupportedFormatVersion, "")) {
                    try await store.load(identifier: "carol")
                }
                #expect(try await store.storedIdentifiers().count == 3, "corrupt rows are kept for inspection")
                // A save replaces a corrupt row.
                try await store.save(TokenStoreConformance.sample("alice"), identifier: "alice")
                #expect(try await store.load(identifier: "alice")?.userInfo.id == "alice")
            }
        }
    }
}
#endif
