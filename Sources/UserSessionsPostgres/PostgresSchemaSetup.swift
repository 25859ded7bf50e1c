#if PostgreSQL
import Logging
import PostgresNIO

/// Creates a store's tables once for a fleet: the `CREATE … IF NOT EXISTS` statements run in one transaction under
/// a transaction-level advisory lock, so instances that start together wait for the first and then find the tables.
/// Used by every PostgreSQL store of the package (tokens, OpenID Connect state, web sessions' browser records).
///
/// The lock is per store kind **and per schema** (the connection's `current_schema()`, where the tables are made):
/// fleets in other schemas of the database never wait for each other's preparation, so preparing stays well within
/// the stores' operation deadline however many schemas start at once.
package enum PostgresSchemaSetup {
    /// Runs `statements` in one transaction on a connection of `client`, after taking the store kind's lock for the
    /// connection's schema (``lock(_:on:logger:)``); rolls back and rethrows when one fails.
    package static func create(
        _ statements: [String], lockClass: Int32, client: PostgresClient, logger: Logger
    ) async throws {
        try await inTransaction(lockClass: lockClass, client: client, logger: logger) { connection in
            for statement in statements {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        }
    }

    /// Runs `body` in one transaction on a connection of `client`, after taking the store kind's lock for the
    /// connection's schema; commits when `body` returns, rolls back and rethrows when it throws.
    package static func inTransaction(
        lockClass: Int32, client: PostgresClient, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Void
    ) async throws {
        try await client.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            do {
                try await lock(lockClass, on: connection, logger: logger)
                try await body(connection)
                try await connection.query("COMMIT", logger: logger)
            } catch {
                if !connection.isClosed { _ = try? await connection.query("ROLLBACK", logger: logger) }
                throw error
            }
        }
    }

    /// Takes the two-key advisory lock `(lockClass, schema key)` until the transaction ends. The schema key is the
    /// first 32 bits of the MD5 of the schema's name (documented functions only); two schemas sharing a key only
    /// wait for each other. The two-key form never meets a lease's one-key lock.
    private static func lock(_ lockClass: Int32, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            SELECT pg_advisory_xact_lock(\(lockClass),
                ('x' || left(md5(coalesce(current_schema(), '')), 8))::bit(32)::integer)
            """, logger: logger
        ).drain()
    }
}
#endif
