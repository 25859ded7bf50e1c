#if PostgreSQL
import Foundation
import Logging
import PostgresNIO
import UserSessions
import UserSessionsPostgres

#if Sealing
import UserSessionsSealing
#endif

extension StoreSelection {
    /// `postgres:URL[#namespace]`: a ``PostgresTokenStore`` over a client of this process's own, as one instance of
    /// a fleet would have. The URL is `postgres://user[:password]@host[:port]/database`; the namespace defaults to
    /// `fleet`. The client runs in a task for as long as `body` does and is shut down afterwards.
    static func withPostgresStore<Value: Sendable>(
        _ argument: String, _ body: (any TokenStore) async throws -> Value
    ) async throws -> Value {
        var urlText = argument
        var namespace = "fleet"
        if let hash = argument.lastIndex(of: "#") {
            urlText = String(argument[..<hash])
            namespace = String(argument[argument.index(after: hash)...])
        }
        guard let url = URLComponents(string: urlText), url.scheme == "postgres" || url.scheme == "postgresql",
            let host = url.host, !host.isEmpty
        else {
            throw Unknown(description: "--store postgres: wants postgres://user@host:port/database[#namespace]")
        }
        let configuration = PostgresClient.Configuration(
            host: host, port: url.port ?? 5432, username: url.user ?? "postgres", password: url.password,
            database: String(url.path.dropFirst()), tls: .disable)
        let client = PostgresClient(
            configuration: configuration,
            backgroundLogger: Logger(label: "fleet-node", factory: { _ in SwiftLogNoOpLogHandler() }))
        // A generous deadline: the tests start several nodes at once on a loaded 2-core machine.
        let store = try PostgresTokenStore(client: client, namespace: namespace, operationTimeout: .seconds(60))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await store.prepare()
            return try await body(store)
        }
    }

    static func waitUntilPostgresListening(_ store: any TokenStore) async throws {
        if let store = store as? PostgresTokenStore { try await store.listening() }
        #if Sealing
        if let store = store as? SealedTokenStore<PostgresTokenStore> { try await store.base.listening() }
        #endif
    }
}
#endif
