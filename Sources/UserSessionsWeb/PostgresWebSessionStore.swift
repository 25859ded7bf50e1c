#if (Hummingbird || Vapor) && PostgreSQL
import Foundation
import Logging
import PostgresNIO
import UserSessions
import UserSessionsPostgres

/// A ``WebSessionStore`` in PostgreSQL, shared by every instance of a fleet (with the PostgreSQL trait): a browser
/// signed in through one instance is recognised by all of them, and a sign-out or back-channel logout through one
/// ends the browser's session on all of them at their next request.
///
/// It runs its queries through a `PostgresClient` that the caller creates and runs, as the PostgreSQL token store
/// does, and creates its table `user_sessions_web_sessions` (in the schema of the connection's `search_path`) on
/// first use under an advisory lock. Rows are keyed by the ``WebSessionKey`` (the cookie's hash); every value is a
/// bound parameter, never SQL text, and errors never hold one.
public final class PostgresWebSessionStore: WebSessionStore {
    /// The namespace every row of this store belongs to.
    public let namespace: String
    /// How long one operation may take before it fails with ``WebSessionError/Code/storeFailure``, without waiting
    /// for PostgreSQL any longer.
    public let operationTimeout: Duration
    let client: PostgresClient
    private let logger = Logger(label: "UserSessionsWeb", factory: { _ in SwiftLogNoOpLogHandler() })
    private let prepared = Locked(false)

    /// Creates a store over `client`, which the caller runs, for the browsers of `namespace` (1 to 40 characters
    /// among `a`–`z`, `0`–`9`, `_` and `-`).
    ///
    /// - Parameters:
    ///   - client: The client the queries run through.
    ///   - namespace: The namespace of this store's rows.
    ///   - operationTimeout: How long one operation may take, preparing the schema included (positive).
    ///     Default 10 seconds, as the PostgreSQL
    ///     token store's.
    /// - Throws: ``WebSessionError/Code/invalidConfiguration`` for another namespace or timeout.
    public init(client: PostgresClient, namespace: String, operationTimeout: Duration = .seconds(10))
        throws(WebSessionError)
    {
        guard StoreNamespace.isValid(namespace) else {
            throw WebSessionError(
                .invalidConfiguration, "the namespace must be 1 to 40 characters among a-z, 0-9, _ and -")
        }
        guard operationTimeout > .zero else {
            throw WebSessionError(.invalidConfiguration, "the operation timeout must be positive")
        }
        self.client = client
        self.namespace = namespace
        self.operationTimeout = operationTimeout
    }

    /// Creates the table now instead of on first use.
    public func prepare() async throws {
        if prepared.withLock({ $0 }) { return }
        let logger = logger
        try await run("preparing the table") { client in
            try await PostgresSchemaSetup.create(
                Self.schema, lockClass: 0x5553_5745, client: client, logger: logger)
        }
        prepared.withLock { $0 = true }
    }

    private static let schema = [
        """
        CREATE TABLE IF NOT EXISTS user_sessions_web_sessions (
            namespace text COLLATE "C" NOT NULL, key_hash text COLLATE "C" NOT NULL, identifier bytea NOT NULL,
            record bytea NOT NULL, last_seen_at timestamptz NOT NULL, absolute_expires_at timestamptz NOT NULL,
            PRIMARY KEY (namespace, key_hash))
        """,
        """
        CREATE INDEX IF NOT EXISTS user_sessions_web_sessions_identifier
            ON user_sessions_web_sessions (namespace, identifier)
        """,
    ]

    /// Stores `record` under `key`.
    public func insert(_ record: WebSessionRecord, key: WebSessionKey) async throws {
        try await prepare()
        let (namespace, logger, hash) = (self.namespace, self.logger, key.hash)
        let bytes = ByteBuffer(bytes: try record.encoded())
        let identifier = ByteBuffer(bytes: Array(record.identifier.utf8))
        let (lastSeenAt, absoluteExpiresAt) = (record.lastSeenAt, record.absoluteExpiresAt)
        try await run("storing a browser record") { client in
            _ = try await client.query(
                """
                INSERT INTO user_sessions_web_sessions
                    (namespace, key_hash, identifier, record, last_seen_at, absolute_expires_at)
                VALUES (\(namespace), \(hash), \(identifier), \(bytes), \(lastSeenAt), \(absoluteExpiresAt))
                ON CONFLICT (namespace, key_hash) DO UPDATE SET identifier = EXCLUDED.identifier,
                    record = EXCLUDED.record, last_seen_at = EXCLUDED.last_seen_at,
                    absolute_expires_at = EXCLUDED.absolute_expires_at
                """, logger: logger)
        }
    }

    /// The record under `key`, or `nil`; its `lastSeenAt` is the row's.
    public func load(key: WebSessionKey) async throws -> WebSessionRecord? {
        try await prepare()
        let (namespace, logger, hash) = (self.namespace, self.logger, key.hash)
        let row = try await run("reading a browser record") { client -> (ByteBuffer, Date)? in
            let rows = try await client.query(
                """
                SELECT record, last_seen_at FROM user_sessions_web_sessions
                WHERE namespace = \(namespace) AND key_hash = \(hash)
                """, logger: logger)
            var found: (ByteBuffer, Date)?
            for try await (record, lastSeenAt) in rows.decode((ByteBuffer, Date).self) { found = (record, lastSeenAt) }
            return found
        }
        guard let (bytes, lastSeenAt) = row else { return nil }
        var record = try WebSessionRecord.decode(Data(bytes.readableBytesView))
        record.lastSeenAt = max(record.lastSeenAt, lastSeenAt)
        return record
    }

    /// Sets the `lastSeenAt` of the record under `key` (never back in time).
    public func touch(key: WebSessionKey, lastSeenAt: Date) async throws {
        try await prepare()
        let (namespace, logger, hash) = (self.namespace, self.logger, key.hash)
        try await run("touching a browser record") { client in
            _ = try await client.query(
                """
                UPDATE user_sessions_web_sessions SET last_seen_at = GREATEST(last_seen_at, \(lastSeenAt))
                WHERE namespace = \(namespace) AND key_hash = \(hash)
                """, logger: logger)
        }
    }

    /// Removes the record under `key`.
    public func remove(key: WebSessionKey) async throws {
        try await prepare()
        let (namespace, logger, hash) = (self.namespace, self.logger, key.hash)
        try await run("removing a browser record") { client in
            _ = try await client.query(
                "DELETE FROM user_sessions_web_sessions WHERE namespace = \(namespace) AND key_hash = \(hash)",
                logger: logger)
        }
    }

    /// Removes every record of `identifier`, for every instance.
    @discardableResult
    public func removeAll(identifier: String) async throws -> Int {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let identifier = ByteBuffer(bytes: Array(identifier.utf8))
        return try await run("removing a user's browser records") { client in
            let rows = try await client.query(
                """
                DELETE FROM user_sessions_web_sessions WHERE namespace = \(namespace) AND identifier = \(identifier)
                RETURNING 1
                """, logger: logger)
            var count = 0
            for try await _ in rows { count += 1 }
            return count
        }
    }

    /// Removes every record that has ended at `now`.
    @discardableResult
    public func removeExpired(now: Date, idleTimeout: Duration) async throws -> Int {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let idleSince = now.addingTimeInterval(-idleTimeout.timeInterval)
        return try await run("removing ended browser records") { client in
            let rows = try await client.query(
                """
                DELETE FROM user_sessions_web_sessions WHERE namespace = \(namespace)
                    AND (absolute_expires_at <= \(now) OR last_seen_at <= \(idleSince))
                RETURNING 1
                """, logger: logger)
            var count = 0
            for try await _ in rows { count += 1 }
            return count
        }
    }

    /// Runs `body` against ``operationTimeout`` (the PostgreSQL stores' one deadline) and maps what PostgresNIO
    /// throws (their one mapping) to ``WebSessionError``.
    private func run<Value: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (PostgresClient) async throws -> Value
    ) async throws -> Value {
        let (client, timeout) = (client, operationTimeout)
        do {
            return try await PostgresOperationDeadline.run(
                timeout,
                timedOut: { WebSessionError(.storeFailure, PostgresOperationDeadline.message(timeout, operation)) }
            ) { try await body(client) }
        } catch let error as WebSessionError {
            throw error
        } catch {
            switch PostgresStoreErrors.classify(error, while: operation) {
            case .cancelled: throw CancellationError()
            case .failure(let message): throw WebSessionError(.storeFailure, message)
            case .corrupt(let message): throw WebSessionError(.storeCorrupt, message)
            }
        }
    }
}
#endif
