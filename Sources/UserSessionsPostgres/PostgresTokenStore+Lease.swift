#if PostgreSQL
import PostgresNIO
import Synchronization
import UserSessions

extension PostgresTokenStore {
    /// Runs `body` while this process holds the fleet-wide refresh lease of `identifier`.
    ///
    /// The lease is a **transaction-level advisory lock** (`pg_advisory_xact_lock`) taken in a transaction held open
    /// on a connection of the client's pool for as long as `body` runs, with the transaction's
    /// `idle_in_transaction_session_timeout` set to ``leaseDeadline``. Why a lock on a connection rather than a lease
    /// row with a deadline:
    /// - a holder that dies (SIGKILL, crash) or whose connection breaks loses the lease the moment PostgreSQL sees
    ///   the connection end, instead of blocking the others until a row's deadline passes;
    /// - a holder that hangs with its connection open (a stopped process, a partition that keeps the socket up)
    ///   holds the lease at most ``leaseDeadline``: PostgreSQL then ends that session itself, which releases the lock.
    ///   Time is measured by the server alone, so clock differences between instances do not matter;
    /// - waiters queue in PostgreSQL's lock manager and are woken in order, with no polling;
    /// - the lock never outlives its transaction, so a pooled connection goes back to the pool clean.
    /// The lease only orders refreshes; what protects the row is the conditional write: a holder that lost its lease
    /// (deadline passed) and saves afterwards gets ``UserSessions/UserSessionError/Code/revisionConflict`` when
    /// another holder has written since.
    ///
    /// The lock key is a 64-bit hash of the namespace and the identifier's bytes; two identifiers whose hashes meet
    /// only share a lease (their refreshes are serialized), nothing else.
    ///
    /// Waiting ends with ``UserSessions/UserSessionError/Code/storeFailure`` after ``leaseDeadline`` +
    /// ``operationTimeout`` without the lease, and with `CancellationError` when the calling task is cancelled (the
    /// waiting query is cancelled on the server). Errors thrown by `body` are rethrown unchanged. When the lease was
    /// lost while `body` ran, `body`'s result is still returned: the lease was released by the server already.
    public func withRefreshLease<Result: Sendable>(
        identifier: String, _ body: @Sendable () async throws -> Result
    ) async throws -> Result {
        try StoredSessionRecord.validate(identifier: identifier)
        try await schema.ensure(self)
        let key = Self.leaseKey(namespace: namespace, identifier: identifier)
        let client = self.client
        let logger = self.logger
        let holdMilliseconds = Self.milliseconds(leaseDeadline)
        let waitLimit = leaseDeadline + operationTimeout
        let releaseTimeout = operationTimeout
        let progress = LeaseProgress()
        do {
            return try await withoutActuallyEscaping(body) { body in
                try await withThrowingTaskGroup(of: LeaseOutcome<Result>.self) { group in
                    group.addTask {
                        try await client.withConnection { connection in
                            try await Self.acquireLease(
                                key, holdMilliseconds: holdMilliseconds,
                                waitMilliseconds: Self.milliseconds(waitLimit),
                                on: connection, client: client, logger: logger)
                            progress.acquired.store(true, ordering: .sequentiallyConsistent)
                            let result: Result
                            do {
                                result = try await body()
                            } catch {
                                await Self.releaseLease(on: connection, timeout: releaseTimeout, logger: logger)
                                throw LeaseBodyError(error: error)
                            }
                            await Self.releaseLease(on: connection, timeout: releaseTimeout, logger: logger)
                            return .finished(result)
                        }
                    }
                    group.addTask {
                        try await Task.sleep(for: waitLimit + .seconds(1))
                        if progress.acquired.load(ordering: .sequentiallyConsistent) { return .watchdogIdle }
                        throw UserSessionError(
                            .storeFailure, "waited longer than \(waitLimit) for the refresh lease in PostgreSQL")
                    }
                    defer { group.cancelAll() }
                    while let outcome = try await group.next() {
                        if case .finished(let result) = outcome { return result }
                    }
                    throw CancellationError()
                }
            }
        } catch let error as LeaseBodyError {
            throw error.error
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw PostgresStoreErrors.map(error, while: "waiting for the refresh lease")
        }
    }

    private static func acquireLease(
        _ key: Int64, holdMilliseconds: Int, waitMilliseconds: Int,
        on connection: PostgresConnection, client: PostgresClient, logger: Logger
    ) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            let hold = String(holdMilliseconds)
            let wait = String(waitMilliseconds)
            var pid: Int32 = 0
            for try await (backend, _, _) in try await connection.query(
                """
                SELECT pg_backend_pid(), set_config('idle_in_transaction_session_timeout', \(hold), true),
                    set_config('lock_timeout', \(wait), true)
                """, logger: logger
            ).decode((Int32, String, String).self) {
                pid = backend
            }
            try Task.checkCancellation()
            let backend = pid
            try await withTaskCancellationHandler {
                try await connection.query("SELECT pg_advisory_xact_lock(\(key))", logger: logger).drain()
            } onCancel: {
                // The waiting query does not end with the task; cancel it on the server from another connection.
                Task { _ = try? await client.query("SELECT pg_cancel_backend(\(backend))") }
            }
            try Task.checkCancellation()
        } catch {
            if !connection.isClosed { _ = try? await connection.query("ROLLBACK", logger: logger) }
            if Task.isCancelled { throw CancellationError() }
            if PostgresStoreErrors.sqlState(of: error) == "55P03" {
                throw UserSessionError(
                    .storeFailure, "waited longer than \(waitMilliseconds) ms for the refresh lease in PostgreSQL")
            }
            throw error
        }
    }

    /// Ends the lease's transaction. A failure means the connection is gone, and the lease with it.
    ///
    /// A connection the server ended (the deadline passed, or it was killed) may not have noticed yet, and a query
    /// on it may never answer: when `ROLLBACK` takes longer than `timeout`, the connection is closed, which ends the
    /// query and leaves the pool to replace the connection.
    private static func releaseLease(on connection: PostgresConnection, timeout: Duration, logger: Logger) async {
        guard !connection.isClosed else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = try? await connection.query("ROLLBACK", logger: logger) }
            group.addTask {
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                try? await connection.close()
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// The advisory lock key of `identifier`'s lease: FNV-1a over a tag, the namespace and the identifier's bytes.
    package static func leaseKey(namespace: String, identifier: String) -> Int64 {
        var hash = StableHash64("user-sessions.lease")
        hash.combine(0)
        hash.combine(namespace)
        hash.combine(0)
        hash.combine(identifier)
        return Int64(bitPattern: hash.value)
    }

    static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}

/// Whether the lease was acquired, for the watchdog that bounds the wait.
private final class LeaseProgress: Sendable {
    let acquired = Atomic(false)
}

private enum LeaseOutcome<Result: Sendable>: Sendable {
    case finished(Result)
    case watchdogIdle
}

/// Carries an error of the caller's body through the store's error mapping unchanged.
private struct LeaseBodyError: Error {
    var error: any Error
}
#endif
