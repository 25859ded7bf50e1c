import Dispatch

/// Runs blocking file-system work on a dispatch queue, never on an actor's executor or the cooperative pool: a slow
/// disk then holds up a queue thread, not every task of the process.
package enum BlockingIO {
    /// The queue shared by the package's file work that has no queue of its own.
    package static let sharedQueue = DispatchQueue(label: "UserSessions.BlockingIO", attributes: .concurrent)

    /// Runs `work` on `queue` and returns its result. Work that has started runs to completion even when the
    /// calling task is cancelled.
    package static func run<Value: Sendable>(
        on queue: DispatchQueue = sharedQueue, _ work: @escaping @Sendable () throws -> Value
    ) async throws -> Value {
        try await Parked.wait { (caller: Parked<Value, any Error>) -> Result<Value, any Error>? in
            queue.async { caller.resume(with: Result { try work() }) }
            return nil
        }
    }
}
