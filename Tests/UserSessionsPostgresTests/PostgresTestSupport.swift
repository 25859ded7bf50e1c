#if PostgreSQL
import Foundation
import InMemoryLogging
import Logging
import PostgresNIO
import Testing
import UserSessions
import UserSessionsPostgres
import UserSessionsTestSupport

/// The server the tests use: `USER_SESSIONS_POSTGRES_URL` (`postgres://user@host:port/database`), which
/// `Scripts/with-postgres.sh` sets for a throwaway cluster. Without it every PostgreSQL test is skipped, unless
/// `USER_SESSIONS_REQUIRE_POSTGRES=1` (CI) makes ``PostgresRequirementTests`` fail.
enum PostgresTestServer {
    static let url = PostgresTestClient.url
    static let isAvailable = url != nil
    static let isRequired = ProcessInfo.processInfo.environment["USER_SESSIONS_REQUIRE_POSTGRES"] == "1"
    static let skipMessage: Comment =
        "USER_SESSIONS_POSTGRES_URL is not set (run `Scripts/with-postgres.sh swift test --traits PostgreSQL`)"

    /// Runs `body` with a running client whose connections use `schema` (see ``PostgresTestClient``).
    static func withClient<Value: Sendable>(
        schema: String?, logger: Logger? = nil, _ body: (PostgresClient) async throws -> Value
    ) async throws -> Value {
        try await PostgresTestClient.withClient(schema: schema, logger: logger, body)
    }

    /// Runs `body` in a new schema of its own (dropped afterwards), with an administrative client in it.
    static func withSchema<Value: Sendable>(
        _ body: (_ schema: String, _ admin: PostgresClient) async throws -> Value
    ) async throws -> Value {
        let schema = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        return try await withClient(schema: schema) { admin in
            // The schema name is made here of [a-z0-9_] only; DDL cannot take it as a bound parameter.
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA \(schema)"))
            do {
                let value = try await body(schema, admin)
                try await admin.query(PostgresQuery(unsafeSQL: "DROP SCHEMA \(schema) CASCADE"))
                return value
            } catch {
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP SCHEMA \(schema) CASCADE"))
                throw error
            }
        }
    }

    /// A namespace no other test uses.
    static func uniqueNamespace() -> String {
        "ns-" + UUID().uuidString.lowercased().prefix(13)
    }

    /// Runs `query` and returns its first column of every row as `Int64`.
    static func integers(_ client: PostgresClient, _ query: PostgresQuery) async throws -> [Int64] {
        var values: [Int64] = []
        for try await (value) in try await client.query(query).decode(Int64.self) { values.append(value) }
        return values
    }

    /// Repeats `probe` (a query, no sleeping) until it returns `true`; fails after 20 000 tries.
    static func eventually(_ what: String, _ probe: () async throws -> Bool) async throws {
        for _ in 0..<20_000 {
            if try await probe() { return }
            await Task.yield()
        }
        Issue.record("never happened: \(what)")
        throw UserSessionError(.storeFailure, "never happened: \(what)")
    }

    /// The backends holding (`granted`) or waiting for the refresh lease of `identifier` in `store`'s namespace. Only
    /// that lease's lock key counts (a one-key advisory lock: the key's high half in `classid`, its low half in
    /// `objid`), so the advisory locks other suites take at the same time (migrations, other leases) are not counted.
    static func leaseBackends(
        _ client: PostgresClient, granted: Bool, of store: PostgresTokenStore, identifier: String
    ) async throws -> [Int64] {
        let key = UInt64(bitPattern: PostgresTokenStore.leaseKey(namespace: store.namespace, identifier: identifier))
        let (high, low) = (Int64(key >> 32), Int64(key & 0xFFFF_FFFF))
        return try await integers(
            client,
            """
            SELECT pid::bigint FROM pg_locks
            WHERE locktype = 'advisory' AND objsubid = 1 AND granted = \(granted)
              AND classid::bigint = \(high) AND objid::bigint = \(low)
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """)
    }
}

/// Makes CI fail when the PostgreSQL tests would be skipped.
@Suite struct PostgresRequirementTests {
    @Test func postgresTestsRunWhenRequired() {
        if PostgresTestServer.isRequired {
            #expect(
                PostgresTestServer.isAvailable,
                "USER_SESSIONS_REQUIRE_POSTGRES=1 but USER_SESSIONS_POSTGRES_URL is not set: the PostgreSQL tests would be skipped"
            )
        }
    }
}

/// A logger at trace level that keeps every entry, to check that no secret reaches a log.
func capturingLogger() -> (Logger, InMemoryLogHandler) {
    var handler = InMemoryLogHandler()
    handler.logLevel = .trace
    return (Logger(label: "user-sessions-postgres-test", factory: { _ in handler }), handler)
}

/// A one-shot gate for ordering the lease tests: tasks wait until the test opens it.
final class TestGate: Sendable {
    private let state = Locked<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withVisibleCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resumeVisibly() }
        }
    }

    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resumeVisibly() }
    }
}
#endif
