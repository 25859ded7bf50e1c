#if OpenIDConnect && PostgreSQL
import Foundation
import Logging
import PostgresNIO
import UserSessions
import UserSessionsPostgres

/// An ``OpenIDConnectStateStore`` in PostgreSQL, shared by every instance of a fleet (with the PostgreSQL trait).
///
/// It runs its queries through a `PostgresClient` that the caller creates and runs, as the PostgreSQL token store
/// does, and creates its three tables on first use (`user_sessions_oidc_pending`, `user_sessions_oidc_sign_ins`,
/// `user_sessions_oidc_logout_tokens`, in the schema of the connection's `search_path`) under an advisory lock.
///
/// - A pending sign-in is taken with one `DELETE … RETURNING`: exactly one instance gets it.
/// - The bound on pending sign-ins is checked in the insert's statement; instances inserting at the same instant
///   may pass it by a few.
/// - Pending sign-ins and logout tokens are keyed by the SHA-256 of their `state` or `jti`; every value is a bound
///   parameter, never SQL text, and errors never hold one.
public final class PostgresOpenIDConnectStateStore: OpenIDConnectStateStore {
    /// The namespace every row of this store belongs to.
    public let namespace: String
    /// How long one operation may take before it fails with ``OpenIDConnectError/Code/storeFailure`` (transient),
    /// without waiting for PostgreSQL any longer.
    public let operationTimeout: Duration
    let client: PostgresClient
    private let logger = Logger(label: "UserSessionsOpenIDConnect", factory: { _ in SwiftLogNoOpLogHandler() })
    private let prepared = Locked(false)

    /// Creates a store over `client`, which the caller runs, for the sessions of `namespace` (1 to 40 characters
    /// among `a`–`z`, `0`–`9`, `_` and `-`).
    ///
    /// - Parameters:
    ///   - client: The client the queries run through.
    ///   - namespace: The namespace of this store's rows.
    ///   - operationTimeout: How long one operation may take, preparing the schema included (positive).
    ///     Default 10 seconds, as the PostgreSQL
    ///     token store's.
    /// - Throws: ``OpenIDConnectError/Code/invalidConfiguration`` for another namespace or timeout.
    public init(client: PostgresClient, namespace: String, operationTimeout: Duration = .seconds(10))
        throws(OpenIDConnectError)
    {
        guard StoreNamespace.isValid(namespace) else {
            throw OpenIDConnectError(
                .invalidConfiguration, "the namespace must be 1 to 40 characters among a-z, 0-9, _ and -",
                failureClass: .misconfiguration)
        }
        guard operationTimeout > .zero else {
            throw OpenIDConnectError(
                .invalidConfiguration, "the operation timeout must be positive", failureClass: .misconfiguration)
        }
        self.client = client
        self.namespace = namespace
        self.operationTimeout = operationTimeout
    }

    /// Creates the tables now instead of on first use.
    public func prepare() async throws {
        if prepared.withLock({ $0 }) { return }
        let logger = logger
        try await run("preparing the tables") { client in
            try await PostgresSchemaSetup.create(
                Self.schema, lockClass: 0x5553_4F49, client: client, logger: logger)
        }
        prepared.withLock { $0 = true }
    }

    private static let schema = [
        """
        CREATE TABLE IF NOT EXISTS user_sessions_oidc_pending (
            namespace text COLLATE "C" NOT NULL, state_hash bytea NOT NULL, record bytea NOT NULL,
            expires_at timestamptz NOT NULL, PRIMARY KEY (namespace, state_hash))
        """,
        """
        CREATE TABLE IF NOT EXISTS user_sessions_oidc_sign_ins (
            namespace text COLLATE "C" NOT NULL, issuer text COLLATE "C" NOT NULL, identifier bytea NOT NULL,
            subject text COLLATE "C" NOT NULL, sid text COLLATE "C", record bytea NOT NULL,
            PRIMARY KEY (namespace, issuer, identifier))
        """,
        """
        CREATE INDEX IF NOT EXISTS user_sessions_oidc_sign_ins_sid
            ON user_sessions_oidc_sign_ins (namespace, issuer, sid)
        """,
        """
        CREATE TABLE IF NOT EXISTS user_sessions_oidc_logout_tokens (
            namespace text COLLATE "C" NOT NULL, token_hash bytea NOT NULL, expires_at timestamptz NOT NULL,
            PRIMARY KEY (namespace, token_hash))
        """,
    ]

    /// Records `pending`; when `limit` unexpired ones are pending, the ones that expire first are dropped.
    public func insert(_ pending: PendingSignIn, limit: Int, now: Date) async throws {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let key = Self.hash(pending.state)
        let record = ByteBuffer(bytes: try StateStoreCoding.encoder.encode(pending))
        let (expiresAt, limit) = (pending.expiresAt, Int64(max(1, limit)))
        try await run("recording a pending sign-in") { client in
            // The newest `limit - 1` unexpired ones stay; the expired ones and the older unexpired ones go.
            let rows = try await client.query(
                """
                WITH purged AS (
                    DELETE FROM user_sessions_oidc_pending WHERE namespace = \(namespace) AND expires_at <= \(now)),
                dropped AS (
                    DELETE FROM user_sessions_oidc_pending WHERE namespace = \(namespace) AND state_hash IN (
                        SELECT state_hash FROM user_sessions_oidc_pending
                        WHERE namespace = \(namespace) AND expires_at > \(now)
                        ORDER BY expires_at DESC, state_hash DESC OFFSET \(limit - 1)))
                INSERT INTO user_sessions_oidc_pending (namespace, state_hash, record, expires_at)
                VALUES (\(namespace), \(key), \(record), \(expiresAt))
                """, logger: logger)
            for try await _ in rows {}
        }
    }

    /// Removes and returns the unexpired pending sign-in named `state`; exactly one instance gets it.
    public func take(state: String, now: Date) async throws -> PendingSignIn? {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let key = Self.hash(state)
        let bytes = try await run("taking a pending sign-in") { client -> [UInt8]? in
            let rows = try await client.query(
                """
                DELETE FROM user_sessions_oidc_pending WHERE namespace = \(namespace) AND state_hash = \(key)
                RETURNING record
                """, logger: logger)
            var found: [UInt8]?
            for try await record in rows.decode(ByteBuffer.self) { found = Array(record.readableBytesView) }
            return found
        }
        guard let bytes else { return nil }
        let pending = try StateStoreCoding.decoder.decode(PendingSignIn.self, from: Data(bytes))
        return pending.isExpired(at: now) || pending.state != state ? nil : pending
    }

    /// Records a completed sign-in.
    public func record(_ signIn: OpenIDSignInRecord) async throws {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let identifier = ByteBuffer(bytes: Array(signIn.identifier.utf8))
        let record = ByteBuffer(bytes: try StateStoreCoding.encoder.encode(signIn))
        let (issuer, subject, sid) = (signIn.issuer, signIn.subject, signIn.sessionID)
        try await run("recording a sign-in") { client in
            let rows = try await client.query(
                """
                INSERT INTO user_sessions_oidc_sign_ins (namespace, issuer, identifier, subject, sid, record)
                VALUES (\(namespace), \(issuer), \(identifier), \(subject), \(sid), \(record))
                ON CONFLICT (namespace, issuer, identifier)
                DO UPDATE SET subject = EXCLUDED.subject, sid = EXCLUDED.sid, record = EXCLUDED.record
                """, logger: logger)
            for try await _ in rows {}
        }
    }

    /// The records a logout concerns.
    public func records(issuer: String, subject: String?, sessionID: String?) async throws -> [OpenIDSignInRecord] {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let rows = try await run("reading sign-ins") { client -> [[UInt8]] in
            let rows = try await client.query(
                """
                SELECT record FROM user_sessions_oidc_sign_ins
                WHERE namespace = \(namespace) AND issuer = \(issuer)
                  AND (\(sessionID)::text IS NULL OR sid = \(sessionID))
                  AND (\(subject)::text IS NULL OR subject = \(subject))
                """, logger: logger)
            var found: [[UInt8]] = []
            for try await record in rows.decode(ByteBuffer.self) { found.append(Array(record.readableBytesView)) }
            return found
        }
        return try rows.map { try StateStoreCoding.decoder.decode(OpenIDSignInRecord.self, from: Data($0)) }
            .filter { $0.matches(issuer: issuer, subject: subject, sessionID: sessionID) }
    }

    /// Forgets `identifier`'s record at `issuer`.
    public func forget(identifier: String, issuer: String) async throws {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let key = ByteBuffer(bytes: Array(identifier.utf8))
        try await run("forgetting a sign-in") { client in
            let rows = try await client.query(
                """
                DELETE FROM user_sessions_oidc_sign_ins
                WHERE namespace = \(namespace) AND issuer = \(issuer) AND identifier = \(key)
                """, logger: logger)
            for try await _ in rows {}
        }
    }

    /// Remembers a logout token id; `false` when an unexpired record of it exists (a replay).
    public func remember(logoutTokenID tokenID: String, issuer: String, until expiresAt: Date, now: Date) async throws
        -> Bool
    {
        try await prepare()
        let (namespace, logger) = (self.namespace, self.logger)
        let key = Self.hash(issuer + "\u{0}" + tokenID)
        return try await run("remembering a logout token") { client in
            let rows = try await client.query(
                """
                WITH purged AS (
                    DELETE FROM user_sessions_oidc_logout_tokens
                    WHERE namespace = \(namespace) AND expires_at <= \(now) AND token_hash <> \(key))
                INSERT INTO user_sessions_oidc_logout_tokens AS seen (namespace, token_hash, expires_at)
                VALUES (\(namespace), \(key), \(expiresAt))
                ON CONFLICT (namespace, token_hash) DO UPDATE SET expires_at = EXCLUDED.expires_at
                WHERE seen.expires_at <= \(now)
                RETURNING 1
                """, logger: logger)
            var count = 0
            for try await _ in rows { count += 1 }
            return count == 1
        }
    }

    /// Runs `body` against ``operationTimeout`` (the PostgreSQL stores' one deadline) and maps what PostgresNIO
    /// throws (their one mapping) to ``OpenIDConnectError/Code/storeFailure``.
    private func run<Value: Sendable>(
        _ operation: String, _ body: @escaping @Sendable (PostgresClient) async throws -> Value
    ) async throws -> Value {
        let (client, timeout) = (client, operationTimeout)
        do {
            return try await PostgresOperationDeadline.run(
                timeout,
                timedOut: {
                    OpenIDConnectError(
                        .storeFailure, PostgresOperationDeadline.message(timeout, operation), failureClass: .transient)
                }
            ) { try await body(client) }
        } catch let error as OpenIDConnectError {
            throw error
        } catch {
            switch PostgresStoreErrors.classify(error, while: operation) {
            case .cancelled: throw CancellationError()
            case .failure(let message), .corrupt(let message):
                throw OpenIDConnectError(.storeFailure, message, failureClass: .transient)
            }
        }
    }

    private static func hash(_ key: String) -> ByteBuffer {
        ByteBuffer(bytes: StateStoreCoding.hash(key))
    }
}
#endif
