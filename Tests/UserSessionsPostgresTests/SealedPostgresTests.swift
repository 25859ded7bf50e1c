#if PostgreSQL && Sealing
import Foundation
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsSealing
import UserSessionsTestSupport

/// Keys for the sealed PostgreSQL tests (test material only).
enum SealedPostgresKeys {
    static let materialA = (0..<32).map { UInt8(0x40 + $0) }
    static let materialB = (0..<32).map { UInt8(0xC0 - $0) }
    static var base64A: String { Data(materialA).base64EncodedString() }

    static func ring(current: [UInt8], _ currentID: String, previous: [([UInt8], String)] = []) throws
        -> SealingKeyRing
    {
        try SealingKeyRing(
            current: SealingKey(id: currentID, bytes: current),
            previous: previous.map { try SealingKey(id: $0.1, bytes: $0.0) })
    }
    static func ringA() throws -> SealingKeyRing { try ring(current: materialA, "a") }
    static func ringB() throws -> SealingKeyRing { try ring(current: materialB, "b") }
    static func ringBA() throws -> SealingKeyRing { try ring(current: materialB, "b", previous: [(materialA, "a")]) }
}

/// A ``SealedTokenStore`` over a ``PostgresTokenStore`` on a real server: the rows as SQL reads them, rotation, and
/// the records that must not open.
@Suite(.enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct SealedPostgresTokenStoreTests {
    static func session(_ user: String) -> StoredSession {
        StoredSession(
            userInfo: UserInfo(id: user, email: "\(user)@example.com"),
            credentials: Credentials(
                accessToken: "pg-access-\(user)-61d0c7a9e4b2f835", refreshToken: "pg-refresh-\(user)-0e7b5c3a9f1d2468",
                expiresAt: Date(timeIntervalSinceReferenceDate: 820_000_000.5), source: .signIn))
    }

    /// Runs `body` with a sealed store in a schema of its own, an administrative client, and the namespace.
    static func withSealedStore<Value: Sendable>(
        _ ring: SealingKeyRing,
        _ body: (SealedTokenStore<PostgresTokenStore>, PostgresClient, String) async throws -> Value
    ) async throws -> Value {
        try await PostgresTestServer.withSchema { schema, admin in
            try await PostgresTestServer.withClient(schema: schema) { client in
                let namespace = PostgresTestServer.uniqueNamespace()
                let base = try PostgresTokenStore(
                    client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
                return try await body(
                    SealedTokenStore(base: base, keyRing: ring, namespace: "sealed"), admin, namespace)
            }
        }
    }

    /// Every `record` of `namespace`'s rows, as SQL reads it.
    static func rows(_ admin: PostgresClient, _ namespace: String) async throws -> [[UInt8]] {
        var records: [[UInt8]] = []
        let query: PostgresQuery = "SELECT record FROM user_sessions_tokens WHERE namespace = \(namespace)"
        for try await record in try await admin.query(query).decode(Data.self) { records.append(Array(record)) }
        return records
    }

    @Test func passesTheTokenStoreConformanceChecks() async throws {
        try await Self.withSealedStore(try SealedPostgresKeys.ringA()) { store, _, _ in
            try await TokenStoreConformance.check(store)
        }
    }

    @Test func rowsHoldNoTokenNorAnyEightBytePieceOfOne() async throws {
        try await Self.withSealedStore(try SealedPostgresKeys.ringA()) { store, admin, namespace in
            let sessions = ["alice", "bob", "carol"].map(Self.session)
            for session in sessions { try await store.save(session, identifier: session.userInfo.id) }
            for session in sessions { #expect(try await store.load(identifier: session.userInfo.id) == session) }
            let rows = try await Self.rows(admin, namespace)
            #expect(rows.count == 3)
            let secrets = sessions.flatMap { SecretScan.tokens(of: $0.credentials) } + [SealedPostgresKeys.base64A]
            for row in rows {
                #expect(SecretScan.leaked(secrets, in: row).isEmpty, "a row leaks a secret")
                #expect(String(decoding: row, as: UTF8.self).contains("sealed:1:a:"))
            }
        }
    }

    @Test func afterARotationRowsLoadAndResealAllMovesThemAllToTheNewKey() async throws {
        try await Self.withSealedStore(try SealedPostgresKeys.ringA()) { store, admin, namespace in
            let users = ["alice", "bob", "carol"]
            for user in users { try await store.save(Self.session(user), identifier: user) }
            let rotated = SealedTokenStore(
                base: store.base, keyRing: try SealedPostgresKeys.ringBA(), namespace: "sealed")
            for user in users { #expect(try await rotated.load(identifier: user) == Self.session(user)) }
            let report = try await rotated.resealAll()
            #expect(report.resealed.sorted() == users && report.isComplete)
            for row in try await Self.rows(admin, namespace) {
                #expect(String(decoding: row, as: UTF8.self).contains("sealed:1:b:"))
            }
            let retired = SealedTokenStore(
                base: store.base, keyRing: try SealedPostgresKeys.ringB(), namespace: "sealed")
            for user in users { #expect(try await retired.load(identifier: user) == Self.session(user)) }
        }
    }

    @Test func aliceSealedRecordUnderBobsIdentifierIsRefused() async throws {
        try await Self.withSealedStore(try SealedPostgresKeys.ringA()) { store, admin, namespace in
            try await store.save(Self.session("alice"), identifier: "alice")
            try await store.save(Self.session("bob"), identifier: "bob")
            // Through the store: alice's sealed credentials in a record the store writes for bob.
            let alices = try #require(try await store.base.load(identifier: "alice"))
            try await store.base.save(alices, identifier: "bob")
            await #expect(throws: UserSessionError(.storeCorrupt, "")) { _ = try await store.load(identifier: "bob") }
            do {
                _ = try await store.load(identifier: "bob")
            } catch let error as UserSessionError {
                #expect(error.underlying as? SealedRecordProblem == .authenticationFailed)
            }
            // Through SQL: alice's row bytes copied into bob's row.
            try await admin.query(
                """
                UPDATE user_sessions_tokens SET record = (SELECT record FROM user_sessions_tokens
                    WHERE namespace = \(namespace) AND identifier = 'alice') WHERE namespace = \(namespace) AND identifier = 'bob'
                """)
            await #expect(throws: UserSessionError(.storeCorrupt, "")) { _ = try await store.load(identifier: "bob") }
            #expect(try await Self.rows(admin, namespace).count == 2, "both rows are kept")
        }
    }

    @Test func aFlippedBitAndAMissingKeyAreRefusedAndTheRowKept() async throws {
        try await Self.withSealedStore(try SealedPostgresKeys.ringA()) { store, admin, namespace in
            try await store.save(Self.session("alice"), identifier: "alice")
            let withoutA = SealedTokenStore(
                base: store.base, keyRing: try SealedPostgresKeys.ringB(), namespace: "sealed")
            let before = try await Self.rows(admin, namespace)
            do {
                _ = try await withoutA.loadRevised(identifier: "alice")
                Issue.record("a record sealed with a key missing from the ring opened")
            } catch let error as UserSessionError {
                #expect(error.code == .storeCorrupt)
                #expect(error.underlying as? SealedRecordProblem == .unknownKey(id: "a"))
            }
            #expect(try await withoutA.resealAll().unopenable == ["alice"])
            #expect(try await Self.rows(admin, namespace) == before, "the row is kept as it was")

            var tampered = try #require(try await store.base.load(identifier: "alice"))
            let sealed = try #require(tampered.credentials?.accessToken)
            var parts = sealed.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            var combined = try #require(Data(base64Encoded: parts[3]))
            combined[combined.startIndex + 20] ^= 0x80
            parts[3] = combined.base64EncodedString()
            tampered.credentials?.accessToken = parts.joined(separator: ":")
            try await store.base.save(tampered, identifier: "alice")
            do {
                _ = try await store.load(identifier: "alice")
                Issue.record("a record with a flipped bit opened")
            } catch let error as UserSessionError {
                #expect(error.code == .storeCorrupt)
                #expect(error.underlying as? SealedRecordProblem == .authenticationFailed)
            }
            #expect(try await Self.rows(admin, namespace).count == 1)
        }
    }
}

/// The multi-process fleet of ``PostgresFleetTests`` with every node sealing its records (`--sealing-key`).
@Suite(.serialized, .enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct SealedPostgresFleetTests {
    @Test func fourProcessesSharingSealedPostgreSQLRecordsRefreshOncePerExpiry() async throws {
        let executable = try PostgresFleetTests.executable()
        let namespace = PostgresTestServer.uniqueNamespace()
        let expiries = PostgresFleetTests.expiries
        let identifier = PostgresFleetTests.identifier
        try await OAuthFixtureServer.with { server in
            try await server.configure(["expires_in": 1, "final_after": expiries, "final_expires_in": 3600])
            let family = try await server.issue()
            let credentials = Credentials(
                accessToken: family.accessToken, refreshToken: family.refreshToken,
                expiresAt: Date().addingTimeInterval(1))
            try await PostgresTestServer.withClient(schema: nil) { client in
                let base = try PostgresTokenStore(
                    client: client, namespace: namespace, operationTimeout: PostgresTestClient.operationTimeout)
                try await base.prepare()
                // The nodes seal with namespace "fleet" (FleetNode's StoreSelection.sealingNamespace).
                let store = SealedTokenStore(base: base, keyRing: try SealedPostgresKeys.ringA(), namespace: "fleet")
                try await store.save(
                    StoredSession(userInfo: UserInfo(id: identifier), credentials: credentials), identifier: identifier)
                let arguments = [
                    "--store", try PostgresFleetTests.storeArgument(namespace: namespace), "--identifier", identifier,
                    "--token-endpoint", server.tokenEndpoint.absoluteString, "--tasks", "100",
                    "--until-lifetime-over", "600", "--time-limit", "60", "--stop-on-error",
                    "--sealing-key", "a:\(SealedPostgresKeys.base64A)",
                ]
                let nodes = try await PostgresFleetTests.runFourNodes(executable, arguments)
                let stats = try await server.stats()
                for node in nodes {
                    #expect(node.status == 0, "\(node.summaryLine)")
                    #expect(node.summary["errors"] as? Int == 0, "\(node.summaryLine)")
                    #expect(node.summary["settled"] as? Bool == true, "\(node.summaryLine)")
                }
                #expect(stats.refreshes == expiries)
                #expect(stats.reuseDetected == 0)
                #expect(stats.invalidGrant == 0)
                let hashes = Set(nodes.map { $0.summary["final_token_hash"] as? String ?? "?" })
                #expect(hashes.count == 1, "every process ends on the same token: \(hashes)")
                // The row is sealed (the nodes wrote it), and opens to the token the fleet ended on.
                let raw = try #require(try await base.load(identifier: identifier))
                #expect(raw.credentials?.accessToken.hasPrefix("sealed:1:a:") == true)
                #expect(raw.credentials?.refreshToken == nil)
                let opened = try await store.load(identifier: identifier)
                #expect(opened?.credentials.map { shortHash($0.accessToken) } == hashes.first)
                print(
                    "sealed fleet (PostgreSQL, 4 processes × 100 tasks): \(stats.refreshes) refreshes for \(expiries) "
                        + "expiries, \(stats.reuseDetected) reuse detections; nodes: \(nodes.map(\.summaryLine))")
            }
        }
    }
}
#endif
