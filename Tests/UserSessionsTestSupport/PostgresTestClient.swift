#if PostgreSQL
import Foundation
import Logging
import PostgresNIO

/// A client for the PostgreSQL server the tests use: `USER_SESSIONS_POSTGRES_URL`
/// (`postgres://user@host:port/database`), which `Scripts/with-postgres.sh` sets for a throwaway cluster. Shared by
/// every test target with PostgreSQL tests.
package enum PostgresTestClient {
    /// The server's URL, or `nil` when `USER_SESSIONS_POSTGRES_URL` is not set.
    package static let url = ProcessInfo.processInfo.environment["USER_SESSIONS_POSTGRES_URL"].flatMap(
        URLComponents.init)

    /// The operation deadline the tests give a store whose subject is not the deadline (the stores' default is 10 s).
    /// Every suite runs at once on a 2-core machine, so one store operation (preparing the tables is nine round
    /// trips) can wait seconds for a thread; the tests of the deadline itself set their own.
    package static let operationTimeout: Duration = .seconds(60)

    /// Why a PostgreSQL test cannot run: `USER_SESSIONS_POSTGRES_URL` is not set.
    package struct NoServer: Error, CustomStringConvertible {
        package var description: String {
            "USER_SESSIONS_POSTGRES_URL is not set (run the tests through Scripts/with-postgres.sh)"
        }
    }

    /// A configuration for the server, with `search_path` set to `schema` when given.
    package static func configuration(schema: String? = nil) throws -> PostgresClient.Configuration {
        guard let url else { throw NoServer() }
        var configuration = PostgresClient.Configuration(
            host: url.host ?? "127.0.0.1", port: url.port ?? 5432, username: url.user ?? "postgres",
            password: url.password, database: String(url.path.dropFirst()), tls: .disable)
        if let schema { configuration.options.additionalStartupParameters = [("search_path", schema)] }
        return configuration
    }

    /// Runs `body` with a running client (whose connections use `schema` when given), stopped afterwards.
    package static func withClient<Value: Sendable>(
        schema: String? = nil, logger: Logger? = nil, _ body: (PostgresClient) async throws -> Value
    ) async throws -> Value {
        let client = PostgresClient(
            configuration: try configuration(schema: schema),
            backgroundLogger: logger ?? Logger(label: "tests", factory: { _ in SwiftLogNoOpLogHandler() }))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }
}
#endif
