#if PostgreSQL
import PostgresNIO
import UserSessions

/// Runs one store operation against a deadline without ever waiting for an operation that ignores cancellation
/// (`Deadline.abandon(after:clock:timedOut:_:)`).
///
/// A task group would wait for its child even after the deadline, and a `PostgresClient` waiting for a connection
/// to a server that is down may never return. So the operation runs in its own task; the deadline or the caller's
/// cancellation resumes the caller at once and cancels the operation's task, which ends on its own time.
///
/// The one deadline of every PostgreSQL store of the package: the token store, the OpenID Connect state store and
/// the web-session store, each with its own typed error.
package enum PostgresOperationDeadline {
    /// Runs `operation`; after `timeout` the caller gets ``UserSessions/UserSessionError/Code/storeFailure``.
    package static func run<Value: Sendable>(
        _ timeout: Duration, what: String, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await run(timeout, timedOut: { UserSessionError(.storeFailure, message(timeout, what)) }, operation)
    }

    /// Runs `operation`; after `timeout` the caller gets the error `timedOut` makes.
    package static func run<Value: Sendable>(
        _ timeout: Duration, timedOut: @escaping @Sendable () -> any Error,
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await Deadline.abandon(after: timeout, timedOut: timedOut, operation)
    }

    /// What a timed-out operation's error says.
    package static func message(_ timeout: Duration, _ what: String) -> String {
        "PostgreSQL did not answer within \(timeout) while \(what)"
    }
}

/// Turns what PostgresNIO throws into the package's typed errors.
///
/// The message names the operation, PostgresNIO's error code and the server's SQLSTATE, never the query, its bound
/// values or the server's message (which may quote a value), and the PostgresNIO error is not kept as `underlying`:
/// it holds the query with its bindings, and those carry the credentials. The one mapping of every PostgreSQL store
/// of the package: ``classify(_:while:)`` says what happened, and each store makes its own typed error of it.
package enum PostgresStoreErrors {
    /// What a PostgresNIO error means for a store.
    package enum Failure: Sendable, Equatable {
        /// The query was cancelled (the caller's task was).
        case cancelled
        /// The server refused or could not be reached; the message names the operation and the codes.
        case failure(String)
        /// A row has an unexpected type.
        case corrupt(String)
    }

    /// What `error`, thrown while `what`, means; the message holds no query, value or server message.
    package static func classify(_ error: any Error, while what: String) -> Failure {
        if error is CancellationError { return .cancelled }
        if let error = error as? PSQLError {
            if error.code == .queryCancelled { return .cancelled }
            var detail = "PostgresNIO \(error.code)"
            if let state = error.serverInfo?[.sqlState] { detail += ", SQLSTATE \(state)" }
            return .failure("PostgreSQL failed while \(what) (\(detail))")
        }
        if let error = error as? PostgresDecodingError {
            return .corrupt("a row read while \(what) has an unexpected type (\(error.code))")
        }
        return .failure("PostgreSQL failed while \(what) (\(type(of: error)))")
    }

    /// `error` as the token store's ``UserSessions/UserSessionError`` (a cancellation stays one).
    static func map(_ error: any Error, while what: String) -> any Error {
        if error is UserSessionError { return error }
        switch classify(error, while: what) {
        case .cancelled: return CancellationError()
        case .failure(let message): return UserSessionError(.storeFailure, message)
        case .corrupt(let message): return UserSessionError(.storeCorrupt, message)
        }
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
