#if PostgreSQL
import PostgresNIO
import UserSessions

/// Runs one store operation against a deadline without ever waiting for an operation that ignores cancellation
/// (`Deadline.abandon(after:clock:timedOut:_:)`).
///
/// A task group would wait for its child even after the deadline, and a `PostgresClient` waiting for a connection
/// to a server that is down may never return. So the operation runs in its own task; the deadline or the caller's
/// cancellation resumes the caller at once and cancels the operation's task, which ends on its own time.
enum PostgresOperationDeadline {
    static func run<Value: Sendable>(
        _ timeout: Duration, what: String, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await Deadline.abandon(
            after: timeout,
            timedOut: { UserSessionError(.storeFailure, "PostgreSQL did not answer within \(timeout) while \(what)") },
            operation)
    }
}

/// Turns what PostgresNIO throws into the package's typed errors.
///
/// The message names the operation, PostgresNIO's error code and the server's SQLSTATE, never the query, its bound
/// values or the server's message (which may quote a value), and the PostgresNIO error is not kept as `underlying`:
/// it holds the query with its bindings, and those carry the credentials.
enum PostgresStoreErrors {
    static func map(_ error: any Error, while what: String) -> any Error {
        if error is UserSessionError || error is CancellationError { return error }
        if let error = error as? PSQLError {
            if error.code == .queryCancelled { return CancellationError() }
            var detail = "PostgresNIO \(error.code)"
            if let state = error.serverInfo?[.sqlState] { detail += ", SQLSTATE \(state)" }
            return UserSessionError(.storeFailure, "PostgreSQL failed while \(what) (\(detail))")
        }
        if let error = error as? PostgresDecodingError {
            return UserSessionError(.storeCorrupt, "a row read while \(what) has an unexpected type (\(error.code))")
        }
        return UserSessionError(.storeFailure, "PostgreSQL failed while \(what) (\(type(of: error)))")
    }

    /// Whether `error` says the connection was closed (by the server, the network, or the pool) rather than that
    /// the server refused the query.
    static func isClosedConnection(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        if error.code == .serverClosedConnection || error.code == .clientClosedConnection
            || error.code == .connectionError || error.code == .uncleanShutdown
        {
            return true
        }
        // 57P01 admin_shutdown: "terminating connection due to administrator command".
        return error.serverInfo?[.sqlState] == "57P01"
    }

    /// The SQLSTATE of a server error, if `error` is one.
    static func sqlState(of error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }
}
#endif
