#if PostgreSQL
import Foundation
import Logging
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsTestSupport

/// A server that is down, a connection cut in the middle of a write, and secrets kept out of errors and logs.
@Suite(.enabled(if: PostgresTestServer.isAvailable, PostgresTestServer.skipMessage))
struct PostgresFaultTests {
    @Test func aServerThatIsDownIsATypedErrorNotAHang() async throws {
        // A loopback port nobody listens on: every connection attempt is refused, and the pool would retry forever.
        var configuration = try PostgresTestClient.configuration(schema: nil)
        configuration = PostgresClient.Configuration(
            host: "127.0.0.1", port: 9, username: configuration.username, password: nil, database: "nothing",
            tls: .disable)
        let client = PostgresClient(configuration: configuration)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = try PostgresTokenStore(client: client, namespace: "down", operationTimeout: .milliseconds(500))
            await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.prepare() }
            await #expect(throws: UserSessionError(.storeFailure, "")) {
                try await store.save(TokenStoreConformance.sample("alice"), identifier: "alice")
            }
            await #expect(throws: UserSessionError(.storeFailure, "")) { try await store.load(identifier: "alice") }
        }
    }

    @Test func aConnectionCutInTheMiddleOfAWriteIsStoreFailureAndWritesNothing() async throws {
        try await PostgresTestServer.withSchema { schema, admin in
            try await PostgresTestServer.withClient(schema: schema) { client in
                let store = try PostgresTokenStore(client: client, namespace: "cut", operationTimeout: .seconds(30))
                let first = try await store.save(
                    TokenStoreConformance.sample("alice", token: "before"), identifier: "alice", expectedRevision: nil)
                let quiet = Logger(label: "tests", factory: { _ in SwiftLogNoOpLogHandler() })
                try await admin.withConnection { connection in
                    // Hold the row so that the store's write waits on it, then end the waiting backend.
                    try await connection.query("BEGIN", logger: quiet)
                    _ = try await connection.query(
                        "SELECT revision FROM user_sessions_tokens WHERE identifier = 'alice' FOR UPDATE",
                        logger: quiet
                    ).collect()
                    var holder: Int64 = 0
                    for try await (pid) in try await connection.query(
                        "SELECT pg_backend_pid()::bigint", logger: quiet
                    ).decode(Int64.self) {
                        holder = pid
                    }
                    let write = Task {
                        try await store.save(
                            TokenStoreConformance.sample("alice", token: "after"), identifier: "alice",
                            expectedRevision: first)
                    }
                    var blocked: [Int64] = []
                    try await PostgresTestServer.eventually("the write waits on the row") {
                        blocked = try await PostgresTestServer.integers(
                            admin,
                            "SELECT pid::bigint FROM pg_stat_activity WHERE \(holder)::int = ANY(pg_blocking_pids(pid))"
                        )
                        return !blocked.isEmpty
                    }
                    try await admin.query("SELECT pg_terminate_backend(\(blocked[0])::int)")
                    await #expect(throws: UserSessionError(.storeFailure, "")) { try await write.value }
                    try await connection.query("ROLLBACK", logger: quiet)
                }
                let stored = try #require(try await store.loadRevised(identifier: "alice"))
                #expect(stored.revision == first)
                #expect(stored.session.credentials?.accessToken == "before")
                // The retry the controller makes goes through on a new connection.
                let retried = try await store.save(
                    TokenStoreConformance.sample("alice", token: "after"), identifier: "alice", expectedRevision: first)
                #expect(retried > first)
            }
        }
    }

    @Test func secretsNeverReachErrorsOrLogs() async throws {
        let secret = "SECRET-\(UUID().uuidString)"
        let (logger, handler) = capturingLogger()
        var descriptions: [String] = []
        try await PostgresTestServer.withSchema { schema, admin in
            try await PostgresTestServer.withClient(schema: schema, logger: logger) { client in
                let store = try PostgresTokenStore(
                    client: client, namespace: "secrets", operationTimeout: PostgresTestClient.operationTimeout)
                let session = TokenStoreConformance.sample("alice", token: secret)
                let revision = try await store.save(session, identifier: "alice", expectedRevision: nil)
                do {
                    _ = try await store.save(session, identifier: "alice", expectedRevision: revision + 7)
                } catch {
                    descriptions.append(String(describing: error))
                    descriptions.append(String(reflecting: error))
                }
                try await admin.query(
                    "ALTER TABLE user_sessions_tokens ADD CONSTRAINT no_writes CHECK (revision < 0) NOT VALID")
                do {
                    try await store.save(session, identifier: "alice")
                    Issue.record("a write against the failing constraint went through")
                } catch {
                    #expect((error as? UserSessionError)?.code == .storeFailure)
                    descriptions.append(String(describing: error))
                    var dumped = ""
                    dump(error, to: &dumped)
                    descriptions.append(dumped)
                }
                let stored = try await store.load(identifier: "alice")
                #expect(stored?.credentials?.accessToken == secret)
            }
        }
        #expect(descriptions.count == 4)
        for text in descriptions + handler.entries.map({ "\($0.message) \($0.metadata)" }) {
            #expect(!text.contains(secret), "a secret leaked: \(text.prefix(200))")
        }
    }
}
#endif
