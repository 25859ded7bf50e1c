#if PostgreSQL
import PostgresNIO
import UserSessions

extension PostgresTokenStore {
    /// The schema version this release creates, and the newest it works with.
    public static let schemaVersion = 1

    /// The store kind's key of the schema lock (``PostgresSchemaSetup``) that serializes migrations in a schema.
    static let migrationLockClass: Int32 = 0x5553_5353  // "USSS"

    /// Creates the tables, or checks the version of existing ones, in one transaction under the schema lock.
    func migrate() async throws {
        try await runUnprepared("preparing the schema") { client, logger in
            // Instances that start together queue on the lock; the first creates the tables, the others find them.
            try await PostgresSchemaSetup.inTransaction(
                lockClass: Self.migrationLockClass, client: client, logger: logger
            ) {
                try await Self.migrate(on: $0, logger: logger)
            }
        }
    }

    private static func migrate(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS user_sessions_schema (
                id smallint PRIMARY KEY CHECK (id = 1),
                version integer NOT NULL)
            """, logger: logger)
        var version: Int32?
        for try await (found) in try await connection.query(
            "SELECT version FROM user_sessions_schema WHERE id = 1", logger: logger
        ).decode(Int32.self) {
            version = found
        }
        switch version {
        case .none:
            try await connection.query(
                "CREATE SEQUENCE IF NOT EXISTS user_sessions_revision AS bigint START 1", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS user_sessions_tokens (
                    namespace text COLLATE "C" NOT NULL,
                    identifier bytea NOT NULL,
                    revision bigint NOT NULL CHECK (revision > 0),
                    record bytea NOT NULL,
                    PRIMARY KEY (namespace, identifier))
                """, logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS user_sessions_current (
                    namespace text COLLATE "C" PRIMARY KEY,
                    identifier bytea NOT NULL)
                """, logger: logger)
            try await connection.query(
                "INSERT INTO user_sessions_schema (id, version) VALUES (1, \(Int32(schemaVersion)))", logger: logger)
        case .some(let version) where version > schemaVersion:
            throw UserSessionError(
                .unsupportedFormatVersion,
                "the PostgreSQL schema has version \(version); this release works with up to \(schemaVersion)")
        case .some(let version) where version < 1:
            throw UserSessionError(.storeCorrupt, "the PostgreSQL schema records version \(version)")
        case .some:
            break
        }
    }

    enum WriteCondition: Sendable {
        /// Write whatever is stored.
        case none
        /// Write only when nothing is stored.
        case absent
        /// Write only when the row has this revision.
        case revision(Int64)
    }

    /// Writes the row and notifies the namespace's channel in the same statement (so in the same transaction), and
    /// returns the new revision.
    func write(_ session: StoredSession, identifier: String, condition: WriteCondition) async throws -> UInt64 {
        try StoredSessionRecord.validate(identifier: identifier)
        let record = ByteBuffer(bytes: try StoredSessionRecord.encode(session, identifier: identifier))
        let namespace = self.namespace
        let channel = self.channel
        let key = ByteBuffer(bytes: Array(identifier.utf8))
        let (prefix, suffix) = ChangePayload.saved(identifier)
        let revision = try await run("saving a session") { client, logger -> Int64? in
            let rows: PostgresRowSequence
            switch condition {
            case .none:
                rows = try await client.query(
                    """
                    WITH written AS (
                        INSERT INTO user_sessions_tokens AS t (namespace, identifier, revision, record)
                        VALUES (\(namespace), \(key), nextval('user_sessions_revision'), \(record))
                        ON CONFLICT (namespace, identifier) DO UPDATE
                        SET record = EXCLUDED.record,
                            revision = GREATEST(nextval('user_sessions_revision'), t.revision + 1)
                        RETURNING t.revision)
                    SELECT written.revision
                    FROM written, pg_notify(\(channel), \(prefix) || written.revision || \(suffix)) AS notified
                    """, logger: logger)
            case .absent:
                rows = try await client.query(
                    """
                    WITH written AS (
                        INSERT INTO user_sessions_tokens (namespace, identifier, revision, record)
                        VALUES (\(namespace), \(key), nextval('user_sessions_revision'), \(record))
                        ON CONFLICT (namespace, identifier) DO NOTHING
                        RETURNING revision)
                    SELECT written.revision
                    FROM written, pg_notify(\(channel), \(prefix) || written.revision || \(suffix)) AS notified
                    """, logger: logger)
            case .revision(let expected):
                rows = try await client.query(
                    """
                    WITH written AS (
                        UPDATE user_sessions_tokens AS t
                        SET record = \(record), revision = GREATEST(nextval('user_sessions_revision'), t.revision + 1)
                        WHERE t.namespace = \(namespace) AND t.identifier = \(key) AND t.revision = \(expected)
                        RETURNING t.revision)
                    SELECT written.revision
                    FROM written, pg_notify(\(channel), \(prefix) || written.revision || \(suffix)) AS notified
                    """, logger: logger)
            }
            var written: Int64?
            for try await (revision) in rows.decode(Int64.self) { written = revision }
            return written
        }
        guard let revision else {
            let expected: String =
                switch condition {
                case .none: "any revision"
                case .absent: "no row"
                case .revision(let expected): "revision \(expected)"
                }
            throw UserSessionError(
                .revisionConflict, "\(Self.label(for: identifier)) has moved on (the save expected \(expected))")
        }
        return UInt64(revision)
    }
}

/// Creates or checks the schema once per store instance; a failed attempt is tried again by the next call.
final class SchemaPreparation: Sendable {
    private enum State {
        case idle
        case running(Task<Void, any Error>)
        case ready
    }
    private let state = Locked(State.idle)

    func ensure(_ store: PostgresTokenStore) async throws {
        let task = state.withLock { state -> Task<Void, any Error>? in
            switch state {
            case .ready: return nil
            case .running(let task): return task
            case .idle:
                let task = Task { try await store.migrate() }
                state = .running(task)
                return task
            }
        }
        guard let task else { return }
        do {
            try await task.value
            state.withLock { $0 = .ready }
        } catch {
            state.withLock { state in
                if case .running = state { state = .idle }
            }
            throw error
        }
    }
}
#endif
