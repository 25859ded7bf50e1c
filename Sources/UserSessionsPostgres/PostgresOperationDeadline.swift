#if PostgreSQL
import PostgresNIO
import Synchronization
import UserSessions

/// Runs one store operation against a deadline without ever waiting for an operation that ignores cancellation.
///
/// A task group would wait for its child even after the deadline, and a `PostgresClient` waiting for a connection
/// to a server that is down may never return. So the operation runs in its own task; the deadline or the caller's
/// cancellation resumes the caller at once and cancels the operation's task, which ends on its own time.
enum PostgresOperationDeadline {
    static func run<Value: Sendable>(
        _ timeout: Duration, what: String, _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let race = OperationRace<Value>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation)
                let work = Task {
                    do {
                        race.finish(.success(try await operation()))
                    } catch {
                        race.finish(.failure(error))
                    }
                }
                let timer = Task {
                    try? await Task.sleep(for: timeout)
                    race.finish(
                        .failure(
                            UserSessionError(
                                .storeFailure, "PostgreSQL did not answer within \(timeout) while \(what)")))
                }
                race.attach(work: work, timer: timer)
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }
}

/// The one-shot race between an operation, its deadline and the caller's cancellation: whichever comes first resumes
/// the caller and cancels the other tasks.
private final class OperationRace<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var tasks: [Task<Void, Never>] = []
        var outcome: Result<Value, any Error>?
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = state.withLock { state -> Result<Value, any Error>? in
            if let outcome = state.outcome { return outcome }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    func attach(work: Task<Void, Never>, timer: Task<Void, Never>) {
        let cancelNow = state.withLock { state -> Bool in
            if state.outcome != nil { return true }
            state.tasks = [work, timer]
            return false
        }
        if cancelNow {
            work.cancel()
            timer.cancel()
        }
    }

    func finish(_ outcome: Result<Value, any Error>) {
        let (continuation, tasks) = state.withLock {
            state -> (CheckedContinuation<Value, any Error>?, [Task<Void, Never>]) in
            guard state.outcome == nil else { return (nil, []) }
            state.outcome = outcome
            defer {
                state.continuation = nil
                state.tasks = []
            }
            return (state.continuation, state.tasks)
        }
        for task in tasks { task.cancel() }
        continuation?.resume(with: outcome)
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
