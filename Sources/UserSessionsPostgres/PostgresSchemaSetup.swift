#if PostgreSQL
import Logging
import PostgresNIO

/// Creates a store's tables once for a fleet: the `CREATE … IF NOT EXISTS` statements run in one transaction under
/// a transaction-level advisory lock, so instances that start together wait for the first and then find the tables.
/// Used by the PostgreSQL stores of the other modules (OpenID Connect state, web sessions' browser records).
package enum PostgresSchemaSetup {
    /// Runs `statements` in one transaction on a connection of `client`, after taking the two-key advisory lock
    /// `(lockClass, lockObject)`; rolls back and rethrows when one fails.
    package static func create(
        _ statements: [String], lockClass: Int32, lockObject: Int32, client: PostgresClient, logger: Logger
    ) async throws {
        try await client.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            do {
                try await connection.query("SELECT pg_advisory_xact_lock(\(lockClass), \(lockObject))", logger: logger)
                    .drain()
                for statement in statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("COMMIT", logger: logger)
            } catch {
                if !connection.isClosed { _ = try? await connection.query("ROLLBACK", logger: logger) }
                throw error
            }
        }
    }
}
#endif
