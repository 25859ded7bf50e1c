import Foundation
import Synchronization
import UserSessions

#if PostgreSQL
import Logging
import PostgresNIO
import UserSessionsPostgres
#endif

/// The shared token store of the fleet workload, named on a node's command line as `file:DIRECTORY` or
/// `postgres:NAMESPACE` (the server is `USER_SESSIONS_POSTGRES_URL`, inherited from the parent).
enum FleetStore {
    /// The store kinds this build can run, with the reason a kind is left out.
    static var kinds: [(kind: String, skipped: String?)] {
        [("file", nil), ("postgres", postgresUnavailable)]
    }

    /// Why the postgres rows cannot run here, or `nil` when they can.
    static var postgresUnavailable: String? {
        #if PostgreSQL
        return postgresURL == nil
            ? "USER_SESSIONS_POSTGRES_URL is not set (run under Scripts/with-postgres.sh)" : nil
        #else
        return "built without the PostgreSQL trait (swift run -c release --traits PostgreSQL …)"
        #endif
    }

    static let postgresURL = ProcessInfo.processInfo.environment["USER_SESSIONS_POSTGRES_URL"].flatMap(
        URLComponents.init)

    /// Runs `body` with the store `specification` names, opened for the length of the call.
    static func with<Value: Sendable>(
        _ specification: String, _ body: (any CoordinatedTokenStore) async throws -> Value
    ) async throws -> Value {
        guard let colon = specification.firstIndex(of: ":") else {
            throw BenchmarkError("a fleet store is KIND:ARGUMENT, not '\(specification)'")
        }
        let kind = specification[..<colon]
        let argument = String(specification[specification.index(after: colon)...])
        switch kind {
        case "file":
            return try await body(FileTokenStore(directory: URL(fileURLWithPath: argument, isDirectory: true)))
        case "postgres":
            #if PostgreSQL
            return try await withPostgres(namespace: argument, body)
            #else
            throw BenchmarkError("this build has no PostgreSQL trait")
            #endif
        default:
            throw BenchmarkError("unknown fleet store kind '\(kind)'")
        }
    }

    #if PostgreSQL
    /// A client of the server `USER_SESSIONS_POSTGRES_URL` names (not running yet), logging nothing.
    static func postgresClient(maximumConnections: Int) throws -> PostgresClient {
        guard let url = postgresURL else { throw BenchmarkError("USER_SESSIONS_POSTGRES_URL is not set") }
        var configuration = PostgresClient.Configuration(
            host: url.host ?? "127.0.0.1", port: url.port ?? 5432, username: url.user ?? "postgres",
            password: url.password, database: String(url.path.dropFirst()), tls: .disable)
        configuration.options.maximumConnections = maximumConnections
        return PostgresClient(
            configuration: configuration,
            backgroundLogger: Logger(label: "benchmark", factory: { _ in SwiftLogNoOpLogHandler() }))
    }

    static func withPostgres<Value: Sendable>(
        namespace: String, _ body: (any CoordinatedTokenStore) async throws -> Value
    ) async throws -> Value {
        // One lease connection per identifier refreshing at once, one listener, and the reads around them.
        let client = try postgresClient(maximumConnections: 8)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let store = try PostgresTokenStore(client: client, namespace: namespace)
            try await store.prepare()
            return try await body(store)
        }
    }
    #endif
}

/// A ``CoordinatedTokenStore`` that forwards to another and counts every call made through it (the change feed
/// excepted: a controller subscribes to it once, when it opens).
final class CallCountingStore: CoordinatedTokenStore {
    private let inner: any CoordinatedTokenStore
    private let names = Mutex<[String]>([])

    init(_ inner: any CoordinatedTokenStore) {
        self.inner = inner
    }

    /// Calls so far.
    var calls: Int { names.withLock { $0.count } }

    /// The methods called after the first `first` calls, in order.
    func called(after first: Int) -> [String] { names.withLock { Array($0.dropFirst(first)) } }

    private func counted(_ name: String = #function) { names.withLock { $0.append(name) } }

    func load(identifier: String) async throws -> StoredSession? {
        counted()
        return try await inner.load(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String) async throws {
        counted()
        try await inner.save(session, identifier: identifier)
    }

    func remove(identifier: String) async throws {
        counted()
        try await inner.remove(identifier: identifier)
    }

    func loadCurrentIdentifier() async throws -> String? {
        counted()
        return try await inner.loadCurrentIdentifier()
    }

    func saveCurrentIdentifier(_ identifier: String?) async throws {
        counted()
        try await inner.saveCurrentIdentifier(identifier)
    }

    func storedIdentifiers() async throws -> [String] {
        counted()
        return try await inner.storedIdentifiers()
    }

    func loadRevised(identifier: String) async throws -> RevisedSession? {
        counted()
        return try await inner.loadRevised(identifier: identifier)
    }

    func save(_ session: StoredSession, identifier: String, expectedRevision: UInt64?) async throws -> UInt64 {
        counted()
        return try await inner.save(session, identifier: identifier, expectedRevision: expectedRevision)
    }

    func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        counted()
        return try await inner.withRefreshLease(identifier: identifier, body)
    }

    func changes() -> AsyncStream<TokenStoreChange> { inner.changes() }
}
