#if PostgreSQL
import Foundation
import Logging
import PostgresNIO
import UserSessions

/// A ``UserSessions/CoordinatedTokenStore`` in PostgreSQL, shared by every instance of a server fleet.
///
/// The store runs its queries through a `PostgresClient` that the caller creates and runs (`await client.run()` in
/// a long-running task or a `ServiceGroup`, as PostgresNIO documents); the store never starts or stops it.
///
/// - Schema: the store creates and migrates its tables itself on first use (or when ``prepare()`` is called), in
///   the schema the connection's `search_path` names: `user_sessions_schema` (the schema version),
///   `user_sessions_tokens`, `user_sessions_current` and the sequence `user_sessions_revision`. A migration runs in
///   one transaction under a transaction-level advisory lock, so instances that start together wait for the first
///   and then find the schema in place. A schema written by a newer release makes every call throw
///   ``UserSessions/UserSessionError/Code/unsupportedFormatVersion``.
/// - Rows: one per `(namespace, identifier)`. The identifier is a `bytea` of its UTF-8 bytes, so identifiers compare
///   by bytes, never by collation or Unicode equivalence (`"é"` in NFC and in NFD are two users). Identifiers are
///   always bound parameters, never part of the SQL text. The session is the package's own versioned JSON (the same
///   envelope as a ``UserSessions/FileTokenStore`` file), so a corrupt row is
///   ``UserSessions/UserSessionError/Code/storeCorrupt`` and a row from a newer release
///   ``UserSessions/UserSessionError/Code/unsupportedFormatVersion``.
/// - Revisions: every write takes its revision from one sequence (and never below the row's revision + 1), so a
///   revision only grows, also across a removal and a new save of the same identifier.
/// - Namespace: every row and the current identifier belong to the `namespace` given at creation; stores with
///   different namespaces share the tables without seeing each other's sessions.
/// - Refresh lease: see ``withRefreshLease(identifier:_:)``.
/// - Changes: see ``changes()``.
/// - Faults: every operation ends within ``operationTimeout``; a server that is down or a connection lost in the
///   middle of a write throws ``UserSessions/UserSessionError/Code/storeFailure`` (the controller retries writes).
///   Errors name the operation and the SQLSTATE, never a query's values.
///
/// Credentials appear only in bound values: never in SQL text, error messages or the store's logs (the store
/// passes PostgresNIO a logger that discards everything).
public final class PostgresTokenStore: CoordinatedTokenStore {
    /// The namespace every row of this store belongs to.
    public let namespace: String
    /// How long a refresh lease lasts at most: PostgreSQL ends a holder that keeps the lease longer.
    public let leaseDeadline: Duration
    /// How long one operation (a read, a write, the migration) may take before it fails with
    /// ``UserSessions/UserSessionError/Code/storeFailure``.
    public let operationTimeout: Duration

    let client: PostgresClient
    let logger: Logger
    let schema = SchemaPreparation()
    let hub: ChangeHub

    /// The longest namespace, in bytes: the notification channel `user_sessions.<namespace>` stays under
    /// PostgreSQL's 63-byte identifier limit.
    public static let maximumNamespaceLength = 40

    /// Creates a store over `client`, which the caller runs.
    ///
    /// - Parameters:
    ///   - client: A `PostgresClient` whose `run()` the caller keeps running while the store is used. Give it
    ///     more connections than identifiers your process refreshes at the same time: each refresh lease holds one
    ///     connection, and the listener of ``changes()`` holds one.
    ///   - namespace: 1 to 40 characters among `a`–`z`, `0`–`9`, `_` and `-`, naming this application's sessions.
    ///   - leaseDeadline: The longest a process holds a refresh lease; at least 1 second. Default 30 seconds.
    ///   - operationTimeout: The longest one operation waits for PostgreSQL; at least 100 milliseconds. Default 10
    ///     seconds.
    /// - Throws: ``UserSessions/UserSessionError/Code/invalidConfiguration`` for a namespace or a duration outside
    ///   these limits.
    public init(
        client: PostgresClient,
        namespace: String,
        leaseDeadline: Duration = .seconds(30),
        operationTimeout: Duration = .seconds(10)
    ) throws {
        guard StoreNamespace.isValid(namespace, maximumLength: Self.maximumNamespaceLength) else {
            throw UserSessionError(
                .invalidConfiguration,
                "a PostgresTokenStore namespace must be 1 to \(Self.maximumNamespaceLength) characters among a-z, 0-9, _ and -"
            )
        }
        guard leaseDeadline >= .seconds(1) else {
            throw UserSessionError(.invalidConfiguration, "the lease deadline must be at least 1 second")
        }
        guard operationTimeout >= .milliseconds(100) else {
            throw UserSessionError(.invalidConfiguration, "the operation timeout must be at least 100 milliseconds")
        }
        self.client = client
        self.namespace = namespace
        self.leaseDeadline = leaseDeadline
        self.operationTimeout = operationTimeout
        self.logger = Logger(label: "UserSessionsPostgres", factory: { _ in SwiftLogNoOpLogHandler() })
        self.hub = ChangeHub()
    }

    /// The channel of this namespace's notifications.
    var channel: String { "user_sessions.\(namespace)" }

    /// Creates or migrates the schema now, instead of on the first call; useful to fail at startup.
    ///
    /// - Throws: ``UserSessions/UserSessionError/Code/storeFailure`` when PostgreSQL cannot be reached within
    ///   ``operationTimeout``; ``UserSessions/UserSessionError/Code/unsupportedFormatVersion`` when a newer release
    ///   wrote the schema.
    public func prepare() async throws {
        try await schema.ensure(self)
    }

    // MARK: TokenStore

    public func load(identifier: String) async throws -> StoredSession? {
        try await loadRevised(identifier: identifier)?.session
    }

    public func loadRevised(identifier: String) async throws -> RevisedSession? {
        try StoredSessionRecord.validate(identifier: identifier)
        let namespace = self.namespace
        let key = ByteBuffer(bytes: Array(identifier.utf8))
        let row = try await run("reading a session", idempotent: true) { client, logger in
            let rows = try await client.query(
                """
                SELECT record, revision FROM user_sessions_tokens
                WHERE namespace = \(namespace) AND identifier = \(key)
                """, logger: logger)
            var found: ([UInt8], Int64)?
            for try await (record, revision) in rows.decode((ByteBuffer, Int64).self) {
                found = (Array(record.readableBytesView), revision)
            }
            return found
        }
        guard let (bytes, revision) = row else { return nil }
        let label = Self.label(for: identifier)
        let session = try StoredSessionRecord.decode(bytes, identifier: identifier, label: label)
        guard revision > 0 else { throw UserSessionError(.storeCorrupt, "\(label) has revision \(revision)") }
        return RevisedSession(session: session, revision: UInt64(revision))
    }

    public func save(_ session: StoredSession, identifier: String) async throws {
        _ = try await write(session, identifier: identifier, condition: .none)
    }

    public func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        if let expectedRevision {
            guard let expected = Int64(exactly: expectedRevision) else {
                throw UserSessionError(
                    .revisionConflict, "\(Self.label(for: identifier)) cannot have revision \(expectedRevision)")
            }
            return try await write(session, identifier: identifier, condition: .revision(expected))
        }
        return try await write(session, identifier: identifier, condition: .absent)
    }

    public func remove(identifier: String) async throws {
        try StoredSessionRecord.validate(identifier: identifier)
        let namespace = self.namespace
        let channel = self.channel
        let key = ByteBuffer(bytes: Array(identifier.utf8))
        let payload = ChangePayload.removed(identifier)
        try await run("removing a session") { client, logger in
            try await client.query(
                """
                WITH removed AS (
                    DELETE FROM user_sessions_tokens WHERE namespace = \(namespace) AND identifier = \(key)
                    RETURNING revision)
                SELECT removed.revision FROM removed, pg_notify(\(channel), \(payload)) AS notified
                """, logger: logger
            ).drain()
        }
    }

    public func loadCurrentIdentifier() async throws -> String? {
        let namespace = self.namespace
        let stored = try await run("reading the current identifier", idempotent: true) { client, logger in
            let rows = try await client.query(
                "SELECT identifier FROM user_sessions_current WHERE namespace = \(namespace)", logger: logger)
            var found: [UInt8]?
            for try await (identifier) in rows.decode(ByteBuffer.self) { found = Array(identifier.readableBytesView) }
            return found
        }
        guard let stored else { return nil }
        return try Self.identifier(from: stored, what: "the current identifier")
    }

    public func saveCurrentIdentifier(_ identifier: String?) async throws {
        let namespace = self.namespace
        guard let identifier else {
            try await run("clearing the current identifier") { client, logger in
                try await client.query(
                    "DELETE FROM user_sessions_current WHERE namespace = \(namespace)", logger: logger
                ).drain()
            }
            return
        }
        try StoredSessionRecord.validate(identifier: identifier)
        let key = ByteBuffer(bytes: Array(identifier.utf8))
        try await run("saving the current identifier") { client, logger in
            try await client.query(
                """
                INSERT INTO user_sessions_current (namespace, identifier) VALUES (\(namespace), \(key))
                ON CONFLICT (namespace) DO UPDATE SET identifier = EXCLUDED.identifier
                """, logger: logger
            ).drain()
        }
    }

    public func storedIdentifiers() async throws -> [String] {
        let namespace = self.namespace
        let stored = try await run("listing the stored identifiers", idempotent: true) { client, logger in
            let rows = try await client.query(
                "SELECT identifier FROM user_sessions_tokens WHERE namespace = \(namespace) ORDER BY identifier",
                logger: logger)
            var found: [[UInt8]] = []
            for try await (identifier) in rows.decode(ByteBuffer.self) {
                found.append(Array(identifier.readableBytesView))
            }
            return found
        }
        return try stored.map { try Self.identifier(from: $0, what: "a stored identifier") }
    }

    // MARK: Support

    /// Runs `operation` after the schema is in place, within ``operationTimeout``, with errors mapped.
    ///
    /// A read (`idempotent`) that finds its pooled connection closed (the server ended it, and the pool had not
    /// noticed yet), or gets no answer within a third of ``operationTimeout`` (at most 3 seconds), runs again, up to
    /// 3 attempts within ``operationTimeout``; a write runs once, since it may have committed.
    @discardableResult
    func run<Value: Sendable>(
        _ what: String, idempotent: Bool = false,
        _ operation: @escaping @Sendable (PostgresClient, Logger) async throws -> Value
    ) async throws -> Value {
        try await schema.ensure(self)
        return try await runUnprepared(what, idempotent: idempotent, operation)
    }

    /// Runs `operation` within ``operationTimeout``, with errors mapped, without checking the schema.
    func runUnprepared<Value: Sendable>(
        _ what: String, idempotent: Bool = false,
        _ operation: @escaping @Sendable (PostgresClient, Logger) async throws -> Value
    ) async throws -> Value {
        let client = self.client
        let logger = self.logger
        let attemptTimeout = min(operationTimeout / 3, .seconds(3))
        do {
            guard idempotent else {
                return try await PostgresOperationDeadline.run(operationTimeout, what: what) {
                    try await operation(client, logger)
                }
            }
            // A pooled connection the server has just ended can be handed out before the pool notices, and a query
            // on it fails or never answers: a read runs again (at most 3 attempts, 10 ms then 50 ms apart).
            return try await PostgresOperationDeadline.run(operationTimeout, what: what) {
                var pauses: [Duration] = [.milliseconds(10), .milliseconds(50)]
                while true {
                    do {
                        return try await PostgresOperationDeadline.run(attemptTimeout, what: what) {
                            try await operation(client, logger)
                        }
                    } catch let error where !pauses.isEmpty && Self.isWorthAnotherAttempt(error) {
                        try await Task.sleep(for: pauses.removeFirst())
                    }
                }
            }
        } catch {
            throw PostgresStoreErrors.map(error, while: what)
        }
    }

    /// A closed connection, or an attempt that got no answer in time; not a refusal by the server.
    private static func isWorthAnotherAttempt(_ error: any Error) -> Bool {
        if PostgresStoreErrors.isClosedConnection(error) { return true }
        return (error as? UserSessionError)?.code == .storeFailure
    }

    static func identifier(from bytes: [UInt8], what: String) throws -> String {
        guard let identifier = String(validating: bytes, as: UTF8.self),
            (try? StoredSessionRecord.validate(identifier: identifier)) != nil
        else {
            throw UserSessionError(.storeCorrupt, "\(what) in PostgreSQL is not a valid identifier")
        }
        return identifier
    }

    /// How errors name the row of `identifier`: at most its first 64 characters.
    static func label(for identifier: String) -> String {
        let shown = identifier.count > 64 ? identifier.prefix(64) + "…" : Substring(identifier)
        return "the PostgreSQL row for \"\(shown)\""
    }
}

extension PostgresRowSequence {
    /// Reads and discards every row, so the query has run to its end.
    func drain() async throws {
        for try await _ in self {}
    }
}
#endif
